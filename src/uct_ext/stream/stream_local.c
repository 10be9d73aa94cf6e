/*
 * Stream base, local mode (cma, shm): resource, iface (abstract AF_UNIX
 * listener), address.
 */
#include "stream.h"

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define LOCAL_NAME_MAX OTE_STREAM_LOCAL_NAME_MAX

typedef ote_stream_local_iface_t local_iface_t;

ote_status_t ote_stream_local_addr_unpack(const void *buf, size_t len, struct sockaddr_storage *ss,
                                          socklen_t *sslen_p)
{
    const char *b           = buf;
    struct sockaddr_un *un = (struct sockaddr_un *)ss;
    size_t plen             = strlen(OTE_STREAM_LOCAL_NAME_PREFIX);

    /* Only our own kind of name: a descriptor cannot steer us to other sockets. */
    if (buf == NULL || len <= plen || len > LOCAL_NAME_MAX || memcmp(b, OTE_STREAM_LOCAL_NAME_PREFIX, plen))
        return OTE_ERR_PROTOCOL;
    for (size_t i = plen; i < len; i++) {
        if (!((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f') || b[i] == '.'))
            return OTE_ERR_PROTOCOL;
    }
    memset(ss, 0, sizeof(*ss));
    un->sun_family = AF_UNIX;
    memcpy(un->sun_path + 1, b, len);
    *sslen_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
    return OTE_OK;
}

/* The descriptor's cma address names one socket. */
ote_status_t ote_stream_local_addr_unpack_list(const void *buf, size_t len,
                                               ote_stream_sockaddr_t *out,
                                               size_t max, size_t *count_p)
{
    ote_status_t status;

    if (max == 0)
        return OTE_ERR_INVALID_PARAM;
    status = ote_stream_local_addr_unpack(buf, len, &out[0].ss, &out[0].len);
    if (status == OTE_OK)
        *count_p = 1;
    return status;
}

void ote_stream_local_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    ote_stream_iface_t *iface = (ote_stream_iface_t *)tl_iface;

    memset(caps, 0, sizeof(*caps));
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    caps->mem_local  = OTE_MEM_TYPE_HOST;
    caps->mem_remote = OTE_MEM_TYPE_HOST;
    caps->scope      = OTE_TL_SCOPE_PROCESS | OTE_TL_SCOPE_HOST;
    caps->max_iov    = 1;
    caps->max_msg    = iface->cfg.max_msg;
    caps->align      = 1;
    caps->slice_size = 1u << 20;
    caps->bandwidth  = 10e9; /* one memory copy */
    caps->latency    = 5e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

ote_status_t ote_stream_local_iface_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                                size_t *len_p)
{
    local_iface_t *iface = (local_iface_t *)tl_iface;

    if (max < iface->name_len)
        return OTE_ERR_INVALID_PARAM;
    memcpy(buf, iface->name, iface->name_len);
    *len_p = iface->name_len;
    return OTE_OK;
}

unsigned ote_stream_local_iface_progress(ote_tl_iface_t *tl_iface)
{
    local_iface_t *iface = (local_iface_t *)tl_iface;
    unsigned count     = ote_stream_iface_progress(tl_iface);

    if (count)
        iface->last_event_ns = ote_time_ns();
    return count;
}

/*
 * A peer on this host answers a copy within microseconds: while this
 * process waits for answers that keep coming, poll for them rather than
 * sleep, which saves the peer a wake-up per answer. A peer that has not
 * answered for OTE_STREAM_LOCAL_POLL_NS is waited for on the event fd.
 */
ote_status_t ote_stream_local_iface_event_arm(ote_tl_iface_t *tl_iface)
{
    local_iface_t *iface = (local_iface_t *)tl_iface;

    if (ote_time_ns() - iface->last_event_ns >= OTE_STREAM_LOCAL_POLL_NS)
        return OTE_OK;
    for (ote_stream_conn_t *c = iface->stream.conns; c != NULL; c = c->next) {
        if (c->ep != NULL && c->ops_count > 0 && !c->dead)
            return OTE_ERR_BUSY;
    }
    return OTE_OK;
}

void ote_stream_local_iface_close(ote_tl_iface_t *tl_iface)
{
    local_iface_t *iface = (local_iface_t *)tl_iface;

    ote_par_destroy(iface->par);
    iface->par = NULL;
    ote_stream_iface_close(tl_iface);
}

static ote_status_t local_listen(local_iface_t *iface)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;

    iface->name_len = (size_t)snprintf(iface->name, sizeof(iface->name), "%s%lx.%016llx",
                                       OTE_STREAM_LOCAL_NAME_PREFIX, (unsigned long)getpid(),
                                       (unsigned long long)ote_random_u64());
    if (ote_stream_local_addr_unpack(iface->name, iface->name_len, &ss, &len) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return OTE_ERR_IO;
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0) {
        ote_error("cma: cannot listen on an abstract socket: %s", strerror(errno));
        close(fd);
        return OTE_ERR_IO;
    }
    iface->stream.listen_fd = fd;
    return OTE_OK;
}

ote_status_t ote_stream_local_iface_setup(ote_stream_local_iface_t *iface,
                                          const ote_tl_resource_t *res,
                                          const ote_tl_iface_params_t *params,
                                          const ote_stream_local_config_t *cfg,
                                          const ote_stream_hooks_t *hooks,
                                          const ote_tl_iface_ops_t *ops)
{
    /* Only requests travel: one connection per peer, no socket tuning. */
    const ote_stream_config_t stream = {.conns = 1, .max_msg = cfg->max_msg};
    ote_stream_iface_t *t = &iface->stream;
    ote_status_t status;

    status          = ote_stream_iface_init(t, res, params, &stream, hooks);
    t->super.ops    = ops;
    t->super.ep_ops = &ote_stream_ep_ops; /* by reference: hooks->ref_handle is set */
    if (status != OTE_OK)
        return status;
    iface->par = ote_par_create(cfg->copy_threads, "ote-copy");
    if (iface->par == NULL)
        return OTE_ERR_NO_MEMORY;
    status = local_listen(iface);
    if (status == OTE_OK)
        status = ote_stream_iface_epoll_init(t);
    return status;
}

ote_status_t ote_stream_local_iface_open(void *opts, size_t size, const ote_tl_resource_t *res,
                                         const ote_tl_iface_params_t *params,
                                         const ote_stream_hooks_t *hooks,
                                         const ote_tl_iface_ops_t *ops,
                                         ote_stream_local_iface_t **iface_p)
{
    const ote_config_table_t *table = res->component->ops->config_table;
    local_iface_t *iface;
    ote_status_t status;

    status = ote_config_fill(table, opts);
    if (status != OTE_OK)
        return status;
    iface = calloc(1, size);
    if (iface == NULL) {
        ote_config_release(table, opts);
        return OTE_ERR_NO_MEMORY;
    }
    status = ote_stream_local_iface_setup(iface, res, params, opts, hooks, ops);
    ote_config_release(table, opts);
    if (status != OTE_OK) {
        ops->close(&iface->stream.super);
        return status;
    }
    *iface_p = iface;
    return OTE_OK;
}

/* The kernel must let a process read its own memory this way, or cma is not offered. */
bool ote_stream_local_available(void)
{
    uint64_t src = 0x636d61, dst = 0;
    struct iovec l = {.iov_base = &dst, .iov_len = sizeof(dst)};
    struct iovec r = {.iov_base = &src, .iov_len = sizeof(src)};

    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != (ssize_t)sizeof(dst) || dst != src) {
        ote_debug("cma: process_vm_readv unavailable: %s", strerror(errno));
        return false;
    }
    return true;
}

ote_status_t ote_stream_local_query_resources(ote_tl_component_t *comp,
                                              const ote_tl_iface_params_t *params,
                                              ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_tl_resource_t *r;

    if (!ote_stream_local_available()) {
        *res_p   = NULL;
        *count_p = 0;
        return OTE_OK;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(r->tl_name, sizeof(r->tl_name), "%s", comp->ops->name);
    snprintf(r->dev_name, sizeof(r->dev_name), "memory");
    r->is_network = false;
    r->component  = comp;
    *res_p        = r;
    *count_p      = 1;
    return OTE_OK;
}
