/*
 * Decoders of bytes read from a metadata store. The first input byte picks
 * one, the rest is what the store returned:
 *   0: a record, checked with the cluster key "fuzz-key" (MAC path)
 *   1: a record, checked without a key
 *   2: an etcd range response (with its mod_revision)   3: an etcd lease response
 *   4: an etcd txn response     5: base64
 * Whatever is accepted must stay inside the input, and a record's
 * descriptor goes on to the descriptor decoder, as in a lookup. Inputs 0
 * and 1 also go through ote_meta_record_open (a record handed over as
 * bytes, ote_segment_open_desc), which must agree with those two steps.
 */
#include "fuzz.h"

#include "base/config.h"
#include "base/log.h"
#include "core/wire/desc.h"
#include "core/meta/meta.h"

#include <stdlib.h>
#include <string.h>

static ote_auth_t *fuzz_auth(void)
{
    static ote_auth_t *auth;

    if (auth == NULL) {
        ote_auth_params_t cfg = {0};

        if (ote_auth_create(&cfg, &auth) != OTE_OK)
            abort();
        if (ote_auth_supported())
            ote_auth_set_key(auth, "fuzz-key", 8);
    }
    return auth;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* A refused record or store answer is logged; millions of them are not wanted. */
    ote_log_set_level(OTE_LOG_NONE);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *body = data + 1, *desc;
    size_t len = size ? size - 1 : 0, dlen;
    uint8_t *val = NULL;
    size_t vlen  = 0;
    int64_t a = 0, b = 0;
    bool ok;

    if (size == 0)
        return 0;
    switch (data[0] % 6) {
    case 0:
    case 1:
        if (ote_meta_record_check(data[0] % 6 == 0 ? fuzz_auth() : NULL, "decode-0", body, len,
                                  &desc, &dlen) == OTE_OK) {
            ote_desc_t *d = NULL;

            FUZZ_CHECK(desc >= body && dlen <= len && desc + dlen <= body + len);
            if (ote_desc_decode(desc, dlen, &d) == OTE_OK) {
                FUZZ_CHECK(strlen(d->ctl_addr) <= OTE_DESC_NAME_MAX);
                ote_desc_free(d);
            }
        }
        {
            ote_desc_t *d = NULL;
            ote_auth_t *auth = data[0] % 6 == 0 ? fuzz_auth() : NULL;

            if (ote_meta_record_open(auth, body, len, &d) == OTE_OK) {
                FUZZ_CHECK(ote_meta_record_check(auth, d->name, body, len, &desc, &dlen) ==
                           OTE_OK);
                FUZZ_CHECK(strlen(d->name) <= OTE_DESC_NAME_MAX);
                FUZZ_CHECK(d->blob_len <= dlen);
                ote_desc_free(d);
            }
        }
        break;
    case 2:
        /* With the mod_revision a takeover compares (decode_range is this without it). */
        if (ote_meta_etcd_decode_range_rev((const char *)body, len, &val, &vlen, &a, &b) ==
            OTE_OK) {
            FUZZ_CHECK(val != NULL && vlen <= len && b > 0);
            free(val);
        }
        break;
    case 3:
        if (ote_meta_etcd_decode_lease((const char *)body, len, &a, &b) == OTE_OK)
            FUZZ_CHECK(b > 0);
        break;
    case 4:
        ote_meta_etcd_decode_txn((const char *)body, len, &ok, &a);
        break;
    case 5:
        if (ote_meta_base64_decode((const char *)body, len, &val, &vlen) == OTE_OK) {
            char *again = ote_meta_base64_encode(val, vlen);

            /* Re-encoded, it is exactly as long as the input (padding included). */
            FUZZ_CHECK(vlen <= len / 4 * 3);
            FUZZ_CHECK(again != NULL && strlen(again) == len);
            free(again);
            free(val);
        }
        break;
    }
    return 0;
}
