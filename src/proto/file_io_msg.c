#include "file_io_msg.h"

#include "base/wire_util.h"

#include <string.h>

static bool file_io_valid(const ote_ctl_file_io_t *m)
{
    return (m->op == OTE_CTL_FILE_IO_READ || m->op == OTE_CTL_FILE_IO_WRITE) &&
           m->file_id != 0 && m->length != 0 && m->length <= OTE_CTL_FILE_IO_MAX_BYTES &&
           m->offset + m->length >= m->offset;
}

ote_status_t ote_ctl_file_io_encode(const ote_ctl_file_io_t *m, ote_buf_t *out)
{
    if (!file_io_valid(m) || (m->op == OTE_CTL_FILE_IO_WRITE && m->data == NULL))
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u8(out, m->op);
    ote_buf_put_u64(out, m->initiator);
    ote_buf_put_u64(out, m->target);
    ote_buf_put_u64(out, m->file_id);
    ote_buf_put_u64(out, m->offset);
    ote_buf_put_u32(out, m->length);
    if (m->op == OTE_CTL_FILE_IO_WRITE)
        ote_buf_put(out, m->data, m->length);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_file_io_decode(const uint8_t *buf, size_t len, ote_ctl_file_io_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};

    if (len > OTE_CTL_FILE_IO_MAX_LEN)
        return OTE_ERR_PROTOCOL;
    m->op        = ote_rd_u8(&r);
    m->initiator = ote_rd_u64(&r);
    m->target    = ote_rd_u64(&r);
    m->file_id   = ote_rd_u64(&r);
    m->offset    = ote_rd_u64(&r);
    m->length    = ote_rd_u32(&r);
    m->data      = NULL;
    if (r.failed || !file_io_valid(m))
        return OTE_ERR_PROTOCOL;
    if (m->op == OTE_CTL_FILE_IO_WRITE)
        m->data = ote_rd_bytes(&r, m->length);
    if (r.failed || r.left != 0)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

ote_status_t ote_ctl_file_io_ack_encode(ote_status_t status, const void *data, size_t len,
                                        ote_buf_t *out)
{
    if (len > OTE_CTL_FILE_IO_MAX_BYTES || (len > 0 && data == NULL))
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u32(out, (uint32_t)status);
    ote_buf_put_u32(out, (uint32_t)len);
    if (len > 0)
        ote_buf_put(out, data, len);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_file_io_ack_decode(const uint8_t *buf, size_t len, size_t max,
                                        ote_status_t *status_p, const uint8_t **data_p,
                                        size_t *data_len_p)
{
    ote_rd_t r = {.p = buf, .left = len};
    int32_t s  = (int32_t)ote_rd_u32(&r);
    uint32_t n = ote_rd_u32(&r);
    const uint8_t *data;

    if (r.failed || !ote_status_is_known(s) || s == OTE_INPROGRESS || n > max ||
        n > OTE_CTL_FILE_IO_MAX_BYTES)
        return OTE_ERR_PROTOCOL;
    data = n > 0 ? ote_rd_bytes(&r, n) : NULL;
    if (r.failed || r.left != 0)
        return OTE_ERR_PROTOCOL;
    *status_p   = (ote_status_t)s;
    *data_p     = data;
    *data_len_p = n;
    return OTE_OK;
}
