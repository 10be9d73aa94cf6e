/*
 * The stream base's endpoint (stream_ep.c): the connections to one peer,
 * which it picks for each request and connects again when they fail.
 */
#ifndef OTE_STREAM_EP_H
#define OTE_STREAM_EP_H

#include "stream_hooks.h"

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>

/*
 * Requests stay on the connection the previous one took while its bytes in
 * flight exceed the least loaded connection's by less than this: small
 * requests go in runs (one WRITEV, one iovec element where their memory
 * follows on), large ones still alternate.
 */
#define OTE_STREAM_PICK_RUN (512 * 1024)
/* Addresses of a peer one ep considers at most (tcp publishes up to this many). */
#define OTE_STREAM_MAX_ADDRS 16

struct ote_stream_ep {
    ote_tl_ep_t      super;
    ote_stream_conn_t **conns;
    size_t           num_conns;
    size_t           last_conn; /* where the previous request went (stream_ep_pick) */
    uint64_t         next_id;
    char             peer_name[128];
    uint64_t         peer_caps; /* OTE_STREAM_CAP_* from the peer's HELLO_ACK */
    /* The peer's iface, where ote_stream_ep_reconnect connects again. */
    struct sockaddr_storage addr;
    socklen_t        addr_len;
    /* Connections closed and not yet replaced; read without the worker lock. */
    atomic_size_t    num_failed;
};

/* stream_ep.c */
/*
 * The ep ops of tcp, cma (by reference: hooks->ref_handle set) and shm (its
 * mappings first: hooks->post set).
 */
extern const ote_tl_ep_ops_t ote_stream_ep_ops;
ote_status_t ote_stream_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                                  const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p);
/*
 * Post one request of type on the connection stream_ep_pick chooses (the
 * previous request's, or the least loaded one past OTE_STREAM_PICK_RUN): WRITE
 * and READ_REQ stream bytes, PUT_REF and GET_REF carry local as their
 * trailer.
 */
ote_status_t ote_stream_ep_post(ote_stream_ep_t *ep, uint8_t type, void *local, size_t length,
                                ote_region_t *local_region, uint64_t remote_addr,
                                ote_tl_completion_t *comp);
/* ote_stream_ep_post of a MAP whose copy (then: PUT_REF or GET_REF) waits for it. */
ote_status_t ote_stream_ep_post_map(ote_stream_ep_t *ep, uint8_t then, void *local, size_t length,
                                    ote_region_t *local_region, uint64_t remote_addr,
                                    ote_tl_completion_t *comp);
/* The connection an ep posts on now, or NULL while none is up. */
ote_stream_conn_t *ote_stream_ep_conn(ote_stream_ep_t *ep);
void   ote_stream_ep_destroy(ote_tl_ep_t *ep);
size_t ote_stream_ep_inflight_bytes(ote_tl_ep_t *ep);
bool   ote_stream_ep_is_alive(ote_tl_ep_t *ep);
/* See ote_tl_ep_ops_t: connections that failed, replaced through the handshake. */
bool         ote_stream_ep_needs_reconnect(ote_tl_ep_t *ep);
ote_status_t ote_stream_ep_reconnect(ote_tl_ep_t *ep, const ote_tl_peer_t *peer);
/*
 * Blocking exchange during connection setup: send h and payload_len bytes
 * of payload, receive the answer's header into h.
 */
ote_status_t ote_stream_handshake_step(int fd, ote_stream_hdr_t *h, const void *payload,
                                       size_t payload_len, uint64_t deadline);

#endif
