/*
 * Control-plane listener: one thread, one epoll. Serves descriptor fetches,
 * notifications and to-ep connection requests. Each connection reads a header, then at most
 * OTE_MAX_CTL_MSG payload bytes; anything malformed closes that connection
 * with a log line and the listener carries on.
 */
#include "ctl_msg.h"
#include "engine.h"
#include "log.h"
#include "util.h"
#include "wire_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define CTL_REPLY_TIMEOUT_NS (2ull * 1000 * 1000 * 1000)

typedef struct ctl_conn {
    int              fd;
    char             peer[64];
    uint8_t          hdr[OTE_CTL_HDR_LEN];
    size_t           hdr_got;
    ote_ctl_hdr_t    h;
    uint8_t         *payload;
    size_t           got;
    struct ctl_conn *next, *prev;
} ctl_conn_t;

struct ote_ctl {
    ote_engine_h engine;
    int          listen_fd;
    int          epfd;
    int          stop_fd;
    pthread_t    thread;
    bool         started;
    ctl_conn_t  *conns;
    long         num_conns;
};

static char listen_tag, stop_tag;

static void conn_close(ote_ctl_t *ctl, ctl_conn_t *c)
{
    epoll_ctl(ctl->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        ctl->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    ctl->num_conns--;
    free(c->payload);
    free(c);
}

static ote_status_t reply(ctl_conn_t *c, uint8_t type, uint32_t seq, const void *a, size_t alen,
                          const void *b, size_t blen)
{
    uint64_t deadline = ote_time_ns() + CTL_REPLY_TIMEOUT_NS;
    uint8_t hdr[OTE_CTL_HDR_LEN];
    ote_ctl_hdr_t h = {.type = type, .length = (uint32_t)(alen + blen), .seq = seq};
    ote_status_t status;

    ote_ctl_hdr_encode(&h, hdr);
    status = ote_socket_send_all(c->fd, hdr, sizeof(hdr), deadline);
    if (status == OTE_OK && alen)
        status = ote_socket_send_all(c->fd, a, alen, deadline);
    if (status == OTE_OK && blen)
        status = ote_socket_send_all(c->fd, b, blen, deadline);
    return status;
}

static ote_status_t reply_status(ctl_conn_t *c, uint8_t type, uint32_t seq, ote_status_t s)
{
    uint8_t b[4];

    ote_put_u32(b, (uint32_t)s);
    return reply(c, type, seq, b, 4, NULL, 0);
}

/*
 * CONNECT (to-ep wire-up): create the target side of an initiator's ep on
 * the iface it names, or release such eps. The answer carries a status, so
 * a request that cannot be served keeps the connection.
 */
static ote_status_t handle_connect(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;
    ote_ctl_connect_t *m = malloc(sizeof(*m));
    uint8_t addr[OTE_TL_ADDR_MAX];
    size_t addr_len = 0;
    ote_buf_t out   = {0};
    ote_status_t status, st = OTE_OK;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_connect_decode(c->payload, c->h.length, m);
    if (status != OTE_OK) {
        free(m);
        return status;
    }
    if (m->target != e->instance_id) {
        /* The initiator's descriptor is of an earlier instance of this engine. */
        st = OTE_ERR_NOT_FOUND;
    } else if (m->op == OTE_CTL_CONNECT_OP_CONNECT) {
        ote_tl_peer_t peer = {.instance_id = m->initiator, .name = c->peer,
                              .local_instance = e->instance_id,
                              .timeout_ms = e->config.connect_timeout_ms};
        ote_tl_iface_t *iface = NULL;

        if (m->worker < e->num_workers) {
            ote_worker_t *w = &e->workers[m->worker];

            for (size_t i = 0; i < w->num_ifaces && iface == NULL; i++) {
                if (strcmp(w->ifaces[i]->resource.tl_name, m->tl_name) == 0 &&
                    strcmp(w->ifaces[i]->resource.dev_name, m->dev_name) == 0)
                    iface = w->ifaces[i];
            }
        }
        if (iface == NULL || iface->ops->ep_accept == NULL)
            st = OTE_ERR_UNREACHABLE;
        else
            st = iface->ops->ep_accept(iface, &peer, m->conn_id, m->addr, m->addr_len, addr,
                                       sizeof(addr), &addr_len);
        if (st != OTE_OK) {
            addr_len = 0;
            ote_debug("control peer %s: connect on %s/%s refused: %s", c->peer, m->tl_name,
                      m->dev_name, ote_status_string(st));
        }
    } else {
        for (size_t w = 0; w < e->num_workers; w++) {
            for (size_t i = 0; i < e->workers[w].num_ifaces; i++) {
                ote_tl_iface_t *iface = e->workers[w].ifaces[i];

                for (size_t k = 0; iface->ops->ep_release != NULL && k < m->num_ids; k++)
                    iface->ops->ep_release(iface, m->initiator, m->ids[k]);
            }
        }
    }
    status = ote_ctl_connect_ack_encode(st, addr, addr_len, &out);
    if (status == OTE_OK)
        status = reply(c, OTE_CTL_CONNECT_ACK, c->h.seq, out.data, out.len, NULL, 0);
    free(out.data);
    free(m);
    return status;
}

/* Handle one complete request; returns non-OK to close the connection. */
static ote_status_t handle(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;

    switch (c->h.type) {
    case OTE_CTL_GET_DESC: {
        ote_buf_t out = {0};
        uint8_t st[4];
        ote_status_t status;

        if (c->h.length != 0)
            return OTE_ERR_PROTOCOL;
        status = ote_engine_desc_encode(e, &out);
        ote_put_u32(st, (uint32_t)status);
        status = reply(c, OTE_CTL_DESC, c->h.seq, st, 4, status == OTE_OK ? out.data : NULL,
                       status == OTE_OK ? out.len : 0);
        free(out.data);
        return status;
    }
    case OTE_CTL_NOTIFY: {
        ote_ctl_notify_t n;
        ote_status_t status = ote_ctl_notify_decode(c->payload, c->h.length, &n);

        if (status != OTE_OK)
            return status;
        return reply_status(c, OTE_CTL_NOTIFY_ACK, c->h.seq, ote_engine_notif_push(e, &n));
    }
    case OTE_CTL_CONNECT:
        return handle_connect(ctl, c);
    default:
        return OTE_ERR_PROTOCOL;
    }
}

static void conn_read(ote_ctl_t *ctl, ctl_conn_t *c)
{
    for (;;) {
        ssize_t n;

        if (c->hdr_got < OTE_CTL_HDR_LEN) {
            n = recv(c->fd, c->hdr + c->hdr_got, OTE_CTL_HDR_LEN - c->hdr_got, MSG_DONTWAIT);
            if (n > 0) {
                c->hdr_got += (size_t)n;
                if (c->hdr_got < OTE_CTL_HDR_LEN)
                    continue;
                if (ote_ctl_hdr_decode(c->hdr, OTE_CTL_HDR_LEN, ctl->engine->config.max_ctl_msg,
                                       &c->h) != OTE_OK) {
                    ote_warn("control peer %s: malformed header; closing", c->peer);
                    conn_close(ctl, c);
                    return;
                }
                c->payload = malloc(c->h.length ? c->h.length : 1);
                c->got     = 0;
                if (c->payload == NULL) {
                    conn_close(ctl, c);
                    return;
                }
            }
        } else if (c->got < c->h.length) {
            n = recv(c->fd, c->payload + c->got, c->h.length - c->got, MSG_DONTWAIT);
            if (n > 0)
                c->got += (size_t)n;
        } else {
            n = 1;
        }
        if (n == 0) {
            conn_close(ctl, c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                conn_close(ctl, c);
            return;
        }
        if (c->hdr_got == OTE_CTL_HDR_LEN && c->got == c->h.length) {
            ote_status_t status = handle(ctl, c);

            free(c->payload);
            c->payload = NULL;
            c->hdr_got = 0;
            if (status != OTE_OK) {
                if (status == OTE_ERR_PROTOCOL)
                    ote_warn("control peer %s: malformed %u message; closing", c->peer,
                             c->h.type);
                conn_close(ctl, c);
                return;
            }
        }
    }
}

static void ctl_accept(ote_ctl_t *ctl)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        struct epoll_event ev = {.events = EPOLLIN};
        ctl_conn_t *c;
        int fd = accept4(ctl->listen_fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0)
            return;
        if (ctl->num_conns >= ctl->engine->config.max_conns) {
            ote_warn("control plane: OTE_MAX_CONNS reached, connection refused");
            close(fd);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        ote_sockaddr_format((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
        ev.data.ptr = c;
        if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = ctl->conns;
        if (ctl->conns)
            ctl->conns->prev = c;
        ctl->conns = c;
        ctl->num_conns++;
    }
}

static void *ctl_main(void *arg)
{
    ote_ctl_t *ctl = arg;
    struct epoll_event ev[32];

    for (;;) {
        int n = epoll_wait(ctl->epfd, ev, 32, -1);

        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &stop_tag)
                return NULL;
            if (ev[i].data.ptr == &listen_tag)
                ctl_accept(ctl);
        }
        /* Connections second: an accept above must not free one we hold. */
        for (int i = 0; i < n; i++) {
            ctl_conn_t *c = ev[i].data.ptr;

            if (ev[i].data.ptr == &listen_tag || ev[i].data.ptr == &stop_tag)
                continue;
            /* c may have been closed by an earlier event of this round. */
            for (ctl_conn_t *x = ctl->conns; x != NULL; x = x->next) {
                if (x == c) {
                    conn_read(ctl, c);
                    break;
                }
            }
        }
    }
    return NULL;
}

ote_status_t ote_ctl_start(ote_engine_h e, const char *listen_addr, ote_ctl_t **ctl_p,
                           char *bound, size_t bound_len)
{
    ote_ctl_t *ctl = calloc(1, sizeof(*ctl));
    struct sockaddr_storage ss;
    struct epoll_event ev = {.events = EPOLLIN};
    socklen_t len;
    ote_status_t status;

    if (ctl == NULL)
        return OTE_ERR_NO_MEMORY;
    ctl->engine    = e;
    ctl->listen_fd = ctl->epfd = ctl->stop_fd = -1;
    status = ote_sockaddr_parse(listen_addr, &ss, &len);
    if (status != OTE_OK) {
        ote_error("listen address '%s' is not host:port", listen_addr);
        status = OTE_ERR_INVALID_PARAM;
        goto err;
    }
    status = ote_socket_listen(&ss, len, &ctl->listen_fd);
    if (status != OTE_OK)
        goto err;
    len = sizeof(ss);
    getsockname(ctl->listen_fd, (struct sockaddr *)&ss, &len);
    ote_sockaddr_format((struct sockaddr *)&ss, bound, bound_len);
    ctl->epfd    = epoll_create1(EPOLL_CLOEXEC);
    ctl->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    status       = OTE_ERR_IO;
    if (ctl->epfd < 0 || ctl->stop_fd < 0)
        goto err;
    ev.data.ptr = &listen_tag;
    if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->listen_fd, &ev) != 0)
        goto err;
    ev.data.ptr = &stop_tag;
    if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->stop_fd, &ev) != 0)
        goto err;
    *ctl_p = ctl;
    return OTE_OK;

err:
    ote_ctl_stop(ctl);
    return status;
}

ote_status_t ote_ctl_run(ote_ctl_t *ctl)
{
    if (pthread_create(&ctl->thread, NULL, ctl_main, ctl) != 0)
        return OTE_ERR_NO_MEMORY;
    ctl->started = true;
    return OTE_OK;
}

void ote_ctl_stop(ote_ctl_t *ctl)
{
    uint64_t one = 1;

    if (ctl == NULL)
        return;
    if (ctl->started) {
        (void)!write(ctl->stop_fd, &one, sizeof(one));
        pthread_join(ctl->thread, NULL);
    }
    while (ctl->conns)
        conn_close(ctl, ctl->conns);
    if (ctl->listen_fd >= 0)
        close(ctl->listen_fd);
    if (ctl->epfd >= 0)
        close(ctl->epfd);
    if (ctl->stop_fd >= 0)
        close(ctl->stop_fd);
    free(ctl);
}
