/*
 * Pooled streams and events. A copy takes a stream of its device round
 * robin and an event from a free list; progress queries the events of the
 * copies in flight and ends those that completed. Streams are non-blocking
 * (they do not serialise with the legacy default stream), so copies of
 * different slices overlap.
 */
#include "cuda_int.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COPIER_DESTROY_WAIT_NS (10ull * 1000 * 1000 * 1000)

typedef struct copy_op {
    ote_cuda_event_t    event;
    ote_cuda_copy_cb_t  cb;
    void               *arg;
    bool                failed;
    struct copy_op     *next;
} copy_op_t;

struct ote_cuda_copier {
    unsigned           streams_per_dev;
    ote_cuda_stream_t *streams[OTE_CUDA_MAX_DEVICES]; /* NULL until first use */
    unsigned           next[OTE_CUDA_MAX_DEVICES];
    copy_op_t         *pending, *pending_tail;
    size_t             num_pending;
    copy_op_t         *free_ops;
};

int ote_cuda_location_device(const char *location)
{
    char *end;
    long v;

    if (location == NULL || strncmp(location, "cuda:", 5) != 0)
        return -1;
    v = strtol(location + 5, &end, 10);
    if (end == location + 5 || *end != '\0' || v < 0 || v >= OTE_CUDA_MAX_DEVICES)
        return -1;
    return (int)v;
}

ote_status_t ote_cuda_copier_create(unsigned streams_per_device, ote_cuda_copier_t **c_p)
{
    ote_cuda_copier_t *c;

    if (ote_cuda_api() == NULL)
        return OTE_ERR_UNSUPPORTED;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return OTE_ERR_NO_MEMORY;
    c->streams_per_dev = streams_per_device ? streams_per_device : 1;
    *c_p               = c;
    return OTE_OK;
}

static ote_status_t streams_get(ote_cuda_copier_t *c, int dev, ote_cuda_stream_t *stream_p)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ote_cuda_stream_t *s;
    ote_cuda_err_t err;

    if (dev < 0)
        dev = 0;
    if (dev >= ote_cuda_device_count())
        return OTE_ERR_INVALID_PARAM;
    if (c->streams[dev] == NULL) {
        s = calloc(c->streams_per_dev, sizeof(*s));
        if (s == NULL)
            return OTE_ERR_NO_MEMORY;
        err = a->set_device(dev);
        for (unsigned i = 0; i < c->streams_per_dev && err == OTE_CUDA_SUCCESS; i++)
            err = a->stream_create(&s[i], OTE_CUDA_STREAM_NON_BLOCKING);
        if (err != OTE_CUDA_SUCCESS) {
            ote_error("cuda:%d: creating streams: %s", dev, ote_cuda_strerror(err));
            for (unsigned i = 0; i < c->streams_per_dev; i++) {
                if (s[i] != NULL)
                    a->stream_destroy(s[i]);
            }
            free(s);
            return OTE_ERR_IO;
        }
        c->streams[dev] = s;
    } else if ((err = a->set_device(dev)) != OTE_CUDA_SUCCESS) {
        return OTE_ERR_IO;
    }
    *stream_p = c->streams[dev][c->next[dev]++ % c->streams_per_dev];
    return OTE_OK;
}

static copy_op_t *op_get(ote_cuda_copier_t *c)
{
    copy_op_t *op = c->free_ops;

    if (op != NULL) {
        c->free_ops = op->next;
        return op;
    }
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return NULL;
    if (ote_cuda_api()->event_create(&op->event, OTE_CUDA_EVENT_DISABLE_TIMING) !=
        OTE_CUDA_SUCCESS) {
        free(op);
        return NULL;
    }
    return op;
}

static void op_put(ote_cuda_copier_t *c, copy_op_t *op)
{
    op->next    = c->free_ops;
    c->free_ops = op;
}

ote_status_t ote_cuda_copier_post(ote_cuda_copier_t *c, int dev, void *dst, const void *src,
                                  size_t n, ote_cuda_copy_cb_t cb, void *arg)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ote_cuda_stream_t stream;
    ote_cuda_err_t err;
    copy_op_t *op;
    ote_status_t status;

    status = streams_get(c, dev, &stream);
    if (status != OTE_OK)
        return status;
    op = op_get(c);
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    err = a->memcpy_async(dst, src, n, OTE_CUDA_MEMCPY_DEFAULT, stream);
    if (err == OTE_CUDA_SUCCESS)
        err = a->event_record(op->event, stream);
    if (err != OTE_CUDA_SUCCESS) {
        a->get_last_error();
        ote_error("cuda:%d: copy of %zu bytes %p -> %p: %s", dev < 0 ? 0 : dev, n, src, dst,
                  ote_cuda_strerror(err));
        op_put(c, op);
        return err == OTE_CUDA_ERR_INVALID_VALUE ? OTE_ERR_INVALID_PARAM : OTE_ERR_IO;
    }
    op->cb   = cb;
    op->arg  = arg;
    OTE_QUEUE_PUSH(c->pending, c->pending_tail, op, next);
    c->num_pending++;
    return OTE_OK;
}

unsigned ote_cuda_copier_progress(ote_cuda_copier_t *c)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    copy_op_t **pp = &c->pending, *prev = NULL;
    copy_op_t *done = NULL, **done_tail = &done;
    unsigned n = 0;

    /* Unlink the completed ones first: callbacks may post new copies. */
    while (*pp != NULL) {
        copy_op_t *op      = *pp;
        ote_cuda_err_t err = a->event_query(op->event);

        if (err == OTE_CUDA_ERR_NOT_READY) {
            prev = op;
            pp   = &op->next;
            continue;
        }
        *pp = op->next;
        if (c->pending_tail == op)
            c->pending_tail = prev;
        c->num_pending--;
        op->failed = err != OTE_CUDA_SUCCESS;
        if (op->failed) {
            a->get_last_error();
            ote_error("cuda copy failed: %s", ote_cuda_strerror(err));
        }
        op->next   = NULL;
        *done_tail = op;
        done_tail  = &op->next;
    }
    while (done != NULL) {
        copy_op_t *op         = done;
        ote_cuda_copy_cb_t cb = op->cb;
        void *arg             = op->arg;
        bool failed           = op->failed;

        done = op->next;
        op_put(c, op);
        cb(arg, failed ? OTE_ERR_IO : OTE_OK);
        n++;
    }
    return n;
}

size_t ote_cuda_copier_pending(const ote_cuda_copier_t *c)
{
    return c->num_pending;
}

void ote_cuda_copier_destroy(ote_cuda_copier_t *c)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    uint64_t deadline       = ote_time_ns() + COPIER_DESTROY_WAIT_NS;

    if (c == NULL)
        return;
    while (c->num_pending > 0 && ote_time_ns() < deadline) {
        struct timespec ts = {.tv_nsec = 100 * 1000};

        if (ote_cuda_copier_progress(c) == 0)
            nanosleep(&ts, NULL);
    }
    while (c->pending != NULL) {
        copy_op_t *op = c->pending;

        c->pending = op->next;
        ote_warn("cuda copy still running after %llu s at close",
                 (unsigned long long)(COPIER_DESTROY_WAIT_NS / 1000000000ull));
        op->cb(op->arg, OTE_ERR_TIMEOUT);
        op_put(c, op);
    }
    while (c->free_ops != NULL) {
        copy_op_t *op = c->free_ops;

        c->free_ops = op->next;
        a->event_destroy(op->event);
        free(op);
    }
    for (int d = 0; d < OTE_CUDA_MAX_DEVICES; d++) {
        if (c->streams[d] == NULL)
            continue;
        for (unsigned i = 0; i < c->streams_per_dev; i++)
            a->stream_destroy(c->streams[d][i]);
        free(c->streams[d]);
    }
    free(c);
}

/* ---- cuda base (see cuda_copier.h) -------------------------------------------- */

ote_status_t ote_cuda_ep_put_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return ((ote_cuda_ep_t *)ep)->post(ep, true, local, length, local_region, remote_addr, rkey,
                                       rkey_len, comp);
}

ote_status_t ote_cuda_ep_get_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                   ote_region_t *local_region, uint64_t remote_addr,
                                   const void *rkey, size_t rkey_len, ote_tl_completion_t *comp)
{
    return ((ote_cuda_ep_t *)ep)->post(ep, false, local, length, local_region, remote_addr, rkey,
                                       rkey_len, comp);
}

bool ote_cuda_ep_is_alive(ote_tl_ep_t *ep)
{
    (void)ep;
    return true;
}

ote_status_t ote_cuda_ep_create(ote_tl_iface_t *iface, size_t size, ote_cuda_post_cb_t post,
                                ote_tl_ep_t **ep_p)
{
    ote_cuda_ep_t *ep = calloc(1, size);

    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->super.iface = iface;
    ep->post        = post;
    *ep_p           = &ep->super;
    return OTE_OK;
}

ote_status_t ote_cuda_iface_open(size_t size, unsigned streams, const ote_tl_iface_ops_t *ops,
                                 const ote_tl_ep_ops_t *ep_ops, const ote_tl_resource_t *res,
                                 ote_md_t *md, const ote_tl_iface_params_t *params,
                                 ote_tl_iface_t **iface_p)
{
    ote_cuda_iface_t *iface = calloc(1, size);
    ote_status_t status;

    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    status = ote_cuda_copier_create(streams, &iface->copier);
    if (status != OTE_OK) {
        free(iface);
        return status;
    }
    iface->super.ops      = ops;
    iface->super.ep_ops   = ep_ops;
    iface->super.resource = *res;
    iface->super.md       = md;
    iface->super.md_index = -1;
    iface->regions        = params->regions;
    iface->instance_id    = params->instance_id;
    *iface_p              = &iface->super;
    return OTE_OK;
}

void ote_cuda_iface_close(ote_tl_iface_t *tl_iface)
{
    ote_cuda_iface_t *iface = (ote_cuda_iface_t *)tl_iface;

    ote_cuda_copier_destroy(iface->copier);
    free(iface);
}

int ote_cuda_iface_event_fd(ote_tl_iface_t *iface)
{
    (void)iface;
    return -1;
}

unsigned ote_cuda_iface_progress(ote_tl_iface_t *iface)
{
    return ote_cuda_copier_progress(((ote_cuda_iface_t *)iface)->copier);
}

ote_status_t ote_cuda_iface_event_arm(ote_tl_iface_t *iface)
{
    return ote_cuda_copier_pending(((ote_cuda_iface_t *)iface)->copier) ? OTE_ERR_BUSY : OTE_OK;
}

size_t ote_cuda_ep_inflight_bytes(ote_tl_ep_t *ep)
{
    return ((ote_cuda_iface_t *)ep->iface)->inflight_bytes;
}

/* A transport's copy in flight: what its end needs. */
typedef struct {
    ote_cuda_iface_t    *iface;
    size_t               length;
    ote_tl_completion_t *comp;
    void               (*release)(void *hold);
    void                *hold;
} iface_copy_t;

static void iface_copy_done(void *arg, ote_status_t status)
{
    iface_copy_t *op = arg;

    op->release(op->hold);
    op->iface->inflight_bytes -= op->length;
    op->comp->func(op->comp, status);
    free(op);
}

ote_status_t ote_cuda_iface_copy(ote_cuda_iface_t *iface, bool write, int dev, void *local,
                                 void *remote, size_t length, ote_tl_completion_t *comp,
                                 void (*release)(void *hold), void *hold)
{
    iface_copy_t *op = malloc(sizeof(*op));
    ote_status_t status;

    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    *op    = (iface_copy_t){.iface = iface, .length = length, .comp = comp, .release = release,
                            .hold = hold};
    status = write ? ote_cuda_copier_post(iface->copier, dev, remote, local, length,
                                          iface_copy_done, op)
                   : ote_cuda_copier_post(iface->copier, dev, local, remote, length,
                                          iface_copy_done, op);
    if (status != OTE_OK) {
        free(op);
        return status;
    }
    iface->inflight_bytes += length;
    return OTE_OK;
}

ote_status_t ote_cuda_query_resources(ote_tl_component_t *comp, const char *tl_name,
                                      ote_tl_resource_t **res_p, size_t *count_p)
{
    ote_tl_resource_t *res;

    if (ote_cuda_load() != OTE_OK)
        return OTE_ERR_UNSUPPORTED;
    res = calloc(1, sizeof(*res));
    if (res == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(res->tl_name, sizeof(res->tl_name), "%s", tl_name);
    /* One resource for every visible device: streams are per device inside. */
    snprintf(res->dev_name, sizeof(res->dev_name), "cuda");
    res->component = comp;
    *res_p         = res;
    *count_p       = 1;
    return OTE_OK;
}

const char *ote_cuda_unavailable(ote_tl_component_t *comp)
{
    (void)comp;
    return ote_cuda_api_source();
}

void ote_cuda_iface_caps(ote_tl_caps_t *caps, unsigned extra_ops, unsigned mem_remote,
                         unsigned scope, size_t slice_size, double bandwidth)
{
    memset(caps, 0, sizeof(*caps));
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | extra_ops;
    caps->mem_local  = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA;
    caps->mem_remote = mem_remote;
    caps->scope      = scope;
    caps->max_iov    = 1;
    caps->slice_size = slice_size;
    caps->bandwidth  = bandwidth;
    caps->latency    = 10e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}
