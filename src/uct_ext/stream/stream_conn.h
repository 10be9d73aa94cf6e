/*
 * The stream base's connection (stream_conn.c, stream_rx.c): one stream
 * socket, its send queue, the initiator's operations waiting for their
 * answer, and the receive state of the framing (stream_wire.h).
 */
#ifndef OTE_STREAM_CONN_H
#define OTE_STREAM_CONN_H

#include "base/auth.h"
#include "stream_hooks.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

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
/*
 * Target, tcp: the most payload bytes a read waits for (SO_RCVLOWAT,
 * stream_rx.c). A higher mark saves reads but starts each payload's copy
 * later and leaves more of its end to copy after the sender is done: a
 * caller with one batch in flight (a synchronous call) waits for both.
 */
#define OTE_STREAM_RX_LOWAT_MAX (256 * 1024)
#define OTE_STREAM_IOV_MAX  64
/* Queued messages one sendmsg takes at most (four full WRITEVs). */
#define OTE_STREAM_SEND_MAX (4 * OTE_STREAM_WRITEV_MAX)
/*
 * Target side: replies queued on one connection before it stops reading
 * requests; a peer that sends and never reads cannot grow our queue.
 */
#define OTE_STREAM_TX_PAUSE 4096
/*
 * Likewise for replies that carry a descriptor (shm's MAP_ACK): each holds
 * an open file until it is sent, and a peer that does not read must not
 * use up the target's descriptors.
 */
#define OTE_STREAM_TX_FDS_PAUSE 64

/* Descriptors one connection holds received and not yet claimed. */
#define OTE_STREAM_RX_FDS 8

/* Requests one by-reference connection may defer. */
#define OTE_STREAM_REF_GATHER 8

/* A by-reference request as read: header and the initiator's address. */
typedef struct {
    ote_stream_hdr_t hdr;
    uint64_t      peer_addr;
} ote_stream_ref_req_t;

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
    /* Its request's number in the send queue (tx_queued after it was queued). */
    uint64_t             tx_seq;
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
    /*
     * Messages queued and messages sent whole, ever: an answer to an
     * operation whose request has not left (op.tx_seq > tx_sent) is a
     * peer's lie, and the operation's buffer may still be in the queue.
     */
    uint64_t              tx_queued, tx_sent;
    size_t                tx_fds;      /* queued messages holding a descriptor */
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
    uint64_t              rx_stall_ns; /* target: since when a payload under way got nothing; 0 */
    ote_stream_rxv_t         rxv[OTE_STREAM_WRITEV_MAX]; /* the payload's destinations */
    size_t                rxv_i, rxv_n; /* the one being filled; how many */
    size_t                rx_remaining; /* payload bytes still to come */
    int                   rx_lowat; /* target, tcp: SO_RCVLOWAT set (1: default); -1: not used
                                     * (not tcp's target, or it failed while at 1) */
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
/*
 * Initiator: has the request of op (one of this connection's outstanding
 * operations) left whole? An answer before that is a protocol error.
 */
static inline bool ote_stream_conn_op_sent(const ote_stream_conn_t *c, const ote_stream_op_t *op)
{
    return op->tx_seq <= c->tx_sent;
}
/* Pop the oldest outstanding operation (initiator side). */
ote_stream_op_t ote_stream_conn_op_pop(ote_stream_conn_t *conn);
/* Target side: queue a reply without payload; on failure the connection closes. */
void         ote_stream_conn_reply(ote_stream_conn_t *conn, const ote_stream_hdr_t *hdr);
/* The oldest operation waiting for its answer, or NULL. */
ote_stream_op_t *ote_stream_conn_op_head(ote_stream_conn_t *c);
/* Stop (true) or resume reading the connection. */
void          ote_stream_conn_set_rx_paused(ote_stream_conn_t *c, bool on);
ote_status_t ote_stream_conn_op_push(ote_stream_conn_t *conn, const ote_stream_op_t *op);
/* Take back the newest push, whose message could not be queued. */
void         ote_stream_conn_op_unpush(ote_stream_conn_t *conn);
void         ote_stream_conn_flush(ote_stream_conn_t *conn);
void         ote_stream_conn_rx(ote_stream_conn_t *conn);
/*
 * Target side: a reference on the host-memory region that covers [addr,
 * addr+length) with access, as ote_mem_region_acquire takes it; a device
 * memory region is UNSUPPORTED (its bytes are never touched by the CPU
 * here: GPU memory is reached through staging).
 */
ote_status_t ote_stream_host_region_acquire(ote_stream_conn_t *conn, uint64_t addr,
                                            size_t length, unsigned access,
                                            ote_region_t **region_p);
/* Forget the regions a payload was going to (the target drops its references on them). */
void         ote_stream_conn_rx_regions_put(ote_stream_conn_t *conn);
void         ote_stream_conn_set_sockopts(ote_stream_iface_t *iface, int fd);

#endif
