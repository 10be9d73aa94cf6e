/*
 * Two processes move 1 GiB each way in mixed block sizes (1 byte to
 * 8 MiB) at unaligned addresses; every byte is verified. The transport is
 * whatever OTE_TLS selects (the default picks the best one).
 */
#include "mp_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#define REGION   (256ul << 20)
#define ROUNDS   4           /* 4 x 256 MiB = 1 GiB each way */
#define MAX_REQ  (8ul << 20)
#define MAX_REQS 4096

typedef mp_fx_t fx_t;

static int setup(void **state)
{
    static const char *const args[] = {"--region", "256m:rw", NULL};
    fx_t *f = calloc(1, sizeof(*f));

    /* One spare byte at each end so that local addresses can be shifted. */
    mp_fx_start(f, args, REGION + 64);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    mp_fx_stop(*state, true);
    free(*state);
    return 0;
}

/* Cut [0, REGION) into requests of mixed sizes and run them in batches. */
static size_t run_round(fx_t *f, ote_op_t op, size_t shift, uint64_t *rng)
{
    ote_xfer_req_t *reqs = calloc(MAX_REQS, sizeof(*reqs));
    size_t n = 0, off = 0, moved = 0;

    while (off < REGION) {
        size_t len = mp_rand_size(rng, MAX_REQ);

        if (len > REGION - off)
            len = REGION - off;
        assert_true(n < MAX_REQS);
        reqs[n++] = (ote_xfer_req_t){.op = op, .local_addr = f->local + shift + off,
                                     .segment = f->seg, .remote_addr = f->t.addr[0] + off,
                                     .length = len};
        off += len;
    }
    /* Batches of varying size, several in flight at once. */
    for (size_t i = 0; i < n;) {
        ote_batch_h b[4];
        size_t nb = 0;

        for (; nb < 4 && i < n; nb++) {
            size_t cnt = 1 + mp_rand(rng) % 64, first;

            if (cnt > n - i)
                cnt = n - i;
            assert_int_equal(ote_batch_create(f->e, cnt, &b[nb]), OTE_OK);
            assert_int_equal(ote_batch_submit(b[nb], &reqs[i], cnt, &first), OTE_OK);
            i += cnt;
        }
        for (size_t k = 0; k < nb; k++) {
            ote_task_status_t st;

            assert_int_equal(ote_batch_wait(b[k], 60000), OTE_OK);
            assert_int_equal(ote_batch_status(b[k], &st), OTE_OK);
            assert_int_equal(st.state, OTE_TASK_COMPLETED);
            moved += st.transferred;
            ote_batch_release(b[k]);
        }
    }
    free(reqs);
    return moved;
}

static void test_write_1g(void **state)
{
    fx_t *f = *state;
    uint64_t rng = 1;
    size_t total = 0;
    char cmd[128], reply[64];

    for (int r = 0; r < ROUNDS; r++) {
        size_t shift = 1 + (size_t)r * 7 % 63; /* unaligned, different each round */
        uint64_t seed = 100 + (uint64_t)r;

        ote_test_fill(f->local + shift, 0, REGION, seed);
        snprintf(cmd, sizeof(cmd), "zero 0 0 %lu", REGION);
        assert_int_equal(ote_test_target_cmd(f->e, f->seg, cmd, reply, sizeof(reply), 10000), 0);
        total += run_round(f, OTE_OP_WRITE, shift, &rng);
        snprintf(cmd, sizeof(cmd), "check 0 0 %lu %llu", REGION, (unsigned long long)seed);
        assert_int_equal(ote_test_target_cmd(f->e, f->seg, cmd, reply, sizeof(reply), 30000), 0);
        assert_string_equal(reply, "ok");
    }
    assert_int_equal(total, ROUNDS * REGION);
}

static void test_read_1g(void **state)
{
    fx_t *f = *state;
    uint64_t rng = 2;
    size_t total = 0;
    char cmd[128], reply[64];

    for (int r = 0; r < ROUNDS; r++) {
        size_t shift = 3 + (size_t)r * 11 % 61;
        uint64_t seed = 200 + (uint64_t)r;

        snprintf(cmd, sizeof(cmd), "fill 0 0 %lu %llu", REGION, (unsigned long long)seed);
        assert_int_equal(ote_test_target_cmd(f->e, f->seg, cmd, reply, sizeof(reply), 30000), 0);
        assert_string_equal(reply, "ok");
        memset(f->local, 0xee, REGION + 64);
        total += run_round(f, OTE_OP_READ, shift, &rng);
        assert_int_equal(ote_test_check(f->local + shift, 0, REGION, seed), -1);
        /* Nothing outside the destination range was touched. */
        for (size_t i = 0; i < shift; i++)
            assert_int_equal(f->local[i], 0xee);
        for (size_t i = shift + REGION; i < REGION + 64; i++)
            assert_int_equal(f->local[i], 0xee);
    }
    assert_int_equal(total, ROUNDS * REGION);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_1g),
        cmocka_unit_test(test_read_1g),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
