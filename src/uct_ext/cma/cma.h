/*
 * Native cma component: single-copy transfers between processes of one host
 * with process_vm_readv/writev, checked by the target.
 *
 * It is the tcp component's connection code (tcp/) in by-reference mode over
 * an abstract AF_UNIX stream socket: the initiator names its own buffer in
 * PUT_REF/GET_REF, the target checks the range against its region table
 * (region, bounds, access flag), holds the region while it copies, and
 * copies between its memory and the initiator's (pid from SO_PEERCRED).
 * A PROBE right after HELLO finds a peer the kernel will not let us reach
 * (ptrace permission, Yama, another pid namespace) before the rail is used.
 */
#ifndef OTE_CMA_H
#define OTE_CMA_H

#include "uct_ext/tcp/tcp.h"

#include <stdbool.h>
#include <sys/types.h>

/* Abstract socket names start with this; peers' addresses are checked for it. */
#define OTE_CMA_NAME_PREFIX "orbitte-cma."
/* Largest piece copied under one region guard: deregistration waits at most this long. */
#define OTE_CMA_GUARD_CHUNK (4u << 20)
/* Answers from the peer are polled for while they keep coming this often. */
#define OTE_CMA_POLL_NS (1000u * 1000u)
/* A reply to a copy of at least this much is sent at once, not with the next ones. */
#define OTE_CMA_REPLY_NOW (64u << 10)

/*
 * Copy length bytes between local (this process) and peer_addr in process
 * pid; to_peer: write into the peer, else read from it. Partial copies are
 * continued; errors map to statuses (ESRCH: REMOTE_DISCONNECT, EPERM:
 * UNREACHABLE, others: IO).
 */
ote_status_t ote_cma_copy(pid_t pid, void *local, uint64_t peer_addr, size_t length,
                          bool to_peer);

/*
 * Target side: PUT_REF, GET_REF and PROBE (ote_tcp_ref_handle_t). Copies
 * are deferred to the end of the receive call (ote_cma_target_flush,
 * ote_tcp_ref_flush_t), which serves the requests read together in groups.
 */
void ote_cma_target_handle(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h, uint64_t peer_addr);
void ote_cma_target_flush(ote_tcp_conn_t *c);

/* Initiator side: the PROBE exchange after HELLO (ote_tcp_connect_hook_t). */
ote_status_t ote_cma_probe(ote_tcp_iface_t *iface, int fd, const ote_tl_peer_t *peer,
                           uint64_t deadline);

/* Peer address blob: the abstract socket name without its leading NUL. */
ote_status_t ote_cma_addr_unpack(const void *buf, size_t len, struct sockaddr_storage *ss,
                                 socklen_t *sslen_p);

extern const ote_tl_ep_ops_t ote_cma_ep_ops;

#endif
