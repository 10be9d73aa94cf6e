/*
 * Memory layer: what memory exists, who may touch it, how each memory
 * domain reaches it.
 *
 * A region (struct ote_mem, the public ote_mem_h) is one registration as the
 * user sees it. The region table finds, for a range and an access, the
 * region that covers the whole range, in O(log n) under a read lock.
 *
 * Behind each region is a registration entry: the memory-domain handles for
 * a range. Entries live in the registration cache, so registering memory
 * that is already registered (or covered by a registration) reuses the md
 * handles, and an entry whose last region went away stays cached,
 * unreferenced, until LRU eviction or until its memory is unmapped.
 *
 * Lifetimes of a region:
 *  - refs: user references (ote_mem_register of the same range adds one);
 *    when they drop to zero the region leaves the table at once, so new
 *    lookups fail with NOT_REGISTERED;
 *  - life: one for being in the table plus one per data-path user; when it
 *    drops to zero the region lets go of its registration entry (which the
 *    cache may keep) and engine-owned memory is freed. So backing memory
 *    stays registered while any slice still uses it.
 */
#ifndef OTE_MEM_MEM_H
#define OTE_MEM_MEM_H

#include "base/config.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_MEM_MAX_MDS      16
#define OTE_MEM_LOCATION_MAX 32
#define OTE_MEM_RKEY_MAX     256

typedef enum {
    OTE_MEM_TYPE_HOST = 1u << 0,
    OTE_MEM_TYPE_CUDA = 1u << 1,
} ote_mem_type_t;

typedef struct ote_md ote_md_t;

/* A memory domain: registration and remote keys for one transport family. */
typedef struct {
    ote_status_t (*mem_reg)(ote_md_t *md, void *addr, size_t length, unsigned access,
                            void **memh_p);
    void (*mem_dereg)(ote_md_t *md, void *memh);
    /* Remote key that peers need to reach this registration; may be empty. */
    ote_status_t (*rkey_pack)(ote_md_t *md, void *memh, void *buf, size_t max,
                              size_t *length_p);
} ote_md_ops_t;

/* rkey_pack of a domain whose registrations give peers nothing to publish. */
ote_status_t ote_md_unsupported_rkey_pack(ote_md_t *md, void *memh, void *buf, size_t max,
                                          size_t *length_p);

enum {
    /*
     * A registration on this md is itself what lets peers reach the memory
     * (an RDMA rkey: the NIC checks nothing else). Such registrations are
     * made per region over exactly its range and access, and dropped when
     * the region is released, never kept in the cache: otherwise a peer
     * holding an old rkey could still write into deregistered memory.
     * Without the flag, every remote access is checked against the region
     * table (native components) or the registration grants nothing by
     * itself, and the cache may keep and share the handle.
     */
    OTE_MD_FLAG_GRANTS_ACCESS = 1u << 0,
    /*
     * The domain belongs to the device itself (cuda_ipc): registering GPU
     * memory on it is not GPUDirect RDMA, and OTE_MEM_GPU_DIRECT leaves it be.
     */
    OTE_MD_FLAG_DEVICE_NATIVE = 1u << 1,
};

struct ote_md {
    const char         *name;      /* e.g. "uct:posix", unique per engine */
    const ote_md_ops_t *ops;
    unsigned            mem_types; /* OTE_MEM_TYPE_* it can register      */
    unsigned            flags;     /* OTE_MD_FLAG_*                       */
    void               *priv;
};

/*
 * A range in an index (itree.c treap, sidx.c sorted index), embedded in what
 * it indexes; the sorted index uses start, end and tie only.
 */
typedef struct ote_itree_node {
    uint64_t               start, end; /* [start, end)                      */
    uint64_t               tie;        /* orders equal ranges; unique       */
    uint64_t               max_end;    /* largest end in this subtree      */
    uint32_t               prio;
    struct ote_itree_node *left, *right;
} ote_itree_node_t;

typedef struct ote_mem_reg   ote_mem_reg_t; /* registration entry (rcache.c) */
typedef struct ote_mem_export ote_mem_export_t;

/*
 * A region's memory mapped by a peer (the shm component gives it the
 * memfd). Deregistration takes every export of the region: it calls
 * revoke on each (ask the peer to unmap; must not block), then wait on
 * each, which returns once the peer has unmapped or lost its connection,
 * within a bound of its own; after wait the export belongs to its owner
 * again, which frees it.
 */
typedef struct {
    void (*revoke)(ote_mem_export_t *x);
    void (*wait)(ote_mem_export_t *x);
} ote_mem_export_ops_t;

struct ote_mem_export {
    const ote_mem_export_ops_t *ops;
    ote_mem_export_t           *next;
};
typedef struct ote_mem_table ote_mem_table_t;
typedef struct ote_mem       ote_region_t;

struct ote_mem {
    ote_itree_node_t node;        /* in the table while refs > 0           */
    uint64_t         addr;
    size_t           length;
    char             location[OTE_MEM_LOCATION_MAX];
    unsigned         mem_type;
    unsigned         access;
    bool             owned;       /* engine-owned: freed with the region    */
    void            *owned_base;  /* what to free                           */
    int              owned_kind;  /* OTE_MEM_OWNED_*                        */
    size_t           owned_length;
    /*
     * The engine-owned region this one lies inside, if any: a life
     * reference on it, let go when this region's last user goes, so the
     * owned memory stays mapped while transfers through this region run.
     */
    struct ote_mem  *holder;
    unsigned         refs;        /* user references; under the table lock  */
    atomic_long      life;        /* in-table + data-path users             */
    atomic_bool      in_table;
    atomic_int       accessors;   /* data-path CPU accesses in progress     */
    ote_mem_table_t *table;
    ote_mem_reg_t   *reg;         /* md handles shared through the cache    */
    bool             reg_fresh;   /* reg was created for this region        */
    bool             discard_reg; /* release drops reg instead of caching it */
    /* Per md: the handle (shared from reg, or the region's own for
     * OTE_MD_FLAG_GRANTS_ACCESS mds); NULL where the md does not reach it. */
    void            *memh[OTE_MEM_MAX_MDS];
    uint64_t         seq;         /* registration order; unique             */
    /*
     * Engine-owned host memory: its memfd (owned by the allocation, -1 if
     * none), which peers on this host may map. Exports: under a lock of
     * region.c; closed once deregistration took them.
     */
    int              memfd;
    ote_mem_export_t *exports;
    bool             exports_closed;
    bool             exported;    /* ever mapped by a peer                  */
};

typedef struct {
    bool   rcache_enable;
    size_t rcache_max_size;    /* bytes of unreferenced entries kept          */
    long   rcache_max_regions; /* unreferenced entries kept                   */
    /*
     * Share and keep entries although no memory-event hook is installed:
     * the caller promises to report unmapped memory itself with
     * ote_mem_table_invalidate() (tests, benchmarks).
     */
    bool   rcache_manual_invalidate;
    /*
     * OTE_MEM_GPU_DIRECT: register GPU memory on network memory domains that
     * can (AUTO), never (NO: such traffic is staged), or require one (YES:
     * registering GPU memory fails when none can).
     */
    int    gpu_direct;
} ote_mem_table_params_t;

enum { OTE_MEM_GPU_DIRECT_AUTO = 0, OTE_MEM_GPU_DIRECT_YES = 1, OTE_MEM_GPU_DIRECT_NO = 2 };

/* Whether md registers memory of mem_type in a table with these params. */
static inline bool ote_mem_md_reaches(const ote_mem_table_params_t *p, const ote_md_t *md,
                                      unsigned mem_type)
{
    if (!(md->mem_types & mem_type))
        return false;
    return !(mem_type == OTE_MEM_TYPE_CUDA && !(md->flags & OTE_MD_FLAG_DEVICE_NATIVE) &&
             p->gpu_direct == OTE_MEM_GPU_DIRECT_NO);
}

/* OTE_MEM_GPU_DIRECT: mem's own setting (an OTE_TERNARY_* value). */
typedef struct {
    int gpu_direct;
} ote_mem_config_t;

/* OTE_RCACHE_*: the registration cache. */
typedef struct {
    bool   enable;
    size_t max_size;
    long   max_regions;
} ote_rcache_config_t;

extern const ote_config_table_t ote_mem_config_table;
extern const ote_config_table_t ote_rcache_config_table;
/* Both, NULL-terminated. */
extern const ote_config_table_t *const ote_mem_config_tables[];

/* Table params from mem's tables (OTE_MEM_GPU_DIRECT, OTE_RCACHE_*); others zero. */
ote_status_t ote_mem_table_params_read(ote_mem_table_params_t *params_p);

ote_status_t ote_mem_table_create(const ote_mem_table_params_t *params,
                                  ote_mem_table_t **table_p);
/*
 * Releases every region still registered and every cached registration.
 * Regions a data-path user still holds are released when it lets go.
 */
void         ote_mem_table_destroy(ote_mem_table_t *table);

/*
 * Add a memory domain, also to a table that holds regions (md_join.c):
 * every region in it, and every registration the cache keeps, is
 * registered on md before it counts in ote_mem_table_num_mds(); later
 * registrations cover it too. Lookups, deregistrations and data-path
 * references go on meanwhile; registrations wait. All or nothing: when a
 * registration on md fails, so does this call, with that registration's
 * status and a log line, and no handle on md remains. Every operation of
 * its table must be set (INVALID_PARAM otherwise); EXISTS for an md the
 * table has, BUSY when it has OTE_MEM_MAX_MDS.
 */
ote_status_t ote_mem_table_add_md(ote_mem_table_t *table, ote_md_t *md);
size_t       ote_mem_table_num_mds(const ote_mem_table_t *table);
ote_md_t    *ote_mem_table_md(const ote_mem_table_t *table, size_t index);

/* Number of regions in the table. */
size_t       ote_mem_table_count(ote_mem_table_t *table);
/* Changes every time a region is added or removed (descriptor freshness). */
uint64_t     ote_mem_table_generation(ote_mem_table_t *table);

/*
 * Register count descriptors, all or nothing: on error no region, no
 * reference and no md registration made by this call remains. location NULL
 * or "*" is detected. Registering the exact range and access of a region
 * already registered returns that region with one more reference. On
 * success regions_p[i] holds one reference each.
 */
ote_status_t ote_mem_table_register(ote_mem_table_t *table, const ote_mem_desc_t *descs,
                                    size_t count, ote_region_t **regions_p);
/*
 * Drop one user reference. NOT_REGISTERED for a handle that is not (or no
 * longer) registered, INVALID_PARAM for engine-owned memory (use _free).
 */
ote_status_t ote_mem_table_deregister(ote_mem_table_t *table, ote_region_t *region);

/*
 * Engine-owned host memory: page-aligned, bound to the NUMA node of
 * location "cpu:N" (NULL or "*": first-touch placement), registered in the
 * same call. Freed by ote_mem_table_free() once no slice uses it.
 */
ote_status_t ote_mem_table_alloc(ote_mem_table_t *table, size_t length, const char *location,
                                 unsigned access, void **addr_p, ote_region_t **region_p);
/* BUSY while other registrations lie inside the memory. */
ote_status_t ote_mem_table_free(ote_mem_table_t *table, ote_region_t *region);

/*
 * Find a region in the table covering [addr, addr+length) with every bit of
 * access, and take a data-path reference on it. Errors: NOT_REGISTERED (addr
 * is in no region), OUT_OF_BOUNDS (regions contain addr but none covers the
 * whole range), ACCESS (a covering region lacks the access), INVALID_PARAM
 * (length 0 or wrapping).
 */
ote_status_t ote_mem_region_acquire(ote_mem_table_t *table, uint64_t addr, size_t length,
                                    unsigned access, ote_region_t **region_p);
void         ote_mem_region_get(ote_region_t *region);
void         ote_mem_region_put(ote_region_t *region);
/*
 * Does region (one the caller holds a reference on) cover [addr,
 * addr+length) with every bit of access? What ote_mem_region_acquire would
 * find for the range, without the table's lock; whether the region is still
 * registered is for ote_mem_region_access_begin to say.
 */
bool         ote_mem_region_covers(const ote_region_t *region, uint64_t addr, size_t length,
                                   unsigned access);
/*
 * Another reference on region (the caller holds one) for [addr,
 * addr+length) when it covers the range with access and is still in its
 * table: what ote_mem_region_acquire would take, without the table's lock.
 * false: nothing taken (ask ote_mem_region_acquire).
 */
bool         ote_mem_region_reacquire(ote_region_t *region, uint64_t addr, size_t length,
                                      unsigned access);

/*
 * Bracket a CPU access (recv into, send from) to a region's memory. begin
 * returns false once the region has been deregistered: the caller must not
 * touch the memory. Deregistration waits for accesses in progress, so once
 * ote_mem_table_deregister() returns nothing lands in the memory.
 */
bool         ote_mem_region_access_begin(ote_region_t *region);
void         ote_mem_region_access_end(ote_region_t *region);
/*
 * Wait for a moment with no access bracketed on region: every access in
 * progress when called has ended, and what it did happens before what the
 * caller does next. Accesses are single system calls: the wait is short.
 */
void         ote_mem_region_access_wait(ote_region_t *region);

/*
 * Exports (see ote_mem_export_t). add: false once the region's
 * deregistration began (the peer must not map it). remove: the owner takes
 * an export back (the peer unmapped by itself or its connection closed);
 * false when deregistration has taken it already, and will call wait.
 * Once deregistration of an exported region returns, every peer that
 * mapped it has unmapped it or lost its connection, and the owner's range
 * no longer maps the shared pages (engine-owned memory is detached from
 * its memfd): nothing a peer writes later lands in it.
 */
bool ote_mem_region_export_add(ote_region_t *region, ote_mem_export_t *x);
bool ote_mem_region_export_remove(ote_region_t *region, ote_mem_export_t *x);

/* Visit the table's regions in address order under the read lock. */
typedef void (*ote_mem_visit_cb_t)(ote_region_t *region, void *arg);
void ote_mem_table_visit(ote_mem_table_t *table, ote_mem_visit_cb_t cb, void *arg);
/*
 * The same in registration order (oldest first), as peers list a segment's
 * regions (ote_segment_regions). OTE_ERR_NO_MEMORY (nothing visited) when
 * the order cannot be taken.
 */
ote_status_t ote_mem_table_visit_ordered(ote_mem_table_t *table, ote_mem_visit_cb_t cb,
                                         void *arg);

/* ---- registration cache ------------------------------------------------- */

typedef struct {
    uint64_t hits;          /* registrations served by an existing entry    */
    uint64_t misses;        /* registrations that registered on the mds     */
    uint64_t evictions;     /* unreferenced entries dropped for the limits   */
    uint64_t invalidations; /* entries dropped or retired: memory unmapped  */
    size_t   entries;       /* entries alive, referenced or not             */
    size_t   unreferenced;  /* of which kept for reuse only                 */
    size_t   unreferenced_bytes;
    bool     retains;       /* unreferenced entries are kept at all         */
} ote_mem_rcache_stats_t;

void ote_mem_table_rcache_stats(ote_mem_table_t *table, ote_mem_rcache_stats_t *stats_p);

/*
 * [addr, addr+length) was unmapped or remapped: no later registration may
 * reuse a registration of it. Safe to call from any thread, also from
 * inside a memory-event hook; takes effect before the next registration.
 */
void ote_mem_table_invalidate(ote_mem_table_t *table, uint64_t addr, size_t length);

/* ---- memory types and locations ----------------------------------------- */

/* Memory-type detection (CUDA, then host): the one entry point every layer uses. */
ote_status_t ote_mem_detect(const void *addr, size_t length, unsigned *mem_type_p,
                            char *location, size_t location_len);
/* Page-locked (CUDA-pinned) host memory: detected by the same path. */
bool         ote_mem_host_pinned(const void *addr, size_t length);
/* Check a location string names a device that exists; gives its mem type. */
ote_status_t ote_mem_location_parse(const char *location, unsigned *mem_type_p);
/* Number of online NUMA nodes of this host (at least 1). */
int          ote_mem_numa_nodes(void);
/* Whether NUMA node node is online. */
bool         ote_mem_numa_node_online(int node);

/*
 * Page-aligned host memory, bound to NUMA node numa (-1 = first touch);
 * *alloc_len_p is the length to give ote_mem_host_free().
 */
ote_status_t ote_mem_host_alloc(size_t length, int numa, void **addr_p, size_t *alloc_len_p);
void         ote_mem_host_free(void *addr, size_t alloc_len);
/*
 * The memfd behind memory from ote_mem_host_alloc at base (sealed against
 * shrinking and growing; owned by the allocation), or -1.
 */
int          ote_mem_host_memfd(const void *base);
/* Replace the shared pages at base with private ones (contents lost). */
void         ote_mem_host_detach(void *base, size_t alloc_len);

/*
 * Engine-owned memory of any kind a location names: "cpu:N" (or NULL/"*"),
 * "cuda:N" (GPU memory), "cuda_host:N" (pinned host memory near GPU N).
 * *kind_p says how to free it; *mem_type_p what it is.
 */
enum { OTE_MEM_OWNED_HOST = 0, OTE_MEM_OWNED_CUDA = 1, OTE_MEM_OWNED_CUDA_HOST = 2 };
ote_status_t ote_mem_owned_alloc(const char *location, size_t length, void **addr_p,
                                 size_t *alloc_len_p, int *kind_p, unsigned *mem_type_p);
void         ote_mem_owned_free(int kind, void *addr, size_t alloc_len);

#endif
