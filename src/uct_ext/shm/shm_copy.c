/*
 * Native shm component: the copies through mappings. A post queues its copy
 * (ote_shm_copy_add); the iface's next progress (or anything that would
 * unmap a mapping first) runs the queue (ote_shm_copy_flush) and completes
 * its operations in order. A queue of at least OTE_STREAM_LOCAL_PAR_SPLIT bytes is
 * cut into pieces of at most OTE_STREAM_LOCAL_PAR_PIECE that the flushing thread and
 * the iface's copy threads (OTE_CMA_COPY_THREADS, base/par.h) share, unless
 * two of its copies touch the same bytes with one writing them: then it is
 * copied in order.
 */
#include "shm_int.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

void ote_shm_copier_cleanup(shm_copier_t *cp)
{
    free(cp->jobs);
    free(cp->spare);
    free(cp->pieces);
    free(cp->spans);
    memset(cp, 0, sizeof(*cp));
}

ote_status_t ote_shm_copy_add(shm_copier_t *cp, uint8_t *dst, const uint8_t *src, size_t len,
                              ote_region_t *region, ote_tl_completion_t *comp)
{
    if (ote_array_reserve((void **)&cp->jobs, &cp->cap, cp->njobs + 1, sizeof(*cp->jobs), 64) !=
        OTE_OK)
        return OTE_ERR_NO_MEMORY;
    cp->jobs[cp->njobs++] = (shm_copy_t){.dst = dst, .src = src, .len = len,
                                         .region = region, .comp = comp};
    cp->bytes += len;
    return OTE_OK;
}

/* The pieces of jobs [0, n) whose region is still registered; their count, or 0 without memory. */
static size_t copy_cut(shm_copier_t *cp, const shm_copy_t *jobs, size_t n)
{
    size_t count = 0, k = 0;

    for (size_t i = 0; i < n; i++) {
        if (jobs[i].status == OTE_OK)
            count += (jobs[i].len + OTE_STREAM_LOCAL_PAR_PIECE - 1) / OTE_STREAM_LOCAL_PAR_PIECE;
    }
    if (ote_array_reserve((void **)&cp->pieces, &cp->pieces_cap, count, sizeof(*cp->pieces),
                          64) != OTE_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t off = 0; jobs[i].status == OTE_OK && off < jobs[i].len;
             off += OTE_STREAM_LOCAL_PAR_PIECE) {
            size_t len = jobs[i].len - off;

            cp->pieces[k++] = (shm_piece_t){
                .job = i, .off = off, .len = len < OTE_STREAM_LOCAL_PAR_PIECE ? len : OTE_STREAM_LOCAL_PAR_PIECE};
        }
    }
    return k;
}

/*
 * Two of the copies touch the same bytes with one of them writing them: the
 * queue is then copied in order by one thread (ote_par_spans_conflict).
 * True also without memory to tell.
 */
static bool copies_conflict(shm_copier_t *cp, const shm_copy_t *jobs, size_t n)
{
    ote_par_span_t *sp;

    if (ote_array_reserve((void **)&cp->spans, &cp->spans_cap, 2 * n, sizeof(*cp->spans), 64) !=
        OTE_OK)
        return true;
    sp = cp->spans;
    for (size_t i = 0; i < n; i++) {
        sp[2 * i]     = (ote_par_span_t){(uintptr_t)jobs[i].dst,
                                         (uintptr_t)jobs[i].dst + jobs[i].len, true};
        sp[2 * i + 1] = (ote_par_span_t){(uintptr_t)jobs[i].src,
                                         (uintptr_t)jobs[i].src + jobs[i].len, false};
    }
    return ote_par_spans_conflict(sp, 2 * n);
}

typedef struct {
    const shm_copy_t  *jobs;
    const shm_piece_t *pieces;
} copy_set_t;

static void copy_piece(void *arg, size_t i)
{
    const copy_set_t *set = arg;
    const shm_piece_t *p  = &set->pieces[i];
    const shm_copy_t *c   = &set->jobs[p->job];

    memcpy(c->dst + p->off, c->src + p->off, p->len);
}

unsigned ote_shm_copy_flush(shm_copier_t *cp)
{
    shm_copy_t *jobs;
    size_t n, cap, bytes, npieces = 0;

    if (cp->njobs == 0 || cp->flushing)
        return 0;
    /*
     * Detach the queue: completions may post again, and those copies wait
     * for the next flush. The array swaps with a spare one.
     */
    jobs          = cp->jobs;
    cap           = cp->cap;
    n             = cp->njobs;
    bytes         = cp->bytes;
    cp->jobs      = cp->spare;
    cp->cap       = cp->spare_cap;
    cp->spare     = NULL;
    cp->spare_cap = 0;
    cp->njobs     = 0;
    cp->bytes     = 0;
    cp->flushing  = true;
    /* Nothing lands in memory deregistered since the post (mem.h's access guard). */
    for (size_t i = 0; i < n; i++) {
        ote_region_t *r = jobs[i].region;

        jobs[i].status = r == NULL || ote_mem_region_access_begin(r) ? OTE_OK
                                                                     : OTE_ERR_NOT_REGISTERED;
    }
    if (bytes >= OTE_STREAM_LOCAL_PAR_SPLIT && ote_par_width(cp->par) > 0 && !copies_conflict(cp, jobs, n) &&
        (npieces = copy_cut(cp, jobs, n)) > 0) {
        copy_set_t set = {.jobs = jobs, .pieces = cp->pieces};

        ote_par_run(cp->par, npieces, copy_piece, &set);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (jobs[i].status == OTE_OK)
                memcpy(jobs[i].dst, jobs[i].src, jobs[i].len);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (jobs[i].status != OTE_OK)
            continue;
        if (jobs[i].region != NULL)
            ote_mem_region_access_end(jobs[i].region);
        atomic_fetch_add_explicit(&ote_shm_bytes_mapped, jobs[i].len, memory_order_relaxed);
    }
    cp->flushing = false;
    for (size_t i = 0; i < n; i++)
        jobs[i].comp->func(jobs[i].comp, jobs[i].status);
    /* The detached array is the spare again, unless a flush in a completion made one. */
    if (cp->spare == NULL) {
        cp->spare     = jobs;
        cp->spare_cap = cap;
    } else {
        free(jobs);
    }
    return (unsigned)n;
}
