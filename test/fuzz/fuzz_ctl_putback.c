/*
 * PUTBACK request and PUTBACK_ACK payload decoders (READ over put-only
 * transports). The first input byte picks the decoder (even: request, odd:
 * answer), the rest is the payload: lengths, wrapping ranges, the name,
 * and an exact re-encoding of whatever is accepted.
 */
#include "fuzz.h"

#include "core/wire/ctl_msg.h"

#include <string.h>

static void request(const uint8_t *p, size_t len)
{
    ote_ctl_putback_t m;

    if (ote_ctl_putback_decode(p, len, &m) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(len <= OTE_CTL_PUTBACK_MAX_LEN);
        FUZZ_CHECK(m.length > 0 && m.length <= OTE_CTL_PUTBACK_MAX_BYTES);
        FUZZ_CHECK(m.remote + m.length > m.remote);
        FUZZ_CHECK(m.local + m.length > m.local);
        FUZZ_CHECK(m.name[0] != '\0' && strlen(m.name) <= 255);
        FUZZ_CHECK_REENCODES(ote_ctl_putback_encode(&m, &out), out, p, len);
    }
}

static void answer(const uint8_t *p, size_t len)
{
    ote_status_t status;
    uint64_t id;

    if (ote_ctl_putback_ack_decode(p, len, &status, &id) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(len == OTE_CTL_PUTBACK_ACK_LEN);
        FUZZ_CHECK(status != OTE_INPROGRESS);
        FUZZ_CHECK_REENCODES(ote_ctl_putback_ack_encode(status, id, &out), out, p, len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_request_or_answer(data, size, request, answer);
}
