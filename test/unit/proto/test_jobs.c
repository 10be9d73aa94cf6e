/*
 * The protocols' bounded job pool (proto/jobs.h): never more threads than
 * its bound whatever the load, a full queue refused BUSY with the job
 * untouched, every accepted job run exactly once, also those still queued
 * when the pool is destroyed.
 */
#include "proto/jobs.h"
#include "testlib.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

typedef struct {
    ote_proto_job_t job;
    atomic_int     *runs;
    atomic_int     *running, *peak;
    atomic_bool    *gate; /* jobs wait for it to open */
} test_job_t;

static void job_run(ote_proto_job_t *j)
{
    test_job_t *t = (test_job_t *)j;
    int now       = atomic_fetch_add(t->running, 1) + 1;
    int peak      = atomic_load(t->peak);

    while (now > peak && !atomic_compare_exchange_weak(t->peak, &peak, now))
        ;
    while (t->gate != NULL && !atomic_load(t->gate))
        usleep(100);
    atomic_fetch_sub(t->running, 1);
    atomic_fetch_add(t->runs, 1);
}

static void test_bounded_threads(void **state)
{
    enum { JOBS = 200, THREADS = 3 };
    static test_job_t jobs[JOBS];
    atomic_int runs = 0, running = 0, peak = 0;
    atomic_bool gate = false;
    ote_proto_jobs_t *p;

    (void)state;
    assert_int_equal(ote_proto_jobs_create("test-jobs", THREADS, JOBS, &p), OTE_OK);
    for (int i = 0; i < JOBS; i++) {
        jobs[i] = (test_job_t){.job.run = job_run, .runs = &runs, .running = &running,
                               .peak = &peak, .gate = &gate};
        assert_int_equal(ote_proto_jobs_submit(p, &jobs[i].job), OTE_OK);
    }
    assert_true(ote_proto_jobs_threads(p) <= THREADS);
    atomic_store(&gate, true);
    for (int i = 0; i < 20000 && atomic_load(&runs) < JOBS; i++)
        usleep(500);
    assert_int_equal(atomic_load(&runs), JOBS);
    assert_true(atomic_load(&peak) <= THREADS);
    assert_int_equal(ote_proto_jobs_threads(p), THREADS);
    ote_proto_jobs_destroy(p);
}

static void test_full_queue_busy_and_destroy_runs_queued(void **state)
{
    enum { QUEUED = 4 };
    test_job_t blocker, queued[QUEUED], extra;
    atomic_int runs = 0, running = 0, peak = 0;
    atomic_bool gate = false;
    ote_proto_jobs_t *p;

    (void)state;
    assert_int_equal(ote_proto_jobs_create("test-jobs", 1, QUEUED, &p), OTE_OK);
    blocker = (test_job_t){.job.run = job_run, .runs = &runs, .running = &running,
                           .peak = &peak, .gate = &gate};
    assert_int_equal(ote_proto_jobs_submit(p, &blocker.job), OTE_OK);
    /* The only thread takes the blocker: the queue then holds QUEUED more. */
    for (int i = 0; i < 20000 && atomic_load(&running) == 0; i++)
        usleep(100);
    assert_int_equal(atomic_load(&running), 1);
    for (int i = 0; i < QUEUED; i++) {
        queued[i] = (test_job_t){.job.run = job_run, .runs = &runs, .running = &running,
                                 .peak = &peak};
        assert_int_equal(ote_proto_jobs_submit(p, &queued[i].job), OTE_OK);
    }
    extra = (test_job_t){.job.run = job_run, .runs = &runs, .running = &running, .peak = &peak};
    assert_int_equal(ote_proto_jobs_submit(p, &extra.job), OTE_ERR_BUSY);
    atomic_store(&gate, true);
    ote_proto_jobs_destroy(p);
    /* Every accepted job ran, the refused one never. */
    assert_int_equal(atomic_load(&runs), 1 + QUEUED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounded_threads),
        cmocka_unit_test(test_full_queue_busy_and_destroy_runs_queued),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
