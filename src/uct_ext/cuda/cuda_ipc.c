/*
 * cuda_ipc: GPU memory of another process on this host, through CUDA IPC.
 *
 * Exporter: the md publishes, for each GPU registration, an IPC handle of
 * the whole allocation holding it (with the allocation's base and size) in
 * the rkey. An IPC handle opens the whole allocation, so a peer that holds
 * the key could reach every byte of it: regions should cover whole
 * allocations when that matters. The initiator only posts ranges the
 * descriptor publishes with the needed access (the core checks, since the
 * target does not see these accesses).
 *
 * Importer: the handle is opened on first use and kept in an import cache
 * shared by the process (a handle opens once per process), bounded per
 * peer by OTE_CUDA_IPC_CACHE_ENTRIES: unreferenced mappings are closed LRU
 * beyond it; the mappings of a peer are closed when its eps go (segment
 * closed, peer restarted). The opened size is checked against the rkey, so
 * a lying rkey cannot make us copy past the mapping. Copies run on pooled
 * streams and end on their events.
 */
#include "cuda_int.h"

#include "base/config.h"
#include "base/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_IPC_STREAMS   4
#define CUDA_IPC_SLICE     (16u << 20)
#define CUDA_IPC_BANDWIDTH 100e9

#define CUDA_IPC_RKEY_MAGIC   0x4943544fu /* "OTCI" */
#define CUDA_IPC_RKEY_VERSION 1
#define CUDA_IPC_RKEY_LEN     OTE_CUDA_IPC_RKEY_LEN

/* ---- rkey ------------------------------------------------------------------ */

typedef ote_cuda_ipc_rkey_t ipc_rkey_t;

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void ote_cuda_ipc_rkey_encode(const ote_cuda_ipc_rkey_t *k, uint8_t *buf)
{
    uint32_t magic = CUDA_IPC_RKEY_MAGIC;

    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(magic >> (8 * i));
    buf[4] = CUDA_IPC_RKEY_VERSION;
    buf[5] = k->device;
    buf[6] = buf[7] = 0;
    put_u64(buf + 8, k->base);
    put_u64(buf + 16, k->size);
    memcpy(buf + 24, k->handle.reserved, OTE_CUDA_IPC_HANDLE_SIZE);
}

ote_status_t ote_cuda_ipc_rkey_decode(const void *rkey, size_t len, ote_cuda_ipc_rkey_t *k)
{
    const uint8_t *b = rkey;
    uint32_t magic;

    if (rkey == NULL || len != CUDA_IPC_RKEY_LEN)
        return OTE_ERR_PROTOCOL;
    magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (magic != CUDA_IPC_RKEY_MAGIC || b[4] != CUDA_IPC_RKEY_VERSION || b[6] || b[7])
        return OTE_ERR_PROTOCOL;
    k->device = b[5];
    k->base   = get_u64(b + 8);
    k->size   = get_u64(b + 16);
    if (k->size == 0 || k->base + k->size < k->base)
        return OTE_ERR_PROTOCOL;
    memcpy(k->handle.reserved, b + 24, OTE_CUDA_IPC_HANDLE_SIZE);
    return OTE_OK;
}

/* ---- md (exporter) ---------------------------------------------------------- */

static ote_status_t ipc_mem_reg(ote_md_t *md, void *addr, size_t length, unsigned access,
                                void **memh_p)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ipc_rkey_t *k;
    ote_cuda_err_t err;
    size_t size;
    int dev;
    bool pinned;

    (void)md;
    (void)access;
    if (a == NULL || ote_cuda_ptr_query(addr, &dev, &pinned) != OTE_OK || dev < 0)
        return OTE_ERR_UNSUPPORTED;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return OTE_ERR_NO_MEMORY;
    if (ote_cuda_alloc_range(addr, &k->base, &size) != OTE_OK ||
        (uintptr_t)addr - k->base + length > size) {
        free(k);
        return OTE_ERR_OUT_OF_BOUNDS;
    }
    k->size   = size;
    k->device = (uint8_t)dev;
    err       = a->ipc_get_mem_handle(&k->handle, (void *)(uintptr_t)k->base);
    if (err != OTE_CUDA_SUCCESS) {
        a->get_last_error();
        ote_error("cudaIpcGetMemHandle(%p): %s", addr, ote_cuda_strerror(err));
        free(k);
        return OTE_ERR_IO;
    }
    *memh_p = k;
    return OTE_OK;
}

static void ipc_mem_dereg(ote_md_t *md, void *memh)
{
    (void)md;
    free(memh);
}

static ote_status_t ipc_rkey_pack(ote_md_t *md, void *memh, void *buf, size_t max,
                                  size_t *length_p)
{
    (void)md;
    if (max < CUDA_IPC_RKEY_LEN)
        return OTE_ERR_NO_MEMORY;
    ote_cuda_ipc_rkey_encode(memh, buf);
    *length_p = CUDA_IPC_RKEY_LEN;
    return OTE_OK;
}

static const ote_md_ops_t ipc_md_ops = {
    .mem_reg   = ipc_mem_reg,
    .mem_dereg = ipc_mem_dereg,
    .rkey_pack = ipc_rkey_pack,
};

/* ---- import cache (process-wide) --------------------------------------------- */

typedef struct import {
    uint64_t              peer;     /* peer engine instance */
    ote_cuda_ipc_handle_t handle;
    uint64_t              base, size; /* the peer's allocation */
    void                 *mapped;
    long                  refs;     /* copies in flight using it */
    bool                  doomed;   /* close when refs reach 0 */
    struct import        *prev, *next; /* LRU list, most recent first */
} import_t;

static struct {
    pthread_mutex_t lock;
    import_t       *head, *tail;
    long            max_per_peer;
    /* counters for tests and ote_info */
    unsigned long   opens, closes, evictions;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .max_per_peer = 256};

static void ipc_lru_unlink(import_t *im)
{
    if (im->prev)
        im->prev->next = im->next;
    else
        cache.head = im->next;
    if (im->next)
        im->next->prev = im->prev;
    else
        cache.tail = im->prev;
    im->prev = im->next = NULL;
}

static void lru_push_front(import_t *im)
{
    im->prev = NULL;
    im->next = cache.head;
    if (cache.head)
        cache.head->prev = im;
    cache.head = im;
    if (cache.tail == NULL)
        cache.tail = im;
}

/* Under the lock. */
static void import_close(import_t *im)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ote_cuda_err_t err;

    ipc_lru_unlink(im);
    err = a->ipc_close_mem_handle(im->mapped);
    if (err != OTE_CUDA_SUCCESS) {
        a->get_last_error();
        ote_warn("cudaIpcCloseMemHandle(%p): %s", im->mapped, ote_cuda_strerror(err));
    }
    cache.closes++;
    free(im);
}

/* Close unreferenced mappings of peer, oldest first, until it has fewer than keep. */
static void cache_trim(uint64_t peer, long keep)
{
    long n = 0;

    for (import_t *im = cache.head; im != NULL; im = im->next)
        n += im->peer == peer;
    for (import_t *im = cache.tail; im != NULL && n > keep;) {
        import_t *prev = im->prev;

        if (im->peer == peer && im->refs == 0) {
            import_close(im);
            cache.evictions++;
            n--;
        }
        im = prev;
    }
}

static ote_status_t cache_get(uint64_t peer, const ipc_rkey_t *k, int dev, import_t **im_p)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    import_t *im;
    ote_cuda_err_t err;
    uint64_t base;
    size_t size;

    pthread_mutex_lock(&cache.lock);
    for (im = cache.head; im != NULL; im = im->next) {
        if (im->peer == peer && !im->doomed &&
            memcmp(im->handle.reserved, k->handle.reserved, sizeof(k->handle.reserved)) == 0)
            break;
    }
    if (im != NULL) {
        if (im->base != k->base || im->size != k->size) {
            pthread_mutex_unlock(&cache.lock);
            return OTE_ERR_PROTOCOL;
        }
        ipc_lru_unlink(im);
        lru_push_front(im);
        im->refs++;
        *im_p = im;
        pthread_mutex_unlock(&cache.lock);
        return OTE_OK;
    }
    cache_trim(peer, cache.max_per_peer - 1);
    im = calloc(1, sizeof(*im));
    if (im == NULL) {
        pthread_mutex_unlock(&cache.lock);
        return OTE_ERR_NO_MEMORY;
    }
    if (dev >= 0)
        a->set_device(dev);
    err = a->ipc_open_mem_handle(&im->mapped, k->handle, OTE_CUDA_IPC_LAZY_PEER_ACCESS);
    if (err != OTE_CUDA_SUCCESS) {
        a->get_last_error();
        pthread_mutex_unlock(&cache.lock);
        ote_error("cudaIpcOpenMemHandle (peer %016llx, allocation %#llx+%llu): %s",
                  (unsigned long long)peer, (unsigned long long)k->base,
                  (unsigned long long)k->size, ote_cuda_strerror(err));
        free(im);
        return OTE_ERR_IO;
    }
    /* What was mapped decides the bounds, not what the peer said. */
    if (ote_cuda_alloc_range(im->mapped, &base, &size) != OTE_OK || size != k->size ||
        base != (uintptr_t)im->mapped) {
        a->ipc_close_mem_handle(im->mapped);
        pthread_mutex_unlock(&cache.lock);
        ote_error("CUDA IPC: peer %016llx announced %llu bytes, the mapping has %zu",
                  (unsigned long long)peer, (unsigned long long)k->size, size);
        free(im);
        return OTE_ERR_PROTOCOL;
    }
    im->peer   = peer;
    im->handle = k->handle;
    im->base   = k->base;
    im->size   = k->size;
    im->refs   = 1;
    lru_push_front(im);
    cache.opens++;
    *im_p = im;
    pthread_mutex_unlock(&cache.lock);
    return OTE_OK;
}

static void cache_put(import_t *im)
{
    pthread_mutex_lock(&cache.lock);
    im->refs--;
    if (im->refs == 0 && im->doomed)
        import_close(im);
    else if (im->refs == 0)
        cache_trim(im->peer, cache.max_per_peer);
    pthread_mutex_unlock(&cache.lock);
}

/* Every mapping of peer goes: now if unused, else when its last copy ends. */
static void cache_drop_peer(uint64_t peer)
{
    pthread_mutex_lock(&cache.lock);
    for (import_t *im = cache.head; im != NULL;) {
        import_t *next = im->next;

        if (im->peer == peer) {
            if (im->refs == 0)
                import_close(im);
            else
                im->doomed = true;
        }
        im = next;
    }
    pthread_mutex_unlock(&cache.lock);
}

/* Mappings open now, and counters; for tests. */
void ote_cuda_ipc_cache_stats(size_t *open_p, unsigned long *opens_p, unsigned long *evictions_p);
void ote_cuda_ipc_cache_stats(size_t *open_p, unsigned long *opens_p, unsigned long *evictions_p)
{
    size_t n = 0;

    pthread_mutex_lock(&cache.lock);
    for (import_t *im = cache.head; im != NULL; im = im->next)
        n++;
    *open_p      = n;
    *opens_p     = cache.opens;
    *evictions_p = cache.evictions;
    pthread_mutex_unlock(&cache.lock);
}

/* ---- iface and ep (importer) ------------------------------------------------- */

typedef ote_cuda_iface_t ipc_iface_t;

typedef struct {
    ote_cuda_ep_t super;
    uint64_t      peer;
} ipc_ep_t;

/* Address: u32 pid, u64 instance; a process cannot open its own handles. */
#define IPC_ADDR_LEN 12

static ote_md_t ipc_md = {.name = "cuda_ipc", .ops = &ipc_md_ops, .mem_types = OTE_MEM_TYPE_CUDA,
                          .flags = OTE_MD_FLAG_DEVICE_NATIVE};

static ote_status_t ipc_query_resources(ote_tl_component_t *comp,
                                        const ote_tl_iface_params_t *params,
                                        ote_tl_resource_t **res_p, size_t *count_p)
{
    (void)params;
    return ote_cuda_query_resources(comp, "cuda_ipc", res_p, count_p);
}

static ote_status_t ipc_md_open(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                                ote_md_t **md_p)
{
    (void)comp;
    (void)res;
    *md_p = &ipc_md;
    return OTE_OK;
}

static void ipc_md_close(ote_tl_component_t *comp, ote_md_t *md)
{
    (void)comp;
    (void)md;
}

static void ipc_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    (void)tl_iface;
    ote_cuda_iface_caps(caps, 0, OTE_MEM_TYPE_CUDA, OTE_TL_SCOPE_HOST, CUDA_IPC_SLICE,
                        CUDA_IPC_BANDWIDTH);
}

static ote_status_t ipc_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                    size_t *len_p)
{
    ipc_iface_t *iface = (ipc_iface_t *)tl_iface;
    uint32_t pid       = (uint32_t)getpid();

    if (max < IPC_ADDR_LEN)
        return OTE_ERR_NO_MEMORY;
    memcpy(buf, &pid, 4);
    memcpy((uint8_t *)buf + 4, &iface->instance_id, 8);
    *len_p = IPC_ADDR_LEN;
    return OTE_OK;
}

static ote_status_t ipc_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                             ote_region_t *local_region, uint64_t remote_addr, const void *rkey,
                             size_t rkey_len, ote_tl_completion_t *comp);

static ote_status_t ipc_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                                  const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p)
{
    uint32_t pid;
    ote_status_t status;

    if (addr_len != IPC_ADDR_LEN)
        return OTE_ERR_UNREACHABLE;
    memcpy(&pid, addr, 4);
    /* Own handles cannot be opened: an engine of this process is cuda_copy's. */
    if (pid == (uint32_t)getpid())
        return OTE_ERR_UNREACHABLE;
    status = ote_cuda_ep_create(tl_iface, sizeof(ipc_ep_t), ipc_post, ep_p);
    if (status == OTE_OK)
        ((ipc_ep_t *)*ep_p)->peer = peer->instance_id;
    return status;
}

/* A copy's end: the import it read or wrote through goes back to the cache. */
static void ipc_release(void *im)
{
    cache_put(im);
}

static ote_status_t ipc_post(ote_tl_ep_t *tl_ep, bool write, void *local, size_t length,
                             ote_region_t *local_region, uint64_t remote_addr, const void *rkey,
                             size_t rkey_len, ote_tl_completion_t *comp)
{
    ipc_ep_t *ep       = (ipc_ep_t *)tl_ep;
    ipc_iface_t *iface = (ipc_iface_t *)tl_ep->iface;
    int dev = local_region->mem_type == OTE_MEM_TYPE_CUDA
                  ? ote_cuda_location_device(local_region->location)
                  : 0;
    ipc_rkey_t k;
    import_t *im;
    void *remote;
    ote_status_t status;

    if (rkey == NULL)
        return OTE_ERR_NOT_REGISTERED;
    status = ote_cuda_ipc_rkey_decode(rkey, rkey_len, &k);
    if (status != OTE_OK) {
        ote_warn("cuda_ipc: malformed rkey from peer %016llx", (unsigned long long)ep->peer);
        return status;
    }
    if (remote_addr < k.base || remote_addr - k.base > k.size ||
        length > k.size - (remote_addr - k.base)) {
        ote_debug("cuda_ipc: %#llx+%zu outside the peer's allocation %#llx+%llu",
                  (unsigned long long)remote_addr, length, (unsigned long long)k.base,
                  (unsigned long long)k.size);
        return OTE_ERR_OUT_OF_BOUNDS;
    }
    status = cache_get(ep->peer, &k, dev, &im);
    if (status != OTE_OK)
        return status;
    remote = (uint8_t *)im->mapped + (remote_addr - k.base);
    status = ote_cuda_iface_copy(iface, write, dev, local, remote, length, comp, ipc_release, im);
    if (status != OTE_OK) {
        cache_put(im);
        return status;
    }
    return OTE_INPROGRESS;
}

/* Segment closed or peer restarted: its mappings go (copies in flight finish first). */
static void ipc_ep_destroy(ote_tl_ep_t *tl_ep)
{
    ipc_ep_t *ep = (ipc_ep_t *)tl_ep;

    cache_drop_peer(ep->peer);
    free(ep);
}

static const ote_tl_iface_ops_t ipc_iface_ops =
    OTE_CUDA_IFACE_OPS(ipc_iface_query, ipc_get_address, ipc_ep_create);

static const ote_tl_ep_ops_t ipc_ep_ops = OTE_CUDA_EP_OPS(ipc_ep_destroy);

static ote_status_t ipc_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                   const ote_tl_iface_params_t *params, ote_tl_iface_t **iface_p)
{
    ote_cuda_config_t cfg;
    ote_status_t status;

    status = ote_config_fill(&ote_cuda_config_table, &cfg);
    if (status != OTE_OK)
        return status;
    ote_config_release(&ote_cuda_config_table, &cfg);
    status = ote_cuda_iface_open(sizeof(ipc_iface_t), CUDA_IPC_STREAMS, &ipc_iface_ops,
                                 &ipc_ep_ops, res, md, params, iface_p);
    if (status == OTE_OK && cfg.ipc_cache_entries > 0) {
        pthread_mutex_lock(&cache.lock);
        cache.max_per_peer = cfg.ipc_cache_entries;
        pthread_mutex_unlock(&cache.lock);
    }
    return status;
}

OTE_TL_COMPONENT_DEFINE(ote_cuda_ipc_component, "cuda_ipc", &ote_cuda_config_table,
                        ipc_query_resources, ipc_md_open, ipc_md_close, ipc_iface_open,
                        ote_cuda_unavailable);
