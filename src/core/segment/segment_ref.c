/*
 * A segment as an object, below the rest of segment/: made bare (its
 * name, its control address, its locks and the state of its re-reads,
 * segment_reread.c), counted (the application's handle, one reference per
 * live task) and freed with its last reference; its descriptor's
 * references; its stale mark; whether a name opens a component's object.
 * The one file of the room it calls is the control client
 * (segment_ctl.c): the pool a freed segment closes, and the request of a
 * holder probe, which asks through a throwaway segment made here.
 */
#include "base/log.h"
#include "base/util.h"
#include "core/engine_facts.h"
#include "core/obs/obs.h"
#include "core/wire/ctl_msg.h"
#include "range_index.h"
#include "segment_ctl.h"
#include "segment_ref.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A segment's re-reads (segment_reread.c): none yet, none in flight. */
static void reread_state_init(ote_segment_h seg)
{
    pthread_mutex_init(&seg->reread_lock, NULL);
    ote_cond_init_monotonic(&seg->reread_cond);
    seg->reread_busy    = false;
    atomic_init(&seg->reread_started, 0);
    seg->reread_ended   = 0;
    seg->reread_last_ns = 0;
    seg->reread_status  = OTE_OK;
}

static void reread_state_fini(ote_segment_h seg)
{
    pthread_cond_destroy(&seg->reread_cond);
    pthread_mutex_destroy(&seg->reread_lock);
}

ote_segment_h ote_segment_new_bare(ote_engine_h e, const char *name, const char *ctl_addr)
{
    ote_segment_h seg = calloc(1, sizeof(*seg));

    if (seg == NULL)
        return NULL;
    seg->engine = e;
    seg->ctl_fd = -1;
    /* A long file path is cut in the name logs show; the file keeps it whole. */
    snprintf(seg->name, sizeof(seg->name), "%.*s", (int)sizeof(seg->name) - 1, name);
    snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%.*s", (int)sizeof(seg->ctl_addr) - 1,
             ctl_addr);
    pthread_mutex_init(&seg->lock, NULL);
    pthread_mutex_init(&seg->fetch_lock, NULL);
    pthread_mutex_init(&seg->refresh_lock, NULL);
    pthread_mutex_init(&seg->spray_lock, NULL);
    pthread_mutex_init(&seg->ctl_pool_lock, NULL);
    pthread_mutex_init(&seg->ctl_lock, NULL);
    reread_state_init(seg);
    atomic_init(&seg->refs, 1);
    return seg;
}

void ote_segment_get(ote_segment_h seg)
{
    atomic_fetch_add(&seg->refs, 1);
}

void ote_segment_get_many(ote_segment_h seg, size_t n)
{
    atomic_fetch_add(&seg->refs, (long)n);
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
    if (!atomic_exchange(&seg->stale, true)) {
        ote_obs_peer_restart(ote_engine_facts(seg->engine)->obs);
        ote_info("segment '%s': the peer restarted; calls on this segment fail until "
                 "ote_segment_reopen()", seg->name);
    }
}

static void segment_free(ote_segment_h seg)
{
    if (seg->file != NULL)
        seg->object_ops->put(seg->file);
    ote_fd_close(seg->ctl_fd);
    ote_segment_ctl_pool_drain(seg);
    pthread_mutex_destroy(&seg->ctl_pool_lock);
    pthread_mutex_destroy(&seg->ctl_lock);
    ote_segment_desc_put(seg->desc);
    ote_range_index_free(seg->range_index);
    pthread_mutex_destroy(&seg->lock);
    pthread_mutex_destroy(&seg->fetch_lock);
    pthread_mutex_destroy(&seg->refresh_lock);
    pthread_mutex_destroy(&seg->spray_lock);
    reread_state_fini(seg);
    free(seg);
}

void ote_segment_put(ote_segment_h seg)
{
    if (atomic_fetch_sub(&seg->refs, 1) == 1)
        segment_free(seg);
}

bool ote_segment_is_object_name(const char *name)
{
    ote_tl_component_t *comp;
    const char *why;

    return ote_tl_object_find(name, &comp, &why);
}

ote_status_t ote_segment_probe_holder(ote_engine_h e, const ote_desc_t *holder, long probe_ms)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    ote_segment_h seg;
    ote_desc_t *d = NULL;
    uint8_t *resp = NULL;
    size_t len    = 0;
    ote_status_t status, remote;

    /* Only an address that parses: a name that does not resolve proves nothing. */
    if (ote_sockaddr_resolve(holder->ctl_addr, probe_ms, &ss, &sslen) != OTE_OK ||
        ote_sockaddr_port((struct sockaddr *)&ss) == 0)
        return OTE_ERR_INVALID_PARAM;
    seg = ote_segment_new_bare(e, holder->name, holder->ctl_addr);
    if (seg == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_segment_ctl_request_alone(seg, OTE_CTL_GET_DESC, NULL, 0, OTE_CTL_DESC, probe_ms,
                                           &resp, &len);
    ote_segment_put(seg);
    /*
     * Refused proves nothing listens there; no route from here (this host's
     * own routes, an unreachable report from a router) says nothing of the
     * holder: checked again with a connect whose errno is seen.
     */
    if (status == OTE_ERR_NOT_FOUND && !ote_socket_refuses(&ss, sslen, (int)probe_ms)) {
        ote_debug("metadata: '%s' instance %016llx at %s: not reachable from here; whether it "
                  "still serves the name is unknown",
                  holder->name, (unsigned long long)holder->instance_id, holder->ctl_addr);
        return OTE_ERR_IO;
    }
    if (status == OTE_ERR_NOT_FOUND || status == OTE_ERR_TIMEOUT) {
        ote_debug("metadata: '%s' instance %016llx at %s: %s", holder->name,
                  (unsigned long long)holder->instance_id, holder->ctl_addr,
                  status == OTE_ERR_TIMEOUT ? "no answer in time" : "connection refused");
        return OTE_ERR_NOT_FOUND;
    }
    if (status != OTE_OK)
        return status;
    if (len < 4 || ote_ctl_status_decode(resp, 4, &remote) != OTE_OK)
        status = OTE_ERR_PROTOCOL;
    else if (remote != OTE_OK)
        status = remote == OTE_ERR_NOT_FOUND ? OTE_ERR_PROTOCOL : remote;
    else
        status = ote_desc_decode(resp + 4, len - 4, &d);
    free(resp);
    if (status != OTE_OK)
        return status;
    /* Whoever listens there now: the holder itself, or another engine (a restart, us). */
    status = d->instance_id == holder->instance_id && strcmp(d->name, holder->name) == 0
                 ? OTE_OK
                 : OTE_ERR_NOT_FOUND;
    ote_debug("metadata: '%s' instance %016llx at %s: answered by '%s' instance %016llx",
              holder->name, (unsigned long long)holder->instance_id, holder->ctl_addr, d->name,
              (unsigned long long)d->instance_id);
    ote_desc_free(d);
    return status;
}
