/*
 * Stream connection base of the native tcp, cma and shm components: a
 * connection over a stream socket with its framing (stream_wire.h),
 * authentication (base/auth.h), request queues, endpoints that reconnect,
 * and the iface that listens and progresses them. Each component gives its
 * ifaces hooks (ote_stream_hooks_t) for what it adds: tcp its addresses;
 * cma and shm the by-reference mode over a local socket, declared at the
 * end of this header (stream_local.c, stream_ref.c).
 *
 * This header is what the components include from stream/; the base's own
 * files include it too, and nothing else of stream/ is included outside it.
 */
#ifndef OTE_STREAM_H
#define OTE_STREAM_H

#include "base/auth.h"
#include "base/par.h"
#include "stream_wire.h"
#include "uct_ext/tl.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/*
 * A connection's receive buffer (headers, the bytes that come with them,
 * what a read takes ahead): allocated at OTE_STREAM_RXBUF_FIRST bytes on
 * the first read, doubled up to OTE_STREAM_RXBUF after a read that filled
 * it (a busy connection) or to hold a message's header and inline bytes;
 * freed while the connection is idle (ote_stream_iface_check_timeouts), so
 * that an open connection that carries little costs little.
 */
#define OTE_STREAM_RXBUF       (64 * 1024)
#define OTE_STREAM_RXBUF_FIRST (4 * 1024)
/* Target, tcp: the most payload bytes a read waits for (SO_RCVLOWAT, stream_rx.c). */
#define OTE_STREAM_RX_LOWAT_MAX (1024 * 1024)
#define OTE_STREAM_IOV_MAX  64
/*
 * Requests stay on the connection the previous one took while its bytes in
 * flight exceed the least loaded connection's by less than this: small
 * requests go in runs (one WRITEV, one iovec element where their memory
 * follows on), large ones still alternate.
 */
#define OTE_STREAM_PICK_RUN (512 * 1024)
/* Queued messages one sendmsg takes at most (four full WRITEVs). */
#define OTE_STREAM_SEND_MAX (4 * OTE_STREAM_WRITEV_MAX)
/*
 * Target side: replies queued on one connection before it stops reading
 * requests; a peer that sends and never reads cannot grow our queue.
 */
#define OTE_STREAM_TX_PAUSE 4096
/*
 * While one initiator connection alone waits for answers, progress reads
 * it directly and consults the epoll set (other connections, accepts,
 * EPOLLOUT) every this many rounds; an iface without connections looks
 * for accepts as often.
 */
#define OTE_STREAM_EPOLL_EVERY 8
/* Addresses of a peer one ep considers at most (tcp publishes up to this many). */
#define OTE_STREAM_MAX_ADDRS 16

typedef struct ote_stream_iface ote_stream_iface_t;
typedef struct ote_stream_ep    ote_stream_ep_t;
typedef struct ote_stream_conn  ote_stream_conn_t;

/* Descriptors one connection holds received and not yet claimed. */
#define OTE_STREAM_RX_FDS 8

/*
 * By-reference mode, target side: handle PUT_REF, GET_REF or PROBE (h) whose
 * trailer names peer_addr in the initiator's memory; answers on c.
 */
typedef void (*ote_stream_ref_handle_t)(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                        uint64_t peer_addr);
/*
 * By-reference mode, target side: requests a handler deferred (ref_pending)
 * are carried out at the latest when a receive call ends, so that those
 * read together can be served together; called with at least one pending.
 */
typedef void (*ote_stream_ref_flush_t)(ote_stream_conn_t *c);
/* Requests one by-reference connection may defer. */
#define OTE_STREAM_REF_GATHER 8

/* A by-reference request as read: header and the initiator's address. */
typedef struct {
    ote_stream_hdr_t hdr;
    uint64_t      peer_addr;
} ote_stream_ref_req_t;

/* A socket address and its length (IPv4, IPv6 or an abstract AF_UNIX name). */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t               len;
} ote_stream_sockaddr_t;


/* Initiator: an extra step after HELLO_ACK on a new blocking connection. */
typedef ote_status_t (*ote_stream_connect_hook_t)(ote_stream_iface_t *iface, int fd,
                                                  const ote_tl_peer_t *peer, uint64_t deadline);
/* Peer address blob to the socket addresses it lists (at most max). */
typedef ote_status_t (*ote_stream_addr_unpack_t)(const void *buf, size_t len,
                                                 ote_stream_sockaddr_t *out,
                                                 size_t max, size_t *count_p);

/*
 * What a component built on the stream base adds to it, given to
 * ote_stream_iface_init: tcp its address format and which of a peer's
 * addresses its interface reaches; cma by-reference
 * requests, its address format and the probe after HELLO; shm cma's plus
 * descriptor passing and its own post. NULL members: not used.
 */
typedef struct ote_stream_hooks {
    /* Peer address blob to socket addresses; required. */
    ote_stream_addr_unpack_t  addr_unpack;
    /*
     * Initiator: of the peer's n addresses (in), those this iface may
     * connect to, best first, into out; returns how many. NULL: all, in order.
     */
    size_t                 (*addr_choose)(const ote_stream_iface_t *iface,
                                          const ote_stream_sockaddr_t *in, size_t n,
                                          ote_stream_sockaddr_t *out);
    /*
     * Initiator, before each connect: false where the address is not
     * reached through this iface (connect fails UNREACHABLE). NULL: always.
     */
    bool                   (*addr_reaches)(const ote_stream_iface_t *iface,
                                           const struct sockaddr_storage *ss, socklen_t len);
    /* Initiator: a step after HELLO_ACK on a new connection (cma: PROBE). */
    ote_stream_connect_hook_t connect_hook;
    /*
     * By-reference mode (cma, shm): the target's handler of PUT_REF, GET_REF
     * and PROBE, and its flush (both set or both NULL). Set, the ep ops post
     * by reference and the target offers small requests by value.
     */
    ote_stream_ref_handle_t   ref_handle;
    ote_stream_ref_flush_t    ref_flush;
    /*
     * Shared mappings (shm): connections pass descriptors; MAP and
     * UNMAP_ACK go to ref_handle on the target, MAP_ACK and UNMAP to
     * initiator_hook; conn_closed runs once as a connection closes, before
     * its operations fail.
     */
    bool                   fd_passing;
    void                 (*initiator_hook)(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                           const uint8_t *trailer);
    void                 (*conn_closed)(ote_stream_conn_t *c);
    /* How the ep ops post an operation (shm: through its mappings); NULL: the base's. */
    ote_status_t         (*post)(ote_tl_ep_t *ep, bool put, void *local, size_t length,
                                 ote_region_t *local_region, uint64_t remote_addr,
                                 ote_tl_completion_t *comp);
} ote_stream_hooks_t;

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
} ote_stream_op_t;

/* A message queued for sending: header, then optional payload. */
typedef struct {
    uint8_t       hdr[OTE_STREAM_HDR_LEN + OTE_STREAM_TRAILER_MAX];
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
} ote_stream_tx_t;

/* Where the bytes of the payload being received go, in order. */
typedef struct {
    uint8_t     *dst;    /* NULL: its bytes are read and dropped */
    size_t       len;    /* bytes still to come */
    ote_status_t status; /* OK, or why its bytes are dropped */
    uint8_t      region; /* target: its region's index in rx_regions */
} ote_stream_rxv_t;

typedef enum {
    OTE_STREAM_RX_AUTH,      /* target with a key: AUTH_HELLO, then AUTH_PROOF */
    OTE_STREAM_RX_HANDSHAKE, /* target: the next message must be HELLO */
    OTE_STREAM_RX_HDR,
    OTE_STREAM_RX_PAYLOAD,   /* into rxv */
} ote_stream_rx_state_t;

struct ote_stream_conn {
    int                   fd;
    ote_stream_iface_t      *iface;
    ote_stream_ep_t         *ep;       /* NULL on the target side */
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
    int                   rx_fds[OTE_STREAM_RX_FDS];
    size_t                rx_nfds;
    void                 *ext;      /* the component's state of this connection */
    struct ote_stream_conn  *next_dirty;
    struct ote_stream_conn  *next, *prev; /* iface's list of live connections */
    struct ote_stream_conn  *next_dead;   /* closed, freed after progress     */
    /* iface's watch list: what its timeout check must look at (stream_iface.c) */
    struct ote_stream_conn  *next_watch, *prev_watch;
    bool                  watched;
    char                  peer[64];

    /* by-reference target: requests read and not yet served, in order */
    ote_stream_ref_req_t     ref_pending[OTE_STREAM_REF_GATHER];
    size_t                ref_npending;
    bool                  ref_busy; /* ref_flush running: no nested receive */

    /* tx ring */
    ote_stream_tx_t         *tx;
    size_t                tx_cap, tx_head, tx_count;
    uint64_t              tx_stall_ns; /* target: since when its answers do not leave; 0 while they do */

    /* outstanding initiator operations, in request order */
    ote_stream_op_t         *ops;
    size_t                ops_cap, ops_head, ops_count;
    size_t                inflight_bytes;

    /* rx */
    ote_stream_rx_state_t    rx_state;
    uint8_t              *rxbuf;    /* rx_cap bytes; NULL (0) until a read, and while idle */
    size_t                rx_off, rx_len, rx_cap;
    bool                  rx_full;  /* the last read filled rxbuf: the next one doubles it */
    bool                  rx_recent; /* a receive call since the previous idle check */
    ote_stream_rxv_t         rxv[OTE_STREAM_WRITEV_MAX]; /* the payload's destinations */
    size_t                rxv_i, rxv_n; /* the one being filled; how many */
    size_t                rx_remaining; /* payload bytes still to come */
    int                   rx_lowat; /* target, tcp: SO_RCVLOWAT set (1: default); -1: not used */
    size_t                rx_total;
    ote_stream_hdr_t         rx_hdr;   /* header of the message being received */
    /*
     * The regions of rxv (rxv[i].region): on the target with a reference
     * each, held until the answer; on the initiator those of the operations
     * answered. NULL once a region was deregistered while its bytes were
     * arriving.
     */
    ote_region_t         *rx_regions[OTE_STREAM_WRITEV_MAX];
    size_t                rx_nregions;
};

struct ote_stream_ep {
    ote_tl_ep_t      super;
    ote_stream_conn_t **conns;
    size_t           num_conns;
    size_t           last_conn; /* where the previous request went (stream_ep_pick) */
    uint64_t         next_id;
    char             peer_name[128];
    uint64_t         peer_caps; /* OTE_STREAM_CAP_* from the peer's HELLO_ACK */
    /* The peer's iface, where ote_stream_ep_reconnect connects again. */
    struct sockaddr_storage addr;
    socklen_t        addr_len;
    /* Connections closed and not yet replaced; read without the worker lock. */
    atomic_size_t    num_failed;
};

struct ote_stream_iface {
    ote_tl_iface_t          super;
    int                     listen_fd;
    int                     epfd;
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
    ote_stream_conn_t         *conns;      /* live connections, both sides   */
    ote_stream_conn_t         *dirty;      /* connections with queued tx     */
    ote_stream_conn_t         *graveyard;  /* closed target-side connections */
    /*
     * Connections the timeout check looks at: those with a handshake
     * deadline, answers stalled, operations in flight or a receive buffer
     * to free when idle (ote_stream_iface_watch). The check leaves out the
     * rest, and drops a connection from the list once it has none of
     * these: its cost follows the busy connections, not the open ones.
     */
    ote_stream_conn_t         *watch;
    bool                       rx_again_conns; /* a connection set rx_again since the last walk */
    /*
     * Initiator connections with operations waiting for their answer, and
     * the last one an operation was queued on. While that one is the only
     * one, progress reads it directly and looks at the epoll set every
     * OTE_STREAM_EPOLL_EVERY-th round only (stream_iface.c).
     */
    size_t                  ops_conns;
    ote_stream_conn_t      *rx_hint;
    unsigned                direct_rounds;
    /*
     * Rounds of an iface without connections (only accepts can arrive): it
     * looks at its epoll set every OTE_STREAM_EPOLL_EVERY-th one, and on the
     * round after the worker saw its fd fire (super.event_seen).
     */
    unsigned                idle_rounds;
    uint8_t                *discard;    /* sink for refused payloads */
    /* What the component adds to the connection code; never NULL. */
    const struct ote_stream_hooks *hooks;
};

/* Transport name of a connection's iface, for logs ("tcp", "cma"). */
#define OTE_STREAM_CONN_TL(c) ((c)->iface->super.resource.tl_name)

/* stream_conn.c */
ote_status_t ote_stream_conn_new(ote_stream_iface_t *iface, int fd, ote_stream_ep_t *ep,
                                 ote_stream_conn_t **conn_p);
void         ote_stream_conn_free(ote_stream_conn_t *conn);
/*
 * Called every idle check (ote_stream_iface_check_timeouts): a connection
 * that received nothing since the previous one and holds no bytes read
 * ahead frees its receive buffer; the next read allocates it again.
 */
void         ote_stream_conn_rx_idle(ote_stream_conn_t *conn);
/* Close the socket and fail every outstanding operation with status. */
void         ote_stream_conn_fail(ote_stream_conn_t *conn, ote_status_t status);
ote_status_t ote_stream_conn_tx_push(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr,
                                     const void *payload, size_t payload_len,
                                     ote_region_t *region, bool own_region);
/*
 * A message whose trailer is longer than OTE_STREAM_TRAILER_MAX (a WRITEV_ACK's
 * statuses): header and trailer are copied into a buffer the message owns.
 */
ote_status_t ote_stream_conn_tx_push_long(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr,
                                          const void *trailer, size_t trailer_len);
/*
 * Bytes without a header of their own (target: the pieces of a READV_RESP),
 * sent from region, whose reference the message takes.
 */
ote_status_t ote_stream_conn_tx_push_data(ote_stream_conn_t *conn, const void *payload,
                                          size_t payload_len, ote_region_t *region);
/* A by-reference request: header and 8-byte trailer, no payload. */
ote_status_t ote_stream_conn_tx_push_ref(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr,
                                         uint64_t trailer);
/*
 * A message with a trailer (at most OTE_STREAM_TRAILER_MAX bytes) and, with fd
 * >= 0, a descriptor: the connection owns fd from then on, also on error.
 */
ote_status_t ote_stream_conn_tx_push_fd(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr,
                                        const void *trailer, size_t trailer_len, int fd);
/* The oldest descriptor received and not claimed, or -1. */
int          ote_stream_conn_rx_fd_pop(ote_stream_conn_t *conn);
/* Log what the peer did wrong and close the connection with PROTOCOL. */
void         ote_stream_conn_protocol_error(ote_stream_conn_t *conn, const char *what);
/* Pop the oldest outstanding operation (initiator side). */
ote_stream_op_t ote_stream_conn_op_pop(ote_stream_conn_t *conn);
/* Target side: queue a reply without payload; on failure the connection closes. */
void         ote_stream_conn_reply(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr);
/* The oldest operation waiting for its answer, or NULL. */
ote_stream_op_t *ote_stream_conn_op_head(ote_stream_conn_t *c);
/* Stop (true) or resume reading the connection. */
void          ote_stream_conn_set_rx_paused(ote_stream_conn_t *c, bool on);
ote_status_t ote_stream_conn_op_push(ote_stream_conn_t *conn, const ote_stream_op_t *op);
void         ote_stream_conn_flush(ote_stream_conn_t *conn);
void         ote_stream_conn_rx(ote_stream_conn_t *conn);
/* Forget the regions a payload was going to (the target drops its references on them). */
void         ote_stream_conn_rx_regions_put(ote_stream_conn_t *conn);
void         ote_stream_conn_set_sockopts(ote_stream_iface_t *iface, int fd);

/*
 * The settings of a stream connection iface, given to ote_stream_iface_init by
 * the component that opens it: tcp fills all of them from OTE_TCP_*; cma
 * and shm only max_msg, from their own tables (<prefix>STREAM_MAX_MSG,
 * OTE_STREAM_MAX_MSG_ENTRY), and fix the rest.
 */
typedef struct {
    long   conns;   /* connections per peer         */
    size_t max_msg; /* largest data message         */
    size_t sndbuf;  /* SO_SNDBUF; 0 = autotuning    */
    size_t rcvbuf;  /* SO_RCVBUF; 0 = autotuning    */
    bool   nodelay;
    bool   vector;  /* small WRITEs (READs) merged into WRITEV (READV_REQ) */
} ote_stream_config_t;

/* Largest data message on a stream connection: default and bounds. */
#define OTE_STREAM_MAX_MSG_DFLT "64m"
#define OTE_STREAM_MAX_MSG_MIN  4096
#define OTE_STREAM_MAX_MSG_MAX  (1ll << 32)
/*
 * The entry STREAM_MAX_MSG of a component on the stream connection (cma:
 * OTE_CMA_STREAM_MAX_MSG, shm: OTE_SHM_STREAM_MAX_MSG), nested under the
 * component's prefix as the settings all of them share; OTE_TCP_MAX_MSG,
 * the way these components were tuned before they had their own, is still
 * read where it is not set. _offset: the size_t field it fills.
 */
#define OTE_STREAM_MAX_MSG_ENTRY(_offset)                                                   \
    {"STREAM_MAX_MSG", OTE_STREAM_MAX_MSG_DFLT, OTE_CFG_SIZE, (_offset),                           \
     "Largest data message on this component's stream connection; a peer announcing more "      \
     "is disconnected.",                                                                        \
     .min = OTE_STREAM_MAX_MSG_MIN, .max = OTE_STREAM_MAX_MSG_MAX, .alias = "TCP_MAX_MSG"}

/* stream_iface.c */
void ote_stream_iface_mark_dirty(ote_stream_iface_t *iface, ote_stream_conn_t *conn);
/*
 * Take an accepted socket as a target-side connection (admission limits,
 * handshake deadline). On error the socket is closed.
 */
ote_status_t ote_stream_iface_conn_accept(ote_stream_iface_t *iface, int fd,
                                          const struct sockaddr_storage *ss);
void ote_stream_iface_conn_closed(ote_stream_iface_t *iface, ote_stream_conn_t *conn);
/* conn has something the timeout check must watch (see watch above); idempotent. */
void ote_stream_iface_watch(ote_stream_iface_t *iface, ote_stream_conn_t *conn);
void ote_stream_iface_unwatch(ote_stream_iface_t *iface, ote_stream_conn_t *conn);
/*
 * Fields from the component's settings (cfg), hooks and params, shared by
 * tcp, cma and shm. The descriptors are set to -1 first, so that ote_stream_iface_close
 * can undo a failed init.
 */
ote_status_t ote_stream_iface_init(ote_stream_iface_t *iface, const ote_tl_resource_t *res,
                                   const ote_tl_iface_params_t *params,
                                   const ote_stream_config_t *cfg, const ote_stream_hooks_t *hooks);
/* epoll set with the listening socket; iface->listen_fd must be open. */
ote_status_t ote_stream_iface_epoll_init(ote_stream_iface_t *iface);
void     ote_stream_iface_close(ote_tl_iface_t *iface);
unsigned ote_stream_iface_progress(ote_tl_iface_t *iface);
void     ote_stream_iface_check_timeouts(ote_tl_iface_t *iface, uint64_t deadline_ns);
bool     ote_stream_iface_has_deadlines(ote_tl_iface_t *iface);
int      ote_stream_iface_event_fd(ote_tl_iface_t *iface);

/*
 * The iface ops of a component on the stream base: what the component gives
 * (query, its address, progress and event_arm, which may wrap the base's,
 * and close), the rest the base's (event fd, timeouts, ep_create), no
 * connection establishment through the engine (ep_open, ep_accept).
 */
#define OTE_STREAM_IFACE_OPS_INIT(_query, _get_address, _format_address, _progress, _event_arm, \
                                  _close)                                                      \
    {                                                                                          \
        .close          = (_close),                                                            \
        .query          = (_query),                                                            \
        .get_address    = (_get_address),                                                      \
        .format_address = (_format_address),                                                   \
        .event_fd       = ote_stream_iface_event_fd,                                           \
        .progress       = (_progress),                                                         \
        .event_arm      = (_event_arm),                                                        \
        .check_timeouts = ote_stream_iface_check_timeouts,                                     \
        .has_deadlines  = ote_stream_iface_has_deadlines,                                      \
        .ep_create      = ote_stream_ep_create,                                                \
        OTE_TL_IFACE_OPS_TO_IFACE_ONLY,                                                        \
    }

/* stream_ep.c */
/*
 * The ep ops of tcp, cma (by reference: hooks->ref_handle set) and shm (its
 * mappings first: hooks->post set).
 */
extern const ote_tl_ep_ops_t ote_stream_ep_ops;
ote_status_t ote_stream_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                                  const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p);
/*
 * Post one request of type on the connection stream_ep_pick chooses (the
 * previous request's, or the least loaded one past OTE_STREAM_PICK_RUN): WRITE
 * and READ_REQ stream bytes, PUT_REF and GET_REF carry local as their
 * trailer.
 */
ote_status_t ote_stream_ep_post(ote_stream_ep_t *ep, uint8_t type, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                ote_tl_completion_t *comp);
/* ote_stream_ep_post of a MAP whose copy (then: PUT_REF or GET_REF) waits for it. */
ote_status_t ote_stream_ep_post_map(ote_stream_ep_t *ep, uint8_t then, void *local, size_t length,
                                    ote_region_t *local_region, uint64_t remote_addr,
                                    ote_tl_completion_t *comp);
/* The connection an ep posts on now, or NULL while none is up. */
ote_stream_conn_t *ote_stream_ep_conn(ote_stream_ep_t *ep);
void   ote_stream_ep_destroy(ote_tl_ep_t *ep);
size_t ote_stream_ep_inflight_bytes(ote_tl_ep_t *ep);
bool   ote_stream_ep_is_alive(ote_tl_ep_t *ep);
/* See ote_tl_ep_ops_t: connections that failed, replaced through the handshake. */
bool         ote_stream_ep_needs_reconnect(ote_tl_ep_t *ep);
ote_status_t ote_stream_ep_reconnect(ote_tl_ep_t *ep, const ote_tl_peer_t *peer);
/*
 * Blocking exchange during connection setup: send h and payload_len bytes
 * of payload, receive the answer's header into h.
 */
ote_status_t ote_stream_handshake_step(int fd, ote_stream_hdr_t *h, const void *payload,
                                       size_t payload_len, uint64_t deadline);

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
