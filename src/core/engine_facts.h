/*
 * The engine as its rooms see it (ctl/, xfer/, segment/, worker/, obs/):
 * its settings, its names, the transports and memory domains it opened,
 * the objects it created for every room to use, and the services a room
 * asks of it. It is the first member of struct ote_engine (engine_int.h,
 * the engine's files only), so ote_engine_facts() is a cast, no call.
 * A room's own state (ote_xfer_state_t in xfer/xfer_def.h,
 * ote_worker_set_t in worker/worker_def.h, ote_segment_table_t in
 * segment/segment_def.h) is
 * reached from here through its pointer; only the room that owns it, and
 * the engine that creates it, see its fields.
 *
 * This header includes nothing of core but wire/desc.h (names' lengths):
 * the rooms read the engine without drawing an arrow to its files.
 */
#ifndef OTE_CORE_ENGINE_FACTS_H
#define OTE_CORE_ENGINE_FACTS_H

#include "base/auth.h"
#include "core/wire/desc.h"
#include "mem/mem.h"
#include "proto/proto.h"
#include "proto/stage.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#define OTE_MAX_WORKERS      64
#define OTE_MAX_IFACES       32

/* Engine-wide settings (variables without a component prefix). */
typedef struct {
    int    log_level;
    char  *tls;
    char  *net_devices;
    char  *metadata;
    char  *engine_name;
    long   num_workers;
    size_t slice_size;
    long   retry_count;
    size_t rail_max_bytes;
    long   rail_max_slices;
    long   rail_cooldown_ms;
    long   rail_cooldown_max_ms;
    long   connect_timeout_ms;
    long   xfer_timeout_ms;
    long   poll_grace_us;
    long   poll_spin_max_us;
    long   poll_park_us;
    bool   progress_thread;
    char  *worker_cpus;
    size_t max_inflight_bytes;
    long   max_inflight_tasks;
    long   submit_timeout_ms;
    size_t max_ctl_msg;
    long   max_notif_backlog;
    long   notify_timeout_ms;
    long   max_conns;
    long   max_conns_per_peer;
    long   handshake_timeout_ms;
    char  *auth_key;
    char  *auth_key_file;
    char  *host_id;
    char  *hwloc_xml;
    char  *file_remote; /* auto, rails or ctl (ote_engine_file_remote_mode) */
    long   desc_reread_interval_ms; /* re-reads of a descriptor for ranges it lacks */
    char  *metrics_addr; /* OTE_METRICS_ADDR: the metrics endpoint (obs/), "" none */
} ote_engine_config_t;

typedef struct ote_worker   ote_worker_t;
typedef struct ote_task     ote_task_t;
typedef struct ote_ctl      ote_ctl_t;
typedef struct ote_notifier ote_notifier_t;

/* A transport resource the engine selected, with its md. */
typedef struct {
    ote_tl_resource_t resource;
    ote_md_t         *md;
    int               md_index;
    ote_tl_caps_t     caps;
    /* Its device went away while the engine runs: out of descriptors and new rails. */
    atomic_bool       gone;
} ote_engine_tl_t;

typedef struct ote_meta ote_meta_t;
typedef struct ote_obs  ote_obs_t;
typedef struct ote_xfer_state     ote_xfer_state_t;
typedef struct ote_worker_set     ote_worker_set_t;
typedef struct ote_segment_table  ote_segment_table_t;

/*
 * What a room asks of the engine's files, set by the engine at creation:
 * rooms call down, never up into engine*.c.
 */
typedef struct {
    /* This engine's descriptor, whole or without its regions (ctl/'s cache). */
    ote_status_t (*desc_encode)(ote_engine_h e, ote_buf_t *out);
    ote_status_t (*desc_skeleton)(ote_engine_h e, ote_buf_t *out);
    /* ote_mem_alloc and ote_mem_free (the protocols' pools that ctl/ hosts). */
    ote_status_t (*mem_alloc)(ote_engine_h e, size_t length, const char *location,
                              unsigned access, void **addr_p, ote_mem_h *mem_p);
    ote_status_t (*mem_free)(ote_engine_h e, ote_mem_h mem);
    /* True when dev names an RDMA port the device monitor last read as not ACTIVE. */
    bool (*rdma_port_down)(ote_engine_h e, const char *dev);
} ote_engine_services_t;

/* Set at creation, constant after but where a field says otherwise. */
typedef struct {
    ote_engine_config_t config;
    /*
     * Tables of the code core drives itself, read with the engine's own so
     * that the settings at creation hold for the engine's life: staging
     * (the target pool is made on the first request) and the segments a
     * component opens itself (tl_configs[i]: the configuration of
     * ote_tl_components[i] where it has objects, else NULL; file segments).
     */
    ote_stage_config_t  stage_config;
    void              **tl_configs;
    ote_auth_t       *auth;          /* key and connection limits */
    char              name[OTE_DESC_NAME_MAX + 1];
    char              host_id[OTE_DESC_NAME_MAX + 1];
    char              ctl_addr[OTE_DESC_NAME_MAX + 1]; /* host:port peers reach the listener at */
    ote_meta_t       *meta;          /* etcd or Redis; NULL with the p2p metadata */
    uint64_t          instance_id;
    ote_mem_table_t  *regions;
    ote_engine_tl_t   tls[OTE_MAX_IFACES];
    _Atomic size_t    num_tls;       /* grows while the engine runs (engine_join.c) */
    ote_md_t         *mds[OTE_MEM_MAX_MDS];
    _Atomic size_t    num_mds;       /* grows while the engine runs (engine_join.c) */
    ote_topo_t       *topo;          /* this machine's or OTE_HWLOC_XML's; NULL: none */
    ote_topo_table_t *topo_table;    /* its NICs against its memories (rails' ranking) */
    ote_worker_t     *workers;
    size_t            num_workers;
    ote_ctl_t        *ctl;
    ote_proto_jobs_t *proto_jobs;    /* remote staging and PUTBACK requests (proto/jobs.h) */
    ote_obs_t        *obs;           /* counters, histograms, the metrics endpoint (obs/obs.h) */
    /* The rooms' own state, each defined in its room's header. */
    ote_xfer_state_t    *xfer;
    ote_worker_set_t    *wset;
    ote_segment_table_t *segs;
    ote_engine_services_t svc;
} ote_engine_facts_t;

static inline ote_engine_facts_t *ote_engine_facts(ote_engine_h e)
{
    return (ote_engine_facts_t *)(void *)e;
}

/*
 * True when iface's device left the engine (see ote_engine_join_round):
 * the gone flag engine_join.c sets on its transport.
 */
static inline bool ote_engine_iface_gone(ote_engine_h e, const ote_tl_iface_t *iface)
{
    const ote_engine_facts_t *f = ote_engine_facts(e);
    size_t n = atomic_load(&ote_engine_facts(e)->num_tls);

    for (size_t k = 0; k < n; k++) {
        const ote_engine_tl_t *tl = &f->tls[k];

        if (strcmp(tl->resource.tl_name, iface->resource.tl_name) == 0 &&
            strcmp(tl->resource.dev_name, iface->resource.dev_name) == 0)
            return atomic_load(&tl->gone);
    }
    return false;
}

/* True when dev names an RDMA port the engine last read as not ACTIVE. */
static inline bool ote_engine_rdma_port_down(ote_engine_h e, const char *dev)
{
    return ote_engine_facts(e)->svc.rdma_port_down(e, dev);
}

#endif
