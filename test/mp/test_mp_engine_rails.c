/*
 * ote_engine_rails(): the engine's rails summed over its open segments.
 * Two target processes, one segment each over native tcp; different
 * amounts written to each; the engine's entry for tcp on loopback holds
 * the sum of the two segments' counters, and a closed segment no longer
 * counts.
 */
#include "mp_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define LEN (4u << 20)

/* The one rail of seg (native tcp on loopback here). */
static ote_rail_info_t seg_rail(ote_segment_h seg)
{
    ote_rail_info_t r[OTE_TEST_MAX_REGIONS];
    size_t n = 0;

    assert_int_equal(ote_segment_rails(seg, r, OTE_TEST_MAX_REGIONS, &n), OTE_OK);
    assert_int_equal(n, 1);
    return r[0];
}

/* The engine's entry for transport/device; fails unless there is exactly one. */
static ote_rail_info_t engine_rail(ote_engine_h e, const ote_rail_info_t *like, size_t *n_p)
{
    ote_rail_info_t r[OTE_TEST_MAX_REGIONS], found = {0};
    size_t n = 0, hits = 0;

    assert_int_equal(ote_engine_rails(e, r, OTE_TEST_MAX_REGIONS, &n), OTE_OK);
    for (size_t i = 0; i < n && i < OTE_TEST_MAX_REGIONS; i++) {
        if (strcmp(r[i].transport, like->transport) == 0 &&
            strcmp(r[i].device, like->device) == 0) {
            found = r[i];
            hits++;
        }
    }
    assert_int_equal(hits, 1);
    *n_p = n;
    return found;
}

static void write_n(ote_engine_h e, ote_segment_h seg, uint8_t *local, uint64_t remote,
                    size_t len)
{
    ote_task_status_t st;

    assert_int_equal(ote_test_xfer(e, seg, OTE_OP_WRITE, local, remote, len, 30000, &st),
                     OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
}

static void test_engine_sums_segments(void **state)
{
    static const char *const args[] = {"--region", "8m:rw", NULL};
    ote_test_target_t t[2];
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e;
    ote_segment_h seg[2];
    ote_rail_info_t r0, r1, sum, after;
    uint8_t *local;
    ote_mem_h mem;
    size_t n = 0, none = 99;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ote_test_target_start(&t[i], NULL, args), 0);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    /* No segment yet: no rail. */
    assert_int_equal(ote_engine_rails(e, NULL, 0, &none), OTE_OK);
    assert_int_equal(none, 0);
    assert_int_equal(ote_engine_rails(NULL, NULL, 0, &none), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_alloc(e, LEN, NULL, 0, (void **)&local, &mem), OTE_OK);
    ote_test_fill(local, 0, LEN, 5);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ote_segment_open(e, t[i].name, &seg[i]), OTE_OK);
    write_n(e, seg[0], local, t[0].addr[0], LEN);
    write_n(e, seg[1], local, t[1].addr[0], LEN / 4);
    write_n(e, seg[1], local, t[1].addr[0], LEN / 4);
    for (int i = 0; i < 2; i++) {
        char cmd[64];

        snprintf(cmd, sizeof(cmd), "check 0 0 %u 5", i == 0 ? LEN : LEN / 4);
        assert_int_equal(ote_test_target_expect(e, seg[i], cmd, "ok", 30000), 0);
    }

    r0  = seg_rail(seg[0]);
    r1  = seg_rail(seg[1]);
    sum = engine_rail(e, &r0, &n);
    assert_int_equal(n, 1);
    assert_string_equal(r1.transport, r0.transport);
    assert_string_equal(r1.device, r0.device);
    assert_true(r0.bytes == LEN && r1.bytes == LEN / 2);
    assert_true(sum.bytes == r0.bytes + r1.bytes);
    assert_true(sum.slices == r0.slices + r1.slices);
    assert_true(sum.errors == r0.errors + r1.errors && sum.retries == r0.retries + r1.retries);
    assert_int_equal(sum.state, OTE_RAIL_ACTIVE);
    assert_true(sum.bandwidth > 0);

    /* Only what is open counts. */
    assert_int_equal(ote_segment_close(seg[0]), OTE_OK);
    after = engine_rail(e, &r1, &n);
    assert_true(after.bytes == r1.bytes);
    assert_int_equal(ote_segment_close(seg[1]), OTE_OK);
    assert_int_equal(ote_engine_rails(e, NULL, 0, &none), OTE_OK);
    assert_int_equal(none, 0);

    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    for (int i = 0; i < 2; i++)
        ote_test_target_stop(&t[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_sums_segments),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
