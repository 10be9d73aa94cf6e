/*
 * Devices that join or leave while the engine runs. The engine's monitor
 * (engine_rdma.c, every OTE_RDMA_POLL_MS) runs one round after reading the
 * RDMA ports: when the network interfaces changed, or the RDMA ports did,
 * every component is asked for its network resources again. What the
 * engine does not run yet and the selection allows is opened on the
 * running workers and published in the descriptor; what it runs and is no
 * longer offered leaves the descriptor and pauses its rails, until it is
 * offered again.
 */
#include "base/log.h"
#include "base/util.h"
#include "core/engine_int.h"
#include "core/segment/segment.h"
#include "uct_ext/rdma/rdma.h"
#include "core/worker/worker.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* The i-th transport component an engine opens, or NULL past the last. */
ote_tl_component_t *ote_engine_component(size_t i)
{
    size_t n = 0;

    while (ote_tl_components[n] != NULL)
        n++;
    return i < n ? ote_tl_components[i] : NULL;
}

/* The engine-wide limits every iface applies to the connections it accepts. */
void ote_engine_iface_limits(ote_engine_h e, ote_tl_iface_params_t *params)
{
    params->max_conns            = e->facts.config.max_conns;
    params->max_conns_per_peer   = e->facts.config.max_conns_per_peer;
    params->handshake_timeout_ms = e->facts.config.handshake_timeout_ms;
}

void ote_engine_iface_params(ote_engine_h e, ote_tl_iface_params_t *params)
{
    *params = (ote_tl_iface_params_t){
        .regions      = e->facts.regions,
        .instance_id  = e->facts.instance_id,
        .bind_ip      = e->bind_ip,
        .advertise_ip = e->advertise_ip,
        .auth         = e->facts.auth,
        .rdma         = e->rdma,
    };
    ote_engine_iface_limits(e, params);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t len)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

uint64_t ote_engine_netif_sig(void)
{
    uint64_t h = 1469598103934665603ull;
    struct ifaddrs *ifa;

    if (getifaddrs(&ifa) != 0)
        return 0;
    for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
        const struct sockaddr *sa = i->ifa_addr;
        unsigned flags            = i->ifa_flags & (IFF_UP | IFF_RUNNING);

        if (sa == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
            continue;
        h = fnv1a(h, i->ifa_name, strlen(i->ifa_name) + 1);
        h = fnv1a(h, &flags, sizeof(flags));
        if (sa->sa_family == AF_INET)
            h = fnv1a(h, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        else
            h = fnv1a(h, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    }
    freeifaddrs(ifa);
    return h;
}

static ote_engine_tl_t *tl_find(ote_engine_h e, const char *tl_name, const char *dev_name)
{
    size_t n = e->facts.num_tls;

    for (size_t k = 0; k < n; k++) {
        if (strcmp(e->facts.tls[k].resource.tl_name, tl_name) == 0 &&
            strcmp(e->facts.tls[k].resource.dev_name, dev_name) == 0)
            return &e->facts.tls[k];
    }
    return NULL;
}

bool ote_engine_md_join(ote_engine_h e, const char *tl_name, const char *dev_name, ote_md_t *md)
{
    size_t k = e->facts.num_mds;
    ote_status_t status;

    if (k == OTE_MEM_MAX_MDS) {
        ote_warn("transport %s/%s: cannot join: more than %d memory domains", tl_name, dev_name,
                 OTE_MEM_MAX_MDS);
        return false;
    }
    status = ote_mem_table_add_md(e->facts.regions, md);
    if (status != OTE_OK) {
        ote_warn("transport %s/%s: cannot join: registering the engine's memory on its "
                 "memory domain %s failed: %s", tl_name, dev_name, md->name,
                 ote_status_string(status));
        return false;
    }
    /* The table publishes md's rkeys only for descriptors that list it. */
    e->facts.mds[k]  = md;
    e->facts.num_mds = k + 1;
    ote_info("transport %s/%s: its memory domain %s joined the running engine", tl_name,
             dev_name, md->name);
    return true;
}

bool ote_engine_ifaces_open(ote_engine_h e, ote_tl_component_t *comp,
                            const ote_tl_resource_t *res, ote_md_t *md,
                            ote_tl_iface_params_t *params, bool joining,
                            ote_tl_iface_t **ifaces, ote_tl_caps_t *caps_p)
{
    const char *what    = joining ? "cannot join: " : "";
    ote_status_t status = OTE_OK;
    size_t w;

    for (w = 0; w < e->facts.num_workers && status == OTE_OK; w++) {
        params->worker_index = w;
        params->worker_lock  = &e->facts.workers[w].lock;
        status = comp->ops->iface_open(res, md, params, &ifaces[w]);
    }
    if (status != OTE_OK) {
        w--;
        ote_log(status == OTE_ERR_UNSUPPORTED ? OTE_LOG_INFO : OTE_LOG_WARN,
                "transport %s/%s: %scannot open: %s", res->tl_name, res->dev_name, what,
                ote_status_string(status));
        /* The device monitor tries again. */
        if ((res->is_network || joining) && status != OTE_ERR_UNSUPPORTED)
            ote_engine_join_failed(e);
    } else {
        ifaces[0]->ops->query(ifaces[0], caps_p);
        if (caps_p->ops & (OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY))
            return true;
        ote_info("transport %s/%s: no one-sided zero-copy operation; not used", res->tl_name,
                 res->dev_name);
    }
    while (w-- > 0)
        ifaces[w]->ops->close(ifaces[w]);
    return false;
}

/* Open res on every worker while they run; a new memory domain joins first. */
static bool join_tl(ote_engine_h e, ote_tl_component_t *comp, const ote_tl_resource_t *res,
                    ote_tl_iface_params_t *params)
{
    ote_tl_iface_t *ifaces[OTE_MAX_WORKERS];
    size_t slot = e->facts.num_tls, w, k = 0;
    ote_engine_tl_t *tl;
    ote_md_t *md = NULL;
    ote_tl_caps_t caps;
    ote_status_t status;

    if (slot == OTE_MAX_IFACES) {
        ote_warn("transport %s/%s: cannot join: more than %d transports", res->tl_name,
                 res->dev_name, OTE_MAX_IFACES);
        return false;
    }
    status = comp->ops->md_open(comp, res, &md);
    if (status != OTE_OK && status != OTE_ERR_UNSUPPORTED) {
        ote_warn("transport %s/%s: cannot join: memory domain unavailable: %s", res->tl_name,
                 res->dev_name, ote_status_string(status));
        ote_engine_join_failed(e);
        return false;
    }
    while (md != NULL && k < e->facts.num_mds && e->facts.mds[k] != md)
        k++;
    w = 0;
    if (!ote_engine_ifaces_open(e, comp, res, md, params, true, ifaces, &caps))
        goto err_close;
    for (w = 0; w < e->facts.num_workers; w++)
        ifaces[w]->md_index = md != NULL ? (int)k : -1;
    /* The ifaces carry no traffic before the workers have them. */
    if (md != NULL && k == e->facts.num_mds &&
        !ote_engine_md_join(e, res->tl_name, res->dev_name, md)) {
        ote_engine_join_failed(e);
        goto err_close;
    }
    tl           = &e->facts.tls[slot];
    tl->resource = *res;
    tl->md       = md;
    tl->md_index = md != NULL ? (int)k : -1;
    tl->caps     = caps;
    atomic_store(&tl->gone, false);
    e->facts.num_tls = slot + 1;
    for (w = 0; w < e->facts.num_workers; w++) {
        if (ote_worker_iface_add(&e->facts.workers[w], ifaces[w]) != OTE_OK)
            break;
    }
    if (w < e->facts.num_workers) {
        /* Those added stay (closed with the worker); the transport is not used. */
        ote_warn("transport %s/%s: cannot join: worker %zu cannot wait on it", res->tl_name,
                 res->dev_name, w);
        atomic_store(&tl->gone, true);
        for (; w < e->facts.num_workers; w++)
            ifaces[w]->ops->close(ifaces[w]);
        return false;
    }
    ote_info("transport %s/%s: joined the running engine (%zu workers)", res->tl_name,
             res->dev_name, e->facts.num_workers);
    return true;

err_close:
    while (w-- > 0)
        ifaces[w]->ops->close(ifaces[w]);
    if (md != NULL)
        comp->ops->md_close(comp, md);
    return false;
}

static bool res_offered(const ote_tl_resource_t *res, size_t n, const ote_engine_tl_t *tl)
{
    for (size_t r = 0; r < n; r++) {
        if (strcmp(res[r].tl_name, tl->resource.tl_name) == 0 &&
            strcmp(res[r].dev_name, tl->resource.dev_name) == 0)
            return true;
    }
    return false;
}

/* One component's network resources against what the engine runs. True: the descriptor changed. */
static bool join_component(ote_engine_h e, ote_tl_component_t *comp, ote_select_t *sel,
                           ote_tl_iface_params_t *params)
{
    ote_tl_resource_t *res = NULL;
    size_t nres = 0, ntls;
    bool changed = false;

    if (comp->ops->query_resources(comp, params, &res, &nres) != OTE_OK)
        return false;
    for (size_t r = 0; r < nres; r++) {
        ote_engine_tl_t *tl;

        if (!res[r].is_network || res[r].unusable != NULL ||
            !ote_select_tl(sel, res[r].tl_name) || !ote_select_device(sel, res[r].dev_name))
            continue;
        tl = tl_find(e, res[r].tl_name, res[r].dev_name);
        if (tl == NULL) {
            changed |= join_tl(e, comp, &res[r], params);
        } else if (atomic_load(&tl->gone)) {
            atomic_store(&tl->gone, false);
            ote_info("transport %s/%s: back; its rails resume", res[r].tl_name,
                     res[r].dev_name);
            ote_segments_link(e, res[r].dev_name, true);
            changed = true;
        }
    }
    ntls = e->facts.num_tls;
    for (size_t k = 0; k < ntls; k++) {
        ote_engine_tl_t *tl = &e->facts.tls[k];

        if (tl->resource.component != comp || !tl->resource.is_network ||
            atomic_load(&tl->gone) || res_offered(res, nres, tl))
            continue;
        atomic_store(&tl->gone, true);
        ote_info("transport %s/%s: gone; its rails pause until it is back",
                 tl->resource.tl_name, tl->resource.dev_name);
        ote_segments_link(e, tl->resource.dev_name, false);
        changed = true;
    }
    free(res);
    return changed;
}

void ote_engine_join_failed(ote_engine_h e)
{
    uint64_t gap = e->join_retry_gap_ns * 2;

    if (gap < 1000000000ull)
        gap = 1000000000ull;
    if (gap > 60000000000ull)
        gap = 60000000000ull;
    e->join_retry_gap_ns = gap;
    e->join_retry_ns     = ote_time_ns() + gap;
}

void ote_engine_join_round(ote_engine_h e, const ote_rdma_t *rdma, bool rdma_changed)
{
    uint64_t sig = ote_engine_netif_sig();
    bool retry   = e->join_retry_ns != 0 && ote_time_ns() >= e->join_retry_ns;
    ote_tl_iface_params_t params;
    ote_select_t *sel;
    bool changed = false;

    if (!rdma_changed && sig == e->netif_sig && !retry)
        return;
    e->netif_sig     = sig;
    e->join_retry_ns = 0; /* set again by a device that fails once more */
    ote_debug("%s: every transport is asked for its devices again",
              rdma_changed ? "RDMA ports changed"
              : retry      ? "a device failed to open"
                           : "network interfaces changed");
    ote_engine_iface_params(e, &params);
    params.rdma = rdma;
    if (ote_select_parse(e->facts.config.tls, e->facts.config.net_devices, &sel) != OTE_OK)
        return;
    for (size_t c = 0; ote_engine_component(c) != NULL; c++)
        changed |= join_component(e, ote_engine_component(c), sel, &params);
    ote_select_free(sel);
    if (e->join_retry_ns == 0)
        e->join_retry_gap_ns = 0;
    /* The p2p metadata serves the descriptor as it is now; a store is told. */
    if (changed)
        ote_meta_changed(e->facts.meta);
}
