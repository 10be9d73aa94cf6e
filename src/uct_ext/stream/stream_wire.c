#include "stream_wire.h"

#include "base/auth.h"
#include "base/wire_util.h"

/* The wire lengths must match the handshake's. */
_Static_assert(OTE_STREAM_AUTH_HELLO_LEN == OTE_AUTH_HELLO_LEN, "hello length");
_Static_assert(OTE_STREAM_AUTH_TPROOF_LEN == OTE_AUTH_TPROOF_LEN, "target proof length");
_Static_assert(OTE_STREAM_AUTH_IPROOF_LEN == OTE_AUTH_IPROOF_LEN, "initiator proof length");

void ote_stream_hdr_encode(const ote_stream_hdr_t *h, uint8_t *b)
{
    ote_put_u16(b + 0, OTE_STREAM_MAGIC);
    b[2] = OTE_STREAM_VERSION;
    b[3] = h->type;
    ote_put_u32(b + 4, (uint32_t)h->status);
    ote_put_u64(b + 8, h->id);
    ote_put_u64(b + 16, h->addr);
    ote_put_u64(b + 24, h->length);
}

void ote_stream_hdr_peek(const uint8_t *b, ote_stream_hdr_t *h)
{
    h->version = b[2];
    h->type    = b[3];
    h->status  = (int32_t)ote_get_u32(b + 4);
    h->id      = ote_get_u64(b + 8);
    h->addr    = ote_get_u64(b + 16);
    h->length  = ote_get_u64(b + 24);
}

ote_status_t ote_stream_hdr_decode(const uint8_t *b, size_t len, size_t max_payload,
                                   ote_stream_hdr_t *h)
{
    ote_stream_hdr_t x;

    if (b == NULL || len < OTE_STREAM_HDR_LEN || ote_get_u16(b) != OTE_STREAM_MAGIC ||
        b[2] != OTE_STREAM_VERSION)
        return OTE_ERR_PROTOCOL;
    ote_stream_hdr_peek(b, &x);
    if (x.type < OTE_STREAM_HELLO || x.type > OTE_STREAM_TYPE_MAX)
        return OTE_ERR_PROTOCOL;
    if (!ote_status_is_known(x.status) || x.status == OTE_INPROGRESS)
        return OTE_ERR_PROTOCOL;
    switch (x.type) {
    /* Requests for a range: by bytes, by reference, or to map it. */
    case OTE_STREAM_WRITE:
    case OTE_STREAM_READ_REQ:
    case OTE_STREAM_PUT_REF:
    case OTE_STREAM_GET_REF:
    case OTE_STREAM_MAP:
        if (x.status != OTE_OK || x.length == 0 || x.length > max_payload ||
            x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_WRITEV:
    case OTE_STREAM_READV_REQ:
        /* The entries' own limits are checked with the table. */
        if (x.status != OTE_OK || x.addr < 2 || x.addr > OTE_STREAM_WRITEV_MAX ||
            x.length < x.addr || x.length > x.addr * OTE_STREAM_WRITEV_ENTRY_MAX)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_READV_RESP:
        /* The bytes of the entries read: all of them, or fewer on error. */
        if (x.addr < 2 || x.addr > OTE_STREAM_WRITEV_MAX ||
            x.length > x.addr * OTE_STREAM_WRITEV_ENTRY_MAX ||
            (x.status == OTE_OK ? x.length < x.addr
                                : x.length > (x.addr - 1) * OTE_STREAM_WRITEV_ENTRY_MAX))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_WRITEV_ACK:
        if (x.addr < 2 || x.addr > OTE_STREAM_WRITEV_MAX ||
            x.length > x.addr * OTE_STREAM_WRITEV_ENTRY_MAX ||
            (x.status == OTE_OK ? x.length < x.addr : x.length != 0))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_READ_RESP:
    case OTE_STREAM_WRITE_ACK:
    case OTE_STREAM_REF_ACK:
        if (x.length > max_payload || (x.status != OTE_OK && x.length != 0))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_AUTH_HELLO:
        if (x.status != OTE_OK || x.length != OTE_STREAM_AUTH_HELLO_LEN)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_AUTH_PROOF:
        if (x.status != OTE_OK || (x.length != OTE_STREAM_AUTH_TPROOF_LEN &&
                                   x.length != OTE_STREAM_AUTH_IPROOF_LEN))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_PROBE:
        if (x.status != OTE_OK || x.length != OTE_STREAM_PROBE_LEN || x.addr != 0)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_PROBE_ACK:
        if (x.length != 0 || (x.status != OTE_OK && x.addr != 0))
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_MAP_ACK:
        /* An error may name the region (UNSUPPORTED): never wrapping. */
        if ((x.status == OTE_OK && x.length == 0) || x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_UNMAP:
        if (x.status != OTE_OK || x.length == 0 || x.addr + x.length < x.addr)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_UNMAP_ACK:
        if (x.status != OTE_OK || x.length != 0 || x.addr != 0)
            return OTE_ERR_PROTOCOL;
        break;
    case OTE_STREAM_HELLO:
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

size_t ote_stream_hdr_inline_len(const ote_stream_hdr_t *h)
{
    switch (h->type) {
    case OTE_STREAM_AUTH_HELLO:
    case OTE_STREAM_AUTH_PROOF:
        return (size_t)h->length;
    case OTE_STREAM_PUT_REF:
    case OTE_STREAM_GET_REF:
    case OTE_STREAM_PROBE:
    case OTE_STREAM_MAP:
        return OTE_STREAM_REF_TRAILER_LEN;
    case OTE_STREAM_MAP_ACK:
        return h->status == OTE_OK ? OTE_STREAM_MAP_ACK_TRAILER_LEN : 0;
    case OTE_STREAM_WRITEV:
    case OTE_STREAM_READV_REQ:
        return (size_t)h->addr * OTE_STREAM_WRITEV_ENTRY_LEN;
    case OTE_STREAM_WRITEV_ACK:
    case OTE_STREAM_READV_RESP:
        return h->status == OTE_OK ? 0 : (size_t)h->addr * OTE_STREAM_WRITEV_STATUS_LEN;
    default:
        return 0;
    }
}

void ote_stream_vec_entry_encode(const ote_stream_vec_entry_t *v, uint8_t *b)
{
    ote_put_u64(b, v->addr);
    ote_put_u64(b + 8, v->length);
}

ote_status_t ote_stream_vec_decode(const ote_stream_hdr_t *h, const uint8_t *b, size_t max_payload,
                                   ote_stream_vec_entry_t *out)
{
    size_t max = max_payload < OTE_STREAM_WRITEV_ENTRY_MAX ? max_payload : OTE_STREAM_WRITEV_ENTRY_MAX;
    uint64_t sum = 0;

    if ((h->type != OTE_STREAM_WRITEV && h->type != OTE_STREAM_READV_REQ) || h->addr < 2 ||
        h->addr > OTE_STREAM_WRITEV_MAX)
        return OTE_ERR_PROTOCOL;
    for (size_t i = 0; i < h->addr; i++, b += OTE_STREAM_WRITEV_ENTRY_LEN) {
        out[i].addr   = ote_get_u64(b);
        out[i].length = ote_get_u64(b + 8);
        if (out[i].length == 0 || out[i].length > max ||
            out[i].addr + out[i].length < out[i].addr)
            return OTE_ERR_PROTOCOL;
        sum += out[i].length;
    }
    return sum == h->length ? OTE_OK : OTE_ERR_PROTOCOL;
}

ote_status_t ote_stream_vec_status_decode(const ote_stream_hdr_t *h, const uint8_t *b,
                                          ote_status_t *out)
{
    if ((h->type != OTE_STREAM_WRITEV_ACK && h->type != OTE_STREAM_READV_RESP) ||
        h->status == OTE_OK || h->addr < 2 || h->addr > OTE_STREAM_WRITEV_MAX)
        return OTE_ERR_PROTOCOL;
    for (size_t i = 0; i < h->addr; i++, b += OTE_STREAM_WRITEV_STATUS_LEN) {
        int32_t s = (int32_t)ote_get_u32(b);

        if (!ote_status_is_known(s) || s == OTE_INPROGRESS)
            return OTE_ERR_PROTOCOL;
        out[i] = (ote_status_t)s;
    }
    return OTE_OK;
}
