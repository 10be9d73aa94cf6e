/*
 * Test double of the cuFile entry points libote loads (src/base/
 * cufile_api.h). TEST ONLY: selected with OTE_CUFILE_LIB=<path of this .so>,
 * next to the CUDA double (whose device memory is host memory, so the
 * double moves bytes with pread/pwrite).
 *
 * - cuFileHandleRegister takes an O_DIRECT fd only, as cuFile does outside
 *   its compatibility mode; it reopens the file without O_DIRECT, so that
 *   requests of any alignment go through.
 * - cuFileRead/cuFileWrite on a registered buffer must stay inside it.
 * - ORBITTE_CUFILE_DOUBLE_OPEN_FAIL=1: cuFileDriverOpen fails.
 * - ORBITTE_CUFILE_DOUBLE_DELAY_MS=N: each cuFileRead/cuFileWrite first
 *   sleeps N ms (a slow or hung device).
 * - ote_cufile_double_stats() counts calls and live objects, so tests can
 *   tell which path moved the bytes and that nothing leaks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct {
    int err;
    int cu_err;
} CUfileError_t;

typedef struct {
    int type;
    union {
        int   fd;
        void *handle;
    } handle;
    const void *fs_ops;
} CUfileDescr_t;

typedef struct {
    long driver_opens, handles, bufs, buf_registers, reads, writes, bytes;
} ote_cufile_double_stats_t;

typedef struct dbl_handle {
    int fd;
} dbl_handle_t;

typedef struct dbl_buf {
    uintptr_t       base;
    size_t          size;
    struct dbl_buf *next;
} dbl_buf_t;

#define E_DRIVER_NOT_INITIALIZED 5001
#define E_INVALID_VALUE          5022
#define E_HANDLE_TYPE            5012

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ote_cufile_double_stats_t g_stats;
static dbl_buf_t *g_bufs;
static int g_open;

static CUfileError_t ok(void)
{
    return (CUfileError_t){0, 0};
}

static CUfileError_t fail(int err)
{
    return (CUfileError_t){err, 0};
}

CUfileError_t cuFileDriverOpen(void);
CUfileError_t cuFileDriverOpen(void)
{
    const char *f = getenv("ORBITTE_CUFILE_DOUBLE_OPEN_FAIL");

    if (f != NULL && strcmp(f, "1") == 0)
        return fail(E_DRIVER_NOT_INITIALIZED);
    pthread_mutex_lock(&g_lock);
    g_open = 1;
    g_stats.driver_opens++;
    pthread_mutex_unlock(&g_lock);
    return ok();
}

CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *descr);
CUfileError_t cuFileHandleRegister(void **fh, CUfileDescr_t *descr)
{
    char path[64];
    dbl_handle_t *h;
    int flags;

    if (!g_open)
        return fail(E_DRIVER_NOT_INITIALIZED);
    if (fh == NULL || descr == NULL || descr->type != 1)
        return fail(E_HANDLE_TYPE);
    flags = fcntl(descr->handle.fd, F_GETFL);
    if (flags < 0 || !(flags & O_DIRECT))
        return fail(E_INVALID_VALUE);
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return fail(E_INVALID_VALUE);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", descr->handle.fd);
    h->fd = open(path, (flags & O_ACCMODE) | O_CLOEXEC);
    if (h->fd < 0) {
        free(h);
        return fail(E_INVALID_VALUE);
    }
    pthread_mutex_lock(&g_lock);
    g_stats.handles++;
    pthread_mutex_unlock(&g_lock);
    *fh = h;
    return ok();
}

void cuFileHandleDeregister(void *fh);
void cuFileHandleDeregister(void *fh)
{
    dbl_handle_t *h = fh;

    if (h == NULL)
        return;
    close(h->fd);
    free(h);
    pthread_mutex_lock(&g_lock);
    g_stats.handles--;
    pthread_mutex_unlock(&g_lock);
}

CUfileError_t cuFileBufRegister(const void *base, size_t size, int flags);
CUfileError_t cuFileBufRegister(const void *base, size_t size, int flags)
{
    dbl_buf_t *b;

    if (!g_open)
        return fail(E_DRIVER_NOT_INITIALIZED);
    if (base == NULL || size == 0 || flags != 0 || (b = calloc(1, sizeof(*b))) == NULL)
        return fail(E_INVALID_VALUE);
    b->base = (uintptr_t)base;
    b->size = size;
    pthread_mutex_lock(&g_lock);
    b->next = g_bufs;
    g_bufs  = b;
    g_stats.bufs++;
    g_stats.buf_registers++;
    pthread_mutex_unlock(&g_lock);
    return ok();
}

CUfileError_t cuFileBufDeregister(const void *base);
CUfileError_t cuFileBufDeregister(const void *base)
{
    dbl_buf_t **pp, *b = NULL;

    pthread_mutex_lock(&g_lock);
    for (pp = &g_bufs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == (uintptr_t)base) {
            b   = *pp;
            *pp = b->next;
            g_stats.bufs--;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (b == NULL)
        return fail(E_INVALID_VALUE);
    free(b);
    return ok();
}

/* A registered buffer at base must hold [base + off, + size). */
static int range_ok(const void *base, size_t size, off_t off)
{
    int ok_ = 1;

    if (off < 0)
        return 0;
    pthread_mutex_lock(&g_lock);
    for (dbl_buf_t *b = g_bufs; b != NULL; b = b->next) {
        if (b->base == (uintptr_t)base)
            ok_ = (size_t)off <= b->size && size <= b->size - (size_t)off;
    }
    pthread_mutex_unlock(&g_lock);
    return ok_;
}

static ssize_t io(void *fh, void *base, size_t size, off_t foff, off_t boff, int write_)
{
    dbl_handle_t *h    = fh;
    const char *delay = getenv("ORBITTE_CUFILE_DOUBLE_DELAY_MS");
    ssize_t n;

    if (delay != NULL)
        usleep((useconds_t)atoi(delay) * 1000u);
    if (h == NULL || !range_ok(base, size, boff)) {
        errno = EINVAL;
        return -1;
    }
    if (write_)
        n = pwrite(h->fd, (uint8_t *)base + boff, size, foff);
    else
        n = pread(h->fd, (uint8_t *)base + boff, size, foff);
    pthread_mutex_lock(&g_lock);
    if (write_)
        g_stats.writes++;
    else
        g_stats.reads++;
    if (n > 0)
        g_stats.bytes += n;
    pthread_mutex_unlock(&g_lock);
    return n;
}

ssize_t cuFileRead(void *fh, void *base, size_t size, off_t foff, off_t boff);
ssize_t cuFileRead(void *fh, void *base, size_t size, off_t foff, off_t boff)
{
    return io(fh, base, size, foff, boff, 0);
}

ssize_t cuFileWrite(void *fh, const void *base, size_t size, off_t foff, off_t boff);
ssize_t cuFileWrite(void *fh, const void *base, size_t size, off_t foff, off_t boff)
{
    return io(fh, (void *)base, size, foff, boff, 1);
}

void ote_cufile_double_stats(ote_cufile_double_stats_t *st);
void ote_cufile_double_stats(ote_cufile_double_stats_t *st)
{
    pthread_mutex_lock(&g_lock);
    *st = g_stats;
    pthread_mutex_unlock(&g_lock);
}
