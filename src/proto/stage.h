/*
 * Staging protocol: GPU memory over transports that only reach host memory
 * (TCP, shared memory without GPUDirect). A staged slice is cut into
 * chunks of OTE_STAGE_CHUNK_SIZE that pass through a pool of pinned host
 * chunks, at most OTE_STAGE_SLOTS of a slice in flight, so that the device
 * copy of chunk k+1 overlaps the network transfer of chunk k:
 *   WRITE  GPU -chunk copy-> pinned chunk -host rail put-> peer
 *   READ   peer -host rail get-> pinned chunk -chunk copy-> GPU
 *
 * Staging is a protocol, not a transport: each worker gets one staging
 * context (pool, copier, slices waiting for a chunk) whose progress is
 * registered on the worker; the wire-up puts a staging rail in front of
 * each host rail, which serves the memory pairs that involve local GPU
 * memory. Chunks return to the pool when their transfer ends, fails, is
 * canceled, times out or the host rail's peer dies. OTE_TLS names it
 * "cuda_stage".
 *
 * Remote staging serves the peer's GPU memory that no transport reaches:
 * the peer pins chunks of its own pool for us (STAGE control messages),
 * we move the data into or out of them with the host rail (through the
 * local staging rail for our GPU memory), and the peer copies between the
 * chunks and its GPU (Delegate), checked against its region table.
 */
#ifndef OTE_PROTO_STAGE_H
#define OTE_PROTO_STAGE_H

#include "jobs.h"
#include "proto.h"
#include "stage_msg.h"

#include <pthread.h>

/* The name OTE_TLS selects staging by. */
#define OTE_PROTO_STAGE_NAME "cuda_stage"

/* OTE_STAGE_*: the staging pipelines' chunks. */
typedef struct {
    size_t chunk_size; /* pinned host chunk */
    long   slots;      /* chunks in flight per request */
} ote_stage_config_t;

extern const ote_config_table_t ote_stage_config_table;

/* One worker's staging context. */
typedef struct ote_stage_worker ote_stage_worker_t;

/* Staging can run here: the CUDA libraries load. */
bool ote_proto_stage_available(void);

/*
 * The staging context of one worker: its chunks (cfg, pinned on first use,
 * registered in regions) and copier; its progress registered through
 * hooks. UNSUPPORTED without CUDA.
 */
ote_status_t ote_proto_stage_worker_create(ote_mem_table_t *regions,
                                           const ote_stage_config_t *cfg,
                                           const ote_proto_progress_hooks_t *hooks,
                                           ote_stage_worker_t **sw_p);
/* After the worker stopped, every slice on its staging rails ended. */
void         ote_proto_stage_worker_destroy(ote_stage_worker_t *sw);

/*
 * Fill rail (a free slot of the segment's rails) as the staging rail over
 * host, staged by sw (host's worker's context). UNSUPPORTED when host
 * cannot carry staged traffic (it reaches device memory itself, or lacks
 * host memory on both ends).
 */
ote_status_t ote_proto_stage_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                       ote_stage_worker_t *sw);

/* The host rail a staging rail sends through, NULL for other rails. */
ote_rail_t *ote_proto_stage_rail_host(const ote_rail_t *rail);

/* The ep operations of staging rails (local and remote). */
extern const ote_tl_ep_ops_t ote_proto_stage_ep_ops;

typedef struct {
    unsigned long chunks;          /* chunks moved                                */
    unsigned long overlapped;      /* chunk copies started while a chunk of the
                                      same slice was on the network              */
    unsigned long pool_waits;      /* times a slice waited for a free chunk       */
    unsigned long max_inflight;    /* most chunks of one slice in flight at once  */
    long          chunks_in_use;   /* pinned chunks taken now, all pools          */
    unsigned long out_of_order;    /* chunks that completed before an earlier one */
    unsigned long remote_busy;     /* Pin answered BUSY (peer's pool taken)       */
    long          target_pinned;   /* this process's target chunks pinned now     */
} ote_proto_stage_stats_t;

void ote_proto_stage_stats(ote_proto_stage_stats_t *stats_p);

/* ---- remote staging, target side (control listener thread only) ---- */
typedef struct ote_stage_target ote_stage_target_t;

/*
 * Pool of cfg->slots pinned chunks of cfg->chunk_size (ote_stage_config_table),
 * reachable by host transports; timeout_ms bounds how long a chunk stays
 * pinned for a peer.
 */
ote_status_t ote_stage_target_create(ote_mem_table_t *regions, const ote_stage_config_t *cfg,
                                     long timeout_ms, ote_stage_target_t **t_p);
void         ote_stage_target_destroy(ote_stage_target_t *t);
/*
 * Serve one STAGE request of control connection conn. PIN: chunks gets the
 * pinned chunks (BUSY when none is free). DELEGATE: every chunk must be
 * pinned by conn (else INVALID_PARAM), every GPU range inside a registered
 * GPU region with remote write (to GPU) or remote read (from GPU) access
 * (else NOT_REGISTERED, OUT_OF_BOUNDS or ACCESS, nothing copied).
 */
ote_status_t ote_stage_target_request(ote_stage_target_t *t, uintptr_t conn,
                                      const ote_ctl_stage_t *m, uint64_t *chunks,
                                      size_t *count_p, uint32_t *chunk_size_p);
/*
 * Release the chunks of a connection that went away. Such a chunk (and one
 * the sweep releases) is pinned again only after the timeout: its owner's
 * transfers into it may still land until then.
 */
void         ote_stage_target_conn_gone(ote_stage_target_t *t, uintptr_t conn);
/*
 * Release chunks pinned longer than the timeout. Returns the earliest
 * deadline of the chunks still pinned, 0 when none is (or t is NULL).
 */
uint64_t     ote_stage_target_sweep(ote_stage_target_t *t, uint64_t now_ns);
/* Target chunks pinned now, all engines of the process. */
long         ote_stage_target_pinned_now(void);

/*
 * ---- remote staging, initiator side ----
 * A rail in front of host rail `host` (and of the local staging rail over
 * it, local_stage, or NULL) that reaches the peer's GPU memory through the
 * peer's pinned chunks; ctl sends a control request to the peer. Its
 * slices run as jobs of the engine's pool (jobs): a full queue ends a
 * slice BUSY.
 */
typedef struct {
    ote_proto_ctl_hooks_t base;      /* ctl: STAGE, answered by STAGE_ACK */
    int               worker_wake_fd;
    long              timeout_ms;
} ote_stage_remote_hooks_t;

ote_status_t ote_proto_stage_remote_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                              ote_rail_t *local_stage,
                                              ote_stage_worker_t *sw,
                                              const ote_stage_remote_hooks_t *hooks);

#endif
