#include "stage_msg.h"

#include "base/wire_util.h"

ote_status_t ote_ctl_stage_encode(const ote_ctl_stage_t *m, ote_buf_t *out)
{
    if (m->count == 0 || m->count > OTE_CTL_STAGE_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u8(out, m->op);
    ote_buf_put_u64(out, m->initiator);
    ote_buf_put_u64(out, m->target);
    switch (m->op) {
    case OTE_CTL_STAGE_PIN:
        ote_buf_put_u16(out, (uint16_t)m->count);
        break;
    case OTE_CTL_STAGE_DELEGATE:
        if (m->dir != OTE_CTL_STAGE_TO_GPU && m->dir != OTE_CTL_STAGE_FROM_GPU)
            return OTE_ERR_INVALID_PARAM;
        ote_buf_put_u8(out, m->dir);
        ote_buf_put_u16(out, (uint16_t)m->count);
        for (size_t i = 0; i < m->count; i++) {
            ote_buf_put_u64(out, m->e[i].chunk);
            ote_buf_put_u64(out, m->e[i].gpu);
            ote_buf_put_u32(out, m->e[i].length);
        }
        break;
    case OTE_CTL_STAGE_UNPIN:
        ote_buf_put_u16(out, (uint16_t)m->count);
        for (size_t i = 0; i < m->count; i++)
            ote_buf_put_u64(out, m->e[i].chunk);
        break;
    default:
        return OTE_ERR_INVALID_PARAM;
    }
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_stage_decode(const uint8_t *buf, size_t len, ote_ctl_stage_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};

    m->op        = ote_rd_u8(&r);
    m->initiator = ote_rd_u64(&r);
    m->target    = ote_rd_u64(&r);
    m->dir       = 0;
    if (r.failed)
        return OTE_ERR_PROTOCOL;
    if (m->op == OTE_CTL_STAGE_DELEGATE) {
        m->dir = ote_rd_u8(&r);
        if (r.failed || (m->dir != OTE_CTL_STAGE_TO_GPU && m->dir != OTE_CTL_STAGE_FROM_GPU))
            return OTE_ERR_PROTOCOL;
    } else if (m->op != OTE_CTL_STAGE_PIN && m->op != OTE_CTL_STAGE_UNPIN) {
        return OTE_ERR_PROTOCOL;
    }
    m->count = ote_rd_u16(&r);
    if (r.failed || m->count == 0 || m->count > OTE_CTL_STAGE_MAX)
        return OTE_ERR_PROTOCOL;
    for (size_t i = 0; i < m->count && m->op != OTE_CTL_STAGE_PIN; i++) {
        m->e[i].chunk  = ote_rd_u64(&r);
        m->e[i].gpu    = 0;
        m->e[i].length = 0;
        if (m->op == OTE_CTL_STAGE_DELEGATE) {
            m->e[i].gpu    = ote_rd_u64(&r);
            m->e[i].length = ote_rd_u32(&r);
            if (!r.failed && (m->e[i].length == 0 ||
                              m->e[i].gpu + m->e[i].length < m->e[i].gpu ||
                              m->e[i].chunk + m->e[i].length < m->e[i].chunk))
                return OTE_ERR_PROTOCOL;
        }
    }
    if (r.failed || r.left != 0)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

ote_status_t ote_ctl_stage_ack_encode(ote_status_t status, uint32_t chunk_size,
                                      const uint64_t *chunks, size_t count, ote_buf_t *out)
{
    if (count > OTE_CTL_STAGE_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u32(out, (uint32_t)status);
    ote_buf_put_u32(out, chunk_size);
    ote_buf_put_u16(out, (uint16_t)count);
    for (size_t i = 0; i < count; i++)
        ote_buf_put_u64(out, chunks[i]);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_stage_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                      uint32_t *chunk_size_p, uint64_t *chunks, size_t *count_p)
{
    ote_rd_t r  = {.p = buf, .left = len};
    int32_t s   = (int32_t)ote_rd_u32(&r);
    uint32_t cs = ote_rd_u32(&r);
    size_t n    = ote_rd_u16(&r);

    if (r.failed || n > OTE_CTL_STAGE_MAX || !ote_status_is_known(s) || (n > 0 && cs == 0))
        return OTE_ERR_PROTOCOL;
    for (size_t i = 0; i < n; i++)
        chunks[i] = ote_rd_u64(&r);
    if (r.failed || r.left != 0 || (s != OTE_OK && n != 0))
        return OTE_ERR_PROTOCOL;
    *status_p     = (ote_status_t)s;
    *chunk_size_p = cs;
    *count_p      = n;
    return OTE_OK;
}
