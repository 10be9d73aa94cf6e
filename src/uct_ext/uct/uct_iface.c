/* uct component: resources, ifaces (one uct_worker each), progress, errors. */
#include "uct.h"

#include "base/config.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"
#include "uct_config.h"
#include "uct_ext/rdma/rdma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OTE_UCT_SLICE (1u << 20)

/* ---- small pieces shared with uct_ep.c ----------------------------------- */

ote_uct_op_t *ote_uct_op_get(ote_uct_iface_t *iface)
{
    ote_uct_op_t *op = iface->free_ops;

    if (op != NULL)
        iface->free_ops = op->next;
    else
        op = malloc(sizeof(*op));
    if (op != NULL)
        memset(op, 0, sizeof(*op));
    return op;
}

void ote_uct_op_put(ote_uct_iface_t *iface, ote_uct_op_t *op)
{
    op->next        = iface->free_ops;
    iface->free_ops = op;
}

void ote_uct_op_list_push(ote_uct_op_list_t *l, ote_uct_op_t *op)
{
    OTE_DLIST2_PUSH_BACK(l->head, l->tail, op, prev, next);
}

void ote_uct_op_list_remove(ote_uct_op_list_t *l, ote_uct_op_t *op)
{
    OTE_DLIST2_REMOVE(l->head, l->tail, op, prev, next);
    op->next = op->prev = NULL;
}

static void put_u16(uint8_t *p, size_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

ote_status_t ote_uct_blob_pack(const void *a, size_t alen, const void *b, size_t blen,
                               void *buf, size_t max, size_t *len_p)
{
    uint8_t *p = buf;

    if (alen > UINT16_MAX || blen > UINT16_MAX || 4 + alen + blen > max)
        return OTE_ERR_INVALID_PARAM;
    put_u16(p, alen);
    if (alen)
        memcpy(p + 2, a, alen);
    put_u16(p + 2 + alen, blen);
    if (blen)
        memcpy(p + 4 + alen, b, blen);
    *len_p = 4 + alen + blen;
    return OTE_OK;
}

ote_status_t ote_uct_blob_unpack(const void *buf, size_t len, const uint8_t **a_p,
                                 size_t *alen_p, const uint8_t **b_p, size_t *blen_p)
{
    const uint8_t *p = buf;
    size_t alen, blen;

    if (buf == NULL || len < 4)
        return OTE_ERR_PROTOCOL;
    alen = (size_t)p[0] | ((size_t)p[1] << 8);
    if (alen > len - 4)
        return OTE_ERR_PROTOCOL;
    blen = (size_t)p[2 + alen] | ((size_t)p[3 + alen] << 8);
    if (4 + alen + blen != len)
        return OTE_ERR_PROTOCOL;
    *a_p    = p + 2;
    *alen_p = alen;
    *b_p    = p + 4 + alen;
    *blen_p = blen;
    return OTE_OK;
}

/* ---- errors reported by UCT ------------------------------------------------- */

/*
 * UCT's error handler: it may run on UCX's async thread, so it only records
 * the error; the worker handles it at its next progress call.
 */
static ucs_status_t iface_err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    ote_uct_iface_t *iface = arg;

    pthread_mutex_lock(&iface->err_lock);
    /* cma reports each failed copy: one record per ep is enough. */
    for (size_t i = 0; i < iface->num_errs; i++) {
        if (iface->errs[i].ep == ep) {
            pthread_mutex_unlock(&iface->err_lock);
            return UCS_OK;
        }
    }
    if (iface->num_errs < OTE_UCT_MAX_ERRS) {
        iface->errs[iface->num_errs].ep     = ep;
        iface->errs[iface->num_errs].status = status;
        iface->num_errs++;
    } else {
        iface->errs_overflow = true;
    }
    atomic_store(&iface->have_errs, true);
    pthread_mutex_unlock(&iface->err_lock);
    return UCS_OK;
}

static unsigned iface_handle_errs(ote_uct_iface_t *iface)
{
    ote_uct_err_t errs[OTE_UCT_MAX_ERRS];
    size_t n;
    bool overflow;

    pthread_mutex_lock(&iface->err_lock);
    n = iface->num_errs;
    memcpy(errs, iface->errs, n * sizeof(errs[0]));
    overflow             = iface->errs_overflow;
    iface->num_errs      = 0;
    iface->errs_overflow = false;
    atomic_store(&iface->have_errs, false);
    pthread_mutex_unlock(&iface->err_lock);
    if (overflow)
        ote_error("%s/%s: more connection errors than can be tracked at once",
                  iface->super.resource.tl_name, iface->super.resource.dev_name);
    for (size_t i = 0; i < n; i++) {
        ote_uct_ep_t *ep;

        for (ep = iface->eps; ep != NULL && ep->ep != errs[i].ep; ep = ep->next)
            ;
        if (ep == NULL)
            continue;
        if (ep->accepted) {
            ote_debug("%s/%s: accepted connection from %s closed: %s",
                      iface->super.resource.tl_name, iface->super.resource.dev_name,
                      ep->peer_name, ucs_status_string(errs[i].status));
            iface->num_accepted--;
            ote_uct_ep_free(ep);
            continue;
        }
        /* A peer that goes away between transfers is news, not trouble. */
        ote_log(ep->posted.head || ep->pending.head ? OTE_LOG_WARN : OTE_LOG_INFO,
                "%s/%s: connection to %s failed: %s", iface->super.resource.tl_name,
                iface->super.resource.dev_name, ep->peer_name,
                ucs_status_string(errs[i].status));
        ote_uct_ep_fail(ep, ote_uct_status(errs[i].status));
    }
    return (unsigned)n;
}

/* ---- iface ops ---------------------------------------------------------------- */

static void uct_iface_query_caps(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    *caps = ((ote_uct_iface_t *)tl_iface)->caps;
}

static ote_status_t uct_iface_get_address_(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                           size_t *len_p)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    uint8_t dev[OTE_TL_ADDR_MAX], ifa[OTE_TL_ADDR_MAX];
    size_t ifa_len = 0;
    ucs_status_t s;

    if (iface->attr.device_addr_len > sizeof(dev) || iface->attr.iface_addr_len > sizeof(ifa))
        return OTE_ERR_UNSUPPORTED;
    s = uct_iface_get_device_address(iface->iface, (uct_device_addr_t *)dev);
    if (s != UCS_OK)
        return ote_uct_status(s);
    /* To-ep transports publish their device only: ep addresses come later. */
    if (iface->caps.conn_model == OTE_TL_CONN_TO_IFACE) {
        s = uct_iface_get_address(iface->iface, (uct_iface_addr_t *)ifa);
        if (s != UCS_OK)
            return ote_uct_status(s);
        ifa_len = iface->attr.iface_addr_len;
    }
    return ote_uct_blob_pack(dev, iface->attr.device_addr_len, ifa, ifa_len, buf, max, len_p);
}

static int uct_iface_event_fd_(ote_tl_iface_t *tl_iface)
{
    return ((ote_uct_iface_t *)tl_iface)->event_fd;
}

static ote_status_t uct_iface_event_arm_(ote_tl_iface_t *tl_iface)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    ucs_status_t s;

    if (atomic_load(&iface->have_errs))
        return OTE_ERR_BUSY;
    for (ote_uct_ep_t *ep = iface->eps; ep != NULL; ep = ep->next) {
        if (ep->pending.head)
            return OTE_ERR_BUSY;
    }
    if (iface->arm_events) {
        s = uct_iface_event_arm(iface->iface, iface->arm_events);
        if (s == UCS_ERR_BUSY || (s != UCS_OK && iface->outstanding))
            return OTE_ERR_BUSY;
    }
    /* Without an event fd nothing would wake us for work UCT still holds. */
    if (iface->event_fd < 0 && (iface->outstanding || iface->orphans.head))
        return OTE_ERR_BUSY;
    return OTE_OK;
}

static unsigned uct_iface_progress_(ote_tl_iface_t *tl_iface)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    unsigned n             = uct_worker_progress(iface->worker);

    if (atomic_load_explicit(&iface->have_errs, memory_order_relaxed))
        n += iface_handle_errs(iface);
    if (iface->outstanding) {
        for (ote_uct_ep_t *ep = iface->eps; ep != NULL; ep = ep->next) {
            if (ep->pending.head)
                n += ote_uct_ep_post_pending(ep);
        }
    }
    return n;
}

static void uct_iface_check_timeouts(ote_tl_iface_t *tl_iface, uint64_t deadline_ns)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;

    for (ote_uct_ep_t *ep = iface->eps; ep != NULL; ep = ep->next) {
        ote_uct_op_t *p = ep->posted.head, *q = ep->pending.head;

        if ((p && p->post_ns < deadline_ns) || (q && q->post_ns < deadline_ns)) {
            ote_warn("%s/%s: no completion from %s within OTE_XFER_TIMEOUT_MS",
                     iface->super.resource.tl_name, iface->super.resource.dev_name,
                     ep->peer_name);
            ote_uct_ep_fail(ep, OTE_ERR_TIMEOUT);
        }
    }
}

static void uct_iface_close_(ote_tl_iface_t *tl_iface)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;

    /* Initiator eps belong to rails and are gone by now; accepted ones are ours. */
    while (iface->eps != NULL)
        ote_uct_ep_free(iface->eps);
    if (iface->iface != NULL)
        uct_iface_close(iface->iface);
    if (iface->worker != NULL)
        uct_worker_destroy(iface->worker);
    if (iface->async != NULL)
        ucs_async_context_destroy(iface->async);
    /* UCT can no longer complete anything: orphans and free ops go. */
    while (iface->orphans.head != NULL) {
        ote_uct_op_t *op = iface->orphans.head;

        ote_uct_op_list_remove(&iface->orphans, op);
        free(op);
    }
    OTE_LIST_FREE(iface->free_ops, next);
    pthread_mutex_destroy(&iface->err_lock);
    free(iface);
}

static const ote_tl_iface_ops_t uct_iface_ops = {
    .close          = uct_iface_close_,
    .query          = uct_iface_query_caps,
    .get_address    = uct_iface_get_address_,
    .event_fd       = uct_iface_event_fd_,
    .progress       = uct_iface_progress_,
    .check_timeouts = uct_iface_check_timeouts,
    .ep_create      = ote_uct_ep_create,
    .event_arm      = uct_iface_event_arm_,
    .ep_open        = ote_uct_ep_open,
    .ep_accept      = ote_uct_ep_accept,
    .ep_release     = ote_uct_ep_release,
    .format_address = ote_tl_no_format_address,
    .has_deadlines  = ote_tl_no_deadlines,
};

/* The capability record from UCT's iface and md attributes. */
static void iface_caps(ote_uct_iface_t *iface, bool force_ep)
{
    const uct_iface_attr_t *a = &iface->attr;
    ote_tl_caps_t *c          = &iface->caps;
    size_t max_msg = SIZE_MAX, max_iov = SIZE_MAX;

    memset(c, 0, sizeof(*c));
    if (a->cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
        c->ops |= OTE_TL_CAP_PUT_ZCOPY;
        max_msg = a->cap.put.max_zcopy < max_msg ? a->cap.put.max_zcopy : max_msg;
        max_iov = a->cap.put.max_iov < max_iov ? a->cap.put.max_iov : max_iov;
    }
    if (a->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) {
        c->ops |= OTE_TL_CAP_GET_ZCOPY;
        max_msg = a->cap.get.max_zcopy < max_msg ? a->cap.get.max_zcopy : max_msg;
        max_iov = a->cap.get.max_iov < max_iov ? a->cap.get.max_iov : max_iov;
    }
    if ((a->cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE) && !force_ep)
        c->conn_model = OTE_TL_CONN_TO_IFACE;
    else if (a->cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP)
        c->conn_model = OTE_TL_CONN_TO_EP;
    else if (a->cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE)
        c->conn_model = OTE_TL_CONN_TO_IFACE;
    else
        c->ops = 0; /* sockaddr-only transports: no way to connect here */
    /* Zero-copy needs the md to register user memory. */
    if (iface->md->super.mem_types == 0)
        c->ops = 0;
    c->mem_local  = iface->md->super.mem_types & iface->mem_mask;
    c->mem_remote = iface->md->super.mem_types & iface->mem_mask;
    switch (iface->rsc.dev_type) {
    case UCT_DEVICE_TYPE_SHM:
        c->scope = OTE_TL_SCOPE_HOST;
        break;
    case UCT_DEVICE_TYPE_NET:
        /* A loopback device reaches this host (and network namespace) only. */
        c->scope = iface->rsc.loopback ? OTE_TL_SCOPE_HOST : OTE_TL_SCOPE_NETWORK;
        break;
    default:
        c->scope = OTE_TL_SCOPE_PROCESS;
        break;
    }
    c->max_iov    = max_iov == SIZE_MAX || max_iov == 0 ? 1 : max_iov;
    c->max_msg    = c->ops ? max_msg : 0;
    c->align      = 1;
    c->slice_size = c->max_msg && c->max_msg < OTE_UCT_SLICE ? c->max_msg : OTE_UCT_SLICE;
    c->bandwidth  = a->bandwidth.dedicated + a->bandwidth.shared;
    c->latency    = a->latency.c;
    /* UCX's tcp leaks the socket of a connect that fails in uct_ep_create. */
    if (c->ops != 0 && strcmp(iface->rsc.tl_name, "tcp") == 0)
        c->ops |= OTE_TL_CAP_PROBE_PEER;
}

/*
 * On an RDMA port, the GID the discovery chose goes to UCT as GID_INDEX
 * (rc, dc and ud read it from their iface configuration). A port it cannot
 * be handed to fails the open: never UCT's own choice in its place.
 */
ote_status_t ote_uct_iface_config_gid(const char *tl_name, const char *dev_name,
                                      const ote_rdma_t *rdma, uct_iface_config_t *cfg)
{
    const ote_rdma_port_t *port = ote_rdma_port_find(rdma, dev_name);
    const ote_rdma_gid_t *gid   = ote_rdma_port_gid(port);
    char index[16];
    ucs_status_t s;

    if (port == NULL)
        return OTE_OK; /* not an RDMA port (tcp, shared memory, ...) */
    if (port->unusable[0] != '\0' || gid == NULL) {
        ote_error("uct %s/%s: port not usable: %s", tl_name, dev_name,
                  port->unusable[0] ? port->unusable : "no GID");
        return OTE_ERR_NO_DEVICE;
    }
    snprintf(index, sizeof(index), "%u", gid->index);
    s = uct_config_modify(cfg, "GID_INDEX", index);
    if (s != UCS_OK) {
        ote_error("uct %s/%s: cannot set GID_INDEX=%s in its configuration: %s", tl_name,
                  dev_name, index, ucs_status_string(s));
        return OTE_ERR_UNSUPPORTED;
    }
    ote_debug("uct %s/%s: GID index %s (%s)", tl_name, dev_name, index,
              ote_rdma_gid_class(gid));
    return OTE_OK;
}

static ote_status_t uct_iface_open_(const ote_tl_resource_t *res, ote_md_t *omd,
                                    const ote_tl_iface_params_t *params,
                                    ote_tl_iface_t **iface_p)
{
    ote_uct_iface_t *iface;
    uct_iface_config_t *cfg;
    uct_iface_params_t ip;
    ote_uct_config_t ucfg;
    ote_mem_table_params_t mp;
    bool ep_mode;
    ucs_status_t s;
    ote_status_t status;

    if (omd == NULL)
        return OTE_ERR_INVALID_PARAM;
    /* Shared-memory transports that only reach memory UCT allocated (posix,
     * sysv) cannot serve user buffers: not worth an iface. */
    if (omd->mem_types == 0) {
        ote_debug("uct %s/%s: memory domain %s cannot register user memory", res->tl_name,
                  res->dev_name, omd->name);
        return OTE_ERR_UNSUPPORTED;
    }
    status = ote_config_fill(&ote_uct_config_table, &ucfg);
    if (status != OTE_OK)
        return status;
    ep_mode = strcmp(ucfg.connect, "ep") == 0;
    if (strcmp(ucfg.connect, "auto") != 0 && !ep_mode) {
        ote_error("OTE_UCT_CONNECT='%s': expected auto or ep", ucfg.connect);
        ote_config_release(&ote_uct_config_table, &ucfg);
        return OTE_ERR_INVALID_PARAM;
    }
    ote_config_release(&ote_uct_config_table, &ucfg);
    /* OTE_MEM_GPU_DIRECT as mem reads it. */
    status = ote_mem_table_params_read(&mp);
    if (status != OTE_OK)
        return status;
    iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_mutex_init(&iface->err_lock, NULL);
    iface->super.ops      = &uct_iface_ops;
    iface->super.ep_ops   = &ote_uct_ep_ops;
    iface->super.resource = *res;
    iface->super.md       = omd;
    iface->super.md_index = -1;
    iface->md             = (ote_uct_md_t *)omd;
    /* GPUDirect RDMA: GPU memory only where the md registers it and it is allowed. */
    iface->mem_mask = mp.gpu_direct == OTE_MEM_GPU_DIRECT_NO ? ~(unsigned)OTE_MEM_TYPE_CUDA : ~0u;
    iface->rsc            = *(const ote_uct_rsc_t *)res->priv;
    iface->worker_lock    = params->worker_lock;
    iface->event_fd       = -1;
    iface->max_accepted   = params->max_conns;
    iface->max_accepted_per_peer = params->max_conns_per_peer;

    status = OTE_ERR_IO;
    s = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &iface->async);
    if (s != UCS_OK)
        goto err;
    s = uct_worker_create(iface->async, UCS_THREAD_MODE_SERIALIZED, &iface->worker);
    if (s != UCS_OK)
        goto err;
    s = uct_md_iface_config_read(iface->md->md, iface->rsc.tl_name, NULL, NULL, &cfg);
    if (s != UCS_OK)
        goto err;
    status = ote_uct_iface_config_gid(iface->rsc.tl_name, iface->rsc.dev_name, params->rdma,
                                      cfg);
    if (status != OTE_OK) {
        uct_config_release(cfg);
        goto err;
    }
    status = OTE_ERR_IO;
    memset(&ip, 0, sizeof(ip));
    ip.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                    UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                    UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                    UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
    ip.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    ip.mode.device.tl_name  = iface->rsc.tl_name;
    ip.mode.device.dev_name = iface->rsc.dev_name;
    ip.stats_root           = NULL;
    ip.err_handler          = iface_err_handler;
    ip.err_handler_arg      = iface;
    ip.err_handler_flags    = UCT_CB_FLAG_ASYNC;
    s = uct_iface_open(iface->md->md, iface->worker, &ip, cfg, &iface->iface);
    uct_config_release(cfg);
    if (s != UCS_OK)
        goto err;
    uct_iface_progress_enable(iface->iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    s = uct_iface_query(iface->iface, &iface->attr);
    if (s != UCS_OK)
        goto err;
    iface_caps(iface, ep_mode);
    if (iface->attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_FD) {
        if (uct_iface_event_fd_get(iface->iface, &iface->event_fd) != UCS_OK)
            iface->event_fd = -1;
    }
    if (iface->attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_SEND_COMP)
        iface->arm_events |= UCT_EVENT_SEND_COMP;
    if (iface->attr.cap.event_flags & UCT_IFACE_FLAG_EVENT_RECV)
        iface->arm_events |= UCT_EVENT_RECV;
    *iface_p = &iface->super;
    return OTE_OK;

err:
    if (s != UCS_OK) {
        ote_debug("uct %s/%s: %s", iface->rsc.tl_name, iface->rsc.dev_name,
                  ucs_status_string(s));
        status = ote_uct_status(s);
    }
    uct_iface_close_(&iface->super);
    return status;
}

/* ---- component ------------------------------------------------------------ */

static ote_status_t uct_query_resources(ote_tl_component_t *comp,
                                        const ote_tl_iface_params_t *params,
                                        ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_uct_rsc_t **list = NULL;
    const ote_rdma_port_t *port;
    ote_tl_resource_t *res;
    size_t n = 0;
    ote_status_t status;

    status = ote_uct_query(&list, &n);
    if (status != OTE_OK)
        return status;
    res = calloc(n ? n : 1, sizeof(*res));
    if (res == NULL) {
        free(list);
        return OTE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        /* "tcp" and "cma" name the native components; UCT's are uct_tcp, uct_cma. */
        snprintf(res[i].tl_name, sizeof(res[i].tl_name), "%s%s",
                 strcmp(list[i]->tl_name, "tcp") == 0 || strcmp(list[i]->tl_name, "cma") == 0
                     ? "uct_"
                     : "",
                 list[i]->tl_name);
        snprintf(res[i].dev_name, sizeof(res[i].dev_name), "%s", list[i]->dev_name);
        res[i].is_network = list[i]->dev_type == UCT_DEVICE_TYPE_NET;
        res[i].component  = comp;
        res[i].priv       = list[i];
        port = ote_rdma_port_find(params->rdma, list[i]->dev_name);
        if (port != NULL && port->unusable[0] != '\0')
            res[i].unusable = port->unusable;
    }
    free(list);
    *res_p   = res;
    *count_p = n;
    return OTE_OK;
}

static ote_status_t uct_md_open_(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                                 ote_md_t **md_p)
{
    const ote_uct_rsc_t *rsc = res->priv;
    ote_uct_md_t *md;
    ote_status_t status;

    status = ote_uct_md_get(rsc->md_entry, &md);
    if (status != OTE_OK)
        return status;
    *md_p = &md->super;
    return OTE_OK;
}

static void uct_md_close_(ote_tl_component_t *comp, ote_md_t *md)
{
    ote_uct_md_put((ote_uct_md_t *)md);
}

OTE_TL_COMPONENT_DEFINE(ote_uct_component, "uct", &ote_uct_config_table, uct_query_resources,
                        uct_md_open_, uct_md_close_, uct_iface_open_, ote_tl_no_reason);
