/*
 * One stream connection (tcp's data connections, cma's and shm's local
 * ones): its life, its rings (messages to send, operations waiting for
 * their answer) and the send queue (writev of many messages per system
 * call). The receive path is stream_rx.c.
 */
#include "stream.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <unistd.h>

/* First capacity of the send and operation rings: a power of two (indexes are masked). */
#define STREAM_RING_FIRST 64

void ote_stream_conn_set_sockopts(ote_stream_iface_t *iface, int fd)
{
    int one = 1;
    int v;

    if (iface->cfg.nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* An idle connection to a peer that vanished unheard is found and closed. */
    ote_socket_set_keepalive(fd);
    if (iface->cfg.sndbuf) {
        v = (int)(iface->cfg.sndbuf > INT32_MAX ? INT32_MAX : iface->cfg.sndbuf);
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (iface->cfg.rcvbuf) {
        v = (int)(iface->cfg.rcvbuf > INT32_MAX ? INT32_MAX : iface->cfg.rcvbuf);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

ote_status_t ote_stream_conn_new(ote_stream_iface_t *iface, int fd, ote_stream_ep_t *ep,
                                 ote_stream_conn_t **conn_p)
{
    ote_stream_conn_t *c = calloc(1, sizeof(*c));
    struct epoll_event ev = {.events = EPOLLIN};

    if (c == NULL)
        return OTE_ERR_NO_MEMORY;
    /* The receive buffer comes with the first read (ote_stream_conn_rx). */
    c->tx_cap = STREAM_RING_FIRST;
    c->tx     = calloc(c->tx_cap, sizeof(*c->tx));
    c->ops_cap = STREAM_RING_FIRST;
    c->ops    = calloc(c->ops_cap, sizeof(*c->ops));
    if (c->tx == NULL || c->ops == NULL)
        goto err;
    c->fd         = fd;
    c->peer_pidfd = -1;
    c->iface      = iface;
    c->ep         = ep;
    c->rx_lowat   = ep == NULL && strcmp(iface->super.resource.tl_name, "tcp") == 0 ? 1 : -1;
    if (ep != NULL)
        c->rx_state = OTE_STREAM_RX_HDR;
    else if (iface->auth != NULL && iface->auth->enabled)
        c->rx_state = OTE_STREAM_RX_AUTH;
    else
        c->rx_state = OTE_STREAM_RX_HANDSHAKE;
    ote_auth_session_init(&c->auth, OTE_AUTH_CHANNEL_TCP);
    ev.data.ptr = c;
    if (epoll_ctl(iface->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        goto err;
    *conn_p = c;
    return OTE_OK;

err:
    free(c->tx);
    free(c->ops);
    free(c);
    return OTE_ERR_NO_MEMORY;
}

void ote_stream_conn_free(ote_stream_conn_t *c)
{
    if (c == NULL)
        return;
    if (c->ops_count != 0)
        c->iface->ops_conns--;
    if (c->iface->rx_hint == c)
        c->iface->rx_hint = NULL;
    ote_stream_iface_unwatch(c->iface, c);
    for (size_t i = 0; i < c->rx_nfds; i++)
        close(c->rx_fds[i]);
    ote_fd_close(c->peer_pidfd);
    free(c->rxbuf);
    free(c->tx);
    free(c->ops);
    free(c);
}

static ote_stream_tx_t *tx_slot(ote_stream_conn_t *c)
{
    if (c->tx_count == c->tx_cap) {
        if (ote_ring_grow((void **)&c->tx, &c->tx_cap, &c->tx_head, c->tx_count, sizeof(*c->tx),
                          STREAM_RING_FIRST) != OTE_OK)
            return NULL;
    }
    return &c->tx[(c->tx_head + c->tx_count) & (c->tx_cap - 1)];
}

/*
 * Queue the message of slot e: the header, trailer_len bytes of trailer
 * already written after it, then a payload or a descriptor.
 */
static ote_status_t tx_queue(ote_stream_conn_t *c, ote_stream_tx_t *e, const ote_stream_hdr_t *hdr,
                             size_t trailer_len, int fd, const void *payload, size_t payload_len,
                             ote_region_t *region, bool own_region)
{
    ote_stream_hdr_encode(hdr, e->hdr);
    e->vhdr        = NULL;
    e->hdr_len     = (uint16_t)(OTE_STREAM_HDR_LEN + trailer_len);
    e->vec         = false;
    e->fd          = fd;
    e->payload     = payload;
    e->payload_len = payload_len;
    e->sent        = 0;
    e->region      = region;
    e->own_region  = own_region;
    c->tx_count++;
    c->tx_queued++;
    if (fd >= 0)
        c->tx_fds++;
    ote_stream_iface_mark_dirty(c->iface, c);
    return OTE_OK;
}

ote_status_t ote_stream_conn_tx_push_ref(ote_stream_conn_t *c, const ote_stream_hdr_t *hdr,
                                         uint64_t trailer)
{
    ote_stream_tx_t *e = tx_slot(c);

    if (e == NULL)
        return OTE_ERR_NO_MEMORY;
    ote_put_u64(e->hdr + OTE_STREAM_HDR_LEN, trailer);
    return tx_queue(c, e, hdr, OTE_STREAM_REF_TRAILER_LEN, -1, NULL, 0, NULL, false);
}

ote_status_t ote_stream_conn_tx_push(ote_stream_conn_t *c, const ote_stream_hdr_t *hdr,
                                     const void *payload, size_t payload_len, ote_region_t *region,
                                     bool own_region)
{
    ote_stream_tx_t *e = tx_slot(c);
    ote_status_t status;

    if (e == NULL)
        return OTE_ERR_NO_MEMORY;
    status = tx_queue(c, e, hdr, 0, -1, payload, payload_len, region, own_region);
    e->vec = c->vec_tx && (hdr->type == OTE_STREAM_WRITE || hdr->type == OTE_STREAM_READ_REQ) &&
             hdr->length <= OTE_STREAM_WRITEV_ENTRY_MAX;
    return status;
}

ote_status_t ote_stream_conn_tx_push_data(ote_stream_conn_t *c, const void *payload,
                                          size_t payload_len, ote_region_t *region)
{
    static const ote_stream_hdr_t none;
    ote_stream_tx_t *e = tx_slot(c);

    if (e == NULL)
        return OTE_ERR_NO_MEMORY;
    tx_queue(c, e, &none, 0, -1, payload, payload_len, region, true);
    e->hdr_len = 0;
    return OTE_OK;
}

ote_status_t ote_stream_conn_tx_push_long(ote_stream_conn_t *c, const ote_stream_hdr_t *hdr,
                                          const void *trailer, size_t trailer_len)
{
    ote_stream_tx_t *e = tx_slot(c);
    uint8_t *v      = malloc(OTE_STREAM_HDR_LEN + trailer_len);

    if (e == NULL || v == NULL || OTE_STREAM_HDR_LEN + trailer_len > UINT16_MAX) {
        free(v);
        return OTE_ERR_NO_MEMORY;
    }
    ote_stream_hdr_encode(hdr, v);
    memcpy(v + OTE_STREAM_HDR_LEN, trailer, trailer_len);
    tx_queue(c, e, hdr, 0, -1, NULL, 0, NULL, false);
    e->vhdr    = v;
    e->hdr_len = (uint16_t)(OTE_STREAM_HDR_LEN + trailer_len);
    return OTE_OK;
}

ote_status_t ote_stream_conn_tx_push_fd(ote_stream_conn_t *c, const ote_stream_hdr_t *hdr,
                                        const void *trailer, size_t trailer_len, int fd)
{
    ote_stream_tx_t *e = trailer_len <= OTE_STREAM_TRAILER_MAX ? tx_slot(c) : NULL;

    if (e == NULL) {
        ote_fd_close(fd);
        return OTE_ERR_NO_MEMORY;
    }
    if (trailer_len)
        memcpy(e->hdr + OTE_STREAM_HDR_LEN, trailer, trailer_len);
    return tx_queue(c, e, hdr, trailer_len, fd, NULL, 0, NULL, false);
}

int ote_stream_conn_rx_fd_pop(ote_stream_conn_t *c)
{
    int fd;

    if (c->rx_nfds == 0)
        return -1;
    fd = c->rx_fds[0];
    memmove(c->rx_fds, c->rx_fds + 1, (c->rx_nfds - 1) * sizeof(c->rx_fds[0]));
    c->rx_nfds--;
    return fd;
}

ote_status_t ote_stream_conn_op_push(ote_stream_conn_t *c, const ote_stream_op_t *op)
{
    if (c->ops_count == c->ops_cap) {
        if (ote_ring_grow((void **)&c->ops, &c->ops_cap, &c->ops_head, c->ops_count,
                          sizeof(*c->ops), STREAM_RING_FIRST) != OTE_OK)
            return OTE_ERR_NO_MEMORY;
    }
    c->ops[(c->ops_head + c->ops_count) & (c->ops_cap - 1)] = *op;
    /* Its request is the next message queued (ote_stream_conn_op_unpush if it cannot be). */
    c->ops[(c->ops_head + c->ops_count) & (c->ops_cap - 1)].tx_seq = c->tx_queued + 1;
    if (c->ops_count++ == 0) {
        c->iface->ops_conns++;
        ote_stream_iface_watch(c->iface, c);
    }
    c->iface->rx_hint = c;
    c->inflight_bytes += op->length;
    return OTE_OK;
}

ote_stream_op_t *ote_stream_conn_op_head(ote_stream_conn_t *c)
{
    return c->ops_count ? &c->ops[c->ops_head] : NULL;
}

static ote_stream_op_t op_pop(ote_stream_conn_t *c)
{
    ote_stream_op_t op = c->ops[c->ops_head];

    c->ops_head = (c->ops_head + 1) & (c->ops_cap - 1);
    if (--c->ops_count == 0)
        c->iface->ops_conns--;
    c->inflight_bytes -= op.length;
    return op;
}

ote_stream_op_t ote_stream_conn_op_pop(ote_stream_conn_t *c)
{
    return op_pop(c);
}

void ote_stream_conn_op_unpush(ote_stream_conn_t *c)
{
    c->inflight_bytes -= c->ops[(c->ops_head + c->ops_count - 1) & (c->ops_cap - 1)].length;
    if (--c->ops_count == 0)
        c->iface->ops_conns--;
}

static void update_events(ote_stream_conn_t *c)
{
    struct epoll_event ev = {.events = (c->rx_paused ? 0 : EPOLLIN) |
                                       (c->want_out ? EPOLLOUT : 0),
                             .data.ptr = c};

    if (!c->dead)
        epoll_ctl(c->iface->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void set_want_out(ote_stream_conn_t *c, bool on)
{
    if (c->want_out == on || c->dead)
        return;
    c->want_out = on;
    update_events(c);
}

/* Target side: stop reading requests while too many replies wait to be sent. */
void ote_stream_conn_set_rx_paused(ote_stream_conn_t *c, bool on)
{
    if (c->rx_paused == on || c->dead)
        return;
    c->rx_paused = on;
    update_events(c);
}

static void tx_release(ote_stream_conn_t *c, ote_stream_tx_t *e)
{
    free(e->vhdr);
    e->vhdr = NULL;
    if (e->region != NULL && e->own_region)
        ote_mem_region_put(e->region);
    e->region = NULL;
    if (e->fd >= 0) {
        close(e->fd);
        c->tx_fds--;
    }
    e->fd = -1;
}

/* Operations a failed connection ends per round of its loop. */
#define STREAM_FAIL_BATCH 64

void ote_stream_conn_fail(ote_stream_conn_t *c, ote_status_t status)
{
    ote_stream_op_t ops[STREAM_FAIL_BATCH];
    size_t n;

    if (c->dead)
        return;
    c->dead = true;
    if (c->iface->rx_hint == c)
        c->iface->rx_hint = NULL;
    if (c->ep != NULL)
        atomic_fetch_add(&c->ep->num_failed, 1);
    if (c->iface->hooks->conn_closed != NULL)
        c->iface->hooks->conn_closed(c);
    ote_debug("%s connection to %s closed: %s", OTE_STREAM_CONN_TL(c), c->peer,
              ote_status_string(status));
    epoll_ctl(c->iface->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    while (c->tx_count) {
        tx_release(c, &c->tx[c->tx_head]);
        c->tx_head = (c->tx_head + 1) & (c->tx_cap - 1);
        c->tx_count--;
    }
    ote_stream_conn_rx_regions_put(c);
    /*
     * Detach the outstanding operations before their completions run (they
     * may post again, never on this connection: it is dead), a batch at a
     * time, with no allocation that could fail and lose them.
     */
    while (c->ops_count > 0) {
        n = c->ops_count < STREAM_FAIL_BATCH ? c->ops_count : STREAM_FAIL_BATCH;
        for (size_t i = 0; i < n; i++)
            ops[i] = op_pop(c);
        for (size_t i = 0; i < n; i++)
            ops[i].comp->func(ops[i].comp, status);
    }
    ote_stream_iface_conn_closed(c->iface, c);
}

static ote_stream_tx_t *tx_at(ote_stream_conn_t *c, size_t i)
{
    return &c->tx[(c->tx_head + i) & (c->tx_cap - 1)];
}

/*
 * Initiator: merge the WRITEs, or the READ_REQs, queued from slot i on that
 * may travel together (unsent, vec, of the same type), up to
 * OTE_STREAM_WRITEV_MAX of them and max_msg bytes, into one WRITEV or
 * READV_REQ. Slot i then sends the header and table (vhdr), the others only
 * their payloads (nothing for READs); the operations stay one per request,
 * answered together by the WRITEV_ACK or READV_RESP. Fewer than two, or no
 * memory for the table: they go as they are.
 */
static void tx_merge(ote_stream_conn_t *c, size_t i)
{
    ote_stream_hdr_t h, first;
    size_t k = 0, total = 0;
    uint8_t *v;

    ote_stream_hdr_peek(tx_at(c, i)->hdr, &first);
    while (i + k < c->tx_count && k < OTE_STREAM_WRITEV_MAX) {
        const ote_stream_tx_t *e = tx_at(c, i + k);

        if (!e->vec || e->sent != 0)
            break;
        ote_stream_hdr_peek(e->hdr, &h);
        if (h.type != first.type || h.length > c->iface->cfg.max_msg - total)
            break;
        total += (size_t)h.length;
        k++;
    }
    tx_at(c, i)->vec = false;
    if (k < 2)
        return;
    v = malloc(OTE_STREAM_HDR_LEN + k * OTE_STREAM_WRITEV_ENTRY_LEN);
    if (v == NULL)
        return;
    for (size_t j = 0; j < k; j++) {
        ote_stream_tx_t *e = tx_at(c, i + j);
        ote_stream_vec_entry_t ent;

        ote_stream_hdr_peek(e->hdr, &h);
        ent = (ote_stream_vec_entry_t){.addr = h.addr, .length = h.length};
        ote_stream_vec_entry_encode(&ent, v + OTE_STREAM_HDR_LEN + j * OTE_STREAM_WRITEV_ENTRY_LEN);
        e->vec     = false;
        e->hdr_len = 0;
    }
    h = (ote_stream_hdr_t){.type = first.type == OTE_STREAM_WRITE ? OTE_STREAM_WRITEV : OTE_STREAM_READV_REQ,
                        .id = first.id, .addr = k, .length = total};
    ote_stream_hdr_encode(&h, v);
    tx_at(c, i)->vhdr    = v;
    tx_at(c, i)->hdr_len = (uint16_t)(OTE_STREAM_HDR_LEN + k * OTE_STREAM_WRITEV_ENTRY_LEN);
}

/*
 * Append [base, base+len) to the n elements of iov: the last one grows where
 * the range continues it (payloads of neighbouring requests in a WRITEV).
 */
static size_t iov_add(struct iovec *iov, size_t n, const void *base, size_t len)
{
    if (n > 0 && (const uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == base) {
        iov[n - 1].iov_len += len;
        return n;
    }
    iov[n].iov_base = (void *)base;
    iov[n].iov_len  = len;
    return n + 1;
}

void ote_stream_conn_flush(ote_stream_conn_t *c)
{
    struct iovec iov[2 * OTE_STREAM_IOV_MAX];
    ote_region_t *guarded[OTE_STREAM_IOV_MAX];
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr msg = {.msg_iov = iov};
    ssize_t w;

    while (c->tx_count > 0 && !c->dead) {
        size_t n = 0, ng = 0;
        int pass_fd = -1;

        msg.msg_control    = NULL;
        msg.msg_controllen = 0;
        /*
         * Up to OTE_STREAM_SEND_MAX queued messages, as many as the iovec holds
         * (a WRITEV's payloads that follow each other take one element):
         * several WRITEVs of small requests go in one call, as one large
         * request would.
         */
        for (size_t i = 0; i < c->tx_count && i < OTE_STREAM_SEND_MAX && n + 2 <= 2 * OTE_STREAM_IOV_MAX;
             i++) {
            ote_stream_tx_t *e = tx_at(c, i);
            const uint8_t *hb;

            /* A descriptor travels with the first byte of a sendmsg: its message goes first. */
            if (e->fd >= 0) {
                if (i > 0)
                    break;
                pass_fd = e->fd;
            }
            /*
             * Sending from a region its owner has just deregistered would
             * read memory that may be freed: hold off the deregistration
             * for the duration of the call, and stop at a region that is
             * already gone.
             */
            if (e->region != NULL && (ng == 0 || guarded[ng - 1] != e->region)) {
                if (ng == OTE_STREAM_IOV_MAX)
                    break;
                if (!ote_mem_region_access_begin(e->region)) {
                    if (i == 0) {
                        ote_stream_conn_fail(c, OTE_ERR_NOT_REGISTERED);
                        return;
                    }
                    break;
                }
                guarded[ng++] = e->region;
            }
            if (e->vec)
                tx_merge(c, i);
            hb = e->vhdr != NULL ? e->vhdr : e->hdr;
            if (e->sent < e->hdr_len) {
                n = iov_add(iov, n, hb + e->sent, e->hdr_len - e->sent);
                if (e->payload_len)
                    n = iov_add(iov, n, e->payload, e->payload_len);
            } else if (e->payload_len) {
                n = iov_add(iov, n, (const uint8_t *)e->payload + (e->sent - e->hdr_len),
                            e->payload_len - (e->sent - e->hdr_len));
            }
        }
        msg.msg_iovlen = n;
        if (pass_fd >= 0) {
            struct cmsghdr *cm;

            memset(&ctl, 0, sizeof(ctl));
            msg.msg_control    = ctl.buf;
            msg.msg_controllen = sizeof(ctl.buf);
            cm                 = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level     = SOL_SOCKET;
            cm->cmsg_type      = SCM_RIGHTS;
            cm->cmsg_len       = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
        }
        w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0 && pass_fd >= 0) {
            /* Sent: the peer holds its own copy now. */
            close(c->tx[c->tx_head].fd);
            c->tx[c->tx_head].fd = -1;
            c->tx_fds--;
        }
        for (size_t i = 0; i < ng; i++)
            ote_mem_region_access_end(guarded[i]);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* Target: a peer that stops reading its answers is timed out. */
                if (c->ep == NULL && c->tx_stall_ns == 0) {
                    c->tx_stall_ns = ote_time_ns();
                    ote_stream_iface_watch(c->iface, c);
                }
                set_want_out(c, true);
                return;
            }
            ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
            return;
        }
        if (w > 0)
            c->tx_stall_ns = 0;
        /* Messages sent whole leave the ring (READs merged into a READV_REQ have no bytes). */
        while (c->tx_count > 0) {
            ote_stream_tx_t *e = &c->tx[c->tx_head];
            size_t left     = e->hdr_len + e->payload_len - e->sent;

            if ((size_t)w < left) {
                e->sent += (size_t)w;
                break;
            }
            w -= (ssize_t)left;
            tx_release(c, e);
            c->tx_head = (c->tx_head + 1) & (c->tx_cap - 1);
            c->tx_count--;
            c->tx_sent++;
        }
    }
    if (c->dead)
        return;
    set_want_out(c, false);
    if (c->rx_paused && c->tx_count < OTE_STREAM_TX_PAUSE / 2 &&
        c->tx_fds < OTE_STREAM_TX_FDS_PAUSE / 2) {
        ote_stream_conn_set_rx_paused(c, false);
        /*
         * Requests already buffered would get no epoll event. While deferred
         * requests are being served, newer ones wait for the next progress
         * call, so that the answers keep the order of the requests.
         */
        if (c->rx_len > c->rx_off) {
            if (c->ref_busy) {
                c->rx_again              = true;
                c->iface->rx_again_conns = true;
            }
            else
                ote_stream_conn_rx(c);
        }
    }
}

