/*
 * Native tcp component: internal objects. The cma and shm components reuse
 * them in by-reference mode over a local stream socket, through the hooks
 * they give their ifaces (ote_tcp_hooks_t).
 */
#ifndef OTE_TCP_H
#define OTE_TCP_H

#include "base/auth.h"
#include "tcp_wire.h"
#include "uct_ext/tl.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#define OTE_TCP_RXBUF    (64 * 1024)
#define OTE_TCP_IOV_MAX  64
/*
 * Requests stay on the connection the previous one took while its bytes in
 * flight exceed the least loaded connection's by less than this: small
 * requests go in runs (one WRITEV, one iovec element where their memory
 * follows on), large ones still alternate.
 */
#define OTE_TCP_PICK_RUN (512 * 1024)
/* Queued messages one sendmsg takes at most (four full WRITEVs). */
#define OTE_TCP_SEND_MAX (4 * OTE_TCP_WRITEV_MAX)
/*
 * Target side: replies queued on one connection before it stops reading
 * requests; a peer that sends and never reads cannot grow our queue.
 */
#define OTE_TCP_TX_PAUSE 4096
/* Addresses one tcp iface publishes, and one interface holds, at most. */
#define OTE_TCP_MAX_ADDRS 16

typedef struct ote_tcp_iface ote_tcp_iface_t;
typedef struct ote_tcp_ep    ote_tcp_ep_t;
typedef struct ote_tcp_conn  ote_tcp_conn_t;

/* Descriptors one connection holds received and not yet claimed. */
#define OTE_TCP_RX_FDS 8

/*
 * By-reference mode, target side: handle PUT_REF, GET_REF or PROBE (h) whose
 * trailer names peer_addr in the initiator's memory; answers on c.
 */
typedef void (*ote_tcp_ref_handle_t)(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h,
                                     uint64_t peer_addr);
/*
 * By-reference mode, target side: requests a handler deferred (ref_pending)
 * are carried out at the latest when a receive call ends, so that those
 * read together can be served together; called with at least one pending.
 */
typedef void (*ote_tcp_ref_flush_t)(ote_tcp_conn_t *c);
/* Requests one by-reference connection may defer. */
#define OTE_TCP_REF_GATHER 8

/* A by-reference request as read: header and the initiator's address. */
typedef struct {
    ote_tcp_hdr_t hdr;
    uint64_t      peer_addr;
} ote_tcp_ref_req_t;

/* A socket address and its length (IPv4, IPv6 or an abstract AF_UNIX name). */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t               len;
} ote_tcp_sockaddr_t;

/* One address of a network interface, with its netmask. */
typedef struct {
    struct sockaddr_storage addr;
    struct sockaddr_storage mask;
} ote_tcp_ifaddr_t;

/*
 * A network interface that is up and running, named as the kernel (and
 * UCX) names it, with its IPv4 and IPv6 addresses; IPv6 link-local ones are
 * left out (they mean nothing without the interface's index on the peer).
 */
typedef struct {
    char             name[OTE_TL_DEV_MAX];
    bool             loopback;
    ote_tcp_ifaddr_t addrs[OTE_TCP_MAX_ADDRS];
    size_t           num_addrs;
} ote_tcp_netif_t;

/* Initiator: an extra step after HELLO_ACK on a new blocking connection. */
typedef ote_status_t (*ote_tcp_connect_hook_t)(ote_tcp_iface_t *iface, int fd,
                                               const ote_tl_peer_t *peer, uint64_t deadline);
/* Peer address blob to the socket addresses it lists (at most max). */
typedef ote_status_t (*ote_tcp_addr_unpack_t)(const void *buf, size_t len, ote_tcp_sockaddr_t *out,
                                              size_t max, size_t *count_p);

/*
 * What a component built on the stream connection code adds to it, given to
 * ote_tcp_iface_init: tcp only its address format; cma by-reference
 * requests, its address format and the probe after HELLO; shm cma's plus
 * descriptor passing and its own post. NULL members: not used.
 */
typedef struct ote_tcp_hooks {
    /* Peer address blob to socket addresses; required. */
    ote_tcp_addr_unpack_t  addr_unpack;
    /* Initiator: a step after HELLO_ACK on a new connection (cma: PROBE). */
    ote_tcp_connect_hook_t connect_hook;
    /*
     * By-reference mode (cma, shm): the target's handler of PUT_REF, GET_REF
     * and PROBE, and its flush (both set or both NULL). Set, the ep ops post
     * by reference and the target offers small requests by value.
     */
    ote_tcp_ref_handle_t   ref_handle;
    ote_tcp_ref_flush_t    ref_flush;
    /*
     * Shared mappings (shm): connections pass descriptors; MAP and
     * UNMAP_ACK go to ref_handle on the target, MAP_ACK and UNMAP to
     * initiator_hook; conn_closed runs once as a connection closes, before
     * its operations fail.
     */
    bool                   fd_passing;
    void                 (*initiator_hook)(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h,
                                           const uint8_t *trailer);
    void                 (*conn_closed)(ote_tcp_conn_t *c);
    /* How the ep ops post an operation (shm: through its mappings); NULL: tcp's way. */
    ote_status_t         (*post)(ote_tl_ep_t *ep, bool put, void *local, size_t length,
                                 ote_region_t *local_region, uint64_t remote_addr,
                                 ote_tl_completion_t *comp);
} ote_tcp_hooks_t;

/* An operation posted by the initiator and not yet answered. */
typedef struct {
    ote_tl_completion_t *comp;
    uint8_t              type; /* WRITE, READ_REQ, PUT_REF or GET_REF */
    uint64_t             id;
    void                *local;
    size_t               length;
    ote_region_t        *local_region; /* guards receives into local */
    uint64_t             post_ns;
    /* MAP: the copy (PUT_REF or GET_REF) that waits for the mapping */
    uint8_t              then;
    uint64_t             remote_addr;
} ote_tcp_op_t;

/* A message queued for sending: header, then optional payload. */
typedef struct {
    uint8_t       hdr[OTE_TCP_HDR_LEN + OTE_TCP_TRAILER_MAX];
    /*
     * Owned, sent instead of hdr: the header and table of a WRITEV or
     * READV_REQ (in the first of the requests merged into it; the others
     * send only their payloads, hdr_len 0), or a header with a long trailer.
     */
    uint8_t      *vhdr;
    uint16_t      hdr_len;    /* header (hdr or vhdr), and trailer if any */
    bool          vec;        /* a WRITE or READ_REQ that may still join a WRITEV or READV_REQ */
    int           fd;         /* passed with the message's first byte; -1: none */
    const void   *payload;
    size_t        payload_len;
    size_t        sent;
    ote_region_t *region;     /* payload's region: guarded while sending  */
    bool          own_region; /* target side: reference dropped once sent */
} ote_tcp_tx_t;

/* Where the bytes of the payload being received go, in order. */
typedef struct {
    uint8_t     *dst;    /* NULL: its bytes are read and dropped */
    size_t       len;    /* bytes still to come */
    ote_status_t status; /* OK, or why its bytes are dropped */
    uint8_t      region; /* target: its region's index in rx_regions */
} ote_tcp_rxv_t;

typedef enum {
    OTE_TCP_RX_AUTH,      /* target with a key: AUTH_HELLO, then AUTH_PROOF */
    OTE_TCP_RX_HANDSHAKE, /* target: the next message must be HELLO */
    OTE_TCP_RX_HDR,
    OTE_TCP_RX_PAYLOAD,   /* into rxv */
} ote_tcp_rx_state_t;

struct ote_tcp_conn {
    int                   fd;
    ote_tcp_iface_t      *iface;
    ote_tcp_ep_t         *ep;       /* NULL on the target side */
    bool                  dead;
    bool                  dirty;    /* on the iface's flush list */
    bool                  want_out; /* EPOLLOUT armed */
    bool                  rx_paused;/* target: too many replies queued */
    bool                  admitted; /* counted by ote_auth_conn_admit */
    bool                  vec_tx;   /* initiator: runs of small WRITEs (READs) go as WRITEV (READV_REQ) */
    uint64_t              handshake_deadline; /* target: 0 once HELLO done */
    ote_auth_session_t    auth;
    uint8_t               auth_out[OTE_AUTH_TPROOF_LEN]; /* proof being sent */
    char                  ip[64];   /* peer address without port (admission key) */
    pid_t                 peer_pid; /* target side of a local socket: SO_PEERCRED */
    int                   peer_pidfd; /* that process, if the kernel has pidfds; else -1 */
    _Atomic uint64_t      peer_seen_ns; /* when peer_pidfd last said the process lives */
    bool                  rx_again; /* bytes left in rxbuf after the budget ran out */
    /* descriptor passing (iface->hooks->fd_passing): received, in order */
    int                   rx_fds[OTE_TCP_RX_FDS];
    size_t                rx_nfds;
    void                 *ext;      /* the component's state of this connection */
    struct ote_tcp_conn  *next_dirty;
    struct ote_tcp_conn  *next, *prev; /* iface's list of live connections */
    struct ote_tcp_conn  *next_dead;   /* closed, freed after progress     */
    char                  peer[64];

    /* by-reference target: requests read and not yet served, in order */
    ote_tcp_ref_req_t     ref_pending[OTE_TCP_REF_GATHER];
    size_t                ref_npending;
    bool                  ref_busy; /* ref_flush running: no nested receive */

    /* tx ring */
    ote_tcp_tx_t         *tx;
    size_t                tx_cap, tx_head, tx_count;
    uint64_t              tx_stall_ns; /* target: since when its answers do not leave; 0 while they do */

    /* outstanding initiator operations, in request order */
    ote_tcp_op_t         *ops;
    size_t                ops_cap, ops_head, ops_count;
    size_t                inflight_bytes;

    /* rx */
    ote_tcp_rx_state_t    rx_state;
    uint8_t              *rxbuf;
    size_t                rx_off, rx_len;
    ote_tcp_rxv_t         rxv[OTE_TCP_WRITEV_MAX]; /* the payload's destinations */
    size_t                rxv_i, rxv_n; /* the one being filled; how many */
    size_t                rx_remaining; /* payload bytes still to come */
    size_t                rx_total;
    ote_tcp_hdr_t         rx_hdr;   /* header of the message being received */
    /*
     * The regions of rxv (rxv[i].region): on the target with a reference
     * each, held until the answer; on the initiator those of the operations
     * answered. NULL once a region was deregistered while its bytes were
     * arriving.
     */
    ote_region_t         *rx_regions[OTE_TCP_WRITEV_MAX];
    size_t                rx_nregions;
};

struct ote_tcp_ep {
    ote_tl_ep_t      super;
    ote_tcp_conn_t **conns;
    size_t           num_conns;
    size_t           last_conn; /* where the previous request went (tcp_ep_pick) */
    uint64_t         next_id;
    char             peer_name[128];
    uint64_t         peer_caps; /* OTE_TCP_CAP_* from the peer's HELLO_ACK */
    /* The peer's iface, where ote_tcp_ep_reconnect connects again. */
    struct sockaddr_storage addr;
    socklen_t        addr_len;
    /* Connections closed and not yet replaced; read without the worker lock. */
    atomic_size_t    num_failed;
};

struct ote_tcp_iface {
    ote_tl_iface_t          super;
    int                     listen_fd;
    int                     epfd;
    /* tcp: the addresses peers are given, and the interface served */
    ote_tcp_sockaddr_t      advertise[OTE_TCP_MAX_ADDRS];
    size_t                  num_advertise;
    ote_tcp_netif_t         netif;
    ote_mem_table_t        *regions;
    pthread_mutex_t        *worker_lock;
    uint64_t                instance_id;
    size_t                  max_msg;
    size_t                  sndbuf, rcvbuf;
    bool                    nodelay;
    bool                    vector;     /* OTE_TCP_VECTOR */
    long                    conns_per_ep;
    long                    max_conns;
    long                    max_conns_per_peer;
    long                    num_accepted;
    ote_auth_t             *auth;       /* NULL: no key, limits per iface */
    uint64_t                handshake_timeout_ns;
    ote_tcp_conn_t         *conns;      /* live connections, both sides   */
    ote_tcp_conn_t         *dirty;      /* connections with queued tx     */
    ote_tcp_conn_t         *graveyard;  /* closed target-side connections */
    uint8_t                *discard;    /* sink for refused payloads */
    /* What the component adds to the connection code; never NULL. */
    const struct ote_tcp_hooks *hooks;
};

/* Transport name of a connection's iface, for logs ("tcp", "cma"). */
#define OTE_TCP_CONN_TL(c) ((c)->iface->super.resource.tl_name)

/* tcp_conn.c */
ote_status_t ote_tcp_conn_new(ote_tcp_iface_t *iface, int fd, ote_tcp_ep_t *ep,
                              ote_tcp_conn_t **conn_p);
void         ote_tcp_conn_free(ote_tcp_conn_t *conn);
/* Close the socket and fail every outstanding operation with status. */
void         ote_tcp_conn_fail(ote_tcp_conn_t *conn, ote_status_t status);
ote_status_t ote_tcp_conn_tx_push(ote_tcp_conn_t *conn, const ote_tcp_hdr_t *hdr,
                                  const void *payload, size_t payload_len,
                                  ote_region_t *region, bool own_region);
/*
 * A message whose trailer is longer than OTE_TCP_TRAILER_MAX (a WRITEV_ACK's
 * statuses): header and trailer are copied into a buffer the message owns.
 */
ote_status_t ote_tcp_conn_tx_push_long(ote_tcp_conn_t *conn, const ote_tcp_hdr_t *hdr,
                                       const void *trailer, size_t trailer_len);
/*
 * Bytes without a header of their own (target: the pieces of a READV_RESP),
 * sent from region, whose reference the message takes.
 */
ote_status_t ote_tcp_conn_tx_push_data(ote_tcp_conn_t *conn, const void *payload,
                                       size_t payload_len, ote_region_t *region);
/* A by-reference request: header and 8-byte trailer, no payload. */
ote_status_t ote_tcp_conn_tx_push_ref(ote_tcp_conn_t *conn, const ote_tcp_hdr_t *hdr,
                                      uint64_t trailer);
/*
 * A message with a trailer (at most OTE_TCP_TRAILER_MAX bytes) and, with fd
 * >= 0, a descriptor: the connection owns fd from then on, also on error.
 */
ote_status_t ote_tcp_conn_tx_push_fd(ote_tcp_conn_t *conn, const ote_tcp_hdr_t *hdr,
                                     const void *trailer, size_t trailer_len, int fd);
/* The oldest descriptor received and not claimed, or -1. */
int          ote_tcp_conn_rx_fd_pop(ote_tcp_conn_t *conn);
/* Log what the peer did wrong and close the connection with PROTOCOL. */
void         ote_tcp_conn_protocol_error(ote_tcp_conn_t *conn, const char *what);
/* Pop the oldest outstanding operation (initiator side). */
ote_tcp_op_t ote_tcp_conn_op_pop(ote_tcp_conn_t *conn);
/* Target side: queue a reply without payload; on failure the connection closes. */
void         ote_tcp_conn_reply(ote_tcp_conn_t *conn, const ote_tcp_hdr_t *hdr);
/* The oldest operation waiting for its answer, or NULL. */
ote_tcp_op_t *ote_tcp_conn_op_head(ote_tcp_conn_t *c);
/* Stop (true) or resume reading the connection. */
void          ote_tcp_conn_set_rx_paused(ote_tcp_conn_t *c, bool on);
ote_status_t ote_tcp_conn_op_push(ote_tcp_conn_t *conn, const ote_tcp_op_t *op);
void         ote_tcp_conn_flush(ote_tcp_conn_t *conn);
void         ote_tcp_conn_rx(ote_tcp_conn_t *conn);
/* Forget the regions a payload was going to (the target drops its references on them). */
void         ote_tcp_conn_rx_regions_put(ote_tcp_conn_t *conn);
void         ote_tcp_conn_set_sockopts(ote_tcp_iface_t *iface, int fd);

/*
 * The settings of a stream connection iface, given to ote_tcp_iface_init by
 * the component that opens it: tcp fills all of them from OTE_TCP_*; cma
 * and shm only max_msg, from their own tables (<prefix>STREAM_MAX_MSG,
 * OTE_TCP_STREAM_MAX_MSG_ENTRY), and fix the rest.
 */
typedef struct {
    long   conns;   /* connections per peer         */
    size_t max_msg; /* largest data message         */
    size_t sndbuf;  /* SO_SNDBUF; 0 = autotuning    */
    size_t rcvbuf;  /* SO_RCVBUF; 0 = autotuning    */
    bool   nodelay;
    bool   vector;  /* small WRITEs (READs) merged into WRITEV (READV_REQ) */
} ote_tcp_config_t;

extern const ote_config_table_t ote_tcp_config_table;

/* Largest data message on a stream connection: default and bounds. */
#define OTE_TCP_MAX_MSG_DFLT "64m"
#define OTE_TCP_MAX_MSG_MIN  4096
#define OTE_TCP_MAX_MSG_MAX  (1ll << 32)
/*
 * The entry STREAM_MAX_MSG of a component on the stream connection (cma:
 * OTE_CMA_STREAM_MAX_MSG, shm: OTE_SHM_STREAM_MAX_MSG), nested under the
 * component's prefix as the settings all of them share; OTE_TCP_MAX_MSG,
 * the way these components were tuned before they had their own, is still
 * read where it is not set. _offset: the size_t field it fills.
 */
#define OTE_TCP_STREAM_MAX_MSG_ENTRY(_offset)                                                   \
    {"STREAM_MAX_MSG", OTE_TCP_MAX_MSG_DFLT, OTE_CFG_SIZE, (_offset),                           \
     "Largest data message on this component's stream connection; a peer announcing more "      \
     "is disconnected.",                                                                        \
     .min = OTE_TCP_MAX_MSG_MIN, .max = OTE_TCP_MAX_MSG_MAX, .alias = "TCP_MAX_MSG"}

/* tcp_iface.c */
void ote_tcp_iface_mark_dirty(ote_tcp_iface_t *iface, ote_tcp_conn_t *conn);
/*
 * Take an accepted socket as a target-side connection (admission limits,
 * handshake deadline). On error the socket is closed.
 */
ote_status_t ote_tcp_iface_conn_accept(ote_tcp_iface_t *iface, int fd,
                                       const struct sockaddr_storage *ss);
void ote_tcp_iface_conn_closed(ote_tcp_iface_t *iface, ote_tcp_conn_t *conn);
/*
 * Fields from the component's settings (cfg), hooks and params, shared by
 * tcp, cma and shm. The descriptors are set to -1 first, so that ote_tcp_iface_close
 * can undo a failed init.
 */
ote_status_t ote_tcp_iface_init(ote_tcp_iface_t *iface, const ote_tl_resource_t *res,
                                const ote_tl_iface_params_t *params,
                                const ote_tcp_config_t *cfg, const ote_tcp_hooks_t *hooks);
/* epoll set with the listening socket; iface->listen_fd must be open. */
ote_status_t ote_tcp_iface_epoll_init(ote_tcp_iface_t *iface);
void     ote_tcp_iface_close(ote_tl_iface_t *iface);
unsigned ote_tcp_iface_progress(ote_tl_iface_t *iface);
void     ote_tcp_iface_check_timeouts(ote_tl_iface_t *iface, uint64_t deadline_ns);
bool     ote_tcp_iface_has_deadlines(ote_tl_iface_t *iface);
int      ote_tcp_iface_event_fd(ote_tl_iface_t *iface);

/* tcp_ep.c */
/*
 * The ep ops of tcp, cma (by reference: hooks->ref_handle set) and shm (its
 * mappings first: hooks->post set).
 */
extern const ote_tl_ep_ops_t ote_tcp_ep_ops;
ote_status_t ote_tcp_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                               const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p);
/*
 * Post one request of type on the connection tcp_ep_pick chooses (the
 * previous request's, or the least loaded one past OTE_TCP_PICK_RUN): WRITE
 * and READ_REQ stream bytes, PUT_REF and GET_REF carry local as their
 * trailer.
 */
ote_status_t ote_tcp_ep_post(ote_tcp_ep_t *ep, uint8_t type, void *local, size_t length,
                             ote_region_t *local_region, uint64_t remote_addr,
                             ote_tl_completion_t *comp);
/* ote_tcp_ep_post of a MAP whose copy (then: PUT_REF or GET_REF) waits for it. */
ote_status_t ote_tcp_ep_post_map(ote_tcp_ep_t *ep, uint8_t then, void *local, size_t length,
                                 ote_region_t *local_region, uint64_t remote_addr,
                                 ote_tl_completion_t *comp);
/* The connection an ep posts on now, or NULL while none is up. */
ote_tcp_conn_t *ote_tcp_ep_conn(ote_tcp_ep_t *ep);
void   ote_tcp_ep_destroy(ote_tl_ep_t *ep);
size_t ote_tcp_ep_inflight_bytes(ote_tl_ep_t *ep);
bool   ote_tcp_ep_is_alive(ote_tl_ep_t *ep);
/* See ote_tl_ep_ops_t: connections that failed, replaced through the handshake. */
bool         ote_tcp_ep_needs_reconnect(ote_tl_ep_t *ep);
ote_status_t ote_tcp_ep_reconnect(ote_tl_ep_t *ep, const ote_tl_peer_t *peer);
/*
 * Blocking exchange during connection setup: send h and payload_len bytes
 * of payload, receive the answer's header into h.
 */
ote_status_t ote_tcp_handshake_step(int fd, ote_tcp_hdr_t *h, const void *payload,
                                    size_t payload_len, uint64_t deadline);

/*
 * Address blob: 1 to OTE_TCP_MAX_ADDRS entries back to back, each u8 family
 * (4 or 6), u16 port (network order), 4 or 16 address bytes.
 */
ote_status_t ote_tcp_addr_pack(const ote_tcp_sockaddr_t *addrs, size_t count, void *buf,
                               size_t max, size_t *len_p);
ote_status_t ote_tcp_addr_unpack(const void *buf, size_t len, ote_tcp_sockaddr_t *out,
                                 size_t max, size_t *count_p);

/* tcp_netif.c */
/* Interfaces up and running with at least one address; *list_p is freed by the caller. */
ote_status_t ote_tcp_netif_query(ote_tcp_netif_t **list_p, size_t *count_p);
/* The interface called name; OTE_ERR_NO_DEVICE if there is none. */
ote_status_t ote_tcp_netif_find(const char *name, ote_tcp_netif_t *netif_p);
/* sa is one of the interface's addresses (for loopback: inside its subnet). */
bool ote_tcp_netif_holds(const ote_tcp_netif_t *netif, const struct sockaddr *sa);
/* sa lies in the subnet of one of the interface's addresses. */
bool ote_tcp_netif_on_link(const ote_tcp_netif_t *netif, const struct sockaddr *sa);
/*
 * The kernel's route to sa leaves from one of the interface's addresses (it
 * picks that source address for sa); true where the route cannot be looked
 * up, so that connect() reports the error.
 */
bool ote_tcp_netif_routes(const ote_tcp_netif_t *netif, const struct sockaddr *sa,
                          socklen_t len);
/* 127.0.0.0/8, ::1 or an IPv4-mapped loopback address. */
bool ote_tcp_sockaddr_is_loopback(const struct sockaddr *sa);

#endif
