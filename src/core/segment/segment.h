/*
 * src/core/segment/: segments, peers (or files) opened by name.
 *
 * Owns: a segment's life and descriptor (segment.c), its control client
 * and pool (segment_ctl.c), re-reads of its descriptor (segment_reread.c)
 * and its page index for the remote-range checks (range_index.c),
 * a peer's exported file as a segment (segment_export.c) and this engine's
 * exports (fexport.c), its rails' wire-up (wireup.c) and the spray of its
 * slices onto them (spray.c).
 *
 * May call: worker/ (the ifaces rails are opened on, the workers that
 * post slices), meta/ (lookups), wire/ (descriptor and control codecs),
 * the engine's header; proto and below. Never ctl/ or xfer/, but for a
 * slice's end reported to its task (spray.c -> xfer/batch.h).
 */
#ifndef OTE_CORE_SEGMENT_H
#define OTE_CORE_SEGMENT_H

#include "core/engine.h"

/* Idle control connections a segment keeps for requests that run side by side. */
#define OTE_SEGMENT_CTL_POOL 8

struct ote_segment {
    ote_engine_h     engine;
    char             name[OTE_DESC_NAME_MAX + 1];
    char             ctl_addr[OTE_DESC_NAME_MAX + 1]; /* the bound instance's listener (seg->lock) */
    pthread_mutex_t  lock;          /* desc, ctl connection */
    pthread_mutex_t  refresh_lock;  /* one descriptor fetch at a time */
    atomic_uint      desc_gen;      /* descriptors adopted so far */
    ote_desc_t      *desc;          /* of the instance the segment is bound to */
    /* Page index of desc for the range checks (xfer/batch_check.c; seg->lock), built for */
    struct ote_range_index *range_index; /* range_index_desc at desc_gen range_index_gen */
    const ote_desc_t *range_index_desc;
    unsigned         range_index_gen;
    bool             same_host;
    ote_rail_t       rails[OTE_PROTO_MAX_RAILS];
    ote_rail_set_t   rail_set;
    int              ctl_fd;        /* request connection, -1 until needed */
    atomic_uint      ctl_seq;
    atomic_bool      closed;
    atomic_bool      stale;         /* the bound instance is gone (PEER_RESTARTED) */
    bool             internal;      /* opened by the engine itself (the control listener's
                                       PUTBACK), not by the application: not in
                                       ote_segments_open; set before it is listed */
    atomic_long      refs;          /* user + one per live task */
    /* A local object's segment (a file: uct_ext/tl.h), its object and ops, else NULL. */
    struct ote_tl_object *file;
    const ote_tl_object_ops_t *object_ops;
    /* A peer's exported file (segment_export.c): its name there, else "" */
    char             export_name[OTE_DESC_NAME_MAX + 1];
    char             peer_name[OTE_DESC_NAME_MAX + 1]; /* the engine exporting it */
    uint64_t         export_file_id; /* the file's id at that engine's instance */
    /* OTE_FILE_REMOTE=auto: the peer's rails did not reach this engine, by ctl from now on */
    atomic_bool      export_rails_off;
    /* Idle control connections for requests that run side by side (FILE_IO) */
    pthread_mutex_t  ctl_pool_lock;
    int              ctl_pool[OTE_SEGMENT_CTL_POOL];
    size_t           ctl_pool_len;
    _Atomic uint32_t rails_gen;     /* builds of the rails so far */
    pthread_mutex_t  spray_lock;    /* slices waiting for a rail; picking rails */
    ote_slice_t     *backlog_head, *backlog_tail;
    atomic_bool      backlog_any;   /* the backlog holds slices (set under spray_lock) */
    struct ote_segment *next, *prev;
    /* Re-reads of the descriptor for remote ranges it lacks (segment_reread.c) */
    pthread_mutex_t  reread_lock;
    pthread_cond_t   reread_cond;   /* a re-read ended, or the interval may have */
    bool             reread_busy;   /* one is in flight */
    uint64_t         reread_started; /* re-reads started so far */
    uint64_t         reread_ended;  /* and ended */
    uint64_t         reread_last_ns; /* when the last one started (0: none yet) */
    ote_status_t     reread_status; /* how the last one ended */
};

/*
 * A segment of name with no descriptor and no rails, its control client
 * aimed at ctl_addr (one reference; ote_segment_put frees it). NULL: no
 * memory.
 */
ote_segment_h ote_segment_new_bare(ote_engine_h e, const char *name, const char *ctl_addr);

/* segment_ctl.c: the control-plane client of a segment */
/*
 * The status a peer answered a control request with, as is; when it is
 * OTE_ERR_AUTH and this engine has no key, the error log line says that the
 * peer requires OTE_AUTH_KEY.
 */
ote_status_t ote_segment_ctl_refused(ote_segment_h seg, ote_status_t status);
/*
 * Whether the engine holder describes still serves its name, asked for its
 * descriptor at holder->ctl_addr within probe_ms (connect, authentication
 * and answer): OTE_OK when that instance of that name answered;
 * OTE_ERR_NOT_FOUND when the connection was refused, nothing answered in
 * time, or another instance or name answered there; another status when
 * that cannot be told (an address that does not parse or resolve,
 * authentication, a malformed or error answer, a connection closed
 * without one). A meta.h holder_cb.
 */
ote_status_t ote_segment_probe_holder(ote_engine_h e, const ote_desc_t *holder, long probe_ms);
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
/*
 * One request on an idle connection of the segment's pool, or a new one
 * when none is idle; the connection goes back to the pool after a
 * complete exchange. For requests that may be sent twice (a reused
 * connection the peer closed meanwhile is retried once on a new one).
 */
ote_status_t ote_segment_ctl_request_pooled(ote_segment_h seg, uint8_t type, const void *payload,
                                            size_t len, uint8_t expect, long timeout_ms,
                                            uint8_t **resp_p, size_t *resp_len_p);
/* Close the pool's idle connections (the peer's address changed, or the segment goes). */
void         ote_segment_ctl_pool_drain(ote_segment_h seg);
void         ote_segment_put(ote_segment_h seg);
void         ote_segment_get(ote_segment_h seg);
/*
 * Before a submit: connections of native rails that failed (a timeout reset
 * them) are made again, bounded by OTE_CONNECT_TIMEOUT_MS; rails whose ep
 * failed for good (UCT) get new eps after a descriptor fetch (as a
 * refresh does). Both once the rail's cool-down ended, or at once when no
 * rail may carry. OTE_OK when nothing was needed or all were made;
 * OTE_ERR_PEER_RESTARTED (segment marked stale) when the peer turned out
 * to be another instance; else why not (the rail's requests then fail
 * with the peer's side of the error: REMOTE_DISCONNECT or TIMEOUT).
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
/*
 * Rails for the network ifaces none of the segment's rails runs on yet
 * (devices that joined here or at the peer since the build), appended
 * (refresh lock held, same peer instance).
 */
void         ote_wireup_extend(ote_segment_h seg, const ote_desc_t *d);
/* The name opens a component's local object ("file:..."), not a peer. */
bool         ote_segment_is_object_name(const char *name);

/* segment_export.c: a peer's exported file as a segment */
/* The name ("<export>@<engine name>") opens a peer's exported file. */
bool         ote_segment_is_export_name(const char *name);
/* Find the export in the peer's descriptor; its descriptor and rails. */
ote_status_t ote_segment_open_export(ote_segment_h seg, const char *name, ote_desc_t **desc_p);
/*
 * Read the peer's descriptor again (refresh_lock held): *desc_p is the
 * segment's next; a new peer instance is PEER_RESTARTED (segment marked
 * stale) unless rebind, which builds the rails to it.
 */
ote_status_t ote_segment_resolve_export(ote_segment_h seg, bool rebind, ote_desc_t **desc_p,
                                        int *restarted_p);
/*
 * Native rails whose connections failed and whose cool-down ended (all of
 * them with force) are connected again: the probe before they carry again.
 */
ote_status_t ote_wireup_probe(ote_segment_h seg, const ote_desc_t *d, bool force);
/* The segment's peer instance is gone: later calls fail PEER_RESTARTED. */
void         ote_segment_mark_stale(ote_segment_h seg);
/* ote_segment_open for the engine's own use (seg->internal). */
ote_status_t ote_segment_open_internal(ote_engine_h e, const char *name, ote_segment_h *seg_p);
/* The segment's current descriptor with a reference; ote_segment_desc_put drops it. */
ote_desc_t  *ote_segment_desc_get(ote_segment_h seg);
void         ote_segment_desc_put(ote_desc_t *desc);

/*
 * segment_reread.c: a remote range the segment's descriptor lacks. The
 * count of re-reads started so far, read before looking the range up
 * (reread_lock taken inside).
 */
uint64_t     ote_segment_reread_ticket(ote_segment_h seg);
/*
 * Read the peer's descriptor again for a range the descriptor lacked when
 * ticket was taken: returns once a re-read that started after that has
 * ended (this caller's, or another's it waited for). One runs at a time,
 * at most one starts per OTE_DESC_REREAD_INTERVAL_MS (a caller that finds
 * the last one too recent waits for the interval to end), and the wait is
 * bounded by that interval plus OTE_CONNECT_TIMEOUT_MS twice (then
 * OTE_ERR_TIMEOUT). OTE_OK when that re-read adopted a descriptor (look
 * the range up again), else why not (the fetch's status:
 * OTE_ERR_PEER_RESTARTED, OTE_ERR_REMOTE_DISCONNECT, ...).
 */
ote_status_t ote_segment_reread(ote_segment_h seg, uint64_t ticket);
/* Set up and tear down the segment's re-read state (segment.c). */
void         ote_segment_reread_init(ote_segment_h seg);
void         ote_segment_reread_fini(ote_segment_h seg);

/*
 * spray.c: slices of seg's tasks wait in the segment's backlog and go to
 * rails as rails have room (ote_proto_rail_pick); with direct, the posting
 * thread may push them out itself (ote_worker_post), else the workers do.
 * A slice no rail may carry ends with its last error (CANCELED once the
 * segment closed or its rails were built again for another instance).
 */
void ote_segment_spray(ote_segment_h seg, ote_slice_t *head, ote_slice_t *tail, bool direct);

#endif
