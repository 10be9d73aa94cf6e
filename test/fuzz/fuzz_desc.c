/*
 * Segment descriptor decoder: every count and length bounded, strings
 * terminated, regions well formed and sorted, region lookups on the
 * result stay inside what was decoded, exported files named and bounded.
 */
#include "fuzz.h"

#include "core/wire/desc.h"
#include "base/wire_util.h"
#include "uct_ext/tcp/tcp.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ote_desc_t *d = NULL;

    if (ote_desc_decode(data, size, &d) != OTE_OK)
        return 0;
    FUZZ_CHECK(d->num_tls <= OTE_DESC_MAX_TLS && d->num_mds <= OTE_DESC_MAX_MDS);
    FUZZ_CHECK(strlen(d->name) <= OTE_DESC_NAME_MAX && strlen(d->host_id) <= OTE_DESC_NAME_MAX);
    for (size_t i = 0; i < d->num_tls; i++) {
        FUZZ_CHECK(d->tls[i].addr_len <= OTE_TL_ADDR_MAX);
        FUZZ_CHECK(strlen(d->tls[i].tl_name) < OTE_TL_NAME_MAX);
        /* A native tcp address: its list of addresses, each with a port. */
        if (strcmp(d->tls[i].tl_name, "tcp") == 0) {
            ote_stream_sockaddr_t a[OTE_TCP_MAX_ADDRS];
            size_t n = 0;

            if (ote_tcp_addr_unpack(d->tls[i].addr, d->tls[i].addr_len, a, OTE_TCP_MAX_ADDRS,
                                    &n) == OTE_OK) {
                FUZZ_CHECK(n >= 1 && n <= OTE_TCP_MAX_ADDRS);
                for (size_t k = 0; k < n; k++)
                    FUZZ_CHECK((a[k].ss.ss_family == AF_INET &&
                                a[k].len == sizeof(struct sockaddr_in)) ||
                               (a[k].ss.ss_family == AF_INET6 &&
                                a[k].len == sizeof(struct sockaddr_in6)));
            }
        }
    }
    for (size_t i = 0; i < d->num_regions; i++) {
        const ote_desc_region_t *r = &d->regions[i];
        const ote_desc_region_t *f;

        FUZZ_CHECK(r->length > 0 && r->addr + r->length > r->addr);
        FUZZ_CHECK(i == 0 || d->regions[i - 1].addr <= r->addr);
        FUZZ_CHECK(r->num_rkeys <= OTE_DESC_MAX_MDS);
        FUZZ_CHECK(!(r->access & ~OTE_DESC_ACCESS_MASK));
        for (size_t k = 0; k < r->num_rkeys; k++) {
            FUZZ_CHECK(r->rkeys[k].md_index < d->num_mds);
            FUZZ_CHECK(r->rkeys[k].data >= d->blob &&
                       r->rkeys[k].data + r->rkeys[k].length <= d->blob + d->blob_len);
        }
        /* Lookups of the region itself and of ranges around it. */
        f = ote_desc_find_region(d, r->addr, (size_t)r->length);
        FUZZ_CHECK(f != NULL && f->addr <= r->addr && f->addr + f->length >= r->addr + r->length);
        f = ote_desc_find_region(d, r->addr + r->length - 1, 2);
        FUZZ_CHECK(f == NULL || (f->addr <= r->addr + r->length - 1 &&
                                 f->addr + f->length >= r->addr + r->length + 1));
    }
    for (size_t i = 0; i < d->num_exports; i++) {
        const ote_desc_export_t *x = &d->exports[i];

        FUZZ_CHECK(x->name[0] != '\0' && strlen(x->name) <= OTE_DESC_NAME_MAX);
        FUZZ_CHECK(strchr(x->name, '@') == NULL && x->id != 0);
        FUZZ_CHECK(x->access != 0 && !(x->access & ~OTE_DESC_ACCESS_MASK));
        FUZZ_CHECK(ote_desc_find_export(d, x->name) != NULL);
    }
    FUZZ_CHECK(ote_desc_find_region(d, UINT64_MAX - 1, 4) == NULL);
    FUZZ_CHECK(ote_desc_find_region(d, 0, 0) == NULL);
    ote_desc_free(d);
    return 0;
}
