#include "security_wire.h"

#include "base/config.h"
#include "base/util.h"
#include "base/wire_util.h"
#include "uct_ext/tcp/tcp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sw_connect_addr(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd;

    if (ote_socket_connect(ss, len, 5000, &fd) != OTE_OK)
        return -1;
    return fd;
}

int sw_connect_name(const char *name)
{
    struct sockaddr_storage ss;
    socklen_t len;

    if (ote_sockaddr_parse(name, &ss, &len) != OTE_OK)
        return -1;
    return sw_connect_addr(&ss, len);
}

int sw_send(int fd, const void *buf, size_t len)
{
    return ote_socket_send_all(fd, buf, len, ote_time_ns() + 5000000000ull) == OTE_OK ? 0 : -1;
}

/*
 * Every wait for what must happen (an answer, a close) lasts at least this
 * long, whatever the caller asked: it ends as soon as that happens, and a
 * loaded machine (a parallel build, sanitizers) must not turn a late
 * answer into a failure.
 */
#define SW_MIN_WAIT_MS 20000

static uint64_t sw_deadline(int timeout_ms)
{
    if (timeout_ms < SW_MIN_WAIT_MS)
        timeout_ms = SW_MIN_WAIT_MS;
    return ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;
}

int sw_send_refused(int fd, const void *buf, size_t len)
{
    const uint8_t *p  = buf;
    uint64_t deadline = ote_time_ns() + 30000000000ull;

    while (len > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        ssize_t n        = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return 1;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            fprintf(stderr, "sw_send_refused: send: %s\n", strerror(errno));
            return -1;
        }
        if (ote_time_ns() >= deadline) {
            fprintf(stderr, "sw_send_refused: %zu bytes not sent in 30 s\n", len);
            return -1;
        }
        poll(&pf, 1, 100);
    }
    return 0;
}

bool sw_wait_reset(int fd, int timeout_ms)
{
    uint64_t deadline = sw_deadline(timeout_ms);
    short want        = POLLRDHUP;

    while (ote_time_ns() < deadline) {
        struct pollfd p = {.fd = fd, .events = want};

        if (poll(&p, 1, 100) <= 0)
            continue;
        if (p.revents & (POLLERR | POLLHUP))
            return true;
        if ((p.revents & POLLRDHUP) && want == POLLRDHUP) {
            /* Closed with a FIN: a byte into it draws the reset. */
            send(fd, "", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            want = 0; /* POLLERR and POLLHUP are always reported */
        }
    }
    return false;
}

int sw_tcp_send_refused(int fd, uint8_t type, uint64_t id, uint64_t addr, uint64_t length,
                        const void *payload, size_t len)
{
    uint8_t b[OTE_STREAM_HDR_LEN];
    ote_stream_hdr_t h = {.type = type, .id = id, .addr = addr, .length = length};
    int rc;

    ote_stream_hdr_encode(&h, b);
    rc = sw_send_refused(fd, b, sizeof(b));
    return rc != 0 || payload == NULL ? rc : sw_send_refused(fd, payload, len);
}

int sw_recv(int fd, void *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = sw_deadline(timeout_ms);

    return ote_socket_recv_all(fd, buf, len, deadline) == OTE_OK ? 0 : -1;
}

bool sw_closed(int fd, int timeout_ms, size_t *junk_p)
{
    uint64_t deadline = sw_deadline(timeout_ms);
    size_t junk       = 0;
    uint8_t buf[4096];

    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint64_t now    = ote_time_ns();
        ssize_t n;

        if (now >= deadline)
            break;
        if (poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1) <= 0)
            continue;
        n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            junk += (size_t)n;
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            if (junk_p)
                *junk_p = junk;
            return true;
        }
    }
    if (junk_p)
        *junk_p = junk;
    return false;
}

int sw_ctl_send_raw(int fd, uint32_t magic, uint8_t version, uint8_t type, uint16_t flags,
                    uint32_t length, uint32_t seq, const void *payload, size_t payload_len)
{
    uint8_t *h = malloc(OTE_CTL_HDR_LEN + payload_len);
    int rc;

    if (h == NULL)
        return -1;
    ote_put_u32(h, magic);
    h[4] = version;
    h[5] = type;
    ote_put_u16(h + 6, flags);
    ote_put_u32(h + 8, length);
    ote_put_u32(h + 12, seq);
    if (payload_len)
        memcpy(h + OTE_CTL_HDR_LEN, payload, payload_len);
    /* One send: a payload sent apart would wait for a delayed ACK. */
    rc = sw_send(fd, h, OTE_CTL_HDR_LEN + payload_len);
    free(h);
    return rc;
}

int sw_ctl_send(int fd, uint8_t type, uint32_t seq, const void *payload, size_t len)
{
    return sw_ctl_send_raw(fd, OTE_CTL_MAGIC, OTE_CTL_VERSION, type, 0, (uint32_t)len, seq,
                           payload, len);
}

int sw_ctl_recv(int fd, ote_ctl_hdr_t *h, uint8_t **payload_p, int timeout_ms)
{
    uint8_t hdr[OTE_CTL_HDR_LEN];
    uint8_t *p;

    if (sw_recv(fd, hdr, sizeof(hdr), timeout_ms) != 0 ||
        ote_ctl_hdr_decode(hdr, sizeof(hdr), 1u << 30, h) != OTE_OK)
        return -1;
    p = malloc(h->length ? h->length : 1);
    if (p == NULL || sw_recv(fd, p, h->length, timeout_ms) != 0) {
        free(p);
        return -1;
    }
    *payload_p = p;
    return 0;
}

int sw_ctl_recv_status(int fd, uint8_t expect_type, int timeout_ms)
{
    ote_ctl_hdr_t h;
    uint8_t *p = NULL;
    ote_status_t s;
    int rc = 1;

    if (sw_ctl_recv(fd, &h, &p, timeout_ms) != 0)
        return 1;
    if (h.type == expect_type && h.length >= 4 && ote_ctl_status_decode(p, 4, &s) == OTE_OK)
        rc = s;
    free(p);
    return rc;
}

ote_status_t sw_ctl_authenticate(int fd, const ote_auth_t *auth)
{
    uint8_t hello[OTE_AUTH_HELLO_LEN], iproof[OTE_AUTH_IPROOF_LEN];
    ote_auth_session_t s;
    ote_ctl_hdr_t h;
    uint8_t *p = NULL;
    ote_status_t status;
    int rc;

    ote_auth_session_init(&s, OTE_AUTH_CHANNEL_CTL);
    status = ote_auth_initiator_hello(auth, &s, hello);
    if (status != OTE_OK)
        return status;
    if (sw_ctl_send(fd, OTE_CTL_AUTH_HELLO, 1, hello, sizeof(hello)) != 0 ||
        sw_ctl_recv(fd, &h, &p, 5000) != 0)
        return OTE_ERR_REMOTE_DISCONNECT;
    if (h.type != OTE_CTL_AUTH_PROOF) {
        free(p);
        return OTE_ERR_AUTH;
    }
    status = ote_auth_initiator_proof(auth, &s, p, h.length, iproof);
    free(p);
    if (status != OTE_OK)
        return status;
    if (sw_ctl_send(fd, OTE_CTL_AUTH_PROOF, 2, iproof, sizeof(iproof)) != 0)
        return OTE_ERR_REMOTE_DISCONNECT;
    rc = sw_ctl_recv_status(fd, OTE_CTL_AUTH_DONE, 5000);
    return rc == 1 ? OTE_ERR_PROTOCOL : (ote_status_t)rc;
}

ote_status_t sw_fetch_desc(const char *name, const ote_auth_t *auth, ote_desc_t **desc_p)
{
    int fd = sw_connect_name(name);
    ote_ctl_hdr_t h;
    uint8_t *p = NULL;
    ote_status_t status, remote;

    if (fd < 0)
        return OTE_ERR_NOT_FOUND;
    if (auth != NULL && auth->enabled) {
        status = sw_ctl_authenticate(fd, auth);
        if (status != OTE_OK)
            goto out;
    }
    status = OTE_ERR_PROTOCOL;
    if (sw_ctl_send(fd, OTE_CTL_GET_DESC, 7, NULL, 0) != 0 || sw_ctl_recv(fd, &h, &p, 5000) != 0)
        goto out;
    if (h.type != OTE_CTL_DESC || h.length < 4 || ote_ctl_status_decode(p, 4, &remote) != OTE_OK)
        goto out;
    status = remote;
    if (status == OTE_OK)
        status = ote_desc_decode(p + 4, h.length - 4, desc_p);
out:
    free(p);
    close(fd);
    return status;
}

int sw_desc_data_addr(const ote_desc_t *d, const char *tl, struct sockaddr_storage *ss,
                      socklen_t *len_p)
{
    for (size_t i = 0; i < d->num_tls; i++) {
        ote_stream_sockaddr_t addrs[OTE_TCP_MAX_ADDRS];
        size_t n = 0;
        ote_status_t st;

        if (strcmp(d->tls[i].tl_name, tl) != 0)
            continue;
        if (strcmp(tl, "cma") == 0)
            return ote_stream_local_addr_unpack(d->tls[i].addr, d->tls[i].addr_len, ss,
                                                len_p) == OTE_OK
                       ? 0
                       : -1;
        /* The first address the tcp iface publishes. */
        st = ote_tcp_addr_unpack(d->tls[i].addr, d->tls[i].addr_len, addrs, OTE_TCP_MAX_ADDRS,
                                 &n);
        if (st != OTE_OK)
            return -1;
        *ss    = addrs[0].ss;
        *len_p = addrs[0].len;
        return 0;
    }
    return -1;
}

int sw_tcp_send_raw(int fd, uint16_t magic, uint8_t version, uint8_t type, int32_t status,
                    uint64_t id, uint64_t addr, uint64_t length)
{
    uint8_t b[OTE_STREAM_HDR_LEN];

    ote_put_u16(b, magic);
    b[2] = version;
    b[3] = type;
    ote_put_u32(b + 4, (uint32_t)status);
    ote_put_u64(b + 8, id);
    ote_put_u64(b + 16, addr);
    ote_put_u64(b + 24, length);
    return sw_send(fd, b, sizeof(b));
}

int sw_tcp_send(int fd, uint8_t type, uint64_t id, uint64_t addr, uint64_t length)
{
    return sw_tcp_send_raw(fd, OTE_STREAM_MAGIC, OTE_STREAM_VERSION, type, 0, id, addr, length);
}

int sw_tcp_send_writev(int fd, uint64_t id, const uint64_t *addr, const uint64_t *len, size_t n,
                       const uint8_t *data)
{
    uint8_t table[OTE_STREAM_WRITEV_MAX * OTE_STREAM_WRITEV_ENTRY_LEN];
    uint64_t total = 0;

    if (n > OTE_STREAM_WRITEV_MAX)
        return -1;
    for (size_t i = 0; i < n; i++) {
        ote_stream_vec_entry_t e = {.addr = addr[i], .length = len[i]};

        ote_stream_vec_entry_encode(&e, table + i * OTE_STREAM_WRITEV_ENTRY_LEN);
        total += len[i];
    }
    if (sw_tcp_send(fd, OTE_STREAM_WRITEV, id, n, total) != 0 ||
        sw_send(fd, table, n * OTE_STREAM_WRITEV_ENTRY_LEN) != 0)
        return -1;
    return total ? sw_send(fd, data, (size_t)total) : 0;
}

/* A handshake message: header and payload in one send. */
static int sw_tcp_send_msg(int fd, uint8_t type, uint64_t id, const void *payload, size_t len)
{
    uint8_t b[OTE_STREAM_HDR_LEN + 64];
    ote_stream_hdr_t h = {.type = type, .id = id, .length = len};

    ote_stream_hdr_encode(&h, b);
    memcpy(b + OTE_STREAM_HDR_LEN, payload, len);
    return sw_send(fd, b, OTE_STREAM_HDR_LEN + len);
}

int sw_tcp_recv(int fd, ote_stream_hdr_t *h, int timeout_ms)
{
    uint8_t b[OTE_STREAM_HDR_LEN];

    if (sw_recv(fd, b, sizeof(b), timeout_ms) != 0)
        return -1;
    return ote_stream_hdr_decode(b, sizeof(b), 1ull << 40, h) == OTE_OK ? 0 : -1;
}

ote_status_t sw_tcp_open(int fd, const ote_auth_t *auth, uint64_t instance)
{
    uint64_t caps;

    return sw_tcp_open_caps(fd, auth, instance, &caps);
}

ote_status_t sw_tcp_open_caps(int fd, const ote_auth_t *auth, uint64_t instance,
                              uint64_t *caps_p)
{
    ote_stream_hdr_t h;

    if (auth != NULL && auth->enabled) {
        uint8_t hello[OTE_AUTH_HELLO_LEN], tproof[OTE_AUTH_TPROOF_LEN];
        uint8_t iproof[OTE_AUTH_IPROOF_LEN];
        ote_auth_session_t s;
        ote_status_t status;

        ote_auth_session_init(&s, OTE_AUTH_CHANNEL_TCP);
        ote_auth_initiator_hello(auth, &s, hello);
        if (sw_tcp_send_msg(fd, OTE_STREAM_AUTH_HELLO, 1, hello, sizeof(hello)) != 0 ||
            sw_tcp_recv(fd, &h, 5000) != 0)
            return OTE_ERR_REMOTE_DISCONNECT;
        if (h.type != OTE_STREAM_AUTH_PROOF || sw_recv(fd, tproof, sizeof(tproof), 5000) != 0)
            return OTE_ERR_AUTH;
        status = ote_auth_initiator_proof(auth, &s, tproof, sizeof(tproof), iproof);
        if (status != OTE_OK)
            return status;
        if (sw_tcp_send_msg(fd, OTE_STREAM_AUTH_PROOF, 2, iproof, sizeof(iproof)) != 0 ||
            sw_tcp_recv(fd, &h, 5000) != 0)
            return OTE_ERR_REMOTE_DISCONNECT;
        if (h.type != OTE_STREAM_AUTH_DONE || h.status != OTE_OK)
            return OTE_ERR_AUTH;
    }
    if (sw_tcp_send(fd, OTE_STREAM_HELLO, 3, instance, 0) != 0 || sw_tcp_recv(fd, &h, 5000) != 0)
        return OTE_ERR_REMOTE_DISCONNECT;
    if (h.type != OTE_STREAM_HELLO_ACK)
        return OTE_ERR_PROTOCOL;
    *caps_p = h.addr;
    return (ote_status_t)h.status;
}

ote_auth_t *sw_auth_new(const char *key)
{
    ote_auth_params_t cfg;
    ote_auth_t *a = NULL;

    memset(&cfg, 0, sizeof(cfg));
    if (ote_auth_create(&cfg, &a) != OTE_OK)
        return NULL;
    if (key != NULL && *key && ote_auth_set_key(a, key, strlen(key)) != OTE_OK) {
        ote_auth_destroy(a);
        return NULL;
    }
    return a;
}

int sw_ctl_request(const char *name, const ote_auth_t *auth, uint8_t type, uint32_t seq,
                   const void *payload, size_t len, uint8_t resp_type, uint8_t **resp_p,
                   uint32_t *resp_len_p, int timeout_ms)
{
    ote_ctl_hdr_t h;
    uint8_t *p = NULL;
    int fd     = sw_connect_name(name);
    int rc     = -1;

    if (fd < 0)
        return -1;
    if ((auth == NULL || sw_ctl_authenticate(fd, auth) == OTE_OK) &&
        sw_ctl_send(fd, type, seq, payload, len) == 0 && sw_ctl_recv(fd, &h, &p, timeout_ms) == 0 &&
        h.type == resp_type && h.seq == seq) {
        *resp_p     = p;
        *resp_len_p = h.length;
        p           = NULL;
        rc          = 0;
    }
    free(p);
    close(fd);
    return rc;
}
