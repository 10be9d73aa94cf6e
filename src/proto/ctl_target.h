/*
 * The target side of the protocols' control messages (STAGE, PUTBACK,
 * FILE_IO): what a protocol registers with the engine's control listener,
 * and what core gives it to serve its requests.
 *
 * A protocol registers a service (ote_ctl_service_t): the request types it
 * serves, each with its handler and the answer that refuses it before
 * authentication, and hooks on the listener's events (answer the jobs that
 * ended, the periodic sweep, a connection closed, stop, destroy), each with
 * the state its create hook made. The listener (core/ctl/ctl.c) dispatches
 * every request through the table of the services it lists, one line each,
 * and never switches on a message type.
 *
 * Core hands each service a host (ote_ctl_host_t): the engine's facts and
 * the operations a target side needs, as function pointers on an opaque
 * context, so that proto includes nothing of core: replying on a
 * connection and holding it while a job serves its request, waking the
 * listener to answer ended jobs, the segments kept open to initiators and
 * transfers on them, the engine's exported files, engine memory.
 */
#ifndef OTE_PROTO_CTL_TARGET_H
#define OTE_PROTO_CTL_TARGET_H

#include "jobs.h"
#include "mem/mem.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The answer that refuses a request before authentication (the control
 * plane's AUTH_DONE, carrying AUTH; core's ctl_msg.h checks they agree).
 */
#define OTE_CTL_REFUSE_AUTH_DONE 7

/* A control connection (core's); a handler answers on it through the host. */
typedef struct ote_ctl_conn ote_ctl_conn_t;
/* An exported file (core's), held while a request uses it. */
typedef struct ote_fexport_file ote_ctl_file_t;

/* A held connection and its request, for the answer (conn_hold, conn_resume). */
typedef struct {
    uint64_t conn_id;
    uint32_t seq;
} ote_ctl_ticket_t;

/* One complete request, as the listener hands it to its handler. */
typedef struct {
    ote_ctl_conn_t *conn;
    const char     *peer;    /* ip:port, for logs */
    const char     *peer_ip; /* its address alone: the peer's share of a job pool */
    uint8_t         type;
    /* The handler may keep it (set payload NULL): then it frees it. */
    uint8_t        *payload;
    size_t          length;
} ote_ctl_req_t;

typedef struct ote_ctl_host {
    void                     *ctx; /* core's listener: the first argument of every op */
    /* The engine's facts. */
    uint64_t                  instance_id;  /* requests name it as their target */
    ote_mem_table_t          *regions;      /* the region table ranges are checked in */
    const void               *stage_config; /* ote_stage_config_t (stage.h) */
    long                      xfer_timeout_ms;

    /* Send a reply (a and b concatenated) to c's current request. */
    ote_status_t (*reply)(void *ctx, ote_ctl_conn_t *c, uint8_t type, const void *a,
                          size_t alen, const void *b, size_t blen);
    /*
     * c's request is answered later (a job serves it): c is not read until
     * then. *ticket_p names c and its request for conn_resume.
     */
    void (*conn_hold)(void *ctx, ote_ctl_conn_t *c, ote_ctl_ticket_t *ticket_p);
    /*
     * The listener thread: the connection a ticket names, if still there and
     * held, read again with the ticket's request as the current one (the
     * reply's); NULL otherwise.
     */
    ote_ctl_conn_t *(*conn_resume)(void *ctx, const ote_ctl_ticket_t *ticket);
    void (*conn_close)(void *ctx, ote_ctl_conn_t *c);
    /*
     * The listener thread: the peer has closed c (its sending side): it
     * gave up on the request just read and will read no answer.
     */
    bool (*conn_peer_closed)(void *ctx, ote_ctl_conn_t *c);
    /* Any thread: the listener calls every service's answer hook soon. */
    void (*wake)(void *ctx);
    /*
     * The listener thread (a handler): the service's sweep is due at when_ns.
     * The listener keeps no periodic timer: a deadline it is not told of
     * is seen only at the next sweep that another one causes.
     */
    void (*sweep_at)(void *ctx, uint64_t when_ns);

    /*
     * The segment to the initiator engine name (instance initiator), kept
     * open between requests and shared by PUTBACKs and FILE_IOs by rails;
     * *slot_p its cache entry, or -1 for a segment of this request alone.
     * PEER_RESTARTED unless name is served by that instance, UNREACHABLE
     * when it cannot be found. Takes a reference.
     */
    ote_status_t (*peer_seg_get)(void *ctx, const char *name, uint64_t initiator,
                                 ote_segment_h *seg_p, int *slot_p);
    /* Drop the reference; a segment that failed (status) is closed by its last user. */
    void (*peer_seg_put)(void *ctx, ote_segment_h seg, int slot, ote_status_t status);
    /*
     * One transfer for a peer's request over seg, blocking until it ended
     * (bounded by the transfer timeout; a task canceled past it is waited
     * for). putback: a PUTBACK's WRITE (no putback rail in front of it).
     */
    ote_status_t (*peer_xfer)(void *ctx, ote_segment_h seg, ote_op_t op, void *local,
                              uint64_t remote, size_t length, bool putback);

    /* Exported files: the file with this id, held (NOT_FOUND once unexported). */
    ote_status_t (*file_acquire)(void *ctx, uint64_t id, ote_ctl_file_t **f_p);
    void         (*file_release)(void *ctx, ote_ctl_file_t *f);
    /* The range within the exported size (OUT_OF_BOUNDS), the access (ACCESS). */
    ote_status_t (*file_check)(const ote_ctl_file_t *f, bool write, uint64_t offset,
                               uint32_t length);
    /* pwrite data, or pread into buf; *done_p the bytes moved. Blocking. */
    ote_status_t (*file_io)(const ote_ctl_file_t *f, bool write, uint64_t offset,
                            uint32_t length, const uint8_t *data, uint8_t *buf,
                            size_t *done_p);

    /* Engine memory registered for local use only (peers reach it through no access). */
    ote_status_t (*mem_alloc)(void *ctx, size_t length, void **addr_p, ote_mem_h *mem_p);
    void         (*mem_free)(void *ctx, ote_mem_h mem);
} ote_ctl_host_t;

/*
 * A control message type and its role: a request a listener accepts, with
 * the largest payload it may announce, or a response that only travels
 * back to an initiator (both: the handshake's proof). Core's codec reads
 * the rows of its own types and of every service's (ote_ctl_type_info).
 */
typedef struct {
    uint8_t     type;
    const char *name;        /* "OTE_CTL_PUTBACK", ... */
    bool        request;     /* a listener accepts it */
    bool        response;    /* a listener sends it */
    size_t      request_max; /* request: largest payload, before the configured limit */
} ote_ctl_type_info_t;

#define OTE_CTL_TYPE_REQUEST(_t, _max)                                                         \
    {.type = (_t), .name = #_t, .request = true, .request_max = (_max)}
#define OTE_CTL_TYPE_RESPONSE(_t) {.type = (_t), .name = #_t, .response = true}

/* A request type a service serves. */
typedef struct {
    uint8_t type;        /* a request (core's ote_ctl_type_info) */
    uint8_t refuse_type; /* its answer when refused before authentication */
    /* A complete request; non-OK closes the connection. */
    ote_status_t (*handle)(const ote_ctl_host_t *host, void *state, ote_ctl_req_t *req);
} ote_ctl_handler_t;

/*
 * A service of the listener: its request types and hooks, each optional,
 * called with the state create made (NULL without create).
 */
typedef struct {
    const char              *name;
    /* The message types it defines (a protocol's requests and answers). */
    const ote_ctl_type_info_t *types;
    size_t                   num_types;
    const ote_ctl_handler_t *handlers;
    size_t                   num_handlers;
    /* The listener starts: make the service's state. */
    ote_status_t (*create)(const ote_ctl_host_t *host, void **state_p);
    /* The listener thread, woken (host->wake): answer the jobs that ended. */
    void (*answer)(const ote_ctl_host_t *host, void *state);
    /*
     * The listener thread, at the time the service asked for
     * (host->sweep_at) or later, and whenever another deadline fell due:
     * release what expired by now_ns. Returns when it is due next (the
     * earliest deadline still pending), 0 when nothing is.
     */
    uint64_t (*sweep)(const ote_ctl_host_t *host, void *state, uint64_t now_ns);
    /* c is closed: forget what was kept for it. */
    void (*conn_gone)(const ote_ctl_host_t *host, void *state, ote_ctl_conn_t *c);
    /* The listener thread ended; connections still open. In table order. */
    void (*stop)(const ote_ctl_host_t *host, void *state);
    /* After stop, every connection closed: free the state. */
    void (*destroy)(const ote_ctl_host_t *host, void *state);
} ote_ctl_service_t;

/*
 * A protocol's service that serves one request with one answer and refuses
 * it with OTE_CTL_REFUSE_AUTH_DONE before authentication (stage, putback and
 * file_io): its type and handler tables and ote_proto_<_name>_service, whose
 * other fields (create, stop, ...) follow the handler.
 */
#define OTE_CTL_ONE_REQUEST_SERVICE(_name, _req, _max, _ack, _handle, ...)                     \
    static const ote_ctl_type_info_t _name##_types[] = {                                       \
        OTE_CTL_TYPE_REQUEST(_req, _max),                                                      \
        OTE_CTL_TYPE_RESPONSE(_ack),                                                           \
    };                                                                                         \
    static const ote_ctl_handler_t _name##_handlers[] = {                                      \
        {.type = (_req), .refuse_type = OTE_CTL_REFUSE_AUTH_DONE, .handle = (_handle)},        \
    };                                                                                         \
    const ote_ctl_service_t ote_proto_##_name##_service = {                                    \
        .name         = #_name,                                                                \
        .types        = _name##_types,                                                         \
        .num_types    = sizeof(_name##_types) / sizeof(_name##_types[0]),                      \
        .handlers     = _name##_handlers,                                                      \
        .num_handlers = sizeof(_name##_handlers) / sizeof(_name##_handlers[0]),                \
        __VA_ARGS__}

/* The protocols' services (stage_target.c, putback_target.c, file_io_target.c). */
extern const ote_ctl_service_t ote_proto_stage_service;
extern const ote_ctl_service_t ote_proto_putback_service;
extern const ote_ctl_service_t ote_proto_file_io_service;

/*
 * A service's job pool: requests that block (a transfer, a pread) are
 * served by a bounded pool of threads of the listener's, made on the
 * first request, and answered by the listener thread once they ended.
 *
 * The pool is shared fairly among the peers' addresses: one address has at
 * most OTE_CTL_JOBS_PEER_RUNNING(threads) jobs running and
 * OTE_CTL_JOBS_PEER_MAX(max) accepted at once, its other accepted jobs
 * wait for a thread in a queue of their own, and a thread that frees up
 * takes the next job of the next address that has one (in turn). A peer
 * whose requests block for long (a name that never answers) then holds
 * at most all threads but one, and another peer's request runs at once.
 */
#define OTE_CTL_JOBS_PEER_RUNNING(_threads) ((_threads) > 1 ? (_threads) - 1 : 1)
#define OTE_CTL_JOBS_PEER_MAX(_max)         ((_max) - (_max) / 4)

typedef struct ote_ctl_jobs_peer ote_ctl_jobs_peer_t;

typedef struct ote_ctl_job {
    ote_proto_job_t             job;  /* first: the pool's entry */
    const ote_ctl_host_t       *host;
    struct ote_ctl_jobs        *jobs; /* the pool it runs on */
    ote_ctl_jobs_peer_t        *peer; /* its address's share */
    ote_ctl_ticket_t            ticket; /* the connection and request it answers */
    /* Waiting for a thread (its peer's queue), then ended, not answered yet (jobs->done). */
    struct ote_ctl_job         *next;
} ote_ctl_job_t;

/* Answer an ended job on c (non-OK: c closes); release a job answered or dropped. */
typedef ote_status_t (*ote_ctl_job_answer_cb_t)(const ote_ctl_host_t *host, ote_ctl_conn_t *c,
                                                ote_ctl_job_t *job);
typedef void (*ote_ctl_job_release_cb_t)(ote_ctl_job_t *job);

/* One address's jobs (a slot is free while it has none accepted). */
struct ote_ctl_jobs_peer {
    char           ip[64];
    unsigned       accepted; /* running, waiting or ended and not answered */
    unsigned       running;  /* handed to the pool */
    ote_ctl_job_t *head, *tail; /* waiting for a thread */
};

typedef struct ote_ctl_jobs {
    const char              *name;
    unsigned                 threads;
    unsigned                 max;   /* accepted at once (running or queued); more are BUSY */
    ote_ctl_job_answer_cb_t  answer;
    ote_ctl_job_release_cb_t release;
    pthread_mutex_t          lock;  /* everything below */
    ote_proto_jobs_t        *pool;
    unsigned                 count;   /* accepted, not yet answered */
    unsigned                 running; /* handed to the pool (at most threads) */
    bool                     stopping;
    ote_ctl_jobs_peer_t     *peers;   /* max slots */
    unsigned                 turn;    /* the slot whose waiting job goes next */
    ote_ctl_job_t           *done;    /* ended, not answered yet */
} ote_ctl_jobs_t;

ote_status_t ote_ctl_jobs_init(ote_ctl_jobs_t *q, const char *name, unsigned threads,
                               unsigned max, ote_ctl_job_answer_cb_t answer,
                               ote_ctl_job_release_cb_t release);
/*
 * Admit job (BUSY when max are accepted, or the peer's share is; the pool
 * is made on the first one) and run it for req, whose connection is held
 * until its answer: now, or once a thread is free for it. A job that could
 * not be admitted or submitted is not counted (its status returned).
 */
ote_status_t ote_ctl_jobs_start(ote_ctl_jobs_t *q, const ote_ctl_host_t *host,
                                ote_ctl_req_t *req, ote_ctl_job_t *job,
                                ote_proto_job_cb_t run);
/* A pool thread: the job ended; the listener is woken to answer it. */
void         ote_ctl_jobs_end(ote_ctl_job_t *job);
/*
 * The service hooks of a service whose state begins with its jobs:
 * answer: the listener answers each ended job on its connection if still
 * there (answer failing: the connection closes), counts it done, releases
 * it; stop: the listener stopped, every accepted job runs to its end, the
 * pool goes, the jobs ended and not answered are released.
 */
void         ote_ctl_jobs_answer_all(const ote_ctl_host_t *host, void *state);
void         ote_ctl_jobs_stop(const ote_ctl_host_t *host, void *state);
void         ote_ctl_jobs_destroy(ote_ctl_jobs_t *q);
/* Threads the pool runs now (0 before the first request). */
unsigned     ote_ctl_jobs_threads(ote_ctl_jobs_t *q);

/* The putback service's pool threads (state: the service's). */
unsigned     ote_proto_putback_target_threads(void *state);

#endif
