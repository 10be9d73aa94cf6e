/*
 * Many remote-staged and PUTBACK requests at once, between two engines of
 * this process: every byte lands, and the threads the process runs stay
 * bounded by the pools (proto/jobs.h: the initiator's protocol pool, the
 * target's PUTBACK pool), sampled all along from /proc/self/task (a
 * thread per request would add REQS); a
 * PUTBACK target that serves many requests of one initiator opens one
 * segment to it.
 */
#include "../unit/cuda/cuda_test.h"
#include "core/ctl_int.h"
#include "core/engine.h"
#include "proto/jobs.h"
#include "testlib.h"

#include <dirent.h>
#include <ote/ote.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define REQS  64
#define BLOCK (256u << 10)
/* Threads that come and go besides the pools' (the CUDA double's, connection set-up). */
#define SLACK 4

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Samples the thread count until stopped: the most seen. */
typedef struct {
    pthread_t   th;
    atomic_bool stop;
    atomic_int  peak;
} sampler_t;

static void *sampler_main(void *arg)
{
    sampler_t *s = arg;

    while (!atomic_load(&s->stop)) {
        int n = threads_now();

        if (n > atomic_load(&s->peak))
            atomic_store(&s->peak, n);
        usleep(200);
    }
    return NULL;
}

static void sampler_start(sampler_t *s)
{
    atomic_init(&s->stop, false);
    atomic_init(&s->peak, threads_now());
    assert_int_equal(pthread_create(&s->th, NULL, sampler_main, s), 0);
}

/* The most threads seen, less the sampler itself. */
static int sampler_stop(sampler_t *s)
{
    atomic_store(&s->stop, true);
    pthread_join(s->th, NULL);
    return atomic_load(&s->peak) - 1;
}

/* REQS requests of BLOCK bytes between local and remote (op), every one COMPLETED. */
static void run_many(ote_engine_h e, ote_segment_h seg, ote_op_t op, uint8_t *local,
                     uint64_t remote)
{
    ote_xfer_req_t r[REQS];
    ote_batch_h b;
    size_t first;

    for (int i = 0; i < REQS; i++)
        r[i] = (ote_xfer_req_t){.op = op, .segment = seg, .local_addr = local + i * BLOCK,
                                .remote_addr = remote + (uint64_t)i * BLOCK, .length = BLOCK};
    assert_int_equal(ote_batch_create(e, REQS, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, REQS, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 60000), OTE_OK);
    for (int i = 0; i < REQS; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
        if (st.state != OTE_TASK_COMPLETED)
            fail_msg("request %d: state %d, %s", i, st.state, ote_status_string(st.error));
        assert_int_equal(st.transferred, BLOCK);
    }
    ote_batch_release(b);
}

/* The peer's GPU memory, which only tcp reaches: every request staged through its chunks. */
static void test_many_remote_staged(void **state)
{
    ote_engine_h init, tgt;
    ote_segment_h seg;
    uint8_t *local, *gpu;
    ote_mem_h ml, mg;
    sampler_t s;
    int before, peak;

    (void)state;
    setenv("OTE_TLS", "tcp,cuda_copy,cuda_stage", 1);
    setenv("OTE_STAGE_CHUNK_SIZE", "65536", 1);
    setenv("OTE_STAGE_SLOTS", "4", 1);
    tgt  = ote_test_engine("127.0.0.1:0");
    init = ote_test_engine("127.0.0.1:0");
    assert_int_equal(ote_mem_alloc(tgt, REQS * BLOCK, "cuda:0",
                                   OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                                   (void **)&gpu, &mg),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(init, REQS * BLOCK, "cpu:0", 0, (void **)&local, &ml),
                     OTE_OK);
    assert_int_equal(ote_segment_open(init, ote_engine_name(tgt), &seg), OTE_OK);
    ote_test_fill(local, 0, REQS * BLOCK, 301);
    before = threads_now();
    sampler_start(&s);
    run_many(init, seg, OTE_OP_WRITE, local, (uintptr_t)gpu);
    memset(local, 0, REQS * BLOCK);
    run_many(init, seg, OTE_OP_READ, local, (uintptr_t)gpu);
    peak = sampler_stop(&s);
    assert_int_equal(ote_test_check(local, 0, REQS * BLOCK, 301), -1);
    /* Slices beyond the pool's threads waited in its queue. */
    if (peak - before > OTE_PROTO_JOBS_THREADS + SLACK)
        fail_msg("%d threads before, %d at the peak", before, peak);
    assert_true(ote_proto_jobs_threads(init->proto_jobs) <= OTE_PROTO_JOBS_THREADS);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_mem_free(init, ml);
    ote_mem_free(tgt, mg);
    ote_engine_destroy(init);
    ote_engine_destroy(tgt);
    unsetenv("OTE_STAGE_CHUNK_SIZE");
    unsetenv("OTE_STAGE_SLOTS");
    unsetenv("OTE_TLS");
}

/* READs over UCT's tcp (no GET) go by PUTBACK: the target PUTs each range back. */
static void test_many_putbacks(void **state)
{
    ote_engine_h init, tgt;
    ote_segment_h seg;
    uint8_t *local, *remote;
    ote_mem_h ml, mr;
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    sampler_t s;
    int before, peak;

    (void)state;
    setenv("OTE_TLS", "uct_tcp", 1);
    if (ote_engine_create(&p, &tgt) != OTE_OK) {
        unsetenv("OTE_TLS");
        skip(); /* no UCX in this build */
    }
    init = ote_test_engine("127.0.0.1:0");
    assert_int_equal(ote_mem_alloc(tgt, REQS * BLOCK, "cpu:0", OTE_ACCESS_REMOTE_READ,
                                   (void **)&remote, &mr),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(init, REQS * BLOCK, "cpu:0", OTE_ACCESS_REMOTE_WRITE,
                                   (void **)&local, &ml),
                     OTE_OK);
    assert_int_equal(ote_segment_open(init, ote_engine_name(tgt), &seg), OTE_OK);
    ote_test_fill(remote, 0, REQS * BLOCK, 302);
    before = threads_now();
    sampler_start(&s);
    for (int round = 0; round < 3; round++) {
        memset(local, 0, REQS * BLOCK);
        run_many(init, seg, OTE_OP_READ, local, (uintptr_t)remote);
        assert_int_equal(ote_test_check(local, 0, REQS * BLOCK, 302), -1);
    }
    peak = sampler_stop(&s);
    if (peak - before > OTE_PROTO_JOBS_THREADS + CTL_PUTBACK_THREADS + SLACK)
        fail_msg("%d threads before, %d at the peak", before, peak);
    assert_true(ote_ctl_putback_threads(tgt->ctl) <= CTL_PUTBACK_THREADS);
    /* 3 x REQS requests, one segment to their initiator. */
    assert_int_equal(ote_ctl_putback_opens(tgt->ctl), 1);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_mem_free(init, ml);
    ote_mem_free(tgt, mr);
    ote_engine_destroy(init);
    ote_engine_destroy(tgt);
    unsetenv("OTE_TLS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_remote_staged),
        cmocka_unit_test(test_many_putbacks),
    };

    cuda_test_use_double(1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
