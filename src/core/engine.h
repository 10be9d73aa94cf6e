/*
 * The engine: its settings, its lifetime, and the facts about it the other
 * core objects need (struct ote_engine, the transports it selected, the
 * device monitor and joins). Each object has its own header (worker.h,
 * batch.h, notify.h, segment.h, ctl.h, meta.h, select.h): include those
 * for their functions.
 */
#ifndef OTE_CORE_ENGINE_H
#define OTE_CORE_ENGINE_H

#include "base/auth.h"
#include "base/config.h"
#include "core/wire/desc.h"
#include "core/segment/fexport.h"
#include "mem/mem.h"
#include "core/meta/meta.h"
#include "obs/obs.h"
#include "proto/proto.h"
#include "proto/stage.h"
#include "select.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
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

extern const ote_config_table_t ote_engine_config_table;

/* Upper bound on the tables ote_engine_config_tables() lists. */
#define OTE_CONFIG_MAX_TABLES 32

/*
 * Every configuration table an engine reads, each once: the engine's, the
 * metadata store's, proto's, mem's, then the transport components'.
 * Returns how many were written to tables (at most max).
 */
size_t       ote_engine_config_tables(const ote_config_table_t **tables, size_t max);
/*
 * Warn about OTE_ variables no table knows, fill cfg from the engine-wide
 * table, and check every other table (a value that does not parse or is
 * out of range fails here with OTE_ERR_INVALID_PARAM).
 */
ote_status_t ote_engine_config_read(ote_engine_config_t *cfg);
void         ote_engine_config_release(ote_engine_config_t *cfg);
/* Every table with the values in effect (ote_info -c). */
ote_status_t ote_engine_config_print(FILE *stream);

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

/* The engine, whose fields the core objects read (each says who owns it). */
struct ote_engine {
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
    ote_auth_t      *auth;          /* key and connection limits */
    char             name[OTE_DESC_NAME_MAX + 1];
    char             host_id[OTE_DESC_NAME_MAX + 1];
    char             ctl_addr[OTE_DESC_NAME_MAX + 1]; /* host:port peers reach the listener at */
    ote_meta_t      *meta;          /* etcd or Redis; NULL with the p2p metadata */
    char             bind_ip[64];
    char             advertise_ip[64];
    uint64_t         instance_id;
    ote_mem_table_t *regions;
    ote_engine_tl_t  tls[OTE_MAX_IFACES];
    _Atomic size_t   num_tls;       /* grows while the engine runs (engine_join.c) */
    struct ote_rdma *rdma;        /* RDMA devices from sysfs (OTE_RDMA_SYSFS_ROOT) at creation */
    struct ote_engine_rdma_mon *rdma_mon; /* their ports re-read (OTE_RDMA_POLL_MS) */
    uint64_t         netif_sig;   /* the network interfaces the last join round saw */
    /* A network device failed to open: the round that tries again (0: none), its back-off. */
    uint64_t         join_retry_ns, join_retry_gap_ns;
    ote_topo_t      *topo;        /* this machine's or OTE_HWLOC_XML's; NULL: none */
    ote_topo_table_t *topo_table; /* its NICs against its memories (rails' ranking) */
    ote_md_t        *mds[OTE_MEM_MAX_MDS];
    _Atomic size_t   num_mds;       /* grows while the engine runs (engine_join.c) */
    ote_worker_t    *workers;
    size_t           num_workers;
    atomic_uint      next_worker;
    ote_ctl_t       *ctl;
    ote_proto_jobs_t *proto_jobs;   /* remote staging and PUTBACK requests (proto/jobs.h) */
    ote_notifier_t  *notifier;
    int              event_fd;
    atomic_bool      event_fd_used;
    int              poll_epfd;     /* every worker's epoll fd: waits without worker threads */
    _Atomic uint64_t wait_ns;       /* recent time ote_batch_wait() took (its polling budget) */
    /* admission (admission.c): reserved at submit, given back as tasks end */
    atomic_size_t    inflight_bytes;
    atomic_long      inflight_tasks;
    atomic_int       admit_waiters; /* submitters sleeping on admit_cond */
    pthread_mutex_t  admit_lock;
    pthread_cond_t   admit_cond;    /* CLOCK_MONOTONIC */
    /* batches the user holds, released at destroy */
    pthread_mutex_t  batch_lock;
    struct ote_batch *batches;
    /* notifications sent: one sequence counter; one lane per receiver instance */
    _Atomic uint64_t notify_seq;
    pthread_mutex_t  lane_lock;
    struct ote_notify_lane *lanes;
    /* received notifications */
    pthread_mutex_t  notif_lock;
    ote_notif_t     *notifs;
    size_t           notif_head, notif_count, notif_cap;
    struct ote_notif_senders *senders; /* last sequence per sender (under notif_lock) */
    /* open segments */
    pthread_mutex_t  seg_lock;
    struct ote_segment *segments;
    /* files exported to peers (fexport.c), served by the control listener */
    ote_fexport_table_t fexports;
    /* counters, histograms, the metrics endpoint (obs/obs.h) */
    ote_obs_t       *obs;
};


/*
 * engine_rdma.c: the RDMA ports against OTE_NET_DEVICES once the transports
 * are open. A selected port that is unusable, or that no transport runs on,
 * is reported to the selection (see ote_select_device_result).
 */
void ote_engine_rdma_select(ote_engine_h e, ote_select_t *sel);
/* ote_info -d: each RDMA port, its GIDs, the one chosen and why not the others. */
void ote_engine_rdma_print(ote_engine_h e, ote_select_t *sel, FILE *f);
/*
 * Re-read the RDMA ports every OTE_RDMA_POLL_MS (a thread of the engine; 0:
 * none): a port that goes down pauses the rails on it, one that comes up
 * resumes them (ote_engine_rdma_port_event); devices and ports that appear
 * or go are logged and shown by ote_info -d. Each round also runs
 * ote_engine_join_round (network interfaces, devices that join or leave).
 */
ote_status_t ote_engine_rdma_monitor_start(ote_engine_h e);
void         ote_engine_rdma_monitor_stop(ote_engine_h e);
/* One round of the monitor, from the calling thread. */
void         ote_engine_rdma_poll(ote_engine_h e);
/* True when dev names an RDMA port the engine last read as not ACTIVE. */
bool         ote_engine_rdma_port_down(ote_engine_h e, const char *dev);
/* The port (device) dev went down or came up: pause or resume every rail on it. */
void         ote_engine_rdma_port_event(ote_engine_h e, const char *dev, bool up);

/*
 * engine_topo.c: the topology (OTE_HWLOC_XML, else this machine) and how
 * near each of the engine's NICs is to each memory; without hwloc, or when
 * it does not load, rails are not ranked.
 */
void ote_engine_topo_open(ote_engine_h e);
void ote_engine_topo_close(ote_engine_h e);
/* ote_info -d: for each memory, the NICs ranked, and why one is left out. */
void ote_engine_topo_print(ote_engine_h e, FILE *f);

/*
 * engine_join.c: devices that join or leave while the engine runs, one
 * round per monitor round (OTE_RDMA_POLL_MS). When the network interfaces
 * changed, or with rdma_changed, every component's resources are asked for
 * again (rdma: the RDMA ports as read now): a selected, usable resource
 * the engine does not run is opened on the running workers
 * (ote_worker_iface_add) and enters the descriptor, which is published
 * again; segments gain its rails at their next refresh (ote_wireup_extend).
 * One no longer offered is gone: its rails pause and it leaves the
 * descriptor; when it is offered again it resumes. The monitor's thread
 * (or a caller of ote_engine_rdma_poll) only.
 */
void ote_engine_join_round(ote_engine_h e, const struct ote_rdma *rdma, bool rdma_changed);
/*
 * engine_join.c: md, new to the running engine, joins it: every region
 * registered so far (and what the registration cache keeps) is registered
 * on it, then it is listed in the descriptor with their rkeys. False, with
 * a log line, when it cannot (nothing stays registered on it). The caller
 * keeps md open until the engine is destroyed.
 */
bool ote_engine_md_join(ote_engine_h e, const char *tl_name, const char *dev_name, ote_md_t *md);
/*
 * A selected network device failed to open (not UNSUPPORTED): a later round
 * asks again even when nothing changed, 1 s later, then twice as long each
 * time up to a minute. At creation or from the monitor only.
 */
void ote_engine_join_failed(ote_engine_h e);
/*
 * Open res's iface on every worker (ifaces[w]) and check that it moves
 * bytes one-sided (its capabilities in *caps_p). false: none stays open
 * (md is the caller's), the reason was logged, and a failure to open a
 * network device, or any device joining the running engine (joining), was
 * reported to the device monitor (ote_engine_join_failed), which tries
 * again.
 */
bool ote_engine_ifaces_open(ote_engine_h e, ote_tl_component_t *comp,
                            const ote_tl_resource_t *res, ote_md_t *md,
                            ote_tl_iface_params_t *params, bool joining,
                            ote_tl_iface_t **ifaces, ote_tl_caps_t *caps_p);
/* A hash of the network interfaces up with an address now (what a round compares). */
uint64_t ote_engine_netif_sig(void);
/*
 * True when iface's device left the engine (see ote_engine_join_round):
 * the gone flag engine_join.c sets on its transport (inline: segments and
 * the wire-up read it without calling up into the engine's files).
 */
static inline bool ote_engine_iface_gone(ote_engine_h e, const ote_tl_iface_t *iface)
{
    size_t n = atomic_load(&e->num_tls);

    for (size_t k = 0; k < n; k++) {
        const ote_engine_tl_t *tl = &e->tls[k];

        if (strcmp(tl->resource.tl_name, iface->resource.tl_name) == 0 &&
            strcmp(tl->resource.dev_name, iface->resource.dev_name) == 0)
            return atomic_load(&tl->gone);
    }
    return false;
}

/* engine.c: encode this engine's descriptor. */
ote_status_t ote_engine_desc_encode(ote_engine_h engine, ote_buf_t *out);
/*
 * The same without its regions: everything else the descriptor says (the
 * control listener's cache of encoded descriptors compares it).
 */
ote_status_t ote_engine_desc_skeleton(ote_engine_h engine, ote_buf_t *out);
/* engine.c: the i-th transport component an engine opens, NULL past the last. */
ote_tl_component_t *ote_engine_component(size_t i);
/* The engine-wide parameters every iface is opened with (no worker set). */
void ote_engine_iface_params(ote_engine_h e, ote_tl_iface_params_t *params);

/* host.c */
void ote_host_id(char *buf, size_t len);

#endif
