/*
 * Private to the control-plane listener: its connections and state, shared
 * by ctl.c (listener, connections, the engine's own requests, the handler
 * table and the host it hands the protocols' services) and ctl_peer.c (the
 * segments kept open to initiators, and transfers on them, for the
 * protocols' target sides). The protocols serve their own requests
 * (proto/ctl_target.h: STAGE, PUTBACK, FILE_IO), each registered as a
 * service of the handler table.
 */
#ifndef OTE_CORE_CTL_INT_H
#define OTE_CORE_CTL_INT_H

#include "base/auth.h"
#include "ctl.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "proto/ctl_target.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define CTL_REPLY_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)
#define CTL_REPLY_MAX_NS     (20ull * 1000 * 1000 * 1000)
#define CTL_SNDBUF           (64 * 1024)
/* Requests served per connection and wakeup: one busy peer cannot starve the others. */
#define CTL_READ_BUDGET 16

/* A control connection (ote_ctl_conn_t to the protocols' services). */
typedef struct ote_ctl_conn {
    int                fd;
    char               peer[64]; /* ip:port, for logs      */
    char               ip[64];   /* for per-peer admission */
    uint64_t           handshake_deadline; /* 0 once the peer proved itself */
    ote_auth_session_t auth;
    uint8_t            hdr[OTE_CTL_HDR_LEN];
    size_t             hdr_got;
    ote_ctl_hdr_t      h;
    uint8_t           *payload;
    size_t             got;
    /* reply waiting for the socket to drain */
    uint8_t           *out;
    size_t             out_len, out_sent;
    uint64_t           out_deadline; /* no progress by then: reset */
    uint64_t           out_limit;    /* not drained by then: reset  */
    bool               close_after_send;
    uint64_t           id;       /* unique in this listener: answers find it by it */
    bool               waiting;  /* a job serves its request: not read until answered */
    struct ote_ctl_conn *next, *prev;
} ctl_conn_t;

/* Initiators whose segment stays open between their PUTBACKs and FILE_IOs by rails. */
#define CTL_PEERS 16

/*
 * The segment a PUTBACK (or FILE_IO by rails) target opened to an
 * initiator, kept for its next requests: opened once per initiator
 * instance, closed when evicted (least recently used, unreferenced), when
 * it failed, and when the listener stops.
 */
typedef struct {
    char          name[256];
    uint64_t      instance;
    ote_segment_h seg;      /* NULL while opening */
    unsigned      refs;     /* requests using it now */
    uint64_t      used_ns;
    bool          opening;
    bool          stale;    /* closed by the last user */
} ctl_peer_t;

/* The services the listener may list (ctl.c's table, one line each). */
#define CTL_MAX_SERVICES 8

struct ote_ctl {
    ote_engine_h engine;
    int          listen_fd;
    int          epfd;
    int          stop_fd;
    pthread_t    thread;
    bool         started;
    ctl_conn_t  *conns;
    long         num_conns;
    uint64_t     next_conn_id;
    int          done_fd;      /* eventfd: a service's job ended (host.wake) */
    /*
     * Listener thread: when the earliest deadline it was told of falls due
     * (a handshake, a reply the peer does not read, a service's sweep);
     * UINT64_MAX when none is pending. The listener sleeps until then, or
     * without a timer: an idle engine's open control connections cost it
     * no wake-up. A deadline that went away (a handshake that ended) costs
     * one sweep at its time, which computes the next from what is left.
     */
    uint64_t     next_sweep;
    /*
     * accept4 failed for want of a descriptor (or memory): the listen
     * socket is out of the epoll set, whose level-triggered report would
     * otherwise spin the thread, until then (0: it is in).
     */
    uint64_t     accept_resume;
    /* What the protocols' services are given, and the state each made. */
    ote_ctl_host_t  host;
    void           *svc_state[CTL_MAX_SERVICES];
    pthread_mutex_t peer_lock; /* peers, peer_opens */
    pthread_cond_t  peer_cond; /* a peer's segment opened */
    ctl_peer_t      peers[CTL_PEERS];
    unsigned long   peer_opens; /* segments opened to serve PUTBACKs, FILE_IOs by rails */
    atomic_ulong    desc_served;   /* GET_DESC requests answered */
    /*
     * The last descriptor GET_DESC encoded (control thread only): served
     * again while the region table's generation and everything else the
     * descriptor says (its skeleton: transports, mds, exports) are unchanged.
     */
    ote_buf_t       desc_cache;
    ote_buf_t       desc_skel;
    uint64_t        desc_gen;
    bool            desc_valid;
    atomic_ulong    desc_encodes;  /* full encodings for GET_DESC */
};

/* Send a reply (a and b concatenated), or keep what the socket does not take. */
ote_status_t ote_ctl_reply(ote_ctl_t *ctl, ctl_conn_t *c, uint8_t type, const void *a,
                           size_t alen, const void *b, size_t blen);
void         ote_ctl_conn_close(ote_ctl_t *ctl, ctl_conn_t *c);
void         ote_ctl_conn_set_events(ote_ctl_t *ctl, ctl_conn_t *c, uint32_t events);

/*
 * The listener's handler table: the services (proto/ctl_target.h) ctl.c
 * lists, one line each; a request type is served by exactly one handler
 * (test/unit/core/test_codec).
 */
/* The registered services (*count_p of them), in the order they are stopped. */
const ote_ctl_service_t *const *ote_ctl_services(size_t *count_p);
/* The handler of a request type; NULL when no registered service serves it. */
const ote_ctl_handler_t *ote_ctl_handler_find(uint8_t type);

/* The state service made (NULL when it is not listed or made none). */
void        *ote_ctl_service_state(ote_ctl_t *ctl, const ote_ctl_service_t *svc);

/* ctl_peer.c: the segments kept to initiators (the host's peer_seg_get, peer_seg_put). */
ote_status_t ote_ctl_peer_seg_get(void *ctx, const char *name, uint64_t initiator,
                                  ote_segment_h *seg_p, int *slot_p);
void         ote_ctl_peer_seg_put(void *ctx, ote_segment_h seg, int slot, ote_status_t status);
/* The listener stopped, its services' jobs ended: close every kept segment. */
void         ote_ctl_peers_close(ote_ctl_t *ctl);

#endif
