/* Engine lifecycle, memory API, descriptor publication. */
#include "ctl_msg.h"
#include "engine.h"
#include "log.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static ote_status_t engine_open_transports(ote_engine_h e)
{
    ote_tl_iface_params_t params = {
        .config       = &e->config,
        .regions      = e->regions,
        .instance_id  = e->instance_id,
        .bind_ip      = e->bind_ip,
        .advertise_ip = e->advertise_ip,
        .auth         = e->auth,
    };
    ote_select_t *sel;
    ote_status_t status;

    status = ote_select_parse(e->config.tls, e->config.net_devices, &sel);
    if (status != OTE_OK)
        return status;
    for (size_t c = 0; ote_tl_components[c] != NULL; c++) {
        ote_tl_component_t *comp = ote_tl_components[c];
        ote_tl_resource_t *res   = NULL;
        size_t nres              = 0;

        if (comp->ops->query_resources(comp, &params, &res, &nres) != OTE_OK)
            continue;
        for (size_t r = 0; r < nres; r++) {
            ote_engine_tl_t *tl;
            bool tl_ok  = ote_select_tl(sel, res[r].tl_name);
            bool dev_ok = !res[r].is_network || ote_select_device(sel, res[r].dev_name);

            if (!tl_ok || !dev_ok || e->num_tls == OTE_MAX_IFACES)
                continue;
            tl           = &e->tls[e->num_tls];
            tl->resource = res[r];
            tl->md_index = -1;
            if (comp->ops->md_open != NULL) {
                status = comp->ops->md_open(comp, &res[r], &tl->md);
                if (status != OTE_OK) {
                    ote_warn("transport %s/%s: memory domain unavailable: %s", res[r].tl_name,
                             res[r].dev_name, ote_status_string(status));
                    continue;
                }
                if (tl->md != NULL) {
                    size_t k;

                    /* Resources may share one md. */
                    for (k = 0; k < e->num_mds && e->mds[k] != tl->md; k++)
                        ;
                    if (k == e->num_mds) {
                        if (ote_mem_table_add_md(e->regions, tl->md) != OTE_OK) {
                            comp->ops->md_close(comp, tl->md);
                            continue;
                        }
                        e->mds[e->num_mds++] = tl->md;
                    }
                    tl->md_index = (int)k;
                }
            }
            for (size_t w = 0; w < e->num_workers; w++) {
                ote_worker_t *wk = &e->workers[w];
                ote_tl_iface_t *iface;

                params.worker_index = w;
                params.worker_lock  = &wk->lock;
                status = comp->ops->iface_open(&res[r], tl->md, &params, &iface);
                if (status != OTE_OK) {
                    ote_error("transport %s/%s: cannot open: %s", res[r].tl_name,
                              res[r].dev_name, ote_status_string(status));
                    free(res);
                    ote_select_free(sel);
                    return status;
                }
                iface->md_index             = tl->md_index;
                wk->ifaces[wk->num_ifaces++] = iface;
                if (w == 0)
                    iface->ops->query(iface, &tl->caps);
            }
            e->num_tls++;
        }
        free(res);
    }
    status = ote_select_check_unmatched(sel);
    ote_select_free(sel);
    if (status != OTE_OK)
        return status;
    if (e->num_tls == 0) {
        ote_error("no transport selected (OTE_TLS='%s', OTE_NET_DEVICES='%s')", e->config.tls,
                  e->config.net_devices);
        return OTE_ERR_UNREACHABLE;
    }
    return OTE_OK;
}

static void engine_free(ote_engine_h e)
{
    if (e->ctl != NULL)
        ote_ctl_stop(e->ctl);
    e->ctl = NULL;
    for (;;) {
        ote_segment_h seg;

        pthread_mutex_lock(&e->seg_lock);
        seg = e->segments;
        pthread_mutex_unlock(&e->seg_lock);
        if (seg == NULL)
            break;
        ote_segment_close(seg);
    }
    ote_notifier_stop(e->notifier);
    for (size_t w = 0; e->workers && w < e->num_workers; w++)
        ote_worker_stop(&e->workers[w]);
    for (size_t w = 0; e->workers && w < e->num_workers; w++)
        ote_worker_cleanup(&e->workers[w]);
    free(e->workers);
    ote_mem_table_destroy(e->regions);
    for (size_t i = 0; i < e->num_tls; i++) {
        ote_engine_tl_t *tl = &e->tls[i];
        bool shared         = false;

        for (size_t k = 0; k < i; k++)
            shared |= e->tls[k].md == tl->md;
        if (tl->md != NULL && !shared && tl->resource.component->ops->md_close)
            tl->resource.component->ops->md_close(tl->resource.component, tl->md);
    }
    if (e->event_fd >= 0)
        close(e->event_fd);
    free(e->notifs);
    pthread_mutex_destroy(&e->notif_lock);
    pthread_mutex_destroy(&e->seg_lock);
    ote_auth_destroy(e->auth);
    ote_config_release(&e->config);
    free(e);
}

ote_status_t ote_engine_create(const ote_engine_params_t *params, ote_engine_h *engine_p)
{
    ote_engine_params_t none = {0};
    ote_mem_table_params_t mp;
    const char *metadata;
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
    e->event_fd = -1;
    pthread_mutex_init(&e->notif_lock, NULL);
    pthread_mutex_init(&e->seg_lock, NULL);
    status = ote_config_read(&e->config);
    if (status != OTE_OK) {
        pthread_mutex_destroy(&e->notif_lock);
        pthread_mutex_destroy(&e->seg_lock);
        free(e);
        return status;
    }
    ote_log_set_level(e->config.log_level);
    status = ote_auth_create(&e->config, &e->auth);
    if (status != OTE_OK)
        goto err;

    metadata = params->metadata ? params->metadata : e->config.metadata;
    if (strcmp(metadata, "p2p") != 0) {
        ote_error("metadata backend '%s' is not available in this build; use p2p", metadata);
        status = strncmp(metadata, "etcd://", 7) == 0 || strncmp(metadata, "redis://", 8) == 0
                     ? OTE_ERR_UNSUPPORTED
                     : OTE_ERR_INVALID_PARAM;
        goto err;
    }

    do {
        e->instance_id = ote_random_u64();
    } while (e->instance_id == 0);
    if (e->config.host_id && e->config.host_id[0])
        snprintf(e->host_id, sizeof(e->host_id), "%s", e->config.host_id);
    else
        ote_host_id(e->host_id, sizeof(e->host_id));

    mp = (ote_mem_table_params_t){.rcache_enable      = e->config.rcache_enable,
                                  .rcache_max_size    = e->config.rcache_max_size,
                                  .rcache_max_regions = e->config.rcache_max_regions};
    status = ote_mem_table_create(&mp, &e->regions);
    if (status != OTE_OK)
        goto err;

    status = ote_ctl_start(e, params->listen_addr ? params->listen_addr : "0.0.0.0:0", &e->ctl,
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
            ote_sockaddr_set_port((struct sockaddr *)&ss, ote_sockaddr_port((struct sockaddr *)&ss));
            snprintf(e->name, sizeof(e->name), "%s:%u", e->advertise_ip,
                     ote_sockaddr_port((struct sockaddr *)&ss));
        } else {
            snprintf(e->advertise_ip, sizeof(e->advertise_ip), "%s", e->bind_ip);
            snprintf(e->name, sizeof(e->name), "%s", bound);
        }
        if (params->name != NULL) {
            if (strlen(params->name) > OTE_DESC_NAME_MAX) {
                status = OTE_ERR_INVALID_PARAM;
                goto err;
            }
            snprintf(e->name, sizeof(e->name), "%s", params->name);
        }
    }

    e->num_workers = (size_t)e->config.num_workers;
    e->workers     = calloc(e->num_workers, sizeof(*e->workers));
    if (e->workers == NULL) {
        status = OTE_ERR_NO_MEMORY;
        goto err;
    }
    for (size_t w = 0; w < e->num_workers; w++) {
        status = ote_worker_init(e, &e->workers[w], w);
        if (status != OTE_OK) {
            e->num_workers = w;
            goto err;
        }
    }
    status = engine_open_transports(e);
    if (status != OTE_OK)
        goto err;
    e->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->event_fd < 0) {
        status = OTE_ERR_IO;
        goto err;
    }
    status = ote_notifier_start(e, &e->notifier);
    if (status != OTE_OK)
        goto err;
    for (size_t w = 0; w < e->num_workers; w++) {
        status = ote_worker_start(&e->workers[w]);
        if (status != OTE_OK)
            goto err;
    }
    status = ote_ctl_run(e->ctl);
    if (status != OTE_OK)
        goto err;
    ote_info("engine %s started (instance %016llx, %zu transports, %zu workers)", e->name,
             (unsigned long long)e->instance_id, e->num_tls, e->num_workers);
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
    return e ? e->name : NULL;
}

int ote_engine_event_fd(ote_engine_h e)
{
    if (e == NULL)
        return -1;
    atomic_store(&e->event_fd_used, true);
    return e->event_fd;
}

ote_status_t ote_engine_desc_encode(ote_engine_h e, ote_buf_t *out)
{
    ote_desc_t *d = calloc(1, sizeof(*d));
    ote_status_t status;

    if (d == NULL)
        return OTE_ERR_NO_MEMORY;
    d->instance_id = e->instance_id;
    snprintf(d->name, sizeof(d->name), "%s", e->name);
    snprintf(d->host_id, sizeof(d->host_id), "%s", e->host_id);
    for (size_t w = 0; w < e->num_workers; w++) {
        ote_worker_t *wk = &e->workers[w];

        for (size_t i = 0; i < wk->num_ifaces && d->num_tls < OTE_DESC_MAX_TLS; i++) {
            ote_desc_tl_t *t = &d->tls[d->num_tls];

            if (wk->ifaces[i]->ops->get_address(wk->ifaces[i], t->addr, sizeof(t->addr),
                                                &t->addr_len) != OTE_OK)
                continue;
            snprintf(t->tl_name, sizeof(t->tl_name), "%s", wk->ifaces[i]->resource.tl_name);
            snprintf(t->dev_name, sizeof(t->dev_name), "%s", wk->ifaces[i]->resource.dev_name);
            d->num_tls++;
        }
    }
    d->num_mds = e->num_mds;
    for (size_t i = 0; i < e->num_mds; i++)
        snprintf(d->mds[i], sizeof(d->mds[i]), "%s", e->mds[i]->name);
    status = ote_desc_encode(d, e->regions, out);
    free(d);
    return status;
}

/* ---- memory API ------------------------------------------------------------ */

ote_status_t ote_mem_register(ote_engine_h e, const ote_mem_desc_t *descs, size_t count,
                              ote_mem_h *mems_p)
{
    if (e == NULL || descs == NULL || count == 0 || mems_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    return ote_mem_table_register(e->regions, descs, count, mems_p);
}

ote_status_t ote_mem_deregister(ote_engine_h e, ote_mem_h mem)
{
    if (e == NULL || mem == NULL)
        return OTE_ERR_INVALID_PARAM;
    return ote_mem_table_deregister(e->regions, mem);
}

ote_status_t ote_mem_alloc(ote_engine_h e, size_t length, const char *location, unsigned access,
                           void **addr_p, ote_mem_h *mem_p)
{
    unsigned type = OTE_MEM_TYPE_HOST;
    int numa      = -1;
    size_t alloc_len;
    void *addr;
    ote_region_t *r;
    ote_status_t status;

    if (e == NULL || length == 0 || addr_p == NULL || mem_p == NULL)
        return OTE_ERR_INVALID_PARAM;
    if (location != NULL && strcmp(location, "*") != 0) {
        status = ote_mem_location_parse(location, &type);
        if (status != OTE_OK)
            return status;
        if (type != OTE_MEM_TYPE_HOST) {
            ote_error("ote_mem_alloc: no component allocates %s memory in this engine", location);
            return OTE_ERR_UNSUPPORTED;
        }
        numa = atoi(location + 4);
    }
    status = ote_mem_host_alloc(length, numa, &addr, &alloc_len);
    if (status != OTE_OK)
        return status;
    status = ote_mem_table_register_owned(e->regions, addr, length,
                                          location ? location : "*", access, &r);
    if (status != OTE_OK) {
        ote_mem_host_free(addr, alloc_len);
        return status;
    }
    r->owned        = true;
    r->owned_base   = addr;
    r->owned_length = alloc_len;
    *addr_p         = addr;
    *mem_p          = r;
    return OTE_OK;
}

ote_status_t ote_mem_free(ote_engine_h e, ote_mem_h mem)
{
    if (e == NULL || mem == NULL || !mem->owned)
        return OTE_ERR_INVALID_PARAM;
    return ote_mem_table_deregister(e->regions, mem);
}

/* ---- ote_info -d ------------------------------------------------------------ */

void ote_engine_print_transports(ote_engine_h e, FILE *f);
void ote_engine_print_transports(ote_engine_h e, FILE *f)
{
    ote_tl_iface_params_t params = {.config = &e->config, .bind_ip = e->bind_ip,
                                    .advertise_ip = e->advertise_ip};

    fprintf(f, "# engine %s, host %s\n", e->name, e->host_id);
    for (size_t c = 0; ote_tl_components[c] != NULL; c++) {
        ote_tl_component_t *comp = ote_tl_components[c];
        ote_tl_resource_t *res   = NULL;
        size_t nres              = 0;

        fprintf(f, "#\n# component %s\n", comp->ops->name);
        if (comp->ops->query_resources(comp, &params, &res, &nres) != OTE_OK)
            continue;
        for (size_t r = 0; r < nres; r++) {
            const ote_engine_tl_t *tl = NULL;

            for (size_t k = 0; k < e->num_tls; k++) {
                if (strcmp(e->tls[k].resource.tl_name, res[r].tl_name) == 0 &&
                    strcmp(e->tls[k].resource.dev_name, res[r].dev_name) == 0)
                    tl = &e->tls[k];
            }
            fprintf(f, "#   transport %-10s device %-12s selected: %s\n", res[r].tl_name,
                    res[r].dev_name, tl ? "yes" : "no");
            if (tl == NULL)
                continue;
            fprintf(f, "#     ops:%s%s%s%s  memory: local%s%s remote%s%s  scope:%s%s%s\n",
                    tl->caps.ops & OTE_TL_CAP_PUT_ZCOPY ? " put_zcopy" : "",
                    tl->caps.ops & OTE_TL_CAP_GET_ZCOPY ? " get_zcopy" : "",
                    tl->caps.ops & OTE_TL_CAP_AM ? " am" : "",
                    tl->caps.ops & OTE_TL_CAP_CHECKED ? " checked" : "",
                    tl->caps.mem_local & OTE_MEM_TYPE_HOST ? " host" : "",
                    tl->caps.mem_local & OTE_MEM_TYPE_CUDA ? " cuda" : "",
                    tl->caps.mem_remote & OTE_MEM_TYPE_HOST ? " host" : "",
                    tl->caps.mem_remote & OTE_MEM_TYPE_CUDA ? " cuda" : "",
                    tl->caps.scope & OTE_TL_SCOPE_PROCESS ? " process" : "",
                    tl->caps.scope & OTE_TL_SCOPE_HOST ? " host" : "",
                    tl->caps.scope & OTE_TL_SCOPE_NETWORK ? " network" : "");
            fprintf(f, "#     max_msg %zu, slice %zu, bandwidth %.2f GB/s, latency %.1f us, "
                       "connect %s, md %s\n",
                    tl->caps.max_msg, tl->caps.slice_size, tl->caps.bandwidth / 1e9,
                    tl->caps.latency * 1e6,
                    tl->caps.conn_model == OTE_TL_CONN_TO_IFACE ? "to-iface" : "to-ep",
                    tl->md ? tl->md->name : "none");
        }
        free(res);
    }
}
