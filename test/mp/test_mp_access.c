/*
 * The target checks every access: WRITE or READ to an unregistered address,
 * past a region's end, or against a region without the access flag fails
 * with REMOTE_NOT_REGISTERED, OUT_OF_BOUNDS or ACCESS (the first two found
 * in the peer's descriptor already, the third by the target), while a concurrent valid
 * batch on the same connections completes intact.
 */
#include "mp_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define R0 (64ul << 20)
#define R1 (8ul << 20)

typedef struct {
    mp_fx_t           fx;
    uint8_t          *probe; /* separate from the valid traffic's source */
    atomic_int        stop;
    int               good_rounds;
    int               good_failures;
} fx_t;

static int setup(void **state)
{
    static const char *const args[] = {"--region", "64m:rw", "--region", "8m:r",
                                       "--region", "1m:w", NULL};
    fx_t *f = calloc(1, sizeof(*f));

    mp_fx_start(&f->fx, args, R0 + (16ul << 20));
    assert_int_equal(f->fx.t.num_regions, 3);
    f->probe = f->fx.local + R0;
    ote_test_fill(f->fx.local, 0, R0, 77);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    mp_fx_stop(&f->fx, false);
    free(f);
    return 0;
}

/* Valid WRITEs of the whole of region 0, in 1 MiB pieces, over and over. */
static void *good_traffic(void *arg)
{
    fx_t *f = arg;
    ote_xfer_req_t reqs[64];

    for (size_t i = 0; i < 64; i++)
        reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->fx.local + i * (1u << 20),
                                   .segment = f->fx.seg,
                                   .remote_addr = f->fx.t.addr[0] + i * (1u << 20),
                                   .length = 1u << 20};
    while (!atomic_load(&f->stop) || f->good_rounds < 3) {
        ote_batch_h b;
        ote_task_status_t st;
        size_t first;

        if (ote_batch_create(f->fx.e, 64, &b) != OTE_OK ||
            ote_batch_submit(b, reqs, 64, &first) != OTE_OK) {
            f->good_failures++;
            break;
        }
        if (ote_batch_wait(b, 30000) != OTE_OK || ote_batch_status(b, &st) != OTE_OK ||
            st.state != OTE_TASK_COMPLETED || st.transferred != R0)
            f->good_failures++;
        ote_batch_release(b);
        f->good_rounds++;
    }
    return NULL;
}

static ote_task_status_t one(fx_t *f, ote_op_t op, uint64_t remote, size_t len)
{
    ote_xfer_req_t r = {.op = op, .local_addr = f->probe, .segment = f->fx.seg,
                        .remote_addr = remote, .length = len};
    ote_batch_h b;
    ote_task_status_t st;
    size_t first;

    assert_int_equal(ote_batch_create(f->fx.e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, 0, &st), OTE_OK);
    ote_batch_release(b);
    return st;
}

static void expect_fail(ote_task_status_t st, ote_status_t err)
{
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, err);
    assert_int_equal(st.transferred, 0);
}

static void test_refusals_beside_valid_traffic(void **state)
{
    fx_t *f = *state;
    pthread_t th;
    char cmd[128], before1[64], after1[64];

    snprintf(cmd, sizeof(cmd), "fill 1 0 %lu 5", R1);
    assert_int_equal(
        ote_test_target_cmd(f->fx.e, f->fx.seg, cmd, before1, sizeof(before1), 10000), 0);
    snprintf(cmd, sizeof(cmd), "sum 1 0 %lu", R1);
    assert_int_equal(
        ote_test_target_cmd(f->fx.e, f->fx.seg, cmd, before1, sizeof(before1), 10000), 0);

    pthread_create(&th, NULL, good_traffic, f);
    for (int rep = 0; rep < 20; rep++) {
        /* No region at all there: the peer's, not ours. */
        expect_fail(one(f, OTE_OP_WRITE, 0x1000, 4096), OTE_ERR_REMOTE_NOT_REGISTERED);
        expect_fail(one(f, OTE_OP_READ, 0x1000, 4096), OTE_ERR_REMOTE_NOT_REGISTERED);
        /* Starts inside region 0, runs past its end. */
        expect_fail(one(f, OTE_OP_WRITE, f->fx.t.addr[0] + R0 - 100, 4096), OTE_ERR_OUT_OF_BOUNDS);
        expect_fail(one(f, OTE_OP_READ, f->fx.t.addr[0] + R0 - 1, 2), OTE_ERR_OUT_OF_BOUNDS);
        /* Region 1 is read-only, region 2 write-only. */
        expect_fail(one(f, OTE_OP_WRITE, f->fx.t.addr[1], 4096), OTE_ERR_ACCESS);
        expect_fail(one(f, OTE_OP_READ, f->fx.t.addr[2], 4096), OTE_ERR_ACCESS);
        /* Large refused WRITE: its payload is drained, the stream stays in step. */
        expect_fail(one(f, OTE_OP_WRITE, f->fx.t.addr[1], 8u << 20), OTE_ERR_ACCESS);
        /* The allowed direction works. */
        assert_int_equal(one(f, OTE_OP_READ, f->fx.t.addr[1], 4096).state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_check(f->probe, 0, 4096, 5), -1);
        assert_int_equal(one(f, OTE_OP_WRITE, f->fx.t.addr[2], 4096).state, OTE_TASK_COMPLETED);
    }
    atomic_store(&f->stop, 1);
    pthread_join(th, NULL);
    assert_int_equal(f->good_failures, 0);
    assert_true(f->good_rounds >= 3);

    /* Every byte of the valid traffic arrived. */
    snprintf(cmd, sizeof(cmd), "check 0 0 %lu 77", R0);
    assert_int_equal(ote_test_target_cmd(f->fx.e, f->fx.seg, cmd, cmd, sizeof(cmd), 30000), 0);
    assert_string_equal(cmd, "ok");
    /* The read-only region never changed. */
    snprintf(cmd, sizeof(cmd), "sum 1 0 %lu", R1);
    assert_int_equal(
        ote_test_target_cmd(f->fx.e, f->fx.seg, cmd, after1, sizeof(after1), 10000), 0);
    assert_string_equal(before1, after1);
}

static void test_mixed_batch(void **state)
{
    fx_t *f = *state;
    ote_xfer_req_t r[4] = {
        {.op = OTE_OP_WRITE, .local_addr = f->probe, .segment = f->fx.seg,
         .remote_addr = f->fx.t.addr[0], .length = 65536},
        {.op = OTE_OP_WRITE, .local_addr = f->probe, .segment = f->fx.seg,
         .remote_addr = f->fx.t.addr[1], .length = 65536},
        {.op = OTE_OP_READ, .local_addr = f->probe + 65536, .segment = f->fx.seg,
         .remote_addr = f->fx.t.addr[0] + R0 - 10, .length = 11},
        {.op = OTE_OP_READ, .local_addr = f->probe + 131072, .segment = f->fx.seg,
         .remote_addr = f->fx.t.addr[0], .length = 65536},
    };
    ote_status_t expect[4] = {OTE_OK, OTE_ERR_ACCESS, OTE_ERR_OUT_OF_BOUNDS, OTE_OK};
    ote_batch_h b;
    ote_task_status_t st;
    size_t first;

    ote_test_fill(f->probe, 0, 65536, 9);
    assert_int_equal(ote_batch_create(f->fx.e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, 4, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        assert_int_equal(st.state, expect[i] == OTE_OK ? OTE_TASK_COMPLETED : OTE_TASK_FAILED);
        assert_int_equal(st.error, expect[i]);
    }
    assert_int_equal(ote_batch_status(b, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    ote_batch_release(b);
}

/*
 * Many small requests in one batch, one in three of them refused (no access,
 * or past a region's end): over tcp those queued together travel as one
 * WRITEV or READV_REQ, and still each ends with its own status; the valid
 * ones move their bytes.
 */
static void test_mixed_small(void **state)
{
    enum { N = 48, LEN = 4096 };
    fx_t *f         = *state;
    uint64_t base   = f->fx.t.addr[0] + (1u << 20);
    uint8_t *src    = f->probe, *dst = f->probe + N * LEN;
    ote_xfer_req_t r[N];
    ote_status_t expect[N];
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;

    for (int pass = 0; pass < 2; pass++) {
        ote_op_t op = pass == 0 ? OTE_OP_WRITE : OTE_OP_READ;

        ote_test_fill(src, 0, N * LEN, 31);
        memset(dst, 0, N * LEN);
        for (size_t i = 0; i < N; i++) {
            uint64_t remote = base + i * LEN;

            expect[i] = OTE_OK;
            if (i % 3 == 1) {
                /* WRITE into the read-only region, READ from the write-only one. */
                remote    = f->fx.t.addr[op == OTE_OP_WRITE ? 1 : 2] + i * LEN;
                expect[i] = OTE_ERR_ACCESS;
            } else if (i % 3 == 2) {
                remote    = f->fx.t.addr[0] + R0 - LEN / 2;
                expect[i] = OTE_ERR_OUT_OF_BOUNDS;
            }
            r[i] = (ote_xfer_req_t){.op = op, .segment = f->fx.seg, .remote_addr = remote,
                                    .length = LEN,
                                    .local_addr = (op == OTE_OP_WRITE ? src : dst) + i * LEN};
        }
        assert_int_equal(ote_batch_create(f->fx.e, N, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, r, N, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
        for (size_t i = 0; i < N; i++) {
            assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
            if (st.error != expect[i])
                fail_msg("%s %zu: %s, expected %s", op == OTE_OP_WRITE ? "WRITE" : "READ", i,
                         ote_status_string(st.error), ote_status_string(expect[i]));
            assert_int_equal(st.state,
                             expect[i] == OTE_OK ? OTE_TASK_COMPLETED : OTE_TASK_FAILED);
        }
        ote_batch_release(b);
    }
    /* The READs of the second pass brought back what the first one wrote. */
    for (size_t i = 0; i < N; i += 3)
        assert_memory_equal(dst + i * LEN, src + i * LEN, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals_beside_valid_traffic),
        cmocka_unit_test(test_mixed_batch),
        cmocka_unit_test(test_mixed_small),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
