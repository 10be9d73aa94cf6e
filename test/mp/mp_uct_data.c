/*
 * Data test across processes, once per transport available here: native
 * tcp, UCT tcp (to-iface and to-ep wire-up), native cma, UCT cma, and all
 * of them (the engines choose: the native cma). The transport is chosen only by OTE_TLS in the
 * environment of both processes. WRITE and
 * READ of mixed block sizes (1 byte to 8 MiB) at unaligned offsets (over
 * uct_tcp, which has no GET, READs go by PUTBACK); the
 * target verifies every byte it received, gaps included. Then the access
 * statuses, and a peer that dies under load: every task ends, none hangs.
 */
#include "core/engine.h"
#include "core/segment/segment.h"
#include "proto/putback.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define REGION   (16u << 20)
#define CMD_MS   20000

typedef struct {
    const char *tls;
    const char *connect; /* OTE_UCT_CONNECT, or NULL */
    const char *workers; /* OTE_NUM_WORKERS, or NULL */
    bool        has_get;
    bool        putback; /* READs go by PUTBACK (put-only transport) */
} tl_case_t;

typedef struct {
    const tl_case_t  *tc;
    ote_engine_h      e;
    ote_test_target_t target;
    ote_segment_h     seg;
    uint8_t          *local;
    ote_mem_h         mlocal;
} fx_t;

static const size_t sizes[] = {1,     2,      3,      7,      64,     511,
                               4095,  4096,   4097,   65535,  65537,  262147,
                               (1u << 20) - 1, (1u << 20) + 1, (3u << 20) + 7, 8u << 20};
enum { NBLOCKS = sizeof(sizes) / sizeof(sizes[0]), GAP = 29 };

static size_t block_off(size_t i)
{
    size_t off = 5;

    for (size_t k = 0; k < i; k++)
        off += sizes[k] + GAP;
    return off;
}

static void set_env(const tl_case_t *tc)
{
    setenv("OTE_TLS", tc->tls, 1);
    ote_test_setenv_or_unset("OTE_UCT_CONNECT", tc->connect);
    ote_test_setenv_or_unset("OTE_NUM_WORKERS", tc->workers);
    setenv("OTE_XFER_TIMEOUT_MS", "5000", 1);
}

static void cmd_expect(fx_t *f, const char *cmd, const char *want)
{
    assert_int_equal(ote_test_target_expect(f->e, f->seg, cmd, want, CMD_MS), 0);
}

static int fx_setup(void **state)
{
    const tl_case_t *tc = *state;
    const char *const args[] = {"--region", "16m:rw", "--region", "1m:r", "--region", "1m:w",
                                NULL};
    fx_t *f = calloc(1, sizeof(*f));

    f->tc = tc;
    set_env(tc);
    f->e = ote_test_engine("127.0.0.1:0");
    assert_int_equal(ote_test_target_start(&f->target, NULL, args), 0);
    assert_int_equal(f->target.num_regions, 3);
    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
    assert_int_equal(ote_mem_alloc(f->e, REGION + 64, NULL, 0, (void **)&f->local, &f->mlocal),
                     OTE_OK);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;

    if (f->target.pid > 0)
        ote_test_target_stop(&f->target);
    ote_segment_close(f->seg);
    ote_mem_free(f->e, f->mlocal);
    ote_engine_destroy(f->e);
    free(f);
    return 0;
}

/* The transport OTE_TLS named carries every rail, on every worker. */
static void test_rails(void **state)
{
    fx_t *f       = *state;
    bool worker1  = false, putback = false;
    const char *want = strcmp(f->tc->tls, "all") == 0 ? "shm" : f->tc->tls;

    assert_true(f->seg->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->seg->rail_set.num_rails; i++) {
        ote_rail_t *r = f->seg->rail_set.rails[i];

        assert_string_equal(r->iface->resource.tl_name, want);
        if (ote_proto_putback_rail(r)) {
            assert_true(f->tc->putback);
            putback = true;
        }
        worker1 |= r->worker == 1;
        if (f->tc->connect && strcmp(f->tc->connect, "ep") == 0 && !ote_proto_putback_rail(r)) {
            assert_int_equal(r->caps.conn_model, OTE_TL_CONN_TO_EP);
            assert_true(r->conn_id != 0);
        }
    }
    if (f->tc->workers)
        assert_true(worker1);
    assert_int_equal(putback, f->tc->putback);
}

static void test_write(void **state)
{
    fx_t *f = *state;
    ote_xfer_req_t r[NBLOCKS];
    ote_task_status_t st[NBLOCKS];
    char cmd[128], want[64];
    size_t end;

    snprintf(cmd, sizeof(cmd), "zero 0 0 %u", REGION);
    cmd_expect(f, cmd, "ok");
    for (size_t i = 0; i < NBLOCKS; i++) {
        size_t off = block_off(i);

        /* Local side 3 bytes off the remote alignment. */
        ote_test_fill(f->local + off + 3, off, sizes[i], 77);
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + off + 3,
                                .segment = f->seg,
                                .remote_addr = f->target.addr[0] + off, .length = sizes[i]};
    }
    end = block_off(NBLOCKS);
    assert_true(end < REGION);
    assert_int_equal(ote_test_batch_run(f->e, r, NBLOCKS, 60000, st), OTE_OK);
    for (size_t i = 0; i < NBLOCKS; i++) {
        if (st[i].state != OTE_TASK_COMPLETED)
            fail_msg("block %zu (%zu bytes): %s", i, sizes[i], ote_status_string(st[i].error));
        assert_int_equal(st[i].transferred, sizes[i]);
    }
    /* Every byte: the blocks, the gaps between them, what lies after. */
    {
        uint8_t *zeros = calloc(1, REGION);
        size_t prev    = 0;

        for (size_t i = 0; i < NBLOCKS; i++) {
            size_t off = block_off(i);

            snprintf(cmd, sizeof(cmd), "check 0 %zu %zu 77", off, sizes[i]);
            cmd_expect(f, cmd, "ok");
            snprintf(cmd, sizeof(cmd), "sum 0 %zu %zu", prev, off - prev);
            snprintf(want, sizeof(want), "sum %016llx",
                     (unsigned long long)ote_test_hash(zeros, off - prev));
            cmd_expect(f, cmd, want);
            prev = off + sizes[i];
        }
        snprintf(cmd, sizeof(cmd), "sum 0 %zu %zu", prev, REGION - prev);
        snprintf(want, sizeof(want), "sum %016llx",
                 (unsigned long long)ote_test_hash(zeros, REGION - prev));
        cmd_expect(f, cmd, want);
        free(zeros);
    }
}

static void test_read(void **state)
{
    fx_t *f = *state;
    ote_xfer_req_t r[NBLOCKS];
    ote_task_status_t st[NBLOCKS];
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "fill 0 0 %u 91", REGION);
    cmd_expect(f, cmd, "ok");
    memset(f->local, 0, REGION + 64);
    for (size_t i = 0; i < NBLOCKS; i++) {
        size_t off = block_off(i);

        r[i] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = f->local + off + 3,
                                .segment = f->seg,
                                .remote_addr = f->target.addr[0] + off, .length = sizes[i]};
    }
    if (!f->tc->has_get) {
        /* No selected transport has GET: refused at submit, nothing posted. */
        ote_batch_h b;
        size_t first = 1234;

        assert_int_equal(ote_batch_create(f->e, NBLOCKS, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, r, NBLOCKS, &first), OTE_ERR_UNREACHABLE);
        assert_int_equal(first, 1234);
        ote_batch_release(b);
        return;
    }
    assert_int_equal(ote_test_batch_run(f->e, r, NBLOCKS, 60000, st), OTE_OK);
    for (size_t i = 0; i < NBLOCKS; i++) {
        size_t off = block_off(i);

        if (st[i].state != OTE_TASK_COMPLETED)
            fail_msg("block %zu (%zu bytes): %s", i, sizes[i], ote_status_string(st[i].error));
        assert_int_equal(st[i].transferred, sizes[i]);
        assert_int_equal(ote_test_check(f->local + off + 3, off, sizes[i], 91), -1);
    }
    /* Nothing landed between the blocks. */
    for (size_t i = 0, prev = 0; i <= NBLOCKS; i++) {
        size_t off = i < NBLOCKS ? block_off(i) + 3 : REGION + 64;

        for (size_t k = prev; k < off; k++) {
            if (f->local[k] != 0)
                fail_msg("byte %zu outside the blocks changed", k);
        }
        prev = i < NBLOCKS ? off + sizes[i] : off;
    }
}

static ote_task_status_t run_one(fx_t *f, ote_op_t op, uint64_t remote, size_t len)
{
    ote_task_status_t st;

    assert_int_equal(ote_test_xfer(f->e, f->seg, op, f->local, remote, len, 20000, &st), OTE_OK);
    return st;
}

/* The same statuses whether the target checks (tcp, cma) or the initiator does (UCT). */
static void test_access(void **state)
{
    fx_t *f = *state;
    ote_task_status_t st;
    uint8_t *zeros = calloc(1, 1u << 20);
    char want[64];

    st = run_one(f, OTE_OP_WRITE, f->target.addr[0] + REGION - 10, 64);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    st = run_one(f, OTE_OP_WRITE, 0x1000, 64);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_REMOTE_NOT_REGISTERED);
    ote_test_fill(f->local, 0, 4096, 3);
    st = run_one(f, OTE_OP_WRITE, f->target.addr[1] + 100, 4096);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_ACCESS);
    snprintf(want, sizeof(want), "sum %016llx",
             (unsigned long long)ote_test_hash(zeros, 1u << 20));
    cmd_expect(f, "sum 1 0 1048576", want);
    if (f->tc->has_get) {
        cmd_expect(f, "fill 1 0 1048576 12", "ok");
        st = run_one(f, OTE_OP_READ, f->target.addr[1] + 1, (1u << 20) - 1);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_check(f->local, 1, (1u << 20) - 1, 12), -1);
        /* Refused READs leave the destination as it was. */
        memset(f->local, 0x5a, 4096);
        st = run_one(f, OTE_OP_READ, 0x1000, 64);
        assert_int_equal(st.state, OTE_TASK_FAILED);
        assert_int_equal(st.error, OTE_ERR_REMOTE_NOT_REGISTERED);
        st = run_one(f, OTE_OP_READ, f->target.addr[2] + 100, 4096);
        assert_int_equal(st.state, OTE_TASK_FAILED);
        assert_int_equal(st.error, OTE_ERR_ACCESS);
        st = run_one(f, OTE_OP_READ, f->target.addr[1] + (1u << 20) - 10, 64);
        assert_int_equal(st.state, OTE_TASK_FAILED);
        assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
        for (size_t k = 0; k < 4096; k++)
            assert_int_equal(f->local[k], 0x5a);
    }
    free(zeros);
}

/* The target dies under load: every task ends, later ones fail, nothing hangs. */
static void test_peer_death(void **state)
{
    fx_t *f = *state;
    enum { N = 12 };
    ote_xfer_req_t r[N];
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;

    for (size_t i = 0; i < N; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + i * (1u << 20),
                                .segment = f->seg,
                                .remote_addr = f->target.addr[0] + i * (1u << 20),
                                .length = 1u << 20};
    assert_int_equal(ote_batch_create(f->e, N, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, N, &first), OTE_OK);
    ote_test_target_kill(&f->target);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        if (st.state == OTE_TASK_COMPLETED)
            continue;
        assert_int_equal(st.state, st.error == OTE_ERR_TIMEOUT ? OTE_TASK_TIMEOUT
                                                                : OTE_TASK_FAILED);
        if (st.error != OTE_ERR_REMOTE_DISCONNECT && st.error != OTE_ERR_IO &&
            st.error != OTE_ERR_TIMEOUT)
            fail_msg("task %zu ended with %s", i, ote_status_string(st.error));
    }
    ote_batch_release(b);

    /* Afterwards: refused or failed, with a status that names the cause. */
    for (int round = 0; round < 3; round++) {
        ote_status_t s;

        assert_int_equal(ote_batch_create(f->e, N, &b), OTE_OK);
        s = ote_batch_submit(b, r, N, &first);
        if (s == OTE_OK) {
            assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
            assert_int_equal(ote_batch_status(b, &st), OTE_OK);
            assert_int_equal(st.state, OTE_TASK_FAILED);
            /* Never UNREACHABLE: the transports reach it, the peer is gone (ote.h). */
            if (st.error != OTE_ERR_REMOTE_DISCONNECT && st.error != OTE_ERR_IO &&
                st.error != OTE_ERR_TIMEOUT)
                fail_msg("after the peer died: %s", ote_status_string(st.error));
        } else if (s != OTE_ERR_REMOTE_DISCONNECT && s != OTE_ERR_TIMEOUT) {
            fail_msg("submit after the peer died: %s", ote_status_string(s));
        }
        ote_batch_release(b);
    }
}

#define CASE(_tc)                                                                        \
    cmocka_unit_test_prestate_setup_teardown(test_rails, fx_setup, fx_teardown, _tc),     \
        cmocka_unit_test_prestate_setup_teardown(test_write, fx_setup, fx_teardown, _tc), \
        cmocka_unit_test_prestate_setup_teardown(test_read, fx_setup, fx_teardown, _tc),  \
        cmocka_unit_test_prestate_setup_teardown(test_access, fx_setup, fx_teardown, _tc), \
        cmocka_unit_test_prestate_setup_teardown(test_peer_death, fx_setup, fx_teardown, _tc)

/* One program per transport (MP_UCT_CASE), each well under a minute. */
#if MP_UCT_CASE == 1
static tl_case_t tcp = {.tls = "tcp", .has_get = true};
#define CASES CASE(&tcp)
#elif MP_UCT_CASE == 2
/* READs by PUTBACK: the target PUTs the range back over its own uct_tcp rail. */
static tl_case_t uct_tcp    = {.tls = "uct_tcp", .has_get = true, .putback = true};
static tl_case_t uct_tcp_ep = {.tls = "uct_tcp", .connect = "ep", .has_get = true,
                               .putback = true};
#define CASES CASE(&uct_tcp), CASE(&uct_tcp_ep)
#elif MP_UCT_CASE == 3
static tl_case_t uct_cma    = {.tls = "uct_cma", .has_get = true};
static tl_case_t uct_cma_2w = {.tls = "uct_cma", .workers = "2", .has_get = true};
#define CASES CASE(&uct_cma), CASE(&uct_cma_2w)
#elif MP_UCT_CASE == 4
/* Every transport allowed: the engines pick the native cma on one host. */
static tl_case_t all = {.tls = "all", .has_get = true};
#define CASES CASE(&all)
#elif MP_UCT_CASE == 5
static tl_case_t cma    = {.tls = "cma", .has_get = true};
static tl_case_t cma_2w = {.tls = "cma", .workers = "2", .has_get = true};
#define CASES CASE(&cma), CASE(&cma_2w)
#else
#error "MP_UCT_CASE must be 1..5"
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {CASES};

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
