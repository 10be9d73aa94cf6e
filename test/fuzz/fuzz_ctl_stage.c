/*
 * STAGE request and STAGE_ACK payload decoders (remote staging). The first
 * input byte picks the decoder (even: request, odd: answer), the rest is
 * the payload: bounds, counts, directions, wrapping ranges, and an exact
 * re-encoding of whatever is accepted.
 */
#include "fuzz.h"

#include "core/wire/ctl_msg.h"

#include <string.h>

static void request(const uint8_t *p, size_t len)
{
    ote_ctl_stage_t *m = malloc(sizeof(*m));

    if (m != NULL && ote_ctl_stage_decode(p, len, m) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(len <= OTE_CTL_STAGE_MAX_LEN);
        FUZZ_CHECK(m->count >= 1 && m->count <= OTE_CTL_STAGE_MAX);
        /*
         * Known ops and directions: the encoder refuses any other, and what
         * is accepted must encode (below), so no list of them is kept here.
         */
        for (size_t i = 0; m->op == OTE_CTL_STAGE_DELEGATE && i < m->count; i++) {
            FUZZ_CHECK(m->e[i].length > 0);
            FUZZ_CHECK(m->e[i].gpu + m->e[i].length > m->e[i].gpu);
            FUZZ_CHECK(m->e[i].chunk + m->e[i].length > m->e[i].chunk);
        }
        FUZZ_CHECK_REENCODES(ote_ctl_stage_encode(m, &out), out, p, len);
    }
    free(m);
}

static void answer(const uint8_t *p, size_t len)
{
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    ote_status_t status;
    uint32_t cs;
    size_t n;

    if (ote_ctl_stage_ack_decode(p, len, &status, &cs, chunks, &n) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(n <= OTE_CTL_STAGE_MAX);
        FUZZ_CHECK(status == OTE_OK || n == 0);
        FUZZ_CHECK(n == 0 || cs > 0);
        FUZZ_CHECK_REENCODES(ote_ctl_stage_ack_encode(status, cs, chunks, n, &out), out, p, len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_request_or_answer(data, size, request, answer);
}
