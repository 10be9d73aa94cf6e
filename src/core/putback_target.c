/*
 * Transfers a target makes to an initiator over the segment the control
 * listener keeps open to it (ctl_proto.c): a PUTBACK (READ over put-only
 * transports, proto/putback.h), whose range the listener checked, PUT
 * back into the initiator's destination; a FILE_IO by rails (ctl_file.c).
 */
#include "engine.h"

#include "base/log.h"
#include "base/util.h"

#include <string.h>

/* After a cancel: wait for the task's end, however long its posted slices take. */
static ote_status_t peer_xfer_wait_end(ote_engine_h e, ote_batch_h b)
{
    uint64_t start = ote_time_ns();
    bool warned    = false;
    ote_status_t status;

    while ((status = ote_batch_wait(b, 1000)) == OTE_ERR_TIMEOUT) {
        if (!warned && ote_time_ns() - start > 2ull * (uint64_t)e->config.xfer_timeout_ms * 1000000ull) {
            ote_warn("a transfer for a peer's request has not ended %ld ms after its cancel",
                     2 * e->config.xfer_timeout_ms);
            warned = true;
        }
    }
    return status;
}

ote_status_t ote_peer_xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                           uint64_t remote, size_t length, bool putback)
{
    ote_xfer_req_t req = {.op = op, .local_addr = local, .remote_addr = remote,
                          .length = length, .segment = seg};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    ote_status_t status;

    status = ote_batch_create(e, 1, &b);
    if (status != OTE_OK)
        return status;
    status = putback ? ote_batch_submit_putback(b, &req, &first)
                     : ote_batch_submit(b, &req, 1, &first);
    if (status == OTE_OK)
        status = ote_batch_wait(b, (int)e->config.xfer_timeout_ms);
    if (status == OTE_ERR_TIMEOUT) {
        /*
         * Never answer while the task lives: a slice retried or still
         * queued would post its bytes into the initiator's range after the
         * initiator was told, and after its task ended there. The cancel
         * withdraws what is queued and stops retries; what is posted ends
         * by its completion or its own OTE_XFER_TIMEOUT_MS.
         */
        (void)ote_batch_cancel(b, first);
        status = peer_xfer_wait_end(e, b);
    }
    if (status == OTE_OK)
        status = ote_batch_task_status(b, first, &st);
    if (status == OTE_OK && st.state != OTE_TASK_COMPLETED)
        status = st.error != OTE_OK && st.error != OTE_ERR_CANCELED ? st.error : OTE_ERR_TIMEOUT;
    ote_batch_release(b);
    /* The range is the initiator's own memory: the answer says so from its side. */
    if (status == OTE_ERR_REMOTE_NOT_REGISTERED)
        status = OTE_ERR_NOT_REGISTERED;
    return status;
}

ote_status_t ote_putback_serve(ote_engine_h e, ote_segment_h seg, const ote_ctl_putback_t *m)
{
    ote_status_t status = ote_peer_xfer(e, seg, OTE_OP_WRITE, (void *)(uintptr_t)m->remote,
                                        m->local, m->length, true);

    if (status != OTE_OK)
        ote_debug("putback: %#llx+%u to '%s' at %#llx: %s", (unsigned long long)m->remote,
                  m->length, m->name, (unsigned long long)m->local, ote_status_string(status));
    return status;
}
