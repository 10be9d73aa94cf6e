/*
 * Staging pipelines: GPU memory over transports that only reach host
 * memory (TCP, shared memory without GPUDirect). A staged slice is cut into
 * chunks of OTE_STAGE_CHUNK_SIZE that pass through a pool of pinned host
 * chunks, at most OTE_STAGE_SLOTS of a slice in flight, so that the device
 * copy of chunk k+1 overlaps the network transfer of chunk k:
 *   WRITE  GPU -chunk copy-> pinned chunk -host rail put-> peer
 *   READ   peer -host rail get-> pinned chunk -chunk copy-> GPU
 *
 * The "cuda_stage" component gives each worker one stage iface (pool,
 * copier, progress); a stage rail pairs it with a host rail to the peer
 * built by the segment, and serves the memory pairs that involve local GPU
 * memory. Chunks return to the pool when their transfer ends, fails, is
 * canceled, times out or the host rail's peer dies.
 */
#ifndef OTE_PROTO_STAGE_H
#define OTE_PROTO_STAGE_H

#include "proto.h"

extern ote_tl_component_t ote_cuda_stage_component;

/* True for an iface of the cuda_stage component. */
bool ote_proto_stage_iface(const ote_tl_iface_t *iface);

/*
 * Fill rail (a free slot of the segment's rails) as the staging rail over
 * host: the stage iface stage_iface (of host's worker) in front of host's
 * ep. UNSUPPORTED when host cannot carry staged traffic (it reaches device
 * memory itself, or lacks host memory on both ends).
 */
ote_status_t ote_proto_stage_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                       ote_tl_iface_t *stage_iface);

typedef struct {
    unsigned long chunks;          /* chunks moved                                */
    unsigned long overlapped;      /* chunk copies started while a chunk of the
                                      same slice was on the network              */
    unsigned long pool_waits;      /* times a slice waited for a free chunk       */
    unsigned long max_inflight;    /* most chunks of one slice in flight at once  */
    long          chunks_in_use;   /* pinned chunks taken now, all pools          */
    unsigned long out_of_order;    /* chunks that completed before an earlier one */
} ote_proto_stage_stats_t;

void ote_proto_stage_stats(ote_proto_stage_stats_t *stats_p);

#endif
