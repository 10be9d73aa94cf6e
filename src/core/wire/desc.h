/*
 * src/core/wire/: the codecs of what engines send each other: the segment
 * descriptor (desc.c, this header) and the control-plane messages
 * (ctl_msg.c, ctl_msg.h). They decode untrusted bytes with bounds checks.
 * May call: proto, mem, base; nothing of core (the protocols' message
 * types come from their services, OTE_CTL_PROTO_SERVICES in ctl_msg.h).
 *
 * Segment descriptor: what a peer publishes about itself (name, instance,
 * host identity, control-plane address, transports with addresses, memory domains, regions with
 * rkeys). Binary, versioned, little-endian; the decoder trusts nothing.
 */
#ifndef OTE_CORE_DESC_H
#define OTE_CORE_DESC_H

#include "mem/mem.h"
#include "proto/proto.h"
#include "uct_ext/tl.h"
#include "base/buf.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_DESC_MAGIC      0x4445544fu /* "OTED" */
/*
 * 4 added the transports the engine runs, 3 exported files, 2 the control
 * address; 1 to 3 are still read
 */
#define OTE_DESC_VERSION    4
#define OTE_DESC_NAME_MAX   255
#define OTE_DESC_MAX_TLS    64
#define OTE_DESC_MAX_MDS    OTE_MEM_MAX_MDS
/* The access bits a descriptor's regions and exports may carry; others are refused. */
#define OTE_DESC_ACCESS_MASK ((unsigned)(OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE))

typedef struct {
    char     tl_name[OTE_TL_NAME_MAX];
    char     dev_name[OTE_TL_DEV_MAX];
    uint8_t  addr[OTE_TL_ADDR_MAX];
    size_t   addr_len;
} ote_desc_tl_t;

/* A region's remote key; data points into the descriptor's blob. */
typedef ote_proto_rkey_t ote_desc_rkey_t;

/*
 * A region of a decoded descriptor: 48 bytes on 64-bit hosts
 * (test_desc_index checks it). Its rkeys lie apart, in the descriptor's
 * rkey array, and its location is a string the descriptor shares between
 * the regions that name the same one, so that a search over many regions
 * touches small entries.
 */
typedef struct {
    uint64_t               addr;
    uint64_t               length;
    const char            *location; /* the descriptor's (decoded), or a literal */
    const ote_desc_rkey_t *rkeys;    /* num_rkeys of them, in the descriptor's rkeys */
    unsigned               access;
    uint32_t               order; /* place in the encoding: the peer's registration order */
    uint8_t                num_rkeys;
} ote_desc_region_t;

/* A location string regions of a decoded descriptor share. */
typedef struct ote_desc_loc {
    struct ote_desc_loc *next;
    char                 name[OTE_MEM_LOCATION_MAX];
} ote_desc_loc_t;

/* A file the engine exports (ote_file_export): "export" or "export/file". */
typedef struct {
    char     name[OTE_DESC_NAME_MAX + 1];
    uint64_t id;     /* what FILE_IO requests name it by */
    uint64_t size;   /* the bound of every access */
    unsigned access; /* OTE_ACCESS_REMOTE_*, not 0 */
} ote_desc_export_t;

typedef struct {
    uint64_t           instance_id;
    char               name[OTE_DESC_NAME_MAX + 1];
    char               host_id[OTE_DESC_NAME_MAX + 1];
    char               ctl_addr[OTE_DESC_NAME_MAX + 1]; /* control listener, host:port; */
                                                        /* empty in version 1           */
    size_t             num_tls;
    /*
     * num_tls of them (at most OTE_DESC_MAX_TLS), allocated to that count
     * (freed by ote_desc_free): a segment holds its peer's decoded
     * descriptor, and a table of OTE_DESC_MAX_TLS entries inline was 39 KiB
     * per open segment where one or two transports are used.
     */
    ote_desc_tl_t     *tls;
    size_t             num_mds;
    char               mds[OTE_DESC_MAX_MDS][OTE_TL_NAME_MAX * 2];
    size_t             num_regions;
    ote_desc_region_t *regions; /* sorted by addr; .order gives the peer's order */
    ote_desc_rkey_t   *rkeys;   /* every region's rkeys (decoded descriptors) */
    size_t             num_rkeys;
    ote_desc_loc_t    *locs;    /* the distinct locations regions point to */
    size_t             num_exports;
    ote_desc_export_t *exports; /* files it exports (version 3) */
    /*
     * The transports the engine runs (version 4; 0 in older ones), each
     * once, whether or not a device of it is in tls now: one whose links
     * are all down there leaves tls until a link comes back, and stays
     * here. num_runs of them (at most OTE_DESC_MAX_TLS), allocated to that
     * count.
     */
    size_t             num_runs;
    char             (*runs)[OTE_TL_NAME_MAX];
    uint8_t           *blob;    /* the encoded bytes rkeys point into */
    size_t             blob_len;
    atomic_long        refs;    /* holders: a segment, and tasks using its rkeys */
    /*
     * The lookup index ote_desc_decode builds (NULL in a descriptor made
     * otherwise: lookups then read regions): starts[i] and ends[i] are
     * regions[i].addr and addr + length, packed so that a search touches
     * 8 bytes per step, not a region entry; tops[j] is starts[j *
     * OTE_DESC_TOP_STRIDE], a small first level that stays in the cache.
     */
    uint64_t          *starts;
    uint64_t          *ends;
    uint64_t          *tops;
    size_t             num_tops;
} ote_desc_t;

#define OTE_DESC_TOP_STRIDE 16

/*
 * Encode an engine's descriptor. desc->regions/blob are ignored; regions
 * from table; exports from desc.
 */
ote_status_t ote_desc_encode(const ote_desc_t *desc, ote_mem_table_t *table, ote_buf_t *out);
/*
 * A descriptor made here, not decoded (ote_desc_free frees it): the
 * header of an engine (instance, name, host_id; ctl_addr, or none with
 * NULL), room for num_regions regions (num_regions says so; none with 0),
 * one reference. NULL: no memory.
 */
ote_desc_t  *ote_desc_new(uint64_t instance, const char *name, const char *host_id,
                          const char *ctl_addr, size_t num_regions);
/* Decode; on success *desc_p is owned by the caller (ote_desc_free). */
ote_status_t ote_desc_decode(const void *buf, size_t len, ote_desc_t **desc_p);
void         ote_desc_free(ote_desc_t *desc);
/* The bytes a decoded descriptor holds on the heap (its struct and arrays). */
size_t       ote_desc_footprint(const ote_desc_t *desc);
/* How many regions (sorted by addr) start at or below addr. */
size_t ote_desc_regions_upto(const ote_desc_t *desc, uint64_t addr);
/* Region covering [addr, addr+len) in a decoded descriptor, or NULL. */
const ote_desc_region_t *ote_desc_find_region(const ote_desc_t *desc, uint64_t addr, size_t len);
/* Start and end (addr + length) of regions[i], from the index when there is one. */
static inline uint64_t ote_desc_start(const ote_desc_t *d, size_t i)
{
    return d->starts != NULL ? d->starts[i] : d->regions[i].addr;
}

static inline uint64_t ote_desc_end(const ote_desc_t *d, size_t i)
{
    return d->ends != NULL ? d->ends[i] : d->regions[i].addr + d->regions[i].length;
}

/*
 * Whether d says its engine runs transport tl_name: it lists it among the
 * transports it runs (version 4), or (older descriptors) a device of it.
 */
bool ote_desc_runs(const ote_desc_t *desc, const char *tl_name);
/*
 * Add tl_name to d->runs (allocated by the caller to OTE_DESC_MAX_TLS
 * entries) unless it is there; one over that count is not added.
 */
void ote_desc_runs_add(ote_desc_t *desc, const char *tl_name);
/* Whether d lists a device of transport tl_name now. */
bool ote_desc_has_device(const ote_desc_t *desc, const char *tl_name);

/* The export entry of that name, or NULL. */
const ote_desc_export_t *ote_desc_find_export(const ote_desc_t *desc, const char *name);

#endif
