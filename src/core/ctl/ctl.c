/*
 * Control-plane listener: one thread, one epoll. Serves descriptor fetches,
 * notifications and to-ep connection requests (the core service below)
 * and the protocols' requests (STAGE, PUTBACK, FILE_IO: their services in
 * proto/, ctl_target.h), each request type through its row of the handler
 * table (ctl_services); the protocols' services reach the engine through
 * the host this file fills (ctl_host_init). Each connection first proves it
 * holds the key (when the engine has one, see auth.h), then sends
 * requests: a header, then at most the payload its type allows. Anything
 * malformed closes that connection with a log line and the listener
 * carries on.
 *
 * The thread never blocks on a peer: a reply that does not fit in the
 * socket is kept and sent as the socket drains, and the connection is not
 * read meanwhile. A connection that has not completed its handshake within
 * OTE_HANDSHAKE_TIMEOUT_MS, or whose reply has made no progress for
 * CTL_REPLY_TIMEOUT_NS (or has not drained within CTL_REPLY_MAX_NS), is
 * reset. Each connection's kernel send buffer is kept small
 * (CTL_SNDBUF): a peer that does not read stalls us after that much, not
 * after the megabytes the kernel would otherwise take on its behalf.
 */
#include "base/auth.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"
#include "core/xfer/batch.h"
#include "ctl.h"
#include "ctl_int.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "core/segment/fexport.h"
#include "core/xfer/notify.h"
#include "core/segment/segment.h"
#include "core/worker/worker.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/eventfd.h>
#include <unistd.h>

static char listen_tag, stop_tag, done_tag;

static const ote_ctl_service_t ctl_core_service;

/*
 * The services the listener serves: its own, then the protocols'; stopped in this order
 * (FILE_IO by rails and PUTBACK use the segments kept to initiators,
 * closed after every service stopped).
 */
static const ote_ctl_service_t *const ctl_services[] = {
    &ctl_core_service,
    OTE_CTL_PROTO_SERVICES, /* wire/ctl_msg.h: the protocols, registered there */
};
#define NUM_SERVICES (sizeof(ctl_services) / sizeof(ctl_services[0]))
_Static_assert(NUM_SERVICES <= CTL_MAX_SERVICES, "CTL_MAX_SERVICES");

const ote_ctl_service_t *const *ote_ctl_services(size_t *count_p)
{
    *count_p = NUM_SERVICES;
    return ctl_services;
}

/* The handler of type and the index of its service; NULL when none serves it. */
static const ote_ctl_handler_t *handler_find(uint8_t type, size_t *svc_p)
{
    for (size_t i = 0; i < NUM_SERVICES; i++) {
        for (size_t k = 0; k < ctl_services[i]->num_handlers; k++) {
            if (ctl_services[i]->handlers[k].type == type) {
                *svc_p = i;
                return &ctl_services[i]->handlers[k];
            }
        }
    }
    return NULL;
}

const ote_ctl_handler_t *ote_ctl_handler_find(uint8_t type)
{
    size_t i;

    return handler_find(type, &i);
}

void *ote_ctl_service_state(ote_ctl_t *ctl, const ote_ctl_service_t *svc)
{
    for (size_t i = 0; ctl != NULL && i < NUM_SERVICES; i++) {
        if (ctl_services[i] == svc)
            return ctl->svc_state[i];
    }
    return NULL;
}

/* A deadline (0: none) the listener must sweep at (listener thread). */
static void ctl_due(ote_ctl_t *ctl, uint64_t when_ns)
{
    if (when_ns != 0 && when_ns < ctl->next_sweep)
        ctl->next_sweep = when_ns;
}

/* The host's sweep_at: a service's handler set a deadline. */
static void ctl_sweep_at(void *ctx, uint64_t when_ns)
{
    ctl_due(ctx, when_ns);
}

static void conn_drop(ote_ctl_t *ctl, ctl_conn_t *c, bool reset)
{
    epoll_ctl(ctl->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    if (reset)
        ote_socket_abort(c->fd);
    else
        close(c->fd);
    OTE_DLIST_REMOVE(ctl->conns, c);
    ctl->num_conns--;
    for (size_t i = 0; i < NUM_SERVICES; i++) {
        if (ctl_services[i]->conn_gone != NULL)
            ctl_services[i]->conn_gone(&ctl->host, ctl->svc_state[i], c);
    }
    ote_auth_conn_release(ote_engine_facts(ctl->engine)->auth, c->ip);
    free(c->payload);
    free(c->out);
    free(c);
}

void ote_ctl_conn_close(ote_ctl_t *ctl, ctl_conn_t *c)
{
    conn_drop(ctl, c, false);
}

void ote_ctl_conn_set_events(ote_ctl_t *ctl, ctl_conn_t *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};

    epoll_ctl(ctl->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/* The host's conn_hold: c's request is answered later; c is not read until then. */
static void ctl_conn_hold(void *ctx, ote_ctl_conn_t *c, ote_ctl_ticket_t *ticket_p)
{
    ticket_p->conn_id = c->id;
    ticket_p->seq     = c->h.seq;
    c->waiting        = true;
    ote_ctl_conn_set_events(ctx, c, EPOLLRDHUP);
}

/* The host's conn_resume: the held connection, read again, its reply to the ticket's request. */
static ote_ctl_conn_t *ctl_conn_resume(void *ctx, const ote_ctl_ticket_t *ticket)
{
    ote_ctl_t *ctl = ctx;
    ctl_conn_t *c;

    for (c = ctl->conns; c != NULL && c->id != ticket->conn_id; c = c->next)
        ;
    if (c == NULL || !c->waiting)
        return NULL;
    c->waiting = false;
    c->h.seq   = ticket->seq;
    ote_ctl_conn_set_events(ctl, c, EPOLLIN);
    return c;
}

static void ctl_conn_close_op(void *ctx, ote_ctl_conn_t *c)
{
    ote_ctl_conn_close(ctx, c);
}

/* The host's conn_peer_closed: nothing more to read and the peer's FIN is in. */
static bool ctl_conn_peer_closed(void *ctx, ote_ctl_conn_t *c)
{
    char b;

    (void)ctx;
    return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* The host's wake: a service's job ended; the listener calls the answer hooks. */
static void ctl_wake(void *ctx)
{
    ote_ctl_t *ctl = ctx;
    uint64_t one   = 1;

    (void)!write(ctl->done_fd, &one, sizeof(one));
}

/* Send what the socket takes of the pending reply. OTE_OK: all sent or waiting. */
static ote_status_t conn_flush(ote_ctl_t *ctl, ctl_conn_t *c)
{
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n > 0) {
            c->out_sent += (size_t)n;
            if (c->out_deadline != 0)
                c->out_deadline = ote_time_ns() + CTL_REPLY_TIMEOUT_NS;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (c->out_deadline == 0) {
                uint64_t now = ote_time_ns();

                c->out_deadline = now + CTL_REPLY_TIMEOUT_NS;
                c->out_limit    = now + CTL_REPLY_MAX_NS;
                /* Pushed later as the reply progresses: the sweep then looks again. */
                ctl_due(ctl, c->out_deadline);
                ote_ctl_conn_set_events(ctl, c, EPOLLOUT);
            }
            return OTE_OK;
        }
        return OTE_ERR_REMOTE_DISCONNECT;
    }
    if (c->out_deadline != 0)
        ote_ctl_conn_set_events(ctl, c, EPOLLIN);
    free(c->out);
    c->out          = NULL;
    c->out_len      = c->out_sent = 0;
    c->out_deadline = 0;
    return OTE_OK;
}

ote_status_t ote_ctl_reply(ote_ctl_t *ctl, ctl_conn_t *c, uint8_t type, const void *a,
                           size_t alen, const void *b, size_t blen)
{
    ote_ctl_hdr_t h = {.type = type, .length = (uint32_t)(alen + blen), .seq = c->h.seq};
    uint8_t *out    = malloc(OTE_CTL_HDR_LEN + alen + blen);

    if (out == NULL)
        return OTE_ERR_NO_MEMORY;
    ote_ctl_hdr_encode(&h, out);
    if (alen)
        memcpy(out + OTE_CTL_HDR_LEN, a, alen);
    if (blen)
        memcpy(out + OTE_CTL_HDR_LEN + alen, b, blen);
    c->out      = out;
    c->out_len  = OTE_CTL_HDR_LEN + alen + blen;
    c->out_sent = 0;
    return conn_flush(ctl, c);
}

static ote_status_t reply_status(ote_ctl_t *ctl, ctl_conn_t *c, uint8_t type, ote_status_t s)
{
    uint8_t b[4];

    ote_put_u32(b, (uint32_t)s);
    return ote_ctl_reply(ctl, c, type, b, 4, NULL, 0);
}

/* Tell the peer AUTH in the answer it waits for, then hang up. */
static ote_status_t ctl_refuse(ote_ctl_t *ctl, ctl_conn_t *c, uint8_t type)
{
    c->close_after_send = true;
    return reply_status(ctl, c, type, OTE_ERR_AUTH);
}

static ote_status_t handle_auth(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_auth_t *auth = ote_engine_facts(ctl->engine)->auth;
    uint8_t proof[OTE_AUTH_TPROOF_LEN];
    ote_status_t status;

    if (!auth->enabled) {
        /* The peer has a key and we have none: it cannot verify us. */
        ote_warn("control peer %s wants to authenticate but this engine has no "
                 "OTE_AUTH_KEY; refused", c->peer);
        return ctl_refuse(ctl, c, OTE_CTL_AUTH_DONE);
    }
    switch (c->auth.state) {
    case OTE_AUTH_STATE_START:
        if (c->h.type != OTE_CTL_AUTH_HELLO) {
            const ote_ctl_handler_t *h = ote_ctl_handler_find(c->h.type);

            ote_warn("control peer %s: request before authentication; refused", c->peer);
            return ctl_refuse(ctl, c, h != NULL ? h->refuse_type : OTE_CTL_AUTH_DONE);
        }
        status = ote_auth_target_hello(auth, &c->auth, c->payload, c->h.length, proof);
        if (status == OTE_ERR_PROTOCOL)
            return status;
        if (status != OTE_OK)
            return ctl_refuse(ctl, c, OTE_CTL_AUTH_DONE);
        return ote_ctl_reply(ctl, c, OTE_CTL_AUTH_PROOF, proof, sizeof(proof), NULL, 0);
    case OTE_AUTH_STATE_HELLO:
        if (c->h.type != OTE_CTL_AUTH_PROOF) {
            ote_warn("control peer %s: no proof after hello; refused", c->peer);
            return ctl_refuse(ctl, c, OTE_CTL_AUTH_DONE);
        }
        status = ote_auth_target_proof(auth, &c->auth, c->payload, c->h.length);
        if (status == OTE_ERR_PROTOCOL)
            return status;
        if (status != OTE_OK) {
            ote_warn("control peer %s: authentication failed (wrong key?)", c->peer);
            return ctl_refuse(ctl, c, OTE_CTL_AUTH_DONE);
        }
        c->handshake_deadline = 0;
        ote_debug("control peer %s authenticated", c->peer);
        return reply_status(ctl, c, OTE_CTL_AUTH_DONE, OTE_OK);
    default:
        /* A second handshake on an authenticated connection. */
        return OTE_ERR_PROTOCOL;
    }
}

/*
 * CONNECT (to-ep wire-up): create the target side of an initiator's ep on
 * the iface it names, or release such eps. The answer carries a status, so
 * a request that cannot be served keeps the connection.
 */
static ote_status_t handle_connect(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_engine_h e = ctl->engine;
    ote_ctl_connect_t *m = malloc(sizeof(*m));
    uint8_t addr[OTE_TL_ADDR_MAX];
    size_t addr_len = 0;
    ote_buf_t out   = {0};
    ote_status_t status, st = OTE_OK;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_connect_decode(c->payload, c->h.length, m);
    if (status != OTE_OK) {
        free(m);
        return status;
    }
    if (m->target != ote_engine_facts(e)->instance_id) {
        /* The initiator's descriptor is of an earlier instance of this engine. */
        st = OTE_ERR_NOT_FOUND;
    } else if (m->op == OTE_CTL_CONNECT_OP_CONNECT) {
        ote_tl_peer_t peer    = {.instance_id    = m->initiator,
                                 .name           = c->peer,
                                 .local_instance = ote_engine_facts(e)->instance_id,
                                 .timeout_ms     = ote_engine_facts(e)->config.connect_timeout_ms,
                                 .addr_ip        = c->ip};
        ote_tl_iface_t *iface = NULL;

        if (m->worker < ote_engine_facts(e)->num_workers) {
            ote_worker_t *w = &ote_engine_facts(e)->workers[m->worker];

            for (size_t i = 0; i < w->num_ifaces && iface == NULL; i++) {
                if (strcmp(w->ifaces[i]->resource.tl_name, m->tl_name) == 0 &&
                    strcmp(w->ifaces[i]->resource.dev_name, m->dev_name) == 0)
                    iface = w->ifaces[i];
            }
        }
        if (iface == NULL)
            st = OTE_ERR_UNREACHABLE;
        else
            st = iface->ops->ep_accept(iface, &peer, m->conn_id, m->addr, m->addr_len, addr,
                                       sizeof(addr), &addr_len);
        if (st == OTE_ERR_UNSUPPORTED)
            st = OTE_ERR_UNREACHABLE;
        if (st != OTE_OK) {
            addr_len = 0;
            ote_debug("control peer %s: connect on %s/%s refused: %s", c->peer, m->tl_name,
                      m->dev_name, ote_status_string(st));
        }
    } else {
        for (size_t w = 0; w < ote_engine_facts(e)->num_workers; w++) {
            for (size_t i = 0; i < ote_engine_facts(e)->workers[w].num_ifaces; i++) {
                ote_tl_iface_t *iface = ote_engine_facts(e)->workers[w].ifaces[i];

                for (size_t k = 0; k < m->num_ids; k++)
                    iface->ops->ep_release(iface, m->initiator, m->ids[k]);
            }
        }
    }
    status = ote_ctl_connect_ack_encode(st, addr, addr_len, &out);
    if (status == OTE_OK)
        status = ote_ctl_reply(ctl, c, OTE_CTL_CONNECT_ACK, out.data, out.len, NULL, 0);
    free(out.data);
    free(m);
    return status;
}

static void ctl_desc_drop(ote_ctl_t *ctl)
{
    free(ctl->desc_cache.data);
    free(ctl->desc_skel.data);
    ctl->desc_cache = (ote_buf_t){0};
    ctl->desc_skel  = (ote_buf_t){0};
    ctl->desc_valid = false;
}

/*
 * The engine's descriptor for GET_DESC (*d_p, the listener's until the
 * next call): the last one encoded while nothing it says has changed. The
 * region table's generation moves with every region linked or unlinked
 * and every md joined (rkeys); it is read before the regions are encoded,
 * so a change during the encoding makes the next fetch encode again. The
 * rest (transports, mds, exports, names) is encoded without the regions,
 * cheap, and compared byte for byte.
 */
static ote_status_t ctl_desc(ote_ctl_t *ctl, const ote_buf_t **d_p)
{
    ote_engine_h e = ctl->engine;
    ote_buf_t skel = {0}, full = {0};
    uint64_t gen = ote_mem_table_generation(ote_engine_facts(e)->regions);
    ote_status_t status;

    status = ote_engine_facts(e)->svc.desc_skeleton(e, &skel);
    if (status != OTE_OK) {
        free(skel.data);
        return status;
    }
    if (ctl->desc_valid && gen == ctl->desc_gen && skel.len == ctl->desc_skel.len &&
        memcmp(skel.data, ctl->desc_skel.data, skel.len) == 0) {
        free(skel.data);
        *d_p = &ctl->desc_cache;
        return OTE_OK;
    }
    ctl_desc_drop(ctl);
    atomic_fetch_add(&ctl->desc_encodes, 1);
    status = ote_engine_facts(e)->svc.desc_encode(e, &full);
    if (status != OTE_OK) {
        free(skel.data);
        free(full.data);
        return status;
    }
    ctl->desc_cache = full;
    ctl->desc_skel  = skel;
    ctl->desc_gen   = gen;
    ctl->desc_valid = true;
    *d_p            = &ctl->desc_cache;
    return OTE_OK;
}

/* GET_DESC: this engine's descriptor. */
static ote_status_t handle_get_desc(ote_ctl_t *ctl, ctl_conn_t *c)
{
    const ote_buf_t *d = NULL;
    ote_status_t status;
    uint8_t st[4];

    if (c->h.length != 0)
        return OTE_ERR_PROTOCOL;
    atomic_fetch_add(&ctl->desc_served, 1);
    status = ctl_desc(ctl, &d);
    ote_put_u32(st, (uint32_t)status);
    return ote_ctl_reply(ctl, c, OTE_CTL_DESC, st, 4, status == OTE_OK ? d->data : NULL,
                         status == OTE_OK ? d->len : 0);
}

/* NOTIFY: a notification for this engine's application. */
static ote_status_t handle_notify(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_ctl_notify_t n;
    ote_status_t status;

    status = ote_ctl_notify_decode(c->payload, c->h.length, &n);
    if (status != OTE_OK)
        return status;
    return reply_status(ctl, c, OTE_CTL_NOTIFY_ACK, ote_engine_notif_push(ctl->engine, &n));
}

/* NOTIFY_BATCH: several notifications; the answer says how many of the first are queued. */
static ote_status_t handle_notify_batch(ote_ctl_t *ctl, ctl_conn_t *c)
{
    ote_ctl_notify_batch_t *m = malloc(sizeof(*m));
    uint8_t ack[6];
    size_t queued = 0;
    ote_status_t status, st;

    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_ctl_notify_batch_decode(c->payload, c->h.length, m);
    if (status == OTE_OK) {
        st     = ote_engine_notif_push_batch(ctl->engine, m, &queued);
        status = ote_ctl_notify_batch_ack_encode(st, queued, ack);
    }
    free(m);
    if (status != OTE_OK)
        return status;
    return ote_ctl_reply(ctl, c, OTE_CTL_NOTIFY_BATCH_ACK, ack, sizeof(ack), NULL, 0);
}

/* The core service's rows: its handlers take the listener and the connection. */
#define CORE_HANDLER(fn)                                                                  \
    static ote_status_t fn##_row(const ote_ctl_host_t *host, void *state, ote_ctl_req_t *req) \
    {                                                                                     \
        (void)state;                                                                      \
        return fn(host->ctx, req->conn);                                                  \
    }
CORE_HANDLER(handle_auth)
CORE_HANDLER(handle_get_desc)
CORE_HANDLER(handle_notify)
CORE_HANDLER(handle_notify_batch)
CORE_HANDLER(handle_connect)
#undef CORE_HANDLER

/* The engine's own requests; the handshake's are served by handle_auth. */
static const ote_ctl_handler_t ctl_core_handlers[] = {
    {.type = OTE_CTL_AUTH_HELLO, .refuse_type = OTE_CTL_AUTH_DONE, .handle = handle_auth_row},
    {.type = OTE_CTL_AUTH_PROOF, .refuse_type = OTE_CTL_AUTH_DONE, .handle = handle_auth_row},
    {.type = OTE_CTL_GET_DESC, .refuse_type = OTE_CTL_DESC, .handle = handle_get_desc_row},
    {.type = OTE_CTL_NOTIFY, .refuse_type = OTE_CTL_NOTIFY_ACK, .handle = handle_notify_row},
    {.type = OTE_CTL_NOTIFY_BATCH, .refuse_type = OTE_CTL_AUTH_DONE,
     .handle = handle_notify_batch_row},
    {.type = OTE_CTL_CONNECT, .refuse_type = OTE_CTL_AUTH_DONE, .handle = handle_connect_row},
};

static const ote_ctl_service_t ctl_core_service = {
    .name         = "core",
    .handlers     = ctl_core_handlers,
    .num_handlers = sizeof(ctl_core_handlers) / sizeof(ctl_core_handlers[0]),
};

/* The largest request read before the handshake (any NOTIFY fits), to answer it AUTH. */
#define CTL_PREAUTH_MAX 8192

/* Handle one complete request; returns non-OK to close the connection. */
static ote_status_t handle(ote_ctl_t *ctl, ctl_conn_t *c)
{
    const ote_ctl_handler_t *h;
    ote_ctl_req_t req;
    ote_status_t status;
    size_t svc;

    if (c->h.type == OTE_CTL_AUTH_HELLO || c->h.type == OTE_CTL_AUTH_PROOF ||
        (ote_engine_facts(ctl->engine)->auth->enabled && c->auth.state != OTE_AUTH_STATE_DONE))
        return handle_auth(ctl, c);
    h = handler_find(c->h.type, &svc);
    if (h == NULL)
        return OTE_ERR_PROTOCOL;
    req = (ote_ctl_req_t){.conn = c, .peer = c->peer, .peer_ip = c->ip, .type = c->h.type,
                          .payload = c->payload, .length = c->h.length};
    status = h->handle(&ctl->host, ctl->svc_state[svc], &req);
    /* A handler that kept the payload frees it. */
    c->payload = req.payload;
    if (status == OTE_OK)
        c->handshake_deadline = 0; /* without a key: the first good request */
    return status;
}

/* A header is complete: check it before anything is allocated for it. */
static ote_status_t conn_header(ote_ctl_t *ctl, ctl_conn_t *c)
{
    size_t max;

    if (ote_ctl_hdr_decode(c->hdr, OTE_CTL_HDR_LEN,
                           ote_engine_facts(ctl->engine)->config.max_ctl_msg, &c->h) != OTE_OK) {
        ote_warn("control peer %s: malformed header; closing", c->peer);
        return OTE_ERR_PROTOCOL;
    }
    if (ote_ctl_request_max_len(c->h.type, ote_engine_facts(ctl->engine)->config.max_ctl_msg,
                                &max) != OTE_OK) {
        ote_warn("control peer %s: message type %u is not a request; closing", c->peer,
                 c->h.type);
        return OTE_ERR_PROTOCOL;
    }
    if (c->h.length > max) {
        ote_warn("control peer %s: %u-byte payload for message type %u (at most %zu); closing",
                 c->peer, c->h.length, c->h.type, max);
        return OTE_ERR_PROTOCOL;
    }
    /*
     * Before the handshake a keyed listener answers any other request with
     * AUTH and closes: nothing larger than a notification is worth reading
     * (and holding until the handshake timeout) for that.
     */
    if (ote_engine_facts(ctl->engine)->auth->enabled && c->auth.state != OTE_AUTH_STATE_DONE &&
        c->h.type != OTE_CTL_AUTH_HELLO && c->h.type != OTE_CTL_AUTH_PROOF &&
        c->h.length > CTL_PREAUTH_MAX) {
        ote_warn("control peer %s: a %u-byte request (type %u) before authentication; closing",
                 c->peer, c->h.length, c->h.type);
        return OTE_ERR_PROTOCOL;
    }
    c->payload = malloc(c->h.length ? c->h.length : 1);
    c->got     = 0;
    return c->payload ? OTE_OK : OTE_ERR_NO_MEMORY;
}

static void conn_read(ote_ctl_t *ctl, ctl_conn_t *c)
{
    int budget = CTL_READ_BUDGET;

    /*
     * One reply in flight at a time: a peer that does not read stops being
     * read. Bytes beyond the current message stay in the socket, so the
     * level-triggered epoll reports a connection that used up its budget
     * again.
     */
    while (c->out == NULL && !c->close_after_send && !c->waiting && budget > 0) {
        ssize_t n;

        if (c->hdr_got < OTE_CTL_HDR_LEN) {
            n = recv(c->fd, c->hdr + c->hdr_got, OTE_CTL_HDR_LEN - c->hdr_got, MSG_DONTWAIT);
            if (n > 0) {
                c->hdr_got += (size_t)n;
                if (c->hdr_got < OTE_CTL_HDR_LEN)
                    continue;
                if (conn_header(ctl, c) != OTE_OK) {
                    ote_ctl_conn_close(ctl, c);
                    return;
                }
            }
        } else if (c->got < c->h.length) {
            n = recv(c->fd, c->payload + c->got, c->h.length - c->got, MSG_DONTWAIT);
            if (n > 0)
                c->got += (size_t)n;
        } else {
            n = 1;
        }
        if (n == 0) {
            ote_ctl_conn_close(ctl, c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                ote_ctl_conn_close(ctl, c);
            return;
        }
        if (c->hdr_got == OTE_CTL_HDR_LEN && c->got == c->h.length) {
            ote_status_t status = handle(ctl, c);

            free(c->payload);
            c->payload = NULL;
            c->hdr_got = 0;
            budget--;
            if (status != OTE_OK) {
                if (status == OTE_ERR_PROTOCOL)
                    ote_warn("control peer %s: malformed %u message; closing", c->peer,
                             c->h.type);
                ote_ctl_conn_close(ctl, c);
                return;
            }
        }
    }
    if (c->out == NULL && c->close_after_send)
        ote_ctl_conn_close(ctl, c);
}

static void conn_write(ote_ctl_t *ctl, ctl_conn_t *c)
{
    if (conn_flush(ctl, c) != OTE_OK) {
        ote_ctl_conn_close(ctl, c);
        return;
    }
    if (c->out == NULL)
        conn_read(ctl, c);
}

/* The earlier of two deadlines, 0 meaning none. */
static uint64_t due_min(uint64_t a, uint64_t b)
{
    return a == 0 ? b : b == 0 ? a : a < b ? a : b;
}

/*
 * Close connections that missed a deadline; the earliest deadline of those
 * left, 0 when none has one.
 */
static uint64_t ctl_sweep(ote_ctl_t *ctl, uint64_t now)
{
    uint64_t next = 0;

    for (ctl_conn_t *c = ctl->conns, *next_c; c != NULL; c = next_c) {
        next_c = c->next;
        if (c->handshake_deadline && now > c->handshake_deadline) {
            ote_warn("control peer %s: no %s within OTE_HANDSHAKE_TIMEOUT_MS; closing", c->peer,
                     ote_engine_facts(ctl->engine)->auth->enabled ? "authentication" : "request");
            ote_ctl_conn_close(ctl, c);
        } else if (c->out_deadline && (now > c->out_deadline || now > c->out_limit)) {
            /* A reset: the reply it does not read is dropped, not left in the kernel. */
            ote_warn("control peer %s does not read its replies; closing", c->peer);
            conn_drop(ctl, c, true);
        } else {
            next = due_min(next, c->handshake_deadline);
            if (c->out_deadline)
                next = due_min(next, due_min(c->out_deadline, c->out_limit));
        }
    }
    return next;
}

/* Every deadline due by now: connections, then the services; the next one set. */
static void ctl_sweep_all(ote_ctl_t *ctl, uint64_t now)
{
    uint64_t next = ctl_sweep(ctl, now);

    for (size_t i = 0; i < NUM_SERVICES; i++) {
        if (ctl_services[i]->sweep != NULL)
            next = due_min(next, ctl_services[i]->sweep(&ctl->host, ctl->svc_state[i], now));
    }
    next = due_min(next, ctl->accept_resume);
    ctl->next_sweep = next != 0 ? next : UINT64_MAX;
}

/* Pause between accepts that found no descriptor (the process's limit reached). */
#define CTL_ACCEPT_PAUSE_NS (100ull * 1000 * 1000)

/* Take the listen socket out of the epoll set for a while, or back in once that is over. */
static void ctl_accept_pause(ote_ctl_t *ctl, bool pause, uint64_t now)
{
    struct epoll_event ev = {.events = pause ? 0 : EPOLLIN, .data.ptr = &listen_tag};

    if (pause == (ctl->accept_resume != 0) || epoll_ctl(ctl->epfd, EPOLL_CTL_MOD,
                                                         ctl->listen_fd, &ev) != 0)
        return;
    ctl->accept_resume = pause ? now + CTL_ACCEPT_PAUSE_NS : 0;
    if (pause && ctl->accept_resume < ctl->next_sweep)
        ctl->next_sweep = ctl->accept_resume;
}

/* epoll_wait's timeout until next_sweep: -1 (none), 0 (due), else ms rounded up. */
static int ctl_timeout_ms(const ote_ctl_t *ctl)
{
    uint64_t now = ote_time_ns(), ms;

    if (ctl->next_sweep == UINT64_MAX)
        return -1;
    if (ctl->next_sweep <= now)
        return 0;
    ms = (ctl->next_sweep - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void ctl_accept(ote_ctl_t *ctl)
{
    ote_engine_h e = ctl->engine;

    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        struct epoll_event ev = {.events = EPOLLIN};
        ctl_conn_t *c;
        char ip[64];
        int fd = accept4(ctl->listen_fd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                ote_warn("control listener: cannot accept a connection: %s; trying again in "
                         "100 ms", strerror(errno));
                ctl_accept_pause(ctl, true, ote_time_ns());
            }
            return;
        }
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &(int){CTL_SNDBUF}, sizeof(int));
        ote_socket_set_keepalive(fd);
        ote_sockaddr_ip((struct sockaddr *)&ss, ip, sizeof(ip));
        if (ote_auth_conn_admit(ote_engine_facts(e)->auth, ip) != OTE_OK) {
            close(fd);
            continue;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            ote_auth_conn_release(ote_engine_facts(e)->auth, ip);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->id = ++ctl->next_conn_id;
        snprintf(c->ip, sizeof(c->ip), "%s", ip);
        ote_sockaddr_format((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
        ote_auth_session_init(&c->auth, OTE_AUTH_CHANNEL_CTL);
        c->handshake_deadline =
            ote_time_ns() + (uint64_t)ote_engine_facts(e)->config.handshake_timeout_ms * 1000000ull;
        ctl_due(ctl, c->handshake_deadline);
        ev.data.ptr = c;
        if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            ote_auth_conn_release(ote_engine_facts(e)->auth, ip);
            close(fd);
            free(c);
            continue;
        }
        OTE_DLIST_PUSH_FRONT(ctl->conns, c);
        ctl->num_conns++;
    }
}

static bool conn_alive(ote_ctl_t *ctl, ctl_conn_t *c)
{
    for (ctl_conn_t *x = ctl->conns; x != NULL; x = x->next) {
        if (x == c)
            return true;
    }
    return false;
}

/*
 * The listener thread. It sleeps in epoll_wait until a request, an ended
 * job or stop, or until the earliest pending deadline (next_sweep): with
 * none pending, however many connections are open, it has no timer.
 */
static void *ctl_main(void *arg)
{
    ote_ctl_t *ctl = arg;
    struct epoll_event ev[32];

    for (;;) {
        int n = epoll_wait(ctl->epfd, ev, 32, ctl_timeout_ms(ctl));
        uint64_t now;

        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &stop_tag)
                return NULL;
            if (ev[i].data.ptr == &listen_tag)
                ctl_accept(ctl);
            if (ev[i].data.ptr == &done_tag) {
                uint64_t v;

                (void)!read(ctl->done_fd, &v, sizeof(v));
                for (size_t k = 0; k < NUM_SERVICES; k++) {
                    if (ctl_services[k]->answer != NULL)
                        ctl_services[k]->answer(&ctl->host, ctl->svc_state[k]);
                }
            }
        }
        /* Connections second: an accept above must not free one we hold. */
        for (int i = 0; i < n; i++) {
            ctl_conn_t *c = ev[i].data.ptr;

            if (ev[i].data.ptr == &listen_tag || ev[i].data.ptr == &stop_tag ||
                ev[i].data.ptr == &done_tag)
                continue;
            /* c may have been closed by an earlier event of this round. */
            if (!conn_alive(ctl, c))
                continue;
            if (c->waiting) /* the peer hung up or failed before its answer */
                ote_ctl_conn_close(ctl, c);
            else if (c->out != NULL)
                conn_write(ctl, c);
            else
                conn_read(ctl, c);
        }
        now = ote_time_ns();
        if (ctl->accept_resume != 0 && now >= ctl->accept_resume)
            ctl_accept_pause(ctl, false, now);
        if (now >= ctl->next_sweep)
            ctl_sweep_all(ctl, now);
    }
    return NULL;
}

/* The host's ops over the engine's exported files and memory. */
static ote_status_t ctl_file_acquire(void *ctx, uint64_t id, ote_ctl_file_t **f_p)
{
    return ote_fexport_acquire(&ote_segment_table(((ote_ctl_t *)ctx)->engine)->fexports, id, f_p);
}

static void ctl_file_release(void *ctx, ote_ctl_file_t *f)
{
    ote_fexport_release(&ote_segment_table(((ote_ctl_t *)ctx)->engine)->fexports, f);
}

static ote_status_t ctl_mem_alloc(void *ctx, size_t length, void **addr_p, ote_mem_h *mem_p)
{
    /* Local use only: peers reach it through no access flag of its own. */
    ote_engine_h e = ((ote_ctl_t *)ctx)->engine;

    return ote_engine_facts(e)->svc.mem_alloc(e, length, NULL, 0, addr_p, mem_p);
}

static void ctl_mem_free(void *ctx, ote_mem_h mem)
{
    ote_engine_h e = ((ote_ctl_t *)ctx)->engine;

    ote_engine_facts(e)->svc.mem_free(e, mem);
}

static ote_status_t ctl_peer_xfer(void *ctx, ote_segment_h seg, ote_op_t op, void *local,
                                  uint64_t remote, size_t length, bool putback)
{
    return ote_peer_xfer(((ote_ctl_t *)ctx)->engine, seg, op, local, remote, length, putback);
}

static ote_status_t ctl_reply_op(void *ctx, ote_ctl_conn_t *c, uint8_t type, const void *a,
                                 size_t alen, const void *b, size_t blen)
{
    return ote_ctl_reply(ctx, c, type, a, alen, b, blen);
}

/* What the protocols' services are given (proto/ctl_target.h). */
static void ctl_host_init(ote_ctl_t *ctl)
{
    ote_engine_h e = ctl->engine;

    ctl->host = (ote_ctl_host_t){
        .ctx             = ctl,
        .instance_id     = ote_engine_facts(e)->instance_id,
        .regions         = ote_engine_facts(e)->regions,
        .stage_config    = &ote_engine_facts(e)->stage_config,
        .xfer_timeout_ms = ote_engine_facts(e)->config.xfer_timeout_ms,
        .reply           = ctl_reply_op,
        .conn_hold       = ctl_conn_hold,
        .conn_resume     = ctl_conn_resume,
        .conn_close      = ctl_conn_close_op,
        .conn_peer_closed = ctl_conn_peer_closed,
        .wake            = ctl_wake,
        .sweep_at        = ctl_sweep_at,
        .peer_seg_get    = ote_ctl_peer_seg_get,
        .peer_seg_put    = ote_ctl_peer_seg_put,
        .peer_xfer       = ctl_peer_xfer,
        .file_acquire    = ctl_file_acquire,
        .file_release    = ctl_file_release,
        .file_check      = ote_fexport_check,
        .file_io         = ote_fexport_io,
        .mem_alloc       = ctl_mem_alloc,
        .mem_free        = ctl_mem_free,
    };
}

ote_status_t ote_ctl_start(ote_engine_h e, const char *listen_addr, ote_ctl_t **ctl_p,
                           char *bound, size_t bound_len)
{
    ote_ctl_t *ctl = calloc(1, sizeof(*ctl));
    struct sockaddr_storage ss;
    struct epoll_event ev = {.events = EPOLLIN};
    socklen_t len;
    ote_status_t status;

    if (ctl == NULL)
        return OTE_ERR_NO_MEMORY;
    ctl->engine    = e;
    ctl->listen_fd = ctl->epfd = ctl->stop_fd = ctl->done_fd = -1;
    atomic_init(&ctl->desc_served, 0);
    atomic_init(&ctl->desc_encodes, 0);
    pthread_mutex_init(&ctl->peer_lock, NULL);
    pthread_cond_init(&ctl->peer_cond, NULL);
    ctl_host_init(ctl);
    for (size_t i = 0; i < NUM_SERVICES; i++) {
        if (ctl_services[i]->create == NULL)
            continue;
        status = ctl_services[i]->create(&ctl->host, &ctl->svc_state[i]);
        if (status != OTE_OK)
            goto err;
    }
    status = ote_sockaddr_parse(listen_addr, &ss, &len);
    if (status != OTE_OK) {
        ote_error("listen address '%s' is not host:port (a port from 0 to 65535, IPv6 as "
                  "[addr]:port)", listen_addr);
        status = OTE_ERR_INVALID_PARAM;
        goto err;
    }
    status = ote_socket_listen(&ss, len, &ctl->listen_fd);
    if (status != OTE_OK)
        goto err;
    len = sizeof(ss);
    getsockname(ctl->listen_fd, (struct sockaddr *)&ss, &len);
    ote_sockaddr_format((struct sockaddr *)&ss, bound, bound_len);
    ctl->next_sweep = UINT64_MAX;
    ctl->epfd    = epoll_create1(EPOLL_CLOEXEC);
    ctl->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    ctl->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    status       = OTE_ERR_IO;
    if (ctl->epfd < 0 || ctl->stop_fd < 0 || ctl->done_fd < 0)
        goto err;
    ev.data.ptr = &listen_tag;
    if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->listen_fd, &ev) != 0)
        goto err;
    ev.data.ptr = &stop_tag;
    if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->stop_fd, &ev) != 0)
        goto err;
    ev.data.ptr = &done_tag;
    if (epoll_ctl(ctl->epfd, EPOLL_CTL_ADD, ctl->done_fd, &ev) != 0)
        goto err;
    *ctl_p = ctl;
    return OTE_OK;

err:
    ote_ctl_stop(ctl);
    return status;
}

ote_status_t ote_ctl_run(ote_ctl_t *ctl)
{
    if (pthread_create(&ctl->thread, NULL, ctl_main, ctl) != 0)
        return OTE_ERR_NO_MEMORY;
    ctl->started = true;
    /* Visible in /proc/<pid>/task/<tid>/comm, top -H, gdb. */
    pthread_setname_np(ctl->thread, "ote-ctl");
    return OTE_OK;
}

void ote_ctl_stop(ote_ctl_t *ctl)
{
    uint64_t one = 1;

    if (ctl == NULL)
        return;
    if (ctl->started) {
        (void)!write(ctl->stop_fd, &one, sizeof(one));
        pthread_join(ctl->thread, NULL);
    }
    /*
     * PUTBACKs and FILE_IOs still running use the engine: they end within
     * twice the transfer timeout (canceled past one, their posted slices end
     * within another); then the segments they used to reach initiators go.
     * A service whose create failed has no state and is not stopped.
     */
    for (size_t i = 0; i < NUM_SERVICES; i++) {
        if (ctl_services[i]->stop != NULL &&
            (ctl_services[i]->create == NULL || ctl->svc_state[i] != NULL))
            ctl_services[i]->stop(&ctl->host, ctl->svc_state[i]);
    }
    ote_ctl_peers_close(ctl);
    while (ctl->conns)
        ote_ctl_conn_close(ctl, ctl->conns);
    for (size_t i = 0; i < NUM_SERVICES; i++) {
        if (ctl_services[i]->destroy != NULL &&
            (ctl_services[i]->create == NULL || ctl->svc_state[i] != NULL))
            ctl_services[i]->destroy(&ctl->host, ctl->svc_state[i]);
    }
    ote_fd_close(ctl->listen_fd);
    ote_fd_close(ctl->epfd);
    ote_fd_close(ctl->stop_fd);
    ote_fd_close(ctl->done_fd);
    pthread_mutex_destroy(&ctl->peer_lock);
    pthread_cond_destroy(&ctl->peer_cond);
    ctl_desc_drop(ctl);
    free(ctl);
}

unsigned long ote_engine_desc_served(ote_engine_h e)
{
    return ote_engine_facts(e)->ctl != NULL ? atomic_load(&ote_engine_facts(e)->ctl->desc_served)
                                            : 0;
}

unsigned long ote_engine_desc_encodes(ote_engine_h e)
{
    return ote_engine_facts(e)->ctl != NULL ? atomic_load(&ote_engine_facts(e)->ctl->desc_encodes)
                                            : 0;
}

void ote_engine_putback_stats(ote_engine_h e, unsigned long *opens_p, unsigned *threads_p)
{
    ote_ctl_t *ctl = ote_engine_facts(e)->ctl;

    pthread_mutex_lock(&ctl->peer_lock);
    *opens_p = ctl->peer_opens;
    pthread_mutex_unlock(&ctl->peer_lock);
    *threads_p = ote_proto_putback_target_threads(
        ote_ctl_service_state(ctl, &ote_proto_putback_service));
}
