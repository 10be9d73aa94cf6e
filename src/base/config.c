#include "config.h"

#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

#define F(_f) offsetof(ote_config_t, _f)

const ote_cfg_entry_t ote_config_table[] = {
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
    {"METADATA_PREFIX", "orbitte/segments/", OTE_CFG_STRING, F(metadata_prefix),
     "Prefix of the keys engines put their descriptors under in an etcd or Redis store."},
    {"METADATA_TTL_S", "10", OTE_CFG_INT, F(metadata_ttl_s),
     "Lease (etcd) or TTL (Redis) of an engine's key, kept alive every third of it: a "
     "killed engine's name is free again and its opens fail NOT_FOUND within this time."},
    {"METADATA_TIMEOUT_MS", "2000", OTE_CFG_INT, F(metadata_timeout_ms),
     "Bound on one request to an etcd endpoint or to Redis; past it the call fails "
     "STORE_UNAVAILABLE (etcd: after every endpoint was tried)."},
    {"NUM_WORKERS", "1", OTE_CFG_INT, F(num_workers),
     "Worker threads that progress transports."},
    {"SLICE_SIZE", "0", OTE_CFG_SIZE, F(slice_size),
     "Largest slice a request is cut into; 0 = each transport's own default."},
    {"RETRY_COUNT", "3", OTE_CFG_INT, F(retry_count),
     "Times a slice that failed on a rail (connection reset, timeout, unreachable) is posted "
     "again on another rail of the same peer instance before its task fails."},
    {"RAIL_MAX_BYTES", "16m", OTE_CFG_SIZE, F(rail_max_bytes),
     "Bytes in flight per rail, all batches and threads together; a slice whose best rail "
     "is full waits for one to end (0 = no limit)."},
    {"RAIL_MAX_SLICES", "16", OTE_CFG_INT, F(rail_max_slices),
     "Slices in flight per rail, all batches and threads together (0 = no limit)."},
    {"RAIL_COOLDOWN_MS", "200", OTE_CFG_INT, F(rail_cooldown_ms),
     "Pause of a rail after a slice failed on it; then it is probed (connections made again, "
     "one slice) before it carries again."},
    {"RAIL_COOLDOWN_MAX_MS", "10000", OTE_CFG_INT, F(rail_cooldown_max_ms),
     "Each pause after a failed probe is twice the one before, up to this."},
    {"CONNECT_TIMEOUT_MS", "5000", OTE_CFG_INT, F(connect_timeout_ms),
     "Bound on connecting to a peer and fetching its descriptor."},
    {"XFER_TIMEOUT_MS", "30000", OTE_CFG_INT, F(xfer_timeout_ms),
     "A posted slice with no answer for this long fails its connection with TIMEOUT; a target "
     "resets a connection whose answers its peer has not read for this long."},
    {"POLL_GRACE_US", "20", OTE_CFG_INT, F(poll_grace_us),
     "Workers busy-poll this long after the last event before they sleep."},
    {"POLL_SPIN_MAX_US", "200", OTE_CFG_INT, F(poll_spin_max_us),
     "While events come faster than this, a worker polls for up to twice their interval "
     "after the last one, and ote_batch_wait() polls for up to twice the recent waits, "
     "capped at this; past it they sleep. 0 = workers use OTE_POLL_GRACE_US only."},
    {"PROGRESS_THREAD", "y", OTE_CFG_BOOL, F(progress_thread),
     "Worker threads progress transfers in the background; n = none is started and only "
     "threads in ote_batch_wait() or ote_engine_progress() progress (an engine that serves "
     "peers must then call them)."},
    {"WORKER_CPUS", "", OTE_CFG_STRING, F(worker_cpus),
     "CPU list for worker threads (e.g. 2,3 or 4-7); empty = near their NIC where hwloc places it, else unbound."},
    {"MAX_INFLIGHT_BYTES", "4g", OTE_CFG_SIZE, F(max_inflight_bytes),
     "Admission limit: bytes submitted and not yet ended, per engine."},
    {"MAX_INFLIGHT_TASKS", "1048576", OTE_CFG_INT, F(max_inflight_tasks),
     "Admission limit: tasks submitted and not yet ended, per engine."},
    {"SUBMIT_TIMEOUT_MS", "0", OTE_CFG_INT, F(submit_timeout_ms),
     "When admission is full, submit waits this long before BUSY; 0 = return BUSY at once."},
    {"MAX_CTL_MSG", "64m", OTE_CFG_SIZE, F(max_ctl_msg),
     "Largest control-plane message accepted from a peer."},
    {"MAX_NOTIF_BACKLOG", "65536", OTE_CFG_INT, F(max_notif_backlog),
     "Received notifications kept until ote_notify_recv; beyond it senders get BUSY."},
    {"NOTIFY_TIMEOUT_MS", "5000", OTE_CFG_INT, F(notify_timeout_ms),
     "A notification whose receiver's backlog is full is sent again for this long before it fails BUSY; 0 = fail at once."},
    {"MAX_CONNS", "4096", OTE_CFG_INT, F(max_conns),
     "Accepted connections per engine, control and data listeners together."},
    {"MAX_CONNS_PER_PEER", "256", OTE_CFG_INT, F(max_conns_per_peer),
     "Accepted connections from one peer address, all listeners of the engine together."},
    {"HANDSHAKE_TIMEOUT_MS", "10000", OTE_CFG_INT, F(handshake_timeout_ms),
     "An accepted connection that has not authenticated and sent its first request by then is closed."},
    {"AUTH_KEY", "", OTE_CFG_STRING, F(auth_key),
     "Shared secret: peers must prove they hold it before anything is exchanged."},
    {"AUTH_KEY_FILE", "", OTE_CFG_STRING, F(auth_key_file),
     "File holding the shared secret (first line)."},
    {"HOST_ID", "", OTE_CFG_STRING, F(host_id),
     "Override of the host identity; peers with the same one use intra-host transports."},
    {"TCP_CONNS", "2", OTE_CFG_INT, F(tcp_conns),
     "TCP connections per peer; slices are striped over them."},
    {"TCP_MAX_MSG", "64m", OTE_CFG_SIZE, F(tcp_max_msg),
     "Largest TCP data message; a peer announcing more is disconnected."},
    {"TCP_SNDBUF", "0", OTE_CFG_SIZE, F(tcp_sndbuf),
     "SO_SNDBUF for TCP data connections; 0 = kernel autotuning."},
    {"TCP_RCVBUF", "0", OTE_CFG_SIZE, F(tcp_rcvbuf),
     "SO_RCVBUF for TCP data connections; 0 = kernel autotuning."},
    {"TCP_NODELAY", "y", OTE_CFG_BOOL, F(tcp_nodelay),
     "Disable Nagle on TCP data connections."},
    {"SHM_UNMAP_TIMEOUT_MS", "1000", OTE_CFG_INT, F(shm_unmap_timeout_ms),
     "Deregistering memory a same-host peer mapped (shm) waits this long for the peer to "
     "unmap it; then its connection is closed and the call returns."},
    {"UCT_CONNECT", "auto", OTE_CFG_STRING, F(uct_connect),
     "UCT wire-up: auto (to-iface where the transport can, else to-ep), or ep (to-ep "
     "wherever the transport supports it)."},
    {"RCACHE_ENABLE", "y", OTE_CFG_BOOL, F(rcache_enable),
     "Serve repeated registration of covered memory from the registration cache."},
    {"RCACHE_MAX_SIZE", "inf", OTE_CFG_SIZE, F(rcache_max_size),
     "Bytes of unreferenced registrations the cache keeps before LRU eviction."},
    {"RCACHE_MAX_REGIONS", "65536", OTE_CFG_INT, F(rcache_max_regions),
     "Unreferenced registrations the cache keeps before LRU eviction."},
    {"GPU_DIRECT", "auto", OTE_CFG_TERNARY, F(gpu_direct),
     "Register GPU memory on network memory domains directly: auto, y, n."},
    {"STAGE_CHUNK_SIZE", "4m", OTE_CFG_SIZE, F(stage_chunk_size),
     "Pinned host chunk size for GPU staging pipelines."},
    {"STAGE_SLOTS", "16", OTE_CFG_INT, F(stage_slots),
     "Staging chunks in flight per request."},
    {"CUDA_IPC_CACHE_ENTRIES", "256", OTE_CFG_INT, F(cuda_ipc_cache_entries),
     "Imported CUDA IPC mappings kept per peer."},
    {"CUDA_LIB", "", OTE_CFG_STRING, F(cuda_lib),
     "Test only: a library exporting the CUDA entry points (test double) loaded instead of libcudart/libcuda."},
    {"URING_QD", "64", OTE_CFG_INT, F(uring_qd),
     "File segments: reads and writes in flight per worker's io_uring ring (1..4096)."},
    {"FILE_DIRECT", "auto", OTE_CFG_TERNARY, F(file_direct),
     "File segments: O_DIRECT. auto = for aligned requests where the file system offers it, "
     "unaligned ones through aligned bounce buffers or the page cache; y = always, an "
     "unaligned request fails OTE_ERR_INVALID_PARAM and a file system without O_DIRECT "
     "fails the segment open OTE_ERR_UNSUPPORTED; n = never."},
    {"SYSFS_ROOT", "/sys", OTE_CFG_STRING, F(sysfs_root),
     "Test and diagnostics only: the sysfs tree RDMA devices, ports and GIDs are read from "
     "(ROOT/class/infiniband/...), e.g. a fixture tree; libibverbs is asked only with /sys."},
};

const size_t ote_config_table_size = sizeof(ote_config_table) / sizeof(ote_config_table[0]);

ote_status_t ote_cfg_parse_size(const char *s, size_t *out_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    while (isspace((unsigned char)*s))
        s++;
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "unlimited") == 0) {
        *out_p = SIZE_MAX;
        return OTE_OK;
    }
    if (!isdigit((unsigned char)*s))
        return OTE_ERR_INVALID_PARAM;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return OTE_ERR_INVALID_PARAM;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: return OTE_ERR_INVALID_PARAM;
    }
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0')
        return OTE_ERR_INVALID_PARAM;
    if (shift && v > (SIZE_MAX >> shift))
        return OTE_ERR_INVALID_PARAM;
    *out_p = (size_t)(v << shift);
    return OTE_OK;
}

ote_status_t ote_cfg_parse_int(const char *s, long *out_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return OTE_ERR_INVALID_PARAM;
    *out_p = v;
    return OTE_OK;
}

ote_status_t ote_cfg_parse_bool(const char *s, bool *out_p)
{
    static const char *const yes[] = {"y", "yes", "on", "1", "true"};
    static const char *const no[]  = {"n", "no", "off", "0", "false"};

    for (size_t i = 0; i < 5; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out_p = true;
            return OTE_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out_p = false;
            return OTE_OK;
        }
    }
    return OTE_ERR_INVALID_PARAM;
}

ote_status_t ote_cfg_parse_ternary(const char *s, int *out_p)
{
    bool b;

    if (strcasecmp(s, "auto") == 0 || strcasecmp(s, "try") == 0) {
        *out_p = OTE_TERNARY_AUTO;
        return OTE_OK;
    }
    if (ote_cfg_parse_bool(s, &b) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    *out_p = b ? OTE_TERNARY_YES : OTE_TERNARY_NO;
    return OTE_OK;
}

static const ote_cfg_entry_t *config_find(const char *name)
{
    for (size_t i = 0; i < ote_config_table_size; i++) {
        if (strcmp(ote_config_table[i].name, name) == 0)
            return &ote_config_table[i];
    }
    return NULL;
}

static ote_status_t config_apply(ote_config_t *cfg, const ote_cfg_entry_t *e, const char *value)
{
    void *field = (char *)cfg + e->offset;
    ote_status_t status = OTE_OK;
    size_t sz;
    long l;
    bool b;
    int t;
    char *copy;

    switch (e->type) {
    case OTE_CFG_STRING:
        copy = strdup(value);
        if (copy == NULL)
            return OTE_ERR_NO_MEMORY;
        free(*(char **)field);
        *(char **)field = copy;
        break;
    case OTE_CFG_INT:
        status = ote_cfg_parse_int(value, &l);
        if (status == OTE_OK)
            *(long *)field = l;
        break;
    case OTE_CFG_SIZE:
        status = ote_cfg_parse_size(value, &sz);
        if (status == OTE_OK)
            *(size_t *)field = sz;
        break;
    case OTE_CFG_BOOL:
        status = ote_cfg_parse_bool(value, &b);
        if (status == OTE_OK)
            *(bool *)field = b;
        break;
    case OTE_CFG_TERNARY:
        status = ote_cfg_parse_ternary(value, &t);
        if (status == OTE_OK)
            *(int *)field = t;
        break;
    case OTE_CFG_LOGLEVEL:
        t = ote_log_level_parse(value);
        if (t < 0)
            status = OTE_ERR_INVALID_PARAM;
        else
            *(int *)field = t;
        break;
    }
    return status;
}

ote_status_t ote_config_set(ote_config_t *cfg, const char *name, const char *value)
{
    const ote_cfg_entry_t *e = config_find(name);
    ote_status_t status;

    if (e == NULL)
        return OTE_ERR_NOT_FOUND;
    status = config_apply(cfg, e, value);
    if (status != OTE_OK)
        ote_error("OTE_%s: cannot parse '%s'", name, value);
    return status;
}

static ote_status_t config_validate(const ote_config_t *cfg)
{
    if (cfg->num_workers < 1 || cfg->num_workers > 64) {
        ote_error("OTE_NUM_WORKERS must be 1..64, not %ld", cfg->num_workers);
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->uring_qd < 1 || cfg->uring_qd > 4096) {
        ote_error("OTE_URING_QD must be 1..4096, not %ld", cfg->uring_qd);
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->shm_unmap_timeout_ms < 1) {
        ote_error("OTE_SHM_UNMAP_TIMEOUT_MS must be at least 1, not %ld",
                  cfg->shm_unmap_timeout_ms);
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->tcp_conns < 1 || cfg->tcp_conns > 64) {
        ote_error("OTE_TCP_CONNS must be 1..64, not %ld", cfg->tcp_conns);
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->notify_timeout_ms < 0) {
        ote_error("OTE_NOTIFY_TIMEOUT_MS must be 0 or more, not %ld", cfg->notify_timeout_ms);
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->retry_count < 0 || cfg->rail_max_slices < 0 || cfg->rail_cooldown_ms < 1 ||
        cfg->rail_cooldown_max_ms < cfg->rail_cooldown_ms) {
        ote_error("OTE_RETRY_COUNT and OTE_RAIL_MAX_SLICES must be 0 or more, "
                  "OTE_RAIL_COOLDOWN_MS 1 or more and OTE_RAIL_COOLDOWN_MAX_MS at least as much");
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->connect_timeout_ms <= 0 || cfg->xfer_timeout_ms <= 0) {
        ote_error("OTE_CONNECT_TIMEOUT_MS and OTE_XFER_TIMEOUT_MS must be positive");
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->tcp_max_msg < 4096 || cfg->tcp_max_msg > (1ul << 32)) {
        ote_error("OTE_TCP_MAX_MSG must be 4k..4g");
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->max_ctl_msg < 4096 || cfg->max_ctl_msg > (1ul << 32)) {
        ote_error("OTE_MAX_CTL_MSG must be 4k..4g");
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->metadata_ttl_s < 2 || cfg->metadata_ttl_s > 86400 || cfg->metadata_timeout_ms < 1) {
        ote_error("OTE_METADATA_TTL_S must be 2..86400 and OTE_METADATA_TIMEOUT_MS positive");
        return OTE_ERR_INVALID_PARAM;
    }
    if (cfg->max_inflight_tasks < 1 || cfg->max_notif_backlog < 1 || cfg->max_conns < 1 ||
        cfg->max_conns_per_peer < 1 || cfg->stage_slots < 1 || cfg->handshake_timeout_ms < 1) {
        ote_error("OTE_MAX_* limits, OTE_HANDSHAKE_TIMEOUT_MS and OTE_STAGE_SLOTS must be positive");
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

ote_status_t ote_config_read(ote_config_t *cfg)
{
    ote_status_t status;
    char name[128];

    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < ote_config_table_size; i++) {
        status = config_apply(cfg, &ote_config_table[i], ote_config_table[i].dflt);
        if (status != OTE_OK)
            goto err;
    }
    for (char **env = environ; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        size_t len;

        if (strncmp(*env, "OTE_", 4) != 0 || eq == NULL)
            continue;
        len = (size_t)(eq - *env) - 4;
        if (len >= sizeof(name))
            continue;
        memcpy(name, *env + 4, len);
        name[len] = '\0';
        if (config_find(name) == NULL) {
            ote_warn("unknown configuration variable OTE_%s ignored (see ote_info -c)", name);
            continue;
        }
        status = ote_config_set(cfg, name, eq + 1);
        if (status != OTE_OK)
            goto err;
    }
    status = config_validate(cfg);
    if (status != OTE_OK)
        goto err;
    return OTE_OK;

err:
    ote_config_release(cfg);
    return status;
}

void ote_config_release(ote_config_t *cfg)
{
    for (size_t i = 0; i < ote_config_table_size; i++) {
        if (ote_config_table[i].type == OTE_CFG_STRING) {
            char **field = (char **)((char *)cfg + ote_config_table[i].offset);
            free(*field);
            *field = NULL;
        }
    }
}

static void config_format(const ote_config_t *cfg, const ote_cfg_entry_t *e, char *buf, size_t len)
{
    const void *field = (const char *)cfg + e->offset;
    static const char *const tern[] = {"n", "y", "auto"};
    static const char *const lvl[] = {"none", "error", "warn", "info", "debug", "trace"};
    size_t sz;

    switch (e->type) {
    case OTE_CFG_STRING:
        /* The secret itself is never printed. */
        if (strcmp(e->name, "AUTH_KEY") == 0 && *(char *const *)field && **(char *const *)field)
            snprintf(buf, len, "(set)");
        else
            snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : "");
        break;
    case OTE_CFG_INT: snprintf(buf, len, "%ld", *(const long *)field); break;
    case OTE_CFG_SIZE:
        sz = *(const size_t *)field;
        if (sz == SIZE_MAX)
            snprintf(buf, len, "inf");
        else
            snprintf(buf, len, "%zu", sz);
        break;
    case OTE_CFG_BOOL: snprintf(buf, len, "%s", *(const bool *)field ? "y" : "n"); break;
    case OTE_CFG_TERNARY: snprintf(buf, len, "%s", tern[*(const int *)field]); break;
    case OTE_CFG_LOGLEVEL: snprintf(buf, len, "%s", lvl[*(const int *)field]); break;
    }
}

void ote_config_print(const ote_config_t *cfg, FILE *stream)
{
    static const char *const tnames[] = {"string", "int", "size", "bool", "ternary", "level"};
    char val[256];

    for (size_t i = 0; i < ote_config_table_size; i++) {
        const ote_cfg_entry_t *e = &ote_config_table[i];

        config_format(cfg, e, val, sizeof(val));
        fprintf(stream, "#\n# %s\n# type: %s, default: %s\n#\nOTE_%s=%s\n", e->desc,
                tnames[e->type], e->dflt[0] ? e->dflt : "\"\"", e->name, val);
    }
}
