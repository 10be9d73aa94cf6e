/* The eps of rails whose slices are control exchanges (see ctl_ep.h). */
#include "ctl_ep.h"

#include <stdlib.h>

size_t ote_proto_ctl_ep_inflight_bytes(ote_tl_ep_t *tl_ep)
{
    (void)tl_ep;
    return 0;
}

bool ote_proto_ctl_ep_is_alive(ote_tl_ep_t *tl_ep)
{
    (void)tl_ep;
    return true;
}

ote_proto_ctl_iface_t *ote_proto_ctl_iface_new(void)
{
    ote_proto_ctl_iface_t *i = calloc(1, sizeof(*i));

    if (i != NULL)
        atomic_init(&i->refs, 1);
    return i;
}

void ote_proto_ctl_iface_get(ote_proto_ctl_iface_t *i)
{
    atomic_fetch_add(&i->refs, 1);
}

void ote_proto_ctl_iface_put(ote_proto_ctl_iface_t *i)
{
    if (i != NULL && atomic_fetch_sub(&i->refs, 1) == 1)
        free(i);
}

void ote_proto_ctl_ep_destroy(ote_tl_ep_t *tl_ep)
{
    ote_proto_ctl_iface_t *i = (ote_proto_ctl_iface_t *)tl_ep->iface;

    free(tl_ep);
    ote_proto_ctl_iface_put(i);
}

ote_status_t ote_proto_ctl_ep_submit(const ote_proto_ctl_hooks_t *hooks, ote_proto_job_t *job)
{
    ote_status_t status;

    if (hooks->iface_ref != NULL)
        ote_proto_ctl_iface_get(hooks->iface_ref);
    status = ote_proto_jobs_submit(hooks->jobs, job);
    if (status != OTE_OK) {
        ote_proto_ctl_iface_put(hooks->iface_ref);
        free(job);
        return status;
    }
    return OTE_INPROGRESS;
}

void ote_proto_ctl_ep_complete(const ote_proto_ctl_hooks_t *hooks, ote_tl_completion_t *comp,
                               ote_status_t status)
{
    ote_proto_ctl_iface_t *i = hooks->iface_ref; /* hooks may go with the slice's end */

    pthread_mutex_lock(hooks->worker_lock);
    comp->func(comp, status);
    pthread_mutex_unlock(hooks->worker_lock);
    ote_proto_ctl_iface_put(i);
}
