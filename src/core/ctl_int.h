/*
 * Private to the control-plane listener: its connections and state, shared
 * by ctl.c (listener, connections, engine requests, the handler table),
 * ctl_proto.c (the requests protocols serve: STAGE and PUTBACK, and the
 * segments kept to initiators) and ctl_file.c (FILE_IO on exported files),
 * each registered as a service of the handler table.
 */
#ifndef OTE_CORE_CTL_INT_H
#define OTE_CORE_CTL_INT_H

#include "base/auth.h"
#include "ctl_msg.h"
#include "engine.h"
#include "proto/jobs.h"
#include "proto/stage.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define CTL_REPLY_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)
#define CTL_REPLY_MAX_NS     (20ull * 1000 * 1000 * 1000)
#define CTL_SNDBUF           (64 * 1024)
/* How often deadlines are checked while connections exist. */
#define CTL_SWEEP_MS 100
/* Requests served per connection and wakeup: one busy peer cannot starve the others. */
#define CTL_READ_BUDGET 16

typedef struct ctl_conn {
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
    bool               waiting;  /* a PUTBACK or FILE_IO is served: not read until answered */
    struct ctl_conn   *next, *prev;
} ctl_conn_t;

/* A request served by a thread of one of the listener's pools; answered on conn_id. */
typedef struct ctl_job {
    ote_proto_job_t job;     /* first: the pool's entry */
    ote_ctl_t      *ctl;
    uint64_t        conn_id; /* the connection the answer goes on */
    uint32_t        seq;     /* the request's sequence, the answer's */
    struct ctl_job *next;    /* ended, not answered yet (done_lock) */
} ctl_job_t;

/* A PUTBACK served by a thread of the listener's pool, and its answer. */
typedef struct putback_job {
    ctl_job_t           base;   /* first */
    ote_ctl_putback_t   m;
    ote_region_t       *region; /* the checked range's, held until answered */
    ote_status_t        status;
} putback_job_t;

/* PUTBACKs accepted at once per engine (running or queued); more are answered BUSY. */
#define CTL_PUTBACK_MAX 64
/*
 * Threads that serve them: a pool of the listener's own, apart from the
 * engine's protocol pool, so that two engines reading from each other
 * cannot hold every thread waiting for answers the other's queued
 * PUTBACKs would give.
 */
#define CTL_PUTBACK_THREADS 4
/* Initiators whose segment stays open between their PUTBACKs. */
#define CTL_PUTBACK_PEERS 16

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
    unsigned      refs;     /* PUTBACKs and FILE_IOs using it now */
    uint64_t      used_ns;
    bool          opening;
    bool          stale;    /* closed by the last user */
} putback_peer_t;

/* A FILE_IO served by a thread of the listener's file pool, and its answer. */
typedef struct file_io_job {
    ctl_job_t           base;    /* first */
    ote_ctl_file_io_t   m;
    uint8_t            *payload; /* the request (m.data points into it) */
    ote_fexport_file_t *file;    /* held until answered */
    uint8_t            *buf;     /* READ not by rails: the bytes read */
    size_t              done;    /* READ: the bytes read (by rails: written to the initiator) */
    ote_status_t        status;
} file_io_job_t;

/* FILE_IOs accepted at once per engine (running or queued); more are answered BUSY. */
#define CTL_FILE_IO_MAX     64
/* Threads doing their I/O (pread/pwrite block): apart from the PUTBACK pool. */
#define CTL_FILE_IO_THREADS 4

/*
 * A bounce buffer of FILE_IOs by rails (OTE_CTL_FILE_IO_MAX_BYTES, engine
 * memory registered for local use only): one per file pool thread, made on
 * first use, freed when the listener stops.
 */
typedef struct {
    void     *addr;
    ote_mem_h mem;
    bool      busy;
} file_bounce_t;

struct ote_ctl {
    ote_engine_h engine;
    int          listen_fd;
    int          epfd;
    int          stop_fd;
    pthread_t    thread;
    bool         started;
    ctl_conn_t  *conns;
    long         num_conns;
    ote_stage_target_t *stage; /* remote staging pool, made on first use */
    uint64_t     next_conn_id;
    int          done_fd;      /* eventfd: a PUTBACK ended */
    pthread_mutex_t done_lock; /* done, jobs, peers */
    pthread_cond_t  done_cond;
    ctl_job_t      *done;      /* PUTBACKs ended, not answered yet */
    unsigned        jobs;      /* running or queued */
    ote_proto_jobs_t *pool;    /* PUTBACK threads, started on the first request */
    putback_peer_t  peers[CTL_PUTBACK_PEERS];
    unsigned long   putback_opens; /* segments opened to serve PUTBACKs, FILE_IOs by rails */
    ctl_job_t      *file_done;     /* FILE_IOs ended, not answered yet (done_lock) */
    unsigned        file_jobs;     /* running or queued (done_lock) */
    ote_proto_jobs_t *file_pool;   /* FILE_IO threads, started on the first request */
    file_bounce_t   bounce[CTL_FILE_IO_THREADS]; /* FILE_IOs by rails (done_lock) */
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
 * The listener's job pools (PUTBACK, FILE_IO): admit one job (BUSY when max
 * are running or queued, *count of them; the pool, of threads threads, is
 * made on the first one), then submit it to run for c's current request,
 * c not read until its answer. A job that could not be admitted or
 * submitted is not counted (its status returned).
 */
ote_status_t ote_ctl_job_start(ote_ctl_t *ctl, ctl_conn_t *c, ote_proto_jobs_t **pool_p,
                               unsigned *count, const char *name, unsigned threads,
                               unsigned max, ctl_job_t *job, ote_proto_job_cb_t run);
/*
 * A job ended and is answered: the connection it answers on, if still
 * there and waiting for it, reads again with the job's seq as the
 * answer's; NULL otherwise. ote_ctl_job_done: the job no longer counts.
 */
ctl_conn_t  *ote_ctl_job_conn(ote_ctl_t *ctl, const ctl_job_t *job);
void         ote_ctl_job_done(ote_ctl_t *ctl, unsigned *count);
/* A pool thread: the job ended; it joins *done_p and the listener is woken to answer it. */
void         ote_ctl_job_end(ote_ctl_t *ctl, ctl_job_t **done_p, ctl_job_t *job);
/*
 * The listener: answer each job of *done_p on its connection if still there
 * (answer failing: the connection closes), count it done, release it.
 */
void         ote_ctl_job_answer_all(ote_ctl_t *ctl, ctl_job_t **done_p, unsigned *count,
                                    ote_status_t (*answer)(ote_ctl_t *ctl, ctl_conn_t *c,
                                                           ctl_job_t *job),
                                    void (*release)(ote_ctl_t *ctl, ctl_job_t *job));
/* The listener stopped, its pool drained: release the jobs ended and not answered. */
void         ote_ctl_job_drop_all(ote_ctl_t *ctl, ctl_job_t **done_p, unsigned *count,
                                  void (*release)(ote_ctl_t *ctl, ctl_job_t *job));

/*
 * The listener's handler table. A service serves some request types (each
 * with its handler and the answer type that carries AUTH when the request
 * comes before authentication) and may keep state of the listener's: the
 * hooks below, each optional, are called for every registered service.
 * ctl.c registers the services, one line each (ctl_services); a request
 * type is served by exactly one handler (test/unit/core/test_codec).
 */
typedef struct {
    uint8_t type;        /* a request (ote_ctl_type_info) */
    uint8_t refuse_type; /* its answer when refused before authentication */
    /* A complete request (c->h, c->payload); non-OK closes the connection. */
    ote_status_t (*handle)(ote_ctl_t *ctl, ctl_conn_t *c);
} ote_ctl_handler_t;

typedef struct {
    const char              *name;
    const ote_ctl_handler_t *handlers;
    size_t                   num_handlers;
    /* The listener thread, woken on done_fd: answer the jobs that ended. */
    void (*answer)(ote_ctl_t *ctl);
    /* The listener thread, every CTL_SWEEP_MS while connections exist. */
    void (*sweep)(ote_ctl_t *ctl, uint64_t now_ns);
    /* c is closed: forget what was kept for it. */
    void (*conn_gone)(ote_ctl_t *ctl, ctl_conn_t *c);
    /* The listener thread ended; connections still open. In table order. */
    void (*stop)(ote_ctl_t *ctl);
    /* After stop, every connection closed. */
    void (*destroy)(ote_ctl_t *ctl);
} ote_ctl_service_t;

/* The registered services (*count_p of them), in the order they are stopped. */
const ote_ctl_service_t *const *ote_ctl_services(size_t *count_p);
/* The handler of a request type; NULL when no registered service serves it. */
const ote_ctl_handler_t *ote_ctl_handler_find(uint8_t type);

/* ctl_proto.c: STAGE; PUTBACK and the segments it keeps to initiators */
extern const ote_ctl_service_t ote_ctl_stage_service;
extern const ote_ctl_service_t ote_ctl_putback_service;
/*
 * The segment to the initiator engine name (instance initiator), opened
 * once and shared by its PUTBACKs and FILE_IOs by rails; *slot_p is its
 * cache entry, or -1 for a segment of this request alone (every entry
 * taken). PEER_RESTARTED unless name is served by that instance;
 * UNREACHABLE when it cannot be found. Takes a reference.
 */
ote_status_t ote_ctl_peer_seg_get(ote_ctl_t *ctl, const char *name, uint64_t initiator,
                                  ote_segment_h *seg_p, int *slot_p);
/* Drop the reference; a segment that failed (status) is closed by its last user. */
void         ote_ctl_peer_seg_put(ote_ctl_t *ctl, ote_segment_h seg, int slot,
                                  ote_status_t status);

/* ctl_file.c: FILE_IO requests on exported files */
extern const ote_ctl_service_t ote_ctl_file_io_service;

#endif
