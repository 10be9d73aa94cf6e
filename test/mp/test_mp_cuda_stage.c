/*
 * Local staging on the CUDA test double: GPU memory of this process to and
 * from host memory of a target process over TCP (no transport reaches GPU
 * memory there), through pinned chunks. Checks every byte, the pipeline
 * (chunks in flight at once, device copies overlapping network transfers,
 * at most OTE_STAGE_SLOTS per slice), pool exhaustion, that cancel and
 * a dead peer give every pinned chunk back, and that a slice begun before
 * its peer restarted sends nothing to the new instance.
 */
#include "../unit/cuda/cuda_test.h"
#include "stage_fx.h"

#include <sys/utsname.h>

#define LEN   (24u << 20)
#define SLOTS 4
#define TLS   "tcp,cuda_copy,cuda_ipc,cuda_stage"

static stage_fx_t fx;

/* Two host regions of LEN bytes, reached over TCP alone. */
static void start_target(void)
{
    const char *const args[] = {"--region", "24m:rw", "--region", "24m:rw", NULL};

    setenv("OTE_TLS", "tcp", 1);
    stage_fx_start_target(&fx, args);
    unsetenv("OTE_TLS");
}

static void wait_all(ote_batch_h b)
{
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
}

static void test_stage_data(void **state)
{
    ote_proto_stage_stats_t s0, s1;
    ote_task_status_t st;
    ote_batch_h b;
    void *gpu;
    size_t first;

    (void)state;
    start_target();
    stage_fx_open(&fx, TLS, "cuda:0", LEN);
    gpu = fx.buf;
    ote_proto_stage_stats(&s0);

    /* GPU -> remote host (WRITE), and back into the GPU (READ) from region 1. */
    ote_test_fill(gpu, 0, LEN, 31);
    mp_target_ok(fx.e, fx.seg, "fill 1 0 %u 32", LEN);
    {
        ote_xfer_req_t r[2] = {
            {.op = OTE_OP_WRITE, .local_addr = gpu, .segment = fx.seg,
             .remote_addr = fx.target.addr[0], .length = LEN},
        };

        assert_int_equal(ote_batch_create(fx.e, 4, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_OK);
        wait_all(b);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        stage_fx_expect_done(st, LEN, "staged write");
        mp_target_ok(fx.e, fx.seg, "check 0 0 %u 31", LEN);

        r[1] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = (char *)gpu + 3,
                                .segment = fx.seg, .remote_addr = fx.target.addr[1] + 3,
                                .length = LEN - 1000};
        assert_int_equal(ote_batch_submit(b, &r[1], 1, &first), OTE_OK);
        wait_all(b);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        stage_fx_expect_done(st, LEN - 1000, "staged read");
        assert_int_equal(ote_test_check((char *)gpu + 3, 3, LEN - 1000, 32), -1);
        ote_batch_release(b);
    }
    ote_proto_stage_stats(&s1);
    /* 24 + 24 chunks of 1 MiB, pipelined: several in flight, never more than the slots. */
    assert_true(s1.chunks - s0.chunks >= 48);
    assert_true(s1.max_inflight >= 2);
    assert_true(s1.max_inflight <= SLOTS);
    assert_true(s1.overlapped > s0.overlapped);
    assert_int_equal(s1.chunks_in_use, 0);
    stage_fx_close(&fx);
}

/* More slices than the pool has chunks for: they wait their turn and all complete. */
static void test_stage_pool_exhaustion(void **state)
{
    ote_proto_stage_stats_t s0, s1;

    (void)state;
    start_target();
    stage_fx_open(&fx, TLS, "cuda:1", LEN);
    ote_test_fill(fx.buf, 0, LEN, 41);
    ote_proto_stage_stats(&s0);
    stage_fx_write_slices(&fx, LEN, 6);
    mp_target_ok(fx.e, fx.seg, "check 0 0 %u 41", LEN / 6 * 6);
    ote_proto_stage_stats(&s1);
    assert_true(s1.pool_waits > s0.pool_waits);
    assert_int_equal(s1.chunks_in_use, 0);
    stage_fx_close(&fx);
}

/* Cancel, then a dead peer, in the middle of slow pipelines: every chunk comes back. */
static void test_stage_cancel_and_peer_death(void **state)
{
    ote_proto_stage_stats_t s;
    ote_task_status_t st;
    ote_xfer_req_t r;
    ote_batch_h b;
    size_t first;

    (void)state;
    start_target();
    stage_fx_open(&fx, TLS, "cuda:0", LEN);
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = fx.buf, .segment = fx.seg,
                         .remote_addr = fx.target.addr[0], .length = LEN};

    /* Device copies take 50 ms each, two streams: 24 chunks take ~0.6 s. */
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(50000);
    assert_int_equal(ote_batch_create(fx.e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    usleep(50 * 1000);
    assert_int_equal(ote_batch_cancel(b, first), OTE_OK);
    wait_all(b);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_CANCELED);
    assert_true(st.transferred < LEN);
    ote_proto_stage_stats(&s);
    assert_int_equal(s.chunks_in_use, 0);

    /* The peer dies mid-transfer: the task fails, chunks come back. */
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    usleep(100 * 1000);
    stage_fx_kill_target(&fx);
    wait_all(b);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
    ote_proto_stage_stats(&s);
    assert_int_equal(s.chunks_in_use, 0);
    ote_batch_release(b);
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(500);
    stage_fx_close(&fx);
}

/*
 * The segment closed while its staged slices wait on slow device copies:
 * the close returns at once (the worker thread, polling the copies, lets
 * go of its lock for it), they end CANCELED after the close, and their ends
 * read the staging rail's iface, which the close must not have freed under
 * them (the ASan pass, or valgrind, shows a read of freed memory otherwise).
 */
static void test_stage_close_in_flight(void **state)
{
    ote_proto_stage_stats_t s;
    ote_task_status_t st[2];
    ote_xfer_req_t r[2];
    ote_batch_h b;
    size_t first;
    uint64_t t0, ms;

    (void)state;
    start_target();
    stage_fx_open(&fx, TLS, "cuda:0", LEN);
    for (int i = 0; i < 2; i++)
        r[i] = (ote_xfer_req_t){.op = i ? OTE_OP_READ : OTE_OP_WRITE,
                                .local_addr = (char *)fx.buf + i * (LEN / 2), .segment = fx.seg,
                                .remote_addr = fx.target.addr[i], .length = LEN / 2};
    /* Each copy takes 0.4 s: the close comes well before any slice could end (a loaded host). */
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(400000);
    assert_int_equal(ote_batch_create(fx.e, 2, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, 2, &first), OTE_OK);
    usleep(30 * 1000);
    t0 = ote_time_ns();
    assert_int_equal(ote_segment_close(fx.seg), OTE_OK);
    ms = (ote_time_ns() - t0) / 1000000;
    printf("# close with device copies under way took %llu ms\n", (unsigned long long)ms);
    /* Not held off by the worker thread that polls the copies (it took up to 3 s). */
    assert_true(ms < 300);
    fx.seg = NULL;
    wait_all(b);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ote_batch_task_status(b, first + (size_t)i, &st[i]), OTE_OK);
        assert_int_not_equal(st[i].state, OTE_TASK_COMPLETED);
        assert_true(st[i].transferred < LEN / 2);
    }
    ote_batch_release(b);
    ote_proto_stage_stats(&s);
    assert_int_equal(s.chunks_in_use, 0);
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(500);
    stage_fx_close(&fx);
}

/*
 * The target on listen without address randomization (setarch -R): two of
 * them started one after the other map their regions at the same address.
 * Where the host does not let it turn randomization off (a seccomp filter
 * on personality()), the target runs as it is.
 */
static void start_target_norandom(const char *listen)
{
    static struct utsname u;
    const char *const wrapper[] = {"setarch", u.machine, "-R", NULL};
    const char *const args[]    = {"--listen", listen, "--region", "24m:rw", NULL};

    assert_int_equal(uname(&u), 0);
    setenv("OTE_TLS", "tcp", 1);
    if (ote_test_target_start(&fx.target, wrapper, args) != 0) {
        printf("# setarch -R did not start the target: started with randomization\n");
        assert_int_equal(ote_test_target_start(&fx.target, NULL, args), 0);
    }
    fx.target_up = true;
    unsetenv("OTE_TLS");
}

/*
 * The peer restarts on the same address while a staged WRITE waits on slow
 * device copies, and the segment is reopened on the new instance: the
 * rebuild frees the host rail's ep and makes a new one, often at the same
 * address, and the new instance's region lies where the old one's did. The
 * chunks whose copies end afterwards must not go out on the new ep: the task
 * ends CANCELED (as ote_segment_reopen() says of tasks still in flight on
 * the old instance), the new instance's region is untouched, and the
 * segment carries data to it.
 */
static void test_stage_peer_restart(void **state)
{
    char listen[64];
    uint64_t old_addr;
    ote_proto_stage_stats_t s;
    ote_task_status_t st;
    ote_xfer_req_t r;
    ote_batch_h b;
    size_t first;
    int restarted = 0;
    char reply[64], want[64];
    uint8_t *zero;

    (void)state;
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", mp_free_port());
    start_target_norandom(listen);
    stage_fx_open(&fx, TLS, "cuda:0", LEN);
    ote_test_fill(fx.buf, 0, LEN, 11);
    old_addr = fx.target.addr[0];
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = fx.buf, .segment = fx.seg,
                         .remote_addr = old_addr, .length = LEN};

    /* Device copies take 1 s each: the first chunks are still copying after the reopen. */
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(1000000);
    assert_int_equal(ote_batch_create(fx.e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    usleep(30 * 1000);
    stage_fx_kill_target(&fx);
    start_target_norandom(listen);
    if (fx.target.addr[0] != old_addr)
        printf("# the new instance's region is at %llx, the old one's was at %llx\n",
               (unsigned long long)fx.target.addr[0], (unsigned long long)old_addr);
    assert_int_equal(ote_segment_reopen(fx.seg, &restarted), OTE_OK);
    assert_int_equal(restarted, 1);
    wait_all(b);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    /* (A slow host may see the old connection fail before the reopen: REMOTE_DISCONNECT.) */
    if (st.state != OTE_TASK_CANCELED &&
        (st.state != OTE_TASK_FAILED || st.error != OTE_ERR_REMOTE_DISCONNECT))
        fail_msg("the task across the restart ended in state %d, %s", st.state,
                 ote_status_string(st.error));
    ote_batch_release(b);
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(500);
    ote_proto_stage_stats(&s);
    assert_int_equal(s.chunks_in_use, 0);

    /* Nothing of the old slice reached the new instance's region. */
    zero = calloc(1, LEN);
    assert_non_null(zero);
    assert_int_equal(ote_test_target_cmd(fx.e, fx.seg, "sum 0 0 25165824", reply, sizeof(reply),
                                         10000),
                     0);
    snprintf(want, sizeof(want), "sum %016llx", (unsigned long long)ote_test_hash(zero, LEN));
    assert_string_equal(reply, want);
    free(zero);

    /* The segment, bound to the new instance, carries a staged WRITE whole. */
    r.remote_addr = fx.target.addr[0];
    stage_fx_expect_done(stage_fx_run1(&fx, &r), LEN, "a WRITE to the new instance");
    assert_int_equal(ote_test_target_expect(fx.e, fx.seg, "check 0 0 25165824 11", "ok", 10000),
                     0);
    stage_fx_close(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        stage_fx_test(test_stage_data, &fx),
        stage_fx_test(test_stage_pool_exhaustion, &fx),
        stage_fx_test(test_stage_cancel_and_peer_death, &fx),
        stage_fx_test(test_stage_close_in_flight, &fx),
        stage_fx_test(test_stage_peer_restart, &fx),
    };

    cuda_test_use_double(2);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "500", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
