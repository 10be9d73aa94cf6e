/*
 * The engine-wide configuration (variables without a component prefix) and
 * the list of every table an engine reads: its own, the metadata store's,
 * proto's, mem's and those of the transport components.
 */
#include "core/engine_int.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>

#define F(_f) offsetof(ote_engine_config_t, _f)

static const ote_cfg_entry_t engine_config_fields[] = {
    {"LOG_LEVEL", "warn", OTE_CFG_LOGLEVEL, F(log_level),
     "Log threshold: none, error, warn, info, debug, trace."},
    {"TLS", "all", OTE_CFG_STRING, F(tls),
     "Transports to use: all, or a comma list of names (tcp and cma are the native ones, "
     "uct_tcp and uct_cma UCX's, shm the native shared mappings) and aliases (shm/sm = "
     "shm,cma,uct_cma,posix,sysv,xpmem,knem; "
     "mm = posix,sysv,xpmem; ib = rc_mlx5,rc_verbs,dc_mlx5,ud_mlx5,ud_verbs; rc, rc_v, rc_x, "
     "dc, dc_x, ud, ud_v, ud_x; cuda = cuda_copy,cuda_ipc,gdr_copy); \\name never an alias; "
     "a leading ^ excludes exactly what the list names (^cma leaves uct_cma); a name or alias "
     "that matches nothing here fails engine creation with OTE_ERR_NO_DEVICE."},
    {"NET_DEVICES", "all", OTE_CFG_STRING, F(net_devices),
     "Network devices of network transports: all, or a comma list of interface and port "
     "names (eth0, lo, mlx5_0:1; mlx5_0 = all its ports; decimal ranges mlx5_[0-3]:1); a "
     "leading ^ excludes them; a device that is not here, or an RDMA port listed that is "
     "unusable or carries no transport, fails engine creation with OTE_ERR_NO_DEVICE."},
    {"METADATA", "p2p", OTE_CFG_STRING, F(metadata),
     "Where engines find each other's descriptors when the engine params do not say: p2p "
     "(from the peer's control listener, no server), etcd://host:port[,host:port...] (etcd "
     "v3 JSON gateway, endpoints tried in turn) or redis://[:password@]host:port[/db]."},
    {"ENGINE_NAME", "", OTE_CFG_STRING, F(engine_name),
     "The engine's segment name when the engine params do not give one; empty = host:port "
     "of the control listener. With a metadata store any 1..255 printable characters "
     "without spaces."},
    {"NUM_WORKERS", "1", OTE_CFG_INT, F(num_workers),
     "Worker threads that progress transports.",
     .min = 1, .max = 64},
    {"SLICE_SIZE", "0", OTE_CFG_SIZE, F(slice_size),
     "Largest slice a request is cut into; 0 = each transport's own default."},
    {"RETRY_COUNT", "3", OTE_CFG_INT, F(retry_count),
     "Times a slice that failed on a rail (connection reset, timeout, unreachable) is posted "
     "again on another rail of the same peer instance before its task fails.",
     .min = 0, .max = OTE_CFG_NO_MAX},
    {"RAIL_MAX_BYTES", "16m", OTE_CFG_SIZE, F(rail_max_bytes),
     "Bytes in flight per rail, all batches and threads together; a slice whose best rail "
     "is full waits for one to end (0 = no limit)."},
    {"RAIL_MAX_SLICES", "256", OTE_CFG_INT, F(rail_max_slices),
     "Slices in flight per rail, all batches and threads together (0 = no limit).",
     .min = 0, .max = OTE_CFG_NO_MAX},
    {"RAIL_COOLDOWN_MS", "200", OTE_CFG_INT, F(rail_cooldown_ms),
     "Pause of a rail after a slice failed on it; then it is probed (connections made again, "
     "one slice) before it carries again.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"RAIL_COOLDOWN_MAX_MS", "10000", OTE_CFG_INT, F(rail_cooldown_max_ms),
     "Each pause after a failed probe is twice the one before, up to this.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"CONNECT_TIMEOUT_MS", "5000", OTE_CFG_INT, F(connect_timeout_ms),
     "Bound on connecting to a peer and fetching its descriptor, the lookup of its host name "
     "included.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"XFER_TIMEOUT_MS", "30000", OTE_CFG_INT, F(xfer_timeout_ms),
     "A posted slice with no answer for this long fails its connection with TIMEOUT; a target "
     "resets a connection whose answers its peer has not read for this long.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"POLL_GRACE_US", "20", OTE_CFG_INT, F(poll_grace_us),
     "Workers busy-poll this long after the last event before they sleep.",
     .min = 0, .max = OTE_CFG_TIME_MAX},
    {"POLL_SPIN_MAX_US", "200", OTE_CFG_INT, F(poll_spin_max_us),
     "While events come faster than this, a worker polls for up to twice their interval "
     "after the last one, and ote_batch_wait() polls for up to twice the recent waits, "
     "capped at this; past it they sleep. 0 = workers use OTE_POLL_GRACE_US only.",
     .min = 0, .max = OTE_CFG_TIME_MAX},
    {"POLL_PARK_US", "5000", OTE_CFG_INT, F(poll_park_us),
     "While threads in ote_batch_wait() progress a worker, its thread sleeps apart from the "
     "answers they take and looks this often whether they are still there; what arrives "
     "after the last of them returned with its batch done waits at most this long when no "
     "thread progresses.",
     .min = 1, .max = 1000000},
    {"PROGRESS_THREAD", "y", OTE_CFG_BOOL, F(progress_thread),
     "Worker threads progress transfers in the background; n = none is started and only "
     "threads in ote_batch_wait() or ote_engine_progress() progress (an engine that serves "
     "peers must then call them)."},
    {"WORKER_CPUS", "", OTE_CFG_STRING, F(worker_cpus),
     "CPU list for worker threads (e.g. 2,3 or 4-7); empty = near their NIC where hwloc places it, else unbound."},
    {"MAX_INFLIGHT_BYTES", "4g", OTE_CFG_SIZE, F(max_inflight_bytes),
     "Admission limit: bytes submitted and not yet ended, per engine."},
    {"MAX_INFLIGHT_TASKS", "1048576", OTE_CFG_INT, F(max_inflight_tasks),
     "Admission limit: tasks submitted and not yet ended, per engine.",
     .min = 1, .max = OTE_CFG_NO_MAX},
    {"SUBMIT_TIMEOUT_MS", "0", OTE_CFG_INT, F(submit_timeout_ms),
     "When admission is full, submit waits this long before BUSY; 0 = return BUSY at once.",
     .min = 0, .max = OTE_CFG_TIME_MAX},
    {"MAX_CTL_MSG", "64m", OTE_CFG_SIZE, F(max_ctl_msg),
     "Largest control-plane message accepted from a peer.",
     .min = 4096, .max = 1ll << 32},
    {"MAX_NOTIF_BACKLOG", "65536", OTE_CFG_INT, F(max_notif_backlog),
     "Received notifications kept until ote_notify_recv; beyond it senders get BUSY.",
     .min = 1, .max = OTE_CFG_NO_MAX},
    {"NOTIFY_TIMEOUT_MS", "5000", OTE_CFG_INT, F(notify_timeout_ms),
     "A notification whose receiver's backlog is full is sent again for this long before it fails BUSY; 0 = fail at once.",
     .min = 0, .max = OTE_CFG_TIME_MAX},
    {"MAX_CONNS", "4096", OTE_CFG_INT, F(max_conns),
     "Accepted connections per engine, control and data listeners together.",
     .min = 1, .max = OTE_CFG_NO_MAX},
    {"MAX_CONNS_PER_PEER", "256", OTE_CFG_INT, F(max_conns_per_peer),
     "Accepted connections from one peer address, all listeners of the engine together "
     "(UCT eps a peer's CONNECT makes: per interface).",
     .min = 1, .max = OTE_CFG_NO_MAX},
    {"HANDSHAKE_TIMEOUT_MS", "10000", OTE_CFG_INT, F(handshake_timeout_ms),
     "An accepted connection that has not authenticated and sent its first request by then is closed.",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"AUTH_KEY", "", OTE_CFG_STRING, F(auth_key),
     "Shared secret: peers must prove they hold it before anything is exchanged."},
    {"AUTH_KEY_FILE", "", OTE_CFG_STRING, F(auth_key_file),
     "File holding the shared secret (first line)."},
    {"HOST_ID", "", OTE_CFG_STRING, F(host_id),
     "Override of the host identity; peers with the same one use intra-host transports."},
    {"HWLOC_XML", "", OTE_CFG_STRING, F(hwloc_xml),
     "Tests and diagnostics: rank rails on the topology of this hwloc XML export instead of "
     "this machine's (hwloc's HWLOC_XMLFILE also applies); workers are still bound on this "
     "machine's."},
    {"FILE_REMOTE", "auto", OTE_CFG_STRING, F(file_remote),
     "How the bytes of a peer's exported file (<export>@<engine>) travel: auto = over the "
     "engines' data rails (the target WRITEs what it read into this engine's memory, or READs "
     "what it writes) where the local range lies in a region registered with "
     "OTE_ACCESS_REMOTE_WRITE for a READ, OTE_ACCESS_REMOTE_READ for a WRITE, else inside the "
     "control messages; rails = always over the data rails, a slice whose local region lacks "
     "that access fails OTE_ERR_ACCESS; ctl = always inside the control messages."},
    {"DESC_REREAD_INTERVAL_MS", "100", OTE_CFG_INT, F(desc_reread_interval_ms),
     "A request whose remote range lies in no region of the peer's descriptor makes the "
     "engine read that descriptor again (the peer may have registered the region since): "
     "one read at a time per segment, whose result every request waiting for it uses, and "
     "at most one per this interval per segment (requests that find one too recent wait "
     "for the interval to end); 0 = no interval, still one read at a time.",
     .min = 0, .max = 3600000},
    {"METRICS_ADDR", "", OTE_CFG_STRING, F(metrics_addr),
     "Serve /metrics (Prometheus text) and /health over HTTP here: host:port, or a port alone "
     "for 127.0.0.1 (0: any free port, see ote_engine_metrics_addr); engines of one process "
     "asking for the same address share it. Empty: no endpoint (docs/observability.md)."},
};

/* Bounds across entries; each entry's own are in the table. */
static ote_status_t engine_config_validate(const void *opts)
{
    const ote_engine_config_t *cfg = opts;

    if (cfg->rail_cooldown_max_ms < cfg->rail_cooldown_ms) {
        ote_error("OTE_RAIL_COOLDOWN_MAX_MS must be at least OTE_RAIL_COOLDOWN_MS");
        return OTE_ERR_INVALID_PARAM;
    }
    if (strcmp(cfg->file_remote, "auto") != 0 && strcmp(cfg->file_remote, "rails") != 0 &&
        strcmp(cfg->file_remote, "ctl") != 0) {
        ote_error("OTE_FILE_REMOTE='%s': expected auto, rails or ctl", cfg->file_remote);
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

OTE_CONFIG_TABLE_DEFINE(ote_engine_config_table, "", "engine", engine_config_fields,
                        ote_engine_config_t, engine_config_validate);

static size_t tables_add(const ote_config_table_t **tables, size_t n, size_t max,
                         const ote_config_table_t *t)
{
    for (size_t i = 0; i < n; i++) {
        if (tables[i] == t)
            return n;
    }
    if (n < max)
        tables[n++] = t;
    return n;
}

size_t ote_engine_config_tables(const ote_config_table_t **tables, size_t max)
{
    size_t n = 0;

    n = tables_add(tables, n, max, &ote_engine_config_table);
    n = tables_add(tables, n, max, &ote_meta_config_table);
    for (size_t i = 0; ote_proto_config_tables[i] != NULL; i++)
        n = tables_add(tables, n, max, ote_proto_config_tables[i]);
    for (size_t i = 0; ote_mem_config_tables[i] != NULL; i++)
        n = tables_add(tables, n, max, ote_mem_config_tables[i]);
    /* The components an engine opens, then those this build lacks (same variables everywhere). */
    for (size_t i = 0; ote_tl_components[i] != NULL; i++)
        n = tables_add(tables, n, max, ote_tl_components[i]->ops->config_table);
    for (size_t i = 0; ote_tl_config_tables[i] != NULL; i++)
        n = tables_add(tables, n, max, ote_tl_config_tables[i]);
    return n;
}

/*
 * Read table into a struct of its own (every value parsed and checked),
 * print it to stream where that is not NULL, and let it go.
 */
static ote_status_t table_check(const ote_config_table_t *table, FILE *stream)
{
    void *opts = calloc(1, table->struct_size);
    ote_status_t status;

    if (opts == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_config_fill(table, opts);
    if (status == OTE_OK) {
        if (stream != NULL)
            ote_config_print(table, opts, stream);
        ote_config_release(table, opts);
    }
    free(opts);
    return status;
}

ote_status_t ote_engine_config_read(ote_engine_config_t *cfg)
{
    const ote_config_table_t *tables[OTE_CONFIG_MAX_TABLES];
    size_t n = ote_engine_config_tables(tables, OTE_CONFIG_MAX_TABLES);
    ote_status_t status;

    ote_config_warn_unknown(tables, n);
    status = ote_config_fill(&ote_engine_config_table, cfg);
    if (status != OTE_OK)
        return status;
    /*
     * Each component reads its own table when it opens; a value that does
     * not parse or is out of range fails the engine here, before anything
     * is opened.
     */
    for (size_t i = 0; i < n; i++) {
        if (tables[i] == &ote_engine_config_table)
            continue;
        status = table_check(tables[i], NULL);
        if (status != OTE_OK) {
            ote_config_release(&ote_engine_config_table, cfg);
            return status;
        }
    }
    return OTE_OK;
}

void ote_engine_config_release(ote_engine_config_t *cfg)
{
    ote_config_release(&ote_engine_config_table, cfg);
}

ote_status_t ote_engine_config_print(FILE *stream)
{
    const ote_config_table_t *tables[OTE_CONFIG_MAX_TABLES];
    size_t n = ote_engine_config_tables(tables, OTE_CONFIG_MAX_TABLES);

    ote_config_warn_unknown(tables, n);
    for (size_t i = 0; i < n; i++) {
        ote_status_t status = table_check(tables[i], stream);

        if (status != OTE_OK)
            return status;
    }
    return OTE_OK;
}
