/*
 * Worker threads: each owns its ifaces and eps (UCT objects are not
 * thread-safe), posts the slices queued by submitters, progresses the
 * ifaces, busy-polls for OTE_POLL_GRACE_US after the last event and then
 * sleeps on the ifaces' event fds.
 */
#include "engine.h"
#include "log.h"
#include "util.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define TIMEOUT_CHECK_NS (100ull * 1000 * 1000)

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
        if (w->epfd >= 0)
            close(w->epfd);
        if (w->wake_fd >= 0)
            close(w->wake_fd);
        return OTE_ERR_IO;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_init(&w->qlock, NULL);
    return OTE_OK;
}

static unsigned worker_drain_queue(ote_worker_t *w);
static unsigned worker_progress(ote_worker_t *w);

void ote_worker_post(ote_worker_t *w, ote_slice_t *head, ote_slice_t *tail)
{
    uint64_t one = 1;
    bool direct;

    tail->next = NULL;
    /*
     * When the worker is idle its lock is free: post and push the bytes out
     * from this thread, which saves waking the worker up. It still wakes on
     * its event fds for the answers.
     */
    direct = pthread_mutex_trylock(&w->lock) == 0;
    pthread_mutex_lock(&w->qlock);
    if (w->qtail)
        w->qtail->next = head;
    else
        w->qhead = head;
    w->qtail = tail;
    pthread_mutex_unlock(&w->qlock);
    if (direct) {
        worker_drain_queue(w);
        worker_progress(w);
        pthread_mutex_unlock(&w->lock);
        return;
    }
    if (atomic_load(&w->sleeping))
        (void)!write(w->wake_fd, &one, sizeof(one));
}

bool ote_worker_try_progress(ote_worker_t *w)
{
    if (pthread_mutex_trylock(&w->lock) != 0)
        return false;
    worker_drain_queue(w);
    worker_progress(w);
    pthread_mutex_unlock(&w->lock);
    return true;
}

void ote_engine_signal_event(ote_engine_h engine)
{
    uint64_t one = 1;

    if (atomic_load_explicit(&engine->event_fd_used, memory_order_relaxed))
        (void)!write(engine->event_fd, &one, sizeof(one));
}

/* Post queued slices; a slice that cannot be posted ends at once. */
static unsigned worker_drain_queue(ote_worker_t *w)
{
    ote_slice_t *s, *next;
    unsigned n = 0;

    pthread_mutex_lock(&w->qlock);
    s        = w->qhead;
    w->qhead = w->qtail = NULL;
    pthread_mutex_unlock(&w->qlock);
    for (; s != NULL; s = next, n++) {
        ote_task_t *task = s->task;
        ote_status_t status;

        next = s->next;
        if (atomic_load_explicit(&task->cancel, memory_order_relaxed)) {
            ote_task_slice_done(s, OTE_ERR_CANCELED);
            continue;
        }
        status = ote_proto_slice_post(s);
        if (status != OTE_INPROGRESS)
            ote_task_slice_done(s, status);
    }
    return n;
}

static unsigned worker_progress(ote_worker_t *w)
{
    unsigned n = 0;

    for (size_t i = 0; i < w->num_ifaces; i++)
        n += w->ifaces[i]->ops->progress(w->ifaces[i]);
    return n;
}

static void worker_check_timeouts(ote_worker_t *w)
{
    uint64_t limit = (uint64_t)w->engine->config.xfer_timeout_ms * 1000000ull;
    uint64_t now   = ote_time_ns();

    if (now <= limit)
        return;
    for (size_t i = 0; i < w->num_ifaces; i++) {
        if (w->ifaces[i]->ops->check_timeouts)
            w->ifaces[i]->ops->check_timeouts(w->ifaces[i], now - limit);
    }
}

static void *worker_main(void *arg)
{
    ote_worker_t *w       = arg;
    uint64_t grace_ns     = (uint64_t)w->engine->config.poll_grace_us * 1000ull;
    uint64_t last_event   = ote_time_ns();
    uint64_t next_timeout = last_event + TIMEOUT_CHECK_NS;

    pthread_mutex_lock(&w->lock);
    while (!atomic_load(&w->stop)) {
        unsigned events = worker_drain_queue(w);
        uint64_t now;

        events += worker_progress(w);
        now = ote_time_ns();
        if (now >= next_timeout) {
            worker_check_timeouts(w);
            next_timeout = now + TIMEOUT_CHECK_NS;
        }
        if (events) {
            last_event = now;
            continue;
        }
        if (now - last_event < grace_ns)
            continue;

        /* Sleep until an iface has work, a submitter wakes us, or a timer is due. */
        atomic_store(&w->sleeping, true);
        pthread_mutex_lock(&w->qlock);
        events = w->qhead != NULL;
        pthread_mutex_unlock(&w->qlock);
        if (!events && !atomic_load(&w->stop)) {
            struct epoll_event ev[8];
            int timeout = (int)((next_timeout - now) / 1000000ull) + 1;
            int n;

            pthread_mutex_unlock(&w->lock);
            n = epoll_wait(w->epfd, ev, 8, timeout);
            pthread_mutex_lock(&w->lock);
            for (int i = 0; i < n; i++) {
                if (ev[i].data.ptr == &wake_tag) {
                    uint64_t v;

                    (void)!read(w->wake_fd, &v, sizeof(v));
                }
            }
        }
        atomic_store(&w->sleeping, false);
        last_event = ote_time_ns();
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void worker_bind(ote_worker_t *w)
{
    const char *list = w->engine->config.worker_cpus;
    cpu_set_t set;
    int cpus[CPU_SETSIZE];
    int n = 0;
    const char *p = list;

    if (list == NULL || *list == '\0')
        return;
    while (*p && n < CPU_SETSIZE) {
        char *end;
        long a = strtol(p, &end, 10), b;

        if (end == p)
            break;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
        }
        for (long c = a; c <= b && n < CPU_SETSIZE; c++)
            cpus[n++] = (int)c;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' )
            break;
    }
    if (n == 0) {
        ote_warn("OTE_WORKER_CPUS '%s' holds no CPU", list);
        return;
    }
    CPU_ZERO(&set);
    CPU_SET(cpus[w->index % (size_t)n], &set);
    if (pthread_setaffinity_np(w->thread, sizeof(set), &set) != 0)
        ote_warn("cannot bind worker %zu to CPU %d", w->index, cpus[w->index % (size_t)n]);
}

ote_status_t ote_worker_start(ote_worker_t *w)
{
    for (size_t i = 0; i < w->num_ifaces; i++) {
        int fd = w->ifaces[i]->ops->event_fd(w->ifaces[i]);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w->ifaces[i]};

        if (fd >= 0 && epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
            return OTE_ERR_IO;
    }
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return OTE_ERR_NO_MEMORY;
    w->started = true;
    worker_bind(w);
    return OTE_OK;
}

void ote_worker_stop(ote_worker_t *w)
{
    uint64_t one = 1;

    if (!w->started)
        return;
    atomic_store(&w->stop, true);
    (void)!write(w->wake_fd, &one, sizeof(one));
    pthread_join(w->thread, NULL);
    w->started = false;
    /* Slices still queued end CANCELED. */
    worker_drain_queue(w);
}

void ote_worker_cleanup(ote_worker_t *w)
{
    for (size_t i = 0; i < w->num_ifaces; i++)
        w->ifaces[i]->ops->close(w->ifaces[i]);
    w->num_ifaces = 0;
    if (w->epfd >= 0)
        close(w->epfd);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    pthread_mutex_destroy(&w->lock);
    pthread_mutex_destroy(&w->qlock);
}
