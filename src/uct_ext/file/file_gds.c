/*
 * GPUDirect Storage on file segments: GPU memory moves to and from a file
 * with cuFileRead/cuFileWrite where cuFile loads (base/cufile_api.h), its
 * driver opens and the file takes O_DIRECT (cuFile's handle is registered
 * on the O_DIRECT fd). Elsewhere the segment's GPU traffic goes through the
 * staging rails (pinned host chunks), which core builds in front of the
 * file rails.
 *
 * The file component's md registers GPU regions with cuFileBufRegister,
 * per region over exactly its range and for its life (hence
 * OTE_MD_FLAG_GRANTS_ACCESS: never shared through the registration cache,
 * which may widen and outlive a range). cuFile calls block, so each iface
 * runs them on a thread of its own, one operation at a time, oldest first;
 * the thread hands them back through the iface's event fd, as the ring
 * does, and the worker ends them in progress.
 */
#include "file_int.h"

#include "base/cuda_api.h"
#include "base/dlist.h"
#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ote_status_t ote_file_gds_load(const ote_file_config_t *cfg, const char **why_p)
{
    static _Thread_local char why[400];

    if (cfg->gds == OTE_TERNARY_NO) {
        *why_p = "staged through pinned host chunks: OTE_FILE_GDS=n";
        return OTE_ERR_UNSUPPORTED;
    }
    if (ote_cuda_api() == NULL) {
        snprintf(why, sizeof(why), "no GPU memory to move: CUDA unavailable (%s)",
                 ote_cuda_api_source());
        *why_p = why;
        return OTE_ERR_UNSUPPORTED;
    }
    if (ote_cufile_api_load(cfg->cufile_lib) != OTE_OK) {
        snprintf(why, sizeof(why), "%s: %s",
                 cfg->gds == OTE_TERNARY_YES ? "refused (OTE_FILE_GDS=y: file segments do not "
                                               "open)"
                                             : "staged through pinned host chunks",
                 ote_cufile_api_source());
        *why_p = why;
        return OTE_ERR_UNSUPPORTED;
    }
    snprintf(why, sizeof(why), "direct with cuFile (GPUDirect Storage, %s) where the file "
             "takes O_DIRECT, else staged", ote_cufile_api_source());
    *why_p = why;
    return OTE_OK;
}

ote_status_t ote_file_gds_attach(ote_file_t *f, const ote_file_config_t *cfg, bool *direct_p)
{
    const ote_cufile_api_t *api;
    ote_cufile_descr_t descr;
    ote_cufile_err_t err;
    const char *why;
    char msg[64];

    if (ote_file_gds_load(cfg, &why) != OTE_OK) {
        if (cfg->gds == OTE_TERNARY_YES) {
            ote_error("file segment '%s': OTE_FILE_GDS=y, but cuFile cannot move GPU memory "
                      "here: %s", f->path,
                      ote_cuda_api() == NULL ? "CUDA unavailable" : ote_cufile_api_source());
            return OTE_ERR_UNSUPPORTED;
        }
        *direct_p = false;
        return OTE_OK;
    }
    if (f->direct_fd < 0) {
        if (cfg->gds == OTE_TERNARY_YES) {
            ote_error("file segment '%s': OTE_FILE_GDS=y, but cuFile needs O_DIRECT, which "
                      "this file does not take here (OTE_FILE_DIRECT, the file system)",
                      f->path);
            return OTE_ERR_UNSUPPORTED;
        }
        ote_debug("file segment '%s': no O_DIRECT: GPU memory staged", f->path);
        *direct_p = false;
        return OTE_OK;
    }
    api = ote_cufile_api();
    memset(&descr, 0, sizeof(descr));
    descr.type      = OTE_CUFILE_HANDLE_TYPE_OPAQUE_FD;
    descr.handle.fd = f->direct_fd;
    err             = api->handle_register(&f->gds_handle, &descr);
    if (err.err != 0) {
        ote_cufile_strerror(err, msg, sizeof(msg));
        if (cfg->gds == OTE_TERNARY_YES) {
            ote_error("file segment '%s': OTE_FILE_GDS=y, but cuFileHandleRegister failed: %s",
                      f->path, msg);
            return OTE_ERR_UNSUPPORTED;
        }
        ote_info("file segment '%s': cuFileHandleRegister: %s: GPU memory staged", f->path, msg);
        *direct_p = false;
        return OTE_OK;
    }
    f->gds    = true;
    *direct_p = true;
    ote_debug("file segment '%s': GPU memory direct with cuFile", f->path);
    return OTE_OK;
}

void ote_file_gds_detach(ote_file_t *f)
{
    if (f->gds)
        ote_cufile_api()->handle_deregister(f->gds_handle);
    f->gds = false;
}

static ote_status_t gds_mem_reg(ote_md_t *md, void *addr, size_t length, unsigned access,
                                void **memh_p)
{
    file_gds_buf_t *b = calloc(1, sizeof(*b));
    ote_cufile_err_t err;
    char msg[64];

    if (b == NULL)
        return OTE_ERR_NO_MEMORY;
    b->base   = addr;
    b->length = length;
    err       = ote_cufile_api()->buf_register(addr, length, 0);
    /* Not fatal: cuFile moves unregistered GPU memory through its own buffers. */
    b->registered = err.err == 0;
    if (!b->registered)
        ote_debug("file: cuFileBufRegister(%p, %zu): %s", addr, length,
                  ote_cufile_strerror(err, msg, sizeof(msg)));
    *memh_p = b;
    return OTE_OK;
}

static void gds_mem_dereg(ote_md_t *md, void *memh)
{
    file_gds_buf_t *b = memh;

    if (b->registered)
        (void)ote_cufile_api()->buf_deregister(b->base);
    free(b);
}

const ote_md_ops_t ote_file_gds_md_ops = {
    .mem_reg   = gds_mem_reg,
    .mem_dereg = gds_mem_dereg,
    .rkey_pack = ote_md_unsupported_rkey_pack,
};

ote_status_t ote_file_gds_md_open(ote_md_t **md_p)
{
    ote_md_t *md = calloc(1, sizeof(*md));

    if (md == NULL)
        return OTE_ERR_NO_MEMORY;
    md->name      = "file:cufile";
    md->ops       = &ote_file_gds_md_ops;
    md->mem_types = OTE_MEM_TYPE_CUDA;
    /* Not GPUDirect RDMA: OTE_MEM_GPU_DIRECT neither needs nor drops it. */
    md->flags     = OTE_MD_FLAG_GRANTS_ACCESS | OTE_MD_FLAG_DEVICE_NATIVE;
    *md_p         = md;
    return OTE_OK;
}

void ote_file_gds_md_close(ote_md_t *md)
{
    free(md);
}

/* Move op's bytes with cuFile (on the thread); its status. */
static ote_status_t gds_io(file_op_t *op)
{
    const ote_cufile_api_t *api = ote_cufile_api();
    ote_file_t *f               = op->ep->file;
    uint8_t *base               = op->gds_buf ? op->gds_buf->base : op->local;
    off_t boff                  = (off_t)(op->local - base);
    int dev                     = -1;
    bool pinned;

    /* cuFile works in the current context: the device of the memory. */
    if (ote_cuda_ptr_query(op->local, &dev, &pinned) == OTE_OK && dev >= 0)
        (void)ote_cuda_api()->set_device(dev);
    while (op->done < op->length) {
        size_t want = op->length - op->done;
        ssize_t n;

        if (want > OTE_FILE_MAX_IO)
            want = OTE_FILE_MAX_IO;
        if (op->write)
            n = api->write(f->gds_handle, base, want, (off_t)(op->offset + op->done),
                           boff + (off_t)op->done);
        else
            n = api->read(f->gds_handle, base, want, (off_t)(op->offset + op->done),
                          boff + (off_t)op->done);
        if (n == 0)
            return op->write ? OTE_ERR_IO : OTE_ERR_OUT_OF_BOUNDS; /* end of the file */
        if (n < 0) {
            int err = n == -1 ? errno : 0;

            ote_debug("file segment '%s': cuFile%s at %llu: %s", f->path,
                      op->write ? "Write" : "Read", (unsigned long long)(op->offset + op->done),
                      err ? strerror(err) : "cuFile error");
            if (err == EACCES || err == EPERM || err == EROFS)
                return OTE_ERR_ACCESS;
            return OTE_ERR_IO;
        }
        op->done += (size_t)n;
    }
    return OTE_OK;
}

static void *gds_thread(void *arg)
{
    file_iface_t *iface = arg;
    file_gds_t *g       = &iface->gds;
    uint64_t one        = 1;

    pthread_mutex_lock(&g->lock);
    for (;;) {
        file_op_t *op;
        bool skip;

        while (g->queue_head == NULL && !g->stop)
            pthread_cond_wait(&g->cond, &g->lock);
        if (g->queue_head == NULL)
            break;
        op          = g->queue_head;
        g->queue_head = op->gds_next;
        if (g->queue_head == NULL)
            g->queue_tail = NULL;
        skip = op->gds_skip;
        pthread_mutex_unlock(&g->lock);
        op->gds_status = skip ? OTE_ERR_CANCELED : gds_io(op);
        pthread_mutex_lock(&g->lock);
        OTE_QUEUE_PUSH(g->done_head, g->done_tail, op, gds_next);
        atomic_fetch_add(&g->ndone, 1);
        (void)!write(iface->efd, &one, sizeof(one));
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

ote_status_t ote_file_gds_start(file_iface_t *iface, file_op_t *op)
{
    file_gds_t *g = &iface->gds;

    if (!g->started) {
        pthread_mutex_init(&g->lock, NULL);
        pthread_cond_init(&g->cond, NULL);
        atomic_init(&g->ndone, 0);
        if (pthread_create(&g->thread, NULL, gds_thread, iface) != 0) {
            pthread_cond_destroy(&g->cond);
            pthread_mutex_destroy(&g->lock);
            return OTE_ERR_NO_MEMORY;
        }
        g->started = true;
    }
    op->mode   = FILE_MODE_GDS;
    op->in_gds = true;
    g->held++;
    pthread_mutex_lock(&g->lock);
    OTE_QUEUE_PUSH(g->queue_head, g->queue_tail, op, gds_next);
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return OTE_INPROGRESS;
}

unsigned ote_file_gds_reap(file_iface_t *iface)
{
    file_gds_t *g = &iface->gds;
    file_op_t *op, *next;
    unsigned n = 0;

    if (!g->started || atomic_load_explicit(&g->ndone, memory_order_acquire) == 0)
        return 0;
    pthread_mutex_lock(&g->lock);
    op          = g->done_head;
    g->done_head = g->done_tail = NULL;
    atomic_store(&g->ndone, 0);
    pthread_mutex_unlock(&g->lock);
    for (; op != NULL; op = next) {
        ote_status_t status = op->gds_status;

        next       = op->gds_next;
        op->in_gds = false;
        g->held--;
        /* Returned unstarted or failed past its deadline: the deadline is what ended it. */
        if (status != OTE_OK && op->timed_out)
            status = OTE_ERR_TIMEOUT;
        ote_file_op_finish(iface, op, status);
        n++;
    }
    return n;
}

void ote_file_gds_skip(file_iface_t *iface, file_op_t *op)
{
    pthread_mutex_lock(&iface->gds.lock);
    op->gds_skip = true;
    pthread_mutex_unlock(&iface->gds.lock);
}

void ote_file_gds_stop(file_iface_t *iface)
{
    file_gds_t *g = &iface->gds;

    if (!g->started)
        return;
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    g->started = false;
}
