#include "putback_msg.h"

#include "base/wire_util.h"

#include <string.h>

ote_status_t ote_ctl_putback_encode(const ote_ctl_putback_t *m, ote_buf_t *out)
{
    size_t nlen = strnlen(m->name, sizeof(m->name));

    if (m->length == 0 || m->length > OTE_CTL_PUTBACK_MAX_BYTES || nlen == 0 || nlen > 255 ||
        m->remote + m->length < m->remote || m->local + m->length < m->local)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u64(out, m->initiator);
    ote_buf_put_u64(out, m->target);
    ote_buf_put_u64(out, m->id);
    ote_buf_put_u64(out, m->remote);
    ote_buf_put_u64(out, m->local);
    ote_buf_put_u32(out, m->length);
    ote_buf_put_str8(out, m->name);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_putback_decode(const uint8_t *buf, size_t len, ote_ctl_putback_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};

    if (len > OTE_CTL_PUTBACK_MAX_LEN)
        return OTE_ERR_PROTOCOL;
    m->initiator = ote_rd_u64(&r);
    m->target    = ote_rd_u64(&r);
    m->id        = ote_rd_u64(&r);
    m->remote    = ote_rd_u64(&r);
    m->local     = ote_rd_u64(&r);
    m->length    = ote_rd_u32(&r);
    m->name[0]   = '\0';
    ote_rd_str8(&r, m->name, sizeof(m->name));
    if (r.failed || r.left != 0)
        return OTE_ERR_PROTOCOL;
    /* A name with a NUL inside would name another peer than the bytes say. */
    if (m->name[0] == '\0' || m->length == 0 || m->length > OTE_CTL_PUTBACK_MAX_BYTES ||
        m->remote + m->length < m->remote || m->local + m->length < m->local)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

ote_status_t ote_ctl_putback_ack_encode(ote_status_t status, uint64_t id, ote_buf_t *out)
{
    ote_buf_put_u32(out, (uint32_t)status);
    ote_buf_put_u64(out, id);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_putback_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                        uint64_t *id_p)
{
    ote_rd_t r = {.p = buf, .left = len};
    int32_t s  = (int32_t)ote_rd_u32(&r);
    uint64_t id = ote_rd_u64(&r);

    if (r.failed || r.left != 0 || !ote_status_is_known(s) || s == OTE_INPROGRESS)
        return OTE_ERR_PROTOCOL;
    *status_p = (ote_status_t)s;
    *id_p     = id;
    return OTE_OK;
}
