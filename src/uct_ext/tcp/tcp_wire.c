#include "tcp_wire.h"

#include "core/wire_util.h"

void ote_tcp_hdr_encode(const ote_tcp_hdr_t *h, uint8_t *b)
{
    ote_put_u16(b + 0, OTE_TCP_MAGIC);
    b[2] = OTE_TCP_VERSION;
    b[3] = h->type;
    ote_put_u32(b + 4, (uint32_t)h->status);
    ote_put_u64(b + 8, h->id);
    ote_put_u64(b + 16, h->addr);
    ote_put_u64(b + 24, h->length);
}

ote_status_t ote_tcp_hdr_decode(const uint8_t *b, size_t len, size_t max_payload,
                                ote_tcp_hdr_t *h)
{
    if (len < OTE_TCP_HDR_LEN || ote_get_u16(b) != OTE_TCP_MAGIC || b[2] != OTE_TCP_VERSION)
        return OTE_ERR_PROTOCOL;
    h->version = b[2];
    h->type    = b[3];
    h->status  = (int32_t)ote_get_u32(b + 4);
    h->id      = ote_get_u64(b + 8);
    h->addr    = ote_get_u64(b + 16);
    h->length  = ote_get_u64(b + 24);
    if (h->type < OTE_TCP_HELLO || h->type > OTE_TCP_TYPE_MAX)
        return OTE_ERR_PROTOCOL;
    if (!ote_status_is_known(h->status))
        return OTE_ERR_PROTOCOL;
    switch (h->type) {
    case OTE_TCP_WRITE:
    case OTE_TCP_READ_REQ:
        if (h->length == 0 || h->length > max_payload || h->addr + h->length < h->addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_READ_RESP:
    case OTE_TCP_WRITE_ACK:
        if (h->length > max_payload)
            return OTE_ERR_PROTOCOL;
        break;
    default:
        if (h->length != 0)
            return OTE_ERR_PROTOCOL;
        break;
    }
    return OTE_OK;
}
