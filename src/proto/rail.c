/*
 * Spraying and failover. Each slice goes to the rail that would finish it
 * first: (bytes in flight on the rail + the slice) / the rail's bandwidth,
 * where the bandwidth is an EWMA of what the rail delivered while it was
 * busy, seeded from its transport's estimate. A rail has quotas of bytes
 * and slices in flight; when the best rail is at its quota the slice waits
 * for a slice to end (it would finish later anywhere else), so the bytes
 * split in proportion to what each rail delivers.
 *
 * A slice that fails on a rail for the rail's sake (connection reset,
 * timeout, unreachable) pauses the rail: it cools down, then is probed
 * (its connections made again, then one slice) before it carries again;
 * each pause that follows a failed probe is twice as long, up to a cap. A
 * probe forced before the pause ended (no rail of the segment may carry)
 * that fails leaves the pause as it is, and records the peer's side of
 * its failure (REMOTE_DISCONNECT or TIMEOUT) as the rail's last error:
 * what slices that were never posted end with.
 */
#include "proto.h"

#include "base/log.h"

#include <stdio.h>
#include <string.h>

/* The bandwidth estimate takes a sample every this long of busy time. */
#define RAIL_BW_WINDOW_NS (20ull * 1000 * 1000)
/* Weight of a new sample in the estimate. */
#define RAIL_BW_ALPHA     0.3

/*
 * A counter of the rail that only holders of its lock change, and others
 * read without it: a load and a store, not a locked read-modify-write.
 */
#define HELD_ADD(field, n)                                                                     \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n), \
                          memory_order_relaxed)
#define HELD_SUB(field, n)                                                                     \
    atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) - (n), \
                          memory_order_relaxed)

void ote_proto_rail_init(ote_rail_t *r, const ote_rail_params_t *params, uint32_t gen)
{
    ote_rail_spray_t *sp = &r->spray;

    memset(sp, 0, sizeof(*sp));
    atomic_init(&sp->maybe_cooling, false);
    pthread_mutex_init(&sp->lock, NULL);
    sp->params      = *params;
    sp->state       = OTE_RAIL_ACTIVE;
    sp->bandwidth   = r->caps.bandwidth > 0 ? r->caps.bandwidth : 1e9;
    sp->cooldown_ns = params->cooldown_ns;
    sp->gen         = gen;
    r->topo         = params->topo;
    r->topo_nic     = r->iface != NULL && r->iface->resource.is_network
                          ? ote_topo_table_nic(params->topo, r->iface->resource.dev_name)
                          : -1;
}

/* The rail may take a slice now (lock held); a rail whose cool-down ended turns PROBING. */
static bool rail_may_carry(ote_rail_t *r, uint64_t now)
{
    ote_rail_spray_t *sp = &r->spray;

    if (r->ep == NULL || sp->link_down)
        return false;
    if (sp->state == OTE_RAIL_COOLING) {
        /* Its connections failed: the probe is to make them again first. */
        if (now < sp->resume_ns || r->iface->ep_ops->needs_reconnect(r->ep))
            return false;
        sp->state      = OTE_RAIL_PROBING;
        sp->probe_busy = false;
    }
    if (sp->state == OTE_RAIL_PROBING)
        return !sp->probe_busy && !r->iface->ep_ops->needs_reconnect(r->ep);
    return sp->state == OTE_RAIL_ACTIVE;
}

static bool rail_has_room(const ote_rail_t *r, size_t length)
{
    const ote_rail_spray_t *sp = &r->spray;
    /* Slices first: a decrement seen there shows its bytes freed too (ote_proto_slice_end). */
    unsigned slices = atomic_load(&sp->inflight_slices);
    size_t bytes    = atomic_load(&sp->inflight_bytes);

    if (slices == 0)
        return true; /* a slice larger than the quota still goes, alone */
    if (sp->params.max_slices && slices >= sp->params.max_slices)
        return false;
    return !sp->params.max_bytes || bytes + length <= sp->params.max_bytes;
}

ote_rail_t *ote_proto_rail_pick(const ote_rail_set_t *set, size_t length, uint64_t now,
                                ote_status_t *why_p)
{
    ote_rail_t *best = NULL;
    double best_t    = 0;
    bool probing     = false;

    /* The rails the topology kept; those it left out only when none of these may carry. */
    for (int fallback = 0; fallback < 2 && best == NULL && !probing; fallback++) {
        for (size_t i = 0; i < set->num_rails; i++) {
            ote_rail_t *r        = set->rails[i];
            ote_rail_spray_t *sp = &r->spray;
            double w             = set->weight[i] == 0 ? 1 : set->weight[i];
            double t;
            bool ok;

            if ((w < 0) != (fallback == 1))
                continue;
            pthread_mutex_lock(&sp->lock);
            ok = rail_may_carry(r, now);
            probing |= !ok && sp->state == OTE_RAIL_PROBING && sp->probe_busy;
            t  = (double)(atomic_load(&sp->inflight_bytes) + length) /
                 (sp->bandwidth * (w < 0 ? -w : w));
            pthread_mutex_unlock(&sp->lock);
            if (ok && (best == NULL || t < best_t)) {
                best   = r;
                best_t = t;
            }
        }
    }
    if (best == NULL) {
        /* A probe in flight decides soon whether its rail carries again. */
        *why_p = probing ? OTE_ERR_BUSY : OTE_ERR_UNREACHABLE;
        return NULL;
    }
    if (!rail_has_room(best, length)) {
        *why_p = OTE_ERR_BUSY;
        return NULL;
    }
    return best;
}

void ote_proto_slice_bind(ote_slice_t *s, ote_rail_t *r, uint64_t now)
{
    ote_rail_spray_t *sp = &r->spray;

    s->rail     = r;
    s->rail_gen = sp->gen;
    s->rkey     = NULL;
    s->rkey_len = 0;
    if (r->remote_md >= 0 && s->route != NULL) {
        for (size_t q = 0; q < s->route->num_rkeys; q++) {
            if (s->route->rkeys[q].md_index == r->remote_md) {
                s->rkey     = s->route->rkeys[q].data;
                s->rkey_len = s->route->rkeys[q].length;
            }
        }
    }
    pthread_mutex_lock(&sp->lock);
    if (atomic_load_explicit(&sp->inflight_slices, memory_order_relaxed) == 0) {
        /* Idle until now: the bandwidth window starts with this slice. */
        sp->win_start_ns = now;
        sp->win_bytes    = 0;
    }
    HELD_ADD(sp->inflight_slices, 1);
    HELD_ADD(sp->inflight_bytes, s->length);
    if (sp->state == OTE_RAIL_PROBING)
        sp->probe_busy = true;
    pthread_mutex_unlock(&sp->lock);
}

/* Failures of the rail, not of the request: another rail may do better. */
static bool status_rail_failure(ote_status_t status)
{
    return status == OTE_ERR_TIMEOUT || status == OTE_ERR_IO ||
           status == OTE_ERR_REMOTE_DISCONNECT || status == OTE_ERR_UNREACHABLE;
}

/* Pause the rail (lock held); a failure while already paused does not lengthen it. */
static void rail_pause(ote_rail_t *r, uint64_t now)
{
    ote_rail_spray_t *sp = &r->spray;

    if (sp->state == OTE_RAIL_COOLING)
        return;
    sp->state     = OTE_RAIL_COOLING;
    atomic_store_explicit(&sp->maybe_cooling, true, memory_order_release);
    sp->resume_ns = now + sp->cooldown_ns;
    ote_info("rail %s/%s paused for %llu ms", r->iface->resource.tl_name,
             r->iface->resource.dev_name, (unsigned long long)(sp->cooldown_ns / 1000000));
    sp->cooldown_ns *= 2;
    if (sp->cooldown_ns > sp->params.cooldown_max_ns)
        sp->cooldown_ns = sp->params.cooldown_max_ns;
}

bool ote_proto_slice_end(ote_slice_t *s, ote_status_t status, uint64_t now)
{
    ote_rail_t *r = s->rail;
    ote_rail_spray_t *sp;
    bool rail_failed = status_rail_failure(status);

    if (r == NULL)
        return false;
    sp      = &r->spray;
    s->rail = NULL;
    if (s->rail_gen != sp->gen)
        return false; /* the rail was built again since: not its slice */
    pthread_mutex_lock(&sp->lock);
    HELD_SUB(sp->inflight_bytes, s->length);
    /*
     * Sequentially consistent, after the bytes: the room this frees is seen
     * by a submitter that then looks at the rail (rail_has_room reads the
     * slices first), or this thread sees its backlog (ote_segment_spray).
     */
    atomic_fetch_sub(&sp->inflight_slices, 1);
    if (status == OTE_OK) {
        uint64_t dt;

        HELD_ADD(sp->bytes, s->length);
        HELD_ADD(sp->slices, 1);
        sp->win_bytes += s->length;
        dt = now - sp->win_start_ns;
        if (now > sp->win_start_ns && dt >= RAIL_BW_WINDOW_NS) {
            double sample = (double)sp->win_bytes * 1e9 / (double)dt;

            sp->bandwidth    = (1 - RAIL_BW_ALPHA) * sp->bandwidth + RAIL_BW_ALPHA * sample;
            sp->win_start_ns = now;
            sp->win_bytes    = 0;
        }
        if (sp->state == OTE_RAIL_PROBING) {
            sp->state       = OTE_RAIL_ACTIVE;
            sp->cooldown_ns = sp->params.cooldown_ns;
            ote_info("rail %s/%s carries again", r->iface->resource.tl_name,
                     r->iface->resource.dev_name);
        }
    } else if (rail_failed) {
        atomic_fetch_add(&sp->errors, 1);
        sp->last_error = status;
        rail_pause(r, now);
    } else if (sp->state == OTE_RAIL_PROBING) {
        sp->probe_busy = false; /* not the rail's fault: probe with another slice */
    }
    pthread_mutex_unlock(&sp->lock);
    if (rail_failed)
        s->last_error = status;
    return rail_failed;
}

void ote_proto_slice_retried(ote_rail_t *from)
{
    atomic_fetch_add(&from->spray.retries, 1);
}

bool ote_proto_rail_cooling(ote_rail_t *r)
{
    bool cooling;

    pthread_mutex_lock(&r->spray.lock);
    cooling = !r->spray.link_down && r->spray.state == OTE_RAIL_COOLING;
    /* Seen out of its cool-down under the lock: the hint may go. */
    if (r->spray.state != OTE_RAIL_COOLING)
        atomic_store_explicit(&r->spray.maybe_cooling, false, memory_order_release);
    pthread_mutex_unlock(&r->spray.lock);
    return cooling;
}

/*
 * Without the lock: true when the rail has not been paused since a check
 * under the lock last found it out of its cool-down, so no cool-down, no
 * probe and no port down are there to look at. False may be stale (then
 * the caller looks under the lock, as before).
 */
bool ote_proto_rail_calm(ote_rail_t *r)
{
    return !atomic_load_explicit(&r->spray.maybe_cooling, memory_order_acquire);
}

bool ote_proto_rail_probe_due(ote_rail_t *r, uint64_t now)
{
    bool due;

    pthread_mutex_lock(&r->spray.lock);
    due = !r->spray.link_down &&
          (r->spray.state != OTE_RAIL_COOLING || now >= r->spray.resume_ns);
    pthread_mutex_unlock(&r->spray.lock);
    return due;
}

ote_status_t ote_proto_peer_lost_status(ote_status_t status)
{
    switch (status) {
    case OTE_ERR_TIMEOUT:
        return OTE_ERR_TIMEOUT;
    case OTE_ERR_NOT_FOUND:    /* connection refused: nothing listens there now */
    case OTE_ERR_UNREACHABLE:  /* a connect the kernel could not route, a dead pid */
    case OTE_ERR_IO:
    case OTE_ERR_REMOTE_DISCONNECT:
        return OTE_ERR_REMOTE_DISCONNECT;
    default:
        return status;
    }
}

void ote_proto_rail_probed(ote_rail_t *r, ote_status_t status, uint64_t now)
{
    ote_rail_spray_t *sp = &r->spray;

    pthread_mutex_lock(&sp->lock);
    if (status == OTE_OK) {
        if (sp->state == OTE_RAIL_COOLING) {
            sp->state      = OTE_RAIL_PROBING;
            sp->probe_busy = false;
        }
    } else {
        if (sp->state != OTE_RAIL_COOLING)
            atomic_fetch_add(&sp->errors, 1);
        /* Why the rail does not carry: what its tasks end with while it waits. */
        sp->last_error = ote_proto_peer_lost_status(status);
        /*
         * A probe forced before the pause ended (no rail of the segment
         * could carry) leaves the pause as it is: only a probe that was
         * due and failed makes the next pause longer.
         */
        if (sp->state != OTE_RAIL_COOLING || now >= sp->resume_ns) {
            sp->state = OTE_RAIL_PROBING; /* rail_pause pauses it anew */
            rail_pause(r, now);
        }
    }
    pthread_mutex_unlock(&sp->lock);
}

ote_status_t ote_proto_rails_last_error(const ote_rail_set_t *set)
{
    ote_status_t last = OTE_OK;
    uint64_t when     = 0;

    for (size_t i = 0; i < set->num_rails; i++) {
        ote_rail_spray_t *sp = &set->rails[i]->spray;

        pthread_mutex_lock(&sp->lock);
        if (sp->last_error != OTE_OK && (last == OTE_OK || sp->resume_ns > when)) {
            last = sp->last_error;
            when = sp->resume_ns;
        }
        pthread_mutex_unlock(&sp->lock);
    }
    return last;
}

ote_status_t ote_proto_rails_idle_status(const ote_rail_set_t *set)
{
    ote_status_t last = ote_proto_rails_last_error(set);

    if (last != OTE_OK)
        return ote_proto_peer_lost_status(last);
    /*
     * None failed: its rails wait for their ports (a link down here or at
     * the peer) or the peer stopped answering. Both pass; neither is a
     * configuration that cannot reach.
     */
    return OTE_ERR_REMOTE_DISCONNECT;
}

bool ote_proto_rails_usable(const ote_rail_set_t *set, uint64_t now)
{
    for (size_t i = 0; i < set->num_rails; i++) {
        ote_rail_t *r = set->rails[i];
        bool ok;

        if (r->ep == NULL)
            continue;
        pthread_mutex_lock(&r->spray.lock);
        /* A port that is down may come up: its rail is usable later. */
        ok = r->spray.link_down || r->spray.state != OTE_RAIL_COOLING ||
             (now >= r->spray.resume_ns && !r->iface->ep_ops->needs_reconnect(r->ep));
        pthread_mutex_unlock(&r->spray.lock);
        if (ok)
            return true;
    }
    return false;
}

void ote_proto_rail_link(ote_rail_t *r, bool up, uint64_t now)
{
    ote_rail_spray_t *sp = &r->spray;

    pthread_mutex_lock(&sp->lock);
    if (!up && !sp->link_down) {
        sp->link_down = true;
        sp->state     = OTE_RAIL_COOLING;
        atomic_store_explicit(&sp->maybe_cooling, true, memory_order_release);
        sp->resume_ns = UINT64_MAX;
        ote_info("rail %s/%s paused: its port is down", r->iface->resource.tl_name,
                 r->iface->resource.dev_name);
    } else if (up && sp->link_down) {
        /* Probed first, as after a cool-down; the next pause starts short. */
        sp->link_down   = false;
        sp->state       = OTE_RAIL_COOLING;
        atomic_store_explicit(&sp->maybe_cooling, true, memory_order_release);
        sp->resume_ns   = now;
        sp->cooldown_ns = sp->params.cooldown_ns;
        ote_info("rail %s/%s: its port is up again; probing it", r->iface->resource.tl_name,
                 r->iface->resource.dev_name);
    }
    pthread_mutex_unlock(&sp->lock);
}

void ote_proto_rail_info(ote_rail_t *r, uint64_t now, ote_rail_info_t *info)
{
    ote_rail_spray_t *sp = &r->spray;

    memset(info, 0, sizeof(*info));
    snprintf(info->transport, sizeof(info->transport), "%s", r->iface->resource.tl_name);
    snprintf(info->device, sizeof(info->device), "%s", r->iface->resource.dev_name);
    info->bytes          = atomic_load(&sp->bytes);
    info->slices         = atomic_load(&sp->slices);
    info->retries        = atomic_load(&sp->retries);
    info->errors         = atomic_load(&sp->errors);
    info->inflight_bytes = atomic_load(&sp->inflight_bytes);
    pthread_mutex_lock(&sp->lock);
    info->state     = r->ep == NULL ? OTE_RAIL_CLOSED : (ote_rail_state_t)sp->state;
    info->bandwidth = sp->bandwidth;
    if (sp->link_down)
        info->cooldown_ms = UINT64_MAX;
    else if (sp->state == OTE_RAIL_COOLING && sp->resume_ns > now)
        info->cooldown_ms = (sp->resume_ns - now + 999999) / 1000000;
    pthread_mutex_unlock(&sp->lock);
}
