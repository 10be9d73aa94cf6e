/*
 * uct component: the system UCX UCT transports (cma, tcp, rc_mlx5, ...)
 * behind the tl.h interface. One uct_worker and one uct_iface per
 * (resource, engine worker), opened with UCS_THREAD_MODE_SERIALIZED: the
 * core calls an iface and its eps from the owning worker thread or under
 * that worker's lock.
 *
 * Address blobs (get_address, ep_open, ep_accept) are
 *   u16 device address length, device address,
 *   u16 iface or ep address length, iface or ep address  (little-endian).
 */
#ifndef OTE_UCT_UCT_H
#define OTE_UCT_UCT_H

#include "uct_ext/tl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <ucs/async/async_fwd.h>
#include <uct/api/uct.h>

/* A UCT memory domain as this process knows it (lives until exit). */
typedef struct ote_uct_md_entry {
    uct_component_h  component;
    char             md_name[UCT_MD_NAME_MAX];
    struct ote_uct_md *md;   /* open md, NULL while closed (under the registry lock) */
} ote_uct_md_entry_t;

/* What a resource's priv points at: its domain and UCT's names. */
typedef struct {
    ote_uct_md_entry_t *md_entry;
    char                tl_name[UCT_TL_NAME_MAX];
    char                dev_name[UCT_DEVICE_NAME_MAX];
    uct_device_type_t   dev_type;
    bool                loopback;
} ote_uct_rsc_t;

/* An open memory domain, shared by every resource and engine that uses it. */
typedef struct ote_uct_md {
    ote_md_t            super;
    char                name[OTE_TL_NAME_MAX * 2];
    ote_uct_md_entry_t *entry;
    uct_component_h     component;
    uct_md_h            md;
    uct_md_attr_t       attr;
    int                 refs;     /* under the registry lock */
} ote_uct_md_t;

typedef struct ote_uct_iface ote_uct_iface_t;
typedef struct ote_uct_ep    ote_uct_ep_t;

/* One operation handed to UCT, or waiting for resources to be handed. */
typedef struct ote_uct_op {
    uct_completion_t     uct;    /* first member: UCT completes the op */
    ote_tl_completion_t *comp;   /* NULL once the op ended early        */
    ote_uct_ep_t        *ep;     /* NULL once orphaned                  */
    ote_uct_iface_t     *iface;
    bool                 is_get;
    bool                 posted;
    void                *local;
    size_t               length;
    uct_mem_h            memh;
    uint64_t             remote;
    uct_rkey_t           rkey;
    uint64_t             post_ns;
    struct ote_uct_op   *prev, *next;
} ote_uct_op_t;

typedef struct {
    ote_uct_op_t *head, *tail;
} ote_uct_op_list_t;

/* Unpacked remote key, cached per ep by its packed bytes. */
typedef struct {
    uint64_t          hash;
    uint16_t          len;
    bool              used;
    uint8_t          *bytes;
    uct_rkey_bundle_t bundle;
} ote_uct_rkey_t;

struct ote_uct_ep {
    ote_tl_ep_t        super;
    uct_ep_h           ep;          /* NULL once failed or destroyed      */
    bool               accepted;    /* target side of a to-ep connection  */
    bool               connected;   /* to-ep: connect_to_ep done          */
    ote_status_t       failed;      /* OTE_OK while usable                */
    atomic_bool        alive;
    uint64_t           peer_instance;
    char               peer_ip[64];   /* accepted: the address the CONNECT came from */
    uint64_t           conn_id;     /* accepted eps: the initiator's key  */
    char               peer_name[128];
    ote_uct_op_list_t  posted;      /* in post order: head is the oldest  */
    ote_uct_op_list_t  pending;     /* refused with NO_RESOURCE, retried  */
    size_t             inflight_bytes;
    ote_uct_rkey_t    *rkeys;
    size_t             rkeys_cap, rkeys_count;
    int                sock_fd;     /* UCT tcp: the ep's socket, -1 unknown */
    unsigned long      sock_ino;    /* its inode: the fd still names it   */
    struct ote_uct_ep *next, *prev; /* iface's list */
};

/* An error UCT reported for an ep, handled on the worker thread. */
typedef struct {
    uct_ep_h     ep;
    ucs_status_t status;
} ote_uct_err_t;

#define OTE_UCT_MAX_ERRS 64

struct ote_uct_iface {
    ote_tl_iface_t       super;
    ote_uct_md_t        *md;
    ote_uct_rsc_t        rsc;
    ucs_async_context_t *async;
    uct_worker_h         worker;
    uct_iface_h          iface;
    uct_iface_attr_t     attr;
    ote_tl_caps_t        caps;
    unsigned             mem_mask;  /* OTE_MEM_GPU_DIRECT=n takes cuda out */
    pthread_mutex_t     *worker_lock;
    int                  event_fd;
    unsigned             arm_events;
    long                 max_accepted;
    long                 max_accepted_per_peer; /* from one peer address (OTE_MAX_CONNS_PER_PEER) */
    size_t               num_accepted;
    ote_uct_ep_t        *eps;       /* every live ep, initiator and accepted */
    ote_uct_op_list_t    orphans;   /* ended early, UCT may still complete   */
    ote_uct_op_t        *free_ops;
    size_t               outstanding; /* ops posted or pending, all eps      */
    /* Errors from UCT's handler, which may run on UCX's async thread. */
    pthread_mutex_t      err_lock;
    ote_uct_err_t        errs[OTE_UCT_MAX_ERRS];
    size_t               num_errs;
    atomic_bool          have_errs;
    bool                 errs_overflow;
};

/* uct_md.c */
extern const ote_md_ops_t ote_uct_md_ops;
ote_status_t ote_uct_status(ucs_status_t status);
/* The UCT handle behind a region's memh entry of a uct md. */
uct_mem_h    ote_uct_md_memh(void *memh);
ote_status_t ote_uct_md_get(ote_uct_md_entry_t *entry, ote_uct_md_t **md_p);
/*
 * The ote md flags of a UCT domain with these capability flags: one that
 * registers memory and whose peers need its rkey (RDMA: the NIC checks
 * nothing else) grants access by its registration (OTE_MD_FLAG_GRANTS_ACCESS).
 */
unsigned     ote_uct_md_flags(uint64_t cap_flags);
void         ote_uct_md_put(ote_uct_md_t *md);
/*
 * Every UCT resource here, in UCX's order. The records live until exit;
 * the array *list_p is freed by the caller.
 */
ote_status_t ote_uct_query(ote_uct_rsc_t ***list_p, size_t *count_p);

/* uct_iface.c */
ote_uct_op_t *ote_uct_op_get(ote_uct_iface_t *iface);
void          ote_uct_op_put(ote_uct_iface_t *iface, ote_uct_op_t *op);
void          ote_uct_op_list_push(ote_uct_op_list_t *l, ote_uct_op_t *op);
void          ote_uct_op_list_remove(ote_uct_op_list_t *l, ote_uct_op_t *op);
/*
 * On an RDMA port (dev_name as rdma names it, "mlx5_0:1"), the GID the
 * discovery chose goes into cfg as GID_INDEX (rc, dc and ud read it).
 * OTE_OK without change for other devices; OTE_ERR_NO_DEVICE for an
 * unusable port; OTE_ERR_UNSUPPORTED when the transport's configuration
 * has no GID_INDEX: never UCT's own choice in place of ours.
 */
struct ote_rdma;
ote_status_t  ote_uct_iface_config_gid(const char *tl_name, const char *dev_name,
                                       const struct ote_rdma *rdma, uct_iface_config_t *cfg);
/* Address blob codec. */
ote_status_t  ote_uct_blob_pack(const void *a, size_t alen, const void *b, size_t blen,
                                void *buf, size_t max, size_t *len_p);
ote_status_t  ote_uct_blob_unpack(const void *buf, size_t len, const uint8_t **a_p,
                                  size_t *alen_p, const uint8_t **b_p, size_t *blen_p);

/* uct_ep.c */
extern const ote_tl_ep_ops_t ote_uct_ep_ops;
ote_status_t ote_uct_ep_create(ote_tl_iface_t *iface, const void *addr, size_t addr_len,
                               const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p);
ote_status_t ote_uct_ep_open(ote_tl_iface_t *iface, const void *peer_addr, size_t peer_addr_len,
                             const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p, void *addr,
                             size_t max, size_t *len_p);
ote_status_t ote_uct_ep_accept(ote_tl_iface_t *iface, const ote_tl_peer_t *peer,
                               uint64_t conn_id, const void *addr, size_t addr_len, void *out,
                               size_t max, size_t *out_len_p);
bool         ote_uct_ep_release(ote_tl_iface_t *iface, uint64_t peer_instance,
                                uint64_t conn_id);
/* Worker thread: retry operations UCT refused for lack of resources. */
unsigned     ote_uct_ep_post_pending(ote_uct_ep_t *ep);
/*
 * Worker thread: the ep cannot carry operations any more. Its UCT ep is
 * destroyed, operations not yet completed end with status.
 */
void         ote_uct_ep_fail(ote_uct_ep_t *ep, ote_status_t status);
/* Destroy an ep (worker lock held); operations still outstanding end CANCELED. */
void         ote_uct_ep_free(ote_uct_ep_t *ep);

#endif
