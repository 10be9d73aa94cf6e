/*
 * The counters the data path bumps and their snapshot. A thread takes a
 * shard of its own, the first free one of OBS_SHARDS - 1, once, and gives
 * it back when it exits; its increments are then a relaxed load and store
 * (no other thread writes there, and readers load each cell whole), not a
 * locked read-modify-write. Threads beyond them share the last shard, and
 * add to it atomically. A snapshot sums the shards.
 */
#include "obs_int.h"
#include "base/util.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The status label of each failure slot (expo.c renders them). */
static const char *const status_labels[OBS_STATUS_SLOTS] = {
    [0] = "other",           [1] = "invalid_param",      [2] = "no_memory",
    [3] = "not_registered",  [4] = "out_of_bounds",      [5] = "access",
    [6] = "unreachable",     [7] = "not_found",          [8] = "timeout",
    [9] = "canceled",        [10] = "remote_disconnect", [11] = "busy",
    [12] = "io",             [13] = "unsupported",       [14] = "protocol",
    [15] = "auth",           [16] = "exists",            [17] = "peer_restarted",
    [18] = "no_device",      [19] = "store_unavailable",  [20] = "remote_not_registered",
};

const char *ote_obs_status_label(int slot)
{
    return (slot >= 0 && slot < OBS_STATUS_SLOTS) ? status_labels[slot] : NULL;
}

/* Request to completion: 1 us to 10 s, 1-2.5-5 per decade. */
const uint64_t ote_obs_lat_bounds_ns[OBS_LAT_BOUNDS] = {
    1000ull,       2500ull,       5000ull,       10000ull,      25000ull,       50000ull,
    100000ull,     250000ull,     500000ull,     1000000ull,    2500000ull,     5000000ull,
    10000000ull,   25000000ull,   50000000ull,   100000000ull,  250000000ull,   500000000ull,
    1000000000ull, 2500000000ull, 5000000000ull, 10000000000ull,
};

/* Request sizes: 64 B to 1 GiB, powers of 4. */
const uint64_t ote_obs_size_bounds[OBS_SIZE_BOUNDS] = {
    64ull,        256ull,         1024ull,         4096ull,   16384ull,
    65536ull,     262144ull,      1048576ull,      4194304ull, 16777216ull,
    67108864ull,  268435456ull,   1073741824ull,
};

#define OBS_SHARED_SHARD (OBS_SHARDS - 1)

static atomic_bool obs_shard_taken[OBS_SHARED_SHARD];
static pthread_key_t obs_shard_key;
static bool obs_shard_key_ok;
static pthread_once_t obs_shard_once = PTHREAD_ONCE_INIT;
static OTE_THREAD_LOCAL int obs_shard_index = -1;
static OTE_THREAD_LOCAL bool obs_shard_own; /* obs_shard_index is this thread's alone */

/* At the thread's exit: its shard is free for another thread. */
static void obs_shard_give_back(void *slot)
{
    int i = (int)(intptr_t)slot - 1;

    obs_shard_index = -1;
    obs_shard_own   = false;
    /* Its last increments happen before the next owner's (that one's acquire). */
    atomic_store_explicit(&obs_shard_taken[i], false, memory_order_release);
}

static void obs_shard_key_init(void)
{
    obs_shard_key_ok = pthread_key_create(&obs_shard_key, obs_shard_give_back) == 0;
}

/* A library unloaded before its threads exit leaves them no destructor to call. */
__attribute__((destructor)) static void obs_shard_key_fini(void)
{
    if (obs_shard_key_ok)
        pthread_key_delete(obs_shard_key);
}

static int shard_claim(void)
{
    pthread_once(&obs_shard_once, obs_shard_key_init);
    for (int i = 0; obs_shard_key_ok && i < OBS_SHARED_SHARD; i++) {
        bool no = false;

        if (atomic_load_explicit(&obs_shard_taken[i], memory_order_relaxed) ||
            !atomic_compare_exchange_strong_explicit(&obs_shard_taken[i], &no, true,
                                                     memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        if (pthread_setspecific(obs_shard_key, (void *)(intptr_t)(i + 1)) != 0) {
            atomic_store_explicit(&obs_shard_taken[i], false, memory_order_release);
            break;
        }
        obs_shard_own = true;
        return i;
    }
    return OBS_SHARED_SHARD;
}

static inline obs_shard_t *shard(ote_obs_t *obs)
{
    int i = obs_shard_index;

    if (i < 0)
        obs_shard_index = i = shard_claim();
    return &obs->shards[i];
}

/* Add to a cell of this thread's shard (shard() was called first). */
static inline void obs_add(_Atomic uint64_t *cell, uint64_t n)
{
    if (obs_shard_own)
        atomic_store_explicit(cell, atomic_load_explicit(cell, memory_order_relaxed) + n,
                              memory_order_relaxed);
    else
        atomic_fetch_add_explicit(cell, n, memory_order_relaxed);
}

#define ADD(field, n) obs_add(&(field), (uint64_t)(n))

static inline int status_slot(ote_status_t status)
{
    int s = -(int)status;

    /* A status without a label of its own counts as "other", never unseen. */
    return (s > 0 && s < OBS_STATUS_SLOTS && ote_obs_status_label(s) != NULL) ? s : 0;
}

ote_status_t ote_obs_create(ote_engine_h e, const char *metadata, const ote_obs_sources_t *sources,
                            ote_obs_t **obs_p)
{
    ote_obs_t *obs = aligned_alloc(64, (sizeof(*obs) + 63) / 64 * 64);

    if (obs == NULL)
        return OTE_ERR_NO_MEMORY;
    memset(obs, 0, sizeof(*obs));
    obs->engine  = e;
    obs->sources = *sources;
    pthread_mutex_init(&obs->lock, NULL);
    if (metadata != NULL && strncmp(metadata, "etcd", 4) == 0)
        snprintf(obs->store, sizeof(obs->store), "etcd");
    else if (metadata != NULL && strncmp(metadata, "redis", 5) == 0)
        snprintf(obs->store, sizeof(obs->store), "redis");
    else
        snprintf(obs->store, sizeof(obs->store), "p2p");
    *obs_p = obs;
    return OTE_OK;
}

void ote_obs_destroy(ote_obs_t *obs)
{
    if (obs == NULL)
        return;
    pthread_mutex_destroy(&obs->lock);
    free(obs);
}

/* The pair index of (transport, device), interned under obs->lock. */
static uint8_t pair_intern_locked(ote_obs_t *obs, const char *tl, const char *dev)
{
    size_t n = atomic_load(&obs->num_pairs);

    for (size_t i = 0; i < n; i++) {
        if (strcmp(obs->pairs[i].transport, tl) == 0 && strcmp(obs->pairs[i].device, dev) == 0)
            return (uint8_t)i;
    }
    if (n == OBS_TL_MAX)
        return OBS_TL_NONE;
    snprintf(obs->pairs[n].transport, sizeof(obs->pairs[n].transport), "%s", tl);
    snprintf(obs->pairs[n].device, sizeof(obs->pairs[n].device), "%s", dev);
    atomic_store(&obs->num_pairs, n + 1);
    return (uint8_t)n;
}

/* The pair of iface: a scan of the pointers seen so far, interned on a miss. */
static uint8_t iface_pair(ote_obs_t *obs, const ote_tl_iface_t *iface)
{
    size_t n = atomic_load_explicit(&obs->num_cache, memory_order_acquire);
    uint8_t p;

    for (size_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&obs->cache[i].iface, memory_order_relaxed) == iface)
            return obs->cache[i].pair;
    }
    pthread_mutex_lock(&obs->lock);
    n = atomic_load(&obs->num_cache);
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&obs->cache[i].iface) == iface) {
            pthread_mutex_unlock(&obs->lock);
            return obs->cache[i].pair;
        }
    }
    p = pair_intern_locked(obs, iface->resource.tl_name, iface->resource.dev_name);
    if (n < OBS_IFACE_CACHE) {
        obs->cache[n].pair = p;
        atomic_store(&obs->cache[n].iface, (const void *)iface);
        atomic_store_explicit(&obs->num_cache, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&obs->lock);
    return p;
}

void ote_obs_slice_end(ote_obs_t *obs, const ote_slice_t *s, const ote_rail_t *rail,
                       ote_status_t status, bool failover, _Atomic uint8_t *task_tl)
{
    obs_shard_t *sh = shard(obs);
    uint8_t p       = rail != NULL ? iface_pair(obs, rail->iface) : OBS_TL_NONE;
    int op          = s->op == OTE_OP_WRITE;
    size_t bytes    = 0;

    if (status == OTE_OK)
        bytes = s->length;
    else if (!failover && s->comp.transferred > 0 && s->comp.transferred < s->length)
        bytes = s->comp.transferred; /* what landed before the error (task_slice_count) */
    if (bytes > 0) {
        ADD(sh->xfer_bytes[op][p], bytes);
        ADD(sh->rail_bytes[p], bytes);
    }
    if (status != OTE_OK && status != OTE_ERR_CANCELED && rail != NULL) {
        ADD(sh->rail_errors[p], 1);
        if (failover)
            ADD(sh->rail_failovers[p], 1);
    }
    if (rail != NULL)
        atomic_store_explicit(task_tl, p, memory_order_relaxed);
}

/*
 * CLOCK_REALTIME less CLOCK_MONOTONIC, read again when older than a second
 * of the monotonic clock: a batch's wall-clock start without two clock
 * reads per batch (42 ns each on a virtual machine's TSC), and a step of the
 * wall clock shows within a second.
 */
static _Atomic uint64_t real_offset_ns, real_offset_at_ns;

static uint64_t real_offset(uint64_t mono_ns)
{
    uint64_t at = atomic_load_explicit(&real_offset_at_ns, memory_order_acquire);

    if (at == 0 || mono_ns - at > 1000000000ull) {
        struct timespec ts;
        uint64_t now = ote_time_ns();

        clock_gettime(CLOCK_REALTIME, &ts);
        atomic_store_explicit(&real_offset_ns,
                              (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - now,
                              memory_order_relaxed);
        atomic_store_explicit(&real_offset_at_ns, now, memory_order_release);
    }
    return atomic_load_explicit(&real_offset_ns, memory_order_relaxed);
}

void ote_obs_batch_posting(ote_obs_batch_t *tel, uint64_t begin_ns, size_t count)
{
    uint64_t zero = 0;

    atomic_fetch_add(&tel->requests, count);
    if (atomic_load_explicit(&tel->start_ns, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_strong(&tel->start_ns, &zero, begin_ns))
        atomic_store(&tel->start_real_us, (begin_ns + real_offset(begin_ns)) / 1000u);
}

void ote_obs_batch_submitted(ote_obs_batch_t *tel, uint64_t begin_ns)
{
    atomic_fetch_add_explicit(&tel->post_ns, ote_time_ns() - begin_ns, memory_order_relaxed);
}

static void hist_add(_Atomic uint64_t *buckets, const uint64_t *bounds, size_t nb, uint64_t v)
{
    size_t i = 0;

    while (i < nb && v > bounds[i])
        i++;
    ADD(buckets[i], 1);
}

void ote_obs_task_end(ote_obs_t *obs, ote_obs_batch_t *tel, bool write, uint8_t pair,
                      uint64_t start_ns, size_t length, uint64_t bytes, ote_status_t err)
{
    obs_shard_t *sh = shard(obs);
    int op          = write;
    uint8_t p       = pair;
    uint64_t now    = ote_time_ns();
    uint64_t end;

    ADD(sh->xfer_reqs[op][p], 1);
    if (err == OTE_OK) {
        uint64_t lat = now > start_ns ? now - start_ns : 0;

        hist_add(sh->lat[op], ote_obs_lat_bounds_ns, OBS_LAT_BOUNDS, lat);
        ADD(sh->lat_sum_ns[op], lat);
        hist_add(sh->size[op], ote_obs_size_bounds, OBS_SIZE_BOUNDS, length);
        ADD(sh->size_sum[op], length);
    } else {
        ADD(sh->xfer_fail[op][status_slot(err)], 1);
    }
    /* The batch's telemetry: its latest end, its bytes. */
    end = atomic_load_explicit(&tel->end_ns, memory_order_relaxed);
    while (end < now && !atomic_compare_exchange_weak(&tel->end_ns, &end, now))
        ;
    atomic_fetch_add_explicit(&tel->bytes, bytes, memory_order_relaxed);
    if (err == OTE_OK)
        atomic_fetch_add_explicit(&tel->completed, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&tel->ended, 1, memory_order_release);
}

void ote_obs_notify_sent(ote_obs_t *obs, ote_status_t status)
{
    obs_shard_t *sh = shard(obs);

    if (status == OTE_OK)
        ADD(sh->notif_sent, 1);
    else
        ADD(sh->notif_fail[status_slot(status)], 1);
}

void ote_obs_notify_received(ote_obs_t *obs)
{
    ADD(shard(obs)->notif_recv, 1);
}

void ote_obs_registered(ote_obs_t *obs, size_t count)
{
    ADD(shard(obs)->registrations, count);
}

void ote_obs_peer_restart(ote_obs_t *obs)
{
    ADD(shard(obs)->peer_restarts, 1);
}

void ote_obs_admission_rejected(ote_obs_t *obs)
{
    ADD(shard(obs)->admission_rej, 1);
}

void ote_obs_metadata_request(ote_obs_t *obs, ote_status_t status)
{
    ADD(shard(obs)->meta[status == OTE_OK ? 0 : status == OTE_ERR_NOT_FOUND ? 1 : 2], 1);
}

/* ---- snapshot --------------------------------------------------------------- */

typedef struct {
    uint64_t *bytes;
} visit_arg_t;

static void region_visit(ote_region_t *r, void *arg)
{
    visit_arg_t *v = arg;

    v->bytes[(r->mem_type & OTE_MEM_TYPE_CUDA) ? 1 : 0] += r->length;
}

void ote_obs_snapshot(ote_engine_h e, ote_obs_snap_t *snap)
{
    ote_obs_t *obs         = ote_engine_facts(e)->obs;
    ote_rail_info_t *rails = NULL;
    size_t nrails = 0, cap = 0, len = 0;
    visit_arg_t va;

    memset(snap, 0, sizeof(*snap));
    snprintf(snap->engine, sizeof(snap->engine), "%s", ote_engine_facts(e)->name);
    snprintf(snap->store, sizeof(snap->store), "%s", obs->store);
    for (size_t i = 0, n = atomic_load(&ote_engine_facts(e)->num_tls); i < n; i++) {
        const char *tl = ote_engine_facts(e)->tls[i].resource.tl_name;
        bool seen      = false;

        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(ote_engine_facts(e)->tls[j].resource.tl_name, tl) == 0;
        if (!seen && len + strlen(tl) + 2 < sizeof(snap->transports))
            len += (size_t)snprintf(snap->transports + len, sizeof(snap->transports) - len,
                                    "%s%s", len ? "," : "", tl);
    }
    /* Every transport and device the engine runs has its rail series, at 0 until used. */
    pthread_mutex_lock(&obs->lock);
    for (size_t i = 0, n = atomic_load(&ote_engine_facts(e)->num_tls); i < n; i++)
        (void)pair_intern_locked(obs, ote_engine_facts(e)->tls[i].resource.tl_name,
                                 ote_engine_facts(e)->tls[i].resource.dev_name);
    pthread_mutex_unlock(&obs->lock);
    /*
     * Rail states: every rail of an open segment joins the pairs. The
     * second call says how many there are now, which may be more than
     * the first: only those that fit were copied.
     */
    if (obs->sources.rails(e, NULL, 0, &nrails) == OTE_OK && nrails > 0 &&
        (rails = calloc(cap = nrails, sizeof(*rails))) != NULL &&
        obs->sources.rails(e, rails, cap, &nrails) == OTE_OK) {
        if (nrails > cap)
            nrails = cap;
        pthread_mutex_lock(&obs->lock);
        for (size_t i = 0; i < nrails; i++) {
            uint8_t p = pair_intern_locked(obs, rails[i].transport, rails[i].device);

            if (p < OBS_TL_MAX && rails[i].state == OTE_RAIL_ACTIVE)
                snap->rail_state[p] = 1;
        }
        pthread_mutex_unlock(&obs->lock);
    }
    free(rails);
    snap->num_pairs = atomic_load(&obs->num_pairs);
    memcpy(snap->pairs, obs->pairs, snap->num_pairs * sizeof(obs->pairs[0]));
    for (size_t s = 0; s < OBS_SHARDS; s++) {
        const _Atomic uint64_t *src = (const _Atomic uint64_t *)&obs->shards[s];
        uint64_t *dst               = (uint64_t *)&snap->counts;

        for (size_t k = 0; k < sizeof(snap->counts) / sizeof(uint64_t); k++)
            dst[k] += atomic_load_explicit(&src[k], memory_order_relaxed);
    }
    obs->sources.load(e, &snap->inflight_reqs, &snap->inflight_bytes, &snap->segments_open);
    va.bytes = snap->registered_bytes;
    ote_mem_table_visit(ote_engine_facts(e)->regions, region_visit, &va);
}
