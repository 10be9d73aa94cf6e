/*
 * Segments: peers opened by name. With the peer-to-peer metadata the name
 * is the peer's control-plane address; the descriptor is fetched from there
 * and one rail is built per (worker, local iface) whose transport the peer
 * also offers, whose scope reaches it, and which is not dominated by a
 * faster rail (see rails_build). A name "file:///abs/path" opens a local
 * file instead: its descriptor is made here (one region, the file) and its
 * rails are the file transport's ifaces, one per worker (file_open).
 */
#include "ctl_msg.h"
#include "engine.h"
#include "base/log.h"
#include "proto/stage.h"
#include "base/util.h"
#include "uct_ext/file/file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ote_segment_get(ote_segment_h seg)
{
    atomic_fetch_add(&seg->refs, 1);
}

void ote_segment_desc_put(ote_desc_t *d)
{
    if (d != NULL && atomic_fetch_sub(&d->refs, 1) == 1)
        ote_desc_free(d);
}

ote_desc_t *ote_segment_desc_get(ote_segment_h seg)
{
    ote_desc_t *d;

    pthread_mutex_lock(&seg->lock);
    d = seg->desc;
    atomic_fetch_add(&d->refs, 1);
    pthread_mutex_unlock(&seg->lock);
    return d;
}

void ote_segment_mark_stale(ote_segment_h seg)
{
    if (!atomic_exchange(&seg->stale, true))
        ote_info("segment '%s': the peer restarted; calls on this segment fail until "
                 "ote_segment_reopen()", seg->name);
}

/* The segment's descriptor is d from now on (a reference moves in). */
static void desc_adopt(ote_segment_h seg, ote_desc_t *d)
{
    ote_desc_t *old;

    pthread_mutex_lock(&seg->lock);
    old       = seg->desc;
    seg->desc = d;
    pthread_mutex_unlock(&seg->lock);
    atomic_fetch_add(&seg->desc_gen, 1);
    /* Freed here unless tasks still use its rkeys; then by the last of them. */
    ote_segment_desc_put(old);
}

static void segment_free(ote_segment_h seg)
{
#ifdef HAVE_LIBURING
    ote_file_put(seg->file);
#endif
    if (seg->ctl_fd >= 0)
        close(seg->ctl_fd);
    ote_segment_desc_put(seg->desc);
    pthread_mutex_destroy(&seg->lock);
    pthread_mutex_destroy(&seg->refresh_lock);
    free(seg);
}

void ote_segment_put(ote_segment_h seg)
{
    if (atomic_fetch_sub(&seg->refs, 1) == 1)
        segment_free(seg);
}

static void ctl_close(ote_segment_h seg)
{
    if (seg->ctl_fd >= 0) {
        close(seg->ctl_fd);
        seg->ctl_fd = -1;
    }
}

/*
 * One request and its response on fd, before deadline. The response type
 * must be one of expect[0..nexpect); *type_p says which came.
 */
static ote_status_t ctl_exchange(ote_segment_h seg, int fd, uint8_t type, const void *payload,
                                 size_t len, const uint8_t *expect, size_t nexpect,
                                 uint64_t deadline, uint8_t *type_p, uint8_t **resp_p,
                                 size_t *resp_len_p)
{
    ote_engine_h e = seg->engine;
    uint8_t hdr[OTE_CTL_HDR_LEN], small[OTE_CTL_HDR_LEN + OTE_CTL_NOTIFY_MAX_LEN];
    ote_ctl_hdr_t h = {.type = type, .length = (uint32_t)len};
    uint8_t *resp   = NULL;
    uint32_t seq;
    bool known = false;
    ote_status_t status;

    h.seq = seq = ++seg->ctl_seq;
    ote_ctl_hdr_encode(&h, hdr);
    if (len > 0 && len <= sizeof(small) - OTE_CTL_HDR_LEN) {
        /* One segment: a payload sent apart would wait for the peer's delayed ACK. */
        memcpy(small, hdr, OTE_CTL_HDR_LEN);
        memcpy(small + OTE_CTL_HDR_LEN, payload, len);
        status = ote_socket_send_all(fd, small, OTE_CTL_HDR_LEN + len, deadline);
    } else {
        status = ote_socket_send_all(fd, hdr, sizeof(hdr), deadline);
        if (status == OTE_OK && len)
            status = ote_socket_send_all(fd, payload, len, deadline);
    }
    if (status == OTE_OK)
        status = ote_socket_recv_all(fd, hdr, sizeof(hdr), deadline);
    if (status != OTE_OK)
        return status;
    status = ote_ctl_hdr_decode(hdr, sizeof(hdr), e->config.max_ctl_msg, &h);
    for (size_t i = 0; i < nexpect; i++)
        known |= h.type == expect[i];
    if (status != OTE_OK || !known || h.seq != seq) {
        ote_warn("segment '%s': malformed control response", seg->name);
        return OTE_ERR_PROTOCOL;
    }
    resp = malloc(h.length ? h.length : 1);
    if (resp == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_socket_recv_all(fd, resp, h.length, deadline);
    if (status != OTE_OK) {
        free(resp);
        return status;
    }
    *type_p     = h.type;
    *resp_p     = resp;
    *resp_len_p = h.length;
    return OTE_OK;
}

/* AUTH_DONE's status, or PROTOCOL. */
static ote_status_t auth_done_status(const uint8_t *resp, size_t len)
{
    ote_status_t remote;

    if (ote_ctl_status_decode(resp, len, &remote) != OTE_OK)
        return OTE_ERR_PROTOCOL;
    /* A target refuses with AUTH; anything else it says is still a refusal. */
    return remote == OTE_OK ? OTE_OK : OTE_ERR_AUTH;
}

/* Prove we hold the key, and that the target does (see auth.h). */
static ote_status_t ctl_authenticate(ote_segment_h seg, int fd, uint64_t deadline)
{
    static const uint8_t after_hello[] = {OTE_CTL_AUTH_PROOF, OTE_CTL_AUTH_DONE};
    static const uint8_t after_proof[] = {OTE_CTL_AUTH_DONE};
    ote_auth_t *auth = seg->engine->auth;
    uint8_t hello[OTE_AUTH_HELLO_LEN], iproof[OTE_AUTH_IPROOF_LEN];
    ote_auth_session_t s;
    uint8_t *resp = NULL;
    size_t len;
    uint8_t type;
    ote_status_t status;

    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_CTL);
    status = ote_auth_initiator_hello(auth, &s, hello);
    if (status != OTE_OK)
        return status;
    status = ctl_exchange(seg, fd, OTE_CTL_AUTH_HELLO, hello, sizeof(hello), after_hello, 2,
                          deadline, &type, &resp, &len);
    if (status != OTE_OK)
        return status;
    if (type == OTE_CTL_AUTH_DONE) {
        /* Refused before any proof: the target has no key, or no room for us. */
        status = auth_done_status(resp, len);
        free(resp);
        return status == OTE_OK ? OTE_ERR_PROTOCOL : status;
    }
    status = ote_auth_initiator_proof(auth, &s, resp, len, iproof);
    free(resp);
    if (status == OTE_ERR_AUTH)
        ote_error("segment '%s': the peer does not hold our OTE_AUTH_KEY", seg->name);
    if (status != OTE_OK)
        return status;
    status = ctl_exchange(seg, fd, OTE_CTL_AUTH_PROOF, iproof, sizeof(iproof), after_proof, 1,
                          deadline, &type, &resp, &len);
    if (status != OTE_OK)
        return status;
    status = auth_done_status(resp, len);
    free(resp);
    if (status == OTE_ERR_AUTH)
        ote_error("segment '%s': the peer refused our OTE_AUTH_KEY", seg->name);
    return status;
}

/* Under seg->lock. */
static ote_status_t ctl_connect(ote_segment_h seg, uint64_t deadline)
{
    ote_engine_h e = seg->engine;
    struct sockaddr_storage ss;
    socklen_t len;
    ote_status_t status;
    int fd;

    if (seg->ctl_fd >= 0)
        return OTE_OK;
    status = ote_sockaddr_parse(seg->name, &ss, &len);
    if (status == OTE_OK && ote_sockaddr_port((struct sockaddr *)&ss) == 0)
        status = OTE_ERR_INVALID_PARAM;
    if (status == OTE_ERR_NOT_FOUND && strchr(seg->name, ':') == NULL)
        status = OTE_ERR_INVALID_PARAM;
    if (status == OTE_ERR_INVALID_PARAM) {
        ote_error("segment '%s': not a host:port name (the p2p metadata opens peers by the "
                  "address of their control listener)", seg->name);
        return status;
    }
    if (status != OTE_OK) {
        ote_error("segment '%s': the host name does not resolve", seg->name);
        return OTE_ERR_NOT_FOUND;
    }
    status = ote_socket_connect(&ss, len, (int)e->config.connect_timeout_ms, &fd);
    if (status != OTE_OK) {
        ote_debug("segment '%s': connect: %s", seg->name, ote_status_string(status));
        return status;
    }
    if (e->auth->enabled) {
        status = ctl_authenticate(seg, fd, deadline);
        if (status != OTE_OK) {
            ote_debug("segment '%s': authentication: %s", seg->name, ote_status_string(status));
            close(fd);
            return status;
        }
    }
    seg->ctl_fd = fd;
    return OTE_OK;
}

ote_status_t ote_segment_ctl_request(ote_segment_h seg, uint8_t type, const void *payload,
                                     size_t len, uint8_t expect, uint8_t **resp_p,
                                     size_t *resp_len_p)
{
    ote_engine_h e    = seg->engine;
    uint64_t deadline = ote_time_ns() + (uint64_t)e->config.connect_timeout_ms * 1000000ull;
    uint8_t got;
    ote_status_t status;

    if (seg->file != NULL) {
        ote_error("segment '%s': a file has no peer to send control messages to", seg->name);
        return OTE_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&seg->lock);
    status = ctl_connect(seg, deadline);
    if (status != OTE_OK)
        goto out;
    status = ctl_exchange(seg, seg->ctl_fd, type, payload, len, &expect, 1, deadline, &got,
                          resp_p, resp_len_p);
    if (status != OTE_OK) {
        /* The stream may be mid-message: never reuse it. */
        ctl_close(seg);
        if (status == OTE_ERR_REMOTE_DISCONNECT || status == OTE_ERR_IO)
            status = OTE_ERR_REMOTE_DISCONNECT;
    }
out:
    pthread_mutex_unlock(&seg->lock);
    return status;
}

static ote_status_t fetch_desc(ote_segment_h seg, ote_desc_t **desc_p)
{
    uint8_t *resp = NULL;
    size_t len;
    ote_status_t status, remote;

    status = ote_segment_ctl_request(seg, OTE_CTL_GET_DESC, NULL, 0, OTE_CTL_DESC, &resp, &len);
    if (status != OTE_OK)
        return status;
    if (len < 4 || ote_ctl_status_decode(resp, 4, &remote) != OTE_OK) {
        status = OTE_ERR_PROTOCOL;
    } else if (remote != OTE_OK) {
        status = remote;
    } else {
        status = ote_desc_decode(resp + 4, len - 4, desc_p);
        if (status != OTE_OK)
            ote_warn("segment '%s': malformed descriptor", seg->name);
    }
    free(resp);
    return status;
}

static bool scope_reaches(const ote_tl_caps_t *caps, bool same_host, bool same_engine)
{
    if (same_engine && (caps->scope & OTE_TL_SCOPE_PROCESS))
        return true;
    if (same_host && (caps->scope & OTE_TL_SCOPE_HOST))
        return true;
    return (caps->scope & OTE_TL_SCOPE_NETWORK) != 0;
}

/* Ask the peer to drop the target sides of our to-ep connections (best effort). */
static void rails_release(ote_segment_h seg, uint64_t peer_instance, const uint64_t *ids,
                          size_t n)
{
    ote_engine_h e = seg->engine;

    while (n > 0) {
        ote_ctl_connect_t *m = calloc(1, sizeof(*m));
        ote_buf_t out        = {0};
        uint8_t *resp        = NULL;
        size_t len, k = n < OTE_CTL_CONNECT_MAX_IDS ? n : OTE_CTL_CONNECT_MAX_IDS;

        if (m == NULL)
            return;
        m->op        = OTE_CTL_CONNECT_OP_RELEASE;
        m->initiator = e->instance_id;
        m->target    = peer_instance;
        m->num_ids   = k;
        memcpy(m->ids, ids, k * sizeof(ids[0]));
        if (ote_ctl_connect_encode(m, &out) == OTE_OK &&
            ote_segment_ctl_request(seg, OTE_CTL_CONNECT, out.data, out.len,
                                    OTE_CTL_CONNECT_ACK, &resp, &len) == OTE_OK)
            free(resp);
        free(out.data);
        free(m);
        ids += k;
        n -= k;
    }
}

/*
 * Destroy every rail's ep; with release, the peer (peer_instance) is asked
 * to drop the target sides of to-ep connections.
 */
static void rails_destroy(ote_segment_h seg, bool release, uint64_t peer_instance)
{
    ote_engine_h e = seg->engine;
    uint64_t ids[OTE_PROTO_MAX_RAILS];
    size_t nids = 0;

    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        ote_rail_t *r    = seg->rail_set.rails[i];
        ote_worker_t *w  = &e->workers[r->worker];
        ote_tl_ep_t *ep;

        pthread_mutex_lock(&w->lock);
        ep    = r->ep;
        r->ep = NULL;
        if (ep != NULL)
            r->iface->ep_ops->destroy(ep);
        pthread_mutex_unlock(&w->lock);
        if (r->conn_id != 0)
            ids[nids++] = r->conn_id;
        r->conn_id = 0;
    }
    seg->rail_set.num_rails = 0;
    if (release && nids > 0)
        rails_release(seg, peer_instance, ids, nids);
}

/*
 * The peer's iface this one connects to. The descriptor lists the peer's
 * ifaces worker by worker, so the k-th entry of a (transport, device) is
 * the one of the peer's worker k: worker w takes entry w (modulo their
 * count). Only where the peer has no iface on a device of that name (other
 * hosts name their NICs differently) may another device of the transport
 * do, starting at the skip-th such entry. *peer_worker_p gets the peer's
 * worker index.
 */
static const ote_desc_tl_t *peer_iface(const ote_desc_t *d, const ote_tl_iface_t *iface,
                                       size_t w, size_t skip, size_t *peer_worker_p)
{
    const ote_tl_resource_t *res = &iface->resource;
    size_t same = 0, other = 0, k, seen;

    for (k = 0; k < d->num_tls; k++) {
        if (strcmp(d->tls[k].tl_name, res->tl_name) != 0)
            continue;
        if (strcmp(d->tls[k].dev_name, res->dev_name) == 0)
            same++;
        else
            other++;
    }
    if (same > 0) {
        if (skip > 0)
            return NULL;
        for (k = 0, seen = 0; k < d->num_tls; k++) {
            if (strcmp(d->tls[k].tl_name, res->tl_name) == 0 &&
                strcmp(d->tls[k].dev_name, res->dev_name) == 0 && seen++ == w % same) {
                *peer_worker_p = w % same;
                return &d->tls[k];
            }
        }
        return NULL;
    }
    if (!res->is_network || skip >= other)
        return NULL;
    for (k = 0, seen = 0; k < d->num_tls; k++) {
        if (strcmp(d->tls[k].tl_name, res->tl_name) == 0 && seen++ == (w + skip) % other) {
            /* The entry's worker: how many entries of its device precede it. */
            size_t pw = 0;

            for (size_t j = 0; j < k; j++) {
                pw += strcmp(d->tls[j].tl_name, d->tls[k].tl_name) == 0 &&
                      strcmp(d->tls[j].dev_name, d->tls[k].dev_name) == 0;
            }
            *peer_worker_p = pw;
            return &d->tls[k];
        }
    }
    return NULL;
}

/* To-ep wire-up: our ep, its address to the peer in a CONNECT, the answer back. */
static ote_status_t rail_connect_to_ep(ote_segment_h seg, const ote_desc_t *d, ote_rail_t *r,
                                       const ote_desc_tl_t *peer_tl, size_t peer_worker,
                                       const ote_tl_peer_t *peer)
{
    ote_engine_h e        = seg->engine;
    ote_tl_iface_t *iface = r->iface;
    ote_ctl_connect_t *m  = calloc(1, sizeof(*m));
    uint8_t mine[OTE_TL_ADDR_MAX];
    const uint8_t *theirs;
    size_t mine_len, theirs_len, resp_len;
    uint8_t *resp = NULL;
    ote_buf_t out = {0};
    ote_status_t status, remote;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    if (iface->ops->ep_open == NULL || iface->ep_ops->connect_to_ep == NULL) {
        free(m);
        return OTE_ERR_UNSUPPORTED;
    }
    status = iface->ops->ep_open(iface, peer_tl->addr, peer_tl->addr_len, peer, &r->ep, mine,
                                 sizeof(mine), &mine_len);
    if (status != OTE_OK) {
        free(m);
        return status;
    }
    do {
        m->conn_id = ote_random_u64();
    } while (m->conn_id == 0);
    m->op        = OTE_CTL_CONNECT_OP_CONNECT;
    m->initiator = e->instance_id;
    m->target    = d->instance_id;
    m->worker    = (uint16_t)peer_worker;
    m->addr      = mine;
    m->addr_len  = mine_len;
    snprintf(m->tl_name, sizeof(m->tl_name), "%s", peer_tl->tl_name);
    snprintf(m->dev_name, sizeof(m->dev_name), "%s", peer_tl->dev_name);
    status = ote_ctl_connect_encode(m, &out);
    if (status == OTE_OK)
        status = ote_segment_ctl_request(seg, OTE_CTL_CONNECT, out.data, out.len,
                                         OTE_CTL_CONNECT_ACK, &resp, &resp_len);
    if (status == OTE_OK) {
        status = ote_ctl_connect_ack_decode(resp, resp_len, &remote, &theirs, &theirs_len);
        if (status == OTE_OK && remote != OTE_OK)
            status = remote;
        else if (status == OTE_OK)
            r->conn_id = m->conn_id;
    }
    if (status == OTE_OK)
        status = iface->ep_ops->connect_to_ep(r->ep, theirs, theirs_len);
    free(resp);
    free(out.data);
    if (status != OTE_OK) {
        ote_worker_t *w = &e->workers[r->worker];

        pthread_mutex_lock(&w->lock);
        iface->ep_ops->destroy(r->ep);
        pthread_mutex_unlock(&w->lock);
        r->ep = NULL;
        if (r->conn_id != 0)
            rails_release(seg, d->instance_id, &m->conn_id, 1);
        r->conn_id = 0;
    }
    free(m);
    return status;
}

static ote_status_t stage_ctl(void *arg, const void *req, size_t len, uint8_t **resp_p,
                              size_t *resp_len_p)
{
    return ote_segment_ctl_request(arg, OTE_CTL_STAGE, req, len, OTE_CTL_STAGE_ACK, resp_p,
                                   resp_len_p);
}

/*
 * GPU memory over host-only rails: one staging rail (proto/stage.c) in front
 * of each host rail, on the same worker, then one remote staging rail (the
 * peer's GPU memory through its pinned chunks) in front of each host rail
 * and its staging rail. Returns the new rail count.
 */
static size_t stage_rails_add(ote_segment_h seg, const ote_desc_t *d, size_t n)
{
    ote_engine_h e = seg->engine;
    size_t host_rails = n, local_end;

    for (size_t i = 0, built = n; i < built && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_worker_t *w = &e->workers[seg->rails[i].worker];

        for (size_t k = 0; k < w->num_ifaces; k++) {
            if (ote_proto_stage_iface(w->ifaces[k]) &&
                ote_proto_stage_rail_init(&seg->rails[n], &seg->rails[i], w->ifaces[k]) ==
                    OTE_OK) {
                ote_debug("segment '%s': rail %zu stages GPU memory over %s/%s", seg->name, n,
                          seg->rails[i].iface->resource.tl_name,
                          seg->rails[i].iface->resource.dev_name);
                seg->rail_set.rails[n] = &seg->rails[n];
                n++;
                break;
            }
        }
    }
    local_end = n;
    for (size_t i = 0; i < host_rails && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_worker_t *w   = &e->workers[seg->rails[i].worker];
        ote_rail_t *local = NULL;

        for (size_t j = host_rails; j < local_end; j++) {
            if (ote_proto_stage_rail_host(&seg->rails[j]) == &seg->rails[i])
                local = &seg->rails[j];
        }
        for (size_t k = 0; k < w->num_ifaces; k++) {
            ote_stage_remote_hooks_t hooks = {
                .ctl = stage_ctl, .ctl_arg = seg, .worker_lock = &w->lock,
                .worker_wake_fd = w->wake_fd, .initiator = e->instance_id,
                .target = d->instance_id, .timeout_ms = e->config.xfer_timeout_ms};

            if (ote_proto_stage_iface(w->ifaces[k]) &&
                ote_proto_stage_remote_rail_init(&seg->rails[n], &seg->rails[i], local,
                                                 w->ifaces[k], &hooks) == OTE_OK) {
                ote_debug("segment '%s': rail %zu stages the peer's GPU memory over %s/%s",
                          seg->name, n, seg->rails[i].iface->resource.tl_name,
                          seg->rails[i].iface->resource.dev_name);
                seg->rail_set.rails[n] = &seg->rails[n];
                n++;
                break;
            }
        }
    }
    return n;
}

/* What a rail's ep needs to know of the peer instance d describes. */
static ote_tl_peer_t rail_peer(ote_segment_h seg, const ote_desc_t *d)
{
    ote_engine_h e = seg->engine;

    return (ote_tl_peer_t){.instance_id = d->instance_id, .name = seg->name,
                           .local_instance = e->instance_id,
                           .timeout_ms = e->config.connect_timeout_ms};
}

/*
 * Connect r (iface, worker and caps set, no ep) to the peer iface d lists
 * for it; r->ep is set on success.
 */
static ote_status_t rail_connect(ote_segment_h seg, const ote_desc_t *d, ote_rail_t *r,
                                 const ote_tl_peer_t *peer)
{
    ote_tl_iface_t *iface = r->iface;
    ote_status_t status   = OTE_ERR_UNREACHABLE;

    for (size_t skip = 0;; skip++) {
        size_t peer_worker = 0;
        const ote_desc_tl_t *peer_tl = peer_iface(d, iface, r->worker, skip, &peer_worker);

        if (peer_tl == NULL)
            break;
        if (r->caps.conn_model == OTE_TL_CONN_TO_EP)
            status = rail_connect_to_ep(seg, d, r, peer_tl, peer_worker, peer);
        else
            status = iface->ops->ep_create(iface, peer_tl->addr, peer_tl->addr_len, peer,
                                           &r->ep);
        /* Another device of the peer may be reachable where this one is not. */
        if (status != OTE_ERR_UNREACHABLE)
            break;
    }
    return status;
}

/*
 * A rail whose ep failed for good (UCT's eps stay failed) gets a new ep to
 * the same instance d describes. The new ep is made aside and takes the old
 * one's place under the worker lock, so that slices posted meanwhile see
 * one or the other.
 */
static ote_status_t rail_rebuild(ote_segment_h seg, const ote_desc_t *d, ote_rail_t *r)
{
    ote_worker_t *w    = &seg->engine->workers[r->worker];
    ote_tl_peer_t peer = rail_peer(seg, d);
    ote_rail_t fresh   = *r;
    ote_tl_ep_t *old;
    uint64_t old_conn;
    ote_status_t status;

    fresh.ep      = NULL;
    fresh.conn_id = 0;
    status        = rail_connect(seg, d, &fresh, &peer);
    if (status != OTE_OK) {
        ote_warn("segment '%s': %s/%s could not be connected again: %s", seg->name,
                 r->iface->resource.tl_name, r->iface->resource.dev_name,
                 ote_status_string(status));
        return status;
    }
    pthread_mutex_lock(&w->lock);
    old        = r->ep;
    old_conn   = r->conn_id;
    r->ep      = fresh.ep;
    r->conn_id = fresh.conn_id;
    if (old != NULL)
        r->iface->ep_ops->destroy(old);
    pthread_mutex_unlock(&w->lock);
    if (old_conn != 0)
        rails_release(seg, d->instance_id, &old_conn, 1);
    ote_info("segment '%s': %s/%s connected again", seg->name, r->iface->resource.tl_name,
             r->iface->resource.dev_name);
    return OTE_OK;
}

/*
 * Under seg->refresh_lock: rails whose connections failed are connected
 * again to the instance d describes. Native tcp and cma replace their
 * failed connections (reconnect); with rebuild, a rail whose ep is dead
 * for good (UCT) gets a new one. The first error is returned, and
 * PEER_RESTARTED as soon as a handshake finds another instance.
 */
static ote_status_t rails_repair(ote_segment_h seg, const ote_desc_t *d, bool rebuild)
{
    ote_engine_h e      = seg->engine;
    ote_status_t result = OTE_OK;

    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        ote_rail_t *r             = seg->rail_set.rails[i];
        const ote_tl_ep_ops_t *ops = r->iface->ep_ops;
        ote_worker_t *w           = &e->workers[r->worker];
        ote_status_t status       = OTE_OK;
        bool alive;

        if (r->ep == NULL)
            continue;
        if (ops->reconnect != NULL) {
            if (ops->needs_reconnect(r->ep)) {
                ote_tl_peer_t peer = rail_peer(seg, d);

                status = ops->reconnect(r->ep, &peer);
            }
        } else if (rebuild) {
            pthread_mutex_lock(&w->lock);
            alive = ops->is_alive(r->ep);
            pthread_mutex_unlock(&w->lock);
            if (!alive)
                status = rail_rebuild(seg, d, r);
        }
        if (status == OTE_ERR_PEER_RESTARTED)
            return status;
        if (result == OTE_OK)
            result = status;
    }
    return result;
}

typedef struct {
    ote_tl_iface_t *iface;
    size_t          worker;
    ote_tl_caps_t   caps;
} rail_cand_t;

/* Preferred first (see ote_proto_caps_cmp), then by worker. */
static int cand_cmp(const void *a, const void *b)
{
    const rail_cand_t *x = a, *y = b;
    int c = ote_proto_caps_cmp(&x->caps, x->iface->resource.is_network, &y->caps,
                               y->iface->resource.is_network);

    if (c != 0)
        return c;
    return x->worker < y->worker ? -1 : x->worker > y->worker;
}

/*
 * Build the rails to a peer: one per local worker iface whose transport the
 * peer offers and whose scope reaches it (same process, same host including
 * its network namespace, or network). Intra-host first, then checked, then
 * fastest; a rail that would never be chosen next to ones built already is
 * not connected.
 */
static ote_status_t rails_build(ote_segment_h seg, const ote_desc_t *d)
{
    ote_engine_h e   = seg->engine;
    bool same_engine = d->instance_id == e->instance_id;
    ote_status_t last = OTE_ERR_UNREACHABLE;
    rail_cand_t *cand;
    size_t ncand = 0, n = 0;

    seg->same_host = strcmp(d->host_id, e->host_id) == 0;
    cand = calloc(e->num_workers * OTE_MAX_IFACES, sizeof(*cand));
    if (cand == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t w = 0; w < e->num_workers; w++) {
        ote_worker_t *wk = &e->workers[w];

        for (size_t i = 0; i < wk->num_ifaces; i++) {
            rail_cand_t *c = &cand[ncand];

            c->iface  = wk->ifaces[i];
            c->worker = w;
            c->iface->ops->query(c->iface, &c->caps);
            if (scope_reaches(&c->caps, seg->same_host, same_engine))
                ncand++;
        }
    }
    qsort(cand, ncand, sizeof(cand[0]), cand_cmp);
    for (size_t ci = 0; ci < ncand && n < OTE_PROTO_MAX_RAILS; ci++) {
        rail_cand_t *c        = &cand[ci];
        ote_tl_iface_t *iface = c->iface;
        ote_rail_t *r         = &seg->rails[n];
        ote_tl_peer_t peer    = rail_peer(seg, d);
        ote_status_t status;

        if (ote_proto_rail_dominated(&c->caps, iface->resource.is_network, seg->rail_set.rails,
                                     n)) {
            ote_debug("segment '%s': %s/%s not needed next to faster transports", seg->name,
                      iface->resource.tl_name, iface->resource.dev_name);
            continue;
        }
        memset(r, 0, sizeof(*r));
        r->caps      = c->caps;
        r->iface     = iface;
        r->worker    = c->worker;
        r->remote_md = -1;
        if (iface->md != NULL) {
            for (size_t k = 0; k < d->num_mds; k++) {
                if (strcmp(d->mds[k], iface->md->name) == 0)
                    r->remote_md = (int)k;
            }
        }
        status = rail_connect(seg, d, r, &peer);
        if (status != OTE_OK) {
            if (r->ep == NULL && status == OTE_ERR_UNREACHABLE)
                ote_debug("segment '%s': %s/%s does not reach it", seg->name,
                          iface->resource.tl_name, iface->resource.dev_name);
            else
                ote_warn("segment '%s': transport %s/%s unreachable: %s", seg->name,
                         iface->resource.tl_name, iface->resource.dev_name,
                         ote_status_string(status));
            r->ep = NULL;
            last  = status;
            continue;
        }
        ote_debug("segment '%s': rail %zu on %s/%s (worker %zu)", seg->name, n,
                  iface->resource.tl_name, iface->resource.dev_name, c->worker);
        seg->rail_set.rails[n] = r;
        n++;
        seg->rail_set.num_rails = n;
    }
    free(cand);
    n = stage_rails_add(seg, d, n);
    seg->rail_set.num_rails = n;
    if (n == 0) {
        ote_error("segment '%s': no transport reaches it", seg->name);
        return last;
    }
    return OTE_OK;
}

bool ote_segment_is_file_name(const char *name)
{
    return strncmp(name, "file:", 5) == 0;
}

#ifdef HAVE_LIBURING
/* A file segment's descriptor: this engine, and one region, [0, file size). */
static ote_status_t file_desc(ote_segment_h seg, ote_desc_t **desc_p)
{
    ote_engine_h e = seg->engine;
    ote_desc_t *d;
    uint64_t size;
    unsigned access;
    ote_status_t status;

    status = ote_file_refresh(seg->file, &size, &access);
    if (status != OTE_OK)
        return status;
    d = calloc(1, sizeof(*d));
    if (d == NULL || (d->regions = calloc(1, sizeof(*d->regions))) == NULL) {
        free(d);
        return OTE_ERR_NO_MEMORY;
    }
    d->instance_id = e->instance_id;
    snprintf(d->name, sizeof(d->name), "%s", seg->name);
    snprintf(d->host_id, sizeof(d->host_id), "%s", e->host_id);
    d->num_regions        = 1;
    d->regions[0].addr    = 0;
    d->regions[0].length  = size;
    d->regions[0].access  = access;
    snprintf(d->regions[0].location, sizeof(d->regions[0].location), "file");
    atomic_init(&d->refs, 1);
    *desc_p = d;
    return OTE_OK;
}

/* One rail per worker: an ep of its file iface on the segment's file. */
static ote_status_t file_rails_build(ote_segment_h seg)
{
    ote_engine_h e = seg->engine;
    uint8_t addr[OTE_TL_ADDR_MAX];
    ote_tl_peer_t peer = {.instance_id = e->instance_id, .name = seg->name,
                          .local_instance = e->instance_id,
                          .timeout_ms = e->config.connect_timeout_ms};
    size_t addr_len, n = 0;
    ote_status_t status;

    status = ote_file_address(seg->file, addr, sizeof(addr), &addr_len);
    if (status != OTE_OK)
        return status;
    for (size_t w = 0; w < e->num_workers && n < OTE_PROTO_MAX_RAILS; w++) {
        ote_worker_t *wk = &e->workers[w];

        for (size_t i = 0; i < wk->num_ifaces && n < OTE_PROTO_MAX_RAILS; i++) {
            ote_tl_iface_t *iface = wk->ifaces[i];
            ote_rail_t *r         = &seg->rails[n];

            if (strcmp(iface->resource.tl_name, OTE_FILE_TL_NAME) != 0)
                continue;
            memset(r, 0, sizeof(*r));
            iface->ops->query(iface, &r->caps);
            r->iface     = iface;
            r->worker    = w;
            r->remote_md = -1;
            status = iface->ops->ep_create(iface, addr, addr_len, &peer, &r->ep);
            if (status != OTE_OK)
                return status;
            seg->rail_set.rails[n] = r;
            seg->rail_set.num_rails = ++n;
        }
    }
    if (n == 0) {
        ote_error("segment '%s': the file transport is not in use (OTE_TLS='%s'; ote_info -d "
                  "says why where it is not usable)", seg->name, e->config.tls);
        return OTE_ERR_UNREACHABLE;
    }
    return OTE_OK;
}

static ote_status_t segment_open_file(ote_segment_h seg, const char *name, ote_desc_t **desc_p)
{
    const char *path = name + strlen(OTE_FILE_SCHEME);
    ote_status_t status;

    if (strncmp(name, OTE_FILE_SCHEME, strlen(OTE_FILE_SCHEME)) != 0 || path[0] != '/') {
        ote_error("segment '%s': a file segment is named file:///abs/path (an absolute path)",
                  seg->name);
        return OTE_ERR_INVALID_PARAM;
    }
    status = ote_file_open(path, seg->engine->config.file_direct, &seg->file);
    if (status == OTE_OK)
        status = file_desc(seg, desc_p);
    if (status == OTE_OK)
        status = file_rails_build(seg);
    return status;
}

/* A file segment's refresh: the file's size now bounds the region. */
static ote_status_t segment_resolve_file(ote_segment_h seg, int *restarted_p)
{
    ote_desc_t *d = NULL;
    ote_status_t status;

    pthread_mutex_lock(&seg->refresh_lock);
    status = file_desc(seg, &d);
    if (status == OTE_OK)
        desc_adopt(seg, d);
    pthread_mutex_unlock(&seg->refresh_lock);
    if (status == OTE_OK && restarted_p != NULL)
        *restarted_p = 0;
    return status;
}
#else
static ote_status_t segment_open_file(ote_segment_h seg, const char *name, ote_desc_t **desc_p)
{
    ote_error("segment '%s': file segments need liburing, which this build lacks", name);
    return OTE_ERR_UNSUPPORTED;
}

static ote_status_t segment_resolve_file(ote_segment_h seg, int *restarted_p)
{
    return OTE_ERR_UNSUPPORTED;
}
#endif

ote_status_t ote_segment_open(ote_engine_h e, const char *name, ote_segment_h *seg_p)
{
    ote_segment_h seg;
    ote_desc_t *d = NULL;
    bool file;
    ote_status_t status;

    if (e == NULL || name == NULL || seg_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    /* A file's name is a path (PATH_MAX); a peer's fits a descriptor. */
    file = ote_segment_is_file_name(name);
    if (strlen(name) > (file ? strlen(OTE_FILE_SCHEME) + PATH_MAX : OTE_DESC_NAME_MAX))
        return OTE_ERR_INVALID_PARAM;
    seg = calloc(1, sizeof(*seg));
    if (seg == NULL)
        return OTE_ERR_NO_MEMORY;
    seg->engine = e;
    seg->ctl_fd = -1;
    /* A long file path is cut in the name logs show; the file keeps it whole. */
    snprintf(seg->name, sizeof(seg->name), "%.*s", (int)sizeof(seg->name) - 1, name);
    pthread_mutex_init(&seg->lock, NULL);
    pthread_mutex_init(&seg->refresh_lock, NULL);
    atomic_init(&seg->refs, 1);

    if (file) {
        status = segment_open_file(seg, name, &d);
        if (status != OTE_OK)
            goto err;
    } else {
        status = fetch_desc(seg, &d);
        if (status != OTE_OK)
            goto err;
        status = rails_build(seg, d);
        if (status != OTE_OK)
            goto err;
    }
    atomic_init(&d->refs, 1);
    seg->desc = d;
    pthread_mutex_lock(&e->seg_lock);
    seg->next = e->segments;
    if (e->segments)
        e->segments->prev = seg;
    e->segments = seg;
    pthread_mutex_unlock(&e->seg_lock);
    *seg_p = seg;
    return OTE_OK;

err:
    rails_destroy(seg, d != NULL, d != NULL ? d->instance_id : 0);
    ote_desc_free(d);
    segment_free(seg);
    return status;
}

ote_status_t ote_segment_close(ote_segment_h seg)
{
    ote_engine_h e;

    if (seg == NULL)
        return OTE_ERR_INVALID_PARAM;
    e = seg->engine;
    if (atomic_exchange(&seg->closed, true))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&e->seg_lock);
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        e->segments = seg->next;
    if (seg->next)
        seg->next->prev = seg->prev;
    pthread_mutex_unlock(&e->seg_lock);
    /* Operations still posted end CANCELED as their eps go. */
    rails_destroy(seg, true, seg->desc->instance_id);
    ote_segment_put(seg);
    return OTE_OK;
}

ote_status_t ote_segment_regions(ote_segment_h seg, ote_region_info_t *regions, size_t max,
                                 size_t *count_p)
{
    if (seg == NULL || count_p == NULL || (max > 0 && regions == NULL))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&seg->lock);
    *count_p = seg->desc->num_regions;
    for (size_t i = 0; i < max && i < seg->desc->num_regions; i++) {
        const ote_desc_region_t *r = &seg->desc->regions[i];

        regions[i].addr   = r->addr;
        regions[i].length = r->length;
        regions[i].access = r->access;
        snprintf(regions[i].location, sizeof(regions[i].location), "%s", r->location);
    }
    pthread_mutex_unlock(&seg->lock);
    return OTE_OK;
}

/*
 * Fetch the descriptor of whatever instance serves the name now. With
 * rebind, a new instance replaces the old one (rails rebuilt) and
 * *restarted_p says so; without, a new instance leaves the segment bound to
 * the old one, marked stale. Fetches are one at a time: a caller that waited
 * for another's fetch uses its result.
 */
static ote_status_t segment_resolve(ote_segment_h seg, bool rebind, int *restarted_p)
{
    unsigned gen = atomic_load(&seg->desc_gen);
    ote_desc_t *d = NULL;
    ote_status_t status;
    bool restarted;

    if (seg->file != NULL)
        return segment_resolve_file(seg, restarted_p);
    pthread_mutex_lock(&seg->refresh_lock);
    if (!rebind && atomic_load(&seg->desc_gen) != gen) {
        pthread_mutex_unlock(&seg->refresh_lock);
        return atomic_load(&seg->stale) ? OTE_ERR_PEER_RESTARTED : OTE_OK;
    }
    status = fetch_desc(seg, &d);
    if (status != OTE_OK)
        goto out;
    atomic_init(&d->refs, 1);
    pthread_mutex_lock(&seg->lock);
    restarted = d->instance_id != seg->desc->instance_id;
    pthread_mutex_unlock(&seg->lock);
    if (restarted && !rebind) {
        ote_segment_mark_stale(seg);
        ote_segment_desc_put(d);
        status = OTE_ERR_PEER_RESTARTED;
        goto out;
    }
    if (!restarted) {
        /* Same instance: connections a failure took down are made again. */
        status = rails_repair(seg, d, true);
        if (status == OTE_ERR_PEER_RESTARTED) {
            /* Its name answered with this instance, a transport with another one. */
            ote_segment_mark_stale(seg);
            ote_segment_desc_put(d);
            goto out;
        }
    }
    if (restarted) {
        /* Never reuse connections to the old instance; it took its side of them along. */
        ote_info("segment '%s': bound to the restarted peer's new instance %016llx", seg->name,
                 (unsigned long long)d->instance_id);
        atomic_store(&seg->stale, true);
        rails_destroy(seg, false, 0);
        status = rails_build(seg, d);
        if (status != OTE_OK) {
            ote_segment_desc_put(d);
            goto out;
        }
    }
    desc_adopt(seg, d);
    if (restarted || status == OTE_OK)
        atomic_store(&seg->stale, false);
    if (restarted_p != NULL)
        *restarted_p = restarted;
out:
    pthread_mutex_unlock(&seg->refresh_lock);
    return status;
}

ote_status_t ote_segment_refresh(ote_segment_h seg)
{
    if (seg == NULL || atomic_load(&seg->closed))
        return OTE_ERR_INVALID_PARAM;
    if (atomic_load(&seg->stale))
        return OTE_ERR_PEER_RESTARTED;
    return segment_resolve(seg, false, NULL);
}

ote_status_t ote_segment_reopen(ote_segment_h seg, int *restarted_p)
{
    if (seg == NULL || atomic_load(&seg->closed))
        return OTE_ERR_INVALID_PARAM;
    return segment_resolve(seg, true, restarted_p);
}

ote_status_t ote_segment_repair(ote_segment_h seg)
{
    ote_status_t status = OTE_OK;
    bool needed         = false;

    pthread_mutex_lock(&seg->refresh_lock);
    if (!atomic_load(&seg->closed) && !atomic_load(&seg->stale)) {
        for (size_t i = 0; i < seg->rail_set.num_rails && !needed; i++) {
            ote_rail_t *r = seg->rail_set.rails[i];

            needed = r->ep != NULL && r->iface->ep_ops->needs_reconnect != NULL &&
                     r->iface->ep_ops->needs_reconnect(r->ep);
        }
        if (needed) {
            ote_desc_t *d = ote_segment_desc_get(seg);

            status = rails_repair(seg, d, false);
            ote_segment_desc_put(d);
        }
    }
    pthread_mutex_unlock(&seg->refresh_lock);
    if (status == OTE_ERR_PEER_RESTARTED) {
        ote_segment_mark_stale(seg);
    } else if (status != OTE_OK && status != OTE_ERR_TIMEOUT) {
        /*
         * The old address refuses: ask the name who serves it now, so that
         * a restarted peer is told apart from one that is away. (A handshake
         * that timed out reached a process that does not answer yet.)
         */
        ote_status_t found = segment_resolve(seg, false, NULL);

        /* The control connection kept open may be the old instance's: once more, anew. */
        if (found == OTE_ERR_REMOTE_DISCONNECT)
            found = segment_resolve(seg, false, NULL);
        if (found == OTE_ERR_PEER_RESTARTED)
            status = OTE_ERR_PEER_RESTARTED;
    }
    return status;
}
