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

void ote_proto_ctl_ep_destroy(ote_tl_ep_t *tl_ep)
{
    free(tl_ep);
}

ote_status_t ote_proto_ctl_ep_submit(const ote_proto_ctl_hooks_t *hooks, ote_proto_job_t *job)
{
    ote_status_t status = ote_proto_jobs_submit(hooks->jobs, job);

    if (status != OTE_OK) {
        free(job);
        return status;
    }
    return OTE_INPROGRESS;
}

void ote_proto_ctl_ep_complete(const ote_proto_ctl_hooks_t *hooks, ote_tl_completion_t *comp,
                               ote_status_t status)
{
    pthread_mutex_lock(hooks->worker_lock);
    comp->func(comp, status);
    pthread_mutex_unlock(hooks->worker_lock);
}
