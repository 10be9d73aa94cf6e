/*
 * A submission's checks before any task is prepared: the arguments alone
 * (ote_batch_submit_validate), then what the peer's descriptor says of
 * each remote range where the transport does not check at the target
 * (ote_batch_peer_checks).
 */
#include "engine.h"
#include "base/log.h"

/*
 * What the peer's descriptor says of [addr, addr+len) for an access: OK
 * when a region covers it with the access, else the status a checking
 * target would answer (NOT_REGISTERED, OUT_OF_BOUNDS, ACCESS).
 */
static ote_status_t desc_range_check(const ote_desc_t *d, uint64_t addr, size_t len,
                                     unsigned access)
{
    ote_status_t best = OTE_ERR_NOT_REGISTERED;
    size_t lo = ote_desc_regions_upto(d, addr);

    for (size_t i = lo; i-- > 0 && lo - i <= 64;) {
        const ote_desc_region_t *reg = &d->regions[i];

        if (addr - reg->addr >= reg->length)
            continue;
        if (reg->length - (addr - reg->addr) < len) {
            if (best == OTE_ERR_NOT_REGISTERED)
                best = OTE_ERR_OUT_OF_BOUNDS;
            continue;
        }
        if ((reg->access & access) == access)
            return OTE_OK;
        best = OTE_ERR_ACCESS;
    }
    return best;
}

/*
 * Transports that do not check accesses at the target (UCT's) may only be
 * given ranges the peer published with the needed access. An unknown range
 * gets one descriptor refresh (the peer may have registered it since).
 */
static ote_status_t remote_range_check(ote_segment_h seg, const ote_xfer_req_t *r,
                                       bool putback)
{
    /* A PUTBACK's destination: the peer named it in its request; registered is enough. */
    unsigned access = putback                ? 0
                      : r->op == OTE_OP_WRITE ? OTE_ACCESS_REMOTE_WRITE
                                              : OTE_ACCESS_REMOTE_READ;
    ote_status_t status;

    for (int pass = 0;; pass++) {
        pthread_mutex_lock(&seg->lock);
        status = seg->desc != NULL
                     ? desc_range_check(seg->desc, r->remote_addr, r->length, access)
                     : OTE_ERR_NOT_REGISTERED;
        pthread_mutex_unlock(&seg->lock);
        if (status == OTE_OK || pass == 1 ||
            (status != OTE_ERR_NOT_REGISTERED && status != OTE_ERR_OUT_OF_BOUNDS))
            break;
        if (ote_segment_refresh(seg) != OTE_OK)
            break;
    }
    if (status != OTE_OK)
        ote_debug("submit: %s %#llx+%zu on %s: %s", r->op == OTE_OP_WRITE ? "write" : "read",
                  (unsigned long long)r->remote_addr, r->length, seg->name,
                  ote_status_string(status));
    return status;
}

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

void ote_batch_peer_checks(ote_engine_h e, const ote_xfer_req_t *reqs, size_t count,
                           bool putback, ote_status_t *refused)
{
    ote_segment_h last = NULL; /* the segment of the run unchecked is for */
    bool unchecked     = false;

    for (size_t i = 0; i < count; i++) {
        ote_segment_h seg = reqs[i].segment;

        refused[i] = OTE_OK;
        if (atomic_load(&seg->closed) || seg->engine != e)
            continue; /* refused at preparation, with the whole call */
        if (seg != last) {
            last = seg;
            (void)ote_segment_repair(seg);
            pthread_mutex_lock(&seg->lock);
            unchecked = ote_proto_rails_unchecked(&seg->rail_set);
            pthread_mutex_unlock(&seg->lock);
        }
        if (unchecked)
            refused[i] = remote_range_check(seg, &reqs[i], putback);
    }
}
