/*
 * READ over put-only transports, target side (proto/putback.h): the
 * control listener checked the range; this PUTs it back into the
 * initiator's destination over the segment the listener keeps open to the
 * initiator (ctl_proto.c).
 */
#include "engine.h"

#include "base/log.h"

#include <string.h>

ote_status_t ote_putback_serve(ote_engine_h e, ote_segment_h seg, const ote_ctl_putback_t *m)
{
    ote_xfer_req_t req = {.op = OTE_OP_WRITE, .local_addr = (void *)(uintptr_t)m->remote,
                          .remote_addr = m->local, .length = m->length, .segment = seg};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    ote_status_t status;

    status = ote_batch_create(e, 1, &b);
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
    if (status != OTE_OK)
        ote_debug("putback: %#llx+%u to '%s' at %#llx: %s", (unsigned long long)m->remote,
                  m->length, m->name, (unsigned long long)m->local, ote_status_string(status));
    return status;
}
