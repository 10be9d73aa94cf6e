/*
 * Transport components in UCT's shape:
 *   component -> resources (transport, device) -> iface (one per resource
 *   and worker) -> ep (one per peer).
 * Each object is a struct whose first member is the base type below, with a
 * table of operations. An iface and its eps belong to one worker thread: all
 * calls on them happen on that thread (or under that worker's lock), as with
 * UCT. Every slot of every table points at a function: an operation a
 * component lacks points at the ote_tl_unsupported_* or ote_tl_no_* default
 * declared at the end of this header.
 */
#ifndef OTE_UCT_EXT_TL_H
#define OTE_UCT_EXT_TL_H

#include "base/config.h"
#include "mem/mem.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define OTE_TL_NAME_MAX   32
#define OTE_TL_DEV_MAX    64
#define OTE_TL_ADDR_MAX   512

typedef struct ote_tl_component ote_tl_component_t;
typedef struct ote_tl_iface     ote_tl_iface_t;
typedef struct ote_tl_ep        ote_tl_ep_t;
typedef struct ote_auth         ote_auth_t;
struct ote_rdma;

/* Completion of one posted operation, like uct_completion_t. */
typedef struct ote_tl_completion {
    void (*func)(struct ote_tl_completion *self, ote_status_t status);
    /*
     * With an error status: the bytes that did land (a READ of a file that
     * ended early). Components that cannot tell leave it 0.
     */
    size_t transferred;
    /*
     * Optional (NULL): true once the owner no longer wants the operation;
     * a component that queues operations ends those not started yet
     * CANCELED.
     */
    const atomic_bool *cancel;
} ote_tl_completion_t;

enum {
    OTE_TL_CAP_PUT_ZCOPY = 1u << 0,
    OTE_TL_CAP_GET_ZCOPY = 1u << 1,
    OTE_TL_CAP_AM        = 1u << 2,
    OTE_TL_CAP_FLUSH     = 1u << 3,
    /* The target checks every access against its region table. */
    OTE_TL_CAP_CHECKED   = 1u << 4,
    /*
     * Serves only pairs where at least one side is device memory (cuda_copy,
     * staging): host-to-host traffic is left to the host transports.
     */
    OTE_TL_CAP_DEVICE_PAIRS = 1u << 5,
    /*
     * The initiator copies through mappings of the peer's memory where the
     * peer grants them, and by reference elsewhere (shm): it beats every
     * other intra-host transport.
     */
    OTE_TL_CAP_MAPPED = 1u << 6,
    /*
     * An ep to a peer that is gone costs what the component cannot take
     * back (UCX 1.13's tcp leaks the socket of a connect that fails inside
     * uct_ep_create): the engine asks the peer's control address first and
     * makes no ep to an instance that does not answer there.
     */
    OTE_TL_CAP_PROBE_PEER = 1u << 7,
};

enum {
    OTE_TL_SCOPE_PROCESS = 1u << 0, /* same process                 */
    OTE_TL_SCOPE_HOST    = 1u << 1, /* another process on this host */
    OTE_TL_SCOPE_NETWORK = 1u << 2, /* another host                 */
};

typedef enum {
    OTE_TL_CONN_TO_IFACE = 0, /* ep from the peer's iface address          */
    OTE_TL_CONN_TO_EP    = 1, /* ep addresses exchanged over control plane */
} ote_tl_conn_model_t;

/* The capability record. */
typedef struct {
    unsigned            ops;        /* OTE_TL_CAP_*                       */
    unsigned            mem_local;  /* OTE_MEM_TYPE_* reachable locally   */
    unsigned            mem_remote; /* OTE_MEM_TYPE_* reachable remotely  */
    unsigned            scope;      /* OTE_TL_SCOPE_*                     */
    size_t              max_iov;
    size_t              max_msg;    /* largest single put/get             */
    size_t              align;      /* required address alignment         */
    size_t              slice_size; /* preferred slice for large requests */
    double              bandwidth;  /* bytes per second, estimate         */
    double              latency;    /* seconds, estimate                  */
    ote_tl_conn_model_t conn_model;
} ote_tl_caps_t;

/* One (transport, device) a component offers. */
typedef struct {
    char                tl_name[OTE_TL_NAME_MAX];  /* "tcp", "uct_tcp", "cma" */
    char                dev_name[OTE_TL_DEV_MAX];  /* "lo", "mlx5_0:1", "memory" */
    bool                is_network;                /* subject to OTE_NET_DEVICES */
    /*
     * Why it cannot be opened in this engine, or NULL: a static string, or
     * one of params->rdma (which outlives the resource list).
     */
    const char         *unusable;
    ote_tl_component_t *component;
    void               *priv;
} ote_tl_resource_t;

/*
 * What a component needs from the engine to open an iface: engine-wide
 * settings and objects. Its own settings it reads from its own
 * configuration table (ote_tl_component_ops_t.config_table).
 */
typedef struct {
    ote_mem_table_t    *regions;     /* target-side checks                */
    uint64_t            instance_id; /* this engine's instance            */
    const char         *bind_ip;     /* address the engine listens on     */
    const char         *advertise_ip;/* address peers are told to use     */
    pthread_mutex_t    *worker_lock; /* see ep_create                     */
    size_t              worker_index;
    /* Key and connection limits shared by all listeners of the engine;
     * NULL: accept any peer, no limits (tools that only list resources). */
    ote_auth_t         *auth;
    /* OTE_MAX_CONNS, OTE_MAX_CONNS_PER_PEER, OTE_HANDSHAKE_TIMEOUT_MS. */
    long                max_conns;
    long                max_conns_per_peer;
    long                handshake_timeout_ms;
    /* RDMA ports with their GID choice (uct_ext/rdma/rdma.h); NULL: none known. */
    const struct ote_rdma *rdma;
} ote_tl_iface_params_t;

/* What an ep needs to know of the peer. */
typedef struct {
    uint64_t    instance_id;  /* peer's instance, checked at connect */
    const char *name;         /* peer's segment name, for logs      */
    uint64_t    local_instance;
    long        timeout_ms;   /* bound on connection setup          */
    /* An accepting side's peer address (ep_accept): its per-peer limit's key; NULL otherwise. */
    const char *addr_ip;
} ote_tl_peer_t;

/*
 * Segments a component opens itself: local objects named by its scheme
 * (the file component's "file:///abs/path"), not peers. Core finds the
 * component by the segment's name (ote_tl_object_find), opens the object,
 * makes the segment's descriptor one region [0, size) with the object's
 * access, and its rails eps of that component's ifaces (one per worker)
 * created from the object's address; memory those eps do not reach for
 * this object is staged in front of them. cfg is the component's
 * configuration (config_table) the engine read once at its creation, so
 * that the settings at creation hold for the engine's life.
 */
typedef struct ote_tl_object ote_tl_object_t;

typedef struct {
    const char *scheme;   /* names that start with it are this component's ("file:") */
    size_t      name_max; /* longest name it opens */
    const char *location; /* its descriptor region's location ("file") */
    /*
     * Open the object name names (one reference to the caller); a name the
     * component does not accept is INVALID_PARAM, with a log line.
     */
    ote_status_t (*open)(const char *name, const void *cfg, ote_tl_object_t **obj_p);
    /* Drop a reference; the object goes with the last one. */
    void (*put)(ote_tl_object_t *obj);
    /* Its size now (the bound of WRITEs from here on) and its access (OTE_ACCESS_*). */
    ote_status_t (*describe)(ote_tl_object_t *obj, uint64_t *size_p, unsigned *access_p);
    /*
     * Before its eps are made: the memory types (OTE_MEM_TYPE_*) the ifaces
     * claim that the eps of this object do not reach (staged in front).
     */
    ote_status_t (*attach)(ote_tl_object_t *obj, const void *cfg, unsigned *unreached_p);
    /* The address blob an ep of the component's ifaces is created from. */
    ote_status_t (*address)(ote_tl_object_t *obj, void *buf, size_t max, size_t *len_p);
} ote_tl_object_ops_t;

typedef struct {
    const char *name;
    /*
     * The component's configuration (OTE_<prefix>...): it reads it itself
     * when it opens; the engine checks it and ote_info -c prints it.
     * Components sharing code may share a table.
     */
    const ote_config_table_t *config_table;
    /* Resources this component offers here; *res_p is freed by the caller. */
    ote_status_t (*query_resources)(ote_tl_component_t *comp,
                                    const ote_tl_iface_params_t *params,
                                    ote_tl_resource_t **res_p, size_t *count_p);
    /*
     * Memory domain of a resource, shared by its ifaces; NULL if none needed.
     * Resources of one domain may get the same md (the engine registers
     * memory once per distinct md). Every md_open that succeeds is matched
     * by one md_close.
     */
    ote_status_t (*md_open)(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                            ote_md_t **md_p);
    void (*md_close)(ote_tl_component_t *comp, ote_md_t *md);
    ote_status_t (*iface_open)(const ote_tl_resource_t *res, ote_md_t *md,
                               const ote_tl_iface_params_t *params, ote_tl_iface_t **iface_p);
    /* Why query_resources offers nothing here (ote_info -d), or NULL. */
    const char *(*unavailable)(ote_tl_component_t *comp);
    /* Segments it opens itself (local objects), or NULL. */
    const ote_tl_object_ops_t *objects;
} ote_tl_component_ops_t;

struct ote_tl_component {
    const ote_tl_component_ops_t *ops;
    void                         *priv;
};

/*
 * Define the component _var and its ops, as UCX's UCT_COMPONENT_DEFINE. A
 * component without a memory domain passes ote_tl_unsupported_md_open and
 * ote_tl_no_md_close, one that is always available ote_tl_no_reason.
 */
#define OTE_TL_COMPONENT_DEFINE(_var, _name, _config_table, _query_resources, _md_open,       \
                                _md_close, _iface_open, _unavailable)                          \
    OTE_TL_OBJECT_COMPONENT_DEFINE(_var, _name, _config_table, _query_resources, _md_open,    \
                                   _md_close, _iface_open, _unavailable, NULL)
/* The same for a component that also opens segments of its own (_objects, ote_tl_object_ops_t). */
#define OTE_TL_OBJECT_COMPONENT_DEFINE(_var, _name, _config_table, _query_resources, _md_open, \
                                       _md_close, _iface_open, _unavailable, _objects)         \
    static const ote_tl_component_ops_t _var##_ops = {                                         \
        .name            = (_name),                                                            \
        .config_table    = (_config_table),                                                    \
        .query_resources = (_query_resources),                                                 \
        .md_open         = (_md_open),                                                         \
        .md_close        = (_md_close),                                                        \
        .iface_open      = (_iface_open),                                                      \
        .unavailable     = (_unavailable),                                                     \
        .objects         = (_objects),                                                         \
    };                                                                                         \
    ote_tl_component_t _var = {.ops = &_var##_ops}

typedef struct {
    void (*close)(ote_tl_iface_t *iface);
    void (*query)(ote_tl_iface_t *iface, ote_tl_caps_t *caps_p);
    /* Address peers use to reach this iface (to-iface model). */
    ote_status_t (*get_address)(ote_tl_iface_t *iface, void *buf, size_t max, size_t *len_p);
    /* That address in words, for ote_info -d ("10.0.0.1:4000, ..."), or "". */
    void (*format_address)(ote_tl_iface_t *iface, char *buf, size_t len);
    /* Readable when progress has work; -1 if the iface must be polled. */
    int (*event_fd)(ote_tl_iface_t *iface);
    /* Make progress; returns the number of events handled. */
    unsigned (*progress)(ote_tl_iface_t *iface);
    /* Fail posted operations older than deadline_ns (monotonic) with TIMEOUT. */
    void (*check_timeouts)(ote_tl_iface_t *iface, uint64_t deadline_ns);
    /*
     * True while check_timeouts has something to watch that no
     * task of this engine stands for (a target's answers its peer does not
     * read); the worker then keeps its timer while idle.
     */
    bool (*has_deadlines)(ote_tl_iface_t *iface);
    /*
     * Connect to a peer iface; may block up to peer->timeout_ms. Called
     * WITHOUT the worker lock, so that a connection to this very engine can
     * be answered by its worker: a component takes params->worker_lock
     * around every touch of iface state.
     */
    ote_status_t (*ep_create)(ote_tl_iface_t *iface, const void *addr, size_t addr_len,
                              const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p);
    /*
     * Called by the worker (with its lock) before it sleeps: OTE_OK when
     * event_fd will report new work (or nothing is pending), OTE_ERR_BUSY
     * when progress must run again first. An iface whose event_fd is -1
     * must answer BUSY while it has operations in flight. UNSUPPORTED (the
     * default): the worker trusts event_fd, or polls every millisecond
     * when there is none.
     */
    ote_status_t (*event_arm)(ote_tl_iface_t *iface);
    /*
     * To-ep model (caps.conn_model == OTE_TL_CONN_TO_EP); all three are
     * called without the worker lock, like ep_create.
     * ep_open, initiator: given the peer iface's published address, an ep
     * not connected yet, and the address blob the peer connects its side to
     * (it travels in a CONNECT request).
     */
    ote_status_t (*ep_open)(ote_tl_iface_t *iface, const void *peer_addr, size_t peer_addr_len,
                            const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p, void *addr,
                            size_t max, size_t *len_p);
    /*
     * ep_accept, target: an ep connected to the initiator's blob, owned by
     * the iface under (peer->instance_id, conn_id) until ep_release or
     * close; out gets the blob the initiator connects to.
     */
    ote_status_t (*ep_accept)(ote_tl_iface_t *iface, const ote_tl_peer_t *peer,
                              uint64_t conn_id, const void *addr, size_t addr_len, void *out,
                              size_t max, size_t *out_len_p);
    /* Destroy an accepted ep; false if there is none by that key. */
    bool (*ep_release)(ote_tl_iface_t *iface, uint64_t peer_instance, uint64_t conn_id);
} ote_tl_iface_ops_t;

typedef struct {
    /*
     * One-sided write of [local, local+length) to remote_addr. local lies in
     * local_region (its memh[iface->md_index] is the md handle); the caller
     * holds a reference on it until completion. Returns
     * OTE_INPROGRESS and later calls comp->func exactly once, OTE_OK if it
     * completed at once (comp not called), or an error (comp not called).
     */
    ote_status_t (*put_zcopy)(ote_tl_ep_t *ep, void *local, size_t length,
                              ote_region_t *local_region, uint64_t remote_addr,
                              const void *rkey, size_t rkey_len, ote_tl_completion_t *comp);
    ote_status_t (*get_zcopy)(ote_tl_ep_t *ep, void *local, size_t length,
                              ote_region_t *local_region, uint64_t remote_addr,
                              const void *rkey, size_t rkey_len, ote_tl_completion_t *comp);
    /* Bytes posted and not yet completed: lets the protocol balance rails. */
    size_t (*inflight_bytes)(ote_tl_ep_t *ep);
    /* True while the ep can still carry operations. */
    bool (*is_alive)(ote_tl_ep_t *ep);
    /* Outstanding operations complete with OTE_ERR_CANCELED. */
    void (*destroy)(ote_tl_ep_t *ep);
    /* To-ep model, initiator: finish an ep from ep_open with the peer's blob. */
    ote_status_t (*connect_to_ep)(ote_tl_ep_t *ep, const void *addr, size_t addr_len);
    /*
     * Both or neither (native tcp and cma; the defaults answer false and
     * UNSUPPORTED): an ep whose
     * connections fail (reset after OTE_XFER_TIMEOUT_MS, closed by the
     * peer) gets new ones. needs_reconnect may be called without the
     * worker lock and without blocking: true while some connection failed
     * and was not replaced. reconnect is called WITHOUT the worker lock,
     * like ep_create, one call at a time per ep: it connects again with the
     * whole handshake, naming peer->instance_id, within peer->timeout_ms;
     * OTE_OK when every failed connection was replaced,
     * OTE_ERR_PEER_RESTARTED when another instance of the peer answered
     * (nothing else is sent to it), or the error of the connect.
     */
    bool (*needs_reconnect)(ote_tl_ep_t *ep);
    ote_status_t (*reconnect)(ote_tl_ep_t *ep, const ote_tl_peer_t *peer);
} ote_tl_ep_ops_t;

struct ote_tl_iface {
    const ote_tl_iface_ops_t *ops;
    const ote_tl_ep_ops_t    *ep_ops;
    ote_tl_resource_t         resource;
    ote_md_t                 *md;
    int                       md_index; /* index in the region table, -1 if none */
    /*
     * Set by the worker, from any thread and without its lock, when it
     * took a readiness report of event_fd (an edge of its epoll set) that
     * the iface's own progress has not seen: the next progress looks at
     * everything behind event_fd, even where it would skip that round.
     * The last member: ote_tl_iface_copy copies what comes before it.
     */
    atomic_bool               event_seen;
};

/*
 * *dst = *src but for event_seen, which the worker may set at any moment
 * and a plain struct copy would read unsynchronised: dst's starts clear.
 * For the protocols' ifaces that borrow a transport's (putback, stage).
 */
static inline void ote_tl_iface_copy(struct ote_tl_iface *dst, const struct ote_tl_iface *src)
{
    memcpy(dst, src, offsetof(struct ote_tl_iface, event_seen));
    atomic_init(&dst->event_seen, false);
}

struct ote_tl_ep {
    ote_tl_iface_t *iface;
};

/*
 * What a table points at for an operation its component lacks: every slot
 * of every table holds a function. Operations that return a status answer
 * OTE_ERR_UNSUPPORTED; the others do nothing, or answer "no"/NULL.
 */
ote_status_t ote_tl_unsupported_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                      ote_region_t *local_region, uint64_t remote_addr,
                                      const void *rkey, size_t rkey_len,
                                      ote_tl_completion_t *comp);
/* No memory domain: *md_p = NULL. */
ote_status_t ote_tl_unsupported_md_open(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                                        ote_md_t **md_p);
void         ote_tl_no_md_close(ote_tl_component_t *comp, ote_md_t *md);
const char  *ote_tl_no_reason(ote_tl_component_t *comp);
/* Writes an empty string. */
void         ote_tl_no_format_address(ote_tl_iface_t *iface, char *buf, size_t len);
/* The worker relies on event_fd alone (or polls every millisecond without one). */
ote_status_t ote_tl_unsupported_event_arm(ote_tl_iface_t *iface);
void         ote_tl_no_check_timeouts(ote_tl_iface_t *iface, uint64_t deadline_ns);
bool         ote_tl_no_deadlines(ote_tl_iface_t *iface);
ote_status_t ote_tl_unsupported_ep_open(ote_tl_iface_t *iface, const void *peer_addr,
                                        size_t peer_addr_len, const ote_tl_peer_t *peer,
                                        ote_tl_ep_t **ep_p, void *addr, size_t max,
                                        size_t *len_p);
ote_status_t ote_tl_unsupported_ep_accept(ote_tl_iface_t *iface, const ote_tl_peer_t *peer,
                                          uint64_t conn_id, const void *addr, size_t addr_len,
                                          void *out, size_t max, size_t *out_len_p);
bool         ote_tl_no_ep_release(ote_tl_iface_t *iface, uint64_t peer_instance,
                                  uint64_t conn_id);
ote_status_t ote_tl_unsupported_connect_to_ep(ote_tl_ep_t *ep, const void *addr,
                                              size_t addr_len);
bool         ote_tl_no_reconnect_needed(ote_tl_ep_t *ep);
ote_status_t ote_tl_unsupported_reconnect(ote_tl_ep_t *ep, const ote_tl_peer_t *peer);

/*
 * The iface ops entries of the to-ep model (ep_open, ep_accept, ep_release)
 * in the ops of an iface of the to-iface model: its eps are made from its
 * address alone (ep_create), never through the engine's exchange.
 */
#define OTE_TL_IFACE_OPS_TO_IFACE_ONLY                                                         \
    .ep_open = ote_tl_unsupported_ep_open, .ep_accept = ote_tl_unsupported_ep_accept,          \
    .ep_release = ote_tl_no_ep_release
/*
 * The ep ops entries of connection setup (connect_to_ep, needs_reconnect,
 * reconnect) in the ops of an ep with no connection of its own to make
 * through the engine or to rebuild.
 */
#define OTE_TL_EP_OPS_NO_CONNECTION                                                            \
    .connect_to_ep = ote_tl_unsupported_connect_to_ep,                                         \
    .needs_reconnect = ote_tl_no_reconnect_needed, .reconnect = ote_tl_unsupported_reconnect

/* Components compiled into this library, NULL-terminated. */
extern ote_tl_component_t *const ote_tl_components[];
/*
 * Whether name opens a local object of some component's scheme, including
 * components this build leaves out: *comp_p the component that opens it,
 * or NULL with *why_p saying why none does here.
 */
bool ote_tl_object_find(const char *name, ote_tl_component_t **comp_p, const char **why_p);
/*
 * Every configuration table of this layer, NULL-terminated: those of the
 * components, including the ones this build leaves out (their variables
 * are known everywhere), and rdma's (device discovery).
 */
extern const ote_config_table_t *const ote_tl_config_tables[];

#endif
