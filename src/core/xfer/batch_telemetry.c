/*
 * Per-batch telemetry (ote_batch_telemetry), the figures NIXL gives for a
 * transfer: when the batch was first submitted to, how long its submit
 * calls took, how long from then to the end of its last task, its bytes and
 * requests. Kept in the batch by the submit path and task_finalize
 * (obs/counters.c), read here without a lock.
 */
#include "xfer_def.h"

ote_status_t ote_batch_telemetry(ote_batch_h b, ote_batch_telemetry_t *t)
{
    const ote_obs_batch_t *tel;
    uint64_t start, end;

    if (b == NULL || t == NULL || t->version < 1)
        return OTE_ERR_INVALID_PARAM;
    tel   = &b->tel;
    start = atomic_load(&tel->start_ns);
    /* Ended first (release in ote_obs_task_end): the bytes and end it read are theirs. */
    t->ended       = atomic_load_explicit(&tel->ended, memory_order_acquire);
    t->completed   = atomic_load(&tel->completed);
    t->bytes       = atomic_load(&tel->bytes);
    end            = atomic_load(&tel->end_ns);
    t->requests    = atomic_load(&tel->requests);
    t->start_us    = start != 0 ? atomic_load(&tel->start_real_us) : 0;
    t->post_ns     = atomic_load(&tel->post_ns);
    t->xfer_ns     = (start != 0 && end > start) ? end - start : 0;
    t->version     = 1;
    return OTE_OK;
}
