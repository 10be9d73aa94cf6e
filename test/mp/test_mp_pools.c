/*
 * Many remote-staged and PUTBACK requests at once from this process to a
 * test target: every byte lands, and the threads stay bounded by the pools
 * (proto/jobs.h): this process's, sampled all along from /proc/self/task
 * (a thread per request would add REQS), and the target's PUTBACK pool; a
 * PUTBACK target that serves many requests of one initiator opens one
 * segment to it.
 */
#include "../unit/cuda/cuda_test.h"
#include "core/engine_int.h"
#include "proto/jobs.h"
#include "proto/putback.h"
#include "testlib.h"

#include <dirent.h>
#include <ote/ote.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define REQS  64
#define BLOCK (256u << 10)
/* Threads that come and go besides the pool's (the CUDA double's streams, UCX's). */
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

static void cmd_ok(ote_test_pair_t *p, const char *fmt, ...)
{
    char c[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c, sizeof(c), fmt, ap);
    va_end(ap);
    assert_int_equal(ote_test_target_expect(p->e, p->seg, c, "ok", 20000), 0);
}

/*
 * A target with region 0 of REQS x BLOCK bytes (access and location in
 * region), this process's engine, and the segment to the target.
 */
static ote_test_pair_t *pair_start(const char *tls, const char *region)
{
    const char *const args[] = {"--region", region, NULL};
    ote_test_pair_t *p;

    setenv("OTE_STAGE_CHUNK_SIZE", "65536", 1);
    setenv("OTE_STAGE_SLOTS", "4", 1);
    p = ote_test_pair_start(tls, NULL, NULL, args, REQS * BLOCK);
    unsetenv("OTE_STAGE_CHUNK_SIZE");
    unsetenv("OTE_STAGE_SLOTS");
    assert_non_null(p);
    assert_int_equal(ote_segment_open(p->e, p->target.name, &p->seg), OTE_OK);
    return p;
}

/* The peer's GPU memory, which only tcp reaches: every request staged through its chunks. */
static void test_many_remote_staged(void **state)
{
    ote_test_pair_t *p = pair_start("tcp,cuda_copy,cuda_stage", "16m:rw@cuda:0");
    uint64_t remote    = p->target.addr[0];
    sampler_t s;
    int before, peak, read_peak;

    (void)state;
    ote_test_fill(p->local, 0, REQS * BLOCK, 301);
    before = threads_now();
    sampler_start(&s);
    run_many(p->e, p->seg, OTE_OP_WRITE, p->local, remote);
    peak = sampler_stop(&s);
    cmd_ok(p, "check 0 0 %u 301", REQS * BLOCK);
    cmd_ok(p, "fill 0 0 %u 302", REQS * BLOCK);
    memset(p->local, 0, REQS * BLOCK);
    sampler_start(&s);
    run_many(p->e, p->seg, OTE_OP_READ, p->local, remote);
    read_peak = sampler_stop(&s);
    assert_int_equal(ote_test_check(p->local, 0, REQS * BLOCK, 302), -1);
    /* Slices beyond the pool's threads waited in its queue. */
    if (peak < read_peak)
        peak = read_peak;
    if (peak - before > OTE_PROTO_JOBS_THREADS + SLACK)
        fail_msg("%d threads before, %d at the peak", before, peak);
    assert_true(ote_proto_jobs_threads(p->e->facts.proto_jobs) <= OTE_PROTO_JOBS_THREADS);
    ote_test_pair_stop(p);
}

/* READs over UCT's tcp (no GET) go by PUTBACK: the target PUTs each range back. */
static void test_many_putbacks(void **state)
{
    ote_engine_params_t ep = {.listen_addr = "127.0.0.1:0"};
    ote_test_pair_t *p;
    ote_engine_h probe;
    unsigned long opens = 0;
    unsigned threads    = 0;
    char reply[64];
    sampler_t s;
    int before, peak;

    (void)state;
    setenv("OTE_TLS", "uct_tcp", 1);
    if (ote_engine_create(&ep, &probe) != OTE_OK) {
        unsetenv("OTE_TLS");
        skip(); /* no UCX in this build */
    }
    ote_engine_destroy(probe);
    p = pair_start("uct_tcp", "16m:r");
    cmd_ok(p, "fill 0 0 %u 303", REQS * BLOCK);
    before = threads_now();
    sampler_start(&s);
    for (int round = 0; round < 3; round++) {
        memset(p->local, 0, REQS * BLOCK);
        run_many(p->e, p->seg, OTE_OP_READ, p->local, p->target.addr[0]);
        assert_int_equal(ote_test_check(p->local, 0, REQS * BLOCK, 303), -1);
    }
    peak = sampler_stop(&s);
    if (peak - before > OTE_PROTO_JOBS_THREADS + SLACK)
        fail_msg("%d threads before, %d at the peak", before, peak);
    /* 3 x REQS requests: at most OTE_PUTBACK_TARGET_THREADS threads and one segment at the target. */
    assert_int_equal(ote_test_target_cmd(p->e, p->seg, "putbackstats", reply, sizeof(reply),
                                         20000),
                     0);
    assert_int_equal(sscanf(reply, "opens %lu threads %u", &opens, &threads), 2);
    assert_int_equal(opens, 1);
    assert_true(threads >= 1 && threads <= OTE_PUTBACK_TARGET_THREADS);
    ote_test_pair_stop(p);
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
