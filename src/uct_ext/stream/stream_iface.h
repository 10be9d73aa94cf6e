/*
 * The stream base's iface (stream_iface.c): the listening socket, the
 * epoll set and the connections it progresses, its settings
 * (ote_stream_config_t) and the iface ops a component on the base gets.
 */
#ifndef OTE_STREAM_IFACE_H
#define OTE_STREAM_IFACE_H

#include "base/auth.h"
#include "stream_hooks.h"

#include <stdbool.h>

/*
 * While one initiator connection alone waits for answers, progress reads
 * it directly and consults the epoll set (other connections, accepts,
 * EPOLLOUT) every this many rounds; an iface without connections looks
 * for accepts as often.
 */
#define OTE_STREAM_EPOLL_EVERY 8

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

struct ote_stream_iface {
    ote_tl_iface_t          super;
    int                     listen_fd;
    /*
     * accept4 found no descriptor (or memory): the listen socket is out of
     * the epoll set until then (0: it is in), so that its level-triggered
     * report does not spin the worker; the timeout check puts it back.
     */
    uint64_t                accept_resume;
    int                     epfd;
    ote_mem_table_t        *regions;
    pthread_mutex_t        *worker_lock;
    uint64_t                instance_id;
    ote_stream_config_t     cfg;        /* as the component gave it */
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

#endif
