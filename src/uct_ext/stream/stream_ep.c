/*
 * Stream base: endpoints (several connections per peer), their connection
 * setup (authentication, HELLO) and reconnect.
 */
#include "stream.h"

#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ote_status_t ote_stream_handshake_step(int fd, ote_stream_hdr_t *h, const void *payload,
                                       size_t payload_len, uint64_t deadline)
{
    uint8_t buf[OTE_STREAM_HDR_LEN + OTE_STREAM_AUTH_TPROOF_LEN];
    ote_status_t status;

    if (payload_len > OTE_STREAM_AUTH_TPROOF_LEN)
        return OTE_ERR_INVALID_PARAM;
    /* Header and payload in one segment: no wait for a delayed ACK. */
    ote_stream_hdr_encode(h, buf);
    if (payload_len)
        memcpy(buf + OTE_STREAM_HDR_LEN, payload, payload_len);
    status = ote_socket_send_all(fd, buf, OTE_STREAM_HDR_LEN + payload_len, deadline);
    if (status == OTE_OK)
        status = ote_socket_recv_all(fd, buf, OTE_STREAM_HDR_LEN, deadline);
    if (status == OTE_OK)
        status = ote_stream_hdr_decode(buf, OTE_STREAM_HDR_LEN, 0, h);
    return status;
}

/* The connection a handshake runs on. */
typedef struct {
    int      fd;
    uint64_t deadline;
} stream_auth_io_t;

/* ote_auth_exchange_t on a connection before its HELLO. */
static ote_status_t stream_auth_exchange(void *arg, bool proof, const uint8_t *msg, size_t len,
                                         uint8_t *tproof, bool *done_p, ote_status_t *remote_p)
{
    const stream_auth_io_t *io = arg;
    ote_stream_hdr_t h = {.type = proof ? OTE_STREAM_AUTH_PROOF : OTE_STREAM_AUTH_HELLO,
                          .length = len};
    ote_status_t status = ote_stream_handshake_step(io->fd, &h, msg, len, io->deadline);

    if (status != OTE_OK)
        return status;
    if (h.type == OTE_STREAM_AUTH_DONE) {
        *done_p   = true;
        *remote_p = h.status;
        return OTE_OK;
    }
    if (proof || h.type != OTE_STREAM_AUTH_PROOF || h.length != OTE_AUTH_TPROOF_LEN)
        return OTE_ERR_PROTOCOL;
    return ote_socket_recv_all(io->fd, tproof, OTE_AUTH_TPROOF_LEN, io->deadline);
}

/* Prove we hold the key, and that the target does (base/auth.h). */
static ote_status_t stream_authenticate(ote_stream_iface_t *iface, int fd,
                                        const ote_tl_peer_t *peer,
                                        uint64_t deadline)
{
    stream_auth_io_t io = {.fd = fd, .deadline = deadline};
    char who[160];

    snprintf(who, sizeof(who), "%s: %s", iface->super.resource.tl_name,
             peer->name ? peer->name : "peer");
    return ote_auth_initiator_run(iface->auth, OTE_AUTH_CHANNEL_TCP, stream_auth_exchange, &io,
                                  who);
}

/*
 * Blocking connect, authentication and HELLO exchange, bounded by the
 * peer's timeout; *caps_p: what the target's HELLO_ACK says it takes.
 */
static ote_status_t stream_connect_one(ote_stream_iface_t *iface, const struct sockaddr_storage *ss,
                                       socklen_t sslen, const ote_tl_peer_t *peer, uint64_t deadline,
                                       int *fd_p, uint64_t *caps_p)
{
    ote_stream_hdr_t h = {.type = OTE_STREAM_HELLO, .id = peer->local_instance,
                       .addr = peer->instance_id};
    uint64_t now    = ote_time_ns();
    ote_status_t status;
    int fd;

    if (now >= deadline)
        return OTE_ERR_TIMEOUT;
    if (iface->hooks->addr_reaches != NULL && !iface->hooks->addr_reaches(iface, ss, sslen)) {
        char a[80];

        ote_sockaddr_format((const struct sockaddr *)ss, a, sizeof(a));
        ote_debug("%s/%s: %s is routed through another interface",
                  iface->super.resource.tl_name, iface->super.resource.dev_name, a);
        return OTE_ERR_UNREACHABLE;
    }
    status = ote_socket_connect(ss, sslen, (int)((deadline - now + 999999) / 1000000), &fd);
    if (status != OTE_OK)
        return status;
    ote_stream_conn_set_sockopts(iface, fd);
    status = OTE_OK;
    if (iface->auth != NULL && iface->auth->enabled)
        status = stream_authenticate(iface, fd, peer, deadline);
    if (status == OTE_OK)
        status = ote_stream_handshake_step(fd, &h, NULL, 0, deadline);
    if (status == OTE_OK && h.type != OTE_STREAM_HELLO_ACK)
        status = OTE_ERR_PROTOCOL;
    /* The target answers NOT_FOUND to a HELLO for an instance it is not. */
    if (status == OTE_OK && h.status == OTE_ERR_NOT_FOUND)
        status = OTE_ERR_PEER_RESTARTED;
    if (status == OTE_OK && h.status != OTE_OK)
        status = (ote_status_t)h.status;
    /* A HELLO refused with AUTH: the peer has a key, and we sent no handshake. */
    if (status == OTE_ERR_AUTH && h.type == OTE_STREAM_HELLO_ACK &&
        (iface->auth == NULL || !iface->auth->enabled)) {
        char who[160];

        snprintf(who, sizeof(who), "%s/%s: '%s'", iface->super.resource.tl_name,
                 iface->super.resource.dev_name, peer->name ? peer->name : "peer");
        ote_auth_log_key_missing(who);
    }
    if (status == OTE_OK && iface->hooks->connect_hook != NULL)
        status = iface->hooks->connect_hook(iface, fd, peer, deadline);
    if (status != OTE_OK) {
        close(fd);
        return status;
    }
    ote_socket_set_nonblock(fd, true);
    *fd_p   = fd;
    *caps_p = h.addr;
    return OTE_OK;
}

/* A connected socket as a connection of ep (worker lock held). */
static ote_status_t stream_conn_install(ote_stream_ep_t *ep, int fd, ote_stream_conn_t **conn_p)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)ep->super.iface;
    ote_stream_conn_t *c;
    ote_status_t status;

    status = ote_stream_conn_new(iface, fd, ep, &c);
    if (status != OTE_OK)
        return status;
    c->vec_tx = iface->cfg.vector && iface->hooks->ref_handle == NULL &&
                iface->hooks->post == NULL && (ep->peer_caps & OTE_STREAM_CAP_WRITEV) != 0;
    if (ep->addr.ss_family == AF_UNIX)
        snprintf(c->peer, sizeof(c->peer), "%.63s", ep->peer_name);
    else
        ote_sockaddr_format((struct sockaddr *)&ep->addr, c->peer, sizeof(c->peer));
    c->prev = NULL;
    c->next = iface->conns;
    if (iface->conns)
        iface->conns->prev = c;
    iface->conns = c;
    *conn_p      = c;
    return OTE_OK;
}

void ote_stream_ep_destroy(ote_tl_ep_t *tl_ep)
{
    ote_stream_ep_t *ep = (ote_stream_ep_t *)tl_ep;

    for (size_t i = 0; i < ep->num_conns; i++) {
        /*
         * Requests still unanswered end CANCELED: a reset (tcp) makes the
         * target drop what it has not read of them, as after a timeout.
         */
        if (ep->conns[i]->ops_count > 0 && ep->conns[i]->fd >= 0)
            ote_socket_set_linger0(ep->conns[i]->fd);
        ote_stream_conn_fail(ep->conns[i], OTE_ERR_CANCELED);
        ote_stream_conn_free(ep->conns[i]);
    }
    free(ep->conns);
    free(ep);
}

ote_status_t ote_stream_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                                  const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;
    ote_stream_sockaddr_t all[OTE_STREAM_MAX_ADDRS], cand[OTE_STREAM_MAX_ADDRS];
    struct sockaddr_storage ss;
    socklen_t sslen;
    uint64_t deadline = ote_time_ns() + (uint64_t)peer->timeout_ms * 1000000ull;
    ote_stream_ep_t *ep;
    ote_status_t status;
    int *fds    = NULL;
    size_t nfds = 0, nall = 0, ncand;
    uint64_t caps = 0;

    status = iface->hooks->addr_unpack(addr, addr_len, all, OTE_STREAM_MAX_ADDRS, &nall);
    if (status != OTE_OK)
        return status;
    if (iface->hooks->addr_choose != NULL) {
        ncand = iface->hooks->addr_choose(iface, all, nall, cand);
    } else {
        memcpy(cand, all, nall * sizeof(*all));
        ncand = nall;
    }
    if (ncand == 0) {
        ote_debug("%s/%s: no address of %s is reachable from this interface",
                  tl_iface->resource.tl_name, tl_iface->resource.dev_name,
                  peer->name ? peer->name : "?");
        return OTE_ERR_UNREACHABLE;
    }
    ss    = cand[0].ss;
    sslen = cand[0].len;
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->super.iface = tl_iface;
    ep->conns       = calloc((size_t)iface->cfg.conns, sizeof(*ep->conns));
    if (ep->conns == NULL) {
        free(ep);
        return OTE_ERR_NO_MEMORY;
    }
    snprintf(ep->peer_name, sizeof(ep->peer_name), "%s", peer->name ? peer->name : "?");
    ep->addr     = ss;
    ep->addr_len = sslen;
    atomic_init(&ep->num_failed, 0);
    fds = malloc((size_t)iface->cfg.conns * sizeof(*fds));
    if (fds == NULL) {
        status = OTE_ERR_NO_MEMORY;
        goto err;
    }
    /* Connect and shake hands without the worker lock: the peer may be us. */
    for (nfds = 0; nfds < (size_t)iface->cfg.conns; nfds++) {
        status = stream_connect_one(iface, &ss, sslen, peer, deadline, &fds[nfds], &caps);
        /* The first connection finds an address that answers; the others follow it. */
        for (size_t c = 1; nfds == 0 && c < ncand &&
             (status == OTE_ERR_UNREACHABLE || status == OTE_ERR_TIMEOUT ||
                            status == OTE_ERR_IO || status == OTE_ERR_NOT_FOUND);
             c++) {
            char a[80];

            ote_sockaddr_format((struct sockaddr *)&ss, a, sizeof(a));
            ote_debug("%s/%s: %s does not answer (%s); trying the peer's next address",
                      tl_iface->resource.tl_name, tl_iface->resource.dev_name, a,
                      ote_status_string(status));
            ss     = cand[c].ss;
            sslen  = cand[c].len;
            status = stream_connect_one(iface, &ss, sslen, peer, deadline, &fds[nfds], &caps);
        }
        if (status != OTE_OK)
            goto err;
        /* One instance answers on every connection: the first one's word holds. */
        if (nfds == 0)
            ep->peer_caps = caps;
    }
    /* The address that answered is the one a reconnect uses. */
    ep->addr     = ss;
    ep->addr_len = sslen;
    pthread_mutex_lock(iface->worker_lock);
    for (size_t i = 0; i < nfds; i++) {
        ote_stream_conn_t *c;

        status = stream_conn_install(ep, fds[i], &c);
        if (status != OTE_OK) {
            pthread_mutex_unlock(iface->worker_lock);
            goto err;
        }
        fds[i] = -1;
        ep->conns[ep->num_conns++] = c;
    }
    pthread_mutex_unlock(iface->worker_lock);
    free(fds);
    *ep_p = &ep->super;
    return OTE_OK;

err:
    ote_debug("%s: connecting to %s failed: %s", tl_iface->resource.tl_name, ep->peer_name,
              ote_status_string(status));
    for (size_t i = 0; fds != NULL && i < nfds; i++) {
        ote_fd_close(fds[i]);
    }
    free(fds);
    pthread_mutex_lock(iface->worker_lock);
    ote_stream_ep_destroy(&ep->super);
    pthread_mutex_unlock(iface->worker_lock);
    return status;
}

bool ote_stream_ep_needs_reconnect(ote_tl_ep_t *tl_ep)
{
    return atomic_load(&((ote_stream_ep_t *)tl_ep)->num_failed) > 0;
}

/*
 * Connect anew, without the worker lock (the peer may be us), as many
 * connections as have failed, through the whole handshake (authentication,
 * HELLO naming the peer's instance, cma's PROBE); then, under the lock,
 * they take the failed ones' places. A connect that fails leaves the ep as
 * it was (the sockets made before it are closed). All of it is bounded by
 * the peer's connect timeout.
 */
ote_status_t ote_stream_ep_reconnect(ote_tl_ep_t *tl_ep, const ote_tl_peer_t *peer)
{
    ote_stream_ep_t *ep       = (ote_stream_ep_t *)tl_ep;
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_ep->iface;
    size_t want = atomic_load(&ep->num_failed), nfds = 0, placed = 0;
    uint64_t deadline   = ote_time_ns() + (uint64_t)peer->timeout_ms * 1000000ull;
    ote_status_t status = OTE_OK;
    int *fds;

    if (want == 0)
        return OTE_OK;
    if (want > ep->num_conns)
        want = ep->num_conns;
    fds = malloc(want * sizeof(*fds));
    if (fds == NULL)
        return OTE_ERR_NO_MEMORY;
    for (; nfds < want; nfds++) {
        uint64_t caps;

        status = stream_connect_one(iface, &ep->addr, ep->addr_len, peer, deadline, &fds[nfds],
                                    &caps);
        if (status != OTE_OK)
            break;
    }
    if (status == OTE_OK) {
        pthread_mutex_lock(iface->worker_lock);
        for (size_t i = 0; i < ep->num_conns && placed < nfds; i++) {
            ote_stream_conn_t *c;

            if (!ep->conns[i]->dead)
                continue;
            status = stream_conn_install(ep, fds[placed], &c);
            if (status != OTE_OK)
                break;
            fds[placed++] = -1;
            /* Closed already and off every list of the iface. */
            ote_stream_conn_free(ep->conns[i]);
            ep->conns[i] = c;
            atomic_fetch_sub(&ep->num_failed, 1);
        }
        pthread_mutex_unlock(iface->worker_lock);
    }
    for (size_t i = placed; i < nfds; i++)
        close(fds[i]);
    free(fds);
    if (status != OTE_OK)
        ote_debug("%s: reconnecting to %s failed: %s", tl_ep->iface->resource.tl_name,
                  ep->peer_name, ote_status_string(status));
    else
        ote_info("%s: %zu connection(s) to %s made again", tl_ep->iface->resource.tl_name,
                 placed, ep->peer_name);
    return status;
}

/* The least loaded live connection, unless the previous pick is within OTE_STREAM_PICK_RUN of it. */
static ote_stream_conn_t *stream_ep_pick(ote_stream_ep_t *ep)
{
    ote_stream_conn_t *best = NULL, *last;
    size_t best_i = 0;

    for (size_t i = 0; i < ep->num_conns; i++) {
        ote_stream_conn_t *c = ep->conns[i];

        if (!c->dead && (best == NULL || c->inflight_bytes < best->inflight_bytes)) {
            best   = c;
            best_i = i;
        }
    }
    if (best == NULL)
        return NULL;
    if (ep->last_conn < ep->num_conns) {
        last = ep->conns[ep->last_conn];
        if (!last->dead && last->inflight_bytes < best->inflight_bytes + OTE_STREAM_PICK_RUN)
            return last;
    }
    ep->last_conn = best_i;
    return best;
}

ote_stream_conn_t *ote_stream_ep_conn(ote_stream_ep_t *ep)
{
    return stream_ep_pick(ep);
}

static ote_status_t stream_ep_queue_op(ote_stream_ep_t *ep, uint8_t type, uint8_t then, void *local,
                                       size_t length, ote_region_t *local_region, uint64_t remote_addr,
                                       ote_tl_completion_t *comp)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)ep->super.iface;
    ote_stream_conn_t *c      = stream_ep_pick(ep);
    bool by_ref            = type == OTE_STREAM_PUT_REF || type == OTE_STREAM_GET_REF;
    ote_status_t status;
    ote_stream_op_t op;
    ote_stream_hdr_t h;

    if (c == NULL)
        return OTE_ERR_REMOTE_DISCONNECT;
    if (length == 0 || length > iface->cfg.max_msg)
        return OTE_ERR_INVALID_PARAM;
    op.comp         = comp;
    op.type         = type;
    op.id           = ep->next_id++;
    op.local        = local;
    op.length       = length;
    op.local_region = local_region;
    op.post_ns      = ote_round_time_ns();
    op.then         = then;
    op.remote_addr  = remote_addr;
    h = (ote_stream_hdr_t){.type = type, .id = op.id, .addr = remote_addr, .length = length};
    if (ote_stream_conn_op_push(c, &op) != OTE_OK)
        return OTE_ERR_NO_MEMORY;
    if (type == OTE_STREAM_MAP)
        status = ote_stream_conn_tx_push_ref(c, &h, then);
    else if (by_ref)
        status = ote_stream_conn_tx_push_ref(c, &h, (uint64_t)(uintptr_t)local);
    else
        status = ote_stream_conn_tx_push(c, &h, type == OTE_STREAM_WRITE ? local : NULL,
                                         type == OTE_STREAM_WRITE ? length : 0,
                                         type == OTE_STREAM_WRITE ? local_region : NULL, false);
    if (status != OTE_OK) {
        ote_stream_conn_op_unpush(c);
        return OTE_ERR_NO_MEMORY;
    }
    return OTE_INPROGRESS;
}

ote_status_t ote_stream_ep_post(ote_stream_ep_t *ep, uint8_t type, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                ote_tl_completion_t *comp)
{
    return stream_ep_queue_op(ep, type, 0, local, length, local_region, remote_addr, comp);
}

ote_status_t ote_stream_ep_post_map(ote_stream_ep_t *ep, uint8_t then, void *local, size_t length,
                                    ote_region_t *local_region, uint64_t remote_addr,
                                    ote_tl_completion_t *comp)
{
    return stream_ep_queue_op(ep, OTE_STREAM_MAP, then, local, length, local_region, remote_addr,
                              comp);
}

/*
 * The bytes travel in the messages; in by-reference mode (cma) the target
 * copies them from or to the initiator's memory, except for small puts and
 * gets to a target that takes them by value (OTE_STREAM_CAP_INLINE_WRITE,
 * OTE_STREAM_CAP_INLINE_READ); shm posts its own way.
 */
static ote_status_t stream_ep_post_op(ote_tl_ep_t *tl_ep, bool put, void *local, size_t length,
                                      ote_region_t *local_region, uint64_t remote_addr,
                                      ote_tl_completion_t *comp)
{
    const ote_stream_iface_t *iface = (const ote_stream_iface_t *)tl_ep->iface;
    uint64_t by_value = put ? OTE_STREAM_CAP_INLINE_WRITE : OTE_STREAM_CAP_INLINE_READ;
    bool by_ref;
    uint8_t type;

    if (iface->hooks->post != NULL)
        return iface->hooks->post(tl_ep, put, local, length, local_region, remote_addr, comp);
    by_ref = iface->hooks->ref_handle != NULL &&
             (length > OTE_STREAM_INLINE_MAX ||
              !(((const ote_stream_ep_t *)tl_ep)->peer_caps & by_value));
    if (by_ref)
        type = put ? OTE_STREAM_PUT_REF : OTE_STREAM_GET_REF;
    else
        type = put ? OTE_STREAM_WRITE : OTE_STREAM_READ_REQ;
    return ote_stream_ep_post((ote_stream_ep_t *)tl_ep, type, local, length, local_region,
                              remote_addr, comp);
}

size_t ote_stream_ep_inflight_bytes(ote_tl_ep_t *tl_ep)
{
    ote_stream_ep_t *ep = (ote_stream_ep_t *)tl_ep;
    size_t n = 0;

    for (size_t i = 0; i < ep->num_conns; i++)
        n += ep->conns[i]->inflight_bytes;
    return n;
}

bool ote_stream_ep_is_alive(ote_tl_ep_t *tl_ep)
{
    return stream_ep_pick((ote_stream_ep_t *)tl_ep) != NULL;
}

/* put_zcopy and get_zcopy: the same operation in either direction. */
#define STREAM_EP_ZCOPY(_fn, _put)                                                                \
    static ote_status_t _fn(ote_tl_ep_t *tl_ep, void *local, size_t length,                    \
                            ote_region_t *local_region, uint64_t remote_addr, const void *rkey, \
                            size_t rkey_len, ote_tl_completion_t *comp)                        \
    {                                                                                          \
        return stream_ep_post_op(tl_ep, _put, local, length, local_region, remote_addr, comp);    \
    }
STREAM_EP_ZCOPY(stream_ep_put_zcopy, true)
STREAM_EP_ZCOPY(stream_ep_get_zcopy, false)

const ote_tl_ep_ops_t ote_stream_ep_ops = {
    .put_zcopy       = stream_ep_put_zcopy,
    .get_zcopy       = stream_ep_get_zcopy,
    .inflight_bytes  = ote_stream_ep_inflight_bytes,
    .is_alive        = ote_stream_ep_is_alive,
    .destroy         = ote_stream_ep_destroy,
    .needs_reconnect = ote_stream_ep_needs_reconnect,
    .reconnect       = ote_stream_ep_reconnect,
    .connect_to_ep   = ote_tl_unsupported_connect_to_ep,
};
