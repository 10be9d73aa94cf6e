/*
 * A submission's checks before any task is prepared: the arguments alone
 * (ote_batch_submit_validate), then what the peer's descriptor says of
 * each remote range (ote_batch_peer_checks): in a region, after one
 * re-read of the descriptor when it is not (segment_reread.c), and with
 * the access where the transport does not check at the target.
 */
#include "base/log.h"
#include "batch_check.h"
#include "core/engine_facts.h"
#include "core/segment/range_index.h"
#include "core/segment/segment.h"
#include "core/segment/segment_reread.h"

ote_status_t ote_batch_submit_validate(const ote_xfer_req_t *reqs, size_t count,
                                       const void *msg, size_t msg_len, size_t *bytes_p)
{
    size_t bytes = 0;

    if (reqs == NULL || count == 0)
        return OTE_ERR_INVALID_PARAM;
    for (size_t i = 0; i < count; i++) {
        const ote_xfer_req_t *r = &reqs[i];

        if (r->segment == NULL || r->length == 0 || r->local_addr == NULL ||
            (r->op != OTE_OP_READ && r->op != OTE_OP_WRITE) ||
            r->remote_addr + r->length < r->remote_addr || bytes + r->length < bytes)
            return OTE_ERR_INVALID_PARAM;
        bytes += r->length;
        /* A notification goes to one peer: every request must target it. */
        if (msg != NULL && r->segment != reqs[0].segment)
            return OTE_ERR_INVALID_PARAM;
    }
    if (msg != NULL && msg_len > OTE_NOTIFY_MAX)
        return OTE_ERR_INVALID_PARAM;
    if (msg != NULL && reqs[0].segment->file != NULL) {
        ote_error("segment '%s': a file segment has no peer to notify; nothing submitted",
                  reqs[0].segment->name);
        return OTE_ERR_UNSUPPORTED;
    }
    *bytes_p = bytes;
    return OTE_OK;
}

/*
 * What the descriptor says of request r (seg->lock held): OK, or the status
 * it is refused with. unchecked: the transport does not check at the
 * target, so a region without the access refuses it here too; else the
 * target checks the access. last: the peer's region that covered the
 * previous request of the run with its access, a shortcut for the next
 * (its range and access kept with it: its entry is not read again).
 */
static ote_status_t range_verdict(const ote_desc_t *d, const ote_range_index_t *idx,
                                  const ote_xfer_req_t *r, bool putback, bool unchecked,
                                  ote_range_hit_t *last, const ote_desc_region_t **found)
{
    /* A PUTBACK's destination: the peer named it in its request; registered is enough. */
    unsigned access = putback                ? 0
                      : r->op == OTE_OP_WRITE ? OTE_ACCESS_REMOTE_WRITE
                                              : OTE_ACCESS_REMOTE_READ;
    uint64_t length = last->end - last->start;
    ote_status_t status;

    *found = NULL;
    if (d == NULL)
        return OTE_ERR_NOT_REGISTERED;
    if (last->reg != NULL && r->remote_addr >= last->start && r->length <= length &&
        r->remote_addr - last->start <= length - r->length && (last->access & access) == access) {
        *found = last->reg;
        return OTE_OK;
    }
    status = ote_range_index_check(idx, d, r->remote_addr, r->length, access, last);
    if (status == OTE_OK)
        *found = last->reg;
    if (status == OTE_ERR_ACCESS && !unchecked)
        status = OTE_OK;
    return status;
}

/*
 * The page index of the segment's descriptor (seg->lock held): built at the
 * first check after the segment adopted a descriptor; NULL (the
 * descriptor's search) without one or without memory for it.
 */
static const ote_range_index_t *range_index(ote_segment_h seg)
{
    unsigned gen = atomic_load(&seg->desc_gen);

    if (seg->desc == NULL)
        return NULL;
    if (seg->range_index == NULL || seg->range_index_desc != seg->desc ||
        seg->range_index_gen != gen) {
        ote_range_index_free(seg->range_index);
        seg->range_index      = ote_range_index_build(seg->desc);
        seg->range_index_desc = seg->desc;
        seg->range_index_gen  = gen;
    }
    return seg->range_index;
}

/* A verdict that a descriptor read again may change: the range is (partly) in no region. */
static bool range_missing(ote_status_t verdict)
{
    return verdict == OTE_ERR_NOT_REGISTERED || verdict == OTE_ERR_OUT_OF_BOUNDS;
}

/*
 * The requests of one segment, n of them from reqs: every remote range
 * must lie in a region of the peer's descriptor, whatever its size and
 * the transport (a checking target would refuse it anyway, and a range
 * too large for one message could not even be sent to be checked). A
 * range the descriptor lacks makes it read the descriptor again, once for
 * the run (ote_segment_reread: single-flight, rate-limited); a range still
 * in no region then is refused with REMOTE_NOT_REGISTERED, one that runs
 * past a region's end with OUT_OF_BOUNDS. File segments and exported
 * files are checked where the file is (a READ may meet the end of a file
 * and still bring the bytes before it), except over unchecking transports.
 */
static void run_checks(ote_segment_h seg, const ote_xfer_req_t *reqs, size_t n, bool putback,
                       ote_status_t *refused, const ote_desc_region_t **found)
{
    ote_range_hit_t last = {0};
    const ote_range_index_t *idx;
    bool memory = seg->file == NULL && seg->export_name[0] == '\0', unchecked, missing = false;
    uint64_t ticket;
    ote_status_t reread;

    (void)ote_segment_repair(seg);
    ticket = ote_segment_reread_ticket(seg);
    pthread_mutex_lock(&seg->lock);
    unchecked = ote_proto_rails_unchecked(&seg->rail_set);
    if (memory || unchecked) {
        idx = range_index(seg);
        for (size_t i = 0; i < n; i++) {
            refused[i] = range_verdict(seg->desc, idx, &reqs[i], putback, unchecked, &last,
                                       &found[i]);
            missing |= range_missing(refused[i]);
        }
    }
    pthread_mutex_unlock(&seg->lock);
    if (!missing)
        return;
    reread = ote_segment_reread(seg, ticket);
    last   = (ote_range_hit_t){0};
    pthread_mutex_lock(&seg->lock);
    idx = range_index(seg); /* the descriptor read again */
    for (size_t i = 0; i < n; i++) {
        if (!range_missing(refused[i]))
            continue;
        if (reread == OTE_OK)
            refused[i] = range_verdict(seg->desc, idx, &reqs[i], putback, unchecked, &last,
                                       &found[i]);
        else /* whether the peer registered it since is unknown; a dead peer is named so */
            refused[i] = ote_proto_peer_lost_status(reread);
        if (refused[i] == OTE_ERR_NOT_REGISTERED)
            refused[i] = OTE_ERR_REMOTE_NOT_REGISTERED;
    }
    pthread_mutex_unlock(&seg->lock);
    for (size_t i = 0; i < n; i++) {
        if (refused[i] != OTE_OK)
            ote_debug("submit: %s %#llx+%zu on %s: %s",
                      reqs[i].op == OTE_OP_WRITE ? "WRITE" : "READ",
                      (unsigned long long)reqs[i].remote_addr, reqs[i].length, seg->name,
                      ote_status_string(refused[i]));
    }
}

void ote_batch_peer_checks(ote_engine_h e, const ote_xfer_req_t *reqs, size_t count,
                           bool putback, ote_status_t *refused, const ote_desc_region_t **found)
{
    for (size_t i = 0, end; i < count; i = end) {
        ote_segment_h seg = reqs[i].segment;

        for (end = i; end < count && reqs[end].segment == seg; end++) {
            refused[end] = OTE_OK;
            found[end]   = NULL;
        }
        if (atomic_load(&seg->closed) || seg->engine != e)
            continue; /* refused at preparation, with the whole call */
        run_checks(seg, reqs + i, end - i, putback, refused + i, found + i);
    }
}
