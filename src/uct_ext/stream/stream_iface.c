/*
 * Stream base: the iface (listener, epoll, the list of connections), its
 * progress, admission of accepted sockets and timeouts.
 */
#include "stream.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

/* epoll tag of the listening socket. */
static char listen_tag;

void ote_stream_iface_mark_dirty(ote_stream_iface_t *iface, ote_stream_conn_t *c)
{
    if (c->dirty)
        return;
    c->dirty      = true;
    c->next_dirty = iface->dirty;
    iface->dirty  = c;
}

void ote_stream_iface_watch(ote_stream_iface_t *iface, ote_stream_conn_t *c)
{
    /* A closed connection is in no list of the iface's (ote_stream_iface_conn_closed). */
    if (c->watched || c->dead)
        return;
    c->watched = true;
    OTE_DLIST_PUSH_FRONT_L(iface->watch, c, prev_watch, next_watch);
}

void ote_stream_iface_unwatch(ote_stream_iface_t *iface, ote_stream_conn_t *c)
{
    if (!c->watched)
        return;
    OTE_DLIST_REMOVE_L(iface->watch, c, prev_watch, next_watch);
    c->next_watch = c->prev_watch = NULL;
    c->watched                    = false;
}

/* Something of c's the timeout check must look at again. */
static bool conn_watch_needed(const ote_stream_conn_t *c)
{
    return !c->dead && (c->handshake_deadline || c->tx_stall_ns || c->ops_count || c->rxbuf ||
                        (c->ep == NULL && c->rx_state == OTE_STREAM_RX_PAYLOAD));
}

void ote_stream_iface_conn_closed(ote_stream_iface_t *iface, ote_stream_conn_t *c)
{
    ote_stream_iface_unwatch(iface, c);
    ote_stream_conn_t **pp;

    if (c->dirty) {
        for (pp = &iface->dirty; *pp != NULL; pp = &(*pp)->next_dirty) {
            if (*pp == c) {
                *pp = c->next_dirty;
                break;
            }
        }
        c->dirty = false;
    }
    OTE_DLIST_REMOVE(iface->conns, c);
    c->next = c->prev = NULL;
    if (c->ep == NULL) {
        iface->num_accepted--;
        if (c->admitted)
            ote_auth_conn_release(iface->auth, c->ip);
        c->admitted      = false;
        c->next_dead     = iface->graveyard;
        iface->graveyard = c;
    }
}

static void iface_link(ote_stream_iface_t *iface, ote_stream_conn_t *c)
{
    OTE_DLIST_PUSH_FRONT(iface->conns, c);
}

static void flush_dirty(ote_stream_iface_t *iface)
{
    while (iface->dirty != NULL) {
        ote_stream_conn_t *c = iface->dirty;

        iface->dirty = c->next_dirty;
        c->dirty     = false;
        if (!c->dead)
            ote_stream_conn_flush(c);
    }
}

static unsigned peer_conn_count(ote_stream_iface_t *iface, const char *ip)
{
    unsigned n = 0;

    for (ote_stream_conn_t *c = iface->conns; c != NULL; c = c->next) {
        if (c->ep == NULL && strcmp(c->ip, ip) == 0)
            n++;
    }
    return n;
}

ote_status_t ote_stream_iface_conn_accept(ote_stream_iface_t *iface, int fd,
                                          const struct sockaddr_storage *ss)
{
    ote_stream_conn_t *c;
    char ip[64], label[64];
    pid_t pid = 0;
    ote_status_t status;

    if (ss->ss_family == AF_UNIX) {
        /* A local peer: it is known by its process, as the kernel names it. */
        struct ucred cred;
        socklen_t clen = sizeof(cred);

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0 && clen == sizeof(cred))
            pid = cred.pid;
        snprintf(ip, sizeof(ip), "pid:%ld", (long)pid);
        snprintf(label, sizeof(label), "process %ld", (long)pid);
    } else {
        ote_sockaddr_ip((const struct sockaddr *)ss, ip, sizeof(ip));
        ote_sockaddr_format((const struct sockaddr *)ss, label, sizeof(label));
    }
    if (iface->auth != NULL) {
        /* Limits count every listener of the engine together. */
        status = ote_auth_conn_admit(iface->auth, ip);
        if (status != OTE_OK) {
            close(fd);
            return status;
        }
    } else if (iface->num_accepted >= iface->max_conns ||
               peer_conn_count(iface, ip) >= (unsigned)iface->max_conns_per_peer) {
        ote_warn("%s: connection from %s refused: OTE_MAX_CONNS or OTE_MAX_CONNS_PER_PEER "
                 "reached", iface->super.resource.tl_name, label);
        close(fd);
        return OTE_ERR_BUSY;
    }
    ote_stream_conn_set_sockopts(iface, fd);
    status = ote_stream_conn_new(iface, fd, NULL, &c);
    if (status != OTE_OK) {
        if (iface->auth != NULL)
            ote_auth_conn_release(iface->auth, ip);
        close(fd);
        return status;
    }
    c->admitted = iface->auth != NULL;
    c->peer_pid = pid;
#ifdef SYS_pidfd_open
    /* Pins the process itself: its pid may be reused once it is gone. */
    if (pid > 0)
        c->peer_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
    snprintf(c->ip, sizeof(c->ip), "%s", ip);
    snprintf(c->peer, sizeof(c->peer), "%s", label);
    c->handshake_deadline = ote_time_ns() + iface->handshake_timeout_ns;
    iface_link(iface, c);
    ote_stream_iface_watch(iface, c);
    iface->num_accepted++;
    return OTE_OK;
}

/* Pause between accepts that found no descriptor (the process's limit reached). */
#define STREAM_ACCEPT_PAUSE_NS (100ull * 1000 * 1000)

/* Take the listen socket out of the epoll set for a while, or back in. */
static void iface_accept_pause(ote_stream_iface_t *iface, bool pause)
{
    struct epoll_event ev = {.events = pause ? 0 : EPOLLIN, .data.ptr = &listen_tag};

    if (pause == (iface->accept_resume != 0) ||
        epoll_ctl(iface->epfd, EPOLL_CTL_MOD, iface->listen_fd, &ev) != 0)
        return;
    iface->accept_resume = pause ? ote_time_ns() + STREAM_ACCEPT_PAUSE_NS : 0;
}

static void iface_accept(ote_stream_iface_t *iface)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(iface->listen_fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                ote_warn("%s: cannot accept a connection: %s; trying again in 100 ms",
                         iface->super.resource.tl_name, strerror(errno));
                iface_accept_pause(iface, true);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                ote_warn("%s accept: %s", iface->super.resource.tl_name, strerror(errno));
            }
            return;
        }
        ote_stream_iface_conn_accept(iface, fd, &ss);
    }
}

static void free_graveyard(ote_stream_iface_t *iface)
{
    while (iface->graveyard != NULL) {
        ote_stream_conn_t *c = iface->graveyard;

        iface->graveyard = c->next_dead;
        ote_stream_conn_free(c);
    }
}

/*
 * The initiator connection that alone waits for answers, with nothing to
 * send that waits for EPOLLOUT; NULL where the epoll set decides.
 */
static ote_stream_conn_t *direct_conn(ote_stream_iface_t *iface)
{
    ote_stream_conn_t *c = iface->rx_hint;

    if (c == NULL || iface->ops_conns != 1 || c->ops_count == 0 || c->dead || c->want_out ||
        c->ep == NULL)
        return NULL;
    return c;
}

/*
 * Read c as an epoll event would have it read: one system call (recv or
 * readv) instead of epoll_wait and then that call on the round that the
 * answer arrives. True where it took bytes or closed the connection.
 */
static bool direct_rx(ote_stream_conn_t *c)
{
    size_t ops = c->ops_count, len = c->rx_len, off = c->rx_off, rem = c->rx_remaining;

    ote_stream_conn_rx(c);
    return c->dead || c->ops_count != ops || c->rx_len != len || c->rx_off != off ||
           c->rx_remaining != rem;
}

/*
 * The worker took an edge of our epoll fd (worker.c, worker_sleep): what
 * it announced is still in the epoll set, which this round must look at,
 * since the worker will not be woken for it again. One atomic load per
 * round while unset.
 */
static bool event_seen_take(ote_stream_iface_t *iface)
{
    atomic_bool *seen = &iface->super.event_seen;

    return atomic_load_explicit(seen, memory_order_relaxed) &&
           atomic_exchange_explicit(seen, false, memory_order_acquire);
}

unsigned ote_stream_iface_progress(ote_tl_iface_t *tl_iface)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;
    struct epoll_event ev[64];
    unsigned count = iface->dirty != NULL;
    ote_stream_conn_t *d;
    bool skip = false;
    int n     = 0;

    flush_dirty(iface);
    /*
     * One connection waits for its answers (a round trip, or one peer's
     * stream): read it directly, and look at the others, at accepts and
     * at EPOLLOUT every OTE_STREAM_EPOLL_EVERY-th round. Its fd stays in
     * the epoll set (level-triggered), so bytes left unread are announced
     * there too. An iface without connections (an engine listening on
     * 0.0.0.0 has one per interface, most of them unused) can only see
     * accepts: it looks as often. Both look at once after the worker saw
     * the iface's fd fire, which may have been the worker's only wake-up
     * for what fired (another peer's request, an accept, EPOLLOUT: the
     * worker's fds are edge-triggered; it may sleep until its timer).
     */
    d = direct_conn(iface);
    if (d != NULL) {
        count += direct_rx(d);
        skip = ++iface->direct_rounds % OTE_STREAM_EPOLL_EVERY != 0 && !event_seen_take(iface);
    } else if (iface->conns == NULL) {
        skip = ++iface->idle_rounds % OTE_STREAM_EPOLL_EVERY != 0 && !event_seen_take(iface);
    }
    if (skip)
        goto rest;
    n = epoll_wait(iface->epfd, ev, 64, 0);
    for (int i = 0; i < n; i++) {
        ote_stream_conn_t *c;

        if (ev[i].data.ptr == &listen_tag) {
            iface_accept(iface);
            continue;
        }
        c = ev[i].data.ptr;
        if (c->dead)
            continue;
        if (c->ep == NULL &&
            ((ev[i].events & EPOLLERR) ||
             (iface->hooks->ref_handle != NULL && (ev[i].events & EPOLLHUP)))) {
            /*
             * The initiator reset the connection, which it does only once it
             * has ended every request it left unanswered on it (a timeout, a
             * cancel, a close): what is still queued in the socket must not
             * land, even when this process ran late (stopped, descheduled).
             * A local socket (cma, shm) does not reset: its peer's close is
             * a hang-up, and it closes only once done with the connection.
             */
            ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
            continue;
        }
        if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            ote_stream_conn_rx(c);
        if (!c->dead && (ev[i].events & EPOLLOUT))
            ote_stream_conn_flush(c);
    }
rest:
    /*
     * Connections that stopped on their budget with bytes still buffered;
     * looked for only when one did (a walk of every connection per round
     * would cost an idle engine's rounds in proportion to its peers).
     */
    if (iface->rx_again_conns) {
        iface->rx_again_conns = false; /* set again by one that stops again */
        for (ote_stream_conn_t *c = iface->conns, *next; c != NULL; c = next) {
            next = c->next;
            if (c->rx_again && !c->dead) {
                ote_stream_conn_rx(c);
                count++;
                /*
                 * One that failed left the list (its next is gone), and a
                 * read may end others (the next among them; freed only at
                 * the end of the round): the walk starts again; those read
                 * already have rx_again clear unless they stopped again.
                 */
                if (c->dead || (next != NULL && next->dead))
                    next = iface->conns;
            }
        }
    }
    flush_dirty(iface);
    free_graveyard(iface);
    return count + (unsigned)(n > 0 ? n : 0);
}

/*
 * The worker's timeout check (every OTE_WORKER_TIMEOUT_CHECK_NS while it
 * ticks): only the watched connections, each dropped from the list once it
 * has nothing left to watch. A connection that failed may end operations
 * of others and change the list: the walk starts again.
 */
void ote_stream_iface_check_timeouts(ote_tl_iface_t *tl_iface, uint64_t deadline_ns)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;
    uint64_t now           = ote_time_ns();
    ote_stream_conn_t *c, *next;

    if (iface->accept_resume != 0 && now >= iface->accept_resume)
        iface_accept_pause(iface, false);
    for (c = iface->watch; c != NULL; c = next) {
        next = c->next_watch;
        if (c->ep == NULL && c->handshake_deadline && now > c->handshake_deadline) {
            ote_warn("%s peer %s: no %s within OTE_HANDSHAKE_TIMEOUT_MS; closing",
                     OTE_STREAM_CONN_TL(c), c->peer,
                     c->rx_state == OTE_STREAM_RX_AUTH ? "authentication" : "HELLO");
            ote_stream_conn_fail(c, OTE_ERR_TIMEOUT);
            next = iface->watch;
            continue;
        }
        if (c->ep == NULL && c->tx_stall_ns && c->tx_stall_ns < deadline_ns) {
            /* It holds our answers (and their regions) in its socket: reset, not close. */
            ote_warn("%s peer %s: its answers have not been read for OTE_XFER_TIMEOUT_MS; "
                     "resetting the connection", OTE_STREAM_CONN_TL(c), c->peer);
            ote_socket_set_linger0(c->fd);
            ote_stream_conn_fail(c, OTE_ERR_TIMEOUT);
            next = iface->watch;
            continue;
        }
        /*
         * Target: a payload under way holds its regions (a deregistered
         * one's memory stays mapped until it is released); a peer that
         * sent part of it and then nothing for OTE_XFER_TIMEOUT_MS is reset.
         */
        if (c->ep == NULL && c->rx_state == OTE_STREAM_RX_PAYLOAD && !c->rx_recent) {
            if (c->rx_stall_ns == 0) {
                c->rx_stall_ns = now;
            } else if (c->rx_stall_ns < deadline_ns) {
                ote_warn("%s peer %s: nothing more of a payload under way for "
                         "OTE_XFER_TIMEOUT_MS; resetting the connection",
                         OTE_STREAM_CONN_TL(c), c->peer);
                ote_socket_set_linger0(c->fd);
                ote_stream_conn_fail(c, OTE_ERR_TIMEOUT);
                next = iface->watch;
                continue;
            }
        } else {
            c->rx_stall_ns = 0;
        }
        if (c->ops_count && c->ops[c->ops_head].post_ns < deadline_ns) {
            ote_warn("%s connection to %s: no answer within OTE_XFER_TIMEOUT_MS",
                     OTE_STREAM_CONN_TL(c), c->peer);
            /*
             * Its tasks end now: reset, so that the peer drops the requests
             * still queued on the connection instead of carrying them out
             * later in memory the application may use again.
             */
            ote_socket_set_linger0(c->fd);
            ote_stream_conn_fail(c, OTE_ERR_TIMEOUT);
            /* The list may have changed under the completions. */
            next = iface->watch;
            continue;
        }
        if (!c->dead)
            ote_stream_conn_rx_idle(c);
        if (!conn_watch_needed(c))
            ote_stream_iface_unwatch(iface, c);
    }
    free_graveyard(iface);
}

bool ote_stream_iface_has_deadlines(ote_tl_iface_t *tl_iface)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;

    if (iface->accept_resume != 0)
        return true; /* the listen socket goes back into the epoll set then */
    for (ote_stream_conn_t *c = iface->watch; c != NULL; c = c->next_watch) {
        if (!c->dead && (c->tx_stall_ns || c->handshake_deadline ||
                         (c->ep == NULL && c->rx_state == OTE_STREAM_RX_PAYLOAD)))
            return true;
    }
    return false;
}

int ote_stream_iface_event_fd(ote_tl_iface_t *tl_iface)
{
    return ((ote_stream_iface_t *)tl_iface)->epfd;
}

void ote_stream_iface_close(ote_tl_iface_t *tl_iface)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;

    /* Target-side connections; initiator ones belong to their eps. */
    for (ote_stream_conn_t *c = iface->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->ep == NULL)
            ote_stream_conn_fail(c, OTE_ERR_CANCELED);
    }
    free_graveyard(iface);
    ote_fd_close(iface->listen_fd);
    ote_fd_close(iface->epfd);
    free(iface->discard);
    free(iface);
}

ote_status_t ote_stream_iface_init(ote_stream_iface_t *iface, const ote_tl_resource_t *res,
                                   const ote_tl_iface_params_t *params,
                                   const ote_stream_config_t *cfg, const ote_stream_hooks_t *hooks)
{
    iface->hooks             = hooks;
    iface->listen_fd         = -1;
    iface->epfd              = -1;
    iface->super.resource    = *res;
    iface->super.md          = NULL;
    iface->super.md_index    = -1;
    iface->regions           = params->regions;
    iface->worker_lock       = params->worker_lock;
    iface->instance_id       = params->instance_id;
    iface->max_conns         = params->max_conns;
    iface->max_conns_per_peer = params->max_conns_per_peer;
    iface->auth              = params->auth;
    iface->handshake_timeout_ns = (uint64_t)params->handshake_timeout_ms * 1000000ull;
    iface->cfg               = *cfg;
    iface->discard           = malloc(OTE_STREAM_RXBUF);
    return iface->discard != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
}

ote_status_t ote_stream_iface_epoll_init(ote_stream_iface_t *iface)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};

    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (iface->epfd < 0 || epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->listen_fd, &ev) != 0)
        return OTE_ERR_IO;
    return OTE_OK;
}
