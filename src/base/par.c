/* A parallel loop over items on the calling thread and a few helpers (par.h). */
#include "par.h"

#include "log.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A helper polls this long for the next loop before it sleeps. */
#define PAR_SPIN_NS (50ull * 1000)

struct ote_par {
    pthread_mutex_t  lock;  /* the loop's next item and count */
    pthread_cond_t   cond;  /* a new loop, or stop            */
    ote_par_fn_t     fn;
    void            *arg;
    size_t           next, count;
    atomic_size_t    done;  /* items whose call returned      */
    _Atomic uint64_t gen;   /* loops published so far          */
    int              sleepers;
    atomic_bool      stop;
    size_t           want, nthreads;
    bool             started;
    char             name[12];
    pthread_t        threads[OTE_PAR_MAX];
};

/* Take and run items of the current loop until none is left (lock held on entry and exit). */
static void par_take(ote_par_t *p)
{
    while (p->next < p->count) {
        size_t i = p->next++;

        pthread_mutex_unlock(&p->lock);
        p->fn(p->arg, i);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        pthread_mutex_lock(&p->lock);
    }
}

static void *par_helper_main(void *arg)
{
    ote_par_t *p = arg;

    pthread_mutex_lock(&p->lock);
    while (!atomic_load(&p->stop)) {
        uint64_t seen, until;

        par_take(p);
        seen = atomic_load(&p->gen);
        pthread_mutex_unlock(&p->lock);
        /* Loops often come back to back: look for the next one for a moment. */
        until = ote_time_ns() + PAR_SPIN_NS;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_relaxed) && ote_time_ns() < until)
            sched_yield();
        pthread_mutex_lock(&p->lock);
        while (!atomic_load(&p->stop) && p->next >= p->count && atomic_load(&p->gen) == seen) {
            p->sleepers++;
            pthread_cond_wait(&p->cond, &p->lock);
            p->sleepers--;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

ote_par_t *ote_par_create(long threads, const char *name)
{
    ote_par_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    atomic_init(&p->done, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, false);
    if (threads < 0) {
        cpu_set_t set;
        long n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;

        threads = n - 1 < OTE_PAR_AUTO_MAX ? n - 1 : OTE_PAR_AUTO_MAX;
    }
    p->want = threads <= 0 ? 0 : threads > OTE_PAR_MAX ? OTE_PAR_MAX : (size_t)threads;
    snprintf(p->name, sizeof(p->name), "%s", name);
    return p;
}

size_t ote_par_width(const ote_par_t *p)
{
    return p != NULL ? p->want : 0;
}

size_t ote_par_started(const ote_par_t *p)
{
    return p != NULL ? p->nthreads : 0;
}

/* The helpers, on the first loop; a failure leaves fewer (none: the caller runs it all). */
static void par_start(ote_par_t *p)
{
    p->started = true;
    for (size_t i = 0; i < p->want; i++) {
        char name[16];

        if (pthread_create(&p->threads[p->nthreads], NULL, par_helper_main, p) != 0) {
            ote_debug("%s: helper thread %zu not started: %s", p->name, i, strerror(errno));
            break;
        }
        snprintf(name, sizeof(name), "%.11s-%u", p->name, (unsigned)(i % 10));
        pthread_setname_np(p->threads[p->nthreads], name);
        p->nthreads++;
    }
}

void ote_par_run(ote_par_t *p, size_t n, ote_par_fn_t fn, void *arg)
{
    if (n == 0)
        return;
    if (p != NULL && p->want > 0 && !p->started)
        par_start(p);
    if (p == NULL || p->nthreads == 0 || n == 1) {
        for (size_t i = 0; i < n; i++)
            fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn    = fn;
    p->arg   = arg;
    p->next  = 0;
    p->count = n;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (p->sleepers > 0)
        pthread_cond_broadcast(&p->cond);
    par_take(p);
    pthread_mutex_unlock(&p->lock);
    /* Items a helper took are finished by it. */
    while (atomic_load_explicit(&p->done, memory_order_acquire) < n)
        sched_yield();
}

void ote_par_destroy(ote_par_t *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (size_t i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

static int span_cmp(const void *a, const void *b)
{
    const ote_par_span_t *x = a, *y = b;

    return x->start < y->start ? -1 : x->start > y->start;
}

bool ote_par_spans_conflict(ote_par_span_t *spans, size_t n)
{
    uint64_t end_any = 0, end_written = 0;

    if (n < 2)
        return false;
    qsort(spans, n, sizeof(*spans), span_cmp);
    for (size_t i = 0; i < n; i++) {
        /* Sorted by start: an overlap is with a span that began before and ends later. */
        if (spans[i].start < (spans[i].write ? end_any : end_written))
            return true;
        if (spans[i].end > end_any)
            end_any = spans[i].end;
        if (spans[i].write && spans[i].end > end_written)
            end_written = spans[i].end;
    }
    return false;
}
