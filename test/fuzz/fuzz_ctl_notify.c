/* NOTIFY payload decoder: bounds, sender name, and an exact re-encoding. */
#include "fuzz.h"

#include "core/ctl_msg.h"

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
    free(copy);
    return 0;
}
