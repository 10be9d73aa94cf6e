/* Native tcp component: resources, iface (listener + epoll), progress. */
#include "tcp.h"

#include "base/dlist.h"
#include "base/config.h"
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

void ote_tcp_iface_mark_dirty(ote_tcp_iface_t *iface, ote_tcp_conn_t *c)
{
    if (c->dirty)
        return;
    c->dirty      = true;
    c->next_dirty = iface->dirty;
    iface->dirty  = c;
}

void ote_tcp_iface_conn_closed(ote_tcp_iface_t *iface, ote_tcp_conn_t *c)
{
    ote_tcp_conn_t **pp;

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

static void iface_link(ote_tcp_iface_t *iface, ote_tcp_conn_t *c)
{
    OTE_DLIST_PUSH_FRONT(iface->conns, c);
}

static void flush_dirty(ote_tcp_iface_t *iface)
{
    while (iface->dirty != NULL) {
        ote_tcp_conn_t *c = iface->dirty;

        iface->dirty = c->next_dirty;
        c->dirty     = false;
        if (!c->dead)
            ote_tcp_conn_flush(c);
    }
}

static unsigned peer_conn_count(ote_tcp_iface_t *iface, const char *ip)
{
    unsigned n = 0;

    for (ote_tcp_conn_t *c = iface->conns; c != NULL; c = c->next) {
        if (c->ep == NULL && strcmp(c->ip, ip) == 0)
            n++;
    }
    return n;
}

ote_status_t ote_tcp_iface_conn_accept(ote_tcp_iface_t *iface, int fd,
                                       const struct sockaddr_storage *ss)
{
    ote_tcp_conn_t *c;
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
    ote_tcp_conn_set_sockopts(iface, fd);
    status = ote_tcp_conn_new(iface, fd, NULL, &c);
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
    iface->num_accepted++;
    return OTE_OK;
}

static void iface_accept(ote_tcp_iface_t *iface)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(iface->listen_fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                ote_warn("tcp accept: %s", strerror(errno));
            return;
        }
        ote_tcp_iface_conn_accept(iface, fd, &ss);
    }
}

static void free_graveyard(ote_tcp_iface_t *iface)
{
    while (iface->graveyard != NULL) {
        ote_tcp_conn_t *c = iface->graveyard;

        iface->graveyard = c->next_dead;
        ote_tcp_conn_free(c);
    }
}

unsigned ote_tcp_iface_progress(ote_tl_iface_t *tl_iface)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;
    struct epoll_event ev[64];
    unsigned count = iface->dirty != NULL;
    int n;

    flush_dirty(iface);
    n = epoll_wait(iface->epfd, ev, 64, 0);
    for (int i = 0; i < n; i++) {
        ote_tcp_conn_t *c;

        if (ev[i].data.ptr == &listen_tag) {
            iface_accept(iface);
            continue;
        }
        c = ev[i].data.ptr;
        if (c->dead)
            continue;
        if (c->ep == NULL && (ev[i].events & EPOLLERR)) {
            /*
             * The initiator reset the connection, which it does only once it
             * has ended every request it left unanswered on it (a timeout, a
             * cancel, a close): what is still queued in the socket must not
             * land, even when this process ran late (stopped, descheduled).
             */
            ote_tcp_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
            continue;
        }
        if (ev[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
            ote_tcp_conn_rx(c);
        if (!c->dead && (ev[i].events & EPOLLOUT))
            ote_tcp_conn_flush(c);
    }
    /* Connections that stopped on their budget with bytes still buffered. */
    for (ote_tcp_conn_t *c = iface->conns; c != NULL; c = c->next) {
        if (c->rx_again && !c->dead) {
            ote_tcp_conn_rx(c);
            count++;
        }
    }
    flush_dirty(iface);
    free_graveyard(iface);
    return count + (unsigned)(n > 0 ? n : 0);
}

void ote_tcp_iface_check_timeouts(ote_tl_iface_t *tl_iface, uint64_t deadline_ns)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;
    uint64_t now           = ote_time_ns();
    ote_tcp_conn_t *c, *next;

    for (c = iface->conns; c != NULL; c = next) {
        next = c->next;
        if (c->ep == NULL && c->handshake_deadline && now > c->handshake_deadline) {
            ote_warn("%s peer %s: no %s within OTE_HANDSHAKE_TIMEOUT_MS; closing",
                     OTE_TCP_CONN_TL(c), c->peer,
                     c->rx_state == OTE_TCP_RX_AUTH ? "authentication" : "HELLO");
            ote_tcp_conn_fail(c, OTE_ERR_TIMEOUT);
            next = iface->conns;
            continue;
        }
        if (c->ep == NULL && c->tx_stall_ns && c->tx_stall_ns < deadline_ns) {
            /* It holds our answers (and their regions) in its socket: reset, not close. */
            ote_warn("%s peer %s: its answers have not been read for OTE_XFER_TIMEOUT_MS; "
                     "resetting the connection", OTE_TCP_CONN_TL(c), c->peer);
            ote_socket_set_linger0(c->fd);
            ote_tcp_conn_fail(c, OTE_ERR_TIMEOUT);
            next = iface->conns;
            continue;
        }
        if (c->ops_count && c->ops[c->ops_head].post_ns < deadline_ns) {
            ote_warn("%s connection to %s: no answer within OTE_XFER_TIMEOUT_MS",
                     OTE_TCP_CONN_TL(c), c->peer);
            /*
             * Its tasks end now: reset, so that the peer drops the requests
             * still queued on the connection instead of carrying them out
             * later in memory the application may use again.
             */
            ote_socket_set_linger0(c->fd);
            ote_tcp_conn_fail(c, OTE_ERR_TIMEOUT);
            /* The list may have changed under the completions. */
            next = iface->conns;
        }
    }
    free_graveyard(iface);
}

bool ote_tcp_iface_has_deadlines(ote_tl_iface_t *tl_iface)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    for (ote_tcp_conn_t *c = iface->conns; c != NULL; c = c->next) {
        if (!c->dead && (c->tx_stall_ns || c->handshake_deadline))
            return true;
    }
    return false;
}

static void tcp_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    memset(caps, 0, sizeof(*caps));
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    caps->mem_local  = OTE_MEM_TYPE_HOST;
    caps->mem_remote = OTE_MEM_TYPE_HOST;
    /* A loopback interface reaches this host only. */
    caps->scope      = iface->netif.loopback ? OTE_TL_SCOPE_HOST
                                             : OTE_TL_SCOPE_HOST | OTE_TL_SCOPE_NETWORK;
    caps->max_iov    = 1;
    caps->max_msg    = iface->max_msg;
    caps->align      = 1;
    caps->slice_size = 1u << 20;
    caps->bandwidth  = 1.25e9;
    caps->latency    = 20e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

int ote_tcp_iface_event_fd(ote_tl_iface_t *tl_iface)
{
    return ((ote_tcp_iface_t *)tl_iface)->epfd;
}

static ote_status_t tcp_iface_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                          size_t *len_p)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    return ote_tcp_addr_pack(iface->advertise, iface->num_advertise, buf, max, len_p);
}

static void tcp_iface_format_address(ote_tl_iface_t *tl_iface, char *buf, size_t len)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;
    size_t off             = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < iface->num_advertise && off < len; i++) {
        char a[80];

        ote_sockaddr_format((struct sockaddr *)&iface->advertise[i].ss, a, sizeof(a));
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", a);
    }
}

void ote_tcp_iface_close(ote_tl_iface_t *tl_iface)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    /* Target-side connections; initiator ones belong to their eps. */
    for (ote_tcp_conn_t *c = iface->conns, *next; c != NULL; c = next) {
        next = c->next;
        if (c->ep == NULL)
            ote_tcp_conn_fail(c, OTE_ERR_CANCELED);
    }
    free_graveyard(iface);
    if (iface->listen_fd >= 0)
        close(iface->listen_fd);
    if (iface->epfd >= 0)
        close(iface->epfd);
    free(iface->discard);
    free(iface);
}

static const ote_tl_iface_ops_t tcp_iface_ops = {
    .close          = ote_tcp_iface_close,
    .query          = tcp_iface_query,
    .get_address    = tcp_iface_get_address,
    .format_address = tcp_iface_format_address,
    .event_fd       = ote_tcp_iface_event_fd,
    .progress       = ote_tcp_iface_progress,
    .check_timeouts = ote_tcp_iface_check_timeouts,
    .has_deadlines  = ote_tcp_iface_has_deadlines,
    .ep_create      = ote_tcp_ep_create,
    .event_arm      = ote_tl_unsupported_event_arm,
    .ep_open        = ote_tl_unsupported_ep_open,
    .ep_accept      = ote_tl_unsupported_ep_accept,
    .ep_release     = ote_tl_no_ep_release,
};

#define TCP_F(_f) offsetof(ote_tcp_config_t, _f)

static const ote_cfg_entry_t tcp_config_fields[] = {
    {"CONNS", "2", OTE_CFG_INT, TCP_F(conns),
     "TCP connections per peer; slices spread over them, small ones in runs of up to 512 KiB "
     "on one connection.",
     .min = 1, .max = 64},
    {"MAX_MSG", OTE_TCP_MAX_MSG_DFLT, OTE_CFG_SIZE, TCP_F(max_msg),
     "Largest TCP data message; a peer announcing more is disconnected.",
     .min = OTE_TCP_MAX_MSG_MIN, .max = OTE_TCP_MAX_MSG_MAX},
    {"SNDBUF", "0", OTE_CFG_SIZE, TCP_F(sndbuf),
     "SO_SNDBUF for TCP data connections; 0 = kernel autotuning."},
    {"RCVBUF", "0", OTE_CFG_SIZE, TCP_F(rcvbuf),
     "SO_RCVBUF for TCP data connections; 0 = kernel autotuning."},
    {"NODELAY", "y", OTE_CFG_BOOL, TCP_F(nodelay),
     "Disable Nagle on TCP data connections."},
    {"VECTOR", "y", OTE_CFG_BOOL, TCP_F(vector),
     "Send WRITEs, and READs, of up to 64 KiB queued together on a connection as one "
     "vectored message (WRITEV, READV_REQ: one header and one answer for up to 64), where "
     "the peer takes them."},
};

OTE_CONFIG_TABLE_DEFINE(ote_tcp_config_table, "TCP_", "tcp", tcp_config_fields, ote_tcp_config_t,
                        NULL);

ote_status_t ote_tcp_iface_init(ote_tcp_iface_t *iface, const ote_tl_resource_t *res,
                                const ote_tl_iface_params_t *params,
                                const ote_tcp_config_t *cfg, const ote_tcp_hooks_t *hooks)
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
    iface->max_msg      = cfg->max_msg;
    iface->sndbuf       = cfg->sndbuf;
    iface->rcvbuf       = cfg->rcvbuf;
    iface->nodelay      = cfg->nodelay;
    iface->vector       = cfg->vector;
    iface->conns_per_ep = cfg->conns;
    iface->discard = malloc(OTE_TCP_RXBUF);
    return iface->discard != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
}

ote_status_t ote_tcp_iface_epoll_init(ote_tcp_iface_t *iface)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};

    iface->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (iface->epfd < 0 || epoll_ctl(iface->epfd, EPOLL_CTL_ADD, iface->listen_fd, &ev) != 0)
        return OTE_ERR_IO;
    return OTE_OK;
}

/* tcp streams its bytes: nothing by reference, no descriptors. */
static const ote_tcp_hooks_t tcp_hooks = {.addr_unpack = ote_tcp_addr_unpack};

static ote_status_t tcp_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                   const ote_tl_iface_params_t *params,
                                   ote_tl_iface_t **iface_p)
{
    ote_tcp_iface_t *iface;
    struct sockaddr_storage ss;
    ote_tcp_config_t cfg;
    socklen_t len;
    ote_status_t status;

    if (res->unusable != NULL)
        return OTE_ERR_UNSUPPORTED;
    status = ote_config_fill(&ote_tcp_config_table, &cfg);
    if (status != OTE_OK)
        return status;
    iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    status              = ote_tcp_iface_init(iface, res, params, &cfg, &tcp_hooks);
    ote_config_release(&ote_tcp_config_table, &cfg);
    iface->super.ops    = &tcp_iface_ops;
    iface->super.ep_ops = &ote_tcp_ep_ops;
    if (status != OTE_OK)
        goto err;

    status = ote_tcp_netif_find(res->dev_name, &iface->netif);
    if (status != OTE_OK) {
        ote_warn("tcp: interface %s is gone", res->dev_name);
        goto err;
    }
    status = ote_sockaddr_parse(params->bind_ip, &ss, &len);
    if (status != OTE_OK)
        goto err;
    ote_sockaddr_set_port((struct sockaddr *)&ss, 0);
    status = ote_socket_listen(&ss, len, &iface->listen_fd);
    if (status != OTE_OK)
        goto err;
    if (getsockname(iface->listen_fd, (struct sockaddr *)&ss, &len) != 0) {
        status = OTE_ERR_IO;
        goto err;
    }
    /*
     * Peers are told the interface's addresses with the port the kernel
     * chose: those the listener accepts on (IPv4 ones for 0.0.0.0, IPv6 ones
     * too for a dual-stack ::), or only the address it is bound to.
     */
    if (!ote_sockaddr_is_any((struct sockaddr *)&ss)) {
        iface->advertise[0].ss  = ss;
        iface->advertise[0].len = len;
        iface->num_advertise    = 1;
    } else {
        int v6only     = 0;
        socklen_t olen = sizeof(v6only);
        uint16_t port  = ote_sockaddr_port((struct sockaddr *)&ss);

        if (ss.ss_family == AF_INET6)
            getsockopt(iface->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen);
        for (size_t i = 0; i < iface->netif.num_addrs; i++) {
            ote_tcp_sockaddr_t *a = &iface->advertise[iface->num_advertise];
            int family            = iface->netif.addrs[i].addr.ss_family;

            if ((ss.ss_family == AF_INET && family != AF_INET) ||
                (ss.ss_family == AF_INET6 && v6only && family != AF_INET6))
                continue;
            a->ss  = iface->netif.addrs[i].addr;
            a->len = family == AF_INET ? sizeof(struct sockaddr_in)
                                       : sizeof(struct sockaddr_in6);
            ote_sockaddr_set_port((struct sockaddr *)&a->ss, port);
            iface->num_advertise++;
        }
    }
    if (iface->num_advertise == 0) {
        status = OTE_ERR_UNSUPPORTED;
        goto err;
    }
    status = ote_tcp_iface_epoll_init(iface);
    if (status != OTE_OK)
        goto err;
    *iface_p = &iface->super;
    return OTE_OK;

err:
    ote_tcp_iface_close(&iface->super);
    return status;
}

/*
 * One device per network interface that is up and running. An engine
 * listening on one address can serve only the interface that holds it; one
 * listening on 0.0.0.0 only interfaces with an IPv4 address.
 */
static ote_status_t tcp_query_resources(ote_tl_component_t *comp,
                                        const ote_tl_iface_params_t *params,
                                        ote_tl_resource_t **res_p, size_t *count_p)
{
    struct sockaddr_storage bind;
    socklen_t blen;
    ote_tcp_netif_t *nifs;
    ote_tl_resource_t *r;
    size_t n;
    bool any;
    ote_status_t status;

    status = ote_sockaddr_parse(params->bind_ip, &bind, &blen);
    if (status != OTE_OK)
        return status;
    any    = ote_sockaddr_is_any((struct sockaddr *)&bind);
    status = ote_tcp_netif_query(&nifs, &n);
    if (status != OTE_OK)
        return status;
    r = calloc(n ? n : 1, sizeof(*r));
    if (r == NULL) {
        free(nifs);
        return OTE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        bool has_v4 = false;

        for (size_t k = 0; k < nifs[i].num_addrs; k++)
            has_v4 |= nifs[i].addrs[k].addr.ss_family == AF_INET;
        snprintf(r[i].tl_name, sizeof(r[i].tl_name), "tcp");
        snprintf(r[i].dev_name, sizeof(r[i].dev_name), "%s", nifs[i].name);
        r[i].is_network = true;
        r[i].component  = comp;
        if (!any && !ote_tcp_netif_holds(&nifs[i], (struct sockaddr *)&bind))
            r[i].unusable = "the engine listens on an address of another interface";
        else if (any && bind.ss_family == AF_INET && !has_v4)
            r[i].unusable = "no IPv4 address, and the engine listens on 0.0.0.0";
    }
    free(nifs);
    *res_p   = r;
    *count_p = n;
    return OTE_OK;
}

OTE_TL_COMPONENT_DEFINE(ote_tcp_component, "tcp", &ote_tcp_config_table, tcp_query_resources,
                        ote_tl_unsupported_md_open, ote_tl_no_md_close, tcp_iface_open,
                        ote_tl_no_reason);
