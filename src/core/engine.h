/* Core internals: engine, workers, batches, tasks, segments. */
#ifndef OTE_CORE_ENGINE_H
#define OTE_CORE_ENGINE_H

#include "base/auth.h"
#include "base/config.h"
#include "ctl_msg.h"
#include "desc.h"
#include "meta.h"
#include "mem/mem.h"
#include "proto/proto.h"
#include "proto/stage.h"
#include "uct_ext/file/file.h"
#include "uct_ext/rdma/rdma.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#define OTE_MAX_WORKERS      64
#define OTE_MAX_IFACES       32

/* Engine-wide settings (variables without a component prefix). */
typedef struct {
    int    log_level;
    char  *tls;
    char  *net_devices;
    char  *metadata;
    char  *engine_name;
    long   num_workers;
    size_t slice_size;
    long   retry_count;
    size_t rail_max_bytes;
    long   rail_max_slices;
    long   rail_cooldown_ms;
    long   rail_cooldown_max_ms;
    long   connect_timeout_ms;
    long   xfer_timeout_ms;
    long   poll_grace_us;
    long   poll_spin_max_us;
    bool   progress_thread;
    char  *worker_cpus;
    size_t max_inflight_bytes;
    long   max_inflight_tasks;
    long   submit_timeout_ms;
    size_t max_ctl_msg;
    long   max_notif_backlog;
    long   notify_timeout_ms;
    long   max_conns;
    long   max_conns_per_peer;
    long   handshake_timeout_ms;
    char  *auth_key;
    char  *auth_key_file;
    char  *host_id;
} ote_engine_config_t;

extern const ote_config_table_t ote_engine_config_table;

/* Upper bound on the tables ote_engine_config_tables() lists. */
#define OTE_CONFIG_MAX_TABLES 32

/*
 * Every configuration table an engine reads, each once: the engine's, the
 * metadata store's, proto's, mem's, then the transport components'.
 * Returns how many were written to tables (at most max).
 */
size_t       ote_engine_config_tables(const ote_config_table_t **tables, size_t max);
/*
 * Warn about OTE_ variables no table knows, fill cfg from the engine-wide
 * table, and check every other table (a value that does not parse or is
 * out of range fails here with OTE_ERR_INVALID_PARAM).
 */
ote_status_t ote_engine_config_read(ote_engine_config_t *cfg);
void         ote_engine_config_release(ote_engine_config_t *cfg);
/* Every table with the values in effect (ote_info -c). */
ote_status_t ote_engine_config_print(FILE *stream);

typedef struct ote_worker   ote_worker_t;
typedef struct ote_task     ote_task_t;
typedef struct ote_ctl      ote_ctl_t;
typedef struct ote_notifier ote_notifier_t;

/* A transport resource the engine selected, with its md. */
typedef struct {
    ote_tl_resource_t resource;
    ote_md_t         *md;
    int               md_index;
    ote_tl_caps_t     caps;
} ote_engine_tl_t;

struct ote_worker {
    ote_engine_h     engine;
    size_t           index;
    pthread_t        thread;
    bool             started;
    pthread_mutex_t  lock;        /* held while progressing; ep setup takes it */
    int              epfd;
    int              wake_fd;
    ote_tl_iface_t  *ifaces[OTE_MAX_IFACES];
    size_t           num_ifaces;
    pthread_mutex_t  qlock;
    ote_slice_t     *qhead, *qtail;
    atomic_bool      sleeping;
    atomic_bool      idle_sleep;  /* asleep with no timer: nothing was in flight */
    _Atomic uint64_t active_ns;   /* last time progress handled events */
    atomic_bool      stop;
    /*
     * Threads in ote_batch_wait() that progress this worker themselves. While
     * there are some, the worker thread leaves the events that wake it to
     * them (it counts each time in missed), so that an answer wakes one
     * thread, not two.
     */
    atomic_int       callers;
    _Atomic uint64_t missed;
    uint64_t         next_timeout;  /* next check of OTE_XFER_TIMEOUT_MS (under lock) */
    uint64_t         event_gap_ns;  /* recent interval between events (worker thread) */
};

/*
 * The notification of one ote_batch_submit_notify() call: sent once every
 * task of the call completed. It counts as pending in its batch (and holds
 * a reference to it) until it ended; the batch frees it.
 */
typedef struct ote_notify_group {
    atomic_long              remaining;  /* tasks of the call not yet ended */
    _Atomic int              task_error; /* first error of a task that did not complete */
    _Atomic int              status;     /* INPROGRESS, then OK or why it was not delivered */
    ote_segment_h            segment;
    ote_batch_h              batch;
    struct ote_notify_group *next;       /* the batch's groups */
    size_t                   length;
    char                     data[];
} ote_notify_group_t;

struct ote_task {
    _Atomic int          state;        /* ote_task_state_t */
    ote_status_t         error;
    atomic_size_t        transferred;
    atomic_long          pending;      /* slices not yet ended */
    atomic_bool          cancel;
    _Atomic int          first_error;  /* ote_status_t of the first failed slice */
    size_t               length;
    size_t               num_slices;
    ote_slice_t         *slices;       /* inline_slice or allocated */
    ote_slice_t          inline_slice;
    ote_region_t        *local_region;
    ote_desc_t          *desc;         /* peer descriptor whose rkeys the slices use */
    ote_proto_route_t    route;        /* the rails its slices may take */
    ote_segment_h        segment;
    ote_batch_h          batch;
    ote_notify_group_t  *notify;
};

struct ote_batch {
    ote_engine_h     engine;
    size_t           capacity;
    size_t           used;          /* under lock */
    ote_task_t      *tasks;
    atomic_long      pending;       /* tasks not yet ended */
    atomic_long      refs;          /* user + one per pending task */
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    int              waiters;
    ote_notify_group_t *groups;     /* under lock; freed with the batch */
    bool             released;      /* the user released it (under engine batch_lock) */
    struct ote_batch *next, *prev;  /* batches the user still holds (engine batch_lock) */
};

struct ote_segment {
    ote_engine_h     engine;
    char             name[OTE_DESC_NAME_MAX + 1];
    char             ctl_addr[OTE_DESC_NAME_MAX + 1]; /* the bound instance's listener (seg->lock) */
    pthread_mutex_t  lock;          /* desc, ctl connection */
    pthread_mutex_t  refresh_lock;  /* one descriptor fetch at a time */
    atomic_uint      desc_gen;      /* descriptors adopted so far */
    ote_desc_t      *desc;          /* of the instance the segment is bound to */
    bool             same_host;
    ote_rail_t       rails[OTE_PROTO_MAX_RAILS];
    ote_rail_set_t   rail_set;
    int              ctl_fd;        /* request connection, -1 until needed */
    atomic_uint      ctl_seq;
    atomic_bool      closed;
    atomic_bool      stale;         /* the bound instance is gone (PEER_RESTARTED) */
    atomic_long      refs;          /* user + one per live task */
    struct ote_file *file;          /* a file segment's file, else NULL */
    _Atomic uint32_t rails_gen;     /* builds of the rails so far */
    pthread_mutex_t  spray_lock;    /* slices waiting for a rail; picking rails */
    ote_slice_t     *backlog_head, *backlog_tail;
    struct ote_segment *next, *prev;
};

struct ote_engine {
    ote_engine_config_t config;
    /*
     * Tables of the code core drives itself, read with the engine's own so
     * that the settings at creation hold for the engine's life: staging
     * (the target pool is made on the first request) and file segments.
     */
    ote_stage_config_t  stage_config;
    ote_file_config_t   file_config;
    ote_auth_t      *auth;          /* key and connection limits */
    char             name[OTE_DESC_NAME_MAX + 1];
    char             host_id[OTE_DESC_NAME_MAX + 1];
    char             ctl_addr[OTE_DESC_NAME_MAX + 1]; /* host:port peers reach the listener at */
    ote_meta_t      *meta;          /* etcd or Redis; NULL with the p2p metadata */
    char             bind_ip[64];
    char             advertise_ip[64];
    uint64_t         instance_id;
    ote_mem_table_t *regions;
    ote_engine_tl_t  tls[OTE_MAX_IFACES];
    size_t           num_tls;
    ote_rdma_t      *rdma;        /* RDMA devices from sysfs (OTE_SYSFS_ROOT) */
    ote_md_t        *mds[OTE_MEM_MAX_MDS];
    size_t           num_mds;
    ote_worker_t    *workers;
    size_t           num_workers;
    atomic_uint      next_worker;
    ote_ctl_t       *ctl;
    ote_notifier_t  *notifier;
    int              event_fd;
    atomic_bool      event_fd_used;
    int              poll_epfd;     /* every worker's epoll fd: waits without worker threads */
    _Atomic uint64_t wait_ns;       /* recent time ote_batch_wait() took (its polling budget) */
    /* admission (admission.c): reserved at submit, given back as tasks end */
    atomic_size_t    inflight_bytes;
    atomic_long      inflight_tasks;
    atomic_int       admit_waiters; /* submitters sleeping on admit_cond */
    pthread_mutex_t  admit_lock;
    pthread_cond_t   admit_cond;    /* CLOCK_MONOTONIC */
    /* batches the user holds, released at destroy */
    pthread_mutex_t  batch_lock;
    struct ote_batch *batches;
    /* notifications sent: one sequence counter; one lane per receiver instance */
    _Atomic uint64_t notify_seq;
    pthread_mutex_t  lane_lock;
    struct ote_notify_lane *lanes;
    /* received notifications */
    pthread_mutex_t  notif_lock;
    ote_notif_t     *notifs;
    size_t           notif_head, notif_count, notif_cap;
    struct ote_notif_senders *senders; /* last sequence per sender (under notif_lock) */
    /* open segments */
    pthread_mutex_t  seg_lock;
    struct ote_segment *segments;
};

/* worker.c */
ote_status_t ote_worker_init(ote_engine_h engine, ote_worker_t *w, size_t index);
ote_status_t ote_worker_start(ote_worker_t *w);
void         ote_worker_stop(ote_worker_t *w);
void         ote_worker_cleanup(ote_worker_t *w);
/* Queue a chain of slices for posting; wakes the worker if it sleeps. */
void         ote_worker_post(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail);
/* Queue a chain of slices for posting by the worker only (callable from any worker). */
void         ote_worker_queue(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail);
/* Progress w from the calling thread if its worker is idle; false if busy. */
bool         ote_worker_try_progress(ote_worker_t *w);
/*
 * Progress the engine's workers from the calling thread until *pending is
 * 0 (true) or deadline_ns (CLOCK_MONOTONIC ns, 0: none) passes or, with
 * worker threads, the polling budget runs out (false: sleep, the worker
 * threads progress). Without worker threads it sleeps on the workers'
 * event fds between rounds instead of giving up.
 */
bool         ote_engine_poll_wait(ote_engine_h engine, atomic_long *pending,
                                  uint64_t deadline_ns);
/* A wait took ns: the budget of the next ones follows it. */
void         ote_engine_wait_note(ote_engine_h engine, uint64_t ns);
void         ote_engine_signal_event(ote_engine_h engine);

/*
 * batch.c: a slice ended (worker thread, or a submitter posting directly):
 * a failure of its rail sends it to another rail of the same peer instance
 * (OTE_RETRY_COUNT), else it counts for its task.
 */
void ote_task_slice_done(ote_slice_t *slice, ote_status_t status);
/* batch.c: a slice ends for its task as it is, never posted again. */
void ote_task_slice_end(ote_slice_t *slice, ote_status_t status);

/*
 * spray.c: slices of seg's tasks wait in the segment's backlog and go to
 * rails as rails have room (ote_proto_rail_pick); with direct, the posting
 * thread may push them out itself (ote_worker_post), else the workers do.
 * A slice no rail may carry ends with its last error (CANCELED once the
 * segment closed or its rails were built again for another instance).
 */
void ote_segment_spray(ote_segment_h seg, ote_slice_t *head, ote_slice_t *tail, bool direct);
/* batch.c: a call's notification ended: OK (the peer queued it) or why not. */
void ote_batch_notify_end(ote_notify_group_t *group, ote_status_t status);
/* batch.c: release the batches the user still holds (engine destroy). */
void ote_batch_release_all(ote_engine_h engine);

/* admission.c */
/*
 * Reserve room for tasks and bytes in flight, or BUSY with nothing taken
 * (waiting up to OTE_SUBMIT_TIMEOUT_MS for room); release gives it back.
 */
ote_status_t ote_admission_reserve(ote_engine_h e, size_t tasks, size_t bytes);
void         ote_admission_release(ote_engine_h e, size_t tasks, size_t bytes);

/* segment_ctl.c: the control-plane client of a segment */
/* Close the segment's control connection (the next request opens another). */
void         ote_segment_ctl_close(ote_segment_h seg);
/* The peer's descriptor from its control listener (peer-to-peer metadata). */
ote_status_t ote_segment_fetch_desc(ote_segment_h seg, ote_desc_t **desc_p);
ote_status_t ote_segment_ctl_request(ote_segment_h seg, uint8_t type, const void *payload,
                                     size_t len, uint8_t expect, uint8_t **resp_p,
                                     size_t *resp_len_p);
/*
 * One request on a control connection of its own (seg->lock is not held
 * while it waits): for answers that take as long as a transfer (PUTBACK).
 */
ote_status_t ote_segment_ctl_request_alone(ote_segment_h seg, uint8_t type, const void *payload,
                                           size_t len, uint8_t expect, long timeout_ms,
                                           uint8_t **resp_p, size_t *resp_len_p);
void         ote_segment_put(ote_segment_h seg);
void         ote_segment_get(ote_segment_h seg);
/*
 * Before a submit: connections of native rails that failed (a timeout reset
 * them) are made again, bounded by OTE_CONNECT_TIMEOUT_MS. OTE_OK when
 * nothing was needed or all were made; OTE_ERR_PEER_RESTARTED (segment
 * marked stale) when the peer turned out to be another instance; else why
 * not (the rail's requests then fail with the transport's error).
 */
ote_status_t ote_segment_repair(ote_segment_h seg);

/* wireup.c: a segment's rails (their spraying state from the engine's configuration) */
/* Build the rails to the peer d describes (segment lock not held). */
ote_status_t ote_wireup_build(ote_segment_h seg, const ote_desc_t *d);
/*
 * Destroy the rails; with release, ask the peer (peer_instance) to drop
 * the eps it accepted for them.
 */
void         ote_wireup_destroy(ote_segment_h seg, bool release, uint64_t peer_instance);
/*
 * Reconnect native rails whose connections failed; with rebuild, also
 * rebuild the eps of rails that are no longer alive (ote_segment_refresh).
 */
ote_status_t ote_wireup_repair(ote_segment_h seg, const ote_desc_t *d, bool rebuild);
/* The name opens a file ("file:..."), not a peer. */
bool         ote_segment_is_file_name(const char *name);
/*
 * Native rails whose connections failed and whose cool-down ended (all of
 * them with force) are connected again: the probe before they carry again.
 */
ote_status_t ote_wireup_probe(ote_segment_h seg, const ote_desc_t *d, bool force);
/* The segment's peer instance is gone: later calls fail PEER_RESTARTED. */
void         ote_segment_mark_stale(ote_segment_h seg);
/* The segment's current descriptor with a reference; ote_segment_desc_put drops it. */
ote_desc_t  *ote_segment_desc_get(ote_segment_h seg);
void         ote_segment_desc_put(ote_desc_t *desc);

/* ctl.c: the control-plane listener */
ote_status_t ote_ctl_start(ote_engine_h engine, const char *listen_addr, ote_ctl_t **ctl_p,
                           char *bound, size_t bound_len);
ote_status_t ote_ctl_run(ote_ctl_t *ctl);
/*
 * Serve a PUTBACK whose remote range the caller found readable in this
 * engine's region table (it holds a reference on that region): open a
 * segment to the initiator by the name m carries (it must be the instance
 * m names), WRITE the range into m->local over it and wait for the end.
 * The status of that WRITE. Blocking: runs on a thread of its own.
 */
ote_status_t ote_putback_serve(ote_engine_h engine, const ote_ctl_putback_t *m);
/* The same WRITE with only the initiator's registration required (batch.c). */
ote_status_t ote_batch_submit_putback(ote_batch_h b, const ote_xfer_req_t *req,
                                      size_t *first_task_p);
void         ote_ctl_stop(ote_ctl_t *ctl);
/* Encode this engine's descriptor. */
ote_status_t ote_engine_desc_encode(ote_engine_h engine, ote_buf_t *out);
/* Queue a received notification; BUSY when the backlog is full. */
ote_status_t ote_engine_notif_push(ote_engine_h engine, const ote_ctl_notify_t *n);

/* notify.c: sender thread for notifications after batches */
ote_status_t ote_notifier_start(ote_engine_h engine, ote_notifier_t **n_p);
/* Sends what is queued (or ends it CANCELED where its segment closed), then stops. */
void         ote_notifier_stop(ote_notifier_t *n);
void         ote_notifier_queue(ote_notifier_t *n, ote_notify_group_t *group);
/* notify.c: the receiver's memory of its senders' sequence numbers */
ote_status_t ote_notif_senders_create(struct ote_notif_senders **s_p);
void         ote_notif_senders_destroy(struct ote_notif_senders *s);

/* select.c: OTE_TLS / OTE_NET_DEVICES */
typedef struct ote_select ote_select_t;
ote_status_t ote_select_parse(const char *tls, const char *devices, ote_select_t **sel_p);
bool         ote_select_tl(ote_select_t *sel, const char *tl_name);
bool         ote_select_device(ote_select_t *sel, const char *dev_name);
/*
 * A device that passed ote_select_device was used (why NULL), or why it
 * could not be. A name listed without ^ whose devices all came back with a
 * reason fails ote_select_check_unmatched, with those reasons: a device
 * named explicitly is used or the engine does not start.
 */
void         ote_select_device_result(ote_select_t *sel, const char *dev_name,
                                      const char *why);
/*
 * Names listed explicitly that matched nothing offered here (every resource
 * passed through ote_select_tl and, if a network one, ote_select_device),
 * or only devices reported unusable: OTE_ERR_NO_DEVICE, with a log line
 * naming them and what is here.
 */
ote_status_t ote_select_check_unmatched(ote_select_t *sel);
/* OTE_TLS is an exclusion list (^...) that names tl_name. */
bool         ote_select_excludes(const ote_select_t *sel, const char *tl_name);
void         ote_select_free(ote_select_t *sel);

/*
 * engine_rdma.c: the RDMA ports against OTE_NET_DEVICES once the transports
 * are open. A selected port that is unusable, or that no transport runs on,
 * is reported to the selection (see ote_select_device_result).
 */
void ote_engine_rdma_select(ote_engine_h e, ote_select_t *sel);
/* ote_info -d: each RDMA port, its GIDs, the one chosen and why not the others. */
void ote_engine_rdma_print(ote_engine_h e, ote_select_t *sel, FILE *f);

/* host.c */
void ote_host_id(char *buf, size_t len);

#endif
