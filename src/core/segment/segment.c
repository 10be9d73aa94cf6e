/*
 * Segments: peers opened by name. With the peer-to-peer metadata the name
 * is the peer's control-plane address and the descriptor is fetched from
 * there; with a metadata store (meta.h) the descriptor is read from the
 * store, and the control plane is reached at the address it carries.
 * This file holds the API and the segment's life (open, close, refresh,
 * reopen, repair); segment_ref.c makes, counts and frees the object,
 * segment_ctl.c is its control-plane client, wireup.c builds and repairs
 * its rails. A close or a new instance's rails end the slices still
 * waiting for the old ones through ote_segment_backlog_end (the spray,
 * which this file does not call: segment.h). A name
 * of a component's scheme ("file:///abs/path": the file component's
 * objects, uct_ext/tl.h) opens a local object instead: the component opens
 * it, its descriptor is made here (one region, the object) and its rails
 * are eps of that component's ifaces, one per worker (segment_open_object);
 * "<export>@<engine name>" a peer's exported file (segment_export.c).
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "core/meta/meta.h"
#include "core/obs/obs.h"
#include "proto/stage.h"
#include "segment.h"
#include "core/worker/worker_def.h"

#include <limits.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* A local object's descriptor: this engine, and one region, [0, its size). */
static ote_status_t object_desc(ote_segment_h seg, ote_desc_t **desc_p)
{
    ote_engine_h e = seg->engine;
    ote_desc_t *d;
    uint64_t size;
    unsigned access;
    ote_status_t status;

    status = seg->object_ops->describe(seg->file, &size, &access);
    if (status != OTE_OK)
        return status;
    d = ote_desc_new(ote_engine_facts(e)->instance_id, seg->name, ote_engine_facts(e)->host_id,
                     NULL, 1);
    if (d == NULL)
        return OTE_ERR_NO_MEMORY;
    d->regions[0].addr     = 0;
    d->regions[0].length   = size;
    d->regions[0].access   = access;
    d->regions[0].location = seg->object_ops->location; /* a literal of the component */
    *desc_p = d;
    return OTE_OK;
}

/*
 * GPU memory the object's rails do not reach (for a file: no cuFile for
 * it): one staging rail (proto/stage.c, pinned host chunks) in front of
 * each, on its worker. Returns the rail count.
 */
static size_t object_stage_rails_add(ote_segment_h seg, size_t n)
{
    ote_engine_h e = seg->engine;

    for (size_t i = 0, built = n; i < built && n < OTE_PROTO_MAX_RAILS; i++) {
        ote_stage_worker_t *sw = ote_engine_facts(e)->workers[seg->rails[i].worker].stage;

        if (sw != NULL && ote_proto_stage_rail_init(&seg->rails[n], &seg->rails[i], sw) == OTE_OK) {
            seg->rail_set.rails[n] = &seg->rails[n];
            n++;
        }
    }
    return n;
}

/*
 * One rail per worker: an ep of its iface of the object's component on
 * the object; the memory types those eps do not reach for this object are
 * taken from their caps, GPU memory staged in front of them.
 */
static ote_status_t object_rails_build(ote_segment_h seg, ote_tl_component_t *comp,
                                       const void *cfg)
{
    ote_engine_h e = seg->engine;
    uint8_t addr[OTE_TL_ADDR_MAX];
    ote_tl_peer_t peer = {.instance_id    = ote_engine_facts(e)->instance_id,
                          .name           = seg->name,
                          .local_instance = ote_engine_facts(e)->instance_id,
                          .timeout_ms     = ote_engine_facts(e)->config.connect_timeout_ms};
    size_t addr_len, n = 0;
    unsigned unreached = 0;
    ote_status_t status;

    status = seg->object_ops->attach(seg->file, cfg, &unreached);
    if (status != OTE_OK)
        return status;
    status = seg->object_ops->address(seg->file, addr, sizeof(addr), &addr_len);
    if (status != OTE_OK)
        return status;
    for (size_t w = 0; w < ote_engine_facts(e)->num_workers && n < OTE_PROTO_MAX_RAILS; w++) {
        ote_worker_t *wk = &ote_engine_facts(e)->workers[w];

        for (size_t i = 0; i < wk->num_ifaces && n < OTE_PROTO_MAX_RAILS; i++) {
            ote_tl_iface_t *iface = wk->ifaces[i];
            ote_rail_t *r         = &seg->rails[n];

            if (iface->resource.component != comp)
                continue;
            memset(r, 0, sizeof(*r));
            iface->ops->query(iface, &r->caps);
            r->caps.mem_local &= ~unreached;
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
        ote_error("segment '%s': the %s transport is not in use (OTE_TLS='%s'; ote_info -d "
                  "says why where it is not usable)",
                  seg->name, comp->ops->name, ote_engine_facts(e)->config.tls);
        return OTE_ERR_UNREACHABLE;
    }
    if (unreached & OTE_MEM_TYPE_CUDA)
        seg->rail_set.num_rails = object_stage_rails_add(seg, n);
    return OTE_OK;
}

/* A name of a component's scheme: the component opens the object. */
static ote_status_t segment_open_object(ote_segment_h seg, const char *name, ote_desc_t **desc_p)
{
    ote_engine_h e = seg->engine;
    ote_tl_component_t *comp = NULL;
    const char *why = NULL;
    const void *cfg = NULL;
    ote_status_t status;

    (void)ote_tl_object_find(name, &comp, &why);
    if (comp == NULL) {
        ote_error("segment '%s': %s", name, why);
        return OTE_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; ote_tl_components[i] != NULL; i++) {
        if (ote_tl_components[i] == comp)
            cfg = ote_engine_facts(e)->tl_configs[i];
    }
    seg->object_ops = comp->ops->objects;
    status = seg->object_ops->open(name, cfg, &seg->file);
    if (status == OTE_OK)
        status = object_desc(seg, desc_p);
    if (status == OTE_OK)
        status = object_rails_build(seg, comp, cfg);
    return status;
}

/* A local object's refresh: its size now bounds the region. */
static ote_status_t segment_resolve_object(ote_segment_h seg, int *restarted_p)
{
    ote_desc_t *d = NULL;
    ote_status_t status;

    pthread_mutex_lock(&seg->refresh_lock);
    status = object_desc(seg, &d);
    if (status == OTE_OK)
        desc_adopt(seg, d);
    pthread_mutex_unlock(&seg->refresh_lock);
    if (status == OTE_OK && restarted_p != NULL)
        *restarted_p = 0;
    return status;
}

static ote_status_t segment_open(ote_engine_h e, const char *name, bool internal,
                                 ote_segment_h *seg_p);

ote_status_t ote_segment_open(ote_engine_h e, const char *name, ote_segment_h *seg_p)
{
    return segment_open(e, name, false, seg_p);
}

ote_status_t ote_segment_open_internal(ote_engine_h e, const char *name, ote_segment_h *seg_p)
{
    return segment_open(e, name, true, seg_p);
}

static ote_status_t segment_open(ote_engine_h e, const char *name, bool internal,
                                 ote_segment_h *seg_p)
{
    ote_segment_h seg;
    ote_desc_t *d = NULL;
    ote_tl_component_t *comp = NULL;
    const char *why;
    bool object;
    ote_status_t status;

    if (e == NULL || name == NULL || seg_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    /*
     * A local object's name is as long as its component allows (a path; one
     * of a component this build lacks is refused as UNSUPPORTED below); a
     * peer's fits a descriptor.
     */
    object = ote_tl_object_find(name, &comp, &why);
    if ((comp != NULL && strlen(name) > comp->ops->objects->name_max) ||
        (!object && strlen(name) > OTE_DESC_NAME_MAX))
        return OTE_ERR_INVALID_PARAM;
    seg = ote_segment_new_bare(e, name, name);
    if (seg == NULL)
        return OTE_ERR_NO_MEMORY;

    if (object) {
        status = segment_open_object(seg, name, &d);
        if (status != OTE_OK)
            goto err;
    } else if (ote_segment_is_export_name(name)) {
        status = ote_segment_open_export(seg, name, &d);
        if (status != OTE_OK)
            goto err;
    } else {
        status = ote_segment_fetch_desc(seg, &d);
        if (status != OTE_OK)
            goto err;
        if (ote_engine_facts(e)->meta != NULL)
            snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%s", d->ctl_addr);
        status = ote_wireup_build(seg, d);
        if (status != OTE_OK)
            goto err;
    }
    atomic_init(&d->refs, 1);
    seg->desc     = d;
    seg->internal = internal;
    pthread_mutex_lock(&ote_segment_table(e)->seg_lock);
    OTE_DLIST_PUSH_FRONT(ote_segment_table(e)->segments, seg);
    pthread_mutex_unlock(&ote_segment_table(e)->seg_lock);
    *seg_p = seg;
    return OTE_OK;

err:
    ote_wireup_destroy(seg, d != NULL, d != NULL ? d->instance_id : 0);
    ote_desc_free(d);
    ote_segment_put(seg);
    return status;
}

ote_status_t ote_segment_open_desc(ote_engine_h e, const void *buf, size_t len,
                                   ote_segment_h *seg_p)
{
    ote_segment_h seg;
    ote_desc_t *d = NULL;
    ote_status_t status;

    if (e == NULL || buf == NULL || seg_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    status = ote_meta_record_open(ote_engine_facts(e)->auth, buf, len, &d);
    if (status != OTE_OK) {
        ote_error("segment from a descriptor of %zu bytes: %s: refused", len,
                  status == OTE_ERR_AUTH ? "its signature does not match OTE_AUTH_KEY"
                                         : ote_status_string(status));
        return status;
    }
    /* A name that would open a file or a peer's export is no engine's. */
    if (d->name[0] == '\0' || ote_segment_is_object_name(d->name) ||
        ote_segment_is_export_name(d->name)) {
        ote_error("segment from a descriptor: it names '%s', no engine's name: refused", d->name);
        ote_desc_free(d);
        return OTE_ERR_PROTOCOL;
    }
    /* Later reads go where a fetch by name would: its listener, or the store. */
    seg = ote_segment_new_bare(e, d->name, d->ctl_addr[0] != '\0' ? d->ctl_addr : d->name);
    if (seg == NULL) {
        ote_desc_free(d);
        return OTE_ERR_NO_MEMORY;
    }
    status = ote_wireup_build(seg, d);
    if (status != OTE_OK) {
        ote_wireup_destroy(seg, true, d->instance_id);
        ote_desc_free(d);
        ote_segment_put(seg);
        return status;
    }
    atomic_init(&d->refs, 1);
    seg->desc = d;
    pthread_mutex_lock(&ote_segment_table(e)->seg_lock);
    OTE_DLIST_PUSH_FRONT(ote_segment_table(e)->segments, seg);
    pthread_mutex_unlock(&ote_segment_table(e)->seg_lock);
    *seg_p = seg;
    return OTE_OK;
}

ote_status_t ote_segment_close(ote_segment_h seg)
{
    ote_engine_h e;

    if (seg == NULL)
        return OTE_ERR_INVALID_PARAM;
    e = seg->engine;
    if (atomic_exchange(&seg->closed, true))
        return OTE_ERR_INVALID_PARAM;
    pthread_mutex_lock(&ote_segment_table(e)->seg_lock);
    OTE_DLIST_REMOVE(ote_segment_table(e)->segments, seg);
    pthread_mutex_unlock(&ote_segment_table(e)->seg_lock);
    /*
     * Operations still posted end CANCELED as their eps go. Under both
     * locks: a refresh, reopen or repair another thread runs has ended (its
     * eps are installed, and go too), and those after see the segment
     * closed.
     */
    pthread_mutex_lock(&seg->fetch_lock);
    pthread_mutex_lock(&seg->refresh_lock);
    ote_wireup_destroy(seg, true, seg->desc->instance_id);
    pthread_mutex_unlock(&seg->refresh_lock);
    pthread_mutex_unlock(&seg->fetch_lock);
    /* Slices still waiting for a rail end CANCELED too. */
    ote_segment_backlog_end(seg);
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
    /* In the peer's order (the descriptor's, its registration order); the
     * decoded regions are sorted by address, each knowing its place. */
    for (size_t i = 0; i < seg->desc->num_regions; i++) {
        const ote_desc_region_t *r = &seg->desc->regions[i];
        ote_region_info_t *out;

        if (r->order >= max)
            continue;
        out         = &regions[r->order];
        out->addr   = r->addr;
        out->length = r->length;
        out->access = r->access;
        snprintf(out->location, sizeof(out->location), "%s", r->location ? r->location : "");
    }
    pthread_mutex_unlock(&seg->lock);
    return OTE_OK;
}

/*
 * Fetch the descriptor of whatever instance serves the name now. With
 * rebind, a new instance replaces the old one (rails rebuilt) and
 * *restarted_p says so; without, a new instance leaves the segment bound to
 * the old one, marked stale. Fetches are one at a time (fetch_lock): a
 * caller that waited for another's fetch uses its result when that fetch
 * began after the call. The rails change under refresh_lock as well, taken
 * once the peer answered.
 */
static ote_status_t segment_resolve(ote_segment_h seg, bool rebind, int *restarted_p)
{
    uint64_t called = atomic_load(&seg->fetch_started);
    uint64_t fetch;
    ote_desc_t *d = NULL;
    ote_status_t status;
    bool restarted;

    if (seg->file != NULL)
        return segment_resolve_object(seg, restarted_p);
    pthread_mutex_lock(&seg->fetch_lock);
    if (atomic_load(&seg->closed)) {
        /* Closed meanwhile (a submit's re-read): no rail is built again. */
        pthread_mutex_unlock(&seg->fetch_lock);
        return OTE_ERR_CANCELED;
    }
    if (seg->export_name[0] != '\0') {
        /* An exported file's: its fetch and its rails in one step. */
        pthread_mutex_lock(&seg->refresh_lock);
        status = ote_segment_resolve_export(seg, rebind, &d, restarted_p);
        if (status == OTE_OK) {
            desc_adopt(seg, d);
            atomic_store(&seg->stale, false);
        }
        goto out;
    }
    /*
     * A refresh that ran while this one waited for the lock and whose fetch
     * started after this one was called read what the peer had registered
     * by then: its result is ours. One whose fetch started earlier may have
     * missed a region the caller knows of (a submit's re-read): fetch again.
     */
    if (!rebind && seg->fetch_adopted > called) {
        pthread_mutex_unlock(&seg->fetch_lock);
        return atomic_load(&seg->stale) ? OTE_ERR_PEER_RESTARTED : OTE_OK;
    }
    fetch  = atomic_fetch_add(&seg->fetch_started, 1) + 1;
    status = ote_segment_fetch_desc(seg, &d);
    if (status != OTE_OK) {
        pthread_mutex_unlock(&seg->fetch_lock);
        return status;
    }
    atomic_init(&d->refs, 1);
    pthread_mutex_lock(&seg->refresh_lock);
    if (atomic_load(&seg->closed)) {
        ote_segment_desc_put(d);
        status = OTE_ERR_CANCELED;
        goto out;
    }
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
        status = ote_wireup_repair(seg, d, true);
        if (status == OTE_ERR_PEER_RESTARTED) {
            /* Its name answered with this instance, a transport with another one. */
            ote_segment_mark_stale(seg);
            ote_segment_desc_put(d);
            goto out;
        }
        /* Devices that joined since the rails were built, here or at the peer. */
        ote_wireup_extend(seg, d);
    }
    if (restarted) {
        /* Never reuse connections to the old instance; it took its side of them along. */
        ote_info("segment '%s': bound to the restarted peer's new instance %016llx", seg->name,
                 (unsigned long long)d->instance_id);
        /* A restart no call on the old handle had seen yet is counted here. */
        if (!atomic_exchange(&seg->stale, true))
            ote_obs_peer_restart(ote_engine_facts(seg->engine)->obs);
        ote_wireup_destroy(seg, false, 0);
        if (ote_engine_facts(seg->engine)->meta != NULL) {
            /* The new instance's listener; the old one's connection is of no use. */
            ote_segment_ctl_rebind(seg, d->ctl_addr);
        }
        status = ote_wireup_build(seg, d);
        /* Slices of the old instance still waiting for a rail end CANCELED. */
        ote_segment_backlog_end(seg);
        if (status != OTE_OK) {
            ote_segment_desc_put(d);
            goto out;
        }
    }
    desc_adopt(seg, d);
    seg->fetch_adopted = fetch;
    if (restarted || status == OTE_OK)
        atomic_store(&seg->stale, false);
    if (restarted_p != NULL)
        *restarted_p = restarted;
out:
    pthread_mutex_unlock(&seg->refresh_lock);
    pthread_mutex_unlock(&seg->fetch_lock);
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

/*
 * A rail paused after a failure whose ep failed for good (UCT's eps stay
 * failed), due for its probe, or any such rail when no rail may carry
 * (force). Only paused rails are looked at: an ep that failed fails the
 * slice posted on it first, and that pauses its rail.
 */
static bool rail_dead_for_good(ote_segment_h seg, ote_rail_t *r, bool force, uint64_t now)
{
    ote_worker_t *w = &ote_engine_facts(seg->engine)->workers[r->worker];
    bool alive;

    if (r->ep == NULL || r->iface->ep_ops->needs_reconnect(r->ep) ||
        ote_engine_iface_gone(seg->engine, r->iface) || !ote_proto_rail_cooling(r) ||
        (!force && !ote_proto_rail_probe_due(r, now)))
        return false;
    ote_worker_lock_out(w);
    alive = r->ep == NULL || r->iface->ep_ops->is_alive(r->ep);
    pthread_mutex_unlock(&w->lock);
    return !alive;
}

/*
 * Nothing for repair to do (refresh lock held): every rail with an ep has
 * all its connections and has not been paused since it was last seen out
 * of its cool-down. Only atomics are read: no clock, no rail lock. What
 * is not calm is looked at as before. A closed segment's eps are being
 * destroyed (ote_segment_close): not looked at.
 */
static bool rails_calm(ote_segment_h seg)
{
    if (atomic_load(&seg->closed))
        return true;
    for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
        ote_rail_t *r = seg->rail_set.rails[i];
        ote_tl_ep_t *ep = r->ep;

        if (ep != NULL && (!ote_proto_rail_calm(r) || r->iface->ep_ops->needs_reconnect(ep)))
            return false;
    }
    return true;
}

ote_status_t ote_segment_repair(ote_segment_h seg)
{
    ote_status_t status = OTE_OK;
    uint64_t now;
    bool needed = false, rebuild = false, force;

    pthread_mutex_lock(&seg->refresh_lock);
    if (rails_calm(seg)) {
        pthread_mutex_unlock(&seg->refresh_lock);
        return OTE_OK;
    }
    now = ote_time_ns();
    if (!atomic_load(&seg->closed) && !atomic_load(&seg->stale)) {
        /*
         * A rail cooling down after errors is probed once its cool-down
         * ended, so that a link that stays down costs one connect per
         * cool-down, not one per submit; with no rail left, at once.
         */
        force = !ote_proto_rails_usable(&seg->rail_set, now);
        for (size_t i = 0; i < seg->rail_set.num_rails && !needed; i++) {
            ote_rail_t *r = seg->rail_set.rails[i];

            needed = r->ep != NULL && r->iface->ep_ops->needs_reconnect(r->ep) &&
                     (force || ote_proto_rail_probe_due(r, now));
            rebuild = rebuild || rail_dead_for_good(seg, r, force, now);
        }
        if (needed) {
            ote_desc_t *d = ote_segment_desc_get(seg);

            status = ote_wireup_probe(seg, d, force);
            ote_segment_desc_put(d);
        }
    }
    pthread_mutex_unlock(&seg->refresh_lock);
    if (status == OTE_OK && rebuild) {
        /*
         * An ep that cannot be made again in place: the name is asked who
         * serves it now (a restart is seen here, as the native transports'
         * reconnect sees it), and the same instance gets new eps.
         */
        status = segment_resolve(seg, false, NULL);
        if (status == OTE_ERR_REMOTE_DISCONNECT)
            status = segment_resolve(seg, false, NULL);
        if (status != OTE_OK && status != OTE_ERR_PEER_RESTARTED)
            ote_debug("segment '%s': its failed rails were not made again: %s", seg->name,
                      ote_status_string(status));
        return status;
    }
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

void ote_segments_link(ote_engine_h e, const char *dev, bool up)
{
    uint64_t now = ote_time_ns();
    size_t n     = 0;

    pthread_mutex_lock(&ote_segment_table(e)->seg_lock);
    for (ote_segment_h seg = ote_segment_table(e)->segments; seg != NULL; seg = seg->next) {
        pthread_mutex_lock(&seg->lock);
        for (size_t i = 0; i < seg->rail_set.num_rails; i++) {
            ote_rail_t *r = seg->rail_set.rails[i];

            /* A transport gone from the device stays paused (engine_join.c). */
            if (r->iface != NULL && strcmp(r->iface->resource.dev_name, dev) == 0 &&
                !(up && ote_engine_iface_gone(e, r->iface))) {
                ote_proto_rail_link(r, up, now);
                n++;
            }
        }
        pthread_mutex_unlock(&seg->lock);
    }
    pthread_mutex_unlock(&ote_segment_table(e)->seg_lock);
    ote_debug("device %s: %s: %zu rail(s) %s", dev, up ? "up" : "down", n,
              up ? "resumed" : "paused");
}
