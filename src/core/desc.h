/*
 * Segment descriptor: what a peer publishes about itself (name, instance,
 * host identity, control-plane address, transports with addresses, memory domains, regions with
 * rkeys). Binary, versioned, little-endian; the decoder trusts nothing.
 */
#ifndef OTE_CORE_DESC_H
#define OTE_CORE_DESC_H

#include "mem/mem.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_DESC_MAGIC      0x4445544fu /* "OTED" */
#define OTE_DESC_VERSION    2   /* 2 added the control address; 1 is still read */
#define OTE_DESC_NAME_MAX   255
#define OTE_DESC_MAX_TLS    64
#define OTE_DESC_MAX_MDS    OTE_MEM_MAX_MDS

typedef struct {
    char     tl_name[OTE_TL_NAME_MAX];
    char     dev_name[OTE_TL_DEV_MAX];
    uint8_t  addr[OTE_TL_ADDR_MAX];
    size_t   addr_len;
} ote_desc_tl_t;

typedef struct {
    uint8_t        md_index;
    uint16_t       length;
    const uint8_t *data; /* points into the descriptor's blob */
} ote_desc_rkey_t;

typedef struct {
    uint64_t        addr;
    uint64_t        length;
    unsigned        access;
    char            location[OTE_MEM_LOCATION_MAX];
    uint8_t         num_rkeys;
    ote_desc_rkey_t rkeys[OTE_DESC_MAX_MDS];
} ote_desc_region_t;

typedef struct {
    uint64_t           instance_id;
    char               name[OTE_DESC_NAME_MAX + 1];
    char               host_id[OTE_DESC_NAME_MAX + 1];
    char               ctl_addr[OTE_DESC_NAME_MAX + 1]; /* control listener, host:port; */
                                                        /* empty in version 1           */
    size_t             num_tls;
    ote_desc_tl_t      tls[OTE_DESC_MAX_TLS];
    size_t             num_mds;
    char               mds[OTE_DESC_MAX_MDS][OTE_TL_NAME_MAX * 2];
    size_t             num_regions;
    ote_desc_region_t *regions; /* sorted by addr */
    uint8_t           *blob;    /* the encoded bytes rkeys point into */
    size_t             blob_len;
    atomic_long        refs;    /* holders: a segment, and tasks using its rkeys */
} ote_desc_t;

/* Growable byte buffer for encoders. */
typedef struct {
    uint8_t *data;
    size_t   len, cap;
    int      failed;
} ote_buf_t;

void ote_buf_put(ote_buf_t *b, const void *p, size_t len);
void ote_buf_put_u8(ote_buf_t *b, uint8_t v);
void ote_buf_put_u16(ote_buf_t *b, uint16_t v);
void ote_buf_put_u32(ote_buf_t *b, uint32_t v);
void ote_buf_put_u64(ote_buf_t *b, uint64_t v);
void ote_buf_put_str8(ote_buf_t *b, const char *s);  /* u8 length + bytes  */
void ote_buf_put_str16(ote_buf_t *b, const char *s); /* u16 length + bytes */

/* Bounds-checked reader for decoders. */
typedef struct {
    const uint8_t *p;
    size_t         left;
    int            failed;
} ote_rd_t;

uint8_t  ote_rd_u8(ote_rd_t *r);
uint16_t ote_rd_u16(ote_rd_t *r);
uint32_t ote_rd_u32(ote_rd_t *r);
uint64_t ote_rd_u64(ote_rd_t *r);
const uint8_t *ote_rd_bytes(ote_rd_t *r, size_t len);
/* Length-prefixed string into out (max includes NUL); fails if too long or has NUL. */
void     ote_rd_str8(ote_rd_t *r, char *out, size_t max);
void     ote_rd_str16(ote_rd_t *r, char *out, size_t max);

/* Encode an engine's descriptor. desc->regions/blob are ignored; regions from table. */
ote_status_t ote_desc_encode(const ote_desc_t *desc, ote_mem_table_t *table, ote_buf_t *out);
/* Decode; on success *desc_p is owned by the caller (ote_desc_free). */
ote_status_t ote_desc_decode(const void *buf, size_t len, ote_desc_t **desc_p);
void         ote_desc_free(ote_desc_t *desc);
/* Region covering [addr, addr+len) in a decoded descriptor, or NULL. */
const ote_desc_region_t *ote_desc_find_region(const ote_desc_t *desc, uint64_t addr, size_t len);

#endif
