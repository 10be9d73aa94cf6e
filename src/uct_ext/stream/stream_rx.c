/*
 * A stream connection's receive path: the state machine that reads
 * headers and payloads, the target's checks and answers, the initiator's
 * completions. Payloads are received straight into their destination with
 * readv(destination, rx buffer), so the bytes of the current message never
 * pass through an intermediate buffer, and headers that follow arrive in
 * the same call.
 */
#include "stream.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* A header and what it carries inline (a WRITEV's table at most) fit the receive buffer. */
_Static_assert(OTE_STREAM_HDR_LEN + OTE_STREAM_WRITEV_MAX * OTE_STREAM_WRITEV_ENTRY_LEN <= OTE_STREAM_RXBUF,
               "receive buffer");

/* Bytes one connection may consume per progress call before others get a turn. */
#define OTE_STREAM_RX_BUDGET (8u * 1024 * 1024)

static void protocol_error(ote_stream_conn_t *c, const char *what)
{
    ote_warn("%s peer %s: %s; closing the connection", OTE_STREAM_CONN_TL(c), c->peer, what);
    ote_stream_conn_fail(c, OTE_ERR_PROTOCOL);
}

void ote_stream_conn_protocol_error(ote_stream_conn_t *c, const char *what)
{
    protocol_error(c, what);
}

static void push_reply(ote_stream_conn_t *c, uint8_t type, uint64_t id, ote_status_t status,
                       uint64_t length, const void *payload, ote_region_t *region)
{
    ote_stream_hdr_t h = {.type = type, .status = status, .id = id, .length = length};

    if (ote_stream_conn_tx_push(c, &h, payload, payload ? length : 0, region, true) != OTE_OK) {
        if (region != NULL)
            ote_mem_region_put(region);
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
    }
}

void ote_stream_conn_reply(ote_stream_conn_t *c, const ote_stream_hdr_t *h)
{
    if (ote_stream_conn_tx_push(c, h, NULL, 0, NULL, false) != OTE_OK)
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
}

/* Target side: answer with AUTH in the message the peer waits for, and close. */
static void conn_refuse(ote_stream_conn_t *c, uint8_t type, uint64_t id)
{
    push_reply(c, type, id, OTE_ERR_AUTH, 0, NULL, NULL);
    ote_stream_conn_flush(c);
    ote_stream_conn_fail(c, OTE_ERR_AUTH);
}

/* Target side with a key: the handshake of base/auth.h before HELLO. */
static void target_auth(ote_stream_conn_t *c, const ote_stream_hdr_t *h, const uint8_t *payload)
{
    ote_auth_t *auth = c->iface->auth;
    ote_status_t status;

    if (c->auth.state == OTE_AUTH_STATE_START) {
        if (h->type == OTE_STREAM_HELLO) {
            ote_warn("%s peer %s: HELLO without authentication; refused", OTE_STREAM_CONN_TL(c),
                     c->peer);
            conn_refuse(c, OTE_STREAM_HELLO_ACK, h->id);
            return;
        }
        if (h->type != OTE_STREAM_AUTH_HELLO) {
            protocol_error(c, "first message is not AUTH_HELLO");
            return;
        }
        status = ote_auth_target_hello(auth, &c->auth, payload, h->length, c->auth_out);
        if (status == OTE_ERR_PROTOCOL) {
            protocol_error(c, "malformed AUTH_HELLO");
            return;
        }
        if (status != OTE_OK) {
            conn_refuse(c, OTE_STREAM_AUTH_DONE, h->id);
            return;
        }
        push_reply(c, OTE_STREAM_AUTH_PROOF, h->id, OTE_OK, OTE_AUTH_TPROOF_LEN, c->auth_out, NULL);
        return;
    }
    if (h->type != OTE_STREAM_AUTH_PROOF) {
        protocol_error(c, "no AUTH_PROOF after AUTH_HELLO");
        return;
    }
    status = ote_auth_target_proof(auth, &c->auth, payload, h->length);
    if (status == OTE_ERR_PROTOCOL) {
        protocol_error(c, "malformed AUTH_PROOF");
        return;
    }
    if (status != OTE_OK) {
        ote_warn("%s peer %s: authentication failed (wrong key?); closing", OTE_STREAM_CONN_TL(c),
                 c->peer);
        conn_refuse(c, OTE_STREAM_AUTH_DONE, h->id);
        return;
    }
    push_reply(c, OTE_STREAM_AUTH_DONE, h->id, OTE_OK, 0, NULL, NULL);
    c->rx_state = OTE_STREAM_RX_HANDSHAKE;
}

ote_status_t ote_stream_host_region_acquire(ote_stream_conn_t *c, uint64_t addr, size_t length,
                                            unsigned access, ote_region_t **region_p)
{
    ote_status_t status =
        ote_mem_region_acquire(c->iface->regions, addr, length, access, region_p);

    if (status == OTE_OK && (*region_p)->mem_type != OTE_MEM_TYPE_HOST) {
        ote_mem_region_put(*region_p);
        *region_p = NULL;
        status    = OTE_ERR_UNSUPPORTED;
    }
    return status;
}

void ote_stream_conn_rx_regions_put(ote_stream_conn_t *c)
{
    for (size_t i = 0; i < c->rx_nregions && c->ep == NULL; i++) {
        if (c->rx_regions[i] != NULL)
            ote_mem_region_put(c->rx_regions[i]);
    }
    c->rx_nregions = 0;
}

/*
 * Target side: a WRITE (n = 1) or WRITEV arrived. Check every range before
 * any of its bytes land, holding one reference per region the ranges fall
 * in; a range refused is read and dropped, and its status answered.
 */
static void target_write(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                         const ote_stream_vec_entry_t *v, size_t n)
{
    c->rx_hdr       = *h;
    c->rx_remaining = h->length;
    c->rx_total     = h->length;
    c->rxv_i        = 0;
    c->rxv_n        = n;
    c->rx_state     = OTE_STREAM_RX_PAYLOAD;
    for (size_t i = 0; i < n; i++) {
        ote_stream_rxv_t *d = &c->rxv[i];
        ote_region_t *r  = c->rx_nregions ? c->rx_regions[c->rx_nregions - 1] : NULL;

        *d = (ote_stream_rxv_t){.dst = (uint8_t *)(uintptr_t)v[i].addr, .len = v[i].length,
                             .status = OTE_OK};
        if (r == NULL ||
            !ote_mem_region_covers(r, v[i].addr, v[i].length, OTE_ACCESS_REMOTE_WRITE)) {
            d->status = ote_stream_host_region_acquire(c, v[i].addr, v[i].length,
                                                       OTE_ACCESS_REMOTE_WRITE, &r);
            if (d->status != OTE_OK) {
                ote_debug("tcp peer %s: WRITE %#llx+%llu refused: %s", c->peer,
                          (unsigned long long)v[i].addr, (unsigned long long)v[i].length,
                          ote_status_string(d->status));
                d->dst = NULL;
                continue;
            }
            c->rx_regions[c->rx_nregions++] = r;
        }
        d->region = (uint8_t)(c->rx_nregions - 1);
    }
}

/*
 * Target side: a READV_REQ arrived. Answer with READV_RESP: the statuses
 * when any entry is refused, then the bytes of every entry allowed, each
 * sent from its region under a reference of its own.
 */
static void target_readv(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                         const ote_stream_vec_entry_t *v, size_t n)
{
    ote_stream_hdr_t resp = {.type = OTE_STREAM_READV_RESP, .status = OTE_OK, .id = h->id,
                             .addr = n};
    uint8_t st[OTE_STREAM_WRITEV_MAX * OTE_STREAM_WRITEV_STATUS_LEN];
    ote_region_t *r[OTE_STREAM_WRITEV_MAX];
    ote_status_t status = OTE_OK;
    size_t i;

    for (i = 0; i < n; i++) {
        ote_status_t e = OTE_OK;

        if (i > 0 && r[i - 1] != NULL &&
            ote_mem_region_reacquire(r[i - 1], v[i].addr, v[i].length, OTE_ACCESS_REMOTE_READ))
            r[i] = r[i - 1];
        else
            e = ote_stream_host_region_acquire(c, v[i].addr, v[i].length,
                                               OTE_ACCESS_REMOTE_READ, &r[i]);
        if (e != OTE_OK) {
            ote_debug("tcp peer %s: READ %#llx+%llu refused: %s", c->peer,
                      (unsigned long long)v[i].addr, (unsigned long long)v[i].length,
                      ote_status_string(e));
            r[i] = NULL;
            if (resp.status == OTE_OK)
                resp.status = e;
        } else {
            resp.length += v[i].length;
        }
        ote_put_u32(st + i * OTE_STREAM_WRITEV_STATUS_LEN, (uint32_t)e);
    }
    if (resp.status == OTE_OK)
        status = ote_stream_conn_tx_push(c, &resp, NULL, 0, NULL, false);
    else
        status = ote_stream_conn_tx_push_long(c, &resp, st, n * OTE_STREAM_WRITEV_STATUS_LEN);
    for (i = 0; i < n && status == OTE_OK; i++) {
        if (r[i] != NULL &&
            (status = ote_stream_conn_tx_push_data(c, (const void *)(uintptr_t)v[i].addr,
                                                (size_t)v[i].length, r[i])) != OTE_OK)
            break;
    }
    if (status != OTE_OK) {
        /* The references not handed to a queued message (r[i] on) are dropped here. */
        for (; i < n; i++) {
            if (r[i] != NULL)
                ote_mem_region_put(r[i]);
        }
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
    }
}

/*
 * Target side: a header arrived (with its payload, for handshake messages;
 * with its table, for WRITEV and READV_REQ).
 */
static void target_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h, const uint8_t *payload)
{
    ote_stream_iface_t *iface = c->iface;
    ote_stream_vec_entry_t v[OTE_STREAM_WRITEV_MAX];
    ote_region_t *region;
    ote_status_t status;
    ote_stream_hdr_t ack;

    if (c->rx_state == OTE_STREAM_RX_AUTH) {
        target_auth(c, h, payload);
        return;
    }
    if (c->rx_state == OTE_STREAM_RX_HANDSHAKE) {
        if (h->type == OTE_STREAM_AUTH_HELLO) {
            /* The initiator has a key and we have none: it cannot verify us. */
            ote_warn("%s peer %s wants to authenticate but this engine has no OTE_AUTH_KEY; "
                     "refused", OTE_STREAM_CONN_TL(c), c->peer);
            conn_refuse(c, OTE_STREAM_AUTH_DONE, h->id);
            return;
        }
        if (h->type != OTE_STREAM_HELLO) {
            protocol_error(c, "first message is not HELLO");
            return;
        }
        if (h->addr != iface->instance_id) {
            /* The initiator holds a descriptor of an earlier instance. */
            push_reply(c, OTE_STREAM_HELLO_ACK, h->id, OTE_ERR_NOT_FOUND, 0, NULL, NULL);
            ote_stream_conn_flush(c);
            ote_stream_conn_fail(c, OTE_ERR_NOT_FOUND);
            return;
        }
        /* The tcp component takes WRITEV; by reference, small WRITEs and READ_REQs. */
        ack = (ote_stream_hdr_t){.type = OTE_STREAM_HELLO_ACK, .id = h->id,
                              .addr = iface->hooks->ref_handle == NULL
                                          ? OTE_STREAM_CAP_WRITEV
                                          : OTE_STREAM_CAP_INLINE_WRITE | OTE_STREAM_CAP_INLINE_READ};
        ote_stream_conn_reply(c, &ack);
        c->rx_state           = OTE_STREAM_RX_HDR;
        c->handshake_deadline = 0;
        return;
    }
    if (iface->hooks->ref_handle != NULL) {
        if ((h->type == OTE_STREAM_WRITE || h->type == OTE_STREAM_READ_REQ) &&
            h->length <= OTE_STREAM_INLINE_MAX) {
            /* A small write or read by value: the requests before it are answered first. */
            if (c->ref_npending)
                iface->hooks->ref_flush(c);
            if (c->dead)
                return;
        } else {
            /* By reference: no other bytes travel on this connection. */
            if (h->type != OTE_STREAM_PUT_REF && h->type != OTE_STREAM_GET_REF &&
                h->type != OTE_STREAM_PROBE &&
                !(iface->hooks->fd_passing &&
                  (h->type == OTE_STREAM_MAP || h->type == OTE_STREAM_UNMAP_ACK))) {
                protocol_error(c, "unexpected message type on a by-reference connection");
                return;
            }
            iface->hooks->ref_handle(c, h,
                                     ote_stream_hdr_inline_len(h) >= OTE_STREAM_REF_TRAILER_LEN
                                     ? ote_get_u64(payload)
                                     : 0);
            return;
        }
    }
    switch (h->type) {
    case OTE_STREAM_WRITE:
        v[0] = (ote_stream_vec_entry_t){.addr = h->addr, .length = h->length};
        target_write(c, h, v, 1);
        break;
    case OTE_STREAM_WRITEV:
    case OTE_STREAM_READV_REQ:
        if (ote_stream_vec_decode(h, payload, iface->cfg.max_msg, v) != OTE_OK) {
            protocol_error(c, "malformed vector table");
            return;
        }
        if (h->type == OTE_STREAM_WRITEV)
            target_write(c, h, v, (size_t)h->addr);
        else
            target_readv(c, h, v, (size_t)h->addr);
        break;
    case OTE_STREAM_READ_REQ:
        status = ote_stream_host_region_acquire(c, h->addr, h->length, OTE_ACCESS_REMOTE_READ,
                                                &region);
        if (status == OTE_OK) {
            push_reply(c, OTE_STREAM_READ_RESP, h->id, OTE_OK, h->length,
                       (const void *)(uintptr_t)h->addr, region);
        } else {
            ote_debug("tcp peer %s: READ %#llx+%llu refused: %s", c->peer,
                      (unsigned long long)h->addr, (unsigned long long)h->length,
                      ote_status_string(status));
            push_reply(c, OTE_STREAM_READ_RESP, h->id, status, 0, NULL, NULL);
        }
        break;
    default:
        protocol_error(c, "unexpected message type from initiator");
        break;
    }
}

/* Initiator side: end the n oldest operations, each with its status st[i]. */
static void initiator_complete(ote_stream_conn_t *c, const ote_status_t *st, size_t n)
{
    /* A completion may close the connection, which fails what is left. */
    for (size_t i = 0; i < n && !c->dead; i++) {
        ote_stream_op_t done = ote_stream_conn_op_pop(c);

        done.comp->func(done.comp, st[i]);
    }
}

/*
 * Initiator side: the payload about to arrive goes to these n operations
 * (the oldest), each with its status (not OK: none of its bytes come);
 * their local regions guard the receive (rx_dst_begin), without references
 * of their own: the operations hold theirs.
 */
static void initiator_expect(ote_stream_conn_t *c, const ote_stream_hdr_t *h, size_t n,
                             const ote_status_t *st)
{
    c->rx_hdr       = *h;
    c->rxv_i        = 0;
    c->rxv_n        = n;
    c->rx_nregions  = 0;
    c->rx_remaining = h->length;
    c->rx_total     = h->length;
    c->rx_state     = OTE_STREAM_RX_PAYLOAD;
    for (size_t i = 0; i < n; i++) {
        const ote_stream_op_t *op = &c->ops[(c->ops_head + i) & (c->ops_cap - 1)];
        ote_stream_rxv_t *d       = &c->rxv[i];
        size_t k               = 0;

        *d = (ote_stream_rxv_t){.dst = st[i] == OTE_OK ? op->local : NULL,
                             .len = st[i] == OTE_OK ? op->length : 0, .status = st[i],
                             .region = UINT8_MAX};
        if (d->dst == NULL || op->local_region == NULL)
            continue;
        while (k < c->rx_nregions && c->rx_regions[k] != op->local_region)
            k++;
        if (k == c->rx_nregions)
            c->rx_regions[c->rx_nregions++] = op->local_region;
        d->region = (uint8_t)k;
    }
}

/*
 * Initiator side: a WRITEV_ACK or READV_RESP answers the n oldest
 * operations, the WRITEs or READ_REQs merged into one WRITEV or READV_REQ
 * (the first one's id), with a status each when any failed (trailer). A
 * WRITEV_ACK's length is all their bytes on success; a READV_RESP's the
 * bytes of those read, which follow it in order.
 */
static void initiator_vec_answer(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                 const uint8_t *trailer)
{
    bool read  = h->type == OTE_STREAM_READV_RESP;
    uint8_t of = read ? OTE_STREAM_READ_REQ : OTE_STREAM_WRITE;
    ote_status_t st[OTE_STREAM_WRITEV_MAX];
    uint64_t sum = 0;

    if (h->addr > c->ops_count) {
        protocol_error(c, "an answer to more requests than are outstanding");
        return;
    }
    if (h->status != OTE_OK && ote_stream_vec_status_decode(h, trailer, st) != OTE_OK) {
        protocol_error(c, "malformed statuses in a vector's answer");
        return;
    }
    for (size_t i = 0; i < h->addr; i++) {
        const ote_stream_op_t *op = &c->ops[(c->ops_head + i) & (c->ops_cap - 1)];

        if (op->type != of || (i == 0 && op->id != h->id)) {
            protocol_error(c, "response does not match the oldest request");
            return;
        }
        if (!ote_stream_conn_op_sent(c, op)) {
            protocol_error(c, "an answer to a request that has not been sent whole");
            return;
        }
        if (h->status == OTE_OK)
            st[i] = OTE_OK;
        if (st[i] == OTE_OK)
            sum += op->length;
    }
    /* A failed WRITEV_ACK carries no length (the decoder saw to it). */
    if ((read || h->status == OTE_OK) && h->length != sum) {
        protocol_error(c, "response length differs from the requests");
        return;
    }
    if (read && h->length > 0)
        initiator_expect(c, h, (size_t)h->addr, st);
    else
        initiator_complete(c, st, (size_t)h->addr);
}

/* Initiator side: a header arrived. */
static void initiator_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                             const uint8_t *trailer)
{
    ote_stream_op_t *op = ote_stream_conn_op_head(c);
    bool by_ref      = c->iface->hooks->ref_handle != NULL;
    ote_stream_op_t done;
    bool match;

    if (c->iface->hooks->fd_passing && h->type == OTE_STREAM_UNMAP) {
        c->iface->hooks->initiator_hook(c, h, trailer);
        return;
    }
    if (c->iface->hooks->fd_passing && h->type == OTE_STREAM_MAP_ACK) {
        if (op == NULL || op->type != OTE_STREAM_MAP || op->id != h->id) {
            protocol_error(c, "MAP_ACK does not match the oldest request");
            return;
        }
        c->iface->hooks->initiator_hook(c, h, trailer);
        return;
    }
    if (!by_ref && (h->type == OTE_STREAM_WRITEV_ACK || h->type == OTE_STREAM_READV_RESP)) {
        initiator_vec_answer(c, h, trailer);
        return;
    }
    if (h->type != OTE_STREAM_WRITE_ACK && h->type != OTE_STREAM_READ_RESP &&
        (!by_ref || h->type != OTE_STREAM_REF_ACK)) {
        protocol_error(c, "unexpected message type from target");
        return;
    }
    if (by_ref && h->type == OTE_STREAM_REF_ACK)
        match = op != NULL && (op->type == OTE_STREAM_PUT_REF || op->type == OTE_STREAM_GET_REF);
    else
        match = op != NULL &&
                op->type == (h->type == OTE_STREAM_WRITE_ACK ? OTE_STREAM_WRITE : OTE_STREAM_READ_REQ);
    if (!match || op->id != h->id) {
        protocol_error(c, "response does not match the oldest request");
        return;
    }
    if (!ote_stream_conn_op_sent(c, op)) {
        /* Its WRITE's payload may still be queued: completing it would free it under the queue. */
        protocol_error(c, "an answer to a request that has not been sent whole");
        return;
    }
    if (h->status == OTE_OK && h->length != op->length) {
        protocol_error(c, "response length differs from the request");
        return;
    }
    if (h->type == OTE_STREAM_READ_RESP && h->status == OTE_OK) {
        const ote_status_t ok = OTE_OK;

        initiator_expect(c, h, 1, &ok);
        return;
    }
    done = ote_stream_conn_op_pop(c);
    done.comp->func(done.comp, h->status == OTE_OK ? OTE_OK : (ote_status_t)h->status);
}

/* Target side: answer the WRITE or WRITEV just received. */
static void target_answer(ote_stream_conn_t *c)
{
    ote_stream_hdr_t ack = {.type = OTE_STREAM_WRITE_ACK, .status = OTE_OK, .id = c->rx_hdr.id,
                         .length = c->rx_total};
    uint8_t st[OTE_STREAM_WRITEV_MAX * OTE_STREAM_WRITEV_STATUS_LEN];

    for (size_t i = 0; i < c->rxv_n; i++) {
        ote_put_u32(st + i * OTE_STREAM_WRITEV_STATUS_LEN, (uint32_t)c->rxv[i].status);
        if (c->rxv[i].status != OTE_OK && ack.status == OTE_OK) {
            ack.status = c->rxv[i].status;
            ack.length = 0;
        }
    }
    if (c->rx_hdr.type != OTE_STREAM_WRITEV) {
        ote_stream_conn_reply(c, &ack);
        return;
    }
    ack.type = OTE_STREAM_WRITEV_ACK;
    ack.addr = c->rxv_n;
    if (ack.status == OTE_OK)
        ote_stream_conn_reply(c, &ack);
    else if (ote_stream_conn_tx_push_long(c, &ack, st, c->rxv_n * OTE_STREAM_WRITEV_STATUS_LEN) !=
             OTE_OK)
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
}

static void payload_done(ote_stream_conn_t *c)
{
    ote_status_t st[OTE_STREAM_WRITEV_MAX];

    c->rx_state = OTE_STREAM_RX_HDR;
    if (c->ep == NULL) {
        ote_stream_conn_rx_regions_put(c);
        target_answer(c);
        return;
    }
    ote_stream_conn_rx_regions_put(c);
    for (size_t i = 0; i < c->rxv_n; i++)
        st[i] = c->rxv[i].status;
    initiator_complete(c, st, c->rxv_n);
}

/*
 * The regions we are receiving into may be deregistered between two reads;
 * then the rest of what was going to them is dropped and their requests end
 * with NOT_REGISTERED (on the target: the initiator is told), so nothing
 * lands after deregistration. rx_regions holds the regions of rxv: on the
 * target with a reference each (a region found deregistered is dropped),
 * on the initiator those of the operations being answered.
 */
static void rx_dst_begin(ote_stream_conn_t *c)
{
    for (size_t k = 0; k < c->rx_nregions; k++) {
        if (c->rx_regions[k] == NULL || ote_mem_region_access_begin(c->rx_regions[k]))
            continue;
        for (size_t i = c->rxv_i; i < c->rxv_n; i++) {
            if (c->rxv[i].dst != NULL && c->rxv[i].region == k) {
                c->rxv[i].dst    = NULL;
                c->rxv[i].status = OTE_ERR_NOT_REGISTERED;
            }
        }
        if (c->ep == NULL)
            ote_mem_region_put(c->rx_regions[k]);
        c->rx_regions[k] = NULL;
    }
}

static void rx_dst_end(ote_stream_conn_t *c)
{
    for (size_t k = 0; k < c->rx_nregions; k++) {
        if (c->rx_regions[k] != NULL)
            ote_mem_region_access_end(c->rx_regions[k]);
    }
}

/* len payload bytes have arrived: copied from src (unless NULL) into rxv, or dropped. */
static void rxv_advance(ote_stream_conn_t *c, const uint8_t *src, size_t len)
{
    while (len > 0) {
        ote_stream_rxv_t *d = &c->rxv[c->rxv_i];
        size_t t         = len < d->len ? len : d->len;

        if (d->dst != NULL) {
            if (src != NULL)
                memcpy(d->dst, src, t);
            d->dst += t;
        }
        if (src != NULL)
            src += t;
        d->len -= t;
        len -= t;
        if (d->len == 0)
            c->rxv_i++;
    }
}

/*
 * The iovec of a readv for the rest of the payload: each destination (one
 * element for destinations that follow each other in memory), the discard
 * buffer for bytes dropped (OTE_STREAM_RXBUF at most, and nothing after
 * it), then the receive buffer (rx_cap bytes) for what follows. Returns the count;
 * *want_p: the payload bytes it asks for.
 */
static int rxv_iov(ote_stream_conn_t *c, struct iovec *iov, size_t *want_p)
{
    size_t k = 0, want = 0;

    for (size_t i = c->rxv_i; i < c->rxv_n; i++) {
        const ote_stream_rxv_t *d = &c->rxv[i];
        size_t len = d->dst != NULL || d->len <= OTE_STREAM_RXBUF ? d->len : OTE_STREAM_RXBUF;

        want += len;
        if (d->dst != NULL && k > 0 &&
            (uint8_t *)iov[k - 1].iov_base + iov[k - 1].iov_len == d->dst) {
            iov[k - 1].iov_len += len;
            continue;
        }
        iov[k].iov_base = d->dst != NULL ? (void *)d->dst : c->iface->discard;
        iov[k].iov_len  = len;
        k++;
        if (len < d->len)
            break;
    }
    iov[k].iov_base = c->rxbuf;
    iov[k].iov_len  = c->rx_cap;
    *want_p = want;
    return (int)k + 1;
}

/*
 * recv() that keeps the descriptors passed along (SCM_RIGHTS), in order.
 * Only a target answering MAP sends any: descriptors from an initiator, more
 * than OTE_STREAM_RX_FDS unclaimed, or a truncated control message close the
 * connection (-1, errno EPROTO).
 */
static ssize_t recv_fds(ote_stream_conn_t *c, void *buf, size_t len)
{
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(OTE_STREAM_RX_FDS * sizeof(int))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    bool bad = false;
    ssize_t n = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    if (n < 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm)) {
        size_t k;

        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
            bad = true;
            continue;
        }
        k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            if (c->ep == NULL || c->rx_nfds == OTE_STREAM_RX_FDS) {
                close(fd);
                bad = true;
            } else {
                c->rx_fds[c->rx_nfds++] = fd;
            }
        }
    }
    if (bad || (msg.msg_flags & MSG_CTRUNC)) {
        protocol_error(c, "unexpected file descriptors");
        errno = EPROTO;
        return -1;
    }
    return n;
}

/*
 * The receive buffer for the next read, with room for need bytes from its
 * start (a header and its inline bytes): OTE_STREAM_RXBUF_FIRST bytes at
 * first, twice as many after a read that filled it, at most
 * OTE_STREAM_RXBUF (need never exceeds it). Its bytes are kept. False:
 * out of memory, the connection is closed.
 */
static bool rx_reserve(ote_stream_conn_t *c, size_t need)
{
    size_t cap = c->rx_cap != 0 ? c->rx_cap : OTE_STREAM_RXBUF_FIRST;
    uint8_t *buf;

    if (c->rx_full)
        cap *= 2;
    while (cap < need)
        cap *= 2;
    if (cap > OTE_STREAM_RXBUF)
        cap = OTE_STREAM_RXBUF;
    c->rx_full = false;
    if (cap == c->rx_cap)
        return true;
    buf = realloc(c->rxbuf, cap);
    if (buf == NULL) {
        ote_warn("%s peer %s: no memory for a %zu-byte receive buffer; closing the connection",
                 OTE_STREAM_CONN_TL(c), c->peer, cap);
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
        return false;
    }
    c->rxbuf  = buf;
    c->rx_cap = cap;
    /* Freed by the timeout check once the connection is idle. */
    ote_stream_iface_watch(c->iface, c);
    return true;
}

void ote_stream_conn_rx_idle(ote_stream_conn_t *c)
{
    if (!c->rx_recent && c->rxbuf != NULL && c->rx_off == c->rx_len && !c->rx_again) {
        free(c->rxbuf);
        c->rxbuf  = NULL;
        c->rx_cap = 0;
        c->rx_off = c->rx_len = 0;
        c->rx_full = false;
    }
    c->rx_recent = false;
}

/*
 * Target side, tcp: the epoll set reports the connection once `bytes`
 * bytes wait in its socket (SO_RCVLOWAT; a reset or a close still at
 * once). While a payload is arriving, one report and one readv per
 * OTE_STREAM_RX_LOWAT_MAX bytes instead of one for every piece that
 * arrived since the last look; back to 1 before a header is waited for.
 * The mark is never above the payload bytes still to come (ote_stream_conn_rx),
 * or the last of them would not be reported. False where the mark could not
 * be lowered and the connection was failed.
 */
static bool rx_lowat(ote_stream_conn_t *c, size_t bytes)
{
    int v = bytes < OTE_STREAM_RX_LOWAT_MAX ? (int)bytes : OTE_STREAM_RX_LOWAT_MAX;

    if (c->rx_lowat < 0 || c->rx_lowat == v)
        return true;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) != 0) {
        if (c->rx_lowat > 1) {
            /* The socket keeps a mark that what comes next may never reach. */
            ote_warn("%s peer %s: SO_RCVLOWAT %d failed (%s); closing the connection",
                     OTE_STREAM_CONN_TL(c), c->peer, v, strerror(errno));
            ote_stream_conn_fail(c, OTE_ERR_IO);
            return false;
        }
        v = -1; /* still at 1: not again on this connection */
    }
    c->rx_lowat = v;
    return true;
}

static void conn_rx(ote_stream_conn_t *c);

void ote_stream_conn_rx(ote_stream_conn_t *c)
{
    conn_rx(c);
    /*
     * Left in a payload: a read that filled its buffers may have emptied
     * the socket without the mark following (it follows reads that come
     * back short), and a mark above the bytes still to come is never
     * reached.
     */
    if (!c->dead && c->rx_state == OTE_STREAM_RX_PAYLOAD && c->rx_lowat > 1 &&
        (size_t)c->rx_lowat > c->rx_remaining)
        rx_lowat(c, c->rx_remaining);
    /* Requests deferred while reading are served now; a closed connection drops them. */
    if (c->ref_npending != 0) {
        if (c->dead)
            c->ref_npending = 0;
        else
            c->iface->hooks->ref_flush(c);
    }
}

static void conn_rx(ote_stream_conn_t *c)
{
    size_t budget = OTE_STREAM_RX_BUDGET;
    /*
     * A read that returned less than it asked for emptied the socket: the
     * next one would only say EAGAIN. The connection's fd is level-triggered
     * in the iface's epoll, so bytes that arrive later are announced.
     */
    bool drained = false;
    ote_stream_hdr_t h;
    ssize_t n;

    c->rx_again  = false;
    c->rx_recent = true;
    while (!c->dead) {
        if (budget == 0) {
            /*
             * Give other connections a turn. Bytes already read ahead into
             * rxbuf will not raise another epoll event: ask for a rerun.
             */
            c->rx_again              = true;
            c->iface->rx_again_conns = true;
            return;
        }
        size_t avail = c->rx_len - c->rx_off;

        if (c->rx_state == OTE_STREAM_RX_HDR || c->rx_state == OTE_STREAM_RX_HANDSHAKE ||
            c->rx_state == OTE_STREAM_RX_AUTH) {
            size_t need = OTE_STREAM_HDR_LEN; /* bytes of the next message the buffer must hold */

            if (c->rx_lowat > 1 && !rx_lowat(c, 1))
                return;
            if (c->ep == NULL &&
                (c->tx_count >= OTE_STREAM_TX_PAUSE || c->tx_fds >= OTE_STREAM_TX_FDS_PAUSE)) {
                ote_stream_conn_set_rx_paused(c, true);
                return;
            }
            if (avail >= OTE_STREAM_HDR_LEN) {
                size_t inline_len;

                if (ote_stream_hdr_decode(c->rxbuf + c->rx_off, avail, c->iface->cfg.max_msg, &h) !=
                    OTE_OK) {
                    protocol_error(c, "malformed message header");
                    return;
                }
                /*
                 * Handshake payloads, by-reference trailers, WRITEV tables
                 * and WRITEV_ACK statuses are small and handled with their
                 * header.
                 */
                inline_len = ote_stream_hdr_inline_len(&h);
                if ((h.type == OTE_STREAM_AUTH_HELLO || h.type == OTE_STREAM_AUTH_PROOF) &&
                    (c->ep != NULL || c->rx_state == OTE_STREAM_RX_HDR)) {
                    protocol_error(c, "handshake message on an open connection");
                    return;
                }
                if (avail >= OTE_STREAM_HDR_LEN + inline_len) {
                    const uint8_t *payload = c->rxbuf + c->rx_off + OTE_STREAM_HDR_LEN;

                    c->rx_off += OTE_STREAM_HDR_LEN + inline_len;
                    if (c->ep == NULL)
                        target_handle(c, &h, payload);
                    else
                        initiator_handle(c, &h, payload);
                    continue;
                }
                need = OTE_STREAM_HDR_LEN + inline_len;
            }
            if (drained)
                return;
            if (c->rx_off > 0) {
                memmove(c->rxbuf, c->rxbuf + c->rx_off, avail);
                c->rx_off = 0;
                c->rx_len = avail;
            }
            if (!rx_reserve(c, need))
                return;
            if (c->iface->hooks->fd_passing)
                n = recv_fds(c, c->rxbuf + c->rx_len, c->rx_cap - c->rx_len);
            else
                n = recv(c->fd, c->rxbuf + c->rx_len, c->rx_cap - c->rx_len, MSG_DONTWAIT);
            drained    = n >= 0 && (size_t)n < c->rx_cap - c->rx_len;
            c->rx_full = n > 0 && !drained;
        } else {
            size_t take;

            if (avail > 0) {
                take = avail < c->rx_remaining ? avail : c->rx_remaining;
                rx_dst_begin(c);
                rxv_advance(c, c->rxbuf + c->rx_off, take);
                rx_dst_end(c);
                c->rx_off += take;
                c->rx_remaining -= take;
                if (c->rx_remaining == 0)
                    payload_done(c);
                continue;
            }
            if (drained)
                return;
            {
                struct iovec iov[OTE_STREAM_WRITEV_MAX + 1];
                size_t want;
                int k;

                c->rx_off = c->rx_len = 0;
                if (!rx_reserve(c, 0))
                    return;
                rx_dst_begin(c);
                k = rxv_iov(c, iov, &want);
                n = readv(c->fd, iov, k);
                rx_dst_end(c);
                drained    = n >= 0 && (size_t)n < want + c->rx_cap;
                c->rx_full = n > 0 && !drained;
                if (n > 0) {
                    take = (size_t)n < want ? (size_t)n : want;
                    rxv_advance(c, NULL, take);
                    c->rx_remaining -= take;
                    c->rx_len = (size_t)n - take;
                    budget    = budget > (size_t)n ? budget - (size_t)n : 0;
                    if (c->rx_remaining == 0)
                        payload_done(c);
                    else if (drained && c->rx_lowat > 0 &&
                             !rx_lowat(c, c->rx_remaining > c->rx_len
                                              ? c->rx_remaining - c->rx_len /* not read ahead */
                                              : 1))
                        return;
                    continue;
                }
            }
        }
        if (n > 0) {
            c->rx_len += (size_t)n;
            budget = budget > (size_t)n ? budget - (size_t)n : 0;
            continue;
        }
        if (n == 0) {
            ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
        return;
    }
}
