/*
 * PUTBACK request and PUTBACK_ACK payload decoders (READ over put-only
 * transports). The first input byte picks the decoder (even: request, odd:
 * answer), the rest is the payload: lengths, wrapping ranges, the name,
 * and an exact re-encoding of whatever is accepted.
 */
#include "fuzz.h"

#include "core/ctl_msg.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy;
    size_t len;

    if (size == 0)
        return 0;
    len  = size - 1;
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 1, len);
    if ((data[0] & 1) == 0) {
        ote_ctl_putback_t m;

        if (ote_ctl_putback_decode(copy, len, &m) == OTE_OK) {
            ote_buf_t out = {0};

            FUZZ_CHECK(len <= OTE_CTL_PUTBACK_MAX_LEN);
            FUZZ_CHECK(m.length > 0 && m.length <= OTE_CTL_PUTBACK_MAX_BYTES);
            FUZZ_CHECK(m.remote + m.length > m.remote);
            FUZZ_CHECK(m.local + m.length > m.local);
            FUZZ_CHECK(m.name[0] != '\0' && strlen(m.name) <= 255);
            FUZZ_CHECK(ote_ctl_putback_encode(&m, &out) == OTE_OK);
            FUZZ_CHECK(out.len == len && memcmp(out.data, copy, len) == 0);
            free(out.data);
        }
    } else {
        ote_status_t status;
        uint64_t id;

        if (ote_ctl_putback_ack_decode(copy, len, &status, &id) == OTE_OK) {
            ote_buf_t out = {0};

            FUZZ_CHECK(len == OTE_CTL_PUTBACK_ACK_LEN);
            FUZZ_CHECK(status != OTE_INPROGRESS);
            FUZZ_CHECK(ote_ctl_putback_ack_encode(status, id, &out) == OTE_OK);
            FUZZ_CHECK(out.len == len && memcmp(out.data, copy, len) == 0);
            free(out.data);
        }
    }
    free(copy);
    return 0;
}
