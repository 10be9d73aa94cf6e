/*
 * Control-plane header decoder and the listener's per-type length policy:
 * what is accepted re-encodes exactly, and no request may announce more
 * than its type allows.
 */
#include "fuzz.h"

#include "base/wire_util.h"
#include "core/ctl_msg.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t max = 64u << 20, req_max;
    uint8_t again[OTE_CTL_HDR_LEN];
    ote_ctl_hdr_t h;
    ote_status_t st;
    uint8_t *copy = malloc(size ? size : 1);

    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    if (ote_ctl_hdr_decode(copy, size, max, &h) == OTE_OK) {
        FUZZ_CHECK(size >= OTE_CTL_HDR_LEN);
        FUZZ_CHECK(h.type >= 1 && h.type <= OTE_CTL_TYPE_MAX);
        FUZZ_CHECK(h.length <= max);
        ote_ctl_hdr_encode(&h, again);
        FUZZ_CHECK(memcmp(again, copy, OTE_CTL_HDR_LEN) == 0);
        if (ote_ctl_request_max_len(h.type, max, &req_max) == OTE_OK) {
            FUZZ_CHECK(req_max <= max);
            FUZZ_CHECK(h.type != OTE_CTL_GET_DESC || req_max == 0);
            FUZZ_CHECK(h.type != OTE_CTL_NOTIFY || req_max == OTE_CTL_NOTIFY_MAX_LEN);
            FUZZ_CHECK(h.type != OTE_CTL_STAGE || req_max <= OTE_CTL_STAGE_MAX_LEN);
        } else {
            FUZZ_CHECK(h.type == OTE_CTL_DESC || h.type == OTE_CTL_NOTIFY_ACK ||
                       h.type == OTE_CTL_AUTH_DONE || h.type == OTE_CTL_CONNECT_ACK ||
                       h.type == OTE_CTL_STAGE_ACK);
        }
        /* A status-only response follows some headers. */
        if (ote_ctl_status_decode(copy + OTE_CTL_HDR_LEN, size - OTE_CTL_HDR_LEN, &st) ==
            OTE_OK) {
            FUZZ_CHECK(size - OTE_CTL_HDR_LEN == 4);
            FUZZ_CHECK(ote_status_is_known(st));
        }
    }
    free(copy);
    return 0;
}
