/*
 * By-reference mode over a local socket (stream_local.c, stream_ref.c), the
 * base of the cma and shm components: single-copy transfers between
 * processes of one host with process_vm_readv/writev, checked by the target.
 *
 * The stream connection in by-reference mode over an abstract AF_UNIX
 * stream socket: the initiator names its own buffer in PUT_REF/GET_REF, the
 * target checks the range against its region table (region, bounds, access
 * flag), holds the region while it copies, and copies between its memory
 * and the initiator's (pid from SO_PEERCRED). A PROBE right after HELLO
 * finds a peer the kernel will not let us reach (ptrace permission, Yama,
 * another pid namespace) before the rail is used.
 */
#ifndef OTE_STREAM_LOCAL_H
#define OTE_STREAM_LOCAL_H

#include "base/par.h"
#include "stream_conn.h"
#include "stream_iface.h"

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* Abstract socket names start with this; peers' addresses are checked for it. */
#define OTE_STREAM_LOCAL_NAME_PREFIX "orbitte-cma."
/* Largest piece copied under one region guard: deregistration waits at most this long. */
#define OTE_STREAM_LOCAL_GUARD_CHUNK (4u << 20)
/* How long one check that the connected process lives stands (stream_ref.c). */
#define OTE_STREAM_LOCAL_PEER_RECHECK_NS (1000ull * 1000)
/* Answers from the peer are polled for while they keep coming this often. */
#define OTE_STREAM_LOCAL_POLL_NS (1000u * 1000u)
/* A reply to a copy of at least this much is sent at once, not with the next ones. */
#define OTE_STREAM_LOCAL_REPLY_NOW (64u << 10)

/*
 * Copy length bytes between local (this process) and peer_addr in process
 * pid; to_peer: write into the peer, else read from it. Partial copies are
 * continued; errors map to statuses (ESRCH: REMOTE_DISCONNECT, EPERM:
 * UNREACHABLE, others: IO).
 */
ote_status_t ote_stream_local_copy(pid_t pid, void *local, uint64_t peer_addr, size_t length,
                                   bool to_peer);

/*
 * Target side: PUT_REF, GET_REF and PROBE (ote_stream_ref_handle_t). Copies
 * are deferred to the end of the receive call (ote_stream_local_target_flush,
 * ote_stream_ref_flush_t), which serves the requests read together in groups.
 */
void ote_stream_local_target_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                    uint64_t peer_addr);
void ote_stream_local_target_flush(ote_stream_conn_t *c);

/* Initiator side: the PROBE exchange after HELLO (ote_stream_connect_hook_t). */
ote_status_t ote_stream_local_probe(ote_stream_iface_t *iface, int fd, const ote_tl_peer_t *peer,
                                    uint64_t deadline);

/* Peer address blob: the abstract socket name without its leading NUL. */
ote_status_t ote_stream_local_addr_unpack(const void *buf, size_t len, struct sockaddr_storage *ss,
                                          socklen_t *sslen_p);

/* Largest name: sun_path less the leading NUL of the abstract namespace. */
#define OTE_STREAM_LOCAL_NAME_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* An iface in the local mode (cma's, and shm's built on it). */
typedef struct {
    ote_stream_iface_t stream;
    char            name[OTE_STREAM_LOCAL_NAME_MAX + 1]; /* abstract socket name, without NUL */
    size_t          name_len;
    uint64_t        last_event_ns; /* last progress call that handled something */
    ote_par_t      *par;           /* copy threads (OTE_CMA_COPY_THREADS), or NULL */
} ote_stream_local_iface_t;

/* A round's copies of at least this many bytes are shared with the copy threads. */
#define OTE_STREAM_LOCAL_PAR_SPLIT (256u * 1024)
/* Largest piece of a shared copy one thread takes. */
#define OTE_STREAM_LOCAL_PAR_PIECE (256u * 1024)

/*
 * The settings of an iface in the local mode, each component reading them
 * from its own table: OTE_CMA_* for cma, OTE_SHM_* for shm
 * (OTE_STREAM_LOCAL_CONFIG_ENTRIES).
 */
typedef struct {
    long   copy_threads;
    size_t max_msg; /* <prefix>STREAM_MAX_MSG */
} ote_stream_local_config_t;

/*
 * The entries of ote_stream_local_config_t at _base (offset of the struct in the
 * table's options struct): COPY_THREADS, with _threads_alias as its former
 * name (NULL: none), and the stream settings nested as STREAM_*.
 */
#define OTE_STREAM_LOCAL_CONFIG_ENTRIES(_base, _threads_alias)                                         \
    {"COPY_THREADS", "-1", OTE_CFG_INT, (_base) + offsetof(ote_stream_local_config_t, copy_threads),   \
     "Threads per worker that share a progress round's copies with the thread running it "    \
     "once they add up to 256 KiB (cma: the target's process_vm_readv/writev; shm: the "      \
     "initiator's memcpy through mappings); -1 = one less than the CPUs this process may "    \
     "run on, at most 3; 0 = that thread copies alone.",                                      \
     .min = -1, .max = OTE_PAR_MAX, .alias = (_threads_alias)},                               \
        OTE_STREAM_MAX_MSG_ENTRY((_base) + offsetof(ote_stream_local_config_t, max_msg))

/* Peer address blob (ote_stream_local_addr_unpack) as a list of one (ote_stream_hooks_t.addr_unpack). */
ote_status_t ote_stream_local_addr_unpack_list(const void *buf, size_t len,
                                               ote_stream_sockaddr_t *out,
                                               size_t max, size_t *count_p);

/*
 * Fill a zeroed iface in the local mode (abstract socket listener, epoll,
 * copy threads) with the given hooks (cma's, or shm's built on them) and
 * ops, the ep ops being ote_stream_ep_ops; on error the caller closes it
 * with ote_stream_local_iface_close.
 */
ote_status_t ote_stream_local_iface_setup(ote_stream_local_iface_t *iface,
                                          const ote_tl_resource_t *res,
                                          const ote_tl_iface_params_t *params,
                                          const ote_stream_local_config_t *cfg,
                                          const ote_stream_hooks_t *hooks,
                                          const ote_tl_iface_ops_t *ops);
/*
 * Open an iface of res in the local mode: fill opts from the table of
 * res's component (a struct that starts with ote_stream_local_config_t),
 * allocate a zeroed iface of size bytes (a struct that starts with
 * ote_stream_local_iface_t), set it up with hooks and ops, release the
 * table's settings (plain numbers in opts stay readable). On error the
 * iface is closed with ops->close.
 */
ote_status_t ote_stream_local_iface_open(void *opts, size_t size, const ote_tl_resource_t *res,
                                         const ote_tl_iface_params_t *params,
                                         const ote_stream_hooks_t *hooks,
                                         const ote_tl_iface_ops_t *ops,
                                         ote_stream_local_iface_t **iface_p);
void         ote_stream_local_iface_close(ote_tl_iface_t *iface);
void         ote_stream_local_iface_query(ote_tl_iface_t *iface, ote_tl_caps_t *caps_p);
ote_status_t ote_stream_local_iface_get_address(ote_tl_iface_t *iface, void *buf, size_t max,
                                                size_t *len_p);
unsigned     ote_stream_local_iface_progress(ote_tl_iface_t *iface);
ote_status_t ote_stream_local_iface_event_arm(ote_tl_iface_t *iface);
/*
 * The hooks of the local mode (its address, the probe after HELLO, the
 * target's copies by reference deferred to ote_stream_local_target_flush),
 * in a component's ote_stream_hooks_t; _ref_handle: the target's handler of
 * PUT_REF, GET_REF and PROBE (cma: ote_stream_local_target_handle; shm its
 * own, which passes those on to it).
 */
#define OTE_STREAM_LOCAL_HOOKS(_ref_handle)                                                    \
    .addr_unpack = ote_stream_local_addr_unpack_list, .connect_hook = ote_stream_local_probe,  \
    .ref_handle = (_ref_handle), .ref_flush = ote_stream_local_target_flush
/* The iface ops of cma and of shm, which has its own query, progress, event_arm, close. */
#define OTE_STREAM_LOCAL_IFACE_OPS_INIT(_query, _progress, _event_arm, _close)                  \
    OTE_STREAM_IFACE_OPS_INIT(_query, ote_stream_local_iface_get_address,                      \
                              ote_tl_no_format_address, _progress, _event_arm, _close)
/* process_vm_readv works in this process (the kernel has it, seccomp allows it). */
bool         ote_stream_local_available(void);
/*
 * The one resource ("memory") of a component in the local mode, named
 * as the component; none where process_vm_readv is not allowed.
 */
ote_status_t ote_stream_local_query_resources(ote_tl_component_t *comp,
                                              const ote_tl_iface_params_t *params,
                                              ote_tl_resource_t **res_p, size_t *count_p);

#endif
