/*
 * Control-plane header decoder and the listener's per-type length policy:
 * what is accepted re-encodes exactly, every accepted type has a row in
 * the code's type table, and no request may announce more than its row
 * allows.
 */
#include "fuzz.h"

#include "base/wire_util.h"
#include "core/ctl/ctl_int.h"
#include "core/wire/ctl_msg.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t max = 64u << 20, req_max;
    const ote_ctl_type_info_t *info;
    uint8_t again[OTE_CTL_HDR_LEN];
    ote_ctl_hdr_t h;
    ote_status_t st;
    uint8_t *copy = malloc(size ? size : 1);

    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    if (ote_ctl_hdr_decode(copy, size, max, &h) == OTE_OK) {
        FUZZ_CHECK(size >= OTE_CTL_HDR_LEN);
        FUZZ_CHECK(h.type >= 1 && ote_ctl_type_info(h.type) != NULL);
        FUZZ_CHECK(h.length <= max);
        ote_ctl_hdr_encode(&h, again);
        FUZZ_CHECK(memcmp(again, copy, OTE_CTL_HDR_LEN) == 0);
        /*
         * Which types are requests, and their limits, come from the code's
         * own table (ote_ctl_type_info): a list kept here fell behind when
         * PUTBACK_ACK and FILE_IO_ACK were added.
         */
        info = ote_ctl_type_info(h.type);
        FUZZ_CHECK(info != NULL && info->name != NULL);
        FUZZ_CHECK(info->request || info->response);
        if (ote_ctl_request_max_len(h.type, max, &req_max) == OTE_OK) {
            FUZZ_CHECK(info->request);
            FUZZ_CHECK(req_max <= max);
            FUZZ_CHECK(req_max == (info->request_max < max ? info->request_max : max));
            FUZZ_CHECK(h.type != OTE_CTL_GET_DESC || req_max == 0);
            FUZZ_CHECK(h.type != OTE_CTL_NOTIFY || req_max == OTE_CTL_NOTIFY_MAX_LEN);
            FUZZ_CHECK(h.type != OTE_CTL_STAGE || req_max <= OTE_CTL_STAGE_MAX_LEN);
            /* The listener serves it through its handler table (ctl_int.h, proto/ctl_target.h). */
            FUZZ_CHECK(ote_ctl_handler_find(h.type) != NULL);
            FUZZ_CHECK(ote_ctl_handler_find(h.type)->type == h.type);
        } else {
            /* Refused as a request: a type that only travels as a response. */
            FUZZ_CHECK(!info->request && info->response);
            FUZZ_CHECK(ote_ctl_handler_find(h.type) == NULL);
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
