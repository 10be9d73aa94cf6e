#include "tcp_wire.h"

#include "base/auth.h"
#include "base/wire_util.h"

/* The wire lengths must match the handshake's. */
_Static_assert(OTE_TCP_AUTH_HELLO_LEN == OTE_AUTH_HELLO_LEN, "hello length");
_Static_assert(OTE_TCP_AUTH_TPROOF_LEN == OTE_AUTH_TPROOF_LEN, "target proof length");
_Static_assert(OTE_TCP_AUTH_IPROOF_LEN == OTE_AUTH_IPROOF_LEN, "initiator proof length");

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
    ote_tcp_hdr_t x;

    if (b == NULL || len < OTE_TCP_HDR_LEN || ote_get_u16(b) != OTE_TCP_MAGIC ||
        b[2] != OTE_TCP_VERSION)
        return OTE_ERR_PROTOCOL;
    x.version = b[2];
    x.type    = b[3];
    x.status  = (int32_t)ote_get_u32(b + 4);
    x.id      = ote_get_u64(b + 8);
    x.addr    = ote_get_u64(b + 16);
    x.length  = ote_get_u64(b + 24);
    if (x.type < OTE_TCP_HELLO || x.type > OTE_TCP_TYPE_MAX)
        return OTE_ERR_PROTOCOL;
    if (!ote_status_is_known(x.status) || x.status == OTE_INPROGRESS)
        return OTE_ERR_PROTOCOL;
    switch (x.type) {
    /* Requests for a range: by bytes, by reference, or to map it. */
    case OTE_TCP_WRITE:
    case OTE_TCP_READ_REQ:
    case OTE_TCP_PUT_REF:
    case OTE_TCP_GET_REF:
    case OTE_TCP_MAP:
        if (x.status != OTE_OK || x.length == 0 || x.length > max_payload ||
            x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_READ_RESP:
    case OTE_TCP_WRITE_ACK:
    case OTE_TCP_REF_ACK:
        if (x.length > max_payload || (x.status != OTE_OK && x.length != 0))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_AUTH_HELLO:
        if (x.status != OTE_OK || x.length != OTE_TCP_AUTH_HELLO_LEN)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_AUTH_PROOF:
        if (x.status != OTE_OK || (x.length != OTE_TCP_AUTH_TPROOF_LEN &&
                                   x.length != OTE_TCP_AUTH_IPROOF_LEN))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_PROBE:
        if (x.status != OTE_OK || x.length != OTE_TCP_PROBE_LEN || x.addr != 0)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_PROBE_ACK:
        if (x.length != 0 || (x.status != OTE_OK && x.addr != 0))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_MAP_ACK:
        /* An error may name the region (UNSUPPORTED): never wrapping. */
        if ((x.status == OTE_OK && x.length == 0) || x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_UNMAP:
        if (x.status != OTE_OK || x.length == 0 || x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_UNMAP_ACK:
        if (x.status != OTE_OK || x.length != 0 || x.addr != 0)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_TCP_HELLO:
        if (x.status != OTE_OK || x.length != 0)
            return OTE_ERR_PROTOCOL;
        break;
    default: /* HELLO_ACK, AUTH_DONE */
        if (x.length != 0)
            return OTE_ERR_PROTOCOL;
        break;
    }
    *h = x;
    return OTE_OK;
}

size_t ote_tcp_hdr_inline_len(const ote_tcp_hdr_t *h)
{
    switch (h->type) {
    case OTE_TCP_AUTH_HELLO:
    case OTE_TCP_AUTH_PROOF:
        return (size_t)h->length;
    case OTE_TCP_PUT_REF:
    case OTE_TCP_GET_REF:
    case OTE_TCP_PROBE:
    case OTE_TCP_MAP:
        return OTE_TCP_REF_TRAILER_LEN;
    case OTE_TCP_MAP_ACK:
        return h->status == OTE_OK ? OTE_TCP_MAP_ACK_TRAILER_LEN : 0;
    default:
        return 0;
    }
}
