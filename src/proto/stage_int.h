/*
 * Private to the staging protocol: what its local (stage.c) and remote
 * (stage_remote.c) pipelines share.
 */
#ifndef OTE_PROTO_STAGE_INT_H
#define OTE_PROTO_STAGE_INT_H

#include "ctl_ep.h"
#include "stage.h"
#include "uct_ext/cuda/cuda_copier.h"

#include <stdatomic.h>
#include <stdbool.h>

#define STAGE_STREAMS 2

typedef struct ote_stage_worker stage_worker_t;
typedef struct stage_op         stage_op_t;

typedef struct stage_chunk {
    ote_tl_completion_t  comp;   /* first: the host rail's completion */
    stage_worker_t      *sw;
    stage_op_t          *op;
    uint8_t             *buf;
    size_t               off, len;
    unsigned long        seq;
    struct stage_chunk  *next;   /* free list */
} stage_chunk_t;

struct ote_stage_worker {
    ote_cuda_copier_t          *copier;
    ote_mem_table_t            *regions;
    size_t                      chunk_size;
    unsigned                    slots;
    unsigned                    nchunks;
    ote_region_t               *pool_region;
    uint8_t                    *pool_base;
    stage_chunk_t              *chunks;
    stage_chunk_t              *free_chunks;
    stage_op_t                 *wait_head, *wait_tail; /* slices waiting for a chunk */
    size_t                      active_ops;
    ote_proto_progress_hooks_t  hooks;
    int                         progress_id;
};

typedef struct {
    ote_cuda_ep_t   super;   /* the cuda base's ep: put and get call stage_post */
    /* The rail's iface (a name, the staging ep ops), held by each slice in flight too. */
    ote_proto_ctl_iface_t *iface;
    stage_worker_t *sw;
    ote_rail_t     *host;
    /* remote staging rail: the peer's GPU memory through its pinned chunks */
    bool                     remote;
    ote_rail_t              *lstage; /* local staging over host, or NULL */
    ote_stage_remote_hooks_t hooks;
} stage_ep_t;

typedef struct {
    atomic_ulong chunks, overlapped, pool_waits, max_inflight, out_of_order, remote_busy;
    atomic_long  in_use;
} ote_stage_stats_t;

/* Counters behind ote_proto_stage_stats(). */
extern ote_stage_stats_t ote_stage_stats;

/* A staging rail's ep for sw in front of host, with the rail's caps taken from host. */
stage_ep_t  *ote_stage_ep_new(ote_rail_t *rail, ote_rail_t *host, stage_worker_t *sw);

/* A slice on a remote staging rail: the peer's GPU memory through its chunks. */
ote_status_t ote_stage_remote_post(stage_ep_t *ep, bool write, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   ote_tl_completion_t *comp);

#endif
