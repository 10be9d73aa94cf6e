/*
 * Raw wire helpers for the security tests: they speak the control and tcp
 * data protocols byte by byte, as a hostile peer would, using the
 * library's own codecs only to build valid messages and to decode answers.
 */
#ifndef OTE_TEST_SECURITY_WIRE_H
#define OTE_TEST_SECURITY_WIRE_H

#include "base/auth.h"
#include "core/wire/ctl_msg.h"
#include "core/wire/desc.h"
#include "base/util.h"
#include "base/wire_util.h"
#include "uct_ext/stream/stream_wire.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Blocking TCP connection to "host:port"; -1 on failure. */
int  sw_connect_name(const char *name);
int  sw_connect_addr(const struct sockaddr_storage *ss, socklen_t len);
/* Send all of buf; 0 on success. */
int  sw_send(int fd, const void *buf, size_t len);
/*
 * Send all of buf to a peer that is expected to close the connection over
 * it, at any point: 0 when all of it went out, 1 when the peer closed first
 * (EPIPE or ECONNRESET: how the kernel reports a send into a connection
 * the peer closed or reset), -1 on anything else (a timeout, another
 * error), with a message. A test then asserts sw_closed(): the outcome,
 * not which of the two interleavings happened.
 */
int  sw_send_refused(int fd, const void *buf, size_t len);
/*
 * Wait, without reading, until the peer has closed or reset fd, then make
 * sure the connection is reset (one byte sent into a closed peer is
 * answered with a reset), so that the next send fails: how a test forces
 * the interleaving where a peer's close comes before the rest of a
 * message. True once it is; false after timeout_ms (at least 20 s).
 */
bool sw_wait_reset(int fd, int timeout_ms);
/* A tcp header, then len bytes of payload (payload may be NULL: nothing), the same way. */
int  sw_tcp_send_refused(int fd, uint8_t type, uint64_t id, uint64_t addr, uint64_t length,
                         const void *payload, size_t len);
/*
 * Waits for what must happen (sw_recv, sw_closed and what uses them) last
 * timeout_ms but at least 20 s: they end as soon as it happens, and a
 * loaded machine must not make a late answer a failure.
 */
/* Receive exactly len bytes within timeout_ms; 0 on success. */
int  sw_recv(int fd, void *buf, size_t len, int timeout_ms);
/*
 * True if the peer closes the connection within timeout_ms (bytes that
 * arrive first are counted into *junk_p when not NULL).
 */
bool sw_closed(int fd, int timeout_ms, size_t *junk_p);

/* Control plane: one header (+ payload) with any field values. */
int  sw_ctl_send_raw(int fd, uint32_t magic, uint8_t version, uint8_t type, uint16_t flags,
                     uint32_t length, uint32_t seq, const void *payload, size_t payload_len);
int  sw_ctl_send(int fd, uint8_t type, uint32_t seq, const void *payload, size_t len);
/* Receive one response; payload malloc'ed into *payload_p. 0 on success. */
int  sw_ctl_recv(int fd, ote_ctl_hdr_t *h, uint8_t **payload_p, int timeout_ms);
/* A response whose payload is an i32 status: returns the status, or 1 on failure. */
int  sw_ctl_recv_status(int fd, uint8_t expect_type, int timeout_ms);
/* Full control handshake with this auth object; returns the status. */
ote_status_t sw_ctl_authenticate(int fd, const ote_auth_t *auth);
/*
 * One request on a new control connection to the engine name (authenticated
 * with auth): send type with seq and payload, receive one response, which
 * must be resp_type with the same seq; its payload malloc'ed into *resp_p,
 * its length into *resp_len_p. 0 on success.
 */
int  sw_ctl_request(const char *name, const ote_auth_t *auth, uint8_t type, uint32_t seq,
                    const void *payload, size_t len, uint8_t resp_type, uint8_t **resp_p,
                    uint32_t *resp_len_p, int timeout_ms);
/* Fetch and decode the descriptor (auth may be NULL). */
ote_status_t sw_fetch_desc(const char *name, const ote_auth_t *auth, ote_desc_t **desc_p);
/* The data address of a descriptor's transport tl ("tcp" or "cma"). */
int  sw_desc_data_addr(const ote_desc_t *d, const char *tl, struct sockaddr_storage *ss,
                       socklen_t *len_p);

/* tcp data plane */
int  sw_tcp_send_raw(int fd, uint16_t magic, uint8_t version, uint8_t type, int32_t status,
                     uint64_t id, uint64_t addr, uint64_t length);
int  sw_tcp_send(int fd, uint8_t type, uint64_t id, uint64_t addr, uint64_t length);
int  sw_tcp_recv(int fd, ote_stream_hdr_t *h, int timeout_ms);
/* Authenticate (auth may be NULL) and HELLO to the given instance; returns the status. */
ote_status_t sw_tcp_open(int fd, const ote_auth_t *auth, uint64_t instance);
/* The same; *caps_p: the OTE_STREAM_CAP_* bits of the target's HELLO_ACK. */
ote_status_t sw_tcp_open_caps(int fd, const ote_auth_t *auth, uint64_t instance,
                              uint64_t *caps_p);
/*
 * A WRITEV of n entries (addr[i], len[i]) with id, its table, then the
 * payloads from data (their lengths in all, in order). 0 on success.
 */
int  sw_tcp_send_writev(int fd, uint64_t id, const uint64_t *addr, const uint64_t *len,
                        size_t n, const uint8_t *data);

/* An auth object with this key (NULL or "" = none). */
ote_auth_t *sw_auth_new(const char *key);

#endif
