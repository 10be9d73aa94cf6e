/*
 * Callers that progress the workers themselves, as UCX's callers do with
 * ucp_worker_progress: ote_batch_wait() (ote_engine_poll_wait) takes a
 * worker's lock when it is free and runs its rounds, polling while answers
 * come fast, then leaves the rest to the worker threads (worker_leave);
 * ote_engine_progress() runs one round of every free worker. What the
 * worker thread does meanwhile (it parks) is in worker.c.
 */
#include "base/util.h"
#include "core/engine_facts.h"
#include "worker_wait.h"

#include <sys/epoll.h>
#include <unistd.h>

bool ote_worker_try_progress(ote_worker_t *w)
{
    if (pthread_mutex_trylock(&w->lock) != 0)
        return false;
    ote_worker_round(w);
    ote_worker_hand_back(w);
    pthread_mutex_unlock(&w->lock);
    return true;
}

ote_status_t ote_engine_progress(ote_engine_h engine)
{
    bool any = false;

    if (engine == NULL)
        return OTE_ERR_INVALID_PARAM;
    for (size_t i = 0; i < ote_engine_facts(engine)->num_workers; i++)
        any |= ote_worker_try_progress(&ote_engine_facts(engine)->workers[i]);
    return any ? OTE_OK : OTE_ERR_BUSY;
}

/* How long a waiter polls before it sleeps: twice the recent waits, when they are short. */
static uint64_t wait_budget_ns(ote_engine_h e)
{
    uint64_t grace  = (uint64_t)ote_engine_facts(e)->config.poll_grace_us * 1000ull;
    uint64_t max    = (uint64_t)ote_engine_facts(e)->config.poll_spin_max_us * 1000ull;
    uint64_t recent = atomic_load_explicit(&ote_worker_set(e)->wait_ns, memory_order_relaxed);
    uint64_t b      = 2 * recent;

    if (recent > max)
        return grace;
    if (b > max)
        b = max;
    return b > grace ? b : grace;
}

void ote_engine_wait_note(ote_engine_h e, uint64_t ns)
{
    uint64_t cap    = 4 * (uint64_t)ote_engine_facts(e)->config.poll_spin_max_us * 1000ull;
    uint64_t recent = atomic_load_explicit(&ote_worker_set(e)->wait_ns, memory_order_relaxed);

    if (ns > cap)
        ns = cap;
    atomic_store_explicit(&ote_worker_set(e)->wait_ns, (3 * recent + ns) / 4, memory_order_relaxed);
}

/*
 * A caller stops progressing w. Events the worker thread left to callers
 * since the caller's last round began (missed moved past gen) are
 * progressed here, or handed to the worker thread when another thread
 * holds the lock or something is left.
 */
static void worker_leave(ote_worker_t *w, uint64_t gen, bool progressed, bool done)
{
    /*
     * A caller whose task ended returns to its application, which is
     * likely to submit and wait again at once: a parked worker thread is
     * left parked (it looks again within its park interval). One that
     * stops polling before the end leaves the rest to the worker thread.
     */
    if (!done)
        atomic_store(&w->handoff, true);
    if (atomic_fetch_sub(&w->callers, 1) == 1 && atomic_load(&w->handoff) &&
        atomic_exchange(&w->handoff, false) && atomic_load(&w->parked))
        ote_worker_wake(w);
    if (atomic_load(&w->missed) == gen) {
        if (progressed && pthread_mutex_trylock(&w->lock) == 0) {
            ote_worker_hand_back(w);
            pthread_mutex_unlock(&w->lock);
        }
        return;
    }
    if (pthread_mutex_trylock(&w->lock) != 0) {
        ote_worker_wake(w);
        return;
    }
    if (ote_worker_round(w) != 0)
        ote_worker_wake(w);
    else
        ote_worker_hand_back(w);
    pthread_mutex_unlock(&w->lock);
}

/*
 * Without worker threads: arm every worker's ifaces, as a worker thread
 * does before it sleeps (its rounds may have turned an iface's events
 * off), then sleep until a worker's fd fires, at most until deadline_ns.
 * No sleep when an iface still has work.
 */
static void engine_poll_sleep(ote_engine_h e, uint64_t now, uint64_t deadline_ns)
{
    struct epoll_event ev[8];
    uint64_t wait_ns = OTE_WORKER_TIMEOUT_CHECK_NS;
    int cap_ms       = -1;

    for (size_t i = 0; i < ote_engine_facts(e)->num_workers; i++) {
        ote_worker_t *w = &ote_engine_facts(e)->workers[i];
        bool busy;

        if (pthread_mutex_trylock(&w->lock) != 0)
            continue;
        busy = ote_worker_arm(w, &cap_ms);
        pthread_mutex_unlock(&w->lock);
        if (busy)
            return;
    }
    if (cap_ms >= 0 && (uint64_t)cap_ms * 1000000ull < wait_ns)
        wait_ns = (uint64_t)cap_ms * 1000000ull;

    if (deadline_ns != 0 && deadline_ns - now < wait_ns)
        wait_ns = deadline_ns - now;
    (void)epoll_wait(ote_worker_set(e)->poll_epfd, ev, 8, (int)((wait_ns + 999999) / 1000000));
    for (size_t i = 0; i < ote_engine_facts(e)->num_workers; i++) {
        uint64_t v;

        (void)!read(ote_engine_facts(e)->workers[i].wake_fd, &v, sizeof(v));
    }
}

bool ote_engine_poll_wait(ote_engine_h e, atomic_long *pending, uint64_t deadline_ns)
{
    size_t nw = ote_engine_facts(e)->num_workers;
    uint64_t gen[OTE_MAX_WORKERS];
    bool progressed[OTE_MAX_WORKERS];
    uint64_t budget = wait_budget_ns(e);
    uint64_t last   = ote_time_ns();
    bool done       = false;

    for (size_t i = 0; i < nw; i++) {
        atomic_fetch_add(&ote_engine_facts(e)->workers[i].callers, 1);
        gen[i]        = atomic_load(&ote_engine_facts(e)->workers[i].missed);
        progressed[i] = false;
    }
    for (;;) {
        unsigned n = 0;
        uint64_t now;

        for (size_t i = 0; i < nw; i++) {
            ote_worker_t *w = &ote_engine_facts(e)->workers[i];

            if (pthread_mutex_trylock(&w->lock) != 0)
                continue;
            gen[i] = atomic_load(&w->missed);
            n += ote_worker_round(w);
            progressed[i] = true;
            pthread_mutex_unlock(&w->lock);
        }
        if (atomic_load(pending) == 0) {
            done = true;
            break;
        }
        now = ote_time_ns();
        if (deadline_ns != 0 && now >= deadline_ns)
            break;
        if (n != 0) {
            last = now;
            continue;
        }
        if (now - last < budget) {
            ote_worker_pause();
            continue;
        }
        /* Answers do not come fast: sleep, while the worker threads progress. */
        if (ote_engine_facts(e)->config.progress_thread)
            break;
        engine_poll_sleep(e, now, deadline_ns);
        last = ote_time_ns();
    }
    for (size_t i = 0; i < nw; i++)
        worker_leave(&ote_engine_facts(e)->workers[i], gen[i], progressed[i], done);
    return done;
}

void ote_engine_signal_event(ote_engine_h engine)
{
    uint64_t one = 1;

    if (atomic_load_explicit(&ote_worker_set(engine)->event_fd_used, memory_order_relaxed))
        (void)!write(ote_worker_set(engine)->event_fd, &one, sizeof(one));
}
