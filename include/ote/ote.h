/*
 * OrbitTE public API.
 *
 * One header, versioned. Every struct that callers fill is
 * zero-initialisable: a zero field means "the default". Every public
 * function may be called from any thread.
 */
#ifndef OTE_OTE_H
#define OTE_OTE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OTE_VERSION_MAJOR 0
#define OTE_VERSION_MINOR 1
#define OTE_VERSION_PATCH 0
#define OTE_VERSION_STRING "0.1.0"

/* Largest notification payload in bytes. */
#define OTE_NOTIFY_MAX 4096

/* ------------------------------------------------------------------ */
/* Status                                                             */
/* ------------------------------------------------------------------ */

/*
 * A peer's failures, as transfers see them, whatever the timing:
 * - OTE_ERR_UNREACHABLE says only that no configured transport can reach
 *   both memories (OTE_TLS leaves out every transport that could, a memory
 *   type no transport of either side touches, no device OTE_NET_DEVICES
 *   names exists): a configuration to change, not a peer to give up on. A
 *   segment that opened never fails a request UNREACHABLE because its peer
 *   died or a link went down, and a link down never fails an open so.
 * - A peer that stopped answering (killed, crashed, its host or link gone,
 *   while busy or idle) ends tasks with OTE_ERR_REMOTE_DISCONNECT (its
 *   connections were reset or refused) or OTE_ERR_TIMEOUT (no answer within
 *   OTE_XFER_TIMEOUT_MS or OTE_CONNECT_TIMEOUT_MS), tasks in flight and
 *   tasks submitted afterwards alike.
 * - A link that is down (this host's port or interface down or without
 *   carrier, or the peer's end of it gone) passes: tasks submitted while
 *   every rail of the segment waits for its port end at once with
 *   OTE_ERR_REMOTE_DISCONNECT (their rails are probed again once a port is
 *   up; submit again then), tasks in flight as above. ote_segment_open()
 *   while every link that would reach the peer is down waits up to
 *   OTE_CONNECT_TIMEOUT_MS for one to come up, then fails OTE_ERR_TIMEOUT.
 * - OTE_ERR_PEER_RESTARTED once the engine has seen a new instance behind
 *   the segment's name (ote_segment_reopen() binds the segment to it).
 */
typedef enum {
    OTE_OK                    =   0,
    OTE_INPROGRESS            =   1,
    OTE_ERR_INVALID_PARAM     =  -1,
    OTE_ERR_NO_MEMORY         =  -2,
    OTE_ERR_NOT_REGISTERED    =  -3,  /* address not inside a registered region */
    OTE_ERR_OUT_OF_BOUNDS     =  -4,  /* range crosses the end of a region      */
    OTE_ERR_ACCESS            =  -5,  /* region lacks the needed access flag    */
    OTE_ERR_UNREACHABLE       =  -6,  /* no transport reaches both memories     */
    OTE_ERR_NOT_FOUND         =  -7,  /* no such segment / peer                 */
    OTE_ERR_TIMEOUT           =  -8,
    OTE_ERR_CANCELED          =  -9,
    OTE_ERR_REMOTE_DISCONNECT = -10,
    OTE_ERR_BUSY              = -11,  /* batch full, admission limit, peer backlog */
    OTE_ERR_IO                = -12,
    OTE_ERR_UNSUPPORTED       = -13,
    OTE_ERR_PROTOCOL          = -14,  /* malformed or incompatible peer message */
    OTE_ERR_AUTH              = -15,
    OTE_ERR_EXISTS            = -16,
    OTE_ERR_PEER_RESTARTED    = -17,  /* the peer instance this segment was     */
                                      /* opened on is gone; see                 */
                                      /* ote_segment_reopen()                   */
    OTE_ERR_NO_DEVICE         = -18,  /* OTE_TLS / OTE_NET_DEVICES name a       */
                                      /* transport or device that is not here   */
    OTE_ERR_STORE_UNAVAILABLE = -19,  /* the metadata store (etcd, Redis) did   */
                                      /* not answer within                      */
                                      /* OTE_METADATA_TIMEOUT_MS                */
    OTE_ERR_REMOTE_NOT_REGISTERED = -20, /* the remote address is in no     */
                                         /* region the peer registered, even */
                                         /* after its descriptor was read    */
                                         /* again (ote_batch_submit())       */
} ote_status_t;

/* A static, human-readable message for every status code. */
const char *ote_status_string(ote_status_t status);

/* Library version as "MAJOR.MINOR.PATCH". */
const char *ote_version(void);

/* ------------------------------------------------------------------ */
/* Engine                                                             */
/* ------------------------------------------------------------------ */

typedef struct ote_engine *ote_engine_h;

typedef struct {
    const char *name;        /* segment name peers open; default OTE_ENGINE_NAME, */
                             /* else "host:port" of the control listener          */
    const char *listen_addr; /* control-plane bind, default "0.0.0.0:0"       */
    const char *metadata;    /* where peers find each other's descriptors;     */
                             /* default OTE_METADATA: "p2p" (no server),       */
                             /* "etcd://h:p[,h:p...]", "redis://h:p" or        */
                             /* "redis://:password@h:p/db" (docs/metadata.md)  */
} ote_engine_params_t;

/*
 * Names. With the p2p metadata a peer finds an engine by the host:port of
 * its control listener, so params.name, when set, must be host:port with a
 * host that resolves and the listener's port (e.g. "prefill-3.cluster:40123"
 * with listen_addr "0.0.0.0:40123"); any other name is refused at
 * ote_engine_create() with OTE_ERR_INVALID_PARAM and a log line saying why.
 *
 * With a metadata store (etcd:// or redis://) the name is any string of 1 to
 * 255 printable characters without spaces ("decode-0"): the engine puts its
 * descriptor under OTE_METADATA_PREFIX + name with a lease (etcd) or a TTL
 * (Redis) of OTE_METADATA_TTL_S seconds that a thread of the engine keeps
 * alive, and puts it again when the store lost it. A name another live
 * engine holds fails ote_engine_create() with OTE_ERR_EXISTS. A name whose
 * holder provably no longer serves it (its control address refuses, does
 * not answer within OTE_METADATA_PROBE_MS, or another engine answers
 * there) is taken over at once, in one compare-and-swap on the record
 * read: a killed engine restarted under its name does not wait for its old
 * key to expire, and the old instance's peers see OTE_ERR_PEER_RESTARTED
 * (docs/metadata.md). A store that
 * does not answer fails it with OTE_ERR_STORE_UNAVAILABLE, a wrong Redis
 * password with OTE_ERR_AUTH, a malformed URI with OTE_ERR_INVALID_PARAM,
 * and a scheme this build has no client for with OTE_ERR_UNSUPPORTED.
 * ote_engine_destroy() deletes the key. With OTE_AUTH_KEY the descriptor in
 * the store carries an HMAC under the key, checked before use.
 */

/*
 * Create an engine: reads the OTE_* configuration, opens the selected
 * transports, starts the worker threads and the control-plane listener.
 * params may be NULL (all defaults). Blocks for at most the time needed to
 * bind sockets and start threads. A listen_addr the control listener cannot
 * bind (the port is in use, or not permitted) fails it with OTE_ERR_IO and
 * a log line naming the address.
 */
ote_status_t ote_engine_create(const ote_engine_params_t *params, ote_engine_h *engine_p);

/*
 * Destroy an engine. Tasks still in flight end CANCELED; batches and
 * segments still open are released. Blocks until the worker threads stop.
 */
void ote_engine_destroy(ote_engine_h engine);

/* The segment name peers pass to ote_segment_open(), e.g. "127.0.0.1:41231". */
const char *ote_engine_name(ote_engine_h engine);

/*
 * This engine's current descriptor as bytes, in the signed form it
 * publishes (a metadata store's record): its name, instance, control
 * address, transports and registered regions, followed by an
 * HMAC-SHA256 under OTE_AUTH_KEY over its name and those bytes (no MAC
 * without a key). A peer opens this engine from them with
 * ote_segment_open_desc() without asking it first. *buf_p is allocated
 * with malloc(); the caller frees it with free(). It is a snapshot:
 * regions registered later are not in it.
 */
ote_status_t ote_engine_desc_export(ote_engine_h engine, void **buf_p, size_t *len_p);

/*
 * A file descriptor that becomes readable when a task completes or a
 * notification arrives. Reading it (8 bytes) clears it. Owned by the engine.
 */
int ote_engine_event_fd(ote_engine_h engine);

/*
 * Progress the engine from the calling thread, once, without blocking (as
 * UCX's ucp_worker_progress): post queued transfers, send and receive what
 * the sockets allow, complete the tasks whose answers arrived, serve
 * peers' requests. A worker that another thread progresses at this moment
 * is skipped (that thread does it). OTE_OK when at least one worker was
 * progressed, OTE_ERR_BUSY when every one was busy elsewhere.
 *
 * Callers that poll (ote_batch_task_status() in a loop) call it between
 * polls to get their answers without a thread hand-off. With
 * OTE_PROGRESS_THREAD=n no worker thread runs, and only this call and
 * ote_batch_wait() move transfers: an engine that serves peers must then
 * call one of them regularly. docs/threading.md compares the modes.
 */
ote_status_t ote_engine_progress(ote_engine_h engine);

/* ------------------------------------------------------------------ */
/* Memory                                                             */
/* ------------------------------------------------------------------ */

typedef struct ote_mem *ote_mem_h;

enum {
    OTE_ACCESS_REMOTE_READ  = 1u << 0,
    OTE_ACCESS_REMOTE_WRITE = 1u << 1,
};

typedef struct {
    void       *addr;
    size_t      length;
    const char *location;   /* "cpu:0", "cuda:1"; NULL or "*" = detect  */
    unsigned    access;     /* OTE_ACCESS_* ; 0 = local use only          */
} ote_mem_desc_t;

/*
 * Register count regions. mems_p receives count handles. All or nothing: on
 * error nothing from this call stays registered. Registering a range that is
 * already registered with the same access returns the same handle with a
 * reference added (its location stays the first registration's); the same
 * range with other access is a region of its own.
 */
ote_status_t ote_mem_register(ote_engine_h engine, const ote_mem_desc_t *descs,
                              size_t count, ote_mem_h *mems_p);

/*
 * Drop one reference. When the last one goes, the region disappears from
 * lookups at once (new transfers get OTE_ERR_NOT_REGISTERED) and its
 * registration is kept until transfers already using it drain: over native
 * tcp a slice caught in the middle ends FAILED OTE_ERR_NOT_REGISTERED and
 * no byte moves after the call returns; other transports (cma, shm, UCT,
 * RDMA) may finish the slices already handed to them, so free the memory
 * once your batches that use it ended (docs/memory.md). The handle
 * is then void, as a pointer after free(): OTE_ERR_NOT_REGISTERED until a
 * later registration gets the same handle, which it then names.
 */
ote_status_t ote_mem_deregister(ote_engine_h engine, ote_mem_h mem);

/*
 * Engine-owned memory, registered in the same call. Host memory is
 * page-aligned, backed (where memfd_create works) by a memfd that
 * same-host peers can map (shm), and from 2 MiB up starts on a 2 MiB
 * boundary with transparent huge pages asked for (MADV_HUGEPAGE): the
 * kernel gives them where its shmem policy allows
 * (/sys/kernel/mm/transparent_hugepage/shmem_enabled always, within_size
 * or advise).
 */
ote_status_t ote_mem_alloc(ote_engine_h engine, size_t length, const char *location,
                           unsigned access, void **addr_p, ote_mem_h *mem_p);
ote_status_t ote_mem_free(ote_engine_h engine, ote_mem_h mem);

/* ------------------------------------------------------------------ */
/* Segments                                                           */
/* ------------------------------------------------------------------ */

typedef struct ote_segment *ote_segment_h;

typedef struct {
    uint64_t    addr;
    size_t      length;
    char        location[32];
    unsigned    access;
} ote_region_info_t;

/*
 * Open a peer by segment name. With the peer-to-peer metadata the name is
 * "host:port" (IPv6: "[addr]:port") of the peer's control plane; the
 * descriptor is fetched from there and connections are set up. The fetch
 * blocks for at most OTE_CONNECT_TIMEOUT_MS, the host name's lookup
 * included (a host that does not resolve is OTE_ERR_NOT_FOUND, a name
 * service that has not answered by then OTE_ERR_TIMEOUT), and so does each
 * transport's connection set-up after it, one after the other
 * (docs/threading.md). A listener that refuses is OTE_ERR_NOT_FOUND. With a metadata store the name is the
 * peer's engine name and its descriptor is read from the store (at most
 * OTE_METADATA_TIMEOUT_MS per endpoint): OTE_ERR_NOT_FOUND when no live
 * engine holds the name, OTE_ERR_STORE_UNAVAILABLE when the store does not
 * answer, OTE_ERR_AUTH when the descriptor's HMAC is missing or wrong under
 * OTE_AUTH_KEY. ote_segment_refresh() and ote_segment_reopen() read the
 * store again the same way. OTE_ERR_UNREACHABLE when no configured
 * transport reaches the peer; when the links that would reach it are down
 * here, the connections wait up to OTE_CONNECT_TIMEOUT_MS for one to come
 * up and the open fails OTE_ERR_TIMEOUT if none does (a link that passes).
 *
 * "file:///abs/path" opens a local file instead (an existing regular file,
 * absolute path): read-write where permitted, else read-only. Its one
 * region is [0, file size) (ote_segment_regions), remote_addr is the file
 * offset, and READ and WRITE go through batches as with memory. A WRITE
 * past the region, or a READ that meets the end of the file (transferred:
 * the bytes read), ends OTE_ERR_OUT_OF_BOUNDS; a WRITE to a read-only file
 * OTE_ERR_ACCESS; I/O errors (ENOSPC, EIO, ...) OTE_ERR_IO; notifications
 * OTE_ERR_UNSUPPORTED. Open errors: OTE_ERR_INVALID_PARAM (relative path,
 * not a regular file), OTE_ERR_NOT_FOUND, OTE_ERR_ACCESS, OTE_ERR_UNREACHABLE
 * (OTE_TLS leaves the file transport out), OTE_ERR_UNSUPPORTED (a build
 * without liburing; OTE_FILE_DIRECT=y where the file system has no
 * O_DIRECT). ote_segment_refresh() takes the file's size again.
 */
ote_status_t ote_segment_open(ote_engine_h engine, const char *name, ote_segment_h *seg_p);

/*
 * Open a peer from the bytes of its ote_engine_desc_export() (handed over
 * by the application, e.g. inside its own metadata) instead of fetching
 * its descriptor: the bytes are checked by the same decoder as a fetched
 * descriptor, and with OTE_AUTH_KEY their MAC must be there and right under
 * this engine's key (OTE_ERR_AUTH otherwise: altered, unsigned, or signed
 * with another key); malformed, truncated or of an unknown version:
 * OTE_ERR_PROTOCOL. Connections are then set up as ote_segment_open()
 * does (same errors and bounds). The segment's name is the peer's engine
 * name; from then on it behaves as one opened by that name:
 * ote_segment_refresh(), ote_segment_reopen() and a submit naming a range
 * the descriptor lacks read the descriptor again from the peer (or the
 * store), so regions it registers later are found.
 */
ote_status_t ote_segment_open_desc(ote_engine_h engine, const void *desc, size_t len,
                                   ote_segment_h *seg_p);

/*
 * A segment is bound to the peer instance it was opened on. If that peer
 * restarts (a new instance behind the same name), calls on the segment fail
 * OTE_ERR_PEER_RESTARTED once the engine has seen the new instance (a
 * refresh, a notification, a transport's handshake), or with the transport's
 * error (OTE_ERR_REMOTE_DISCONNECT, OTE_ERR_TIMEOUT) while the old instance's
 * addresses simply stop answering (never OTE_ERR_UNREACHABLE); nothing sent
 * on it ever reaches the new instance. Each submit on a segment none of
 * whose rails may carry tries its connections again (every transport:
 * native ones reconnect, UCT's failed eps are made anew after a descriptor
 * fetch), so the restart is seen at the first submit after the new
 * instance listens. ote_segment_reopen() binds it to the instance serving
 * the name now.
 */

/*
 * Close a segment. Tasks still in flight against it end CANCELED. The
 * handle is void once the call returns, as a pointer after free() (calls
 * running on it in other threads meanwhile finish first; a submit that
 * reaches it while it closes fails OTE_ERR_NOT_FOUND).
 */
ote_status_t ote_segment_close(ote_segment_h seg);

/*
 * Exported files: a file of this host as a segment of its peers, so that a
 * peer writes blocks into this host's SSD and reads them back over the
 * network. The target (the exporting engine) does the I/O: its control
 * listener serves each request with pread/pwrite on a small pool of
 * threads, after the checks a checking transport makes for memory.
 *
 * ote_file_export() exports path (absolute) under name (1 to 127 printable
 * bytes without spaces, '@' or '/') with access OTE_ACCESS_REMOTE_READ
 * and/or OTE_ACCESS_REMOTE_WRITE. A regular file is one export; a
 * directory exports each regular file in it at that moment (at most 1024;
 * names with '@', and those that would make the name over 255 bytes, are
 * left out with a warning; an entry replaced by a link before it was opened
 * fails the export OTE_ERR_INVALID_PARAM), each addressed as
 * "<name>/<file>". The file is opened read-write when REMOTE_WRITE is
 * asked, else read-only: a file this process may not write fails
 * OTE_ERR_ACCESS. The exported size, every access's bound, is the file's
 * size at export; the engine's descriptor lists every exported file (name,
 * size, access), so peers find exports through the same metadata as
 * regions (p2p, etcd, Redis). Errors: OTE_ERR_INVALID_PARAM (the name,
 * a relative path, access not READ and/or WRITE, a path that is neither a
 * regular file nor a directory, a directory of more than 1024 regular
 * files), OTE_ERR_NOT_FOUND (no such path), OTE_ERR_ACCESS (the file may
 * not be opened as asked), OTE_ERR_EXISTS (the name is exported already).
 *
 * A peer opens it with ote_segment_open(peer, "<name>@<engine name>", ...)
 * (a directory's file: "<name>/<file>@<engine name>"; the engine name is
 * what ote_engine_name() returns there: "host:port" with p2p metadata).
 * Every segment name holding '@' (and not starting "file:") is such a
 * name, split at its first '@'. OTE_ERR_NOT_FOUND when the engine exports
 * no such file, OTE_ERR_INVALID_PARAM when it was empty at export (no
 * region to open). The segment has one region [0, exported size) with the
 * export's access (ote_segment_regions); remote_addr is the file offset;
 * READ and WRITE of host memory go through batches as with memory, cut
 * into requests of at most 1 MiB, with the usual statuses, timeouts
 * (OTE_XFER_TIMEOUT_MS) and cancellation. The target answers a range past
 * the exported size OTE_ERR_OUT_OF_BOUNDS, a WRITE to an export without
 * REMOTE_WRITE (or a READ without REMOTE_READ) OTE_ERR_ACCESS, a file
 * since unexported OTE_ERR_NOT_FOUND, a READ that meets the end of a file
 * truncated since (or a WRITE into the range it lost)
 * OTE_ERR_OUT_OF_BOUNDS, ENOSPC, EIO and other I/O errors OTE_ERR_IO. A
 * file unlinked on the target keeps being served through its open
 * descriptor until unexported.
 */
typedef struct ote_file_export *ote_file_export_h;

ote_status_t ote_file_export(ote_engine_h engine, const char *name, const char *path,
                             unsigned access, ote_file_export_h *export_p);

/*
 * Stop exporting: new requests get OTE_ERR_NOT_FOUND; the call returns at
 * once, and requests already accepted (running or queued) still do their
 * I/O, then the files are closed; the handle is gone. ote_engine_destroy()
 * unexports what is left (its handles go with it).
 */
ote_status_t ote_file_unexport(ote_file_export_h exp);

/*
 * Regions the peer published, in the order the peer registered them (oldest
 * first; a peer before this order was kept lists them by address); count_p
 * gets the total even when max is smaller (then the first max).
 */
ote_status_t ote_segment_regions(ote_segment_h seg, ote_region_info_t *regions,
                                 size_t max, size_t *count_p);

/*
 * Fetch the peer's descriptor again (regions added or removed since open).
 * A call made while another thread's refresh of the segment is under way
 * waits for it, and takes its descriptor only when that fetch began after
 * this call; otherwise it fetches again, so that what the peer registered
 * before the call is in the result.
 * OTE_ERR_PEER_RESTARTED when another instance now serves the name: the
 * segment stays bound to the old one (see ote_segment_reopen()). A peer
 * whose control listener refuses (killed, exited, nothing new there yet):
 * OTE_ERR_REMOTE_DISCONNECT, as for ote_notify_send() and
 * ote_segment_reopen() (with a metadata store, a name no live engine holds
 * is OTE_ERR_NOT_FOUND, as at open). With the
 * same instance, connections to it that failed (a timeout, an endpoint UCT
 * gave up on) are made again, and network devices that joined this engine
 * or the peer since the rails were built get rails of their own
 * (docs/transports.md, "Devices that join or leave while the engine runs");
 * OTE_OK only when every transport the segment uses can carry requests
 * again (a device gone from this engine waits for it), else the error of
 * one that cannot. Blocks
 * for at most OTE_CONNECT_TIMEOUT_MS for the fetch and as long per
 * connection made again. (The native tcp and cma transports also reconnect
 * by themselves at the next ote_batch_submit(); docs/transports.md, "After
 * a timeout".)
 */
ote_status_t ote_segment_refresh(ote_segment_h seg);

/*
 * Resolve the segment's name again and bind the segment to the instance
 * that serves it now, rebuilding its connections if that is a new one.
 * *restarted_p (may be NULL) is set to 1 when the instance changed: every
 * address and region the old instance published is void (read the new ones
 * with ote_segment_regions()), tasks still in flight on the old instance end
 * CANCELED, and notifications go to the new instance from here on. Set to 0
 * when it is the same instance (then this is ote_segment_refresh()). Blocks
 * for at most OTE_CONNECT_TIMEOUT_MS per round trip.
 */
ote_status_t ote_segment_reopen(ote_segment_h seg, int *restarted_p);

/* State of a rail (ote_rail_info_t.state). */
typedef enum {
    OTE_RAIL_ACTIVE   = 0, /* carries slices                                  */
    OTE_RAIL_COOLING  = 1, /* paused after an error until its cool-down ends, */
                           /* or while its port is down                       */
    OTE_RAIL_PROBING  = 2, /* cool-down over: one slice tests it before it    */
                           /* carries again                                   */
    OTE_RAIL_CLOSED   = 3, /* no connection (segment closed or rebuilt)       */
} ote_rail_state_t;

/* One rail of a segment: a local device that reaches the peer, with its counters. */
typedef struct {
    char             transport[32];  /* "tcp", "uct_tcp", "rc_mlx5", ...         */
    char             device[64];     /* "eth0", "mlx5_0:1", ...                   */
    ote_rail_state_t state;
    uint64_t         bytes;          /* delivered on this rail                    */
    uint64_t         slices;         /* delivered on this rail                    */
    uint64_t         retries;        /* slices that failed here and were posted   */
                                     /* again on another rail                     */
    uint64_t         errors;         /* slices that failed on this rail           */
    size_t           inflight_bytes; /* bound to this rail and not ended          */
    double           bandwidth;      /* bytes/s: what it delivered lately (EWMA,  */
                                     /* seeded from the transport's estimate)     */
    uint64_t         cooldown_ms;    /* COOLING: time left in the pause;          */
                                     /* UINT64_MAX while its port is down         */
} ote_rail_info_t;

/*
 * The rails of a segment and their counters since it was opened (or
 * reopened on a new instance): out[0..max) gets the first max rails,
 * *count_p the number of rails. Slices are sprayed over the rails, each to
 * the one with the earliest predicted completion; a slice that fails on a
 * rail goes to another one (OTE_RETRY_COUNT), and the rail pauses
 * (docs/transports.md, "Rails").
 */
ote_status_t ote_segment_rails(ote_segment_h seg, ote_rail_info_t *out, size_t max,
                               size_t *count_p);

/*
 * The engine's rails: one entry per local transport and device that is a
 * rail of at least one open segment (those the application opened and
 * those the engine keeps open to answer peers), summed over those
 * segments: bytes, slices, retries, errors, inflight_bytes and bandwidth
 * are the sums of the segments' counters (a closed segment's no longer
 * count); state is the best of its rails' (ACTIVE, then PROBING, COOLING,
 * CLOSED) and cooldown_ms, when that is COOLING, the shortest pause.
 * out[0..max) gets the first max entries, *count_p the number of entries.
 */
ote_status_t ote_engine_rails(ote_engine_h engine, ote_rail_info_t *out, size_t max,
                              size_t *count_p);

/* ------------------------------------------------------------------ */
/* Transfers                                                          */
/* ------------------------------------------------------------------ */

typedef struct ote_batch *ote_batch_h;

typedef enum { OTE_OP_READ = 0, OTE_OP_WRITE = 1 } ote_op_t;

typedef struct {
    ote_op_t      op;          /* READ: remote -> local; WRITE: local -> remote */
    void         *local_addr;  /* inside a region registered on this engine     */
    ote_segment_h segment;     /* the peer                                      */
    uint64_t      remote_addr; /* inside a region the peer published            */
    size_t        length;
} ote_xfer_req_t;

typedef enum {
    OTE_TASK_PENDING = 0, OTE_TASK_COMPLETED, OTE_TASK_FAILED,
    OTE_TASK_CANCELED, OTE_TASK_TIMEOUT,
} ote_task_state_t;

typedef struct {
    ote_task_state_t state;
    ote_status_t     error;        /* why, when FAILED/TIMEOUT/CANCELED */
    size_t           transferred;  /* bytes known to have arrived       */
} ote_task_status_t;

/* A batch holds at most capacity tasks over its lifetime. */
ote_status_t ote_batch_create(ote_engine_h engine, size_t capacity, ote_batch_h *batch_p);

/*
 * Submit count requests. Tasks get consecutive ids starting at
 * *first_task_p. Requests are checked before anything is posted: a request
 * whose local range is not registered, or whose segment is being closed
 * (ote_segment_close() in another thread), fails the whole call with
 * nothing submitted; so does, with OTE_ERR_INVALID_PARAM, a request of
 * length 0, with no segment or local address, of another op, or whose
 * remote range wraps past the end of the address space. Returns OTE_ERR_BUSY, with nothing
 * submitted, when the batch is full or the engine's admission limits
 * (OTE_MAX_INFLIGHT_TASKS, OTE_MAX_INFLIGHT_BYTES) are reached; with
 * OTE_SUBMIT_TIMEOUT_MS set it first waits up to that long for room. Never
 * waits for transfers to land.
 *
 * Remote ranges: a request's remote range must lie in a region of the
 * peer's descriptor, whatever its size and the transport. One that does
 * not (the peer may have registered the region after the segment was
 * opened) makes the engine read the peer's descriptor again before the
 * call returns: one read at a time per segment, shared by every
 * submitter waiting for it, and at most one per
 * OTE_DESC_REREAD_INTERVAL_MS per segment (a submitter that finds the
 * last one too recent waits for the interval to end), so that a stream of
 * bad addresses costs the peer at most one fetch per interval. A
 * submitter waits for another's re-read at most OTE_DESC_REREAD_INTERVAL_MS
 * plus twice OTE_CONNECT_TIMEOUT_MS (then OTE_ERR_TIMEOUT); one it runs
 * itself is bounded as ote_segment_refresh() is. A range still in no region the peer registered
 * then ends its task FAILED with OTE_ERR_REMOTE_NOT_REGISTERED, one that
 * runs past the end of a region with OTE_ERR_OUT_OF_BOUNDS (transferred
 * 0, the call itself succeeds, the other requests of the call go on); when
 * the descriptor could not be read, with that read's error
 * (OTE_ERR_PEER_RESTARTED, OTE_ERR_REMOTE_DISCONNECT for a peer that
 * refuses or reset, OTE_ERR_TIMEOUT, OTE_ERR_STORE_UNAVAILABLE when the
 * metadata store did not answer).
 * The access flag is checked by the target (native tcp, cma, shm: it
 * answers OTE_ERR_ACCESS, and OTE_ERR_NOT_REGISTERED for a region it
 * deregistered since the descriptor was read), or here over transports
 * that do not check at the target (UCT). File segments and exported
 * files are checked where the file is.
 *
 * Native tcp and cma connections to a request's peer that failed (reset
 * after a timeout) are made again first
 * (OTE_CONNECT_TIMEOUT_MS per connection, and when the old address refuses
 * up to two descriptor fetches of as long; a peer found restarted fails the
 * call with OTE_ERR_PEER_RESTARTED); UCT's failed eps, once their rail is
 * due for a probe, after up to two descriptor fetches (the same instance:
 * new eps; another: OTE_ERR_PEER_RESTARTED). docs/threading.md lists every
 * call's waits.
 */
ote_status_t ote_batch_submit(ote_batch_h batch, const ote_xfer_req_t *reqs,
                              size_t count, size_t *first_task_p);

/*
 * As submit; the peer receives msg after every task of this call completed
 * (every request must name the same segment). The notification is not sent
 * if a task of the call did not complete. Its fate is reported by
 * ote_batch_notify_status(), and ote_batch_wait() waits for it as for the
 * tasks.
 */
ote_status_t ote_batch_submit_notify(ote_batch_h batch, const ote_xfer_req_t *reqs,
                                     size_t count, const void *msg, size_t msg_len,
                                     size_t *first_task_p);

/*
 * The notification of the ote_batch_submit_notify() call that submitted
 * task (any task of that call): *status_p is OTE_INPROGRESS until it ended,
 * then OTE_OK once the peer queued it (exactly once), or why it was not
 * delivered: the error of a task of the call that did not complete,
 * OTE_ERR_BUSY (the peer's backlog stayed full for OTE_NOTIFY_TIMEOUT_MS),
 * OTE_ERR_PEER_RESTARTED, OTE_ERR_CANCELED (the segment was closed first),
 * or a connection error. OTE_ERR_INVALID_PARAM for a task submitted without
 * a notification.
 */
ote_status_t ote_batch_notify_status(ote_batch_h batch, size_t task, ote_status_t *status_p);

ote_status_t ote_batch_task_status(ote_batch_h batch, size_t task, ote_task_status_t *status_p);

/*
 * Summary: PENDING while any task is; else FAILED if any did not complete
 * (FAILED, CANCELED or TIMEOUT), error the first such task's; else
 * COMPLETED. transferred sums the tasks'.
 */
ote_status_t ote_batch_status(ote_batch_h batch, ote_task_status_t *status_p);

/*
 * Block until every task submitted so far ended, and every notification of
 * ote_batch_submit_notify() was delivered or failed, or timeout_ms passed
 * (negative: no limit). OTE_OK when all ended (look at statuses),
 * OTE_ERR_TIMEOUT otherwise. The calling thread progresses the engine
 * itself while answers come fast (it polls for up to twice the recent
 * waits, at most OTE_POLL_SPIN_MAX_US), then sleeps until the worker
 * threads complete the batch; with OTE_PROGRESS_THREAD=n it sleeps on the
 * engine's sockets and progresses on every wake-up.
 */
ote_status_t ote_batch_wait(ote_batch_h batch, int timeout_ms);

/*
 * Cancel a task: slices not yet posted are withdrawn; the task ends CANCELED
 * once no posted slice can still land (transferred: the bytes of the slices
 * that did), or COMPLETED if every slice landed anyway. Never blocks.
 */
ote_status_t ote_batch_cancel(ote_batch_h batch, size_t task);

/*
 * Allowed while tasks are in flight: returns at once, and the batch is
 * reclaimed once they drain. The last call on the batch by any thread.
 */
void ote_batch_release(ote_batch_h batch);

/* ------------------------------------------------------------------ */
/* Notifications                                                      */
/* ------------------------------------------------------------------ */

typedef struct {
    char   from[256];  /* sender's segment name */
    size_t length;
    char   data[OTE_NOTIFY_MAX]; /* OTE_NOTIFY_MAX bytes at most */
} ote_notif_t;

/*
 * Delivery: a notification whose ote_notify_send() returned OTE_OK, or whose
 * ote_batch_notify_status() is OTE_OK, was queued exactly once by the peer
 * instance the segment is bound to, and a receiver takes the notifications
 * of one sender in the order they were sent, whatever segment handles or
 * threads sent them. One that cannot be delivered fails with a status; none
 * is dropped while a call reports success. A notification never reaches an
 * instance other than the segment's (OTE_ERR_PEER_RESTARTED). After
 * OTE_ERR_BUSY nothing was queued; after OTE_ERR_TIMEOUT or a connection
 * error the message may have been queued before the answer was lost, but
 * never twice.
 */

/*
 * Send a message to the peer; returns once the peer has queued it. When
 * the peer's backlog (OTE_MAX_NOTIF_BACKLOG) is full, sends again for up to
 * OTE_NOTIFY_TIMEOUT_MS, then fails OTE_ERR_BUSY with nothing queued.
 */
ote_status_t ote_notify_send(ote_engine_h engine, ote_segment_h seg,
                             const void *msg, size_t len);

/* One message of ote_notify_send_many(). */
typedef struct {
    const void *data;
    size_t      length; /* OTE_NOTIFY_MAX at most */
} ote_notify_msg_t;

/*
 * Send count messages to the peer, in this order, each as ote_notify_send()
 * would (the same delivery guarantees, each with its own status); returns
 * once every one was queued by the peer or failed. statuses (NULL: not
 * wanted) gets each message's status; the return is OTE_OK when all are
 * OK, else the first failure's. The messages are checked before any is
 * sent: one longer than OTE_NOTIFY_MAX (or without data but with a length)
 * fails the whole call OTE_ERR_INVALID_PARAM with nothing sent, its status
 * OTE_ERR_INVALID_PARAM and every other one's OTE_ERR_CANCELED. Messages waiting to be sent to one peer
 * instance, from this call and from other threads, travel packed, up to
 * 256 (64 KiB) per control message, one such message in flight per peer
 * instance (docs/wire-protocol.md, NOTIFY_BATCH).
 */
ote_status_t ote_notify_send_many(ote_engine_h engine, ote_segment_h seg,
                                  const ote_notify_msg_t *msgs, size_t count,
                                  ote_status_t *statuses);

/* Take up to max received notifications, oldest first; never blocks. */
ote_status_t ote_notify_recv(ote_engine_h engine, ote_notif_t *notifs,
                             size_t max, size_t *count_p);

/* ------------------------------------------------------------------ */
/* Observability (docs/observability.md)                              */
/* ------------------------------------------------------------------ */

/*
 * One sample of the engine's series, as the metrics endpoint serves it
 * (without the engine label). The library owns the strings; they are valid
 * during the callback only. Fields may be added at the end.
 */
typedef struct {
    const char *name;   /* sample name: "ote_transfer_bytes_total",             */
                        /* "ote_transfer_latency_seconds_bucket", ...          */
    const char *type;   /* its family's type: "counter", "gauge", "histogram"  */
    const char *labels; /* label pairs in exposition form, e.g.                 */
                        /* op="write",transport="tcp"; "" when none           */
    double      value;  /* counters and byte gauges are exact below 2^53        */
} ote_stat_t;

/* Return non-zero to stop the walk. */
typedef int (*ote_stats_cb_t)(void *arg, const ote_stat_t *stat);

/*
 * Call cb once per sample of the engine's series, in the order /metrics
 * lists them (docs/observability.md names every series and label). New
 * series and labels appear as new calls, never as a change of this
 * signature. The counters are copied first: cb may call back into the
 * engine. Works with or without OTE_METRICS_ADDR.
 */
ote_status_t ote_engine_stats(ote_engine_h engine, ote_stats_cb_t cb, void *arg);

/*
 * "host:port" the metrics endpoint of this engine listens on (the port
 * chosen when OTE_METRICS_ADDR asked for port 0), or NULL when
 * OTE_METRICS_ADDR is unset. Valid until the engine is destroyed.
 *
 * OTE_METRICS_ADDR (host:port, or a port alone for 127.0.0.1) serves GET
 * /metrics (Prometheus text 0.0.4, every series with an engine label) and
 * GET /health on a thread of the library; engines of one process that ask
 * for the same address share it. With it set, ote_engine_create() fails
 * OTE_ERR_UNSUPPORTED in a build without libmicrohttpd,
 * OTE_ERR_INVALID_PARAM for a malformed address and OTE_ERR_IO for one
 * that cannot be bound, each with a log line.
 */
const char *ote_engine_metrics_addr(ote_engine_h engine);

#define OTE_BATCH_TELEMETRY_VERSION 1

/*
 * What a batch did so far, as NIXL's per-transfer telemetry gives it. The
 * caller sets version (OTE_BATCH_TELEMETRY_VERSION of the header it was
 * built with); the library fills the fields of that version and sets
 * version to the one it filled.
 */
typedef struct {
    uint32_t version;   /* in: OTE_BATCH_TELEMETRY_VERSION; out: filled version */
    uint64_t start_us;  /* first submit to the batch, microseconds since the    */
                        /* Unix epoch (CLOCK_REALTIME); 0 before any submit     */
    uint64_t post_ns;   /* time spent inside the batch's submit calls            */
    uint64_t xfer_ns;   /* first submit to the end of the last task that ended  */
    uint64_t bytes;     /* bytes transferred by the tasks that ended            */
    uint64_t requests;  /* requests submitted (calls that returned OTE_OK)      */
    uint64_t ended;     /* of which ended (any state)                           */
    uint64_t completed; /* of which COMPLETED                                   */
} ote_batch_telemetry_t;

/*
 * Fill *telemetry for batch; never blocks. Once ended == requests (after
 * ote_batch_wait() returned OTE_OK) the figures are final until the next
 * submit. OTE_ERR_INVALID_PARAM for a NULL argument or version 0.
 */
ote_status_t ote_batch_telemetry(ote_batch_h batch, ote_batch_telemetry_t *telemetry);

#ifdef __cplusplus
}
#endif

#endif /* OTE_OTE_H */
