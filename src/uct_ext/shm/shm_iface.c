/*
 * Native shm component: resource and iface (the stream base's local mode,
 * as cma's, with descriptor passing).
 */
#include "shm_int.h"

#include "base/config.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

shm_conn_t *ote_shm_conn(ote_stream_conn_t *c)
{
    if (c->ext == NULL && !c->dead)
        c->ext = calloc(1, sizeof(shm_conn_t));
    return c->ext;
}

static void shm_conn_closed(ote_stream_conn_t *c)
{
    shm_conn_t *sc = c->ext;

    if (sc == NULL)
        return;
    if (c->ep != NULL)
        ote_shm_initiator_closed(c, sc);
    else
        ote_shm_target_closed(c, sc);
    free(sc);
    c->ext = NULL;
}

static void shm_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    ote_stream_local_iface_query(tl_iface, caps);
    caps->ops |= OTE_TL_CAP_MAPPED;
    caps->bandwidth = 12e9; /* one memcpy */
    caps->latency   = 1e-6;
}

/*
 * Closing closes its connections first, which ends their grants and wakes
 * deregistrations waiting for them (the condition needs no destroy on
 * Linux, and a waiter may still be leaving it).
 */
static unsigned shm_iface_progress(ote_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;
    unsigned n         = ote_shm_copy_flush(&iface->copier);

    return n + ote_stream_local_iface_progress(tl_iface);
}

/* Copies still queued keep the worker awake (a completion may have posted more). */
static ote_status_t shm_iface_event_arm(ote_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;

    if (iface->copier.njobs > 0)
        return OTE_ERR_BUSY;
    return ote_stream_local_iface_event_arm(tl_iface);
}

static void shm_iface_close(ote_tl_iface_t *tl_iface)
{
    shm_iface_t *iface = (shm_iface_t *)tl_iface;

    ote_shm_copy_flush(&iface->copier);
    ote_shm_copier_cleanup(&iface->copier);
    ote_stream_local_iface_close(tl_iface);
}

static const ote_tl_iface_ops_t shm_iface_ops =
    OTE_STREAM_LOCAL_IFACE_OPS_INIT(shm_iface_query, shm_iface_progress, shm_iface_event_arm,
                                    shm_iface_close);

/* OTE_SHM_*: its own, and the local mode's it shares with cma (COPY_THREADS, STREAM_*). */
typedef struct {
    ote_stream_local_config_t local; /* first: where ote_stream_local_iface_open reads it */
    long                      unmap_timeout_ms;
} shm_config_t;

_Static_assert(offsetof(shm_config_t, local) == 0, "the local mode's settings come first");

#define SHM_F(_f) offsetof(shm_config_t, _f)

static const ote_cfg_entry_t shm_config_fields[] = {
    {"UNMAP_TIMEOUT_MS", "1000", OTE_CFG_INT, SHM_F(unmap_timeout_ms),
     "Deregistering memory a same-host peer mapped (shm) waits this long for the peer to "
     "unmap it; then its connection is closed and the call returns.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    /* OTE_CMA_COPY_THREADS set cma's and shm's before shm had its own. */
    OTE_STREAM_LOCAL_CONFIG_ENTRIES(SHM_F(local), "CMA_COPY_THREADS"),
};

OTE_CONFIG_TABLE_DEFINE(ote_shm_config_table, "SHM_", "shm", shm_config_fields, shm_config_t,
                        NULL);

/*
 * cma's hooks (the local mode of stream/stream_local.h), but MAP and UNMAP_ACK go
 * to shm's target and posts through its mappings.
 */
static const ote_stream_hooks_t shm_hooks = {
    OTE_STREAM_LOCAL_HOOKS(ote_shm_target_handle),
    .fd_passing     = true,
    .initiator_hook = ote_shm_initiator_hook,
    .conn_closed    = shm_conn_closed,
    .post           = ote_shm_post,
};

static ote_status_t shm_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                   const ote_tl_iface_params_t *params,
                                   ote_tl_iface_t **iface_p)
{
    ote_stream_local_iface_t *local;
    shm_iface_t *iface;
    pthread_condattr_t attr;
    shm_config_t cfg;
    ote_status_t status;

    status = ote_stream_local_iface_open(&cfg, sizeof(*iface), res, params, &shm_hooks,
                                         &shm_iface_ops, &local);
    if (status != OTE_OK)
        return status;
    iface = (shm_iface_t *)local;
    /* Deadlines are on the monotonic clock (ote_time_ns). */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&iface->cond, &attr);
    pthread_condattr_destroy(&attr);
    iface->unmap_timeout_ns = (uint64_t)cfg.unmap_timeout_ms * 1000000ull;
    iface->copier.par       = iface->local.par;
    *iface_p                = &local->stream.super;
    return OTE_OK;
}

/* Ranges outside mapped memory go by reference: it needs what cma needs. */
OTE_TL_COMPONENT_DEFINE(ote_shm_component, "shm", &ote_shm_config_table, ote_stream_local_query_resources,
                        ote_tl_unsupported_md_open, ote_tl_no_md_close, shm_iface_open,
                        ote_tl_no_reason);
