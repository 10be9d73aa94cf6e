/*
 * Remote staging's target pool (proto/stage_target.c) on the CUDA test
 * double: a chunk its owner did not unpin (its control connection went, or
 * it stayed pinned past the timeout) is not pinned again for another
 * connection until one transfer timeout has passed, since the old owner's
 * transfers into it may still land until then; a chunk unpinned by its
 * owner is free at once. A connection names only chunks it pinned itself.
 */
#include "cuda_test.h"
#include "mem/mem.h"
#include "proto/stage.h"
#include "proto/stage_msg.h"
#include "base/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TIMEOUT_MS 300

static ote_status_t req(ote_stage_target_t *t, uintptr_t conn, uint8_t op, const uint64_t *in,
                        size_t n, uint64_t *out, size_t *count_p)
{
    ote_ctl_stage_t m = {.op = op, .count = n};
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    uint32_t chunk_size;
    ote_status_t st;

    for (size_t i = 0; op != OTE_CTL_STAGE_PIN && i < n; i++)
        m.e[i].chunk = in[i];
    st = ote_stage_target_request(t, conn, &m, chunks, count_p, &chunk_size);
    if (out != NULL)
        memcpy(out, chunks, *count_p * sizeof(*out));
    return st;
}

static void test_retired_chunks_stay_quiet(void **state)
{
    ote_mem_table_params_t mp = {0};
    ote_stage_config_t cfg    = {.chunk_size = 4096, .slots = 2};
    ote_mem_table_t *table;
    ote_stage_target_t *t;
    uint64_t x[2], y[2];
    size_t n;

    (void)state;
    assert_int_equal(ote_mem_table_create(&mp, &table), OTE_OK);
    assert_int_equal(ote_stage_target_create(table, &cfg, TIMEOUT_MS, &t), OTE_OK);

    /* Connection 1 pins both chunks, then goes away without unpinning them. */
    assert_int_equal(req(t, 1, OTE_CTL_STAGE_PIN, NULL, 2, x, &n), OTE_OK);
    assert_int_equal(n, 2);
    ote_stage_target_conn_gone(t, 1);
    assert_int_equal(ote_stage_target_pinned_now(), 0);
    /* Another connection gets neither until a transfer timeout has passed. */
    assert_int_equal(req(t, 2, OTE_CTL_STAGE_PIN, NULL, 2, y, &n), OTE_ERR_BUSY);
    assert_int_equal(req(t, 2, OTE_CTL_STAGE_UNPIN, x, 1, NULL, &n), OTE_ERR_INVALID_PARAM);
    usleep((TIMEOUT_MS + 50) * 1000);
    assert_int_equal(req(t, 2, OTE_CTL_STAGE_PIN, NULL, 2, y, &n), OTE_OK);
    assert_int_equal(n, 2);

    /* Unpinned by their owner: free at once, and only the owner names them. */
    assert_int_equal(req(t, 3, OTE_CTL_STAGE_UNPIN, y, 2, NULL, &n), OTE_ERR_INVALID_PARAM);
    assert_int_equal(req(t, 2, OTE_CTL_STAGE_UNPIN, y, 2, NULL, &n), OTE_OK);
    assert_int_equal(req(t, 3, OTE_CTL_STAGE_PIN, NULL, 2, x, &n), OTE_OK);
    assert_int_equal(n, 2);

    /* Released by the sweep (pinned past the timeout): quiet as well. */
    assert_int_equal(ote_stage_target_sweep(t, ote_time_ns() + 2ull * TIMEOUT_MS * 1000000), 0);
    assert_int_equal(ote_stage_target_pinned_now(), 0);
    assert_int_equal(req(t, 4, OTE_CTL_STAGE_PIN, NULL, 2, y, &n), OTE_ERR_BUSY);
    ote_stage_target_destroy(t);
    ote_mem_table_destroy(table);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retired_chunks_stay_quiet),
    };

    cuda_test_use_double(1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
