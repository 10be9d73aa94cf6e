/*
 * A segment's control-plane client: one connection to the peer's listener
 * (authenticated with OTE_AUTH_KEY), request/response exchanges on it, and
 * the descriptor fetch of the peer-to-peer metadata.
 */
#include "base/log.h"
#include "base/util.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_facts.h"
#include "core/meta/meta.h"
#include "core/obs/obs.h"
#include "segment_ctl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ote_status_t ote_segment_ctl_refused(ote_segment_h seg, ote_status_t status)
{
    char who[OTE_DESC_NAME_MAX + 16];

    if (status == OTE_ERR_AUTH && !ote_engine_facts(seg->engine)->auth->enabled) {
        snprintf(who, sizeof(who), "segment '%s'", seg->name);
        ote_auth_log_key_missing(who);
    }
    return status;
}

/* ctl_lock held. */
static void ctl_close(ote_segment_h seg)
{
    ote_fd_close(seg->ctl_fd);
    seg->ctl_fd = -1;
}

void ote_segment_ctl_rebind(ote_segment_h seg, const char *ctl_addr)
{
    pthread_mutex_lock(&seg->ctl_lock);
    ctl_close(seg);
    pthread_mutex_lock(&seg->lock);
    snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%s", ctl_addr);
    pthread_mutex_unlock(&seg->lock);
    pthread_mutex_unlock(&seg->ctl_lock);
}

/*
 * One request and its response on fd, before deadline. The response type
 * must be one of expect[0..nexpect); *type_p says which came.
 */
static ote_status_t ctl_exchange(ote_segment_h seg, int fd, uint8_t type, const void *payload,
                                 size_t len, const uint8_t *expect, size_t nexpect,
                                 uint64_t deadline, uint8_t *type_p, uint8_t **resp_p,
                                 size_t *resp_len_p)
{
    ote_engine_h e = seg->engine;
    uint8_t hdr[OTE_CTL_HDR_LEN], small[OTE_CTL_HDR_LEN + OTE_CTL_NOTIFY_MAX_LEN];
    ote_ctl_hdr_t h = {.type = type, .length = (uint32_t)len};
    uint8_t *resp   = NULL;
    uint32_t seq;
    bool known = false;
    ote_status_t status;

    h.seq = seq = atomic_fetch_add(&seg->ctl_seq, 1) + 1;
    ote_ctl_hdr_encode(&h, hdr);
    if (len > 0 && len <= sizeof(small) - OTE_CTL_HDR_LEN) {
        /* One segment: a payload sent apart would wait for the peer's delayed ACK. */
        memcpy(small, hdr, OTE_CTL_HDR_LEN);
        memcpy(small + OTE_CTL_HDR_LEN, payload, len);
        status = ote_socket_send_all(fd, small, OTE_CTL_HDR_LEN + len, deadline);
    } else if (len > 0 && len <= OTE_CTL_NOTIFY_BATCH_MAX_LEN &&
               (resp = malloc(OTE_CTL_HDR_LEN + len)) != NULL) {
        /* A packed NOTIFY_BATCH: one send too. */
        memcpy(resp, hdr, OTE_CTL_HDR_LEN);
        memcpy(resp + OTE_CTL_HDR_LEN, payload, len);
        status = ote_socket_send_all(fd, resp, OTE_CTL_HDR_LEN + len, deadline);
        free(resp);
        resp = NULL;
    } else {
        status = ote_socket_send_all(fd, hdr, sizeof(hdr), deadline);
        if (status == OTE_OK && len)
            status = ote_socket_send_all(fd, payload, len, deadline);
    }
    if (status == OTE_OK)
        status = ote_socket_recv_all(fd, hdr, sizeof(hdr), deadline);
    if (status != OTE_OK)
        return status;
    status = ote_ctl_hdr_decode(hdr, sizeof(hdr), ote_engine_facts(e)->config.max_ctl_msg, &h);
    for (size_t i = 0; i < nexpect; i++)
        known |= h.type == expect[i];
    if (status == OTE_OK && !known && h.type == OTE_CTL_AUTH_DONE && h.seq == seq &&
        h.length == 4) {
        /* A peer with a key refuses requests before the handshake: it answers AUTH_DONE. */
        uint8_t st[4];
        ote_status_t remote;

        status = ote_socket_recv_all(fd, st, sizeof(st), deadline);
        if (status == OTE_OK &&
            (ote_ctl_status_decode(st, sizeof(st), &remote) != OTE_OK || remote == OTE_OK))
            status = OTE_ERR_PROTOCOL;
        else if (status == OTE_OK)
            status = ote_segment_ctl_refused(seg, remote);
        if (status == OTE_ERR_PROTOCOL)
            ote_warn("segment '%s': malformed control response", seg->name);
        return status;
    }
    if (status != OTE_OK || !known || h.seq != seq) {
        ote_warn("segment '%s': malformed control response", seg->name);
        return OTE_ERR_PROTOCOL;
    }
    resp = malloc(h.length ? h.length : 1);
    if (resp == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_socket_recv_all(fd, resp, h.length, deadline);
    if (status != OTE_OK) {
        free(resp);
        return status;
    }
    *type_p     = h.type;
    *resp_p     = resp;
    *resp_len_p = h.length;
    return OTE_OK;
}

/* The control connection a handshake runs on. */
typedef struct {
    ote_segment_h seg;
    int           fd;
    uint64_t      deadline;
} ctl_auth_io_t;

/* ote_auth_exchange_t on a new control connection. */
static ote_status_t ctl_auth_exchange(void *arg, bool proof, const uint8_t *msg, size_t len,
                                      uint8_t *tproof, bool *done_p, ote_status_t *remote_p)
{
    static const uint8_t after_hello[] = {OTE_CTL_AUTH_PROOF, OTE_CTL_AUTH_DONE};
    static const uint8_t after_proof[] = {OTE_CTL_AUTH_DONE};
    const ctl_auth_io_t *io = arg;
    uint8_t *resp = NULL;
    size_t resp_len;
    uint8_t type;
    ote_status_t status;

    status = ctl_exchange(io->seg, io->fd, proof ? OTE_CTL_AUTH_PROOF : OTE_CTL_AUTH_HELLO, msg,
                          len, proof ? after_proof : after_hello, proof ? 1 : 2, io->deadline,
                          &type, &resp, &resp_len);
    if (status != OTE_OK)
        return status;
    if (type == OTE_CTL_AUTH_DONE) {
        *done_p = true;
        status  = ote_ctl_status_decode(resp, resp_len, remote_p);
    } else if (resp_len == OTE_AUTH_TPROOF_LEN) {
        memcpy(tproof, resp, OTE_AUTH_TPROOF_LEN);
    } else {
        status = OTE_ERR_PROTOCOL;
    }
    free(resp);
    return status == OTE_OK ? OTE_OK : OTE_ERR_PROTOCOL;
}

/* Prove we hold the key, and that the target does (see auth.h). */
static ote_status_t ctl_authenticate(ote_segment_h seg, int fd, uint64_t deadline)
{
    ctl_auth_io_t io = {.seg = seg, .fd = fd, .deadline = deadline};
    char who[300];

    snprintf(who, sizeof(who), "segment '%s': the peer", seg->name);
    return ote_auth_initiator_run(ote_engine_facts(seg->engine)->auth, OTE_AUTH_CHANNEL_CTL,
                                  ctl_auth_exchange, &io, who);
}

/*
 * What is left of deadline in ms, at most OTE_CONNECT_TIMEOUT_MS (a
 * request's own bound, such as a probe's, may be shorter); 0 once past.
 */
static long ctl_bound_ms(ote_segment_h seg, uint64_t deadline)
{
    uint64_t now = ote_time_ns();
    long ms      = ote_engine_facts(seg->engine)->config.connect_timeout_ms;

    if (now >= deadline)
        return 0;
    if ((deadline - now + 999999) / 1000000 < (uint64_t)ms)
        ms = (long)((deadline - now + 999999) / 1000000);
    return ms;
}

/*
 * A new control connection to addr (seg->ctl_addr or a copy), authenticated.
 * bound: the segment was opened on an instance (it has a descriptor); a
 * listener that refuses then means that instance is gone (killed, exited),
 * REMOTE_DISCONNECT as the failure model in ote.h says of a peer that
 * stopped answering, where for an open it is NOT_FOUND: nothing listens.
 */
static ote_status_t ctl_open(ote_segment_h seg, const char *ctl_addr, bool bound,
                             uint64_t deadline, int *fd_p)
{
    ote_engine_h e = seg->engine;
    struct sockaddr_storage ss;
    socklen_t len;
    ote_status_t status;
    long ms = ctl_bound_ms(seg, deadline);
    int fd;

    if (ms == 0)
        return OTE_ERR_TIMEOUT;
    status = ote_sockaddr_resolve(ctl_addr, ms, &ss, &len);
    if (status == OTE_OK && ote_sockaddr_port((struct sockaddr *)&ss) == 0)
        status = OTE_ERR_INVALID_PARAM;
    if (status == OTE_ERR_NOT_FOUND && strchr(ctl_addr, ':') == NULL)
        status = OTE_ERR_INVALID_PARAM;
    if (status == OTE_ERR_INVALID_PARAM && ote_engine_facts(e)->meta != NULL) {
        ote_error("segment '%s': its descriptor's control address '%s' is not host:port",
                  seg->name, ctl_addr);
        return OTE_ERR_PROTOCOL;
    }
    if (status == OTE_ERR_INVALID_PARAM) {
        ote_error("segment '%s': not a host:port name (the p2p metadata opens peers by the "
                  "address of their control listener)", seg->name);
        return status;
    }
    if (status == OTE_ERR_TIMEOUT) {
        ote_error("segment '%s': the host name of '%s' did not resolve within %ld ms "
                  "(OTE_CONNECT_TIMEOUT_MS)", seg->name, ctl_addr, ms);
        return OTE_ERR_TIMEOUT;
    }
    if (status != OTE_OK) {
        ote_error("segment '%s': the host name of '%s' does not resolve", seg->name,
                  ctl_addr);
        return OTE_ERR_NOT_FOUND;
    }
    ms = ctl_bound_ms(seg, deadline);
    if (ms == 0)
        return OTE_ERR_TIMEOUT;
    status = ote_socket_connect(&ss, len, (int)ms, &fd);
    if (status == OTE_ERR_NOT_FOUND && bound)
        status = OTE_ERR_REMOTE_DISCONNECT;
    else if (status == OTE_ERR_NOT_FOUND)
        ote_error("segment '%s': nothing listens at %s (connection refused)", seg->name,
                  ctl_addr);
    if (status != OTE_OK) {
        ote_debug("segment '%s': connect: %s", seg->name, ote_status_string(status));
        return status;
    }
    ote_socket_set_keepalive(fd);
    if (ote_engine_facts(e)->auth->enabled) {
        status = ctl_authenticate(seg, fd, deadline);
        if (status != OTE_OK) {
            ote_debug("segment '%s': authentication: %s", seg->name, ote_status_string(status));
            close(fd);
            return status;
        }
    }
    *fd_p = fd;
    return OTE_OK;
}

/* A new control connection to the listener the segment names now (seg->ctl_addr). */
static ote_status_t ctl_open_now(ote_segment_h seg, uint64_t deadline, int *fd_p)
{
    char addr[sizeof(seg->ctl_addr)];
    bool bound;

    pthread_mutex_lock(&seg->lock);
    memcpy(addr, seg->ctl_addr, sizeof(addr));
    bound = seg->desc != NULL;
    pthread_mutex_unlock(&seg->lock);
    return ctl_open(seg, addr, bound, deadline, fd_p);
}

/* ctl_lock held: the request connection, opened to the bound instance's listener if none. */
static ote_status_t ctl_connect(ote_segment_h seg, uint64_t deadline)
{
    return seg->ctl_fd >= 0 ? OTE_OK : ctl_open_now(seg, deadline, &seg->ctl_fd);
}

ote_status_t ote_segment_ctl_request(ote_segment_h seg, uint8_t type, const void *payload,
                                     size_t len, uint8_t expect, uint8_t **resp_p,
                                     size_t *resp_len_p)
{
    ote_engine_h e    = seg->engine;
    uint64_t deadline =
        ote_time_ns() + (uint64_t)ote_engine_facts(e)->config.connect_timeout_ms * 1000000ull;
    uint8_t got;
    ote_status_t status;

    if (seg->file != NULL) {
        ote_error("segment '%s': a file has no peer to send control messages to", seg->name);
        return OTE_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&seg->ctl_lock);
    status = ctl_connect(seg, deadline);
    if (status != OTE_OK)
        goto out;
    status = ctl_exchange(seg, seg->ctl_fd, type, payload, len, &expect, 1, deadline, &got,
                          resp_p, resp_len_p);
    if (status != OTE_OK) {
        /* The stream may be mid-message: never reuse it. */
        ctl_close(seg);
        if (status == OTE_ERR_REMOTE_DISCONNECT || status == OTE_ERR_IO)
            status = OTE_ERR_REMOTE_DISCONNECT;
    }
out:
    pthread_mutex_unlock(&seg->ctl_lock);
    return status;
}

void ote_segment_ctl_pool_drain(ote_segment_h seg)
{
    pthread_mutex_lock(&seg->ctl_pool_lock);
    while (seg->ctl_pool_len > 0)
        close(seg->ctl_pool[--seg->ctl_pool_len]);
    pthread_mutex_unlock(&seg->ctl_pool_lock);
}

/*
 * One request-reply on a connection of its own: with pooled, an idle one
 * of the segment's pool when there is one (kept for the next request
 * after a good answer), else a new one, closed after the answer.
 */
static ote_status_t ctl_request_conn(ote_segment_h seg, bool pooled, uint8_t type,
                                     const void *payload, size_t len, uint8_t expect,
                                     long timeout_ms, uint8_t **resp_p, size_t *resp_len_p)
{
    uint64_t deadline = ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;
    ote_status_t status;
    uint8_t got;

    if (seg->file != NULL)
        return OTE_ERR_UNSUPPORTED;
    for (int attempt = 0;; attempt++) {
        bool reused = false;
        int fd      = -1;

        pthread_mutex_lock(&seg->ctl_pool_lock);
        if (pooled && seg->ctl_pool_len > 0) {
            fd     = seg->ctl_pool[--seg->ctl_pool_len];
            reused = true;
        }
        pthread_mutex_unlock(&seg->ctl_pool_lock);
        if (fd < 0) {
            status = ctl_open_now(seg, deadline, &fd);
            if (status != OTE_OK)
                return status;
        }
        status = ctl_exchange(seg, fd, type, payload, len, &expect, 1, deadline, &got, resp_p,
                              resp_len_p);
        if (status == OTE_OK) {
            pthread_mutex_lock(&seg->ctl_pool_lock);
            if (pooled && seg->ctl_pool_len < OTE_SEGMENT_CTL_POOL) {
                seg->ctl_pool[seg->ctl_pool_len++] = fd;
                fd = -1;
            }
            pthread_mutex_unlock(&seg->ctl_pool_lock);
            ote_fd_close(fd);
            return OTE_OK;
        }
        /* The stream may be mid-message: never reuse it. */
        close(fd);
        if (status == OTE_ERR_IO)
            status = OTE_ERR_REMOTE_DISCONNECT;
        /* An idle connection the peer closed meanwhile: once more on a new one. */
        if (!reused || attempt > 0 || status != OTE_ERR_REMOTE_DISCONNECT)
            return status;
    }
}

ote_status_t ote_segment_ctl_request_alone(ote_segment_h seg, uint8_t type, const void *payload,
                                           size_t len, uint8_t expect, long timeout_ms,
                                           uint8_t **resp_p, size_t *resp_len_p)
{
    return ctl_request_conn(seg, false, type, payload, len, expect, timeout_ms, resp_p,
                            resp_len_p);
}

ote_status_t ote_segment_ctl_request_pooled(ote_segment_h seg, uint8_t type, const void *payload,
                                            size_t len, uint8_t expect, long timeout_ms,
                                            uint8_t **resp_p, size_t *resp_len_p)
{
    return ctl_request_conn(seg, true, type, payload, len, expect, timeout_ms, resp_p,
                            resp_len_p);
}

static ote_status_t segment_fetch_desc(ote_segment_h seg, ote_desc_t **desc_p);

/* Counted per result for the metadata series (obs/). */
ote_status_t ote_segment_fetch_desc(ote_segment_h seg, ote_desc_t **desc_p)
{
    ote_status_t status = segment_fetch_desc(seg, desc_p);

    ote_obs_metadata_request(ote_engine_facts(seg->engine)->obs, status);
    return status;
}

static ote_status_t segment_fetch_desc(ote_segment_h seg, ote_desc_t **desc_p)
{
    uint8_t *resp = NULL;
    size_t len;
    ote_status_t status, remote;

    /* A store: resolved at every open, refresh and reopen (no cache to go stale). */
    if (ote_engine_facts(seg->engine)->meta != NULL)
        return ote_meta_lookup(ote_engine_facts(seg->engine)->meta,
                               seg->peer_name[0] != '\0' ? seg->peer_name : seg->name, desc_p);

    status = ote_segment_ctl_request(seg, OTE_CTL_GET_DESC, NULL, 0, OTE_CTL_DESC, &resp, &len);
    /*
     * The connection kept open may have ended meanwhile (a peer restarted on
     * the same address, a listener that closed it): the request was
     * dropped with it, and asking again, on a new connection, is harmless.
     */
    if (status == OTE_ERR_REMOTE_DISCONNECT)
        status = ote_segment_ctl_request(seg, OTE_CTL_GET_DESC, NULL, 0, OTE_CTL_DESC, &resp,
                                         &len);
    if (status != OTE_OK)
        return status;
    if (len < 4 || ote_ctl_status_decode(resp, 4, &remote) != OTE_OK) {
        status = OTE_ERR_PROTOCOL;
    } else if (remote != OTE_OK) {
        status = ote_segment_ctl_refused(seg, remote);
    } else {
        status = ote_desc_decode(resp + 4, len - 4, desc_p);
        if (status != OTE_OK)
            ote_warn("segment '%s': malformed descriptor", seg->name);
    }
    free(resp);
    return status;
}
