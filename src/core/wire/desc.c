#include "desc.h"

#include "base/dlist.h"
#include "base/wire_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- descriptor ---------------------------------------------------------- */

typedef struct {
    ote_buf_t       *out;
    ote_mem_table_t *table;
    size_t           num_mds; /* the descriptor's: rkeys of later mds wait for the next one */
    uint32_t         count;
} encode_ctx_t;

static void encode_region(ote_region_t *r, void *arg)
{
    encode_ctx_t *ctx = arg;
    size_t n_mds      = ote_mem_table_num_mds(ctx->table);
    uint8_t rkey[OTE_MEM_RKEY_MAX];
    size_t count_pos, rlen;
    uint8_t nk = 0;

    if (n_mds > ctx->num_mds)
        n_mds = ctx->num_mds;
    ote_buf_put_u64(ctx->out, r->addr);
    ote_buf_put_u64(ctx->out, r->length);
    ote_buf_put_u32(ctx->out, r->access);
    ote_buf_put_str8(ctx->out, r->location);
    count_pos = ctx->out->len;
    ote_buf_put_u8(ctx->out, 0);
    for (size_t i = 0; i < n_mds; i++) {
        ote_md_t *md = ote_mem_table_md(ctx->table, i);

        if (r->memh[i] == NULL)
            continue;
        if (md->ops->rkey_pack(md, r->memh[i], rkey, sizeof(rkey), &rlen) != OTE_OK)
            continue;
        ote_buf_put_u8(ctx->out, (uint8_t)i);
        ote_buf_put_u16(ctx->out, (uint16_t)rlen);
        ote_buf_put(ctx->out, rkey, rlen);
        nk++;
    }
    if (!ctx->out->failed)
        ctx->out->data[count_pos] = nk;
    ctx->count++;
}

ote_status_t ote_desc_encode(const ote_desc_t *d, ote_mem_table_t *table, ote_buf_t *out)
{
    encode_ctx_t ctx = {.out = out, .table = table, .num_mds = d->num_mds};
    size_t count_pos;

    ote_buf_put_u32(out, OTE_DESC_MAGIC);
    ote_buf_put_u16(out, OTE_DESC_VERSION);
    ote_buf_put_u16(out, 0);
    ote_buf_put_u64(out, d->instance_id);
    ote_buf_put_str8(out, d->name);
    ote_buf_put_str8(out, d->host_id);
    ote_buf_put_str8(out, d->ctl_addr);
    ote_buf_put_u16(out, (uint16_t)d->num_tls);
    for (size_t i = 0; i < d->num_tls; i++) {
        ote_buf_put_str8(out, d->tls[i].tl_name);
        ote_buf_put_str8(out, d->tls[i].dev_name);
        ote_buf_put_u16(out, (uint16_t)d->tls[i].addr_len);
        ote_buf_put(out, d->tls[i].addr, d->tls[i].addr_len);
    }
    ote_buf_put_u16(out, (uint16_t)d->num_mds);
    for (size_t i = 0; i < d->num_mds; i++)
        ote_buf_put_str8(out, d->mds[i]);
    count_pos = out->len;
    ote_buf_put_u32(out, 0);
    /* Registration order: peers list the regions in it (ote_segment_regions). */
    if (table != NULL && ote_mem_table_visit_ordered(table, encode_region, &ctx) != OTE_OK)
        return OTE_ERR_NO_MEMORY;
    ote_buf_put_u32(out, (uint32_t)d->num_exports);
    for (size_t i = 0; i < d->num_exports; i++) {
        ote_buf_put_str8(out, d->exports[i].name);
        ote_buf_put_u64(out, d->exports[i].id);
        ote_buf_put_u64(out, d->exports[i].size);
        ote_buf_put_u8(out, (uint8_t)d->exports[i].access);
    }
    ote_buf_put_u16(out, (uint16_t)d->num_runs);
    for (size_t i = 0; i < d->num_runs; i++)
        ote_buf_put_str8(out, d->runs[i]);
    if (out->failed)
        return OTE_ERR_NO_MEMORY;
    ote_put_u32(out->data + count_pos, ctx.count);
    return OTE_OK;
}

ote_desc_t *ote_desc_new(uint64_t instance, const char *name, const char *host_id,
                         const char *ctl_addr, size_t num_regions)
{
    ote_desc_t *d = calloc(1, sizeof(*d));

    if (d == NULL)
        return NULL;
    if (num_regions > 0 && (d->regions = calloc(num_regions, sizeof(*d->regions))) == NULL) {
        free(d);
        return NULL;
    }
    d->num_regions = num_regions;
    d->instance_id = instance;
    snprintf(d->name, sizeof(d->name), "%s", name);
    snprintf(d->host_id, sizeof(d->host_id), "%s", host_id);
    snprintf(d->ctl_addr, sizeof(d->ctl_addr), "%s", ctl_addr != NULL ? ctl_addr : "");
    atomic_init(&d->refs, 1);
    return d;
}

void ote_desc_free(ote_desc_t *d)
{
    if (d == NULL)
        return;
    free(d->tls);
    free(d->regions);
    free(d->rkeys);
    OTE_LIST_FREE(d->locs, next);
    free(d->starts);
    free(d->ends);
    free(d->tops);
    free(d->exports);
    free(d->runs);
    free(d->blob);
    free(d);
}

size_t ote_desc_footprint(const ote_desc_t *d)
{
    size_t n = sizeof(*d) + d->num_tls * sizeof(*d->tls) + d->blob_len +
               d->num_regions * (sizeof(*d->regions) + 2 * sizeof(uint64_t)) +
               d->num_tops * sizeof(uint64_t) + d->num_rkeys * sizeof(*d->rkeys) +
               d->num_exports * sizeof(*d->exports) + d->num_runs * sizeof(*d->runs);

    for (const ote_desc_loc_t *l = d->locs; l != NULL; l = l->next)
        n += sizeof(*l);
    return n;
}

/* A region's sort key: by address, then length, then the peer's order (stable). */
typedef struct {
    uint64_t addr, length;
    uint32_t order;
} region_key_t;

static int region_key_cmp(const void *a, const void *b)
{
    const region_key_t *x = a, *y = b;

    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    if (x->length != y->length)
        return x->length < y->length ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

/*
 * Sort d's regions by (addr, length), equal ones in the peer's order: the
 * small keys are sorted and the entries (48 bytes each) moved once,
 * not at every step of the sort; none moved when the peer registered in
 * address order. False when out of memory.
 */
static bool regions_sort(ote_desc_t *d)
{
    size_t n = d->num_regions;
    region_key_t *keys;
    ote_desc_region_t *sorted;
    bool in_order = true;

    for (size_t i = 1; i < n && in_order; i++) {
        const ote_desc_region_t *p = &d->regions[i - 1], *q = &d->regions[i];

        in_order = p->addr < q->addr || (p->addr == q->addr && p->length <= q->length);
    }
    if (in_order)
        return true;
    keys   = malloc(n * sizeof(*keys));
    sorted = malloc(n * sizeof(*sorted));
    if (keys == NULL || sorted == NULL) {
        free(keys);
        free(sorted);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = (region_key_t){d->regions[i].addr, d->regions[i].length, (uint32_t)i};
    qsort(keys, n, sizeof(*keys), region_key_cmp);
    for (size_t i = 0; i < n; i++)
        sorted[i] = d->regions[keys[i].order];
    free(keys);
    free(d->regions);
    d->regions = sorted;
    return true;
}

/* Smallest encoded region: addr, length, access, empty location, no rkeys. */
#define DESC_REGION_MIN (8 + 8 + 4 + 1 + 1)
/* Smallest encoded export: a 1-byte name, id, size, access. */
#define DESC_EXPORT_MIN (1 + 1 + 8 + 8 + 1)

/*
 * How many rkeys the n regions at r hold, read ahead without decoding;
 * what cannot be read counts as none (the decoding proper fails there).
 */
static size_t count_rkeys(ote_rd_t r, uint32_t n)
{
    size_t total = 0;

    for (uint32_t i = 0; i < n && !r.failed; i++) {
        uint8_t k;

        ote_rd_bytes(&r, 8 + 8 + 4);
        ote_rd_bytes(&r, ote_rd_u8(&r));
        k = ote_rd_u8(&r);
        for (uint8_t j = 0; j < k && !r.failed; j++) {
            ote_rd_u8(&r);
            ote_rd_bytes(&r, ote_rd_u16(&r));
        }
        if (!r.failed)
            total += k;
    }
    return total;
}

/* Recently met locations of a decoding, the newest first. */
#define DESC_LOC_RECENT 8

/*
 * The descriptor's copy of location name: one of the recent ones, or a new
 * one (a descriptor with many distinct locations keeps some twice: the
 * search stays bounded). NULL when out of memory.
 */
static const char *loc_intern(ote_desc_t *d, const char *name, ote_desc_loc_t **recent)
{
    ote_desc_loc_t *l;

    for (size_t i = 0; i < DESC_LOC_RECENT && recent[i] != NULL; i++) {
        if (strcmp(recent[i]->name, name) == 0) {
            l = recent[i];
            memmove(recent + 1, recent, i * sizeof(*recent));
            recent[0] = l;
            return l->name;
        }
    }
    l = malloc(sizeof(*l));
    if (l == NULL)
        return NULL;
    snprintf(l->name, sizeof(l->name), "%s", name);
    l->next = d->locs;
    d->locs = l;
    memmove(recent + 1, recent, (DESC_LOC_RECENT - 1) * sizeof(*recent));
    recent[0] = l;
    return l->name;
}

/*
 * Zeroed room for the n entries of an array whose count r just gave, each at
 * least min_wire bytes on the wire: NULL when r failed, when n entries cannot
 * be in what is left of it, or when memory is out.
 */
static void *rd_array(const ote_rd_t *r, size_t n, size_t min_wire, size_t elem)
{
    if (r->failed || n > r->left / min_wire)
        return NULL;
    return calloc(n ? n : 1, elem);
}

/* Version 3: the exported files (a name without '@', an id not 0, some access). */
static bool decode_exports(ote_rd_t *r, ote_desc_t *d)
{
    uint32_t n = ote_rd_u32(r);

    d->exports = rd_array(r, n, DESC_EXPORT_MIN, sizeof(*d->exports));
    if (d->exports == NULL)
        return false;
    d->num_exports = n;
    for (uint32_t i = 0; i < n; i++) {
        ote_desc_export_t *x = &d->exports[i];

        ote_rd_str8(r, x->name, sizeof(x->name));
        x->id     = ote_rd_u64(r);
        x->size   = ote_rd_u64(r);
        x->access = ote_rd_u8(r);
        if (r->failed || x->name[0] == '\0' || strchr(x->name, '@') != NULL || x->id == 0 ||
            x->access == 0 ||
            (x->access & ~OTE_DESC_ACCESS_MASK))
            return false;
    }
    return true;
}

/*
 * Version 4: the transports the engine runs, each named (not empty) and
 * once, at most OTE_DESC_MAX_TLS of them.
 */
static bool decode_runs(ote_rd_t *r, ote_desc_t *d)
{
    uint16_t n = ote_rd_u16(r);

    if (n > OTE_DESC_MAX_TLS)
        return false;
    d->runs = rd_array(r, n, 2, sizeof(*d->runs));
    if (d->runs == NULL)
        return false;
    d->num_runs = n;
    for (uint16_t i = 0; i < n; i++) {
        ote_rd_str8(r, d->runs[i], sizeof(d->runs[i]));
        if (r->failed || d->runs[i][0] == '\0')
            return false;
        for (uint16_t j = 0; j < i; j++) {
            if (strcmp(d->runs[j], d->runs[i]) == 0)
                return false;
        }
    }
    return true;
}

/* The lookup index of d's sorted regions (desc.h); false when out of memory. */
static bool index_build(ote_desc_t *d)
{
    size_t n = d->num_regions;

    d->num_tops = (n + OTE_DESC_TOP_STRIDE - 1) / OTE_DESC_TOP_STRIDE;
    d->starts   = malloc((n ? n : 1) * sizeof(*d->starts));
    d->ends     = malloc((n ? n : 1) * sizeof(*d->ends));
    d->tops     = malloc((d->num_tops ? d->num_tops : 1) * sizeof(*d->tops));
    if (d->starts == NULL || d->ends == NULL || d->tops == NULL)
        return false;
    for (size_t i = 0; i < n; i++) {
        d->starts[i] = d->regions[i].addr;
        d->ends[i]   = d->regions[i].addr + d->regions[i].length; /* no wrap: decode checked */
    }
    for (size_t j = 0; j < d->num_tops; j++)
        d->tops[j] = d->starts[j * OTE_DESC_TOP_STRIDE];
    return true;
}

ote_status_t ote_desc_decode(const void *buf, size_t len, ote_desc_t **desc_p)
{
    ote_desc_t *d;
    ote_rd_t r;
    uint32_t n;
    uint16_t version;

    if (buf == NULL || len < 16)
        return OTE_ERR_PROTOCOL;
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return OTE_ERR_NO_MEMORY;
    d->blob = malloc(len);
    if (d->blob == NULL) {
        free(d);
        return OTE_ERR_NO_MEMORY;
    }
    memcpy(d->blob, buf, len);
    d->blob_len = len;
    r = (ote_rd_t){.p = d->blob, .left = len};

    if (ote_rd_u32(&r) != OTE_DESC_MAGIC)
        goto err;
    version = ote_rd_u16(&r);
    if (version < 1 || version > OTE_DESC_VERSION)
        goto err;
    ote_rd_u16(&r);
    d->instance_id = ote_rd_u64(&r);
    ote_rd_str8(&r, d->name, sizeof(d->name));
    ote_rd_str8(&r, d->host_id, sizeof(d->host_id));
    if (version >= 2)
        ote_rd_str8(&r, d->ctl_addr, sizeof(d->ctl_addr));
    d->num_tls = ote_rd_u16(&r);
    if (r.failed || d->num_tls > OTE_DESC_MAX_TLS)
        goto err;
    d->tls = calloc(d->num_tls ? d->num_tls : 1, sizeof(*d->tls));
    if (d->tls == NULL)
        goto err_nomem;
    for (size_t i = 0; i < d->num_tls; i++) {
        const uint8_t *a;

        ote_rd_str8(&r, d->tls[i].tl_name, sizeof(d->tls[i].tl_name));
        ote_rd_str8(&r, d->tls[i].dev_name, sizeof(d->tls[i].dev_name));
        d->tls[i].addr_len = ote_rd_u16(&r);
        if (d->tls[i].addr_len > OTE_TL_ADDR_MAX)
            goto err;
        a = ote_rd_bytes(&r, d->tls[i].addr_len);
        if (a == NULL)
            goto err;
        memcpy(d->tls[i].addr, a, d->tls[i].addr_len);
    }
    d->num_mds = ote_rd_u16(&r);
    if (r.failed || d->num_mds > OTE_DESC_MAX_MDS)
        goto err;
    for (size_t i = 0; i < d->num_mds; i++)
        ote_rd_str8(&r, d->mds[i], sizeof(d->mds[i]));
    n          = ote_rd_u32(&r);
    d->regions = rd_array(&r, n, DESC_REGION_MIN, sizeof(*d->regions));
    if (d->regions == NULL)
        goto err;
    d->num_regions = n;
    /* Every rkey in one array, counted first: the regions point into it. */
    {
        size_t cap = count_rkeys(r, n), used = 0;
        ote_desc_loc_t *recent[DESC_LOC_RECENT] = {NULL};

        d->rkeys = malloc((cap ? cap : 1) * sizeof(*d->rkeys));
        if (d->rkeys == NULL)
            goto err_nomem;
        for (uint32_t i = 0; i < n; i++) {
            ote_desc_region_t *reg = &d->regions[i];
            ote_desc_rkey_t *keys  = d->rkeys + used;
            char loc[OTE_MEM_LOCATION_MAX];

            reg->order  = i;
            reg->addr   = ote_rd_u64(&r);
            reg->length = ote_rd_u64(&r);
            reg->access = ote_rd_u32(&r);
            ote_rd_str8(&r, loc, sizeof(loc));
            reg->num_rkeys = ote_rd_u8(&r);
            if (r.failed || reg->length == 0 || reg->addr + reg->length < reg->addr ||
                (reg->access & ~OTE_DESC_ACCESS_MASK) ||
                reg->num_rkeys > OTE_DESC_MAX_MDS || reg->num_rkeys > cap - used)
                goto err;
            reg->location = loc_intern(d, loc, recent);
            if (reg->location == NULL)
                goto err_nomem;
            for (uint8_t k = 0; k < reg->num_rkeys; k++) {
                keys[k].md_index = ote_rd_u8(&r);
                keys[k].length   = ote_rd_u16(&r);
                if (keys[k].md_index >= d->num_mds || keys[k].length > OTE_MEM_RKEY_MAX)
                    goto err;
                keys[k].data = ote_rd_bytes(&r, keys[k].length);
                if (r.failed)
                    goto err;
            }
            reg->rkeys = keys;
            used += reg->num_rkeys;
        }
        d->num_rkeys = used;
    }
    if (version >= 3 && !decode_exports(&r, d))
        goto err;
    if (version >= 4 && !decode_runs(&r, d))
        goto err;
    if (ote_rd_end(&r) != OTE_OK)
        goto err;
    if (!regions_sort(d) || !index_build(d))
        goto err_nomem;
    *desc_p = d;
    return OTE_OK;

err:
    ote_desc_free(d);
    return OTE_ERR_PROTOCOL;
err_nomem:
    ote_desc_free(d);
    return OTE_ERR_NO_MEMORY;
}

/*
 * How many of a[lo, hi) (sorted) are <= v, plus lo. Without a branch on
 * the data (a conditional move per step): a random lookup would mispredict
 * half of them.
 */
static size_t count_le(const uint64_t *a, size_t lo, size_t hi, uint64_t v)
{
    const uint64_t *base = a + lo;
    size_t n             = hi - lo;

    if (n == 0)
        return lo;
    while (n > 1) {
        size_t half = n / 2;

        base = base[half] <= v ? base + half : base;
        n -= half;
    }
    return (size_t)(base - a) + (*base <= v);
}

size_t ote_desc_regions_upto(const ote_desc_t *d, uint64_t addr)
{
    size_t j, lo, hi;

    if (d->starts == NULL) {
        /* A descriptor made without the index: search the entries. */
        lo = 0;
        hi = d->num_regions;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;

            if (d->regions[mid].addr <= addr)
                lo = mid + 1;
            else
                hi = mid;
        }
        return lo;
    }
    /* The block of OTE_DESC_TOP_STRIDE starts that holds the answer, then within it. */
    j = count_le(d->tops, 0, d->num_tops, addr);
    if (j == 0)
        return 0;
    lo = (j - 1) * OTE_DESC_TOP_STRIDE + 1; /* starts[lo - 1] <= addr */
    hi = lo - 1 + OTE_DESC_TOP_STRIDE;      /* starts[hi] > addr when hi < n */
    if (hi > d->num_regions)
        hi = d->num_regions;
    return count_le(d->starts, lo, hi, addr);
}

const ote_desc_region_t *ote_desc_find_region(const ote_desc_t *d, uint64_t addr, size_t len)
{
    size_t lo;

    if (len == 0 || addr + len < addr)
        return NULL;
    /*
     * Last region with start <= addr, then look back for one that covers:
     * the index's ends only, the region entry once it is found.
     */
    lo = ote_desc_regions_upto(d, addr);
    for (size_t i = lo; i-- > 0;) {
        if (ote_desc_end(d, i) >= addr + len)
            return &d->regions[i];
        if (lo - i > 64)
            break; /* nested regions deeper than this are not worth a scan */
    }
    return NULL;
}

void ote_desc_runs_add(ote_desc_t *d, const char *tl_name)
{
    for (size_t k = 0; k < d->num_runs; k++) {
        if (strcmp(d->runs[k], tl_name) == 0)
            return;
    }
    if (d->num_runs < OTE_DESC_MAX_TLS && tl_name[0] != '\0')
        snprintf(d->runs[d->num_runs++], sizeof(d->runs[0]), "%s", tl_name);
}

bool ote_desc_has_device(const ote_desc_t *d, const char *tl_name)
{
    for (size_t k = 0; k < d->num_tls; k++) {
        if (strcmp(d->tls[k].tl_name, tl_name) == 0)
            return true;
    }
    return false;
}

bool ote_desc_runs(const ote_desc_t *d, const char *tl_name)
{
    for (size_t k = 0; k < d->num_runs; k++) {
        if (strcmp(d->runs[k], tl_name) == 0)
            return true;
    }
    return ote_desc_has_device(d, tl_name);
}

const ote_desc_export_t *ote_desc_find_export(const ote_desc_t *d, const char *name)
{
    for (size_t i = 0; i < d->num_exports; i++) {
        if (strcmp(d->exports[i].name, name) == 0)
            return &d->exports[i];
    }
    return NULL;
}
