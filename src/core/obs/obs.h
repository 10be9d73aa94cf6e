/*
 * src/core/obs/: the engine's observability.
 *
 * Owns: the counters and histograms the data path bumps (one shard per
 * thread slot, relaxed atomics: the data path takes no lock for them), the
 * per-batch telemetry a batch keeps (read by ote_batch_telemetry in
 * xfer/batch_telemetry.c), their snapshot and rendering
 * (Prometheus text exposition 0.0.4, ote_engine_stats), and the metrics
 * endpoint (OTE_METRICS_ADDR: libmicrohttpd on a thread of its own, shared
 * by the engines of one process that ask for the same address).
 *
 * May call: the engine's facts (engine_facts.h: names, transports, the
 * region table's visit), proto and base; what a snapshot reads of the
 * rooms above it (rails, admission, open segments) it asks through the
 * ote_obs_sources_t the engine gives at creation. Core calls in through
 * this header only; nothing here is called by proto, mem or uct_ext.
 *
 * Locks: a scrape copies counters under no lock of the data path; it takes
 * the process's endpoint registry lock (never held by the data path), the
 * engine's seg_lock and each segment's lock for as long as the rails
 * source (ote_engine_rails) copies rail states, the region table's read lock
 * for a walk of the regions, and the counters' own lock (obs->lock) to
 * list the (transport, device) pairs. The data path takes obs->lock only
 * the first time a slice ends on an interface (to learn its pair; after
 * OBS_IFACE_CACHE interfaces, on every slice of the interfaces beyond).
 */
#ifndef OTE_CORE_OBS_OBS_H
#define OTE_CORE_OBS_OBS_H

#include "proto/proto.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ote_obs ote_obs_t;

/* A task's obs_tl before any slice ended on a rail. */
#define OTE_OBS_TL_NONE 32

/* What a batch keeps for ote_batch_telemetry() (in struct ote_batch). */
typedef struct {
    _Atomic uint64_t start_ns;      /* first submit (CLOCK_MONOTONIC), 0: none yet */
    _Atomic uint64_t start_real_us; /* the same moment, CLOCK_REALTIME in us       */
    _Atomic uint64_t post_ns;       /* time inside submit calls                     */
    _Atomic uint64_t end_ns;        /* latest end of a task (CLOCK_MONOTONIC)       */
    _Atomic uint64_t bytes;         /* transferred by its ended tasks               */
    _Atomic uint64_t requests;      /* requests submitted                           */
    _Atomic uint64_t ended;         /* requests ended                               */
    _Atomic uint64_t completed;     /* requests ended COMPLETED                     */
} ote_obs_batch_t;

/*
 * What a snapshot reads of the rooms above obs/, asked through functions
 * the engine gives at creation (obs/ calls no room above it).
 */
typedef struct {
    /* The rails of the open segments, as ote_engine_rails (ote.h) gives them. */
    ote_status_t (*rails)(ote_engine_h e, ote_rail_info_t *out, size_t max, size_t *count_p);
    /* Tasks and bytes in flight (admission), segments the application holds open. */
    void (*load)(ote_engine_h e, uint64_t *tasks_p, uint64_t *bytes_p, uint64_t *segments_p);
} ote_obs_sources_t;

/*
 * Create the engine's counters. metadata: the engine's metadata URI ("p2p",
 * "etcd://...", "redis://...") for the store label; sources: what a
 * snapshot reads of the engine (copied).
 */
ote_status_t ote_obs_create(ote_engine_h e, const char *metadata, const ote_obs_sources_t *sources,
                            ote_obs_t **obs_p);
void         ote_obs_destroy(ote_obs_t *obs);

/*
 * With OTE_METRICS_ADDR set: serve this engine's series on that address
 * (starting the endpoint, or joining the one of this process already
 * there). UNSUPPORTED in a build without libmicrohttpd, INVALID_PARAM for a
 * malformed address, IO when it cannot be bound; each with a log line.
 */
ote_status_t ote_obs_endpoint_attach(ote_engine_h e);
/* Leave the endpoint (stopped with its last engine); no scrape sees e after. */
void         ote_obs_endpoint_detach(ote_engine_h e);

/* ---- data path hooks (any thread, lock-free) ------------------------------ */

/*
 * A slice ended on rail (NULL: never bound to one) with status; failover:
 * it goes to another rail. Counts its bytes for its op and the rail's
 * transport (OK: length; an error: the bytes that landed before it, unless
 * it goes again), the rail's errors and failovers, and notes the transport
 * in the task (*task_tl).
 */
void ote_obs_slice_end(ote_obs_t *obs, const ote_slice_t *s, const ote_rail_t *rail,
                       ote_status_t status, bool failover, _Atomic uint8_t *task_tl);
/*
 * A submit call of the batch that began at begin_ns is about to post its
 * count tasks (they may end at once): they count as requests, and the
 * first starts the batch's clock.
 */
void ote_obs_batch_posting(ote_obs_batch_t *tel, uint64_t begin_ns, size_t count);
/* A submit call that began at begin_ns returns, whatever its status: its time. */
void ote_obs_batch_submitted(ote_obs_batch_t *tel, uint64_t begin_ns);
/*
 * A task of the batch whose telemetry is tel ended with err (task_finalize):
 * requests, failures, histograms, telemetry. write: a WRITE (else READ);
 * pair: the transport/device pair that carried it (ote_obs_pair); start_ns:
 * its submit; length: its size; bytes: what it transferred.
 */
void ote_obs_task_end(ote_obs_t *obs, ote_obs_batch_t *tel, bool write, uint8_t pair,
                      uint64_t start_ns, size_t length, uint64_t bytes, ote_status_t err);
/* A notification (standalone or after a batch) ended with status. */
void ote_obs_notify_sent(ote_obs_t *obs, ote_status_t status);
/* A notification was queued for ote_notify_recv (duplicates are not). */
void ote_obs_notify_received(ote_obs_t *obs);
/* count regions registered (ote_mem_register, ote_mem_alloc). */
void ote_obs_registered(ote_obs_t *obs, size_t count);
/* A segment found its peer restarted. */
void ote_obs_peer_restart(ote_obs_t *obs);
/* A submit was refused for the admission limits (OTE_ERR_BUSY). */
void ote_obs_admission_rejected(ote_obs_t *obs);
/* A descriptor was fetched from the metadata (p2p peer or store) with status. */
void ote_obs_metadata_request(ote_obs_t *obs, ote_status_t status);

#endif
