/*
 * Wire-up of a segment's rails: one rail per (worker, local iface) whose
 * transport the peer also offers, whose scope reaches it, and which is not
 * dominated by a faster rail (see ote_wireup_build); connections of the
 * to-ep model through CONNECT requests; staging rails over host rails; and
 * the repair of rails whose connections failed.
 */
#include "base/log.h"
#include "base/util.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "proto/putback.h"
#include "proto/stage.h"
#include "segment_ctl.h"
#include "segment_ref.h"
#include "wireup.h"
#include "core/worker/worker_def.h"

#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
        m->initiator = ote_engine_facts(e)->instance_id;
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
void ote_wireup_destroy(ote_segment_h seg, bool release, uint64_t peer_instance)
{
    ote_engine_h e = seg->engine;
    uint64_t ids[OTE_PROTO_MAX_RAILS];
    size_t nids = 0, n;

    /*
     * Out of the set first, under the lock submits plan with: no plan
     * reads these rails while they go, and slices planned on them are not
     * bound to the next ones.
     */
    pthread_mutex_lock(&seg->lock);
    n                       = seg->rail_set.num_rails;
    seg->rail_set.num_rails = 0;
    atomic_fetch_add(&seg->rails_gen, 1);
    pthread_mutex_unlock(&seg->lock);
    for (size_t i = 0; i < n; i++) {
        ote_rail_t *r    = seg->rail_set.rails[i];
        ote_worker_t *w  = &ote_engine_facts(e)->workers[r->worker];
        ote_tl_ep_t *ep;

        ote_worker_lock_out(w);
        ep    = r->ep;
        r->ep = NULL;
        if (ep != NULL)
            r->iface->ep_ops->destroy(ep);
        pthread_mutex_unlock(&w->lock);
        if (r->conn_id != 0)
            ids[nids++] = r->conn_id;
        r->conn_id = 0;
    }
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
    m->initiator = ote_engine_facts(e)->instance_id;
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
        ote_worker_t *w = &ote_engine_facts(e)->workers[r->worker];

        ote_worker_lock_out(w);
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

/* Rail n, just built in front of host rail host, joins the set: n + 1. */
static size_t rail_added(ote_segment_h seg, size_t n, size_t host, const char *how)
{
    ote_debug("segment '%s': rail %zu %s over %s/%s", seg->name, n, how,
              seg->rails[host].iface->resource.tl_name, seg->rails[host].iface->resource.dev_name);
    seg->rail_set.rails[n] = &seg->rails[n];
    return n + 1;
}

static ote_status_t stage_ctl(void *arg, const void *req, size_t len, uint8_t **resp_p,
                              size_t *resp_len_p)
{
    ote_segment_h seg = arg;

    /*
     * Closed: nothing more is asked of the peer (ote.h: CANCELED); what the
     * slice pinned there goes when the segment's control connection does.
     */
    if (atomic_load(&seg->closed))
        return OTE_ERR_CANCELED;
    return ote_segment_ctl_request(seg, OTE_CTL_STAGE, req, len, OTE_CTL_STAGE_ACK, resp_p,
                                   resp_len_p);
}

/*
 * GPU memory over host-only rails: one staging rail (proto/stage.c) in front
 * of each host rail, staged by the staging context of the host rail's
 * worker, then one remote staging rail (the peer's GPU memory through its
 * pinned chunks) in front of each host rail and its staging rail. None
 * where the workers have no staging context. Returns the new rail count.
 */
static size_t stage_rails_add(ote_segment_h seg, const ote_desc_t *d, size_t n)
{
    ote_engine_h e = seg->engine;
    size_t host_rails = n, local_end;

    for (size_t i = 0, built = n; i < built && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_stage_worker_t *sw = ote_engine_facts(e)->workers[seg->rails[i].worker].stage;

        if (ote_proto_stage_rail_init(&seg->rails[n], &seg->rails[i], sw) == OTE_OK)
            n = rail_added(seg, n, i, "stages GPU memory");
    }
    local_end = n;
    for (size_t i = 0; i < host_rails && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_worker_t *w   = &ote_engine_facts(e)->workers[seg->rails[i].worker];
        ote_rail_t *local = NULL;
        ote_stage_remote_hooks_t hooks = {
            .base = {.ctl = stage_ctl, .ctl_arg = seg, .worker_lock = &w->lock,
                     .jobs = ote_engine_facts(e)->proto_jobs, .initiator = ote_engine_facts(e)->instance_id,
                     .target = d->instance_id},
            .worker_wake_fd = w->wake_fd, .timeout_ms = ote_engine_facts(e)->config.xfer_timeout_ms};

        for (size_t j = host_rails; j < local_end; j++) {
            if (ote_proto_stage_rail_host(&seg->rails[j]) == &seg->rails[i])
                local = &seg->rails[j];
        }
        if (ote_proto_stage_remote_rail_init(&seg->rails[n], &seg->rails[i], local, w->stage,
                                             &hooks) == OTE_OK)
            n = rail_added(seg, n, i, "stages the peer's GPU memory");
    }
    return n;
}

static ote_status_t putback_ctl(void *arg, const void *req, size_t len, uint8_t **resp_p,
                                size_t *resp_len_p)
{
    ote_segment_h seg = arg;

    /* A request still queued when its segment closed is not sent (ote.h: CANCELED). */
    if (atomic_load(&seg->closed))
        return OTE_ERR_CANCELED;
    /*
     * The answer comes once the target's WRITE ended (proto/putback_target.c,
     * core/ctl/ctl_peer.c):
     * canceled past one transfer timeout, its posted slices end within
     * another. Waiting that long (its segment open and progress on top)
     * makes the answer, not our clock, end the slice: nothing the target
     * posts for it comes after.
     */
    return ote_segment_ctl_request_alone(seg, OTE_CTL_PUTBACK, req, len, OTE_CTL_PUTBACK_ACK,
                                         ote_engine_facts(seg->engine)->config.connect_timeout_ms +
                                             2 * ote_engine_facts(seg->engine)->config.xfer_timeout_ms + 1000,
                                         resp_p, resp_len_p);
}

/*
 * READs over put-only host rails (UCT's tcp): one putback rail in front of
 * each, on the same worker (proto/putback.c). Returns the new rail count.
 */
static size_t putback_rails_add(ote_segment_h seg, const ote_desc_t *d, size_t n)
{
    ote_engine_h e = seg->engine;

    for (size_t i = 0, built = n; i < built && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_worker_t *w           = &ote_engine_facts(e)->workers[seg->rails[i].worker];
        ote_putback_hooks_t hooks = {.base = {.ctl = putback_ctl, .ctl_arg = seg,
                                              .worker_lock = &w->lock, .jobs = ote_engine_facts(e)->proto_jobs,
                                              .initiator = ote_engine_facts(e)->instance_id,
                                              .target = d->instance_id}};

        if (seg->rail_set.rails[i] != &seg->rails[i])
            continue;
        snprintf(hooks.name, sizeof(hooks.name), "%s", ote_engine_facts(e)->name);
        if (ote_proto_putback_rail_init(&seg->rails[n], &seg->rails[i], &hooks) == OTE_OK)
            n = rail_added(seg, n, i, "reads by PUTBACK");
    }
    return n;
}

/* What a rail's ep needs to know of the peer instance d describes. */
static ote_tl_peer_t rail_peer(ote_segment_h seg, const ote_desc_t *d)
{
    ote_engine_h e = seg->engine;

    return (ote_tl_peer_t){.instance_id = d->instance_id, .name = seg->name,
                           .local_instance = ote_engine_facts(e)->instance_id,
                           .timeout_ms = ote_engine_facts(e)->config.connect_timeout_ms};
}

/*
 * Before the first ep of a build or repair on a transport that asks for it
 * (OTE_TL_CAP_PROBE_PEER): the instance d describes must answer at its
 * control address. UCX 1.13's tcp leaks the socket of a connect that fails
 * inside uct_ep_create, and a metadata
 * store keeps a dead instance's record until its lease ends, so each
 * attempt on a rail towards a dead peer (an open, a probe every cool-down)
 * cost a descriptor. A control address that refuses, does not answer in
 * OTE_CONNECT_TIMEOUT_MS or is served by another instance: NOT_FOUND, as
 * the failed connect said, and no ep is tried; any other answer (one that
 * asks for authentication, say) lets the connect decide. *gate holds the
 * answer for the rest of the call (OTE_INPROGRESS: not asked yet).
 */
static ote_status_t peer_answers(ote_segment_h seg, const ote_desc_t *d, ote_status_t *gate)
{
    ote_status_t status;

    if (*gate != OTE_INPROGRESS)
        return *gate;
    status = ote_segment_probe_holder(seg->engine, d, ote_engine_facts(seg->engine)->config.connect_timeout_ms);
    if (status != OTE_ERR_NOT_FOUND && status != OTE_ERR_NO_MEMORY)
        status = OTE_OK;
    if (status != OTE_OK)
        ote_debug("segment '%s': instance %016llx does not answer at %s: no ep is made to it",
                  seg->name, (unsigned long long)d->instance_id, d->ctl_addr);
    *gate = status;
    return status;
}

/*
 * Connect r (iface, worker and caps set, no ep) to the peer iface d lists
 * for it; r->ep is set on success. gate: see peer_answers.
 */
static ote_status_t rail_connect(ote_segment_h seg, const ote_desc_t *d, ote_rail_t *r,
                                 const ote_tl_peer_t *peer, ote_status_t *gate)
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
        else if (!(r->caps.ops & OTE_TL_CAP_PROBE_PEER) ||
                 (status = peer_answers(seg, d, gate)) == OTE_OK)
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
static ote_status_t rail_rebuild(ote_segment_h seg, const ote_desc_t *d, ote_rail_t *r,
                                 ote_status_t *gate)
{
    ote_worker_t *w    = &ote_engine_facts(seg->engine)->workers[r->worker];
    ote_tl_peer_t peer = rail_peer(seg, d);
    ote_rail_t fresh   = *r;
    ote_tl_ep_t *old;
    uint64_t old_conn;
    ote_status_t status;

    fresh.ep      = NULL;
    fresh.conn_id = 0;
    status        = rail_connect(seg, d, &fresh, &peer, gate);
    if (status != OTE_OK) {
        ote_warn("segment '%s': %s/%s could not be connected again: %s", seg->name,
                 r->iface->resource.tl_name, r->iface->resource.dev_name,
                 ote_status_string(status));
        return status;
    }
    ote_worker_lock_out(w);
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
ote_status_t ote_wireup_repair(ote_segment_h seg, const ote_desc_t *d, bool rebuild)
{
    ote_engine_h e      = seg->engine;
    ote_status_t result = OTE_OK, gate = OTE_INPROGRESS;

    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        ote_rail_t *r             = seg->rail_set.rails[i];
        const ote_tl_ep_ops_t *ops = r->iface->ep_ops;
        ote_worker_t *w           = &ote_engine_facts(e)->workers[r->worker];
        ote_status_t status       = OTE_OK;
        bool alive;

        /* A rail on a device gone from this engine waits for it (engine_join.c). */
        if (r->ep == NULL || ote_engine_iface_gone(e, r->iface))
            continue;
        if (ops->needs_reconnect(r->ep)) {
            ote_tl_peer_t peer = rail_peer(seg, d);

            status = ops->reconnect(r->ep, &peer);
        } else if (rebuild) {
            ote_worker_lock_out(w);
            alive = ops->is_alive(r->ep);
            pthread_mutex_unlock(&w->lock);
            if (!alive)
                status = rail_rebuild(seg, d, r, &gate);
        }
        if (status == OTE_ERR_PEER_RESTARTED)
            return status;
        if (status == OTE_OK)
            ote_proto_rail_probed(r, OTE_OK, ote_time_ns()); /* made again: probe it */
        if (result == OTE_OK)
            result = status;
    }
    return result;
}

ote_status_t ote_wireup_probe(ote_segment_h seg, const ote_desc_t *d, bool force)
{
    ote_status_t result = OTE_OK;

    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        ote_rail_t *r       = seg->rail_set.rails[i];
        ote_tl_peer_t peer  = rail_peer(seg, d);
        ote_status_t status;

        if (r->ep == NULL || ote_engine_iface_gone(seg->engine, r->iface) ||
            !r->iface->ep_ops->needs_reconnect(r->ep) ||
            (!force && !ote_proto_rail_probe_due(r, ote_time_ns())))
            continue;
        status = r->iface->ep_ops->reconnect(r->ep, &peer);
        ote_proto_rail_probed(r, status, ote_time_ns());
        if (status == OTE_ERR_PEER_RESTARTED)
            return status;
        /* One rail that stays down while others carry is the cool-down's business. */
        if (force && result == OTE_OK)
            result = status;
    }
    return result;
}

/* A connected rail's spraying state, from the engine's configuration. */
static void rail_start(ote_segment_h seg, ote_rail_t *r, uint32_t gen)
{
    ote_engine_h e           = seg->engine;
    ote_rail_params_t params = {
        .max_bytes       = ote_engine_facts(e)->config.rail_max_bytes,
        .max_slices      = (unsigned)ote_engine_facts(e)->config.rail_max_slices,
        .cooldown_ns     = (uint64_t)ote_engine_facts(e)->config.rail_cooldown_ms * 1000000ull,
        .cooldown_max_ns = (uint64_t)ote_engine_facts(e)->config.rail_cooldown_max_ms * 1000000ull,
        .topo            = ote_engine_facts(e)->topo_table};

    ote_proto_rail_init(r, &params, gen);
    /* Built on an RDMA port that is down now: paused until it is up. */
    if (r->iface != NULL && ote_engine_rdma_port_down(e, r->iface->resource.dev_name))
        ote_proto_rail_link(r, false, ote_time_ns());
}

/* The peer's md of the name iface's md has, -1 if none. */
static int rail_remote_md(const ote_desc_t *d, const ote_tl_iface_t *iface)
{
    int md = -1;

    for (size_t k = 0; iface->md != NULL && k < d->num_mds; k++) {
        if (strcmp(d->mds[k], iface->md->name) == 0)
            md = (int)k;
    }
    return md;
}

/*
 * The peer runs iface's transport but lists no device of it: every device
 * of it left that engine for now (links down there: engine_join.c takes a
 * gone device out of the descriptor and puts it back when it returns), not
 * a configuration that cannot reach it. A descriptor says which transports
 * its engine runs (version 4: desc.h, runs); an older one says it only for
 * a transport with a memory domain (which stays listed while the engine
 * runs).
 */
static bool peer_devices_away(const ote_desc_t *d, const ote_tl_iface_t *iface)
{
    const char *tl = iface->resource.tl_name;

    if (ote_desc_has_device(d, tl))
        return false;
    return ote_desc_runs(d, tl) || rail_remote_md(d, iface) >= 0;
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

/* A network interface of this host that is not up or has no carrier (IFF_UP, IFF_RUNNING). */
static bool netdev_down(const char *dev)
{
    struct ifreq ifr;
    bool down = false;
    int fd;

    if (dev == NULL || strlen(dev) >= sizeof(ifr.ifr_name))
        return false;
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, dev, strlen(dev));
    /* A device that is no network interface (an RDMA port's name) is not asked here. */
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0)
        down = (ifr.ifr_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING);
    close(fd);
    return down;
}

/*
 * The link of a network iface is down here (its port or interface is down,
 * it lost its carrier, the engine saw its transport go): a transient state,
 * not a configuration that cannot reach.
 */
static bool iface_link_down(ote_engine_h e, const ote_tl_iface_t *iface)
{
    if (!iface->resource.is_network)
        return false;
    return ote_engine_iface_gone(e, iface) ||
           ote_engine_rdma_port_down(e, iface->resource.dev_name) ||
           netdev_down(iface->resource.dev_name);
}

/*
 * Build the rails to a peer: one per local worker iface whose transport the
 * peer offers and whose scope reaches it (same process, same host including
 * its network namespace, or network). Intra-host first, then checked, then
 * fastest; a rail that would never be chosen next to ones built already is
 * not connected. *links_down_p: no rail was built and an iface that might
 * have reached the peer has its link down.
 */
static ote_status_t wireup_build_once(ote_segment_h seg, const ote_desc_t *d, bool *links_down_p)
{
    ote_engine_h e   = seg->engine;
    bool same_engine = d->instance_id == ote_engine_facts(e)->instance_id;
    ote_status_t last = OTE_ERR_UNREACHABLE, gate = OTE_INPROGRESS;
    bool links_down  = false;
    rail_cand_t *cand;
    size_t ncand = 0, n = 0;

    *links_down_p = false;

    seg->same_host = strcmp(d->host_id, ote_engine_facts(e)->host_id) == 0;
    cand = calloc(ote_engine_facts(e)->num_workers * OTE_MAX_IFACES, sizeof(*cand));
    if (cand == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t w = 0; w < ote_engine_facts(e)->num_workers; w++) {
        ote_worker_t *wk = &ote_engine_facts(e)->workers[w];

        for (size_t i = 0; i < wk->num_ifaces; i++) {
            rail_cand_t *c = &cand[ncand];

            c->iface  = wk->ifaces[i];
            c->worker = w;
            c->iface->ops->query(c->iface, &c->caps);
            if (!scope_reaches(&c->caps, seg->same_host, same_engine))
                continue;
            if (ote_engine_iface_gone(e, c->iface))
                links_down = true; /* its transport left with its link: it may come back */
            else
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
        r->remote_md = rail_remote_md(d, iface);
        status = rail_connect(seg, d, r, &peer, &gate);
        if (status == OTE_ERR_UNREACHABLE && r->ep == NULL && peer_devices_away(d, iface)) {
            ote_info("segment '%s': %s/%s: the peer runs %s but its descriptor lists no device "
                     "of it now (its links are down or just came back)",
                     seg->name, iface->resource.tl_name, iface->resource.dev_name,
                     iface->resource.tl_name);
            status = OTE_ERR_REMOTE_DISCONNECT;
        }
        if (status != OTE_OK) {
            if (r->ep == NULL && status == OTE_ERR_UNREACHABLE)
                ote_debug("segment '%s': %s/%s does not reach it", seg->name,
                          iface->resource.tl_name, iface->resource.dev_name);
            else
                ote_warn("segment '%s': transport %s/%s unreachable: %s", seg->name,
                         iface->resource.tl_name, iface->resource.dev_name,
                         ote_status_string(status));
            r->ep = NULL;
            /*
             * A transport that reaches the peer by configuration and failed
             * now (refused, timed out: the peer is away) says more than one
             * that never reaches it: UNREACHABLE only when all are of those.
             */
            if (status != OTE_ERR_UNREACHABLE || last == OTE_ERR_UNREACHABLE)
                last = status;
            links_down = links_down || iface_link_down(e, iface);
            continue;
        }
        ote_debug("segment '%s': rail %zu on %s/%s (worker %zu)", seg->name, n,
                  iface->resource.tl_name, iface->resource.dev_name, c->worker);
        seg->rail_set.rails[n] = r;
        n++;
    }
    free(cand);
    n = stage_rails_add(seg, d, n);
    n = putback_rails_add(seg, d, n);
    {
        uint32_t gen = atomic_fetch_add(&seg->rails_gen, 1) + 1;

        for (size_t i = 0; i < n; i++)
            rail_start(seg, seg->rail_set.rails[i], gen);
    }
    /* Built whole, then published under the lock submits plan with. */
    pthread_mutex_lock(&seg->lock);
    seg->rail_set.num_rails = n;
    pthread_mutex_unlock(&seg->lock);
    if (n == 0) {
        *links_down_p = links_down;
        if (!links_down && last == OTE_ERR_UNREACHABLE)
            ote_error("segment '%s': no transport reaches it", seg->name);
        else if (!links_down)
            ote_error("segment '%s': no rail could be connected now: %s", seg->name,
                      ote_status_string(last));
        return last;
    }
    return OTE_OK;
}

ote_status_t ote_wireup_build(ote_segment_h seg, const ote_desc_t *d)
{
    ote_engine_h e    = seg->engine;
    uint64_t deadline = ote_time_ns() + (uint64_t)ote_engine_facts(e)->config.connect_timeout_ms * 1000000ull;
    bool links_down;
    ote_status_t status;

    atomic_store(&seg->rails_instance, d->instance_id);
    /*
     * No rail only because this host's links are down (a port, a carrier,
     * a transport gone with its interface): that is transient, not a
     * configuration that cannot reach. Wait for a link to come back, up to
     * OTE_CONNECT_TIMEOUT_MS, then OTE_ERR_TIMEOUT; never UNREACHABLE.
     */
    for (;;) {
        status = wireup_build_once(seg, d, &links_down);
        if (status == OTE_OK || !links_down)
            return status;
        if (ote_time_ns() >= deadline)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000L}, NULL);
    }
    ote_error("segment '%s': the links that reach it are down here; none came back within "
              "OTE_CONNECT_TIMEOUT_MS (%ld ms)", seg->name, (long)ote_engine_facts(e)->config.connect_timeout_ms);
    return OTE_ERR_TIMEOUT;
}


static bool iface_has_rail(ote_segment_h seg, const ote_tl_iface_t *iface)
{
    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        if (seg->rail_set.rails[i]->iface == iface)
            return true;
    }
    return false;
}

/*
 * Under seg->refresh_lock, the peer the same instance: a rail for every
 * network iface no rail of the segment runs on (a device that joined here,
 * or one that reaches the peer now that a device joined there), connected
 * as ote_wireup_build connects them and appended under seg->lock: tasks
 * submitted from then on spray over it, those in flight keep their rails.
 * Staging and PUTBACK rails over it come with the next build.
 */
void ote_wireup_extend(ote_segment_h seg, const ote_desc_t *d)
{
    ote_engine_h e   = seg->engine;
    bool same_engine = d->instance_id == ote_engine_facts(e)->instance_id;
    ote_status_t gate = OTE_INPROGRESS;

    for (size_t w = 0; w < ote_engine_facts(e)->num_workers; w++) {
        ote_worker_t *wk = &ote_engine_facts(e)->workers[w];

        for (size_t i = 0; i < wk->num_ifaces; i++) {
            ote_tl_iface_t *iface = wk->ifaces[i];
            ote_tl_peer_t peer    = rail_peer(seg, d);
            ote_rail_t fresh      = {.iface = iface, .worker = w, .remote_md = -1};
            size_t n              = seg->rail_set.num_rails;
            ote_rail_t *r;
            ote_status_t status;

            if (n == OTE_PROTO_MAX_RAILS)
                return;
            if (!iface->resource.is_network || ote_engine_iface_gone(e, iface) ||
                iface_has_rail(seg, iface))
                continue;
            iface->ops->query(iface, &fresh.caps);
            if (!scope_reaches(&fresh.caps, seg->same_host, same_engine) ||
                ote_proto_rail_dominated(&fresh.caps, true, seg->rail_set.rails, n))
                continue;
            fresh.remote_md = rail_remote_md(d, iface);
            status          = rail_connect(seg, d, &fresh, &peer, &gate);
            if (status != OTE_OK) {
                ote_debug("segment '%s': %s/%s does not reach it: %s", seg->name,
                          iface->resource.tl_name, iface->resource.dev_name,
                          ote_status_string(status));
                continue;
            }
            pthread_mutex_lock(&seg->lock);
            r  = &seg->rails[n];
            *r = fresh;
            rail_start(seg, r, atomic_load(&seg->rails_gen));
            seg->rail_set.rails[n]  = r;
            seg->rail_set.num_rails = n + 1;
            pthread_mutex_unlock(&seg->lock);
            ote_info("segment '%s': new rail %zu on %s/%s (worker %zu)", seg->name, n,
                     iface->resource.tl_name, iface->resource.dev_name, w);
        }
    }
}
