/*
 * NOTIFY and NOTIFY_BATCH payload decoders (each input goes through both):
 * bounds, sender name, counts, numbers that grow, and an exact re-encoding;
 * and the NOTIFY_BATCH_ACK decoder on the first bytes.
 */
#include "fuzz.h"

#include "core/wire/ctl_msg.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ote_ctl_notify_t n;
    uint8_t *copy = malloc(size ? size : 1);

    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    if (ote_ctl_notify_decode(copy, size, &n) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(size <= OTE_CTL_NOTIFY_MAX_LEN);
        FUZZ_CHECK(n.length <= OTE_NOTIFY_MAX);
        FUZZ_CHECK(strlen(n.from) < sizeof(n.from));
        FUZZ_CHECK(n.data >= copy && n.data + n.length == copy + size);
        FUZZ_CHECK(ote_ctl_notify_encode(&n, &out) == OTE_OK);
        FUZZ_CHECK(out.len == size && memcmp(out.data, copy, size) == 0);
        free(out.data);
    }
    {
        ote_ctl_notify_batch_t *m = malloc(sizeof(*m));

        if (m != NULL && ote_ctl_notify_batch_decode(copy, size, m) == OTE_OK) {
            ote_buf_t out = {0};

            FUZZ_CHECK(size <= OTE_CTL_NOTIFY_BATCH_MAX_LEN);
            FUZZ_CHECK(m->count >= 1 && m->count <= OTE_CTL_NOTIFY_BATCH_MAX);
            FUZZ_CHECK(strlen(m->from) < sizeof(m->from));
            for (size_t i = 0; i < m->count; i++) {
                FUZZ_CHECK(m->items[i].length <= OTE_NOTIFY_MAX);
                FUZZ_CHECK(m->items[i].seq > (i > 0 ? m->items[i - 1].seq : 0));
                FUZZ_CHECK(m->items[i].data >= copy &&
                           m->items[i].data + m->items[i].length <= copy + size);
            }
            FUZZ_CHECK(ote_ctl_notify_batch_encode(m, &out) == OTE_OK);
            FUZZ_CHECK(out.len == size && memcmp(out.data, copy, size) == 0);
            free(out.data);
        }
        free(m);
    }
    {
        ote_status_t st;
        size_t q;

        if (ote_ctl_notify_batch_ack_decode(copy, size < 6 ? size : 6, &st, &q) == OTE_OK) {
            uint8_t a[6];

            FUZZ_CHECK(size >= 6 && q <= OTE_CTL_NOTIFY_BATCH_MAX);
            /* Only what a receiver answers. */
            FUZZ_CHECK(st == OTE_OK || st == OTE_ERR_BUSY || st == OTE_ERR_NO_MEMORY ||
                       (st == OTE_ERR_PEER_RESTARTED && q == 0));
            FUZZ_CHECK(ote_ctl_notify_batch_ack_encode(st, q, a) == OTE_OK);
            FUZZ_CHECK(memcmp(a, copy, 6) == 0);
        }
    }
    free(copy);
    return 0;
}
