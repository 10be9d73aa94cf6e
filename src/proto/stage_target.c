/*
 * Remote staging, target side (see stage.h): a pool of pinned host chunks
 * that initiators Pin over the control plane, reach with their host
 * transport, and have copied to or from this engine's GPU memory
 * (Delegate), then Unpin. Runs on the control listener thread only: its
 * STAGE requests are a service of the listener's (ote_proto_stage_service,
 * ctl_target.h), the pool made on the first request.
 */
#include "ctl_target.h"
#include "stage.h"

#include "base/log.h"
#include "base/util.h"
#include "uct_ext/cuda/cuda_copier.h"

#include <stdlib.h>
#include <string.h>

/* Bound on one delegated device copy. */
#define STAGE_TARGET_COPY_TIMEOUT_NS (10ull * 1000 * 1000 * 1000)

typedef struct {
    uint8_t  *buf;
    uintptr_t owner;    /* control connection that pinned it, 0 when free */
    uint64_t  deadline; /* released by the sweep after this */
    uint64_t  quiet;    /* free, but not pinned again before this (see chunk_retire) */
} target_chunk_t;

struct ote_stage_target {
    ote_mem_table_t   *regions;
    ote_cuda_copier_t *copier;
    size_t             chunk_size;
    unsigned           nchunks;
    uint64_t           timeout_ns;
    ote_region_t      *pool_region;
    uint8_t           *pool_base;
    target_chunk_t    *chunks;
};

static atomic_long target_pinned;

long ote_stage_target_pinned_now(void)
{
    return atomic_load(&target_pinned);
}

ote_status_t ote_stage_target_create(ote_mem_table_t *regions, const ote_stage_config_t *cfg,
                                     long timeout_ms, ote_stage_target_t **t_p)
{
    size_t chunk_size = cfg->chunk_size;
    ote_stage_target_t *t;
    ote_status_t status;

    /* Loaded once per process: the engine's components did already. */
    if (ote_cuda_load() != OTE_OK)
        return OTE_ERR_UNSUPPORTED;
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    t->regions    = regions;
    t->chunk_size = chunk_size < 4096 ? 4096 : chunk_size > (1u << 30) ? (1u << 30) : chunk_size;
    t->nchunks    = cfg->slots > 0 ? (unsigned)cfg->slots : 1;
    t->timeout_ns = (uint64_t)timeout_ms * 1000000ull;
    t->chunks     = calloc(t->nchunks, sizeof(*t->chunks));
    status        = t->chunks ? ote_cuda_copier_create(1, &t->copier) : OTE_ERR_NO_MEMORY;
    if (status == OTE_OK)
        status = ote_mem_table_alloc(regions, t->chunk_size * t->nchunks, "cuda_host:0",
                                     OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                                     (void **)&t->pool_base, &t->pool_region);
    if (status != OTE_OK) {
        ote_error("staging: no pinned target pool of %u x %zu bytes: %s", t->nchunks,
                  t->chunk_size, ote_status_string(status));
        if (t->copier)
            ote_cuda_copier_destroy(t->copier);
        free(t->chunks);
        free(t);
        return status;
    }
    for (unsigned i = 0; i < t->nchunks; i++)
        t->chunks[i].buf = t->pool_base + (size_t)i * t->chunk_size;
    *t_p = t;
    return OTE_OK;
}

static void chunk_release(target_chunk_t *c)
{
    if (c->owner != 0) {
        c->owner = 0;
        atomic_fetch_sub(&target_pinned, 1);
    }
}

/*
 * Free a chunk its owner did not unpin (its control connection went, or it
 * stayed pinned past the timeout): the owner's transfers into or out of it
 * on its data rails may still be under way, and end (or fail) within one
 * transfer timeout. Until then no other pin gets it, so no late byte of
 * theirs lands in another slice's chunk.
 */
static void chunk_retire(ote_stage_target_t *t, target_chunk_t *c, uint64_t now)
{
    chunk_release(c);
    c->quiet = now + t->timeout_ns;
}

void ote_stage_target_destroy(ote_stage_target_t *t)
{
    if (t == NULL)
        return;
    for (unsigned i = 0; i < t->nchunks; i++)
        chunk_release(&t->chunks[i]);
    ote_cuda_copier_destroy(t->copier);
    ote_mem_table_free(t->regions, t->pool_region);
    free(t->chunks);
    free(t);
}

void ote_stage_target_conn_gone(ote_stage_target_t *t, uintptr_t conn)
{
    uint64_t now = ote_time_ns();
    unsigned n   = 0;

    for (unsigned i = 0; t != NULL && i < t->nchunks; i++) {
        if (t->chunks[i].owner == conn) {
            chunk_retire(t, &t->chunks[i], now);
            n++;
        }
    }
    if (n > 0)
        ote_debug("staging: %u chunks of a closed control connection released (pinned again "
                  "after OTE_XFER_TIMEOUT_MS)", n);
}

uint64_t ote_stage_target_sweep(ote_stage_target_t *t, uint64_t now)
{
    uint64_t next = 0;

    for (unsigned i = 0; t != NULL && i < t->nchunks; i++) {
        if (t->chunks[i].owner == 0)
            continue;
        if (now > t->chunks[i].deadline) {
            ote_warn("staging: chunk %u pinned past OTE_XFER_TIMEOUT_MS; released", i);
            chunk_retire(t, &t->chunks[i], now);
        } else if (next == 0 || t->chunks[i].deadline < next) {
            next = t->chunks[i].deadline;
        }
    }
    return next;
}

/* The chunk at addr pinned by conn whose range holds [addr, addr+len). */
static target_chunk_t *chunk_find(ote_stage_target_t *t, uintptr_t conn, uint64_t addr,
                                  uint64_t len)
{
    uint64_t base = (uintptr_t)t->pool_base;
    size_t i;

    if (addr < base || addr - base >= (uint64_t)t->chunk_size * t->nchunks)
        return NULL;
    i = (size_t)((addr - base) / t->chunk_size);
    if (addr != (uintptr_t)t->chunks[i].buf || len > t->chunk_size || t->chunks[i].owner != conn)
        return NULL;
    return &t->chunks[i];
}

static void copy_done(void *arg, ote_status_t status)
{
    *(ote_status_t *)arg = status;
}

/* The GPU region [gpu, gpu+len) lies in, with the access a copy to_gpu (or from it) needs. */
static ote_status_t delegate_region(ote_stage_target_t *t, bool to_gpu, uint64_t gpu, size_t len,
                                    ote_region_t **region_p)
{
    unsigned access = to_gpu ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ;
    ote_status_t status = ote_mem_region_acquire(t->regions, gpu, len, access, region_p);

    if (status == OTE_OK && (*region_p)->mem_type != OTE_MEM_TYPE_CUDA) {
        ote_mem_region_put(*region_p);
        status = OTE_ERR_INVALID_PARAM;
    }
    return status;
}

static ote_status_t delegate_one(ote_stage_target_t *t, bool to_gpu, uint8_t *chunk,
                                 uint64_t gpu, size_t len)
{
    ote_status_t done = OTE_INPROGRESS, status;
    ote_region_t *region;
    uint64_t deadline;
    int dev;

    status = delegate_region(t, to_gpu, gpu, len, &region);
    if (status != OTE_OK)
        return status;
    /*
     * The copy is an access to the chunk as the host transport's are, and
     * bracketed the same way: ordered after the transfer that filled the
     * chunk or before the one that sends it.
     */
    /*
     * A copy into the chunk must also come after the send that last read
     * it has returned. The peer can have taken the chunk's bytes, and asked
     * for this copy, while the system call that carried them still sends
     * what followed them (later chunks in the same sendmsg): wait for a
     * moment when no send or receive of the pool is in progress.
     */
    if (!to_gpu)
        ote_mem_region_access_wait(t->pool_region);
    if (!ote_mem_region_access_begin(t->pool_region)) {
        ote_mem_region_put(region);
        return OTE_ERR_NOT_REGISTERED;
    }
    /*
     * The GPU region's owner may deregister it meanwhile: its deregistration
     * waits for this copy, and once it has returned nothing lands there.
     */
    if (!ote_mem_region_access_begin(region)) {
        ote_mem_region_access_end(t->pool_region);
        ote_mem_region_put(region);
        return OTE_ERR_NOT_REGISTERED;
    }
    dev    = ote_cuda_location_device(region->location);
    status = to_gpu ? ote_cuda_copier_post(t->copier, dev, (void *)(uintptr_t)gpu, chunk, len,
                                           copy_done, &done)
                    : ote_cuda_copier_post(t->copier, dev, chunk, (void *)(uintptr_t)gpu, len,
                                           copy_done, &done);
    deadline = ote_time_ns() + STAGE_TARGET_COPY_TIMEOUT_NS;
    while (status == OTE_OK && done == OTE_INPROGRESS) {
        if (ote_cuda_copier_progress(t->copier) == 0 && ote_time_ns() > deadline) {
            ote_error("staging: delegated device copy did not end");
            /* The callback still points at done: wait for it at destroy. */
            ote_cuda_copier_destroy(t->copier);
            t->copier = NULL;
            ote_cuda_copier_create(1, &t->copier);
            done = OTE_ERR_TIMEOUT;
        }
    }
    ote_mem_region_access_end(region);
    ote_mem_region_access_end(t->pool_region);
    ote_mem_region_put(region);
    return status != OTE_OK ? status : done;
}

ote_status_t ote_stage_target_request(ote_stage_target_t *t, uintptr_t conn,
                                      const ote_ctl_stage_t *m, uint64_t *chunks,
                                      size_t *count_p, uint32_t *chunk_size_p)
{
    ote_status_t status = OTE_OK;
    uint64_t now        = ote_time_ns();

    *count_p      = 0;
    *chunk_size_p = (uint32_t)t->chunk_size;
    switch (m->op) {
    case OTE_CTL_STAGE_PIN:
        for (unsigned i = 0; i < t->nchunks && *count_p < m->count; i++) {
            if (t->chunks[i].owner == 0 && now >= t->chunks[i].quiet) {
                t->chunks[i].owner    = conn;
                t->chunks[i].deadline = now + t->timeout_ns;
                atomic_fetch_add(&target_pinned, 1);
                chunks[(*count_p)++] = (uintptr_t)t->chunks[i].buf;
            }
        }
        return *count_p > 0 ? OTE_OK : OTE_ERR_BUSY;
    case OTE_CTL_STAGE_DELEGATE:
        /* Every entry is checked (its chunk, its GPU range) before any copy runs. */
        for (size_t i = 0; i < m->count; i++) {
            ote_region_t *region;

            if (chunk_find(t, conn, m->e[i].chunk, m->e[i].length) == NULL)
                return OTE_ERR_INVALID_PARAM;
            status = delegate_region(t, m->dir == OTE_CTL_STAGE_TO_GPU, m->e[i].gpu,
                                     m->e[i].length, &region);
            if (status != OTE_OK)
                return status;
            ote_mem_region_put(region);
        }
        for (size_t i = 0; i < m->count && status == OTE_OK; i++) {
            target_chunk_t *c = chunk_find(t, conn, m->e[i].chunk, m->e[i].length);

            status = delegate_one(t, m->dir == OTE_CTL_STAGE_TO_GPU, c->buf, m->e[i].gpu,
                                  m->e[i].length);
            c->deadline = ote_time_ns() + t->timeout_ns;
        }
        return status;
    case OTE_CTL_STAGE_UNPIN:
        for (size_t i = 0; i < m->count; i++) {
            target_chunk_t *c = chunk_find(t, conn, m->e[i].chunk, 0);

            if (c == NULL)
                status = OTE_ERR_INVALID_PARAM;
            else
                chunk_release(c);
        }
        return status;
    default:
        return OTE_ERR_PROTOCOL;
    }
}

/* ---- the STAGE service of the control listener (ctl_target.h) ---- */

typedef struct {
    ote_stage_target_t *target; /* made on the first request */
} stage_service_t;

static ote_status_t stage_handle(const ote_ctl_host_t *host, void *state, ote_ctl_req_t *req)
{
    stage_service_t *s = state;
    ote_ctl_stage_t *m = malloc(sizeof(*m));
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    size_t count = 0;
    uint32_t chunk_size = 0;
    ote_buf_t out = {0};
    ote_status_t status, st;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_stage_decode(req->payload, req->length, m);
    if (status != OTE_OK) {
        free(m);
        return status;
    }
    if (m->target != host->instance_id)
        st = OTE_ERR_NOT_FOUND;
    else if (s->target == NULL &&
             (st = ote_stage_target_create(host->regions, host->stage_config,
                                           host->xfer_timeout_ms, &s->target)) != OTE_OK)
        ;
    else
        st = ote_stage_target_request(s->target, (uintptr_t)req->conn, m, chunks, &count,
                                      &chunk_size);
    if (st != OTE_OK)
        count = 0;
    /* A PIN or DELEGATE set deadlines: the listener sweeps at the earliest. */
    if (s->target != NULL && m->op != OTE_CTL_STAGE_UNPIN) {
        uint64_t due = ote_stage_target_sweep(s->target, ote_time_ns());

        if (due != 0)
            host->sweep_at(host->ctx, due);
    }
    status = ote_ctl_stage_ack_encode(st, count ? chunk_size : 0, chunks, count, &out);
    if (status == OTE_OK)
        status = host->reply(host->ctx, req->conn, OTE_CTL_STAGE_ACK, out.data, out.len, NULL,
                             0);
    free(out.data);
    free(m);
    return status;
}

static ote_status_t stage_create(const ote_ctl_host_t *host, void **state_p)
{
    (void)host;
    *state_p = calloc(1, sizeof(stage_service_t));
    return *state_p != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
}

static uint64_t stage_sweep(const ote_ctl_host_t *host, void *state, uint64_t now_ns)
{
    (void)host;
    return ote_stage_target_sweep(((stage_service_t *)state)->target, now_ns);
}

static void stage_conn_gone(const ote_ctl_host_t *host, void *state, ote_ctl_conn_t *c)
{
    (void)host;
    ote_stage_target_conn_gone(((stage_service_t *)state)->target, (uintptr_t)c);
}

static void stage_destroy(const ote_ctl_host_t *host, void *state)
{
    (void)host;
    ote_stage_target_destroy(((stage_service_t *)state)->target);
    free(state);
}

OTE_CTL_ONE_REQUEST_SERVICE(stage, OTE_CTL_STAGE, OTE_CTL_STAGE_MAX_LEN, OTE_CTL_STAGE_ACK,
                            stage_handle, .create = stage_create, .sweep = stage_sweep,
                            .conn_gone = stage_conn_gone, .destroy = stage_destroy);
