/*
 * The native shm component between two processes (OTE_TLS=shm): bytes
 * written and read through mappings of the target's memfd-backed regions
 * and verified; a read-only region refuses WRITE; ranges that cross a
 * region's end are refused; memory that is not engine-owned (and
 * write-only memory) goes by reference, as over cma; deregistration returns
 * once the peer unmapped, and within OTE_SHM_UNMAP_TIMEOUT_MS of a peer that
 * is stopped, whose later writes then fail; a batch of blocks of many sizes
 * in shuffled order, copied alone and shared with copy threads
 * (OTE_CMA_COPY_THREADS) over shm and over cma, every byte checked both
 * ways.
 */
#include "mp_util.h"

#include <setjmp.h>
#include <signal.h>
#include <sys/types.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

/* Library-internal (uct_ext/shm/shm.h), exported with the ote_ symbols. */
void ote_shm_stats(uint64_t *mapped_p, uint64_t *by_ref_p);

#define BIG        (16ul << 20)
#define SMALL      (1ul << 20)
#define UNMAP_MS   500

enum { R_RW = 0, R_RO = 1, R_PRIVATE = 2, R_WO = 3 };

typedef mp_fx_t fx_t;

static int setup(void **state)
{
    static const char *const args[] = {"--region", "16m:rw@*", "--region", "1m:r@*",
                                       "--region", "1m:rw",    "--region", "1m:w@*", NULL};
    fx_t *f = calloc(1, sizeof(*f));

    mp_fx_start(f, args, BIG);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    mp_fx_stop(*state, true);
    free(*state);
    return 0;
}

/* n requests of len bytes each, back to back from local and remote; the first task's status. */
static ote_task_status_t run(fx_t *f, ote_op_t op, uint8_t *local, uint64_t remote, size_t len,
                             size_t n)
{
    ote_xfer_req_t r[16];
    ote_task_status_t st, first_st = {0};
    ote_batch_h b;
    size_t first;

    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++)
        r[i] = (ote_xfer_req_t){.op = op, .local_addr = local + i * len, .segment = f->seg,
                                .remote_addr = remote + i * len, .length = len};
    assert_int_equal(ote_batch_create(f->e, n, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, n, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ote_batch_task_status(b, i, &st), OTE_OK);
        if (i == 0)
            first_st = st;
        else
            assert_int_equal(st.state, first_st.state);
    }
    ote_batch_release(b);
    return first_st;
}

/*
 * One WRITE of len bytes of local memory at local_off (seed) to offset off
 * of region; it completes and the target finds every byte.
 */
static void write_checked(fx_t *f, size_t local_off, int region, size_t off, size_t len,
                          unsigned seed)
{
    ote_task_status_t st;

    ote_test_fill(f->local + local_off, off, len, seed);
    st = run(f, OTE_OP_WRITE, f->local + local_off, f->t.addr[region] + off, len, 1);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    mp_target_ok(f->e, f->seg, "check %d %zu %zu %u", region, off, len, seed);
}

/*
 * len bytes of local memory (seed) WRITTEN to region in n requests and
 * checked by the target; the target's fill (seed + 1) READ back and checked.
 */
static void write_read(fx_t *f, int region, size_t len, size_t n, unsigned seed)
{
    ote_task_status_t st;

    ote_test_fill(f->local, 0, len, seed);
    mp_target_ok(f->e, f->seg, "zero %d 0 %lu", region, len);
    st = run(f, OTE_OP_WRITE, f->local, f->t.addr[region], len / n, n);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    mp_target_ok(f->e, f->seg, "check %d 0 %lu %u", region, len, seed);

    mp_target_ok(f->e, f->seg, "fill %d 0 %lu %u", region, len, seed + 1);
    memset(f->local, 0, len);
    st = run(f, OTE_OP_READ, f->local, f->t.addr[region], len / n, n);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(f->local, 0, len, seed + 1), -1);
}

static void test_write_read_mapped(void **state)
{
    fx_t *f = *state;
    uint64_t m0, r0, m1, r1;

    ote_shm_stats(&m0, &r0);
    write_read(f, R_RW, BIG, 16, 7);

    /* Unaligned, small, at an offset: still through the mapping. */
    write_checked(f, 3, R_RW, 12345, 777, 9);

    ote_shm_stats(&m1, &r1);
    assert_int_equal(m1 - m0, 2 * BIG + 777);
    assert_int_equal(r1 - r0, 0);
}

static void test_read_only_region(void **state)
{
    fx_t *f = *state;
    uint64_t m0, r0, m1, r1;
    ote_task_status_t st;

    mp_target_ok(f->e, f->seg, "fill %d 0 %lu 21", R_RO, SMALL);
    ote_shm_stats(&m0, &r0);
    memset(f->local, 0, SMALL);
    st = run(f, OTE_OP_READ, f->local, f->t.addr[R_RO], SMALL / 4, 4);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(f->local, 0, SMALL, 21), -1);
    ote_shm_stats(&m1, &r1);
    assert_int_equal(m1 - m0, SMALL);

    ote_test_fill(f->local, 0, 4096, 22);
    st = run(f, OTE_OP_WRITE, f->local, f->t.addr[R_RO], 4096, 1);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_ACCESS);
    assert_int_equal(st.transferred, 0);
    mp_target_ok(f->e, f->seg, "check %d 0 %lu 21", R_RO, SMALL);
}

static void test_out_of_bounds(void **state)
{
    fx_t *f = *state;
    ote_task_status_t st;

    mp_target_ok(f->e, f->seg, "fill %d 0 %lu 31", R_RW, BIG);
    /* Crosses the end of the region. */
    st = run(f, OTE_OP_WRITE, f->local, f->t.addr[R_RW] + BIG - 4096, 8192, 1);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    st = run(f, OTE_OP_READ, f->local, f->t.addr[R_RW] + BIG - 4096, 8192, 1);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    mp_target_ok(f->e, f->seg, "check %d 0 %lu 31", R_RW, BIG);
}

static void test_private_memory_by_reference(void **state)
{
    fx_t *f = *state;
    uint64_t m0, r0, m1, r1;

    ote_shm_stats(&m0, &r0);
    write_read(f, R_PRIVATE, SMALL, 4, 41);
    /* Engine-owned but write-only: a mapping would let us read it. */
    write_checked(f, 0, R_WO, 0, SMALL, 43);
    ote_shm_stats(&m1, &r1);
    assert_int_equal(m1 - m0, 0);
    assert_int_equal(r1 - r0, 3 * SMALL);
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The target writes len bytes (seed) into our address; its reply. */
static void push(fx_t *f, void *addr, size_t len, unsigned seed, char *reply, size_t rlen)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "push %d %llx %zu %u", R_RW,
             (unsigned long long)(uintptr_t)addr, len, seed);
    assert_int_equal(ote_test_target_cmd(f->e, f->seg, cmd, reply, rlen, 30000), 0);
}

/* SMALL bytes of engine memory the target has written (seed) through its mapping. */
static ote_mem_h pushed_memory(fx_t *f, uint8_t **p_p, unsigned seed)
{
    char reply[64];
    ote_mem_h m;

    assert_int_equal(ote_mem_alloc(f->e, SMALL, NULL,
                                   OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                                   (void **)p_p, &m),
                     OTE_OK);
    push(f, *p_p, SMALL, seed, reply, sizeof(reply));
    assert_string_equal(reply, "ok");
    assert_int_equal(ote_test_check(*p_p, 0, SMALL, seed), -1);
    return m;
}

/* The target's write of SMALL bytes (seed) to addr fails. */
static void push_refused(fx_t *f, void *addr, unsigned seed)
{
    char reply[64];

    push(f, addr, SMALL, seed, reply, sizeof(reply));
    assert_int_equal(strncmp(reply, "error", 5), 0);
}

static void test_dereg_live_peer(void **state)
{
    fx_t *f = *state;
    uint8_t *p;
    ote_mem_h m;
    double t0, dt;

    m = pushed_memory(f, &p, 51);
    t0 = now_ms();
    assert_int_equal(ote_mem_free(f->e, m), OTE_OK);
    dt = now_ms() - t0;
    /* The peer answered UNMAP: no wait for the timeout. */
    assert_true(dt < UNMAP_MS);
    push_refused(f, p, 52);
}

static void test_dereg_stopped_peer(void **state)
{
    fx_t *f = *state;
    uint8_t *p, *q;
    ote_mem_h m, mq;
    double t0, dt;

    m = pushed_memory(f, &p, 61);

    mp_stop_process(f->t.pid);
    t0 = now_ms();
    assert_int_equal(ote_mem_free(f->e, m), OTE_OK);
    dt = now_ms() - t0;
    assert_int_equal(kill(f->t.pid, SIGCONT), 0);
    /* It waited for the mapping it knew of, and no longer than the bound. */
    if (dt < UNMAP_MS * 0.9 || dt >= UNMAP_MS + 4000)
        fail_msg("ote_mem_free returned after %.0f ms, not about %d", dt, UNMAP_MS);

    /* Resumed, the peer finds its connection closed: its write to that memory fails. */
    push_refused(f, p, 62);

    /* And it still reaches memory that is registered. */
    mq = pushed_memory(f, &q, 63);
    assert_int_equal(ote_mem_free(f->e, mq), OTE_OK);
}

/* Threads of process pid (0: this one) named ote-copy-*. */
static int copy_threads(pid_t pid)
{
    int n = ote_test_threads_named((int)pid, "ote-copy-");

    assert_true(n >= 0);
    return n;
}

/*
 * copy_threads(pid) once it is want, or what it is after 5 s: a joined
 * thread's task stays listed in /proc a moment after pthread_join returned
 * (longer on a loaded machine), so a count right after an engine's end may
 * still see its threads.
 */
static int copy_threads_settled(pid_t pid, int want)
{
    int n = copy_threads(pid);

    for (int i = 0; i < 500 && n != want; i++) {
        usleep(10 * 1000);
        n = copy_threads(pid);
    }
    return n;
}

#define MIXED_N 72

/*
 * [0, *total_p) cut into blocks of 16 KiB, 1 MiB + 777 and odd sizes
 * between, each at the same offset on both sides, in shuffled order.
 */
static void mixed_blocks(size_t *off, size_t *len, size_t *total_p, unsigned seed)
{
    size_t total = 0;

    for (int i = 0; i < MIXED_N; i++) {
        len[i] = i % 9 == 4 ? (1u << 20) + 777 : i % 5 == 1 ? 4096 + 13 * (size_t)i : 16384;
        off[i] = total;
        total += len[i];
    }
    srand(seed);
    for (int i = MIXED_N - 1; i > 0; i--) {
        int j = rand() % (i + 1);
        size_t o = off[i], l = len[i];

        off[i] = off[j], len[i] = len[j];
        off[j] = o, len[j] = l;
    }
    *total_p = total;
}

/* One batch of the mixed blocks between local and region R_RW; every task COMPLETED. */
static void mixed_run(fx_t *f, ote_op_t op, const size_t *off, const size_t *len)
{
    ote_xfer_req_t r[MIXED_N];
    ote_task_status_t st[MIXED_N];

    for (int i = 0; i < MIXED_N; i++)
        r[i] = (ote_xfer_req_t){.op = op, .local_addr = f->local + off[i], .segment = f->seg,
                                .remote_addr = f->t.addr[R_RW] + off[i], .length = len[i]};
    assert_int_equal(ote_test_batch_run(f->e, r, MIXED_N, 20000, st), OTE_OK);
    for (size_t i = 0; i < MIXED_N; i++) {
        assert_int_equal(st[i].state, OTE_TASK_COMPLETED);
        assert_int_equal(st[i].transferred, len[i]);
    }
}

/*
 * Large WRITEs with one that crosses the region's end among them, in one
 * batch (read by the target together, copied in pieces): that one alone
 * fails OUT_OF_BOUNDS, the others land whole.
 */
static void mixed_refusal(fx_t *f, unsigned seed)
{
    enum { N = 5, BAD = 2 };
    const size_t len = 1u << 20;
    ote_xfer_req_t r[N];
    ote_task_status_t st[N];

    ote_test_fill(f->local, 0, N * len, seed);
    mp_target_ok(f->e, f->seg, "zero %d 0 %lu", R_RW, BIG);
    for (int i = 0; i < N; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f->local + (size_t)i * len,
                                .segment = f->seg,
                                .remote_addr = i == BAD ? f->t.addr[R_RW] + BIG - len / 2
                                                        : f->t.addr[R_RW] + (size_t)i * len,
                                .length = len};
    assert_int_equal(ote_test_batch_run(f->e, r, N, 20000, st), OTE_OK);
    for (size_t i = 0; i < N; i++) {
        if (i == BAD) {
            assert_int_equal(st[i].state, OTE_TASK_FAILED);
            assert_int_equal(st[i].error, OTE_ERR_OUT_OF_BOUNDS);
        } else {
            assert_int_equal(st[i].state, OTE_TASK_COMPLETED);
            mp_target_ok(f->e, f->seg, "check %d %zu %zu %u", R_RW, i * len, len, seed);
        }
    }
    /* Nothing of the refused one landed: the end of the region is still zero. */
    {
        uint8_t *zeros = calloc(1, len / 2);
        char cmd[96], want[64], reply[64];

        assert_non_null(zeros);
        snprintf(want, sizeof(want), "sum %016llx",
                 (unsigned long long)ote_test_hash(zeros, len / 2));
        snprintf(cmd, sizeof(cmd), "sum %d %lu %zu", R_RW, BIG - len / 2, len / 2);
        assert_int_equal(ote_test_target_cmd(f->e, f->seg, cmd, reply, sizeof(reply), 20000), 0);
        assert_string_equal(reply, want);
        free(zeros);
    }
}

/*
 * The copies of a progress round, alone (OTE_CMA_COPY_THREADS=0) and shared
 * with two copy threads, over shm (the initiator copies through mappings)
 * and over cma (the target copies with process_vm_readv/writev): the same
 * bytes land; the threads start with the first large round in the process
 * that copies and end with its engine.
 */
static void test_copy_threads(void **state)
{
    static const char *const args[] = {"--region", "16m:rw@*", NULL};
    static const char *const counts[] = {"0", "2"};
    static const char *const tls[] = {"shm", "cma"};
    size_t off[MIXED_N], len[MIXED_N], total;

    (void)state;
    mixed_blocks(off, len, &total, 5);
    assert_true(total <= BIG);
    for (int t = 0; t < 2; t++) {
        for (int k = 0; k < 2; k++) {
            unsigned seed = 70 + 10 * (unsigned)t + 2 * (unsigned)k;
            int before    = copy_threads_settled(0, 0);
            uint64_t m0, r0, m1, r1;
            fx_t g;

            memset(&g, 0, sizeof(g));
            setenv("OTE_TLS", tls[t], 1);
            setenv("OTE_CMA_COPY_THREADS", counts[k], 1);
            mp_fx_start(&g, args, BIG);
            ote_shm_stats(&m0, &r0);
            ote_test_fill(g.local, 0, total, seed);
            mp_target_ok(g.e, g.seg, "zero %d 0 %zu", R_RW, total);
            mixed_run(&g, OTE_OP_WRITE, off, len);
            mp_target_ok(g.e, g.seg, "check %d 0 %zu %u", R_RW, total, seed);

            mp_target_ok(g.e, g.seg, "fill %d 0 %zu %u", R_RW, total, seed + 1);
            memset(g.local, 0, total);
            mixed_run(&g, OTE_OP_READ, off, len);
            assert_int_equal(ote_test_check(g.local, 0, total, seed + 1), -1);
            ote_shm_stats(&m1, &r1);
            mixed_refusal(&g, seed + 2);
            /* shm: all through the mappings, copied here; cma: copied by the target. */
            assert_int_equal(m1 - m0, t == 0 ? 2 * total : 0);
            assert_int_equal(copy_threads(0) - before, t == 0 && k == 1 ? 2 : 0);
            assert_int_equal(copy_threads(g.t.pid), t == 1 && k == 1 ? 2 : 0);
            mp_fx_stop(&g, true);
            assert_int_equal(copy_threads_settled(0, before), before);
        }
    }
    setenv("OTE_TLS", "shm", 1);
    unsetenv("OTE_CMA_COPY_THREADS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_read_mapped),
        cmocka_unit_test(test_read_only_region),
        cmocka_unit_test(test_out_of_bounds),
        cmocka_unit_test(test_private_memory_by_reference),
        cmocka_unit_test(test_dereg_live_peer),
        cmocka_unit_test(test_dereg_stopped_peer),
        cmocka_unit_test(test_copy_threads),
    };
    char ms[16];

    snprintf(ms, sizeof(ms), "%d", UNMAP_MS);
    setenv("OTE_TLS", "shm", 1);
    setenv("OTE_SHM_UNMAP_TIMEOUT_MS", ms, 1);
    return cmocka_run_group_tests(tests, setup, teardown);
}
