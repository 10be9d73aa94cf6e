/*
 * Admission: the engine's limits on tasks and bytes in flight
 * (OTE_MAX_INFLIGHT_TASKS, OTE_MAX_INFLIGHT_BYTES, OTE_SUBMIT_TIMEOUT_MS).
 */
#include "base/util.h"
#include "admission.h"
#include "core/engine_facts.h"

#include <time.h>

/*
 * Admission. Tasks and bytes in flight are reserved with compare-and-swap,
 * so a reservation never overshoots a limit, not even for a moment, and a
 * refused one leaves the counters as they were. A submission larger than a
 * limit by itself goes through only when the engine has nothing of that
 * kind in flight: otherwise it could never be admitted.
 */
static bool admission_try(ote_engine_h e, size_t tasks, size_t bytes)
{
    long max_tasks   = ote_engine_facts(e)->config.max_inflight_tasks;
    size_t max_bytes = ote_engine_facts(e)->config.max_inflight_bytes;
    long cur_t       = atomic_load(&ote_xfer_state(e)->inflight_tasks);
    size_t cur_b;

    do {
        if (cur_t > 0 && ((long)tasks > max_tasks || cur_t > max_tasks - (long)tasks))
            return false;
    } while (!atomic_compare_exchange_weak(&ote_xfer_state(e)->inflight_tasks, &cur_t,
                                           cur_t + (long)tasks));
    cur_b = atomic_load(&ote_xfer_state(e)->inflight_bytes);
    do {
        if (cur_b > 0 && (bytes > max_bytes || cur_b > max_bytes - bytes)) {
            /* Through release: a submitter refused meanwhile is woken up. */
            ote_admission_release(e, tasks, 0);
            return false;
        }
    } while (
        !atomic_compare_exchange_weak(&ote_xfer_state(e)->inflight_bytes, &cur_b, cur_b + bytes));
    return true;
}

/* Give back what admission_try reserved; wakes submitters waiting for room. */
void ote_admission_release(ote_engine_h e, size_t tasks, size_t bytes)
{
    atomic_fetch_sub(&ote_xfer_state(e)->inflight_bytes, bytes);
    atomic_fetch_sub(&ote_xfer_state(e)->inflight_tasks, (long)tasks);
    if (atomic_load(&ote_xfer_state(e)->admit_waiters) > 0) {
        pthread_mutex_lock(&ote_xfer_state(e)->admit_lock);
        pthread_cond_broadcast(&ote_xfer_state(e)->admit_cond);
        pthread_mutex_unlock(&ote_xfer_state(e)->admit_lock);
    }
}

/*
 * Reserve room for tasks and bytes, or BUSY with nothing taken. With
 * OTE_SUBMIT_TIMEOUT_MS the caller sleeps until a task ends and frees room,
 * at most that long. Holds no batch lock while waiting.
 */
ote_status_t ote_admission_reserve(ote_engine_h e, size_t tasks, size_t bytes)
{
    uint64_t deadline;
    bool ok;

    if (admission_try(e, tasks, bytes))
        return OTE_OK;
    if (ote_engine_facts(e)->config.submit_timeout_ms <= 0)
        return OTE_ERR_BUSY;
    deadline = ote_time_ns() + (uint64_t)ote_engine_facts(e)->config.submit_timeout_ms * 1000000ull;
    /* Counted before the retry: a task ending after it sees the waiter. */
    atomic_fetch_add(&ote_xfer_state(e)->admit_waiters, 1);
    pthread_mutex_lock(&ote_xfer_state(e)->admit_lock);
    for (;;) {
        uint64_t now = ote_time_ns();
        struct timespec ts;

        ok = admission_try(e, tasks, bytes);
        if (ok || now >= deadline)
            break;
        ts.tv_sec  = (time_t)(deadline / 1000000000ull);
        ts.tv_nsec = (long)(deadline % 1000000000ull);
        pthread_cond_timedwait(&ote_xfer_state(e)->admit_cond, &ote_xfer_state(e)->admit_lock, &ts);
    }
    pthread_mutex_unlock(&ote_xfer_state(e)->admit_lock);
    atomic_fetch_sub(&ote_xfer_state(e)->admit_waiters, 1);
    return ok ? OTE_OK : OTE_ERR_BUSY;
}
