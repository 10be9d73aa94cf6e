/*
 * CUDA at run time on the test double: loading, memory-type detection
 * (device ordinals through CUDA_VISIBLE_DEVICES, pinned host memory),
 * ote_mem_alloc of GPU and pinned memory, and cuda_copy within one process
 * (host<->GPU, GPU<->GPU, bounds checked at the target), with every byte
 * verified and nothing left behind.
 */
#include "core/engine_int.h"
#include "core/worker/worker.h"
#include "cuda_test.h"
#include "mem/mem.h"
#include "proto/stage.h"
#include "testlib.h"
#include "base/cuda_api.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#define LEN (40u << 20) /* several cuda_copy slices */

typedef int (*phys_fn_t)(const void *);
typedef int (*host_alloc_fn_t)(void **, size_t, unsigned);
typedef int (*free_host_fn_t)(void *);

static int wait_tasks(ote_batch_h b, size_t first, size_t n, ote_task_status_t *last)
{
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ote_batch_task_status(b, first + i, last), OTE_OK);
        if (last->state != OTE_TASK_COMPLETED)
            return -1;
    }
    return 0;
}

static void xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local, void *remote,
                 size_t len, ote_task_state_t expect, ote_status_t expect_err)
{
    ote_xfer_req_t r = {.op = op, .local_addr = local, .segment = seg,
                        .remote_addr = (uintptr_t)remote, .length = len};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;

    assert_int_equal(ote_batch_create(e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    wait_tasks(b, first, 1, &st);
    assert_int_equal(st.state, expect);
    if (expect != OTE_TASK_COMPLETED)
        assert_int_equal(st.error, expect_err);
    else
        assert_int_equal(st.transferred, len);
    ote_batch_release(b);
}

static void test_load_and_detect(void **state)
{
    phys_fn_t phys             = (phys_fn_t)cuda_test_sym("ote_cuda_double_phys");
    host_alloc_fn_t host_alloc = (host_alloc_fn_t)cuda_test_sym("cudaHostAlloc");
    free_host_fn_t free_host   = (free_host_fn_t)cuda_test_sym("cudaFreeHost");
    ote_engine_h e             = ote_test_engine("127.0.0.1:0");
    ote_mem_h g0, g1, sub, pin_mem;
    void *p0, *p1, *pinned, *pageable;
    ote_mem_desc_t d;

    (void)state;
    assert_non_null(ote_cuda_api());
    /* CUDA_VISIBLE_DEVICES=2,0 (set in main): ordinal 0 is physical 2. */
    assert_int_equal(ote_cuda_device_count(), 2);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda:0", 0, &p0, &g0), OTE_OK);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda:1", 0, &p1, &g1), OTE_OK);
    assert_int_equal(phys(p0), 2);
    assert_int_equal(phys(p1), 0);
    assert_string_equal(((ote_region_t *)g0)->location, "cuda:0");
    assert_int_equal(((ote_region_t *)g0)->mem_type, OTE_MEM_TYPE_CUDA);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda:2", 0, &pinned, &sub),
                     OTE_ERR_INVALID_PARAM);

    /* Detection of a sub-range: the same ordinal. */
    d = (ote_mem_desc_t){.addr = (char *)p1 + 4096, .length = 8192};
    assert_int_equal(ote_mem_register(e, &d, 1, &sub), OTE_OK);
    assert_string_equal(((ote_region_t *)sub)->location, "cuda:1");
    assert_int_equal(((ote_region_t *)sub)->mem_type, OTE_MEM_TYPE_CUDA);
    assert_int_equal(ote_mem_deregister(e, sub), OTE_OK);
    /* A range crossing the end of the GPU allocation is refused. */
    d = (ote_mem_desc_t){.addr = (char *)p1 + 4096, .length = 1 << 20};
    assert_int_not_equal(ote_mem_register(e, &d, 1, &sub), OTE_OK);

    /* Pinned host memory is host memory, and known as pinned. */
    assert_int_equal(host_alloc(&pinned, 1 << 20, 0), 0);
    pageable = malloc(1 << 20);
    assert_true(ote_mem_host_pinned(pinned, 1 << 20));
    assert_false(ote_mem_host_pinned(pageable, 1 << 20));
    assert_false(ote_mem_host_pinned(p0, 1 << 20));
    d = (ote_mem_desc_t){.addr = pinned, .length = 1 << 20};
    assert_int_equal(ote_mem_register(e, &d, 1, &sub), OTE_OK);
    assert_int_equal(((ote_region_t *)sub)->mem_type, OTE_MEM_TYPE_HOST);
    assert_memory_equal(((ote_region_t *)sub)->location, "cpu:", 4);
    assert_int_equal(ote_mem_deregister(e, sub), OTE_OK);
    assert_int_equal(free_host(pinned), 0);
    free(pageable);

    /* Engine-owned pinned memory near a GPU. */
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda_host:1", 0, &pinned, &pin_mem), OTE_OK);
    assert_true(ote_mem_host_pinned(pinned, 1 << 20));
    assert_int_equal(((ote_region_t *)pin_mem)->mem_type, OTE_MEM_TYPE_HOST);
    assert_int_equal(ote_mem_free(e, pin_mem), OTE_OK);

    assert_int_equal(ote_mem_free(e, g0), OTE_OK);
    assert_int_equal(ote_mem_free(e, g1), OTE_OK);
    ote_engine_destroy(e);
}

static void test_copy_in_process(void **state)
{
    ote_engine_h e = ote_test_engine("127.0.0.1:0");
    ote_cuda_double_stats_t before, after;
    uint8_t *host, *back;
    void *g0, *g1;
    ote_mem_h mh, mb, m0, m1;
    ote_segment_h self;
    ote_mem_desc_t d[2];
    ote_mem_h m[2];

    (void)state;
    host = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    back = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    d[0] = (ote_mem_desc_t){.addr = host, .length = LEN,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    d[1] = (ote_mem_desc_t){.addr = back, .length = LEN,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(e, d, 2, m), OTE_OK);
    mh = m[0];
    mb = m[1];
    assert_int_equal(ote_mem_alloc(e, LEN, "cuda:0", OTE_ACCESS_REMOTE_READ |
                                   OTE_ACCESS_REMOTE_WRITE, &g0, &m0), OTE_OK);
    assert_int_equal(ote_mem_alloc(e, LEN, "cuda:1", OTE_ACCESS_REMOTE_WRITE, &g1, &m1),
                     OTE_OK);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &self), OTE_OK);
    ote_test_fill(host, 0, LEN, 11);
    cuda_test_stats(&before);

    /* host -> GPU 0 (WRITE), GPU 0 -> GPU 1 (WRITE), GPU 1 -> host (READ refused: no
     * remote-read access), GPU 0 -> host (READ). */
    xfer(e, self, OTE_OP_WRITE, host, g0, LEN, OTE_TASK_COMPLETED, OTE_OK);
    xfer(e, self, OTE_OP_WRITE, g0, g1, LEN, OTE_TASK_COMPLETED, OTE_OK);
    xfer(e, self, OTE_OP_READ, back, g1, LEN, OTE_TASK_FAILED, OTE_ERR_ACCESS);
    /* The double's device memory is host memory: look at it directly too. */
    assert_int_equal(ote_test_check(g1, 0, LEN, 11), -1);
    memset(back, 0, LEN);
    xfer(e, self, OTE_OP_READ, back, g0, LEN, OTE_TASK_COMPLETED, OTE_OK);
    assert_int_equal(ote_test_check(back, 0, LEN, 11), -1);
    /* Unaligned piece, GPU -> host, at an offset. */
    memset(back, 0, LEN);
    xfer(e, self, OTE_OP_READ, back + 3, (char *)g0 + 5, 1000003, OTE_TASK_COMPLETED, OTE_OK);
    assert_int_equal(ote_test_check(back + 3, 5, 1000003, 11), -1);
    /* Past the end of the GPU region: refused by the target check. */
    xfer(e, self, OTE_OP_WRITE, host, (char *)g0 + LEN - 100, 200, OTE_TASK_FAILED,
         OTE_ERR_OUT_OF_BOUNDS);
    cuda_test_stats(&after);
    /* At least one device copy per 16 MiB slice of the 3 full transfers. */
    assert_true(after.copies - before.copies >= 3 * 3);

    assert_int_equal(ote_segment_close(self), OTE_OK);
    assert_int_equal(ote_mem_free(e, m0), OTE_OK);
    assert_int_equal(ote_mem_free(e, m1), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mh), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mb), OTE_OK);
    ote_engine_destroy(e);
    cuda_test_stats(&after);
    assert_int_equal(after.streams, 0);
    assert_int_equal(after.events, 0);
    assert_int_equal(after.dev_allocs, 0);
    assert_int_equal(after.pinned, 0);
    munmap(host, LEN);
    munmap(back, LEN);
}

/* OTE_GPU_DIRECT: y fails where no network md registers GPU memory; n keeps it off them. */
static void test_gpu_direct(void **state)
{
    ote_mem_table_params_t p = {.gpu_direct = OTE_MEM_GPU_DIRECT_NO};
    ote_md_t net = {.name = "net", .mem_types = OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA};
    ote_md_t dev = {.name = "dev", .mem_types = OTE_MEM_TYPE_CUDA,
                    .flags = OTE_MD_FLAG_DEVICE_NATIVE};
    ote_engine_h e;
    void *g;
    ote_mem_h m;

    (void)state;
    assert_false(ote_mem_md_reaches(&p, &net, OTE_MEM_TYPE_CUDA));
    assert_true(ote_mem_md_reaches(&p, &net, OTE_MEM_TYPE_HOST));
    assert_true(ote_mem_md_reaches(&p, &dev, OTE_MEM_TYPE_CUDA));
    p.gpu_direct = OTE_MEM_GPU_DIRECT_AUTO;
    assert_true(ote_mem_md_reaches(&p, &net, OTE_MEM_TYPE_CUDA));

    setenv("OTE_GPU_DIRECT", "y", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_GPU_DIRECT");
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cuda:0", 0, &g, &m), OTE_ERR_UNSUPPORTED);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, "cpu:0", 0, &g, &m), OTE_OK);
    assert_int_equal(ote_mem_free(e, m), OTE_OK);
    ote_engine_destroy(e);
}

/* A host rail that reaches GPU memory itself (GPUDirect) gets no staging rail. */
static void test_stage_rail_skipped_for_gpu_direct(void **state)
{
    ote_engine_h e = ote_test_engine("127.0.0.1:0");
    ote_stage_worker_t *stage = e->facts.workers[0].stage;
    ote_rail_t host = {0}, rail;
    ote_tl_iface_t host_iface = {0};
    ote_tl_ep_t dummy = {0};

    (void)state;
    assert_non_null(stage);
    host.iface           = &host_iface;
    host.ep              = &dummy;
    host.caps.ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    host.caps.mem_local  = OTE_MEM_TYPE_HOST;
    host.caps.mem_remote = OTE_MEM_TYPE_HOST;
    host.caps.bandwidth  = 1e9;
    assert_int_equal(ote_proto_stage_rail_init(&rail, &host, stage), OTE_OK);
    assert_int_equal(rail.caps.mem_local, OTE_MEM_TYPE_HOST | OTE_MEM_TYPE_CUDA);
    assert_true(rail.caps.ops & OTE_TL_CAP_DEVICE_PAIRS);
    rail.iface->ep_ops->destroy(rail.ep);
    host.caps.mem_local |= OTE_MEM_TYPE_CUDA;
    host.caps.mem_remote |= OTE_MEM_TYPE_CUDA;
    assert_int_equal(ote_proto_stage_rail_init(&rail, &host, stage), OTE_ERR_UNSUPPORTED);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_detect),
        cmocka_unit_test(test_copy_in_process),
        cmocka_unit_test(test_gpu_direct),
        cmocka_unit_test(test_stage_rail_skipped_for_gpu_direct),
    };

    cuda_test_use_double(3);
    setenv("CUDA_VISIBLE_DEVICES", "2,0", 1);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "200", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
