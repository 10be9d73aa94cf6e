/*
 * tcp data header decoder: never reads past 32 bytes, and what it accepts
 * re-encodes exactly; a WRITEV's table (the bytes after the header) decodes
 * to entries within the limits that add up to the header's length.
 */
#include "fuzz.h"

#include "base/wire_util.h"
#include "uct_ext/stream/stream.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t max = size > 0 ? (size_t)1 << (data[size - 1] & 31) : 65536;
    uint8_t again[OTE_STREAM_HDR_LEN];
    ote_stream_hdr_t h, h2;
    uint8_t *copy;

    /* An exact-size copy, so a read past the header is caught by ASan. */
    copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    if (ote_stream_hdr_decode(copy, size, max, &h) == OTE_OK) {
        FUZZ_CHECK(size >= OTE_STREAM_HDR_LEN);
        FUZZ_CHECK(h.type >= OTE_STREAM_HELLO && h.type <= OTE_STREAM_TYPE_MAX);
        FUZZ_CHECK(h.status <= OTE_OK && ote_status_is_known(h.status));
        if (h.type == OTE_STREAM_WRITE || h.type == OTE_STREAM_READ_REQ) {
            FUZZ_CHECK(h.length > 0 && h.length <= max);
            FUZZ_CHECK(h.addr + h.length >= h.addr);
            FUZZ_CHECK(h.status == OTE_OK);
        }
        if (h.type == OTE_STREAM_PUT_REF || h.type == OTE_STREAM_GET_REF) {
            FUZZ_CHECK(h.length > 0 && h.length <= max);
            FUZZ_CHECK(h.addr + h.length >= h.addr);
            FUZZ_CHECK(h.status == OTE_OK);
            FUZZ_CHECK(ote_stream_hdr_inline_len(&h) == OTE_STREAM_REF_TRAILER_LEN);
        }
        if (h.type == OTE_STREAM_PROBE)
            FUZZ_CHECK(h.length == OTE_STREAM_PROBE_LEN && h.addr == 0 && h.status == OTE_OK);
        if ((h.type == OTE_STREAM_READ_RESP || h.type == OTE_STREAM_REF_ACK) && h.status != OTE_OK)
            FUZZ_CHECK(h.length == 0);
        if (h.type == OTE_STREAM_PROBE_ACK)
            FUZZ_CHECK(h.length == 0 && (h.status == OTE_OK || h.addr == 0));
        if (h.type == OTE_STREAM_WRITEV || h.type == OTE_STREAM_READV_REQ) {
            ote_stream_vec_entry_t v[OTE_STREAM_WRITEV_MAX];
            size_t tlen = ote_stream_hdr_inline_len(&h);
            uint64_t sum = 0;

            FUZZ_CHECK(h.addr >= 2 && h.addr <= OTE_STREAM_WRITEV_MAX && h.status == OTE_OK);
            FUZZ_CHECK(tlen == h.addr * OTE_STREAM_WRITEV_ENTRY_LEN);
            if (size - OTE_STREAM_HDR_LEN >= tlen &&
                ote_stream_vec_decode(&h, copy + OTE_STREAM_HDR_LEN, max, v) == OTE_OK) {
                for (size_t i = 0; i < h.addr; i++) {
                    FUZZ_CHECK(v[i].length > 0 && v[i].length <= max &&
                               v[i].length <= OTE_STREAM_WRITEV_ENTRY_MAX);
                    FUZZ_CHECK(v[i].addr + v[i].length >= v[i].addr);
                    sum += v[i].length;
                }
                FUZZ_CHECK(sum == h.length);
            }
        }
        if (h.type == OTE_STREAM_READV_RESP)
            FUZZ_CHECK(h.addr >= 2 && h.addr <= OTE_STREAM_WRITEV_MAX &&
                       h.length <= h.addr * OTE_STREAM_WRITEV_ENTRY_MAX);
        if ((h.type == OTE_STREAM_WRITEV_ACK || h.type == OTE_STREAM_READV_RESP) &&
            h.status != OTE_OK) {
            ote_status_t st[OTE_STREAM_WRITEV_MAX];
            size_t tlen = ote_stream_hdr_inline_len(&h);

            FUZZ_CHECK(tlen == h.addr * OTE_STREAM_WRITEV_STATUS_LEN);
            FUZZ_CHECK(h.type == OTE_STREAM_READV_RESP ||
                       h.length == 0); /* a READV_RESP carries what was read */
            if (size - OTE_STREAM_HDR_LEN >= tlen &&
                ote_stream_vec_status_decode(&h, copy + OTE_STREAM_HDR_LEN, st) == OTE_OK) {
                for (size_t i = 0; i < h.addr; i++)
                    FUZZ_CHECK(st[i] <= OTE_OK && ote_status_is_known(st[i]));
            }
        }
        /*
         * What travels with a header is handled with it once all of it is in
         * a connection's receive buffer: it must fit there (the buffer's
         * size from the code, not a copy of today's largest trailer).
         */
        FUZZ_CHECK(OTE_STREAM_HDR_LEN + ote_stream_hdr_inline_len(&h) <= OTE_STREAM_RXBUF);
        ote_stream_hdr_encode(&h, again);
        FUZZ_CHECK(memcmp(again, copy, OTE_STREAM_HDR_LEN) == 0);
        FUZZ_CHECK(ote_stream_hdr_decode(again, sizeof(again), max, &h2) == OTE_OK);
        FUZZ_CHECK(h.type == h2.type && h.status == h2.status && h.id == h2.id &&
                   h.addr == h2.addr && h.length == h2.length);
    }
    free(copy);
    return 0;
}
