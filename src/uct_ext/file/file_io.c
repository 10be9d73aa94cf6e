/*
 * Reads and writes of file segments on a worker's io_uring ring.
 *
 * Each request of an operation picks how it moves bytes from where the
 * operation stands: O_DIRECT into the caller's memory when the file
 * offset, the length and the memory are aligned as the file system asks;
 * otherwise a READ goes through an aligned bounce buffer (the aligned range
 * around it is read with O_DIRECT and the wanted part copied out), and so
 * does a WRITE whose offset and length are aligned; a WRITE of a partial
 * block goes through the page cache, which merges it with the rest of the
 * block under the kernel's locks (a read-modify-write here would race
 * other writers of that block). Without O_DIRECT every request is
 * buffered. Short reads and writes are continued; a READ that gets no
 * byte has met the end of the file.
 */
#include "file_int.h"

#include "base/config.h"
#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool aligned(uint64_t v, size_t a)
{
    return a <= 1 || v % a == 0;
}

static void op_unlink(file_iface_t *iface, file_op_t *op)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        iface->ops_head = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        iface->ops_tail = op->prev;
}

static void bounce_release(file_iface_t *iface, file_op_t *op)
{
    if (op->bounce >= 0)
        iface->bounce_free |= 1u << op->bounce;
    op->bounce = -1;
}

/* The operation ends: its completion is called, once. */
static void op_finish(file_iface_t *iface, file_op_t *op, ote_status_t status)
{
    file_ep_t *ep              = op->ep;
    ote_tl_completion_t *comp = op->comp;

    bounce_release(iface, op);
    if (op->queued)
        iface->queued--;
    op_unlink(iface, op);
    ep->ops--;
    ep->bytes -= op->length;
    if (status != OTE_OK)
        ote_debug("file segment '%s': %s of %zu bytes at %llu ended after %zu bytes: %s",
                  ep->file->path, op->write ? "WRITE" : "READ", op->length,
                  (unsigned long long)op->offset, op->done, ote_status_string(status));
    comp->transferred = op->done;
    /* Kept for the next operation: no allocation per request. */
    op->next        = iface->free_ops;
    iface->free_ops = op;
    comp->func(comp, status);
}

void ote_file_op_finish(file_iface_t *iface, file_op_t *op, ote_status_t status)
{
    op_finish(iface, op, status);
}

/* Bounce buffers, allocated and registered with the ring when first needed. */
static bool bounce_get(file_iface_t *iface, file_op_t *op, size_t align)
{
    if (iface->bounce_mem == NULL) {
        size_t a = align > 4096 ? align : 4096;
        struct iovec iov[OTE_FILE_BOUNCE_COUNT];
        void *mem;
        int rc;

        if (posix_memalign(&mem, a, (size_t)OTE_FILE_BOUNCE_COUNT * OTE_FILE_BOUNCE_SIZE) != 0)
            return false;
        iface->bounce_mem  = mem;
        iface->bounce_size = OTE_FILE_BOUNCE_SIZE;
        iface->bounce_free = (1u << OTE_FILE_BOUNCE_COUNT) - 1;
        for (unsigned i = 0; i < OTE_FILE_BOUNCE_COUNT; i++) {
            iov[i].iov_base = iface->bounce_mem + (size_t)i * OTE_FILE_BOUNCE_SIZE;
            iov[i].iov_len  = OTE_FILE_BOUNCE_SIZE;
        }
        rc = io_uring_register_buffers(&iface->ring, iov, OTE_FILE_BOUNCE_COUNT);
        iface->bounce_fixed = rc == 0;
        if (rc != 0)
            ote_info("file: bounce buffers not registered with io_uring (%s): plain "
                     "reads and writes", strerror(-rc));
    }
    if (iface->bounce_free == 0)
        return false;
    op->bounce = __builtin_ctz(iface->bounce_free);
    iface->bounce_free &= ~(1u << op->bounce);
    return true;
}

static file_mode_t op_mode(const file_op_t *op)
{
    const ote_file_t *f = op->ep->file;
    uint64_t pos        = op->offset + op->done;
    size_t rem          = op->length - op->done;
    bool off_ok, mem_ok;

    if (f->direct_fd < 0)
        return FILE_MODE_BUFFERED;
    off_ok = aligned(pos, f->off_align) && aligned(rem, f->off_align);
    mem_ok = aligned((uintptr_t)(op->local + op->done), f->mem_align);
    if (off_ok && mem_ok)
        return FILE_MODE_DIRECT;
    if (!op->write)
        return FILE_MODE_BOUNCE;
    return off_ok ? FILE_MODE_BOUNCE : FILE_MODE_BUFFERED;
}

/* One slot of the ring's file table for fd, or -1. */
static int fixed_take(file_iface_t *iface, int fd)
{
    int slot;

    if (!iface->fixed_ok || fd < 0 || iface->fixed_used == UINT64_MAX)
        return -1;
    slot = __builtin_ctzll(~iface->fixed_used);
    if (io_uring_register_files_update(&iface->ring, (unsigned)slot, &fd, 1) != 1)
        return -1;
    iface->fixed_used |= 1ull << slot;
    return slot;
}

static void fixed_give(file_iface_t *iface, int *slot)
{
    int none = -1;

    if (*slot < 0)
        return;
    (void)io_uring_register_files_update(&iface->ring, (unsigned)*slot, &none, 1);
    iface->fixed_used &= ~(1ull << *slot);
    *slot = -1;
}

/* The ep's fds in the ring's file table, on its first operation: no file lookup per request. */
static void ep_fix(file_iface_t *iface, file_ep_t *ep)
{
    ep->fixed_tried  = true;
    ep->fixed_fd     = fixed_take(iface, ep->file->fd);
    ep->fixed_direct = fixed_take(iface, ep->file->direct_fd);
}

void ote_file_ep_unfix(file_ep_t *ep)
{
    file_iface_t *iface = (file_iface_t *)ep->super.iface;

    fixed_give(iface, &ep->fixed_fd);
    fixed_give(iface, &ep->fixed_direct);
}

/* Point sqe at fd, through its fixed slot where it has one. */
static void sqe_fd(struct io_uring_sqe *sqe, const file_ep_t *ep, int fd)
{
    int slot = fd == ep->file->fd ? ep->fixed_fd : ep->fixed_direct;

    if (slot >= 0) {
        sqe->fd = slot;
        io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    }
}

/*
 * Put the next request of op in the ring. false when it must wait (no
 * room, no bounce buffer); then nothing changed.
 */
static bool op_start(file_iface_t *iface, file_op_t *op)
{
    const ote_file_t *f = op->ep->file;
    uint64_t pos        = op->offset + op->done;
    size_t rem          = op->length - op->done;
    struct io_uring_sqe *sqe;
    file_mode_t mode;

    if (iface->in_ring >= iface->qd || io_uring_sq_space_left(&iface->ring) == 0)
        return false;
    mode = op_mode(op);
    if (mode == FILE_MODE_BOUNCE && !bounce_get(iface, op, f->mem_align))
        return false;
    sqe      = io_uring_get_sqe(&iface->ring);
    op->mode = mode;
    op->skip = 0;
    if (mode == FILE_MODE_BOUNCE) {
        uint8_t *buf = iface->bounce_mem + (size_t)op->bounce * iface->bounce_size;
        uint64_t at  = pos - pos % f->off_align;
        size_t len;

        op->skip = (size_t)(pos - at);
        op->want = rem < iface->bounce_size - op->skip ? rem : iface->bounce_size - op->skip;
        len      = (op->skip + op->want + f->off_align - 1) / f->off_align * f->off_align;
        if (op->write) {
            memcpy(buf, op->local + op->done, op->want);
            if (iface->bounce_fixed)
                io_uring_prep_write_fixed(sqe, f->direct_fd, buf, (unsigned)len, at,
                                          op->bounce);
            else
                io_uring_prep_write(sqe, f->direct_fd, buf, (unsigned)len, at);
        } else if (iface->bounce_fixed) {
            io_uring_prep_read_fixed(sqe, f->direct_fd, buf, (unsigned)len, at, op->bounce);
        } else {
            io_uring_prep_read(sqe, f->direct_fd, buf, (unsigned)len, at);
        }
    } else {
        int fd = mode == FILE_MODE_DIRECT ? f->direct_fd : f->fd;
        size_t max = OTE_FILE_MAX_IO;

        if (mode == FILE_MODE_DIRECT)
            max -= max % f->off_align;
        op->want = rem < max ? rem : max;
        if (op->write)
            io_uring_prep_write(sqe, fd, op->local + op->done, (unsigned)op->want, pos);
        else
            io_uring_prep_read(sqe, fd, op->local + op->done, (unsigned)op->want, pos);
    }
    sqe_fd(sqe, op->ep, sqe->fd);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
    op->in_ring = true;
    iface->in_ring++;
    return true;
}

/* Start what waits, oldest first, while there is room; then submit. */
static void iface_start_queued(file_iface_t *iface)
{
    file_op_t *next;

    for (file_op_t *op = iface->ops_head; op != NULL && iface->queued > 0; op = next) {
        next = op->next;
        if (!op->queued)
            continue;
        if (op->comp->cancel != NULL && atomic_load(op->comp->cancel)) {
            /* Canceled before its next request: what it moved so far stays counted. */
            op_finish(iface, op, OTE_ERR_CANCELED);
            continue;
        }
        if (!op_start(iface, op)) {
            if (iface->in_ring >= iface->qd || io_uring_sq_space_left(&iface->ring) == 0)
                break;
            continue; /* waits for a bounce buffer; a direct one may go */
        }
        op->queued = false;
        iface->queued--;
    }
    if (io_uring_sq_ready(&iface->ring) > 0) {
        int rc = io_uring_submit(&iface->ring);

        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR)
            ote_warn("file: io_uring_submit: %s", strerror(-rc));
    }
}

static void op_queue(file_iface_t *iface, file_op_t *op)
{
    op->queued = true;
    iface->queued++;
}

/* A request of op came back with res. */
static void op_complete(file_iface_t *iface, file_op_t *op, int res)
{
    size_t got;

    op->in_ring = false;
    iface->in_ring--;
    if (res < 0) {
        bounce_release(iface, op);
        if (op->timed_out && (res == -ECANCELED || res == -EINTR)) {
            op_finish(iface, op, OTE_ERR_TIMEOUT);
        } else if (op->ep->destroying && (res == -ECANCELED || res == -EINTR)) {
            op_finish(iface, op, OTE_ERR_CANCELED);
        } else if (res == -EAGAIN || res == -EINTR) {
            op_queue(iface, op); /* the same request again */
        } else {
            ote_debug("file segment '%s': %s at %llu: %s", op->ep->file->path,
                      op->write ? "write" : "read",
                      (unsigned long long)(op->offset + op->done), strerror(-res));
            op_finish(iface, op, ote_status_from_io_errno(-res));
        }
        return;
    }
    if (op->mode == FILE_MODE_BOUNCE && !op->write) {
        size_t avail = (size_t)res > op->skip ? (size_t)res - op->skip : 0;

        got = avail < op->want ? avail : op->want;
        memcpy(op->local + op->done,
               iface->bounce_mem + (size_t)op->bounce * iface->bounce_size + op->skip, got);
    } else if (op->mode == FILE_MODE_BOUNCE) {
        /* A short write of an aligned range: what of op's bytes it wrote. */
        got = (size_t)res < op->want ? (size_t)res : op->want;
    } else {
        got = (size_t)res;
    }
    bounce_release(iface, op);
    op->done += got;
    if (got == 0) {
        /* A READ that gets nothing is at the end of the file. */
        op_finish(iface, op, op->write ? OTE_ERR_IO : OTE_ERR_OUT_OF_BOUNDS);
        return;
    }
    if (op->done == op->length)
        op_finish(iface, op, OTE_OK);
    else if (op->timed_out)
        op_finish(iface, op, OTE_ERR_TIMEOUT);
    else if (op->ep->destroying)
        op_finish(iface, op, OTE_ERR_CANCELED);
    else
        op_queue(iface, op); /* continued where it stopped */
}

/* Handle the completions in the ring; how many. */
static unsigned iface_reap(file_iface_t *iface)
{
    struct io_uring_cqe *cqe;
    unsigned n = 0;

    while (io_uring_peek_cqe(&iface->ring, &cqe) == 0) {
        uint64_t data = io_uring_cqe_get_data64(cqe);
        int res       = cqe->res;

        io_uring_cqe_seen(&iface->ring, cqe);
        n++;
        if (data != OTE_FILE_CANCEL_TAG)
            op_complete(iface, (file_op_t *)(uintptr_t)data, res);
    }
    return n;
}

ote_status_t ote_file_op_post(file_ep_t *ep, bool write, void *local, size_t length,
                              uint64_t offset, bool gpu, void *gds_memh,
                              ote_tl_completion_t *comp)
{
    file_iface_t *iface = (file_iface_t *)ep->super.iface;
    ote_file_t *f       = ep->file;
    file_op_t *op;

    if (length == 0)
        return OTE_OK;
    if (!ep->fixed_tried)
        ep_fix(iface, ep);
    if (write && !f->writable) {
        ote_debug("file segment '%s': WRITE refused: opened read-only", f->path);
        return OTE_ERR_ACCESS;
    }
    if (write) {
        uint64_t size = atomic_load(&f->size);

        if (offset > size || size - offset < length) {
            ote_debug("file segment '%s': WRITE of %zu bytes at %llu past the end of the "
                      "region (%llu bytes)", f->path, length, (unsigned long long)offset,
                      (unsigned long long)size);
            return OTE_ERR_OUT_OF_BOUNDS;
        }
    }
    if (gpu && !f->gds) {
        /* Its rails stage GPU memory: a direct request here is a planning error. */
        ote_debug("file segment '%s': GPU memory, and cuFile does not serve this file", f->path);
        return OTE_ERR_UNSUPPORTED;
    }
    if (!gpu && f->direct == OTE_TERNARY_YES &&
        !(aligned(offset, f->off_align) && aligned(length, f->off_align) &&
          aligned((uintptr_t)local, f->mem_align))) {
        ote_debug("file segment '%s': OTE_FILE_DIRECT=y and %s of %zu bytes at %llu from %p "
                  "is not aligned (offset and length to %zu, memory to %zu)", f->path,
                  write ? "WRITE" : "READ", length, (unsigned long long)offset, local,
                  f->off_align, f->mem_align);
        return OTE_ERR_INVALID_PARAM;
    }
    op = iface->free_ops;
    if (op != NULL)
        iface->free_ops = op->next;
    else if ((op = malloc(sizeof(*op))) == NULL)
        return OTE_ERR_NO_MEMORY;
    *op = (file_op_t){.comp = comp, .ep = ep, .write = write, .local = local, .offset = offset,
                      .length = length, .bounce = -1, .start_ns = ote_time_ns()};
    OTE_DLIST2_PUSH_BACK(iface->ops_head, iface->ops_tail, op, prev, next);
    ep->ops++;
    ep->bytes += length;
    comp->transferred = 0;
    if (gpu) {
        ote_status_t status;

        op->gds_buf = gds_memh;
        status      = ote_file_gds_start(iface, op);
        if (status != OTE_INPROGRESS) {
            op_unlink(iface, op);
            ep->ops--;
            ep->bytes -= length;
            op->next        = iface->free_ops;
            iface->free_ops = op;
        }
        return status;
    }
    op_queue(iface, op);
    iface_start_queued(iface);
    return OTE_INPROGRESS;
}

unsigned ote_file_iface_progress(ote_tl_iface_t *tl_iface)
{
    file_iface_t *iface = (file_iface_t *)tl_iface;
    unsigned n = 0;

    /*
     * A thread polls the ring now: completions need not wake anyone until
     * the next event_arm, so the kernel stops signalling the event fd (a
     * flag in the ring's memory, no system call), and a thread asleep on
     * it (the worker, while a caller in ote_batch_wait polls) sleeps on.
     * The ring's memory says whether completions wait: a poll that finds
     * none makes no system call.
     */
    (void)io_uring_cq_eventfd_toggle(&iface->ring, false);
    if (io_uring_cq_ready(&iface->ring) > 0)
        n = iface_reap(iface);
    n += ote_file_gds_reap(iface);
    if (iface->queued > 0 || io_uring_sq_ready(&iface->ring) > 0)
        iface_start_queued(iface);
    return n;
}

ote_status_t ote_file_iface_event_arm(ote_tl_iface_t *tl_iface)
{
    file_iface_t *iface = (file_iface_t *)tl_iface;
    uint64_t v;

    /*
     * Before a sleep: completions signal the event fd again, the fd is
     * cleared, then the ring looked at again, so a completion after this
     * read raises the fd. (Should one race the flag so closely that both
     * miss it, a sleep with operations in flight ends within the worker's
     * timeout check, 100 ms.)
     */
    (void)io_uring_cq_eventfd_toggle(&iface->ring, true);
    (void)!read(iface->efd, &v, sizeof(v));
    /* Requests not submitted, or one that could start now: no event would come. */
    if (io_uring_sq_ready(&iface->ring) > 0 || io_uring_cq_ready(&iface->ring) > 0)
        return OTE_ERR_BUSY;
    if (iface->gds.started && atomic_load(&iface->gds.ndone) > 0)
        return OTE_ERR_BUSY;
    if (iface->queued > 0 && iface->in_ring == 0)
        return OTE_ERR_BUSY;
    return OTE_OK;
}

/* Ask the kernel to cancel op's request (its completion then says how it ended). */
static void op_cancel(file_iface_t *iface, file_op_t *op)
{
    struct io_uring_sqe *sqe;

    if (op->cancel_sent || (sqe = io_uring_get_sqe(&iface->ring)) == NULL)
        return;
    io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op, 0);
    io_uring_sqe_set_data64(sqe, OTE_FILE_CANCEL_TAG);
    op->cancel_sent = true;
}

void ote_file_iface_check_timeouts(ote_tl_iface_t *tl_iface, uint64_t deadline_ns)
{
    file_iface_t *iface = (file_iface_t *)tl_iface;
    file_op_t *op, *next;

    for (op = iface->ops_head; op != NULL && op->start_ns < deadline_ns; op = next) {
        next = op->next;
        if (op->timed_out)
            continue;
        op->timed_out = true;
        if (op->in_ring)
            op_cancel(iface, op);
        else if (op->in_gds)
            ote_file_gds_skip(iface, op); /* a cuFile call running cannot be stopped */
        else
            op_finish(iface, op, OTE_ERR_TIMEOUT);
    }
    if (io_uring_sq_ready(&iface->ring) > 0)
        (void)io_uring_submit(&iface->ring);
}

void ote_file_iface_drain(file_iface_t *iface, file_ep_t *ep)
{
    file_op_t *op, *next;
    bool others = false;

    for (op = iface->ops_head; op != NULL; op = op->next) {
        if (ep == NULL || op->ep == ep)
            op->ep->destroying = true;
    }
    for (;;) {
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = OTE_FILE_DRAIN_MS * 1000000L};
        struct io_uring_cqe *cqe;
        bool left = false, gds_left = false;

        /*
         * Out of the ring: ends now; in it: asked to cancel, and waited for;
         * on the cuFile thread: returned unstarted, or waited for.
         */
        for (op = iface->ops_head; op != NULL; op = next) {
            next = op->next;
            if (ep != NULL && op->ep != ep)
                continue;
            if (op->in_gds) {
                gds_left = true;
                ote_file_gds_skip(iface, op);
                continue;
            }
            if (!op->in_ring) {
                op_finish(iface, op, OTE_ERR_CANCELED);
                continue;
            }
            left = true;
            op_cancel(iface, op);
        }
        if (!left && !gds_left)
            break;
        if (io_uring_sq_ready(&iface->ring) > 0)
            (void)io_uring_submit(&iface->ring);
        if (left)
            (void)io_uring_wait_cqe_timeout(&iface->ring, &cqe, &ts);
        else
            usleep(1000);
        iface_reap(iface);
        ote_file_gds_reap(iface);
    }
    /* Other eps' operations continued meanwhile wait for the next progress. */
    for (op = iface->ops_head; op != NULL; op = op->next)
        others |= op->queued;
    if (others) {
        uint64_t one = 1;

        (void)!write(iface->efd, &one, sizeof(one));
    }
}
