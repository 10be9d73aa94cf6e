/*
 * What a component built on the stream base (stream.h) adds to it: the
 * hooks it gives its ifaces (ote_stream_hooks_t) and the types they take;
 * with the names of the base's three objects, the connection
 * (stream_conn.h), the endpoint (stream_ep.h) and the iface
 * (stream_iface.h).
 */
#ifndef OTE_STREAM_HOOKS_H
#define OTE_STREAM_HOOKS_H

#include "stream_wire.h"
#include "uct_ext/tl.h"

#include <stdbool.h>
#include <sys/socket.h>

typedef struct ote_stream_iface ote_stream_iface_t;
typedef struct ote_stream_ep    ote_stream_ep_t;
typedef struct ote_stream_conn  ote_stream_conn_t;

/*
 * By-reference mode, target side: handle PUT_REF, GET_REF or PROBE (h) whose
 * trailer names peer_addr in the initiator's memory; answers on c.
 */
typedef void (*ote_stream_ref_handle_t)(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                        uint64_t peer_addr);
/*
 * By-reference mode, target side: requests a handler deferred (ref_pending)
 * are carried out at the latest when a receive call ends, so that those
 * read together can be served together; called with at least one pending.
 */
typedef void (*ote_stream_ref_flush_t)(ote_stream_conn_t *c);

/* A socket address and its length (IPv4, IPv6 or an abstract AF_UNIX name). */
typedef struct {
    struct sockaddr_storage ss;
    socklen_t               len;
} ote_stream_sockaddr_t;

/* Initiator: an extra step after HELLO_ACK on a new blocking connection. */
typedef ote_status_t (*ote_stream_connect_hook_t)(ote_stream_iface_t *iface, int fd,
                                                  const ote_tl_peer_t *peer, uint64_t deadline);
/* Peer address blob to the socket addresses it lists (at most max). */
typedef ote_status_t (*ote_stream_addr_unpack_t)(const void *buf, size_t len,
                                                 ote_stream_sockaddr_t *out,
                                                 size_t max, size_t *count_p);

/*
 * What a component built on the stream base adds to it, given to
 * ote_stream_iface_init: tcp its address format and which of a peer's
 * addresses its interface reaches; cma by-reference
 * requests, its address format and the probe after HELLO; shm cma's plus
 * descriptor passing and its own post. NULL members: not used.
 */
typedef struct ote_stream_hooks {
    /* Peer address blob to socket addresses; required. */
    ote_stream_addr_unpack_t  addr_unpack;
    /*
     * Initiator: of the peer's n addresses (in), those this iface may
     * connect to, best first, into out; returns how many. NULL: all, in order.
     */
    size_t                 (*addr_choose)(const ote_stream_iface_t *iface,
                                          const ote_stream_sockaddr_t *in, size_t n,
                                          ote_stream_sockaddr_t *out);
    /*
     * Initiator, before each connect: false where the address is not
     * reached through this iface (connect fails UNREACHABLE). NULL: always.
     */
    bool                   (*addr_reaches)(const ote_stream_iface_t *iface,
                                           const struct sockaddr_storage *ss, socklen_t len);
    /* Initiator: a step after HELLO_ACK on a new connection (cma: PROBE). */
    ote_stream_connect_hook_t connect_hook;
    /*
     * By-reference mode (cma, shm): the target's handler of PUT_REF, GET_REF
     * and PROBE, and its flush (both set or both NULL). Set, the ep ops post
     * by reference and the target offers small requests by value.
     */
    ote_stream_ref_handle_t   ref_handle;
    ote_stream_ref_flush_t    ref_flush;
    /*
     * Shared mappings (shm): connections pass descriptors; MAP and
     * UNMAP_ACK go to ref_handle on the target, MAP_ACK and UNMAP to
     * initiator_hook; conn_closed runs once as a connection closes, before
     * its operations fail.
     */
    bool                   fd_passing;
    void                 (*initiator_hook)(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                           const uint8_t *trailer);
    void                 (*conn_closed)(ote_stream_conn_t *c);
    /* How the ep ops post an operation (shm: through its mappings); NULL: the base's. */
    ote_status_t         (*post)(ote_tl_ep_t *ep, bool put, void *local, size_t length,
                                 ote_region_t *local_region, uint64_t remote_addr,
                                 ote_tl_completion_t *comp);
} ote_stream_hooks_t;

#endif
