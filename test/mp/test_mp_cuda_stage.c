/*
 * Local staging on the CUDA test double: GPU memory of this process to and
 * from host memory of a target process over TCP (no transport reaches GPU
 * memory there), through pinned chunks. Checks every byte, the pipeline
 * (chunks in flight at once, device copies overlapping network transfers,
 * at most OTE_STAGE_SLOTS per slice), pool exhaustion, and that cancel and
 * a dead peer give every pinned chunk back.
 */
#include "../unit/cuda/cuda_test.h"
#include "proto/stage.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define LEN   (24u << 20)
#define SLOTS 4

static ote_test_target_t target;
static bool              target_up;

static void cmd_ok(ote_engine_h e, ote_segment_h seg, const char *fmt, ...)
{
    char cmd[256], reply[128];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    assert_int_equal(ote_test_target_cmd(e, seg, cmd, reply, sizeof(reply), 10000), 0);
    if (strcmp(reply, "ok") != 0)
        fail_msg("'%s' -> '%s'", cmd, reply);
}

static ote_engine_h engine(void)
{
    ote_engine_h e;

    setenv("OTE_TLS", "tcp,cuda_copy,cuda_ipc,cuda_stage", 1);
    setenv("OTE_STAGE_CHUNK_SIZE", "1m", 1);
    setenv("OTE_STAGE_SLOTS", "4", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_TLS");
    unsetenv("OTE_STAGE_CHUNK_SIZE");
    unsetenv("OTE_STAGE_SLOTS");
    return e;
}

static void start_target(void)
{
    const char *const args[] = {"--region", "24m:rw", "--region", "24m:rw", NULL};

    setenv("OTE_TLS", "tcp", 1);
    assert_int_equal(ote_test_target_start(&target, NULL, args), 0);
    unsetenv("OTE_TLS");
    target_up = true;
}

static void stop_target(void)
{
    if (target_up)
        ote_test_target_stop(&target);
    target_up = false;
}

static void wait_all(ote_batch_h b)
{
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
}

static void test_stage_data(void **state)
{
    ote_proto_stage_stats_t s0, s1;
    ote_engine_h e;
    ote_segment_h seg;
    ote_task_status_t st;
    ote_batch_h b;
    void *gpu;
    ote_mem_h mg;
    size_t first;

    (void)state;
    start_target();
    e = engine();
    assert_int_equal(ote_mem_alloc(e, LEN, "cuda:0", 0, &gpu, &mg), OTE_OK);
    assert_int_equal(ote_segment_open(e, target.name, &seg), OTE_OK);
    ote_proto_stage_stats(&s0);

    /* GPU -> remote host (WRITE), and back into the GPU (READ) from region 1. */
    ote_test_fill(gpu, 0, LEN, 31);
    cmd_ok(e, seg, "fill 1 0 %u 32", LEN);
    {
        ote_xfer_req_t r[2] = {
            {.op = OTE_OP_WRITE, .local_addr = gpu, .segment = seg,
             .remote_addr = target.addr[0], .length = LEN},
        };

        assert_int_equal(ote_batch_create(e, 4, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_OK);
        wait_all(b);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        if (st.state != OTE_TASK_COMPLETED)
            fail_msg("staged write: %s", ote_status_string(st.error));
        assert_int_equal(st.transferred, LEN);
        cmd_ok(e, seg, "check 0 0 %u 31", LEN);

        r[1] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = (char *)gpu + 3,
                                .segment = seg, .remote_addr = target.addr[1] + 3,
                                .length = LEN - 1000};
        assert_int_equal(ote_batch_submit(b, &r[1], 1, &first), OTE_OK);
        wait_all(b);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        if (st.state != OTE_TASK_COMPLETED)
            fail_msg("staged read: %s", ote_status_string(st.error));
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

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    stop_target();
    assert_int_equal(ote_mem_free(e, mg), OTE_OK);
    ote_engine_destroy(e);
}

/* More slices than the pool has chunks for: they wait their turn and all complete. */
static void test_stage_pool_exhaustion(void **state)
{
    ote_proto_stage_stats_t s0, s1;
    ote_xfer_req_t r[6];
    ote_engine_h e;
    ote_segment_h seg;
    ote_batch_h b;
    void *gpu;
    ote_mem_h mg;
    size_t first;

    (void)state;
    start_target();
    e = engine();
    assert_int_equal(ote_mem_alloc(e, LEN, "cuda:1", 0, &gpu, &mg), OTE_OK);
    assert_int_equal(ote_segment_open(e, target.name, &seg), OTE_OK);
    ote_test_fill(gpu, 0, LEN, 41);
    ote_proto_stage_stats(&s0);
    for (int i = 0; i < 6; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = (char *)gpu + i * (LEN / 6),
                                .segment = seg, .remote_addr = target.addr[0] + i * (LEN / 6),
                                .length = LEN / 6};
    assert_int_equal(ote_batch_create(e, 6, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, 6, &first), OTE_OK);
    wait_all(b);
    for (int i = 0; i < 6; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
    }
    ote_batch_release(b);
    cmd_ok(e, seg, "check 0 0 %u 41", LEN / 6 * 6);
    ote_proto_stage_stats(&s1);
    assert_true(s1.pool_waits > s0.pool_waits);
    assert_int_equal(s1.chunks_in_use, 0);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    stop_target();
    assert_int_equal(ote_mem_free(e, mg), OTE_OK);
    ote_engine_destroy(e);
}

/* Cancel, then a dead peer, in the middle of slow pipelines: every chunk comes back. */
static void test_stage_cancel_and_peer_death(void **state)
{
    ote_proto_stage_stats_t s;
    ote_task_status_t st;
    ote_xfer_req_t r;
    ote_engine_h e;
    ote_segment_h seg;
    ote_batch_h b;
    void *gpu;
    ote_mem_h mg;
    size_t first;

    (void)state;
    start_target();
    e = engine();
    assert_int_equal(ote_mem_alloc(e, LEN, "cuda:0", 0, &gpu, &mg), OTE_OK);
    assert_int_equal(ote_segment_open(e, target.name, &seg), OTE_OK);
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = gpu, .segment = seg,
                         .remote_addr = target.addr[0], .length = LEN};

    /* Device copies take 50 ms each, two streams: 24 chunks take ~0.6 s. */
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(50000);
    assert_int_equal(ote_batch_create(e, 4, &b), OTE_OK);
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
    ote_test_target_kill(&target);
    target_up = false;
    wait_all(b);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_not_equal(st.state, OTE_TASK_COMPLETED);
    ote_proto_stage_stats(&s);
    assert_int_equal(s.chunks_in_use, 0);
    ote_batch_release(b);
    ((void (*)(long))cuda_test_sym("ote_cuda_double_set_delay"))(500);
    ote_segment_close(seg);
    assert_int_equal(ote_mem_free(e, mg), OTE_OK);
    ote_engine_destroy(e);
}

static int teardown(void **state)
{
    (void)state;
    stop_target();
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stage_data, teardown),
        cmocka_unit_test_teardown(test_stage_pool_exhaustion, teardown),
        cmocka_unit_test_teardown(test_stage_cancel_and_peer_death, teardown),
    };
    int rc;

    (void)argc;
    (void)argv;
    cuda_test_use_double(2);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "500", 1);
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc;
}
