#include "file_io_msg.h"

#include "base/wire_util.h"

#include <string.h>

static bool file_io_valid(const ote_ctl_file_io_t *m)
{
    return (m->op == OTE_CTL_FILE_IO_READ || m->op == OTE_CTL_FILE_IO_WRITE) &&
           m->file_id != 0 && m->length != 0 && m->length <= OTE_CTL_FILE_IO_MAX_BYTES &&
           m->offset + m->length >= m->offset &&
           (!m->rails || (m->local + m->length >= m->local && m->name[0] != '\0'));
}

ote_status_t ote_ctl_file_io_encode(const ote_ctl_file_io_t *m, ote_buf_t *out)
{
    size_t nlen = strnlen(m->name, sizeof(m->name));

    if (!file_io_valid(m) || (m->op == OTE_CTL_FILE_IO_WRITE && !m->rails && m->data == NULL) ||
        (m->rails && nlen > 255))
        return OTE_ERR_INVALID_PARAM;
    /* By rails: ops 3 and 4, which a target without them refuses. */
    ote_buf_put_u8(out, (uint8_t)(m->op + (m->rails ? 2 : 0)));
    ote_buf_put_u64(out, m->initiator);
    ote_buf_put_u64(out, m->target);
    ote_buf_put_u64(out, m->file_id);
    ote_buf_put_u64(out, m->offset);
    ote_buf_put_u32(out, m->length);
    if (m->rails) {
        ote_buf_put_u64(out, m->local);
        ote_buf_put_str8(out, m->name);
    } else if (m->op == OTE_CTL_FILE_IO_WRITE) {
        ote_buf_put(out, m->data, m->length);
    }
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_file_io_decode(const uint8_t *buf, size_t len, ote_ctl_file_io_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};
    uint8_t op;

    if (len > OTE_CTL_FILE_IO_MAX_LEN)
        return OTE_ERR_PROTOCOL;
    op           = ote_rd_u8(&r);
    m->rails     = op == OTE_CTL_FILE_IO_READ_RAILS || op == OTE_CTL_FILE_IO_WRITE_RAILS;
    m->op        = m->rails ? (uint8_t)(op - 2) : op;
    m->initiator = ote_rd_u64(&r);
    m->target    = ote_rd_u64(&r);
    m->file_id   = ote_rd_u64(&r);
    m->offset    = ote_rd_u64(&r);
    m->length    = ote_rd_u32(&r);
    m->data      = NULL;
    m->local     = 0;
    m->name[0]   = '\0';
    if (m->rails) {
        m->local = ote_rd_u64(&r);
        /* A name with a NUL inside would name another peer than the bytes say. */
        ote_rd_str8(&r, m->name, sizeof(m->name));
    }
    if (r.failed || !file_io_valid(m))
        return OTE_ERR_PROTOCOL;
    if (m->op == OTE_CTL_FILE_IO_WRITE && !m->rails)
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

ote_status_t ote_ctl_file_io_rails_ack_encode(ote_status_t status, uint32_t count,
                                              ote_buf_t *out)
{
    if (count > OTE_CTL_FILE_IO_MAX_BYTES)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u32(out, (uint32_t)status);
    ote_buf_put_u32(out, count);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

ote_status_t ote_ctl_file_io_rails_ack_decode(const uint8_t *buf, size_t len, size_t max,
                                              ote_status_t *status_p, size_t *count_p)
{
    ote_rd_t r = {.p = buf, .left = len};
    int32_t s  = (int32_t)ote_rd_u32(&r);
    uint32_t n = ote_rd_u32(&r);

    if (r.failed || r.left != 0 || !ote_status_is_known(s) || s == OTE_INPROGRESS || n > max ||
        n > OTE_CTL_FILE_IO_MAX_BYTES)
        return OTE_ERR_PROTOCOL;
    *status_p = (ote_status_t)s;
    *count_p  = n;
    return OTE_OK;
}
