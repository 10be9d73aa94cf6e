/*
 * The whole engine: the facts its rooms read (ote_engine_facts_t, first),
 * the rooms' own state it embeds, and what only the engine's files use.
 * Included only by the engine's own files (src/core/engine*.c, host.c,
 * select.c) and white-box tests; test/check_layers.sh keeps it so.
 */
#ifndef OTE_CORE_ENGINE_INT_H
#define OTE_CORE_ENGINE_INT_H

#include "engine.h"
#include "core/ctl/ctl.h"
#include "core/meta/meta.h"
#include "core/obs/obs.h"
#include "core/segment/segment.h"
#include "core/worker/worker.h"
#include "core/xfer/batch.h"

struct ote_engine {
    ote_engine_facts_t  facts; /* first: ote_engine_facts() casts */
    ote_xfer_state_t    xfer;  /* facts.xfer points here */
    ote_worker_set_t    wset;  /* facts.wset */
    ote_segment_table_t segs;  /* facts.segs */
    char                bind_ip[64];
    char                advertise_ip[64];
    struct ote_rdma    *rdma;     /* RDMA devices from sysfs (OTE_RDMA_SYSFS_ROOT) at creation */
    struct ote_engine_rdma_mon *rdma_mon; /* their ports re-read (OTE_RDMA_POLL_MS) */
    uint64_t            netif_sig; /* the network interfaces the last join round saw */
    /* A network device failed to open: the round that tries again (0: none), its back-off. */
    uint64_t            join_retry_ns, join_retry_gap_ns;
};

#endif
