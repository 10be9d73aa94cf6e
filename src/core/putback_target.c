/*
 * READ over put-only transports, target side (proto/putback.h): the
 * control listener checked the range; this PUTs it back into the
 * initiator's destination over a segment opened to the initiator.
 */
#include "engine.h"

#include "base/log.h"

#include <string.h>

ote_status_t ote_putback_serve(ote_engine_h e, const ote_ctl_putback_t *m)
{
    ote_xfer_req_t req = {.op = OTE_OP_WRITE, .local_addr = (void *)(uintptr_t)m->remote,
                          .remote_addr = m->local, .length = m->length};
    ote_task_status_t st;
    ote_segment_h seg;
    ote_batch_h b;
    uint64_t instance;
    size_t first;
    ote_status_t status;

    status = ote_segment_open(e, m->name, &seg);
    if (status != OTE_OK) {
        ote_warn("putback: cannot open '%s' to answer its read: %s", m->name,
                 ote_status_string(status));
        return status == OTE_ERR_NOT_FOUND ? OTE_ERR_UNREACHABLE : status;
    }
    pthread_mutex_lock(&seg->lock);
    instance = seg->desc != NULL ? seg->desc->instance_id : 0;
    pthread_mutex_unlock(&seg->lock);
    /* Only into the instance that asked: a name now served by another is refused. */
    if (instance != m->initiator) {
        ote_warn("putback: '%s' is not the instance that asked; refused", m->name);
        ote_segment_close(seg);
        return OTE_ERR_PEER_RESTARTED;
    }
    req.segment = seg;
    status      = ote_batch_create(e, 1, &b);
    if (status == OTE_OK) {
        status = ote_batch_submit_putback(b, &req, &first);
        if (status == OTE_OK)
            status = ote_batch_wait(b, (int)(e->config.xfer_timeout_ms + 1000));
        if (status == OTE_OK)
            status = ote_batch_task_status(b, first, &st);
        if (status == OTE_OK && st.state != OTE_TASK_COMPLETED)
            status = st.error != OTE_OK ? st.error : OTE_ERR_IO;
        ote_batch_release(b);
    }
    ote_segment_close(seg);
    if (status != OTE_OK)
        ote_debug("putback: %#llx+%u to '%s' at %#llx: %s", (unsigned long long)m->remote,
                  m->length, m->name, (unsigned long long)m->local, ote_status_string(status));
    return status;
}
