/*
 * Memory layer: what memory exists, who may touch it, how each memory
 * domain reaches it.
 *
 * A region (struct ote_mem, the public ote_mem_h) is one registration. The
 * region table finds, for a range and an access, the region that covers the
 * whole range, in O(log n) under a read lock. Lifetimes:
 *  - refs: user references (ote_mem_register of the same range adds one);
 *    when they drop to zero the region leaves the table at once;
 *  - life: one for being in the table plus one per data-path user; when it
 *    drops to zero the region is deregistered from every memory domain and
 *    engine-owned memory is freed. So backing memory stays registered while
 *    any slice still uses it, and nothing looks it up after removal.
 */
#ifndef OTE_MEM_MEM_H
#define OTE_MEM_MEM_H

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

struct ote_md {
    const char         *name;      /* e.g. "uct:posix", unique per engine */
    const ote_md_ops_t *ops;
    unsigned            mem_types; /* OTE_MEM_TYPE_* it can register      */
    void               *priv;
};

typedef struct ote_mem ote_region_t;

struct ote_mem {
    uint64_t         addr;
    size_t           length;
    char             location[OTE_MEM_LOCATION_MAX];
    unsigned         mem_type;
    unsigned         access;
    bool             owned;       /* engine-owned: freed with the region       */
    void            *owned_base;  /* what to free                              */
    size_t           owned_length;
    unsigned         refs;        /* user references; under the table lock     */
    atomic_long      life;        /* in-table + data-path users                */
    atomic_bool      in_table;
    atomic_int       accessors;   /* data-path CPU accesses in progress        */
    struct ote_mem_table *table;
    void            *memh[OTE_MEM_MAX_MDS];
    uint64_t         seq;         /* registration order, for descriptors       */
};

typedef struct ote_mem_table ote_mem_table_t;

typedef struct {
    bool   rcache_enable;
    size_t rcache_max_size;
    long   rcache_max_regions;
} ote_mem_table_params_t;

ote_status_t ote_mem_table_create(const ote_mem_table_params_t *params,
                                  ote_mem_table_t **table_p);
/* Releases every region still registered. */
void         ote_mem_table_destroy(ote_mem_table_t *table);

/* Add a memory domain; only before the first registration. */
ote_status_t ote_mem_table_add_md(ote_mem_table_t *table, ote_md_t *md);
size_t       ote_mem_table_num_mds(const ote_mem_table_t *table);
ote_md_t    *ote_mem_table_md(const ote_mem_table_t *table, size_t index);

/* Number of live regions. */
size_t       ote_mem_table_count(ote_mem_table_t *table);
/* Changes every time a region is added or removed (descriptor freshness). */
uint64_t     ote_mem_table_generation(ote_mem_table_t *table);

/*
 * Register count descriptors, all or nothing. location NULL or "*" is
 * detected. On success regions_p[i] holds one reference each.
 */
ote_status_t ote_mem_table_register(ote_mem_table_t *table, const ote_mem_desc_t *descs,
                                    size_t count, ote_region_t **regions_p);
/* Register engine-owned memory (freed with the region). */
ote_status_t ote_mem_table_register_owned(ote_mem_table_t *table, void *addr, size_t length,
                                          const char *location, unsigned access,
                                          ote_region_t **region_p);
/* Drop one user reference. */
ote_status_t ote_mem_table_deregister(ote_mem_table_t *table, ote_region_t *region);

/*
 * Find a live region covering [addr, addr+length) with every bit of access,
 * and take a data-path reference on it. Errors: NOT_REGISTERED (addr is in
 * no region), OUT_OF_BOUNDS (regions contain addr but none covers the whole
 * range), ACCESS (a covering region lacks the access), INVALID_PARAM
 * (length 0 or wrapping).
 */
ote_status_t ote_mem_region_acquire(ote_mem_table_t *table, uint64_t addr, size_t length,
                                    unsigned access, ote_region_t **region_p);
void         ote_mem_region_get(ote_region_t *region);
void         ote_mem_region_put(ote_region_t *region);

/*
 * Bracket a CPU access (recv into, send from) to a region's memory. begin
 * returns false once the region has been deregistered: the caller must not
 * touch the memory. Deregistration waits for accesses in progress, so once
 * ote_mem_table_deregister() returns nothing lands in the memory.
 */
bool         ote_mem_region_access_begin(ote_region_t *region);
void         ote_mem_region_access_end(ote_region_t *region);

/* Visit live regions in address order under the read lock. */
typedef void (*ote_mem_visit_cb_t)(ote_region_t *region, void *arg);
void ote_mem_table_visit(ote_mem_table_t *table, ote_mem_visit_cb_t cb, void *arg);

/* Memory-type detection: the one entry point every layer uses. */
typedef ote_status_t (*ote_mem_detect_fn_t)(const void *addr, size_t length,
                                            unsigned *mem_type_p, char *location,
                                            size_t location_len);
/* A detector for non-host memory (e.g. CUDA) consulted before the host one. */
void         ote_mem_set_device_detector(ote_mem_detect_fn_t fn);
ote_status_t ote_mem_detect(const void *addr, size_t length, unsigned *mem_type_p,
                            char *location, size_t location_len);
/* Check a location string names a device that exists; gives its mem type. */
ote_status_t ote_mem_location_parse(const char *location, unsigned *mem_type_p);
/* NUMA node count of this host (at least 1). */
int          ote_mem_numa_nodes(void);

/* Page-aligned host memory, bound to NUMA node numa (-1 = any). */
ote_status_t ote_mem_host_alloc(size_t length, int numa, void **addr_p, size_t *alloc_len_p);
void         ote_mem_host_free(void *addr, size_t alloc_len);

#endif
