/*
 * Worker threads: each owns its ifaces and eps (UCT objects are not
 * thread-safe), posts the slices queued by submitters, progresses the
 * ifaces, busy-polls for OTE_POLL_GRACE_US after the last event and then
 * sleeps on the ifaces' event fds, unless an iface reports (event_arm) work
 * it cannot signal through an fd, such as copies UCT cma still holds, or
 * answers worth polling for (a same-host cma peer that keeps answering).
 * While tasks are in flight the sleep ends every OTE_WORKER_TIMEOUT_CHECK_NS to fail
 * operations past OTE_XFER_TIMEOUT_MS, and for OTE_HANDSHAKE_TIMEOUT_MS
 * after the last event (a connection accepted then must be closed if its
 * handshake never ends), and while an iface has answers its peer does not
 * read (has_deadlines). Past that, with nothing in flight, the sleep has
 * no timer at all, so an idle engine's workers use no CPU.
 *
 * Threads that wait (ote_batch_wait) progress the workers themselves, as
 * UCX's callers do with ucp_worker_progress (worker_wait.c): they take a
 * worker's lock when it is free and run its rounds, polling while answers
 * come fast; slices their rounds queue are posted by them, not handed to
 * the worker thread one by one (ote_worker_queue). A worker
 * thread woken by events while such a caller is registered leaves them to
 * it and parks: it sleeps on its wake-up fd alone, so that the answers
 * the callers take wake no second thread, and looks every OTE_POLL_PARK_US
 * whether they are still there. A caller that leaves before its task
 * ended progresses what the worker left behind and wakes it; one whose
 * task ended leaves it parked, as its application is likely to submit and
 * wait again at once. The post-event polling of worker threads
 * adapts too: after an event it polls for twice the recent interval
 * between events when that is below OTE_POLL_SPIN_MAX_US, else for
 * OTE_POLL_GRACE_US.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/xfer/batch.h"
#include "core/engine_facts.h"
#include "worker.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#define YIELD_NS         (1000ull * 1000)

static char wake_tag;

ote_status_t ote_worker_init(ote_engine_h engine, ote_worker_t *w, size_t index)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &wake_tag};

    memset(w, 0, sizeof(*w));
    w->engine  = engine;
    w->index   = index;
    w->epfd    = epoll_create1(EPOLL_CLOEXEC);
    w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->epfd < 0 || w->wake_fd < 0 ||
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) != 0) {
        ote_fd_close(w->epfd);
        ote_fd_close(w->wake_fd);
        return OTE_ERR_IO;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->qlock, NULL);
    atomic_init(&w->queued, false);
    pthread_mutex_init(&w->progress_lock, NULL);
    w->next_timeout = ote_time_ns() + OTE_WORKER_TIMEOUT_CHECK_NS;
    return OTE_OK;
}

static unsigned worker_drain_queue(ote_worker_t *w, bool cancel_all);
static unsigned worker_post_chain(ote_slice_t *s, bool cancel_all);
static unsigned worker_progress(ote_worker_t *w);
static void     worker_check_timeouts(ote_worker_t *w);
static bool     worker_queued(ote_worker_t *w);

/* The worker whose round this thread runs (its lock held); NULL outside rounds. */
static OTE_THREAD_LOCAL ote_worker_t *round_worker;

/*
 * One round (lock held): post what is queued, then the chain head (NULL:
 * none; a caller holding the lock posts its slices so, without the queue
 * and its lock), progress the ifaces, check timeouts when due.
 */
static unsigned worker_round(ote_worker_t *w, ote_slice_t *head)
{
    ote_worker_t *outer_worker = round_worker;
    uint64_t outer             = ote_round_begin();
    unsigned n;
    uint64_t now;

    round_worker = w;
    n            = worker_drain_queue(w, false);
    n += worker_post_chain(head, false);
    n += worker_progress(w);
    /* The round's own time for what needs no finer one (a round lasts microseconds). */
    now          = ote_round_ns;
    w->round_ns  = now;
    round_worker = outer_worker;
    ote_round_end(outer);
    if (now >= w->next_timeout) {
        worker_check_timeouts(w);
        w->next_timeout = now + OTE_WORKER_TIMEOUT_CHECK_NS;
    }
    return n;
}

unsigned ote_worker_round(ote_worker_t *w)
{
    return worker_round(w, NULL);
}

/*
 * Between polling rounds that found nothing: every WORKER_YIELD_EVERY-th
 * time the CPU goes to whatever else is runnable here (on a loaded host,
 * often the peer's thread that will answer) and comes back when that is
 * done; with nothing else runnable that returns at once. The rounds in
 * between only pause the core for a moment: a sched_yield costs about as
 * much as a polling round, so yielding on every one made an answer wait
 * longer to be seen (docs/performance.md, "Parked workers").
 */
#define WORKER_YIELD_EVERY 4

void ote_worker_pause(void)
{
    static OTE_THREAD_LOCAL unsigned n;

    if (++n % WORKER_YIELD_EVERY == 0)
        sched_yield();
    else
        ote_cpu_relax();
}

void ote_worker_wake(ote_worker_t *w)
{
    uint64_t one = 1;

    (void)!write(w->wake_fd, &one, sizeof(one));
}

/* Sleep on w's wake-up fd alone for at most ns; true, the wake-up taken, when it was written. */
static bool wake_wait(ote_worker_t *w, uint64_t ns)
{
    struct pollfd pfd  = {.fd = w->wake_fd, .events = POLLIN};
    struct timespec ts = {.tv_sec  = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    uint64_t v;

    if (ppoll(&pfd, 1, &ts, NULL) <= 0)
        return false;
    (void)!read(w->wake_fd, &v, sizeof(v));
    return true;
}

/*
 * After progress from another thread (lock held): slices its last round
 * queued (ote_worker_queue did not wake the thread for them) are posted
 * now, and what is still queued, or work that no event fd will announce
 * (UCT cma copies still queued), needs the worker awake.
 */
void ote_worker_hand_back(ote_worker_t *w)
{
    int cap_ms  = -1;
    bool queued = worker_queued(w);

    if (queued) {
        ote_worker_round(w);
        queued = worker_queued(w);
    }
    atomic_store_explicit(&w->active_ns, w->round_ns, memory_order_relaxed);
    /* A parked thread looks again within its park interval (worker_park). */
    if (queued || ((ote_worker_arm(w, &cap_ms) || cap_ms >= 0) && !atomic_load(&w->parked)))
        ote_worker_wake(w);
}

/*
 * The worker thread takes its lock back (after a sleep, a park, a yield)
 * without waiting inside the mutex: the thread holding it would then have
 * to wake it as it unlocks, a system call on the path of every caller that
 * posts or progresses from its own thread. It waits on its wake-up fd
 * instead, which every hand-over of work writes (ote_worker_hand_back,
 * worker_leave, ote_worker_post), and tries again soon after one (the
 * holder may be done), else at least every WORKER_RELOCK_MAX_NS.
 */
#define WORKER_RELOCK_MIN_NS (20ull * 1000)
#define WORKER_RELOCK_MAX_NS (1000ull * 1000)

static void worker_lock(ote_worker_t *w)
{
    uint64_t step = WORKER_RELOCK_MIN_NS;

    while (pthread_mutex_trylock(&w->lock) != 0) {
        if (wake_wait(w, step))
            step = WORKER_RELOCK_MIN_NS;
        else if (step < WORKER_RELOCK_MAX_NS)
            step *= 2;
    }
}

/* Append a chain of slices to w's queue. */
static void worker_enqueue(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail)
{
    pthread_mutex_lock(&w->qlock);
    OTE_QUEUE_PUSH_CHAIN(w->qhead, w->qtail, head, tail, next);
    atomic_store(&w->queued, true);
    pthread_mutex_unlock(&w->qlock);
}

void ote_worker_post(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail)
{
    bool direct;

    /*
     * When the worker is idle its lock is free: post and push the bytes out
     * from this thread, which saves waking the worker up. It still wakes on
     * its event fds for the answers.
     */
    direct = pthread_mutex_trylock(&w->lock) == 0;
    if (direct) {
        worker_round(w, head);
        ote_worker_hand_back(w);
        pthread_mutex_unlock(&w->lock);
        /* A worker asleep without a timer must now watch the timeouts. */
        if (atomic_exchange(&w->idle_sleep, false))
            ote_worker_wake(w);
        return;
    }
    worker_enqueue(w, head, tail);
    /* Without worker threads a caller may sleep on the workers' fds. */
    if (atomic_load(&w->sleeping) || !ote_engine_facts(w->engine)->config.progress_thread)
        ote_worker_wake(w);
}

void ote_worker_queue(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail)
{
    worker_enqueue(w, head, tail);
    /*
     * Queued from w's own round (a completion freed a rail's room): this
     * thread posts them in its next round or as it lets go of w
     * (ote_worker_hand_back), without a system call per completion.
     */
    if (round_worker != w && atomic_load(&w->sleeping))
        ote_worker_wake(w);
}

/*
 * Post a chain of slices; a slice that cannot be posted ends at once, and
 * so does one whose task was canceled (or every one with cancel_all, when
 * the worker stops).
 */
static unsigned worker_post_chain(ote_slice_t *s, bool cancel_all)
{
    ote_slice_t *next;
    unsigned n = 0;

    for (; s != NULL; s = next, n++) {
        ote_task_t *task = s->task;
        ote_status_t status;

        next = s->next;
        if (cancel_all || atomic_load_explicit(&task->cancel, memory_order_relaxed)) {
            ote_task_slice_end(s, OTE_ERR_CANCELED);
            continue;
        }
        status = ote_proto_slice_post(s);
        if (status != OTE_INPROGRESS)
            ote_task_slice_done(s, status);
    }
    return n;
}

/* Post the queued slices (worker_post_chain). */
static unsigned worker_drain_queue(ote_worker_t *w, bool cancel_all)
{
    ote_slice_t *s;

    /* Most rounds find it empty: no lock for that. */
    if (!atomic_load(&w->queued))
        return 0;
    pthread_mutex_lock(&w->qlock);
    s        = w->qhead;
    w->qhead = w->qtail = NULL;
    atomic_store(&w->queued, false);
    pthread_mutex_unlock(&w->qlock);
    return worker_post_chain(s, cancel_all);
}

static unsigned worker_progress(ote_worker_t *w)
{
    unsigned n = 0;

    for (size_t i = 0; i < w->num_ifaces; i++)
        n += w->ifaces[i]->ops->progress(w->ifaces[i]);
    for (size_t i = 0; i < OTE_WORKER_MAX_PROGRESS; i++) {
        ote_proto_progress_cb_t cb = atomic_load_explicit(&w->progress[i].progress,
                                                          memory_order_acquire);

        if (cb != NULL)
            n += cb(w->progress[i].arg);
    }
    return n;
}

ote_status_t ote_worker_progress_register(ote_worker_t *w, ote_proto_progress_cb_t progress,
                                          ote_proto_pending_cb_t pending, void *arg, int *id_p)
{
    ote_status_t status = OTE_ERR_BUSY;

    pthread_mutex_lock(&w->progress_lock);
    for (int i = 0; i < OTE_WORKER_MAX_PROGRESS; i++) {
        ote_worker_progress_t *p = &w->progress[i];

        if (atomic_load_explicit(&p->progress, memory_order_relaxed) != NULL)
            continue;
        p->pending = pending;
        p->arg     = arg;
        /* Published last: a round sees the callback with its arguments. */
        atomic_store_explicit(&p->progress, progress, memory_order_release);
        *id_p  = i;
        status = OTE_OK;
        break;
    }
    pthread_mutex_unlock(&w->progress_lock);
    return status;
}

void ote_worker_progress_unregister(ote_worker_t *w, int id)
{
    if (id < 0 || id >= OTE_WORKER_MAX_PROGRESS)
        return;
    pthread_mutex_lock(&w->progress_lock);
    atomic_store_explicit(&w->progress[id].progress, NULL, memory_order_release);
    pthread_mutex_unlock(&w->progress_lock);
}

/*
 * Before sleeping: every iface is armed; true when one still has work to
 * progress (then the worker must not sleep). *cap_ms_p bounds the sleep
 * when an iface can only be polled.
 */
bool ote_worker_arm(ote_worker_t *w, int *cap_ms_p)
{
    bool busy = false;

    for (size_t i = 0; i < w->num_ifaces; i++) {
        ote_tl_iface_t *iface = w->ifaces[i];

        ote_status_t armed = iface->ops->event_arm(iface);

        if (armed == OTE_ERR_BUSY)
            busy = true;
        else if (armed == OTE_ERR_UNSUPPORTED && iface->ops->event_fd(iface) < 0)
            *cap_ms_p = 1;
    }
    for (size_t i = 0; i < OTE_WORKER_MAX_PROGRESS; i++) {
        ote_worker_progress_t *p = &w->progress[i];

        if (atomic_load_explicit(&p->progress, memory_order_acquire) != NULL &&
            p->pending(p->arg))
            busy = true;
    }
    return busy;
}

/* An iface still has something check_timeouts must watch (a peer not reading answers). */
static bool worker_has_deadlines(ote_worker_t *w)
{
    for (size_t i = 0; i < w->num_ifaces; i++) {
        ote_tl_iface_t *iface = w->ifaces[i];

        if (iface->ops->has_deadlines(iface))
            return true;
    }
    return false;
}

static void worker_check_timeouts(ote_worker_t *w)
{
    uint64_t limit = (uint64_t)ote_engine_facts(w->engine)->config.xfer_timeout_ms * 1000000ull;
    uint64_t now   = ote_time_ns();

    if (now <= limit)
        return;
    for (size_t i = 0; i < w->num_ifaces; i++)
        w->ifaces[i]->ops->check_timeouts(w->ifaces[i], now - limit);
}

/*
 * While callers progress w (lock not held): wait on the wake-up fd alone,
 * so that the answers the callers take wake no second thread. Returns when
 * woken (a submitter queued work, a caller left before its task ended),
 * when the worker stops, when the callers are gone (looked at every park
 * interval) or at end_ns (0: no limit).
 */
static void worker_park(ote_worker_t *w, uint64_t end_ns)
{
    uint64_t step = (uint64_t)ote_engine_facts(w->engine)->config.poll_park_us * 1000ull;

    atomic_store(&w->parked, true);
    while (!atomic_load(&w->stop) && atomic_load(&w->callers) > 0) {
        uint64_t ns = step, now = ote_time_ns();

        if (end_ns != 0) {
            if (now >= end_ns)
                break;
            if (end_ns - now < ns)
                ns = end_ns - now;
        }
        if (wake_wait(w, ns))
            break;
    }
    atomic_store(&w->parked, false);
}

/*
 * An iface's event fd fired and this thread took the edge (the fds are
 * edge-triggered): the iface's next progress, whoever runs it, must look
 * at everything its fd announces, even on a round it would skip (an idle
 * stream iface looks for accepts only every few rounds).
 */
static void worker_event_seen(ote_worker_t *w, const void *ptr)
{
    for (size_t i = 0; i < w->num_ifaces; i++) {
        if (w->ifaces[i] == ptr) {
            atomic_store_explicit(&w->ifaces[i]->event_seen, true, memory_order_release);
            return;
        }
    }
}

/*
 * Sleep on the worker's fds (lock not held) for at most timeout_ms (-1:
 * no limit). Events that wake it while a caller progresses this worker
 * are left to that caller, and the thread parks until the callers are
 * gone: the fds are edge-triggered, so what the callers handled meanwhile
 * wakes it at most once more.
 */
static void worker_sleep(ote_worker_t *w, int timeout_ms)
{
    uint64_t end = timeout_ms < 0 ? 0 : ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;
    struct epoll_event ev[8];
    bool woken = false;
    int n      = epoll_wait(w->epfd, ev, 8, timeout_ms);

    for (int i = 0; i < n; i++) {
        if (ev[i].data.ptr == &wake_tag) {
            uint64_t v;

            (void)!read(w->wake_fd, &v, sizeof(v));
            woken = true;
        } else {
            worker_event_seen(w, ev[i].data.ptr);
        }
    }
    if (n <= 0 || woken || atomic_load(&w->stop) || atomic_load(&w->callers) == 0)
        return;
    /* Seen by a leaving caller (worker_leave), or we see it gone. */
    atomic_fetch_add(&w->missed, 1);
    if (atomic_load(&w->callers) != 0)
        worker_park(w, end);
}

/*
 * How long to poll after the last event: twice the recent interval between
 * a quiet moment and the next event when that is short, else the grace.
 */
static uint64_t worker_spin_ns(const ote_worker_t *w, uint64_t grace_ns, uint64_t max_ns)
{
    uint64_t b = 2 * w->event_gap_ns;

    if (w->event_gap_ns > max_ns)
        return grace_ns;
    if (b > max_ns)
        b = max_ns;
    return b > grace_ns ? b : grace_ns;
}

/*
 * Slices wait in w's queue. Read after setting sleeping, and a submitter
 * reads sleeping after setting queued (both sequentially consistent): one
 * of the two sees the other, and the submitter then wakes us.
 */
static bool worker_queued(ote_worker_t *w)
{
    return atomic_load(&w->queued);
}

static void *worker_main(void *arg)
{
    ote_worker_t *w       = arg;
    uint64_t grace_ns     = (uint64_t)ote_engine_facts(w->engine)->config.poll_grace_us * 1000ull;
    uint64_t max_ns = (uint64_t)ote_engine_facts(w->engine)->config.poll_spin_max_us * 1000ull;
    uint64_t last_event   = ote_time_ns();
    uint64_t next_yield   = last_event + YIELD_NS;
    uint64_t quiet_since  = 0; /* first round without events after some, 0 while busy */
    bool woke             = false;
    /* After this long without events, nothing of a transport's own can be due. */
    uint64_t idle_ns =
        (uint64_t)ote_engine_facts(w->engine)->config.handshake_timeout_ms * 1000000ull +
        2 * OTE_WORKER_TIMEOUT_CHECK_NS;

    pthread_mutex_lock(&w->lock);
    w->event_gap_ns = max_ns + 1;
    while (!atomic_load(&w->stop)) {
        unsigned events = ote_worker_round(w);
        int cap_ms      = -1;
        uint64_t now;

        now = ote_time_ns();
        if (atomic_load_explicit(&w->lock_wanted, memory_order_relaxed) != 0) {
            /* Threads setting up or tearing down eps: the lock is theirs until they took it. */
            pthread_mutex_unlock(&w->lock);
            while (atomic_load(&w->lock_wanted) != 0 && !atomic_load(&w->stop))
                sched_yield();
            worker_lock(w);
            next_yield = now + YIELD_NS;
        } else if (now >= next_yield) {
            /* Threads setting up eps wait for the lock: let them in now and then. */
            pthread_mutex_unlock(&w->lock);
            sched_yield();
            worker_lock(w);
            next_yield = now + YIELD_NS;
        }
        if (events) {
            if (quiet_since != 0) {
                uint64_t gap = now - quiet_since;

                if (gap > 2 * max_ns)
                    gap = 2 * max_ns;
                w->event_gap_ns = (3 * w->event_gap_ns + gap) / 4;
                quiet_since     = 0;
            }
            last_event = now;
            woke       = false;
            atomic_store_explicit(&w->active_ns, now, memory_order_relaxed);
            continue;
        }
        if (quiet_since == 0)
            quiet_since = now;
        /*
         * Callers in ote_batch_wait() poll this worker: leave the lock and
         * the CPU to them. A queued slice or a caller that stops polling
         * before its task ended wakes the thread (worker_park).
         */
        if (atomic_load(&w->callers) > 0) {
            uint64_t until = w->next_timeout; /* the callers update it under the lock */
            bool queued;

            atomic_store(&w->sleeping, true);
            queued = worker_queued(w);
            pthread_mutex_unlock(&w->lock);
            if (!queued)
                worker_park(w, until);
            worker_lock(w);
            atomic_store(&w->sleeping, false);
            last_event = ote_time_ns();
            woke       = false;
            continue;
        }
        /* A wake-up that found nothing (a caller took the events): sleep again at once. */
        if (!woke && now - last_event < worker_spin_ns(w, grace_ns, max_ns)) {
            ote_worker_pause();
            continue;
        }

        /* Sleep until an iface has work, a submitter wakes us, or a timer is due. */
        atomic_store(&w->sleeping, true);
        events = worker_queued(w);
        if (!events && ote_worker_arm(w, &cap_ms)) {
            /* Work an iface cannot signal: poll on, but stay interruptible. */
            atomic_store(&w->sleeping, false);
            continue;
        }
        if (!events && !atomic_load(&w->stop)) {
            int timeout = (int)((w->next_timeout - now) / 1000000ull) + 1;

            if (w->next_timeout <= now)
                timeout = 0;
            if (cap_ms >= 0 && timeout > cap_ms)
                timeout = cap_ms;
            /*
             * Nothing in flight: no timeout to watch, sleep until an fd
             * fires. A submitter that posts directly afterwards sees
             * idle_sleep and wakes us (ote_worker_post); one that queues
             * sees sleeping. Both are set while we hold the lock.
             */
            if (cap_ms < 0 && atomic_load(&ote_xfer_state(w->engine)->inflight_tasks) == 0 &&
                /* signed: a submitter may have stamped it after our now */
                (int64_t)(now - atomic_load_explicit(&w->active_ns, memory_order_relaxed)) >
                    (int64_t)idle_ns &&
                !worker_has_deadlines(w)) {
                atomic_store(&w->idle_sleep, true);
                timeout = -1;
            }

            pthread_mutex_unlock(&w->lock);
            worker_sleep(w, timeout);
            worker_lock(w);
            atomic_store(&w->idle_sleep, false);
            woke = true;
        }
        atomic_store(&w->sleeping, false);
        last_event = ote_time_ns();
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

ote_status_t ote_worker_start(ote_worker_t *w)
{
    for (size_t i = 0; i < w->num_ifaces; i++) {
        int fd = w->ifaces[i]->ops->event_fd(w->ifaces[i]);
        /* Edge-triggered: a thread that leaves events to a caller sleeps on (worker_sleep). */
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = w->ifaces[i]};

        if (fd >= 0 && epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            return OTE_ERR_IO;
    }
    if (!ote_engine_facts(w->engine)->config.progress_thread) {
        /* Callers progress; waiting ones sleep on every worker's fds at once. */
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};

        return epoll_ctl(ote_worker_set(w->engine)->poll_epfd, EPOLL_CTL_ADD, w->epfd, &ev) == 0
                   ? OTE_OK
                   : OTE_ERR_IO;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return OTE_ERR_NO_MEMORY;
    w->started = true;
    {
        char name[16];

        /* Visible in /proc/<pid>/task/<tid>/comm, top -H, gdb. */
        snprintf(name, sizeof(name), "ote-worker-%zu", w->index);
        pthread_setname_np(w->thread, name);
    }
    ote_worker_bind(w);
    return OTE_OK;
}

ote_status_t ote_worker_iface_add(ote_worker_t *w, ote_tl_iface_t *iface)
{
    int fd                = iface->ops->event_fd(iface);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = iface};
    size_t n;

    pthread_mutex_lock(&w->lock);
    n = w->num_ifaces;
    if (n == OTE_MAX_IFACES || (fd >= 0 && epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)) {
        pthread_mutex_unlock(&w->lock);
        return n == OTE_MAX_IFACES ? OTE_ERR_NO_MEMORY : OTE_ERR_IO;
    }
    w->ifaces[n]  = iface;
    w->num_ifaces = n + 1; /* after the entry: readers without the lock see it whole */
    pthread_mutex_unlock(&w->lock);
    ote_worker_wake(w);
    return OTE_OK;
}

void ote_worker_stop(ote_worker_t *w)
{
    if (w->started) {
        atomic_store(&w->stop, true);
        ote_worker_wake(w);
        pthread_join(w->thread, NULL);
        w->started = false;
    }
    /* Slices still queued end CANCELED. */
    worker_drain_queue(w, true);
}

void ote_worker_cleanup(ote_worker_t *w)
{
    ote_proto_stage_worker_destroy(w->stage);
    w->stage = NULL;
    for (size_t i = 0; i < w->num_ifaces; i++)
        w->ifaces[i]->ops->close(w->ifaces[i]);
    w->num_ifaces = 0;
    ote_fd_close(w->epfd);
    ote_fd_close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->qlock);
    pthread_mutex_destroy(&w->progress_lock);
}
