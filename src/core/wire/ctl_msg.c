#include "ctl_msg.h"

#include "base/auth.h"
#include "base/wire_util.h"

#include <string.h>

void ote_ctl_hdr_encode(const ote_ctl_hdr_t *h, uint8_t *b)
{
    ote_put_u32(b, OTE_CTL_MAGIC);
    b[4] = OTE_CTL_VERSION;
    b[5] = h->type;
    ote_put_u16(b + 6, 0);
    ote_put_u32(b + 8, h->length);
    ote_put_u32(b + 12, h->seq);
}

ote_status_t ote_ctl_hdr_decode(const uint8_t *b, size_t len, size_t max_payload,
                                ote_ctl_hdr_t *h)
{
    if (len < OTE_CTL_HDR_LEN || ote_get_u32(b) != OTE_CTL_MAGIC || b[4] != OTE_CTL_VERSION ||
        ote_get_u16(b + 6) != 0)
        return OTE_ERR_PROTOCOL;
    h->type   = b[5];
    h->length = ote_get_u32(b + 8);
    h->seq    = ote_get_u32(b + 12);
    /* Only types with a row in the type table (below). */
    if (ote_ctl_type_info(h->type) == NULL || h->length > max_payload)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

ote_status_t ote_ctl_notify_encode(const ote_ctl_notify_t *n, ote_buf_t *out)
{
    if (n->length > OTE_NOTIFY_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u64(out, n->sender_key);
    ote_buf_put_u64(out, n->target_instance);
    ote_buf_put_u64(out, n->seq);
    ote_buf_put_str8(out, n->from);
    ote_buf_put_u32(out, (uint32_t)n->length);
    ote_buf_put(out, n->data, n->length);
    return ote_buf_status(out);
}

ote_status_t ote_ctl_notify_decode(const uint8_t *buf, size_t len, ote_ctl_notify_t *n)
{
    ote_rd_t r = {.p = buf, .left = len};

    n->sender_key = ote_rd_u64(&r);
    n->target_instance = ote_rd_u64(&r);
    n->seq             = ote_rd_u64(&r);
    ote_rd_str8(&r, n->from, sizeof(n->from));
    n->length = ote_rd_u32(&r);
    if (r.failed || n->length > OTE_NOTIFY_MAX)
        return OTE_ERR_PROTOCOL;
    n->data = ote_rd_bytes(&r, n->length);
    return ote_rd_end(&r);
}

ote_status_t ote_ctl_notify_batch_encode(const ote_ctl_notify_batch_t *m, ote_buf_t *out)
{
    size_t start = out->len;

    if (m->count == 0 || m->count > OTE_CTL_NOTIFY_BATCH_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u64(out, m->sender_key);
    ote_buf_put_u64(out, m->target_instance);
    ote_buf_put_str8(out, m->from);
    ote_buf_put_u16(out, (uint16_t)m->count);
    for (size_t i = 0; i < m->count; i++) {
        if (m->items[i].length > OTE_NOTIFY_MAX || (i > 0 && m->items[i].seq <= m->items[i - 1].seq))
            return OTE_ERR_INVALID_PARAM;
        ote_buf_put_u64(out, m->items[i].seq);
        ote_buf_put_u32(out, (uint32_t)m->items[i].length);
        ote_buf_put(out, m->items[i].data, m->items[i].length);
    }
    if (ote_buf_status(out) == OTE_OK && out->len - start > OTE_CTL_NOTIFY_BATCH_MAX_LEN)
        return OTE_ERR_INVALID_PARAM;
    return ote_buf_status(out);
}

ote_status_t ote_ctl_notify_batch_decode(const uint8_t *buf, size_t len, ote_ctl_notify_batch_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};

    if (len > OTE_CTL_NOTIFY_BATCH_MAX_LEN)
        return OTE_ERR_PROTOCOL;
    m->sender_key = ote_rd_u64(&r);
    m->target_instance = ote_rd_u64(&r);
    ote_rd_str8(&r, m->from, sizeof(m->from));
    m->count = ote_rd_u16(&r);
    /* A count the bytes cannot hold is refused before any item is read. */
    if (r.failed || m->count == 0 || m->count > OTE_CTL_NOTIFY_BATCH_MAX ||
        m->count > r.left / OTE_CTL_NOTIFY_ITEM_HDR_LEN)
        return OTE_ERR_PROTOCOL;
    for (size_t i = 0; i < m->count; i++) {
        ote_ctl_notify_item_t *it = &m->items[i];

        it->seq    = ote_rd_u64(&r);
        it->length = ote_rd_u32(&r);
        if (r.failed || it->length > OTE_NOTIFY_MAX || it->seq == 0 ||
            (i > 0 && it->seq <= m->items[i - 1].seq))
            return OTE_ERR_PROTOCOL;
        it->data = ote_rd_bytes(&r, it->length);
        if (r.failed)
            return OTE_ERR_PROTOCOL;
    }
    return ote_rd_end(&r);
}

ote_status_t ote_ctl_notify_batch_ack_encode(ote_status_t status, size_t queued, uint8_t out[6])
{
    if (queued > OTE_CTL_NOTIFY_BATCH_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_put_u32(out, (uint32_t)status);
    ote_put_u16(out + 4, (uint16_t)queued);
    return OTE_OK;
}

ote_status_t ote_ctl_notify_batch_ack_decode(const uint8_t *buf, size_t len,
                                             ote_status_t *status_p, size_t *queued_p)
{
    int32_t s;
    size_t q;

    if (len != 6)
        return OTE_ERR_PROTOCOL;
    s = (int32_t)ote_get_u32(buf);
    q = ote_get_u16(buf + 4);
    /* Only what a receiver answers (ote_engine_notif_push_batch). */
    if ((s != OTE_OK && s != OTE_ERR_BUSY && s != OTE_ERR_NO_MEMORY &&
         !(s == OTE_ERR_PEER_RESTARTED && q == 0)) ||
        q > OTE_CTL_NOTIFY_BATCH_MAX)
        return OTE_ERR_PROTOCOL;
    *status_p = (ote_status_t)s;
    *queued_p = q;
    return OTE_OK;
}

ote_status_t ote_ctl_status_decode(const uint8_t *buf, size_t len, ote_status_t *status_p)
{
    int32_t s;

    if (len != 4)
        return OTE_ERR_PROTOCOL;
    s = (int32_t)ote_get_u32(buf);
    if (!ote_status_is_known(s))
        return OTE_ERR_PROTOCOL;
    *status_p = (ote_status_t)s;
    return OTE_OK;
}

ote_status_t ote_ctl_connect_encode(const ote_ctl_connect_t *m, ote_buf_t *out)
{
    ote_buf_put_u8(out, m->op);
    ote_buf_put_u64(out, m->initiator);
    ote_buf_put_u64(out, m->target);
    if (m->op == OTE_CTL_CONNECT_OP_CONNECT) {
        if (m->addr_len > OTE_TL_ADDR_MAX)
            return OTE_ERR_INVALID_PARAM;
        ote_buf_put_u64(out, m->conn_id);
        ote_buf_put_u16(out, m->worker);
        ote_buf_put_str8(out, m->tl_name);
        ote_buf_put_str8(out, m->dev_name);
        ote_buf_put_u16(out, (uint16_t)m->addr_len);
        if (m->addr_len)
            ote_buf_put(out, m->addr, m->addr_len);
    } else if (m->op == OTE_CTL_CONNECT_OP_RELEASE) {
        if (m->num_ids == 0 || m->num_ids > OTE_CTL_CONNECT_MAX_IDS)
            return OTE_ERR_INVALID_PARAM;
        ote_buf_put_u16(out, (uint16_t)m->num_ids);
        for (size_t i = 0; i < m->num_ids; i++)
            ote_buf_put_u64(out, m->ids[i]);
    } else {
        return OTE_ERR_INVALID_PARAM;
    }
    return ote_buf_status(out);
}

ote_status_t ote_ctl_connect_decode(const uint8_t *buf, size_t len, ote_ctl_connect_t *m)
{
    ote_rd_t r = {.p = buf, .left = len};

    m->op        = ote_rd_u8(&r);
    m->initiator = ote_rd_u64(&r);
    m->target    = ote_rd_u64(&r);
    if (r.failed)
        return OTE_ERR_PROTOCOL;
    if (m->op == OTE_CTL_CONNECT_OP_CONNECT) {
        m->conn_id = ote_rd_u64(&r);
        m->worker  = ote_rd_u16(&r);
        ote_rd_str8(&r, m->tl_name, sizeof(m->tl_name));
        ote_rd_str8(&r, m->dev_name, sizeof(m->dev_name));
        m->addr_len = ote_rd_u16(&r);
        if (r.failed || m->addr_len > OTE_TL_ADDR_MAX)
            return OTE_ERR_PROTOCOL;
        m->addr    = ote_rd_bytes(&r, m->addr_len);
        m->num_ids = 0;
    } else if (m->op == OTE_CTL_CONNECT_OP_RELEASE) {
        m->num_ids = ote_rd_u16(&r);
        if (r.failed || m->num_ids == 0 || m->num_ids > OTE_CTL_CONNECT_MAX_IDS)
            return OTE_ERR_PROTOCOL;
        for (size_t i = 0; i < m->num_ids; i++)
            m->ids[i] = ote_rd_u64(&r);
        m->addr     = NULL;
        m->addr_len = 0;
    } else {
        return OTE_ERR_PROTOCOL;
    }
    return ote_rd_end(&r);
}

ote_status_t ote_ctl_connect_ack_encode(ote_status_t status, const void *addr, size_t addr_len,
                                        ote_buf_t *out)
{
    if (addr_len > OTE_TL_ADDR_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u32(out, (uint32_t)status);
    ote_buf_put_u16(out, (uint16_t)addr_len);
    if (addr_len)
        ote_buf_put(out, addr, addr_len);
    return ote_buf_status(out);
}

ote_status_t ote_ctl_connect_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                        const uint8_t **addr_p, size_t *addr_len_p)
{
    ote_rd_t r = {.p = buf, .left = len};
    int32_t s  = (int32_t)ote_rd_u32(&r);
    size_t alen = ote_rd_u16(&r);
    const uint8_t *a;

    /* INPROGRESS is no answer: a segment open would return it with no handle. */
    if (r.failed || alen > OTE_TL_ADDR_MAX || !ote_status_is_known(s) || s == OTE_INPROGRESS)
        return OTE_ERR_PROTOCOL;
    a = ote_rd_bytes(&r, alen);
    if (ote_rd_end(&r) != OTE_OK)
        return OTE_ERR_PROTOCOL;
    *status_p   = (ote_status_t)s;
    *addr_p     = a;
    *addr_len_p = alen;
    return OTE_OK;
}

/*
 * Core's own control message types: a request the listener accepts (its
 * largest payload) or a response that only travels back; the protocols'
 * rows are in their services. A header of a type without a row does not
 * decode; test/unit/core/test_codec checks that every type has one row.
 */
#define CTL_REQ(t, max) [t] = OTE_CTL_TYPE_REQUEST(t, max)
#define CTL_RESP(t)     [t] = OTE_CTL_TYPE_RESPONSE(t)
static const ote_ctl_type_info_t ctl_types[OTE_CTL_CORE_TYPE_MAX + 1] = {
    CTL_REQ(OTE_CTL_GET_DESC, 0),
    CTL_RESP(OTE_CTL_DESC),
    CTL_REQ(OTE_CTL_NOTIFY, OTE_CTL_NOTIFY_MAX_LEN),
    CTL_RESP(OTE_CTL_NOTIFY_ACK),
    CTL_REQ(OTE_CTL_AUTH_HELLO, OTE_AUTH_HELLO_LEN),
    /* The initiator's proof is a request, the target's the answer to a hello. */
    [OTE_CTL_AUTH_PROOF] = {.type = OTE_CTL_AUTH_PROOF, .name = "OTE_CTL_AUTH_PROOF",
                            .request = true, .response = true,
                            .request_max = OTE_AUTH_IPROOF_LEN},
    CTL_RESP(OTE_CTL_AUTH_DONE),
    CTL_REQ(OTE_CTL_CONNECT, OTE_CTL_CONNECT_MAX_LEN),
    CTL_RESP(OTE_CTL_CONNECT_ACK),
    CTL_REQ(OTE_CTL_NOTIFY_BATCH, OTE_CTL_NOTIFY_BATCH_MAX_LEN),
    CTL_RESP(OTE_CTL_NOTIFY_BATCH_ACK),
};
#undef CTL_REQ
#undef CTL_RESP

const ote_ctl_type_info_t *ote_ctl_core_type_info(uint8_t type)
{
    if (type == 0 || type > OTE_CTL_CORE_TYPE_MAX || ctl_types[type].name == NULL)
        return NULL;
    return &ctl_types[type];
}

static const ote_ctl_service_t *const proto_services[] = {OTE_CTL_PROTO_SERVICES};

const ote_ctl_type_info_t *ote_ctl_type_info(uint8_t type)
{
    const ote_ctl_service_t *const *svc = proto_services;
    size_t n = sizeof(proto_services) / sizeof(proto_services[0]);

    if (type == 0)
        return NULL;
    if (type <= OTE_CTL_CORE_TYPE_MAX && ctl_types[type].name != NULL)
        return &ctl_types[type];
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < svc[i]->num_types; k++) {
            if (svc[i]->types[k].type == type)
                return &svc[i]->types[k];
        }
    }
    return NULL;
}

ote_status_t ote_ctl_request_max_len(uint8_t type, size_t cfg_max, size_t *max_p)
{
    const ote_ctl_type_info_t *t = ote_ctl_type_info(type);

    if (t == NULL || !t->request)
        return OTE_ERR_PROTOCOL;
    *max_p = t->request_max < cfg_max ? t->request_max : cfg_max;
    return OTE_OK;
}

