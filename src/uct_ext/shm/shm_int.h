/* Native shm component: what its files share. */
#ifndef OTE_SHM_INT_H
#define OTE_SHM_INT_H

#include "shm.h"

#include <stdatomic.h>

typedef struct shm_grant shm_grant_t;

/* A mapping of a target's region, initiator side. */
typedef struct {
    uint64_t base, length; /* in the target's address space */
    uint8_t *map;
    uint64_t grant;
    bool     writable;
} shm_map_t;

/* Per connection (conn->ext): mappings on the initiator, grants on the target. */
typedef struct {
    shm_map_t   *maps;
    size_t       num_maps, cap_maps;
    uint64_t     refused_base[OTE_SHM_REFUSED], refused_len[OTE_SHM_REFUSED];
    size_t       refused_next;
    uint64_t     checked_ns; /* last look at the socket before a copy */
    shm_grant_t *grants;
} shm_conn_t;

/* Copies queued by posts through mappings, run at the iface's next progress (shm_copy.c). */
typedef struct {
    uint8_t             *dst;
    const uint8_t       *src;
    size_t               len;
    ote_region_t        *region; /* the local side's, guarded during the copy */
    ote_tl_completion_t *comp;
    ote_status_t         status;
} shm_copy_t;

typedef struct {
    size_t job, off, len;
} shm_piece_t;

typedef struct {
    /* The queue (worker lock) and a spare array for the next one. */
    shm_copy_t  *jobs, *spare;
    size_t       njobs, cap, spare_cap, bytes;
    bool         flushing;
    /* A large queue is cut into pieces that the local iface's copy threads share. */
    shm_piece_t *pieces;
    size_t       pieces_cap;
    /* Its sources and destinations, checked for overlaps first (kept between flushes). */
    ote_par_span_t *spans;
    size_t          spans_cap;
    ote_par_t   *par; /* the local iface's */
} shm_copier_t;

void         ote_shm_copier_cleanup(shm_copier_t *cp);
/* Queue a copy; its completion runs from ote_shm_copy_flush. */
ote_status_t ote_shm_copy_add(shm_copier_t *cp, uint8_t *dst, const uint8_t *src, size_t len,
                              ote_region_t *region, ote_tl_completion_t *comp);
/* Copy what is queued, then complete it in order; the count. Worker lock held. */
unsigned     ote_shm_copy_flush(shm_copier_t *cp);

typedef struct {
    ote_stream_local_iface_t local;
    shm_copier_t    copier;
    pthread_cond_t  cond;      /* a grant ended; with the worker lock */
    uint64_t        unmap_timeout_ns;
    uint64_t        next_grant;
} shm_iface_t;

/* A mapping granted to one connection: an export of the region (mem.h). */
struct shm_grant {
    ote_mem_export_t x;
    shm_iface_t     *iface;
    ote_stream_conn_t  *conn;      /* NULL once the connection closed */
    ote_region_t    *region;    /* a life reference                */
    uint64_t         id;
    uint64_t         deadline_ns;
    bool             done;      /* unmapped, or the connection is gone */
    bool             taken;     /* deregistration revokes it          */
    shm_grant_t     *next;      /* the connection's grants            */
};

extern atomic_uint_least64_t ote_shm_bytes_mapped, ote_shm_bytes_by_ref;

/* conn->ext, made on first use; NULL on a closed connection or without memory. */
shm_conn_t *ote_shm_conn(ote_stream_conn_t *c);

/* shm_grant.c, target side */
void ote_shm_target_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h, uint64_t trailer);
void ote_shm_target_closed(ote_stream_conn_t *c, shm_conn_t *sc);

/* shm_map.c, initiator side */
void ote_shm_initiator_hook(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                            const uint8_t *trailer);
void ote_shm_initiator_closed(ote_stream_conn_t *c, shm_conn_t *sc);
/* The stream iface's post hook: through a mapping of the peer's memory where it can. */
ote_status_t ote_shm_post(ote_tl_ep_t *ep, bool put, void *local, size_t length,
                          ote_region_t *local_region, uint64_t remote, ote_tl_completion_t *comp);

#endif
