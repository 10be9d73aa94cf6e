/*
 * Re-reading a peer's descriptor for a remote range it lacks. The peer may
 * have registered the region after the segment was opened: the first
 * request into it makes the engine read the descriptor again, whatever the
 * request's size and the transport. Reads are single-flight per segment
 * (submitters that miss while one is in flight wait for the next one and
 * share it) and rate-limited (one starts at most every
 * OTE_DESC_REREAD_INTERVAL_MS), so that a stream of requests to addresses
 * the peer never registered costs the peer at most one descriptor fetch
 * per interval, never one per request.
 *
 * A caller takes a ticket (the count of re-reads started) before it looks
 * the range up; a re-read numbered above the ticket started after that
 * look-up, so a region registered before the request was submitted is in
 * what it reads.
 *
 * A re-read is a refresh (segment.c), so this file stands above the
 * segment's life and nothing of the room calls it; the state it keeps in
 * the segment is set up and torn down with the segment (segment_ref.c).
 */
#include "base/log.h"
#include "base/util.h"
#include "core/engine_facts.h"
#include "segment_reread.h"

#include <time.h>

uint64_t ote_segment_reread_ticket(ote_segment_h seg)
{
    /* One counter, only ever raised: its value now, without the lock. */
    return atomic_load_explicit(&seg->reread_started, memory_order_acquire);
}

/* Wait on the segment's condition (reread_lock held) until woken or until (monotonic). */
static void reread_wait(ote_segment_h seg, uint64_t until)
{
    struct timespec ts = {.tv_sec  = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};

    (void)pthread_cond_timedwait(&seg->reread_cond, &seg->reread_lock, &ts);
}

/* The re-read itself (reread_lock not held): OK when it adopted a descriptor. */
static ote_status_t reread_run(ote_segment_h seg)
{
    unsigned gen = atomic_load(&seg->desc_gen);
    ote_status_t status;

    ote_debug("segment '%s': a remote range is in no region of its descriptor: reading it "
              "again", seg->name);
    status = ote_segment_refresh(seg);
    /*
     * A refresh that adopted the descriptor but could not make a failed
     * connection again still read what the peer registers: the look-up
     * may go on; the connection's error shows on the transfer.
     */
    if (status != OTE_OK && status != OTE_ERR_PEER_RESTARTED &&
        atomic_load(&seg->desc_gen) != gen)
        status = OTE_OK;
    if (status != OTE_OK)
        ote_debug("segment '%s': reading its descriptor again: %s", seg->name,
                  ote_status_string(status));
    return status;
}

ote_status_t ote_segment_reread(ote_segment_h seg, uint64_t ticket)
{
    const ote_engine_config_t *cfg = &ote_engine_facts(seg->engine)->config;
    uint64_t interval_ns = (uint64_t)cfg->desc_reread_interval_ms * 1000000ull;
    uint64_t deadline    = ote_time_ns() + interval_ns +
                        2 * (uint64_t)cfg->connect_timeout_ms * 1000000ull;
    ote_status_t status;

    pthread_mutex_lock(&seg->reread_lock);
    for (;;) {
        uint64_t now = ote_time_ns(), until;

        if (seg->reread_ended > ticket) {
            /* One that started after the caller's look-up ended: its result is ours. */
            status = seg->reread_status;
            break;
        }
        if (!seg->reread_busy &&
            (seg->reread_last_ns == 0 || now - seg->reread_last_ns >= interval_ns)) {
            seg->reread_busy    = true;
            seg->reread_last_ns = now;
            atomic_store_explicit(&seg->reread_started,
                                  atomic_load_explicit(&seg->reread_started,
                                                       memory_order_relaxed) + 1,
                                  memory_order_release);
            pthread_mutex_unlock(&seg->reread_lock);
            status = reread_run(seg);
            pthread_mutex_lock(&seg->reread_lock);
            seg->reread_busy   = false;
            seg->reread_status = status;
            seg->reread_ended  = atomic_load_explicit(&seg->reread_started,
                                                      memory_order_relaxed);
            pthread_cond_broadcast(&seg->reread_cond);
            break;
        }
        if (now >= deadline) {
            status = OTE_ERR_TIMEOUT;
            break;
        }
        /*
         * One in flight: its end (then, if it started before the caller
         * looked, the next one). None: the last one is too recent, wait for
         * the interval to end.
         */
        until = seg->reread_busy ? deadline : seg->reread_last_ns + interval_ns;
        reread_wait(seg, until < deadline ? until : deadline);
    }
    pthread_mutex_unlock(&seg->reread_lock);
    if (status == OTE_ERR_TIMEOUT)
        ote_warn("segment '%s': no re-read of its descriptor ended within %ld ms "
                 "(OTE_DESC_REREAD_INTERVAL_MS plus twice OTE_CONNECT_TIMEOUT_MS)",
                 seg->name, cfg->desc_reread_interval_ms + 2 * cfg->connect_timeout_ms);
    return status;
}
