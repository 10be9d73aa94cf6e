/*
 * Inside src/core/obs/: the counters' layout, their snapshot, and the
 * series renderers the endpoint and ote_engine_stats share.
 */
#ifndef OTE_CORE_OBS_OBS_INT_H
#define OTE_CORE_OBS_OBS_INT_H

#include "core/engine_facts.h"
#include "obs.h"

#include <pthread.h>

#define OBS_SHARDS       8   /* a thread's own, or the last, shared (counters.c) */
#define OBS_TL_MAX       OTE_OBS_TL_NONE /* (transport, device) pairs an engine counts */
#define OBS_TL_NONE      OTE_OBS_TL_NONE /* requests that ended before any rail */
#define OBS_TL_SLOTS     (OBS_TL_MAX + 1)
#define OBS_IFACE_CACHE  256 /* iface -> pair, one per worker and transport */
#define OBS_STATUS_SLOTS 32  /* -ote_status_t */
#define OBS_LAT_BOUNDS   22
#define OBS_SIZE_BOUNDS  13
#define OBS_OPS          2
#define OBS_META_RESULTS 3   /* ok, not_found, error */
#define OBS_MEM_TYPES    2   /* host, cuda */

extern const uint64_t ote_obs_lat_bounds_ns[OBS_LAT_BOUNDS];
extern const uint64_t ote_obs_size_bounds[OBS_SIZE_BOUNDS];

/*
 * Every counter the data path bumps, declared once with the type T of each
 * cell: a shard holds them as atomics, a snapshot as their sums. Every
 * member is an array of (or one) 64-bit cell, so both are flat arrays of
 * cells in the same order.
 */
#define OBS_COUNTERS(T)                                                                     \
    T xfer_bytes[OBS_OPS][OBS_TL_SLOTS];                                                  \
    T xfer_reqs[OBS_OPS][OBS_TL_SLOTS];                                                   \
    T xfer_fail[OBS_OPS][OBS_STATUS_SLOTS];                                               \
    T lat[OBS_OPS][OBS_LAT_BOUNDS + 1]; /* last: +Inf */                                  \
    T lat_sum_ns[OBS_OPS];                                                                \
    T size[OBS_OPS][OBS_SIZE_BOUNDS + 1];                                                 \
    T size_sum[OBS_OPS];                                                                  \
    T rail_bytes[OBS_TL_SLOTS];                                                           \
    T rail_errors[OBS_TL_SLOTS];                                                          \
    T rail_failovers[OBS_TL_SLOTS];                                                       \
    T notif_sent, notif_recv;                                                             \
    T notif_fail[OBS_STATUS_SLOTS];                                                       \
    T registrations, peer_restarts, admission_rej;                                        \
    T meta[OBS_META_RESULTS];

typedef struct {
    OBS_COUNTERS(uint64_t)
} obs_counts_t;

/* One shard: a thread's share of the counters. */
typedef struct {
    OBS_COUNTERS(_Atomic uint64_t)
} __attribute__((aligned(64))) obs_shard_t;

_Static_assert(sizeof(_Atomic uint64_t) == sizeof(uint64_t), "counter cells are 64 bits");
_Static_assert(sizeof(obs_counts_t) <= sizeof(obs_shard_t), "a shard holds every counter");

typedef struct {
    char transport[OTE_TL_NAME_MAX];
    char device[OTE_TL_DEV_MAX];
} obs_pair_t;

struct ote_obs {
    ote_engine_h     engine;
    ote_obs_sources_t sources;
    char             store[8];         /* p2p, etcd, redis */
    pthread_mutex_t  lock;             /* interning only (first slice of an iface) */
    obs_pair_t       pairs[OBS_TL_MAX];
    _Atomic size_t   num_pairs;
    struct {
        _Atomic(const void *) iface;
        uint8_t               pair;
    } cache[OBS_IFACE_CACHE];
    _Atomic size_t   num_cache;
    char             endpoint_addr[96]; /* where the endpoint listens, "" none */
    obs_shard_t      shards[OBS_SHARDS];
};

/* A copy of one engine's counters and gauges. */
typedef struct {
    char       engine[OTE_DESC_NAME_MAX + 1];
    char       store[8];
    char       transports[256];        /* this engine's transports, comma list */
    size_t     num_pairs;
    obs_pair_t pairs[OBS_TL_MAX];
    int        rail_state[OBS_TL_MAX]; /* 1 active, 0 not */
    /* The shards' sums: by name, or all of them as counts. */
    union {
        obs_counts_t counts;
        struct {
            OBS_COUNTERS(uint64_t)
        };
    };
    uint64_t   inflight_reqs, inflight_bytes;
    uint64_t   registered_bytes[OBS_MEM_TYPES];
    uint64_t   segments_open;
} ote_obs_snap_t;

/* Copy e's counters (see the locks in obs.h). */
void ote_obs_snapshot(ote_engine_h e, ote_obs_snap_t *snap);

/* Where rendered samples go. */
typedef struct ote_obs_sink ote_obs_sink_t;
struct ote_obs_sink {
    /* A family begins (once per family, before its samples). */
    void (*family)(ote_obs_sink_t *sink, const char *name, const char *type, const char *help);
    /* One sample: labels in exposition form without the engine's ("" none). */
    int  (*sample)(ote_obs_sink_t *sink, const ote_obs_snap_t *snap, const char *name,
                   const char *type, const char *labels, double value);
};

/*
 * Every family, each over every snapshot in snaps (family-major, as the
 * exposition format wants one group per family). Stops when a sample
 * callback returns non-zero, and returns that.
 */
int ote_obs_render(const ote_obs_snap_t *const *snaps, size_t count, ote_obs_sink_t *sink);

/* The exposition text of snaps, malloc'ed (NULL: no memory). */
char *ote_obs_expose(const ote_obs_snap_t *const *snaps, size_t count, size_t *len_p);

/* counters.c: a short, stable, lower-case name of a status for labels ("timeout"). */
const char *ote_obs_status_label(int slot);

#endif
