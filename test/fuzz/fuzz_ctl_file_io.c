/*
 * FILE_IO request and FILE_IO_ACK payload decoders (a peer's exported
 * file). The first input byte picks the decoder (even: request, odd:
 * answer, given to both the answer by the control plane and the answer by
 * rails), the rest is the payload: ops, lengths, wrapping ranges, data
 * that must match the length exactly, the address and name of a request by
 * rails, and an exact re-encoding of whatever is accepted.
 */
#include "fuzz.h"

#include "core/wire/ctl_msg.h"

#include <string.h>

static void request(const uint8_t *p, size_t len)
{
    ote_ctl_file_io_t m;

    if (ote_ctl_file_io_decode(p, len, &m) == OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(len <= OTE_CTL_FILE_IO_MAX_LEN);
        /*
         * Known ops, and the op byte of a request by rails: the encoder
         * refuses other ops and the exact re-encoding (below) compares the
         * byte, so no list of ops is kept here.
         */
        FUZZ_CHECK(m.length > 0 && m.length <= OTE_CTL_FILE_IO_MAX_BYTES);
        FUZZ_CHECK(m.offset + m.length > m.offset && m.file_id != 0);
        if (m.rails)
            FUZZ_CHECK(m.data == NULL && len <= OTE_CTL_FILE_IO_RAILS_MAX_LEN &&
                       m.local + m.length >= m.local && m.name[0] != '\0' &&
                       len == OTE_CTL_FILE_IO_HDR_LEN + 8 + 1 + strlen(m.name));
        else if (m.op == OTE_CTL_FILE_IO_WRITE)
            FUZZ_CHECK(m.data != NULL && m.data + m.length == p + len &&
                       len == OTE_CTL_FILE_IO_HDR_LEN + m.length);
        else
            FUZZ_CHECK(m.data == NULL && len == OTE_CTL_FILE_IO_HDR_LEN);
        FUZZ_CHECK_REENCODES(ote_ctl_file_io_encode(&m, &out), out, p, len);
    }
}

/* The answer to a request by rails: exactly status and count. */
static void rails_answer(const uint8_t *p, size_t len)
{
    ote_status_t status;
    size_t n;

    if (ote_ctl_file_io_rails_ack_decode(p, len, OTE_CTL_FILE_IO_MAX_BYTES, &status, &n) ==
        OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(status != OTE_INPROGRESS && n <= OTE_CTL_FILE_IO_MAX_BYTES);
        FUZZ_CHECK(len == OTE_CTL_FILE_IO_ACK_HDR_LEN);
        FUZZ_CHECK_REENCODES(ote_ctl_file_io_rails_ack_encode(status, (uint32_t)n, &out),
                             out, p, len);
        if (n > 0)
            FUZZ_CHECK(ote_ctl_file_io_rails_ack_decode(p, len, n - 1, &status, &n) ==
                       OTE_ERR_PROTOCOL);
    }
}

static void answer(const uint8_t *p, size_t len)
{
    const uint8_t *data;
    ote_status_t status;
    size_t n;

    rails_answer(p, len);
    if (ote_ctl_file_io_ack_decode(p, len, OTE_CTL_FILE_IO_MAX_BYTES, &status, &data, &n) ==
        OTE_OK) {
        ote_buf_t out = {0};

        FUZZ_CHECK(status != OTE_INPROGRESS && n <= OTE_CTL_FILE_IO_MAX_BYTES);
        FUZZ_CHECK(len == OTE_CTL_FILE_IO_ACK_HDR_LEN + n);
        FUZZ_CHECK(n == 0 || (data >= p && data + n == p + len));
        FUZZ_CHECK_REENCODES(ote_ctl_file_io_ack_encode(status, data, n, &out), out, p, len);
        /* A smaller bound refuses what exceeds it. */
        if (n > 0)
            FUZZ_CHECK(ote_ctl_file_io_ack_decode(p, len, n - 1, &status, &data, &n) ==
                       OTE_ERR_PROTOCOL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fuzz_request_or_answer(data, size, request, answer);
}
