/*
 * Native shm component: the copies through mappings. A post queues its copy
 * (ote_shm_copy_add); the iface's next progress (or anything that would
 * unmap a mapping first) runs the queue (ote_shm_copy_flush) and completes
 * its operations in order. A queue of at least OTE_SHM_COPY_SPLIT bytes is
 * cut into pieces of at most OTE_SHM_COPY_PIECE that the flushing thread
 * and the iface's copy threads (OTE_SHM_COPY_THREADS) take one at a time:
 * where another core is free the bytes move at the speed of two copies,
 * and where none is, the flushing thread takes every piece itself and
 * loses no more than the signal to a sleeping helper.
 */
#include "shm_int.h"

#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A helper polls this long for the next queue before it sleeps. */
#define SHM_COPY_SPIN_NS (50ull * 1000)

static void copy_piece(const shm_copy_t *c, size_t off, size_t len)
{
    memcpy(c->dst + off, c->src + off, len);
}

/* Take and copy pieces of the current set until none is left (set lock held on entry and exit). */
static void copy_take(shm_copier_t *cp)
{
    while (cp->next < cp->npieces) {
        shm_piece_t p = cp->pieces[cp->next++];

        pthread_mutex_unlock(&cp->lock);
        copy_piece(&cp->run[p.job], p.off, p.len);
        atomic_fetch_add_explicit(&cp->done, 1, memory_order_release);
        pthread_mutex_lock(&cp->lock);
    }
}

static void *copy_helper_main(void *arg)
{
    shm_copier_t *cp = arg;
    uint64_t seen    = atomic_load(&cp->gen);

    pthread_mutex_lock(&cp->lock);
    while (!atomic_load(&cp->stop)) {
        uint64_t until;

        copy_take(cp);
        seen = atomic_load(&cp->gen);
        pthread_mutex_unlock(&cp->lock);
        /* Queues often come back to back: look for the next one for a moment. */
        until = ote_time_ns() + SHM_COPY_SPIN_NS;
        while (atomic_load_explicit(&cp->gen, memory_order_acquire) == seen &&
               !atomic_load_explicit(&cp->stop, memory_order_relaxed) &&
               ote_time_ns() < until)
            sched_yield();
        pthread_mutex_lock(&cp->lock);
        while (!atomic_load(&cp->stop) && cp->next >= cp->npieces &&
               atomic_load(&cp->gen) == seen) {
            cp->sleepers++;
            pthread_cond_wait(&cp->cond, &cp->lock);
            cp->sleepers--;
        }
    }
    pthread_mutex_unlock(&cp->lock);
    return NULL;
}

ote_status_t ote_shm_copier_init(shm_copier_t *cp, long threads)
{
    memset(cp, 0, sizeof(*cp));
    pthread_mutex_init(&cp->lock, NULL);
    pthread_cond_init(&cp->cond, NULL);
    atomic_init(&cp->gen, 0);
    atomic_init(&cp->done, 0);
    atomic_init(&cp->stop, false);
    if (threads < 0) {
        /* One less than the CPUs this process may use, at most OTE_SHM_COPY_THREADS_AUTO. */
        cpu_set_t set;
        long n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

        threads = n - 1 < OTE_SHM_COPY_THREADS_AUTO ? n - 1 : OTE_SHM_COPY_THREADS_AUTO;
    }
    cp->want = (size_t)(threads > 0 ? threads : 0);
    if (cp->want > OTE_SHM_COPY_THREADS_MAX)
        cp->want = OTE_SHM_COPY_THREADS_MAX;
    return OTE_OK;
}

/* Start the helpers on the first queue large enough to share; a failure leaves fewer. */
static void copier_start(shm_copier_t *cp)
{
    cp->started = true;
    for (size_t i = 0; i < cp->want; i++) {
        char name[16];

        if (pthread_create(&cp->threads[cp->nthreads], NULL, copy_helper_main, cp) != 0) {
            ote_debug("shm: copy thread %zu not started: %s", i, strerror(errno));
            break;
        }
        snprintf(name, sizeof(name), "ote-copy-%u", (unsigned)(i % 100));
        pthread_setname_np(cp->threads[cp->nthreads], name);
        cp->nthreads++;
    }
}

void ote_shm_copier_cleanup(shm_copier_t *cp)
{
    pthread_mutex_lock(&cp->lock);
    atomic_store(&cp->stop, true);
    pthread_cond_broadcast(&cp->cond);
    pthread_mutex_unlock(&cp->lock);
    for (size_t i = 0; i < cp->nthreads; i++)
        pthread_join(cp->threads[i], NULL);
    cp->nthreads = 0;
    free(cp->jobs);
    free(cp->pieces);
    free(cp->spare);
    pthread_mutex_destroy(&cp->lock);
    pthread_cond_destroy(&cp->cond);
}

ote_status_t ote_shm_copy_add(shm_copier_t *cp, uint8_t *dst, const uint8_t *src, size_t len,
                              ote_region_t *region, ote_tl_completion_t *comp)
{
    if (cp->njobs == cp->cap) {
        size_t cap = cp->cap ? 2 * cp->cap : 64;
        shm_copy_t *j = realloc(cp->jobs, cap * sizeof(*j));

        if (j == NULL)
            return OTE_ERR_NO_MEMORY;
        cp->jobs = j;
        cp->cap  = cap;
    }
    cp->jobs[cp->njobs++] = (shm_copy_t){.dst = dst, .src = src, .len = len,
                                         .region = region, .comp = comp};
    cp->bytes += len;
    return OTE_OK;
}

/* The pieces of jobs [0, n) whose region is still registered; their count, or 0 without memory. */
static size_t copy_cut(shm_copier_t *cp, shm_copy_t *jobs, size_t n)
{
    size_t count = 0, k = 0;

    for (size_t i = 0; i < n; i++)
        count += jobs[i].status == OTE_OK ? (jobs[i].len + OTE_SHM_COPY_PIECE - 1) /
                                                OTE_SHM_COPY_PIECE
                                          : 0;
    if (count > cp->pieces_cap) {
        shm_piece_t *p = realloc(cp->pieces, count * sizeof(*p));

        if (p == NULL)
            return 0;
        cp->pieces     = p;
        cp->pieces_cap = count;
    }
    for (size_t i = 0; i < n; i++) {
        for (size_t off = 0; jobs[i].status == OTE_OK && off < jobs[i].len;
             off += OTE_SHM_COPY_PIECE) {
            size_t len = jobs[i].len - off;

            cp->pieces[k++] = (shm_piece_t){.job = i, .off = off,
                                            .len = len < OTE_SHM_COPY_PIECE ? len
                                                                            : OTE_SHM_COPY_PIECE};
        }
    }
    return k;
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
    if (cp->want > 0 && bytes >= OTE_SHM_COPY_SPLIT) {
        if (!cp->started)
            copier_start(cp);
        pthread_mutex_lock(&cp->lock);
        npieces = cp->nthreads > 0 ? copy_cut(cp, jobs, n) : 0;
        if (npieces > 0) {
            cp->run     = jobs;
            cp->next    = 0;
            cp->npieces = npieces;
            atomic_store_explicit(&cp->done, 0, memory_order_relaxed);
            atomic_fetch_add_explicit(&cp->gen, 1, memory_order_release);
            if (cp->sleepers > 0)
                pthread_cond_broadcast(&cp->cond);
            copy_take(cp);
        }
        pthread_mutex_unlock(&cp->lock);
        /* Pieces a helper took are finished by it. */
        while (atomic_load_explicit(&cp->done, memory_order_acquire) < npieces)
            sched_yield();
    }
    if (npieces == 0) {
        for (size_t i = 0; i < n; i++) {
            if (jobs[i].status == OTE_OK)
                copy_piece(&jobs[i], 0, jobs[i].len);
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
