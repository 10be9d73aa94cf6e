/*
 * cuda_ipc across two processes on the CUDA test double: GPU<->GPU and
 * pinned-host<->GPU, READ and WRITE, every byte checked in the target;
 * access refused where the region lacks it; the import cache bounded by
 * OTE_CUDA_IPC_CACHE_ENTRIES with LRU eviction, and every mapping closed
 * when the segment closes.
 */
#include "../unit/cuda/cuda_test.h"
#include "mp_util.h"

#define RLEN (8u << 20)

void ote_cuda_ipc_cache_stats(size_t *open_p, unsigned long *opens_p, unsigned long *evictions_p);

static ote_task_status_t xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                              uint64_t remote, size_t len)
{
    ote_task_status_t st = {0};

    assert_int_equal(ote_test_xfer(e, seg, op, local, remote, len, 20000, &st), OTE_OK);
    return st;
}

static void test_ipc_data(void **state)
{
    const char *const args[] = {"--region", "8m:rw@cuda:0", "--region", "8m:r@cuda:1",
                                NULL};
    ote_cuda_double_stats_t dst;
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    void *gpu, *pinned;
    ote_mem_h mg, mp;
    ote_task_status_t st;
    size_t open;
    unsigned long opens, ev;

    (void)state;
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    e = ote_test_engine("127.0.0.1:0");
    assert_int_equal(ote_mem_alloc(e, RLEN, "cuda:1", 0, &gpu, &mg), OTE_OK);
    assert_int_equal(ote_mem_alloc(e, RLEN, "cuda_host:0", 0, &pinned, &mp), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);

    /* GPU -> remote GPU (WRITE), checked in the target. */
    ote_test_fill(gpu, 0, RLEN, 21);
    st = xfer(e, seg, OTE_OP_WRITE, gpu, t.addr[0], RLEN);
    if (st.state != OTE_TASK_COMPLETED) fail_msg("write: %s", ote_status_string(st.error));
    mp_target_ok(e, seg, "check 0 0 %u 21", RLEN);
    /* remote GPU -> pinned host (READ), at odd offsets. */
    mp_target_ok(e, seg, "fill 1 0 %u 22", RLEN);
    memset(pinned, 0, RLEN);
    st = xfer(e, seg, OTE_OP_READ, (char *)pinned + 7, t.addr[1] + 7, RLEN - 100);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check((char *)pinned + 7, 7, RLEN - 100, 22), -1);
    /* pinned host -> remote GPU (WRITE). */
    ote_test_fill(pinned, 0, RLEN, 23);
    st = xfer(e, seg, OTE_OP_WRITE, pinned, t.addr[0], RLEN);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    mp_target_ok(e, seg, "check 0 0 %u 23", RLEN);
    /* remote GPU -> GPU (READ). */
    memset(gpu, 0, RLEN);
    st = xfer(e, seg, OTE_OP_READ, gpu, t.addr[1], RLEN);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(gpu, 0, RLEN, 22), -1);
    /* Region 1 is read-only: WRITE refused, nothing changed. */
    st = xfer(e, seg, OTE_OP_WRITE, gpu, t.addr[1], 4096);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_ACCESS);
    mp_target_ok(e, seg, "check 1 0 %u 22", RLEN);
    /* Past the end of the region. */
    st = xfer(e, seg, OTE_OP_READ, gpu, t.addr[0] + RLEN - 10, 20);
    assert_int_not_equal(st.state, OTE_TASK_COMPLETED);

    ote_cuda_ipc_cache_stats(&open, &opens, &ev);
    assert_int_equal(open, 2);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_cuda_ipc_cache_stats(&open, &opens, &ev);
    assert_int_equal(open, 0);
    cuda_test_stats(&dst);
    assert_int_equal(dst.ipc_open, 0);

    ote_test_target_stop(&t);
    assert_int_equal(ote_mem_free(e, mg), OTE_OK);
    assert_int_equal(ote_mem_free(e, mp), OTE_OK);
    ote_engine_destroy(e);
}

static void test_ipc_cache_eviction(void **state)
{
    const char *const args[] = {"--region", "1m:rw@cuda:0", "--region", "1m:rw@cuda:0",
                                "--region", "1m:rw@cuda:0", NULL};
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    void *gpu;
    ote_mem_h mg;
    size_t open;
    unsigned long opens0, ev0, opens, ev;
    static const int order[] = {0, 1, 2, 0, 1, 2, 2};

    (void)state;
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    setenv("OTE_CUDA_IPC_CACHE_ENTRIES", "2", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_CUDA_IPC_CACHE_ENTRIES");
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda:0", 0, &gpu, &mg), OTE_OK);
    assert_int_equal(ote_segment_open(e, t.name, &seg), OTE_OK);
    ote_cuda_ipc_cache_stats(&open, &opens0, &ev0);
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        ote_task_status_t st;

        ote_test_fill(gpu, 0, 1 << 20, 100 + i);
        st = xfer(e, seg, OTE_OP_WRITE, gpu, t.addr[order[i]], 1 << 20);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        mp_target_ok(e, seg, "check %d 0 %u %zu", order[i], 1u << 20, 100 + i);
        ote_cuda_ipc_cache_stats(&open, &opens, &ev);
        assert_true(open <= 2);
    }
    /* 0,1 open; 2 evicts 0; 0 evicts 1; 1 evicts 2; 2 evicts 0; 2 hits. */
    ote_cuda_ipc_cache_stats(&open, &opens, &ev);
    assert_int_equal(opens - opens0, 6);
    assert_int_equal(ev - ev0, 4);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_cuda_ipc_cache_stats(&open, &opens, &ev);
    assert_int_equal(open, 0);
    ote_test_target_stop(&t);
    assert_int_equal(ote_mem_free(e, mg), OTE_OK);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipc_data),
        cmocka_unit_test(test_ipc_cache_eviction),
    };

    cuda_test_use_double(2);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "50", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
