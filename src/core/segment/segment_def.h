/*
 * The objects of src/core/segment/ (segment.h says what the room owns and
 * may call): the room's own state in the engine and a segment. Types
 * only, so that the room's files (wire-up, spray, exports) and the rooms
 * above read them without drawing an arrow to segment.c.
 */
#ifndef OTE_CORE_SEGMENT_DEF_H
#define OTE_CORE_SEGMENT_DEF_H

#include "core/engine_facts.h"
#include "fexport.h"

#include <pthread.h>

/* What segment/ owns of the engine (the engine embeds it). */
struct ote_segment_table {
    pthread_mutex_t     seg_lock;
    struct ote_segment *segments;   /* open segments */
    /* files exported to peers (fexport.c), served by the control listener */
    ote_fexport_table_t fexports;
    /*
     * Ends the slices waiting in seg's backlog that no rail may carry now
     * (the segment closed, or its rails were built anew): the spray's
     * (spray.c), set by the engine. A segment's life calls it, not
     * spray.c, which reports slices' ends up to xfer/.
     */
    void (*backlog_end)(ote_segment_h seg);
};

static inline ote_segment_table_t *ote_segment_table(ote_engine_h e)
{
    return ote_engine_facts(e)->segs;
}

/* Idle control connections a segment keeps for requests that run side by side. */
#define OTE_SEGMENT_CTL_POOL 8

struct ote_segment {
    ote_engine_h     engine;
    char             name[OTE_DESC_NAME_MAX + 1];
    char             ctl_addr[OTE_DESC_NAME_MAX + 1]; /* the bound instance's listener (seg->lock) */
    pthread_mutex_t  lock;          /* desc, ctl connection */
    /*
     * One refresh, reopen or re-read at a time (fetch_lock, held across the
     * peer's answer), and what changes the rails from what it fetched, a
     * repair or a close (refresh_lock, taken inside fetch_lock): a submit's
     * repair check waits for the second only, never for a peer slow to
     * answer a descriptor fetch.
     */
    pthread_mutex_t  fetch_lock;
    pthread_mutex_t  refresh_lock;
    atomic_uint      desc_gen;      /* descriptors adopted so far */
    /*
     * Descriptor fetches of refreshes started so far (raised under
     * fetch_lock as one starts), and the number of the one whose
     * descriptor was adopted last (both locks): a refresh shares another's
     * result only when that fetch started after it was called.
     */
    _Atomic uint64_t fetch_started;
    uint64_t         fetch_adopted;
    ote_desc_t      *desc;          /* of the instance the segment is bound to */
    /* Page index of desc for the range checks (xfer/batch_check.c; seg->lock), built for */
    struct ote_range_index *range_index; /* range_index_desc at desc_gen range_index_gen */
    const ote_desc_t *range_index_desc;
    unsigned         range_index_gen;
    bool             same_host;
    ote_rail_t       rails[OTE_PROTO_MAX_RAILS];
    ote_rail_set_t   rail_set;
    /* The rails the last request's plan chose, for rails_gen plan_memo_gen (seg->lock). */
    ote_proto_plan_memo_t plan_memo;
    uint32_t         plan_memo_gen;
    /*
     * The request connection, -1 until needed, and the lock of its
     * request-replies (ote_segment_ctl_request): apart from seg->lock,
     * which submits take, so that a peer slow to answer a request
     * (a notification, a descriptor) holds no submit on the segment. Taken
     * before seg->lock where both are.
     */
    pthread_mutex_t  ctl_lock;
    int              ctl_fd;
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
    /*
     * The peer instance the rails were last built for, stored before they
     * are: a slice planned for another one is not posted on them (a reopen
     * rebuilt them for a new instance; proto.h, ote_proto_route_t).
     */
    _Atomic uint64_t rails_instance;
    pthread_mutex_t  spray_lock;    /* slices waiting for a rail; picking rails */
    ote_slice_t     *backlog_head, *backlog_tail;
    atomic_bool      backlog_any;   /* the backlog holds slices (set under spray_lock) */
    struct ote_segment *next, *prev;
    /* Re-reads of the descriptor for remote ranges it lacks (segment_reread.c) */
    pthread_mutex_t  reread_lock;
    pthread_cond_t   reread_cond;   /* a re-read ended, or the interval may have */
    bool             reread_busy;   /* one is in flight */
    _Atomic uint64_t reread_started; /* re-reads started so far (written under reread_lock,
                                        read without it: ote_segment_reread_ticket) */
    uint64_t         reread_ended;  /* and ended */
    uint64_t         reread_last_ns; /* when the last one started (0: none yet) */
    ote_status_t     reread_status; /* how the last one ended */
};

/* After a close or a rebuild of seg's rails: its waiting slices end (backlog_end). */
static inline void ote_segment_backlog_end(ote_segment_h seg)
{
    ote_segment_table(seg->engine)->backlog_end(seg);
}

#endif
