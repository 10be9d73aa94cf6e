/*
 * Engine lifecycle (the transports opened on every worker, staging, the
 * metadata store), memory API, descriptor publication, ote_info's listing
 * of transports.
 */
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "core/xfer/batch.h"
#include "core/ctl/ctl.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_int.h"
#include "core/xfer/notify.h"
#include "core/segment/segment.h"
#include "core/segment/spray.h"
#include "uct_ext/rdma/rdma.h"
#include "core/worker/worker.h"

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* The hooks through which staging registers its progress on a worker (proto.h). */
static ote_status_t engine_progress_add(void *worker, ote_proto_progress_cb_t progress,
                                        ote_proto_pending_cb_t pending, void *arg, int *id_p)
{
    return ote_worker_progress_register(worker, progress, pending, arg, id_p);
}

static void engine_progress_remove(void *worker, int id)
{
    ote_worker_progress_unregister(worker, id);
}

/*
 * Staging (proto/stage.h), where OTE_TLS selects it ("cuda_stage") and CUDA
 * loads: one staging context per worker, its progress registered there.
 * Without it the engine runs, with no staging rails.
 */
static void engine_open_staging(ote_engine_h e, ote_select_t *sel)
{
    if (!ote_proto_stage_available() || !ote_select_tl(sel, OTE_PROTO_STAGE_NAME))
        return;
    for (size_t w = 0; w < e->facts.num_workers; w++) {
        ote_proto_progress_hooks_t hooks = {.add    = engine_progress_add,
                                            .remove = engine_progress_remove,
                                            .worker = &e->facts.workers[w]};
        ote_status_t status = ote_proto_stage_worker_create(e->facts.regions, &e->facts.stage_config,
                                                            &hooks, &e->facts.workers[w].stage);

        if (status != OTE_OK) {
            ote_warn("staging: not available on worker %zu: %s", w, ote_status_string(status));
            e->facts.workers[w].stage = NULL;
        }
    }
}

/*
 * Open one selected resource on every worker. A resource that cannot be
 * opened, or that carries no one-sided zero-copy operation, is left out
 * with a log line: the engine runs on the others.
 */
static void engine_open_tl(ote_engine_h e, ote_tl_component_t *comp, const ote_tl_resource_t *res,
                           ote_tl_iface_params_t *params)
{
    ote_engine_tl_t *tl = &e->facts.tls[e->facts.num_tls];
    ote_tl_iface_t *ifaces[OTE_MAX_WORKERS];
    ote_md_t *md = NULL;
    ote_tl_caps_t caps;
    size_t w, k;
    ote_status_t status;

    /* UNSUPPORTED: the component needs no memory domain. */
    status = comp->ops->md_open(comp, res, &md);
    if (status != OTE_OK && status != OTE_ERR_UNSUPPORTED) {
        ote_warn("transport %s/%s: memory domain unavailable: %s", res->tl_name,
                 res->dev_name, ote_status_string(status));
        if (res->is_network)
            ote_engine_join_failed(e);
        return;
    }
    w = 0;
    if (!ote_engine_ifaces_open(e, comp, res, md, params, false, ifaces, &caps))
        goto err_close;
    w = e->facts.num_workers;
    for (k = 0; md != NULL && k < e->facts.num_mds && e->facts.mds[k] != md; k++)
        ;
    if (md != NULL && k == e->facts.num_mds) {
        if (e->facts.num_mds == OTE_MEM_MAX_MDS || ote_mem_table_add_md(e->facts.regions, md) != OTE_OK) {
            ote_warn("transport %s/%s: no room for its memory domain", res->tl_name,
                     res->dev_name);
            goto err_close;
        }
        e->facts.mds[e->facts.num_mds++] = md;
    }
    tl->resource = *res;
    tl->md       = md;
    tl->md_index = md != NULL ? (int)k : -1;
    tl->caps     = caps;
    for (w = 0; w < e->facts.num_workers; w++) {
        ote_worker_t *wk = &e->facts.workers[w];

        ifaces[w]->md_index           = tl->md_index;
        wk->ifaces[wk->num_ifaces++] = ifaces[w];
    }
    e->facts.num_tls++;
    return;

err_close:
    while (w-- > 0)
        ifaces[w]->ops->close(ifaces[w]);
    if (md != NULL)
        comp->ops->md_close(comp, md);
}

/*
 * "^cma" (or "^tcp") excludes the native transport only: UCT's of the same
 * kind, when present, then carries that traffic, unchecked at the target.
 * Say so, since the user meant to leave the kind out or to pick the other.
 */
static void engine_note_exclusions(ote_engine_h e, const ote_select_t *sel)
{
    static const char *const natives[] = {"cma", "tcp"};

    for (size_t i = 0; i < sizeof(natives) / sizeof(natives[0]); i++) {
        char uct_name[OTE_TL_NAME_MAX];

        snprintf(uct_name, sizeof(uct_name), "uct_%s", natives[i]);
        if (!ote_select_excludes(sel, natives[i]) || ote_select_excludes(sel, uct_name))
            continue;
        for (size_t k = 0; k < e->facts.num_tls; k++) {
            if (strcmp(e->facts.tls[k].resource.tl_name, uct_name) == 0) {
                ote_info("OTE_TLS='%s' excludes the native %s only: UCT's (%s) is selected "
                         "and carries its traffic, without checks at the target; exclude "
                         "both with ^%s,%s", e->facts.config.tls, natives[i], uct_name, natives[i],
                         uct_name);
                break;
            }
        }
    }
}

static ote_status_t engine_open_transports(ote_engine_h e)
{
    ote_tl_iface_params_t params = {
        .regions      = e->facts.regions,
        .instance_id  = e->facts.instance_id,
        .bind_ip      = e->bind_ip,
        .advertise_ip = e->advertise_ip,
        .auth         = e->facts.auth,
    };
    ote_rdma_config_t rdma_cfg;
    ote_select_t *sel;
    ote_status_t status;

    ote_engine_iface_limits(e, &params);
    status = ote_config_fill(&ote_rdma_config_table, &rdma_cfg);
    if (status != OTE_OK)
        return status;
    status = ote_rdma_discover(rdma_cfg.sysfs_root, &e->rdma);
    ote_config_release(&ote_rdma_config_table, &rdma_cfg);
    if (status != OTE_OK)
        return status;
    params.rdma = e->rdma;
    /* What the monitor compares with, to see an interface join (engine_join.c). */
    e->netif_sig = ote_engine_netif_sig();
    status = ote_select_parse(e->facts.config.tls, e->facts.config.net_devices, &sel);
    if (status != OTE_OK)
        return status;
    for (size_t c = 0; ote_tl_components[c] != NULL; c++) {
        ote_tl_component_t *comp = ote_tl_components[c];
        ote_tl_resource_t *res   = NULL;
        size_t nres              = 0;

        if (comp->ops->query_resources(comp, &params, &res, &nres) != OTE_OK)
            continue;
        for (size_t r = 0; r < nres; r++) {
            bool tl_ok  = ote_select_tl(sel, res[r].tl_name);
            bool dev_ok = !res[r].is_network || ote_select_device(sel, res[r].dev_name);

            if (!tl_ok || !dev_ok)
                continue;
            if (res[r].unusable != NULL) {
                ote_info("transport %s/%s: not used: %s", res[r].tl_name, res[r].dev_name,
                         res[r].unusable);
                continue;
            }
            if (e->facts.num_tls == OTE_MAX_IFACES) {
                ote_warn("transport %s/%s: more than %d transports; left out", res[r].tl_name,
                         res[r].dev_name, OTE_MAX_IFACES);
                continue;
            }
            engine_open_tl(e, comp, &res[r], &params);
        }
        free(res);
    }
    engine_open_staging(e, sel);
    ote_engine_rdma_select(e, sel);
    status = ote_select_check_unmatched(sel);
    if (status == OTE_OK)
        engine_note_exclusions(e, sel);
    ote_select_free(sel);
    if (status != OTE_OK)
        return status;
    if (e->facts.num_tls == 0) {
        ote_error("no usable transport selected (OTE_TLS='%s', OTE_NET_DEVICES='%s'; see "
                  "ote_info -d)", e->facts.config.tls, e->facts.config.net_devices);
        return OTE_ERR_UNREACHABLE;
    }
    return OTE_OK;
}

/*
 * With the peer-to-peer metadata a peer opens this engine by its name, so
 * the name must lead to this engine's control listener: host:port with a
 * host that resolves and this listener's port.
 */
static ote_status_t engine_name_check(const char *name, unsigned port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    ote_status_t status;

    if (strlen(name) > OTE_DESC_NAME_MAX) {
        ote_error("engine name '%.40s...' is longer than %d bytes", name, OTE_DESC_NAME_MAX);
        return OTE_ERR_INVALID_PARAM;
    }
    status = strchr(name, ':') != NULL ? ote_sockaddr_parse(name, &ss, &len)
                                       : OTE_ERR_INVALID_PARAM;
    if (status == OTE_OK && ote_sockaddr_port((struct sockaddr *)&ss) != port) {
        ote_error("engine name '%s' names port %u, but the control listener is on port %u: "
                  "no peer could open it", name, ote_sockaddr_port((struct sockaddr *)&ss), port);
        return OTE_ERR_INVALID_PARAM;
    }
    if (status == OTE_ERR_NOT_FOUND) {
        ote_error("engine name '%s': its host does not resolve, so no peer could open it", name);
        return OTE_ERR_INVALID_PARAM;
    }
    if (status != OTE_OK) {
        ote_error("engine name '%s': the p2p metadata finds a peer by the host:port of its "
                  "control listener, here HOST:%u; a name such as this one needs a metadata "
                  "store (OTE_METADATA=etcd://... or redis://...)",
                  name, port);
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

/* The descriptor as a metadata store holds it (the keepalive thread calls this too). */
static ote_status_t engine_desc_cb(void *arg, ote_buf_t *out)
{
    return ote_engine_desc_encode(arg, out);
}

/*
 * segment/'s backlog_end (segment_def.h): the slices waiting for the rails
 * of a segment that closed or rebuilt them end through the spray.
 */
static void engine_backlog_end(ote_segment_h seg)
{
    ote_segment_spray(seg, NULL, NULL, false);
}

/* Whether a name's holder still serves it (meta.h): asked at its control address. */
static ote_status_t engine_holder_cb(void *arg, const ote_desc_t *holder, long probe_ms)
{
    return ote_segment_probe_holder(arg, holder, probe_ms);
}

/* Put this engine's descriptor under its name in the store metadata names. */
static ote_status_t engine_meta_start(ote_engine_h e, const char *metadata)
{
    ote_meta_config_t cfg;
    ote_meta_params_t mp;
    ote_status_t status;

    status = ote_config_fill(&ote_meta_config_table, &cfg);
    if (status != OTE_OK)
        return status;
    mp = (ote_meta_params_t){
        .uri        = metadata,
        .name       = e->facts.name,
        .prefix     = cfg.prefix,
        .ttl_s      = cfg.ttl_s,
        .timeout_ms = cfg.timeout_ms,
        .auth       = e->facts.auth,
        .desc_cb    = engine_desc_cb,
        .desc_arg   = e,
        .holder_cb  = engine_holder_cb,
        .probe_ms   = cfg.probe_ms,
    };
    status = ote_meta_create(&mp, &e->facts.meta);
    ote_config_release(&ote_meta_config_table, &cfg);
    return status;
}

/*
 * The configuration of each component that opens segments itself (its
 * objects, tl.h), read once here: the settings at creation hold for the
 * engine's life.
 */
static ote_status_t engine_tl_configs_fill(ote_engine_h e)
{
    size_t n = 0;

    while (ote_tl_components[n] != NULL)
        n++;
    e->facts.tl_configs = calloc(n + 1, sizeof(*e->facts.tl_configs));
    if (e->facts.tl_configs == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < n; i++) {
        const ote_tl_component_ops_t *ops = ote_tl_components[i]->ops;
        ote_status_t status;

        if (ops->objects == NULL || ops->config_table == NULL)
            continue;
        e->facts.tl_configs[i] = calloc(1, ops->config_table->struct_size);
        if (e->facts.tl_configs[i] == NULL)
            return OTE_ERR_NO_MEMORY;
        status = ote_config_fill(ops->config_table, e->facts.tl_configs[i]);
        if (status != OTE_OK) {
            free(e->facts.tl_configs[i]);
            e->facts.tl_configs[i] = NULL;
            return status;
        }
    }
    return OTE_OK;
}

static void engine_tl_configs_release(ote_engine_h e)
{
    for (size_t i = 0; e->facts.tl_configs != NULL && ote_tl_components[i] != NULL; i++) {
        if (e->facts.tl_configs[i] != NULL) {
            ote_config_release(ote_tl_components[i]->ops->config_table, e->facts.tl_configs[i]);
            free(e->facts.tl_configs[i]);
        }
    }
    free(e->facts.tl_configs);
    e->facts.tl_configs = NULL;
}

static void engine_locks_init(ote_engine_h e)
{

    pthread_mutex_init(&e->xfer.notif_lock, NULL);
    pthread_mutex_init(&e->xfer.lane_lock, NULL);
    pthread_mutex_init(&e->xfer.batch_lock, NULL);
    pthread_mutex_init(&e->segs.seg_lock, NULL);
    pthread_mutex_init(&e->xfer.admit_lock, NULL);
    ote_fexport_table_init(&e->segs.fexports);
    /* Admission deadlines are on the monotonic clock. */
    ote_cond_init_monotonic(&e->xfer.admit_cond);
}

static void engine_locks_destroy(ote_engine_h e)
{
    pthread_mutex_destroy(&e->xfer.notif_lock);
    pthread_mutex_destroy(&e->xfer.lane_lock);
    pthread_mutex_destroy(&e->xfer.batch_lock);
    pthread_mutex_destroy(&e->segs.seg_lock);
    pthread_mutex_destroy(&e->xfer.admit_lock);
    pthread_cond_destroy(&e->xfer.admit_cond);
    ote_fexport_table_destroy(&e->segs.fexports); /* the listener stopped: nothing uses them */
}

static void engine_free(ote_engine_h e)
{
    /* No scrape sees the engine from here on. */
    ote_obs_endpoint_detach(e);
    /* The listener first (its pools open segments through the store), then the key. */
    if (e->facts.ctl != NULL)
        ote_ctl_stop(e->facts.ctl);
    e->facts.ctl = NULL;
    ote_meta_destroy(e->facts.meta);
    e->facts.meta = NULL;
    OTE_DLIST_DRAIN(&e->segs.seg_lock, e->segs.segments, ote_segment_h, ote_segment_close);
    /* Remote staging and PUTBACK requests in flight end (their rails are gone). */
    ote_proto_jobs_destroy(e->facts.proto_jobs);
    e->facts.proto_jobs = NULL;
    /* Workers first: every task ends, and queues its notification, before the notifier goes. */
    for (size_t w = 0; e->facts.workers && w < e->facts.num_workers; w++)
        ote_worker_stop(&e->facts.workers[w]);
    /*
     * The port monitor after every thread that asks it whether a port is
     * down (rails started by the listener's pools and by workers).
     */
    ote_engine_rdma_monitor_stop(e);
    ote_notifier_stop(e->xfer.notifier);
    e->xfer.notifier = NULL;
    ote_batch_release_all(e);
    for (size_t w = 0; e->facts.workers && w < e->facts.num_workers; w++)
        ote_worker_cleanup(&e->facts.workers[w]);
    free(e->facts.workers);
    ote_mem_table_destroy(e->facts.regions);
    /* One md_close for every md_open (resources may share an md). */
    for (size_t i = 0; i < e->facts.num_tls; i++) {
        ote_engine_tl_t *tl = &e->facts.tls[i];

        if (tl->md != NULL)
            tl->resource.component->ops->md_close(tl->resource.component, tl->md);
    }
    ote_fd_close(e->wset.event_fd);
    ote_fd_close(e->wset.poll_epfd);
    ote_engine_topo_close(e);
    ote_rdma_free(e->rdma);
    free(e->xfer.notifs);
    ote_notif_senders_destroy(e->xfer.senders);
    engine_locks_destroy(e);
    ote_auth_destroy(e->facts.auth);
    engine_tl_configs_release(e);
    ote_config_release(&ote_stage_config_table, &e->facts.stage_config);
    ote_engine_config_release(&e->facts.config);
    ote_obs_destroy(e->facts.obs);
    free(e);
}

/* What a metrics snapshot reads of xfer/ and segment/ (obs/ sits below them). */
static void engine_obs_load(ote_engine_h e, uint64_t *tasks_p, uint64_t *bytes_p,
                            uint64_t *segments_p)
{
    long t = atomic_load(&e->xfer.inflight_tasks);

    *tasks_p    = t > 0 ? (uint64_t)t : 0;
    *bytes_p    = atomic_load(&e->xfer.inflight_bytes);
    *segments_p = 0;
    pthread_mutex_lock(&e->segs.seg_lock);
    for (ote_segment_h seg = e->segs.segments; seg != NULL; seg = seg->next)
        *segments_p += !seg->internal; /* the application's only */
    pthread_mutex_unlock(&e->segs.seg_lock);
}

ote_status_t ote_engine_create(const ote_engine_params_t *params, ote_engine_h *engine_p)
{
    ote_engine_params_t none = {0};
    ote_mem_table_params_t mp;
    const char *metadata, *name;
    bool store = false;
    char bound[96];
    ote_engine_h e;
    ote_status_t status;

    if (engine_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    if (params == NULL)
        params = &none;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return OTE_ERR_NO_MEMORY;
    e->facts.xfer = &e->xfer;
    e->facts.wset = &e->wset;
    e->facts.segs = &e->segs;
    e->segs.backlog_end = engine_backlog_end;
    e->facts.svc  = (ote_engine_services_t){.desc_encode    = ote_engine_desc_encode,
                                            .desc_skeleton  = ote_engine_desc_skeleton,
                                            .mem_alloc      = ote_mem_alloc,
                                            .mem_free       = ote_mem_free,
                                            .rdma_port_down = ote_engine_rdma_port_is_down};
    e->wset.event_fd  = -1;
    e->wset.poll_epfd = -1;
    engine_locks_init(e);
    status = ote_engine_config_read(&e->facts.config);
    if (status != OTE_OK) {
        engine_locks_destroy(e);
        free(e);
        return status;
    }
    ote_log_set_level(e->facts.config.log_level);
    status = ote_config_fill(&ote_stage_config_table, &e->facts.stage_config);
    if (status == OTE_OK)
        status = engine_tl_configs_fill(e);
    if (status != OTE_OK)
        goto err;
    status = ote_notif_senders_create(&e->xfer.senders);
    if (status == OTE_OK)
        status = ote_proto_jobs_create("ote-proto", OTE_PROTO_JOBS_THREADS, OTE_PROTO_JOBS_QUEUED,
                                       &e->facts.proto_jobs);
    if (status != OTE_OK)
        goto err;
    status = ote_auth_create(&(ote_auth_params_t){.key      = e->facts.config.auth_key,
                                                  .key_file = e->facts.config.auth_key_file,
                                                  .max_conns = e->facts.config.max_conns,
                                                  .max_conns_per_peer =
                                                      e->facts.config.max_conns_per_peer,
                                                  .handshake_timeout_ms =
                                                      e->facts.config.handshake_timeout_ms},
                             &e->facts.auth);
    if (status != OTE_OK)
        goto err;

    metadata = params->metadata ? params->metadata : e->facts.config.metadata;
    status   = ote_obs_create(e, metadata,
                              &(ote_obs_sources_t){.rails = ote_engine_rails, .load = engine_obs_load},
                              &e->facts.obs);
    if (status != OTE_OK)
        goto err;
    if (strcmp(metadata, "p2p") != 0) {
        ote_meta_uri_t uri;

        /* A malformed URI fails before anything is opened. */
        status = ote_meta_uri_parse(metadata, &uri);
        memset(&uri, 0, sizeof(uri));
        if (status != OTE_OK)
            goto err;
        store = true;
    }
    name = params->name ? params->name
         : e->facts.config.engine_name[0] ? e->facts.config.engine_name
                                    : NULL;
    if (store && name != NULL) {
        status = ote_meta_name_check(name);
        if (status != OTE_OK)
            goto err;
    }

    do {
        e->facts.instance_id = ote_random_u64();
    } while (e->facts.instance_id == 0);
    /* Never published: peers that do not know it cannot speak for this sender. */
    do {
        e->xfer.notify_key = ote_random_u64();
    } while (e->xfer.notify_key == 0 || e->xfer.notify_key == e->facts.instance_id);
    if (e->facts.config.host_id && e->facts.config.host_id[0])
        snprintf(e->facts.host_id, sizeof(e->facts.host_id), "%s", e->facts.config.host_id);
    else
        ote_host_id(e->facts.host_id, sizeof(e->facts.host_id));

    status = ote_mem_table_params_read(&mp);
    if (status != OTE_OK)
        goto err;
    status = ote_mem_table_create(&mp, &e->facts.regions);
    if (status != OTE_OK)
        goto err;

    status = ote_ctl_start(e, params->listen_addr ? params->listen_addr : "0.0.0.0:0", &e->facts.ctl,
                           bound, sizeof(bound));
    if (status != OTE_OK)
        goto err;
    {
        struct sockaddr_storage ss;
        socklen_t len;

        ote_sockaddr_parse(bound, &ss, &len);
        ote_sockaddr_ip((struct sockaddr *)&ss, e->bind_ip, sizeof(e->bind_ip));
        if (ote_sockaddr_is_any((struct sockaddr *)&ss)) {
            ote_default_ip(e->advertise_ip, sizeof(e->advertise_ip));
            snprintf(e->facts.name, sizeof(e->facts.name), strchr(e->advertise_ip, ':') ? "[%s]:%u" : "%s:%u",
                     e->advertise_ip, ote_sockaddr_port((struct sockaddr *)&ss));
        } else {
            snprintf(e->advertise_ip, sizeof(e->advertise_ip), "%s", e->bind_ip);
            snprintf(e->facts.name, sizeof(e->facts.name), "%s", bound);
        }
        /* Peers reach the listener here whatever the name (a store's names are not addresses). */
        snprintf(e->facts.ctl_addr, sizeof(e->facts.ctl_addr), "%s", e->facts.name);
        if (name != NULL) {
            if (!store) {
                status = engine_name_check(name, ote_sockaddr_port((struct sockaddr *)&ss));
                if (status != OTE_OK)
                    goto err;
            }
            snprintf(e->facts.name, sizeof(e->facts.name), "%s", name);
        }
    }

    e->facts.num_workers = (size_t)e->facts.config.num_workers;
    e->facts.workers     = calloc(e->facts.num_workers, sizeof(*e->facts.workers));
    if (e->facts.workers == NULL) {
        status = OTE_ERR_NO_MEMORY;
        goto err;
    }
    for (size_t w = 0; w < e->facts.num_workers; w++) {
        status = ote_worker_init(e, &e->facts.workers[w], w);
        if (status != OTE_OK) {
            e->facts.num_workers = w;
            goto err;
        }
    }
    status = engine_open_transports(e);
    if (status != OTE_OK)
        goto err;
    ote_engine_topo_open(e);
    e->wset.event_fd  = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->wset.poll_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->wset.event_fd < 0 || e->wset.poll_epfd < 0) {
        status = OTE_ERR_IO;
        goto err;
    }
    status = ote_notifier_start(e, &e->xfer.notifier);
    if (status != OTE_OK)
        goto err;
    for (size_t w = 0; w < e->facts.num_workers; w++) {
        status = ote_worker_start(&e->facts.workers[w]);
        if (status != OTE_OK)
            goto err;
    }
    status = ote_ctl_run(e->facts.ctl);
    if (status != OTE_OK)
        goto err;
    status = ote_engine_rdma_monitor_start(e);
    if (status != OTE_OK)
        goto err;
    if (store) {
        status = engine_meta_start(e, metadata);
        if (status != OTE_OK)
            goto err;
    }
    status = ote_obs_endpoint_attach(e);
    if (status != OTE_OK)
        goto err;
    ote_info("engine %s started (instance %016llx, %zu transports, %zu workers)", e->facts.name,
             (unsigned long long)e->facts.instance_id, e->facts.num_tls, e->facts.num_workers);
    *engine_p = e;
    return OTE_OK;

err:
    engine_free(e);
    return status;
}

void ote_engine_destroy(ote_engine_h e)
{
    if (e != NULL)
        engine_free(e);
}

const char *ote_engine_name(ote_engine_h e)
{
    return e ? e->facts.name : NULL;
}

int ote_engine_event_fd(ote_engine_h e)
{
    if (e == NULL)
        return -1;
    atomic_store(&e->wset.event_fd_used, true);
    return e->wset.event_fd;
}

ote_status_t ote_engine_desc_export(ote_engine_h e, void **buf_p, size_t *len_p)
{
    ote_buf_t desc = {0}, rec = {0};
    ote_status_t status;

    if (e == NULL || buf_p == NULL || len_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    /* The record a store holds under our name: the same bytes, the same MAC. */
    status = ote_engine_desc_encode(e, &desc);
    if (status == OTE_OK)
        status = ote_meta_record_encode(e->facts.auth, e->facts.name, desc.data, desc.len, &rec);
    free(desc.data);
    if (status != OTE_OK) {
        free(rec.data);
        return status;
    }
    *buf_p = rec.data;
    *len_p = rec.len;
    return OTE_OK;
}

/* The descriptor with table's regions (none when table is NULL). */
static ote_status_t engine_desc_encode(ote_engine_h e, ote_mem_table_t *table, ote_buf_t *out)
{
    ote_desc_t *d = ote_desc_new(e->facts.instance_id, e->facts.name, e->facts.host_id,
                                 e->facts.ctl_addr, 0);

    if (d == NULL || (d->tls = calloc(OTE_DESC_MAX_TLS, sizeof(*d->tls))) == NULL ||
        (d->runs = calloc(OTE_DESC_MAX_TLS, sizeof(*d->runs))) == NULL) {
        ote_desc_free(d);
        return OTE_ERR_NO_MEMORY;
    }
    for (size_t w = 0; w < e->facts.num_workers; w++) {
        ote_worker_t *wk = &e->facts.workers[w];

        for (size_t i = 0; i < wk->num_ifaces && d->num_tls < OTE_DESC_MAX_TLS; i++) {
            ote_desc_tl_t *t = &d->tls[d->num_tls];

            /* Run, and said so, even while no device of it is up. */
            ote_desc_runs_add(d, wk->ifaces[i]->resource.tl_name);
            if (ote_engine_iface_gone(e, wk->ifaces[i]))
                continue;

            if (wk->ifaces[i]->ops->get_address(wk->ifaces[i], t->addr, sizeof(t->addr),
                                                &t->addr_len) != OTE_OK)
                continue;
            snprintf(t->tl_name, sizeof(t->tl_name), "%s", wk->ifaces[i]->resource.tl_name);
            snprintf(t->dev_name, sizeof(t->dev_name), "%s", wk->ifaces[i]->resource.dev_name);
            d->num_tls++;
        }
    }
    d->num_mds = e->facts.num_mds;
    for (size_t i = 0; i < e->facts.num_mds; i++)
        snprintf(d->mds[i], sizeof(d->mds[i]), "%s", e->facts.mds[i]->name);
    return ote_fexport_desc_encode(&e->segs.fexports, d, table, out);
}

ote_status_t ote_engine_desc_encode(ote_engine_h e, ote_buf_t *out)
{
    return engine_desc_encode(e, e->facts.regions, out);
}

ote_status_t ote_engine_desc_skeleton(ote_engine_h e, ote_buf_t *out)
{
    return engine_desc_encode(e, NULL, out);
}

/* ---- memory API ------------------------------------------------------------ */

/*
 * What the engine publishes lists its regions: a change is announced to the
 * metadata store. A call that left the region table as it was (a range
 * registered again, one reference of it dropped) announces nothing: every
 * announcement re-encodes and sends the whole descriptor.
 */
static ote_status_t mem_changed(ote_engine_h e, uint64_t gen_before, ote_status_t status)
{
    if (status == OTE_OK && ote_mem_table_generation(e->facts.regions) != gen_before)
        ote_meta_changed(e->facts.meta);
    return status;
}

ote_status_t ote_mem_register(ote_engine_h e, const ote_mem_desc_t *descs, size_t count,
                              ote_mem_h *mems_p)
{
    ote_status_t status;
    uint64_t gen;

    if (e == NULL || descs == NULL || count == 0 || mems_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    gen    = ote_mem_table_generation(e->facts.regions);
    status = ote_mem_table_register(e->facts.regions, descs, count, mems_p);
    if (status == OTE_OK)
        ote_obs_registered(e->facts.obs, count);
    return mem_changed(e, gen, status);
}

/* Drop mem from the region table with drop (deregister or free), announcing the change. */
static ote_status_t mem_drop(ote_engine_h e, ote_mem_h mem,
                             ote_status_t (*drop)(ote_mem_table_t *table, ote_region_t *region))
{
    uint64_t gen;

    if (e == NULL || mem == NULL)
        return OTE_ERR_INVALID_PARAM;
    gen = ote_mem_table_generation(e->facts.regions);
    return mem_changed(e, gen, drop(e->facts.regions, mem));
}

ote_status_t ote_mem_deregister(ote_engine_h e, ote_mem_h mem)
{
    return mem_drop(e, mem, ote_mem_table_deregister);
}

ote_status_t ote_mem_alloc(ote_engine_h e, size_t length, const char *location, unsigned access,
                           void **addr_p, ote_mem_h *mem_p)
{
    ote_status_t status;
    uint64_t gen;

    if (e == NULL)
        return OTE_ERR_INVALID_PARAM;
    gen    = ote_mem_table_generation(e->facts.regions);
    status = ote_mem_table_alloc(e->facts.regions, length, location, access, addr_p, mem_p);
    if (status == OTE_OK)
        ote_obs_registered(e->facts.obs, 1);
    return mem_changed(e, gen, status);
}

ote_status_t ote_mem_free(ote_engine_h e, ote_mem_h mem)
{
    return mem_drop(e, mem, ote_mem_table_free);
}

/* ---- ote_info -d ------------------------------------------------------------ */

/* Capabilities of a resource the engine did not open: open it briefly. */
static ote_status_t engine_probe_tl(ote_engine_h e, ote_tl_component_t *comp,
                                    const ote_tl_resource_t *res, ote_tl_caps_t *caps_p,
                                    char *md_name, size_t md_name_len)
{
    ote_tl_iface_params_t params = {.regions = e->facts.regions,
                                    .instance_id = e->facts.instance_id, .bind_ip = e->bind_ip,
                                    .advertise_ip = e->advertise_ip,
                                    .worker_lock = &e->facts.workers[0].lock};
    ote_tl_iface_t *iface;
    ote_md_t *md = NULL;
    ote_status_t status;

    ote_engine_iface_limits(e, &params);
    status = comp->ops->md_open(comp, res, &md);
    if (status != OTE_OK && status != OTE_ERR_UNSUPPORTED)
        return status;
    status = comp->ops->iface_open(res, md, &params, &iface);
    if (status == OTE_OK) {
        iface->ops->query(iface, caps_p);
        iface->ops->close(iface);
        snprintf(md_name, md_name_len, "%s", md != NULL ? md->name : "none");
    }
    if (md != NULL)
        comp->ops->md_close(comp, md);
    return status;
}

static void print_caps(FILE *f, const ote_tl_caps_t *c, const char *md_name)
{
    fprintf(f, "#     ops:%s%s%s%s%s  memory: local%s%s remote%s%s  scope:%s%s%s\n",
            c->ops & OTE_TL_CAP_PUT_ZCOPY ? " put_zcopy" : "",
            c->ops & OTE_TL_CAP_GET_ZCOPY ? " get_zcopy" : "",
            c->ops & OTE_TL_CAP_AM ? " am" : "",
            c->ops & OTE_TL_CAP_CHECKED ? " checked" : "",
            c->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY) ? "" : " none",
            c->mem_local & OTE_MEM_TYPE_HOST ? " host" : "",
            c->mem_local & OTE_MEM_TYPE_CUDA ? " cuda" : "",
            c->mem_remote & OTE_MEM_TYPE_HOST ? " host" : "",
            c->mem_remote & OTE_MEM_TYPE_CUDA ? " cuda" : "",
            c->scope & OTE_TL_SCOPE_PROCESS ? " process" : "",
            c->scope & OTE_TL_SCOPE_HOST ? " host" : "",
            c->scope & OTE_TL_SCOPE_NETWORK ? " network" : "");
    fprintf(f, "#     max_msg %zu, slice %zu, bandwidth %.2f GB/s, latency %.2f us, "
               "connect %s, md %s\n",
            c->max_msg, c->slice_size, c->bandwidth / 1e9, c->latency * 1e6,
            c->conn_model == OTE_TL_CONN_TO_IFACE ? "to-iface" : "to-ep", md_name);
}

/* What peers are given for a selected resource (worker 0's iface). */
static void print_addresses(FILE *f, ote_engine_h e, const ote_tl_resource_t *res)
{
    ote_worker_t *wk = &e->facts.workers[0];

    for (size_t i = 0; i < wk->num_ifaces; i++) {
        ote_tl_iface_t *iface = wk->ifaces[i];
        char buf[1024];

        if (strcmp(iface->resource.tl_name, res->tl_name) != 0 ||
            strcmp(iface->resource.dev_name, res->dev_name) != 0)
            continue;
        iface->ops->format_address(iface, buf, sizeof(buf));
        if (buf[0] != '\0')
            fprintf(f, "#     addresses: %s\n", buf);
    }
}

void ote_engine_print_transports(ote_engine_h e, FILE *f);
void ote_engine_print_transports(ote_engine_h e, FILE *f)
{
    ote_tl_iface_params_t params = {.bind_ip = e->bind_ip,
                                    .advertise_ip = e->advertise_ip, .rdma = e->rdma};
    ote_select_t *sel = NULL;

    ote_engine_iface_limits(e, &params);
    fprintf(f, "# engine %s, host %s\n", e->facts.name, e->facts.host_id);
    fprintf(f, "# OTE_TLS=%s OTE_NET_DEVICES=%s\n", e->facts.config.tls, e->facts.config.net_devices);
    if (ote_select_parse(e->facts.config.tls, e->facts.config.net_devices, &sel) != OTE_OK)
        sel = NULL;
    for (size_t c = 0; ote_tl_components[c] != NULL; c++) {
        ote_tl_component_t *comp = ote_tl_components[c];
        ote_tl_resource_t *res   = NULL;
        size_t nres              = 0;

        fprintf(f, "#\n# component %s\n", comp->ops->name);
        if (comp->ops->query_resources(comp, &params, &res, &nres) != OTE_OK) {
            const char *why_not = comp->ops->unavailable(comp);

            if (why_not != NULL)
                fprintf(f, "#   unavailable: %s\n", why_not);
            continue;
        }
        for (size_t r = 0; r < nres; r++) {
            const ote_engine_tl_t *tl = NULL;
            const char *why           = NULL;
            char md_name[OTE_TL_NAME_MAX * 2] = "none";
            ote_tl_caps_t caps;
            ote_status_t status = OTE_OK;

            for (size_t k = 0; k < e->facts.num_tls; k++) {
                if (strcmp(e->facts.tls[k].resource.tl_name, res[r].tl_name) == 0 &&
                    strcmp(e->facts.tls[k].resource.dev_name, res[r].dev_name) == 0)
                    tl = &e->facts.tls[k];
            }
            if (tl != NULL) {
                caps = tl->caps;
                snprintf(md_name, sizeof(md_name), "%s", tl->md ? tl->md->name : "none");
            } else {
                if (sel != NULL && !ote_select_tl(sel, res[r].tl_name))
                    why = "not in OTE_TLS";
                else if (sel != NULL && res[r].is_network &&
                         !ote_select_device(sel, res[r].dev_name))
                    why = "not in OTE_NET_DEVICES";
                else if (res[r].unusable != NULL)
                    why = res[r].unusable;
                status = engine_probe_tl(e, comp, &res[r], &caps, md_name, sizeof(md_name));
                if (why == NULL && status == OTE_ERR_UNSUPPORTED)
                    why = "cannot serve user memory";
                else if (why == NULL)
                    why = status != OTE_OK ? "cannot open" : "no zero-copy put or get";
            }
            fprintf(f, "#   transport %-10s device %-12s %-9s selected: %s%s%s%s\n",
                    res[r].tl_name, res[r].dev_name, res[r].is_network ? "network" : "local",
                    tl ? "yes" : "no", why ? " (" : "", why ? why : "", why ? ")" : "");
            if (tl != NULL)
                print_addresses(f, e, &res[r]);
            if (status == OTE_OK)
                print_caps(f, &caps, md_name);
            else if (res[r].unusable != NULL)
                ; /* the reason is on the line above */
            else if (status == OTE_ERR_UNSUPPORTED)
                fprintf(f, "#     ops: none (its memory domain cannot register user memory)\n");
            else
                fprintf(f, "#     unavailable: %s\n", ote_status_string(status));
        }
        free(res);
    }
    fprintf(f, "#\n# protocol %s (GPU memory through pinned host chunks)\n#   selected: %s\n",
            OTE_PROTO_STAGE_NAME, e->facts.workers[0].stage != NULL ? "yes"
                                  : !ote_proto_stage_available() ? "no (CUDA unavailable)"
                                                                 : "no (not in OTE_TLS)");
    ote_engine_rdma_print(e, sel, f);
    ote_engine_topo_print(e, f);
    if (sel != NULL)
        ote_select_free(sel);
}
