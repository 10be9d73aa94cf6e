/*
 * Test double of the CUDA entry points libote loads (src/uct_ext/cuda/
 * cuda_api.h). TEST ONLY: selected with OTE_CUDA_LIB=<path of this .so>.
 *
 * - Devices: ORBITTE_CUDA_DOUBLE_DEVICES (default 2) physical ones;
 *   CUDA_VISIBLE_DEVICES selects and orders them as CUDA does, and
 *   ordinals are positions in that list.
 * - Device memory is host memory from a named POSIX shared-memory object,
 *   so that an IPC handle (which carries the name) can be opened by another
 *   process. Opening one's own handle, or a handle twice, fails as in CUDA.
 * - Copies on a stream run in order on one thread per stream, each after
 *   ORBITTE_CUDA_DOUBLE_DELAY_US (default 0) microseconds; events complete when
 *   the stream has run everything queued before them.
 * - Every pointer range a copy touches that starts in simulated device or
 *   pinned memory must lie inside that allocation (cudaErrorInvalidValue).
 * - PCI addresses: ORBITTE_CUDA_DOUBLE_PCI, one per physical device
 *   ("0000:84:00.0,0000:03:00.0"); without it device N is at 0000:N+0x10:00.0.
 * - ote_cuda_double_stats() reports live objects, so tests can check that
 *   nothing leaks (IPC mappings, pinned ranges, streams, events).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEV 16

enum { K_DEV = 1, K_HOST_ALLOC, K_HOST_REG, K_IPC };

typedef struct alloc {
    uintptr_t     base;
    size_t        size;
    int           kind;
    int           phys;     /* physical device (K_DEV, K_IPC) */
    char          name[40]; /* shm name (K_DEV, K_IPC)        */
    struct alloc *next;
} alloc_t;

typedef struct {
    char     magic[8]; /* "OTECUDBL" */
    uint32_t phys;
    uint32_t pid;
    uint64_t size;
    char     name[40];
} dbl_handle_t;
_Static_assert(sizeof(dbl_handle_t) == 64, "cudaIpcMemHandle_t is 64 bytes");

typedef struct op {
    void       *dst;
    const void *src;
    size_t      n;
    struct op  *next;
} op_t;

typedef struct stream {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    pthread_t       thread;
    op_t           *head, *tail;
    uint64_t        submitted, completed;
    int             stop;
} stream_t;

typedef struct {
    stream_t *stream;
    uint64_t  seq;
} event_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t  g_once = PTHREAD_ONCE_INIT;
static alloc_t        *g_allocs;
static int             g_visible[MAX_DEV], g_nvisible;
static atomic_long     g_delay_us;
static atomic_long     g_streams, g_events, g_ipc_open, g_pinned, g_dev_allocs, g_copies;
static atomic_uint     g_seq;
static __thread int    t_dev;
static __thread int    t_last_err;

static void init(void)
{
    const char *s   = getenv("ORBITTE_CUDA_DOUBLE_DEVICES");
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    const char *d   = getenv("ORBITTE_CUDA_DOUBLE_DELAY_US");
    int nphys       = s ? atoi(s) : 2;

    if (nphys < 0)
        nphys = 0;
    if (nphys > MAX_DEV)
        nphys = MAX_DEV;
    g_delay_us = d ? atol(d) : 0;
    if (vis == NULL) {
        for (int i = 0; i < nphys; i++)
            g_visible[g_nvisible++] = i;
        return;
    }
    /* As CUDA: the list stops at the first entry that is not a valid device. */
    while (*vis != '\0' && g_nvisible < MAX_DEV) {
        char *end;
        long v = strtol(vis, &end, 10);

        if (end == vis || v < 0 || v >= nphys)
            break;
        g_visible[g_nvisible++] = (int)v;
        vis = *end == ',' ? end + 1 : end;
        if (*end != ',' )
            break;
    }
}

static int set_err(int e)
{
    if (e != 0)
        t_last_err = e;
    return e;
}

static int phys_to_ordinal(int phys)
{
    for (int i = 0; i < g_nvisible; i++) {
        if (g_visible[i] == phys)
            return i;
    }
    return -1;
}

/* Under g_lock. */
static alloc_t *find(uintptr_t p)
{
    for (alloc_t *a = g_allocs; a != NULL; a = a->next) {
        if (p >= a->base && p - a->base < a->size)
            return a;
    }
    return NULL;
}

static void add(alloc_t *a)
{
    pthread_mutex_lock(&g_lock);
    a->next  = g_allocs;
    g_allocs = a;
    pthread_mutex_unlock(&g_lock);
}

/* Remove the allocation starting at p of one of the kinds; NULL if none. */
static alloc_t *take(uintptr_t p, int kind1, int kind2)
{
    alloc_t **pp;

    pthread_mutex_lock(&g_lock);
    for (pp = &g_allocs; *pp != NULL; pp = &(*pp)->next) {
        alloc_t *a = *pp;

        if (a->base == p && (a->kind == kind1 || a->kind == kind2)) {
            *pp = a->next;
            pthread_mutex_unlock(&g_lock);
            return a;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

/* A range that starts in a known allocation must end inside it. */
static int range_ok(const void *p, size_t n)
{
    int ok = 1;
    alloc_t *a;

    pthread_mutex_lock(&g_lock);
    a = find((uintptr_t)p);
    if (a != NULL && n > a->size - ((uintptr_t)p - a->base))
        ok = 0;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

int cudaGetDeviceCount(int *count)
{
    pthread_once(&g_once, init);
    *count = g_nvisible;
    return g_nvisible ? 0 : set_err(100);
}

int cudaDeviceGetPCIBusId(char *bus_id, int len, int dev)
{
    const char *list = getenv("ORBITTE_CUDA_DOUBLE_PCI");
    int phys;

    pthread_once(&g_once, init);
    if (dev < 0 || dev >= g_nvisible)
        return set_err(101);
    if (bus_id == NULL || len <= 0)
        return set_err(1);
    phys = g_visible[dev];
    for (int i = 0; list != NULL && i < phys; i++) {
        list = strchr(list, ',');
        list = list != NULL ? list + 1 : NULL;
    }
    if (list != NULL && *list != '\0')
        snprintf(bus_id, (size_t)len, "%.*s", (int)strcspn(list, ","), list);
    else
        snprintf(bus_id, (size_t)len, "0000:%02x:00.0", 0x10 + phys);
    return 0;
}

int cudaSetDevice(int dev)
{
    pthread_once(&g_once, init);
    if (dev < 0 || dev >= g_nvisible)
        return set_err(101);
    t_dev = dev;
    return 0;
}

int cudaGetDevice(int *dev)
{
    pthread_once(&g_once, init);
    if (g_nvisible == 0)
        return set_err(100);
    *dev = t_dev;
    return 0;
}

int cudaGetLastError(void)
{
    int e      = t_last_err;
    t_last_err = 0;
    return e;
}

const char *cudaGetErrorString(int e)
{
    switch (e) {
    case 0: return "no error (double)";
    case 1: return "invalid argument (double)";
    case 2: return "out of memory (double)";
    case 100: return "no CUDA-capable device is detected (double)";
    case 101: return "invalid device ordinal (double)";
    case 208: return "resource already mapped (double)";
    case 400: return "invalid resource handle (double)";
    case 600: return "device not ready (double)";
    case 712: return "part or all of the requested memory range is already mapped (double)";
    case 713: return "pointer does not correspond to a registered memory region (double)";
    default: return "unknown error (double)";
    }
}

typedef struct {
    int   type;
    int   device;
    void *devicePointer;
    void *hostPointer;
    long  reserved[8];
} attr_t;

int cudaPointerGetAttributes(attr_t *attr, const void *ptr)
{
    alloc_t *a;

    pthread_once(&g_once, init);
    memset(attr, 0, sizeof(*attr));
    attr->device = -2;
    pthread_mutex_lock(&g_lock);
    a = find((uintptr_t)ptr);
    if (a == NULL) {
        attr->type = 0;
    } else if (a->kind == K_DEV || a->kind == K_IPC) {
        attr->type          = 2;
        attr->device        = phys_to_ordinal(a->phys);
        attr->devicePointer = (void *)ptr;
    } else {
        attr->type        = 1;
        attr->device      = t_dev;
        attr->hostPointer = (void *)ptr;
    }
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int cudaMalloc(void **ptr, size_t size)
{
    alloc_t *a;
    int fd;
    void *p;

    pthread_once(&g_once, init);
    if (g_nvisible == 0)
        return set_err(100);
    if (size == 0) {
        *ptr = NULL;
        return 0;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return set_err(2);
    snprintf(a->name, sizeof(a->name), "/ote_cudadbl_%d_%u", (int)getpid(),
             atomic_fetch_add(&g_seq, 1));
    fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* Left by a killed process that had our pid: ours are numbered apart. */
        shm_unlink(a->name);
        fd = shm_open(a->name, O_RDWR | O_CREAT | O_EXCL, 0600);
    }
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) {
            close(fd);
            shm_unlink(a->name);
        }
        free(a);
        return set_err(2);
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        shm_unlink(a->name);
        free(a);
        return set_err(2);
    }
    a->base = (uintptr_t)p;
    a->size = size;
    a->kind = K_DEV;
    a->phys = g_visible[t_dev];
    add(a);
    atomic_fetch_add(&g_dev_allocs, 1);
    *ptr = p;
    return 0;
}

int cudaFree(void *ptr)
{
    alloc_t *a;

    if (ptr == NULL)
        return 0;
    a = take((uintptr_t)ptr, K_DEV, K_DEV);
    if (a == NULL)
        return set_err(1);
    munmap((void *)a->base, a->size);
    shm_unlink(a->name);
    free(a);
    atomic_fetch_sub(&g_dev_allocs, 1);
    return 0;
}

int cudaHostAlloc(void **ptr, size_t size, unsigned flags)
{
    alloc_t *a = calloc(1, sizeof(*a));
    void *p;

    (void)flags;
    if (a == NULL || size == 0) {
        free(a);
        return set_err(size == 0 ? 1 : 2);
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(a);
        return set_err(2);
    }
    a->base = (uintptr_t)p;
    a->size = size;
    a->kind = K_HOST_ALLOC;
    add(a);
    atomic_fetch_add(&g_pinned, 1);
    *ptr = p;
    return 0;
}

int cudaFreeHost(void *ptr)
{
    alloc_t *a = take((uintptr_t)ptr, K_HOST_ALLOC, K_HOST_ALLOC);

    if (a == NULL)
        return set_err(1);
    munmap((void *)a->base, a->size);
    free(a);
    atomic_fetch_sub(&g_pinned, 1);
    return 0;
}

int cudaHostRegister(void *ptr, size_t size, unsigned flags)
{
    alloc_t *a;
    int clash = 0;

    (void)flags;
    if (ptr == NULL || size == 0)
        return set_err(1);
    pthread_mutex_lock(&g_lock);
    for (alloc_t *x = g_allocs; x != NULL; x = x->next) {
        if ((uintptr_t)ptr < x->base + x->size && x->base < (uintptr_t)ptr + size)
            clash = 1;
    }
    pthread_mutex_unlock(&g_lock);
    if (clash)
        return set_err(712);
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return set_err(2);
    a->base = (uintptr_t)ptr;
    a->size = size;
    a->kind = K_HOST_REG;
    add(a);
    atomic_fetch_add(&g_pinned, 1);
    return 0;
}

int cudaHostUnregister(void *ptr)
{
    alloc_t *a = take((uintptr_t)ptr, K_HOST_REG, K_HOST_REG);

    if (a == NULL)
        return set_err(713);
    free(a);
    atomic_fetch_sub(&g_pinned, 1);
    return 0;
}

static void sleep_us(long us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};

    nanosleep(&ts, NULL);
}

static void *stream_main(void *arg)
{
    stream_t *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        op_t *op;

        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cond, &s->lock);
        if (s->head == NULL)
            break;
        op = s->head;
        pthread_mutex_unlock(&s->lock);
        if (atomic_load(&g_delay_us) > 0)
            sleep_us(atomic_load(&g_delay_us));
        if (op->n > 0)
            memmove(op->dst, op->src, op->n);
        atomic_fetch_add(&g_copies, 1);
        pthread_mutex_lock(&s->lock);
        s->head = op->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->completed++;
        free(op);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int cudaStreamCreateWithFlags(void **stream, unsigned flags)
{
    stream_t *s = calloc(1, sizeof(*s));

    (void)flags;
    pthread_once(&g_once, init);
    if (s == NULL)
        return set_err(2);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return set_err(2);
    }
    atomic_fetch_add(&g_streams, 1);
    *stream = s;
    return 0;
}

/* Like cudaStreamDestroy, waits for queued work before the stream goes. */
int cudaStreamDestroy(void *stream)
{
    stream_t *s = stream;

    if (s == NULL)
        return set_err(400);
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    atomic_fetch_sub(&g_streams, 1);
    return 0;
}

int cudaStreamSynchronize(void *stream)
{
    stream_t *s = stream;

    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    while (s->completed < s->submitted)
        pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int cudaDeviceSynchronize(void)
{
    return 0; /* streams are only waited for one by one in tests */
}

int cudaEventCreateWithFlags(void **event, unsigned flags)
{
    event_t *e = calloc(1, sizeof(*e));

    (void)flags;
    if (e == NULL)
        return set_err(2);
    atomic_fetch_add(&g_events, 1);
    *event = e;
    return 0;
}

int cudaEventDestroy(void *event)
{
    if (event == NULL)
        return set_err(400);
    free(event);
    atomic_fetch_sub(&g_events, 1);
    return 0;
}

int cudaEventRecord(void *event, void *stream)
{
    event_t *e  = event;
    stream_t *s = stream;

    if (e == NULL)
        return set_err(400);
    e->stream = s;
    if (s != NULL) {
        pthread_mutex_lock(&s->lock);
        e->seq = s->submitted;
        pthread_mutex_unlock(&s->lock);
    }
    return 0;
}

int cudaEventQuery(void *event)
{
    event_t *e = event;
    int done;

    if (e == NULL)
        return set_err(400);
    if (e->stream == NULL)
        return 0;
    pthread_mutex_lock(&e->stream->lock);
    done = e->stream->completed >= e->seq;
    pthread_mutex_unlock(&e->stream->lock);
    return done ? 0 : 600; /* not ready is not a sticky error */
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream)
{
    stream_t *s = stream;
    op_t *op;

    if (kind != 4 || (n > 0 && (dst == NULL || src == NULL)))
        return set_err(1);
    if (!range_ok(dst, n) || !range_ok(src, n))
        return set_err(1);
    if (s == NULL) {
        if (n > 0)
            memmove(dst, src, n);
        atomic_fetch_add(&g_copies, 1);
        return 0;
    }
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return set_err(2);
    op->dst = dst;
    op->src = src;
    op->n   = n;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    s->submitted++;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind)
{
    return cudaMemcpyAsync(dst, src, n, kind, NULL);
}

int cudaIpcGetMemHandle(dbl_handle_t *h, void *ptr)
{
    alloc_t *a;

    pthread_mutex_lock(&g_lock);
    a = find((uintptr_t)ptr);
    if (a == NULL || a->kind != K_DEV) {
        pthread_mutex_unlock(&g_lock);
        return set_err(1);
    }
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, "OTECUDBL", 8);
    h->phys = (uint32_t)a->phys;
    h->pid  = (uint32_t)getpid();
    h->size = a->size;
    snprintf(h->name, sizeof(h->name), "%s", a->name);
    pthread_mutex_unlock(&g_lock);
    return 0;
}

int cudaIpcOpenMemHandle(void **ptr, dbl_handle_t h, unsigned flags)
{
    alloc_t *a;
    void *p;
    int fd;

    (void)flags;
    if (memcmp(h.magic, "OTECUDBL", 8) != 0 || h.size == 0 ||
        memchr(h.name, '\0', sizeof(h.name)) == NULL || strncmp(h.name, "/ote_cudadbl_", 13))
        return set_err(400);
    if (h.pid == (uint32_t)getpid())
        return set_err(201); /* a process cannot open its own handle */
    pthread_mutex_lock(&g_lock);
    for (alloc_t *x = g_allocs; x != NULL; x = x->next) {
        if (x->kind == K_IPC && strcmp(x->name, h.name) == 0) {
            pthread_mutex_unlock(&g_lock);
            return set_err(208);
        }
    }
    pthread_mutex_unlock(&g_lock);
    fd = shm_open(h.name, O_RDWR, 0);
    if (fd < 0)
        return set_err(400);
    p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return set_err(2);
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        munmap(p, h.size);
        return set_err(2);
    }
    a->base = (uintptr_t)p;
    a->size = h.size;
    a->kind = K_IPC;
    a->phys = (int)h.phys;
    snprintf(a->name, sizeof(a->name), "%s", h.name);
    add(a);
    atomic_fetch_add(&g_ipc_open, 1);
    *ptr = p;
    return 0;
}

int cudaIpcCloseMemHandle(void *ptr)
{
    alloc_t *a = take((uintptr_t)ptr, K_IPC, K_IPC);

    if (a == NULL)
        return set_err(1);
    munmap((void *)a->base, a->size);
    free(a);
    atomic_fetch_sub(&g_ipc_open, 1);
    return 0;
}

/* Driver API: CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr). */
int cuMemGetAddressRange_v2(uint64_t *base, size_t *size, uint64_t ptr)
{
    alloc_t *a;
    int rc = 1;

    pthread_mutex_lock(&g_lock);
    a = find((uintptr_t)ptr);
    if (a != NULL && (a->kind == K_DEV || a->kind == K_IPC)) {
        if (base)
            *base = a->base;
        if (size)
            *size = a->size;
        rc = 0;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Live objects, for leak checks in tests. */
typedef struct {
    long streams, events, ipc_open, pinned, dev_allocs, copies;
} ote_cuda_double_stats_t;

void ote_cuda_double_stats(ote_cuda_double_stats_t *st)
{
    st->streams    = atomic_load(&g_streams);
    st->events     = atomic_load(&g_events);
    st->ipc_open   = atomic_load(&g_ipc_open);
    st->pinned     = atomic_load(&g_pinned);
    st->dev_allocs = atomic_load(&g_dev_allocs);
    st->copies     = atomic_load(&g_copies);
}

/* Physical device of a simulated device pointer, -1 if none (ordinal checks). */
int ote_cuda_double_phys(const void *p)
{
    alloc_t *a;
    int phys = -1;

    pthread_mutex_lock(&g_lock);
    a = find((uintptr_t)p);
    if (a != NULL && (a->kind == K_DEV || a->kind == K_IPC))
        phys = a->phys;
    pthread_mutex_unlock(&g_lock);
    return phys;
}

/* Change the delay of each stream copy (microseconds) from a test. */
void ote_cuda_double_set_delay(long us)
{
    pthread_once(&g_once, init);
    atomic_store(&g_delay_us, us);
}
