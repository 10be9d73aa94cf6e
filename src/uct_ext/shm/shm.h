/*
 * Native shm component: single copy through shared mappings on one host.
 *
 * It is what cma is (the stream base's local mode, stream/stream_local.h: the
 * stream connection by reference over an abstract AF_UNIX socket, with its
 * handshake, authentication and probe) plus descriptor passing. For a remote range the initiator has no mapping
 * of, it sends MAP; the target checks the range like any request (region,
 * bounds, the copy's access flag) and, for engine-owned host memory backed
 * by a sealed memfd, answers with the memfd (SCM_RIGHTS): opened read-only
 * unless the region allows OTE_ACCESS_REMOTE_WRITE. The initiator checks
 * the answer (ote_shm_map_check), maps it and copies with memcpy from then
 * on. Ranges in other memory (malloc'd, registered by the user) go by
 * reference as over cma: the target checks and copies with process_vm_*.
 *
 * The target records each mapping it granted as an export of the region
 * (mem.h): deregistration sends UNMAP and waits for UNMAP_ACK, at most
 * OTE_SHM_UNMAP_TIMEOUT_MS, after which the connection is closed.
 */
#ifndef OTE_SHM_H
#define OTE_SHM_H

#include "uct_ext/stream/stream.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* MAP_ACK flags */
#define OTE_SHM_MAP_WRITABLE 1u
/* Mappings one connection holds at most; past it copies go by reference. */
#define OTE_SHM_MAX_MAPS     1024
/* Ranges the target refused to map, remembered per connection. */
#define OTE_SHM_REFUSED      16
/* A mapping is used without looking at its connection for at most this long. */
#define OTE_SHM_CHECK_NS     (1000u * 1000u)

/* A checked MAP_ACK: what to map. */
typedef struct {
    uint64_t base;     /* the region in the target's address space */
    uint64_t length;
    uint64_t grant;    /* named again by UNMAP */
    bool     writable;
} ote_shm_grant_info_t;

/*
 * Check a MAP_ACK (status OK) that answers MAP of [want, want+want_len),
 * with its trailer and the descriptor that came with it: the region covers
 * the range, the grant id is not 0, only known flags are set, and fd is a
 * memfd sealed against shrinking whose size covers the region, opened for
 * writing if the grant says writable. OTE_ERR_PROTOCOL on any violation.
 * fd is not closed.
 */
ote_status_t ote_shm_map_check(const ote_stream_hdr_t *h, const uint8_t *trailer,
                               size_t trailer_len, int fd, uint64_t want, uint64_t want_len,
                               ote_shm_grant_info_t *info_p);

/* Bytes this process copied through mappings and by reference, all shm ifaces (tests). */
void ote_shm_stats(uint64_t *mapped_p, uint64_t *by_ref_p);

#endif
