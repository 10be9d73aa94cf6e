/*
 * The control listener's job pools (proto/ctl_target.h): one peer address
 * never holds every thread, another peer's job runs at once beside jobs
 * that block; a peer's share of the accepted jobs is bounded (BUSY past
 * it, others still admitted); waiting jobs go to the peers in turn; every
 * accepted job runs once and is answered, those still waiting at stop
 * too.
 */
#include "proto/ctl_target.h"
#include "testlib.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define THREADS 4
#define MAX     16
#define SPIN_MS 10000

typedef struct {
    ote_ctl_job_t base; /* first */
    int           peer; /* 0: A, 1: B */
    atomic_bool  *gate; /* the job blocks until it opens (NULL: never blocks) */
    atomic_int    started;
    atomic_int    answered;
} tjob_t;

static atomic_int running[2], peak[2], order_len;
static int        order[64]; /* peers in the order their jobs started */
static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fake listener: connections are the jobs' own; answers are counted. */
static void host_hold(void *ctx, ote_ctl_conn_t *c, ote_ctl_ticket_t *t)
{
    (void)ctx;
    t->conn_id = (uint64_t)(uintptr_t)c;
    t->seq     = 1;
}

static ote_ctl_conn_t *host_resume(void *ctx, const ote_ctl_ticket_t *t)
{
    (void)ctx;
    return (ote_ctl_conn_t *)(uintptr_t)t->conn_id;
}

static void host_close(void *ctx, ote_ctl_conn_t *c)
{
    (void)ctx;
    (void)c;
}

static void host_wake(void *ctx)
{
    (void)ctx;
}

static const ote_ctl_host_t host = {.conn_hold = host_hold, .conn_resume = host_resume,
                                    .conn_close = host_close, .wake = host_wake};

static void job_run(ote_proto_job_t *j)
{
    tjob_t *t = (tjob_t *)j;
    int now   = atomic_fetch_add(&running[t->peer], 1) + 1;
    int p     = atomic_load(&peak[t->peer]);

    while (now > p && !atomic_compare_exchange_weak(&peak[t->peer], &p, now))
        ;
    pthread_mutex_lock(&order_lock);
    if (order_len < 64)
        order[order_len] = t->peer;
    order_len++;
    pthread_mutex_unlock(&order_lock);
    atomic_store(&t->started, 1);
    while (t->gate != NULL && !atomic_load(t->gate))
        usleep(200);
    atomic_fetch_sub(&running[t->peer], 1);
    ote_ctl_jobs_end(&t->base);
}

static ote_status_t job_answer(const ote_ctl_host_t *h, ote_ctl_conn_t *c, ote_ctl_job_t *job)
{
    tjob_t *t = (tjob_t *)job;

    (void)h;
    assert_ptr_equal(c, (ote_ctl_conn_t *)t); /* its own connection */
    atomic_fetch_add(&t->answered, 1);
    return OTE_OK;
}

static void job_release(ote_ctl_job_t *job)
{
    (void)job;
}

static ote_status_t start(ote_ctl_jobs_t *q, tjob_t *t, int peer, atomic_bool *gate)
{
    ote_ctl_req_t req = {.conn = (ote_ctl_conn_t *)t, .peer = "test",
                         .peer_ip = peer == 0 ? "10.0.0.1" : "10.0.0.2"};

    memset(t, 0, sizeof(*t));
    t->peer = peer;
    t->gate = gate;
    return ote_ctl_jobs_start(q, &host, &req, &t->base, job_run);
}

static void reset(void)
{
    atomic_store(&running[0], 0);
    atomic_store(&running[1], 0);
    atomic_store(&peak[0], 0);
    atomic_store(&peak[1], 0);
    atomic_store(&order_len, 0);
}

/* Wait (bounded) until peer's running jobs are n. */
static void wait_running(int peer, int n)
{
    for (int i = 0; i < SPIN_MS * 10 && atomic_load(&running[peer]) != n; i++)
        usleep(100);
    assert_int_equal(atomic_load(&running[peer]), n);
}

static void wait_started(tjob_t *t)
{
    for (int i = 0; i < SPIN_MS * 10 && !atomic_load(&t->started); i++)
        usleep(100);
    assert_int_equal(atomic_load(&t->started), 1);
}

/* Answer what ended until every job of jobs[0..n) was answered. */
static void answer_all(ote_ctl_jobs_t *q, tjob_t *jobs, int n)
{
    for (int i = 0; i < SPIN_MS * 10; i++) {
        int done = 0;

        ote_ctl_jobs_answer_all(&host, q);
        for (int k = 0; k < n; k++)
            done += atomic_load(&jobs[k].answered);
        if (done == n)
            return;
        usleep(100);
    }
    fail_msg("jobs not all answered");
}

/* A pool of THREADS threads and MAX accepted jobs, the counters at 0. */
static void pool_init(ote_ctl_jobs_t *q)
{
    reset();
    assert_int_equal(ote_ctl_jobs_init(q, "test-ctl", THREADS, MAX, job_answer, job_release),
                     OTE_OK);
}

static void test_peer_never_holds_every_thread(void **state)
{
    static tjob_t a[8], b;
    atomic_bool gate = false;
    ote_ctl_jobs_t q;

    (void)state;
    pool_init(&q);
    for (int i = 0; i < 8; i++)
        assert_int_equal(start(&q, &a[i], 0, &gate), OTE_OK);
    /* A's blocked jobs hold all threads but one; the rest of A's wait. */
    wait_running(0, OTE_CTL_JOBS_PEER_RUNNING(THREADS));
    usleep(20 * 1000);
    assert_int_equal(atomic_load(&running[0]), OTE_CTL_JOBS_PEER_RUNNING(THREADS));
    assert_int_equal(start(&q, &b, 1, NULL), OTE_OK);
    wait_started(&b); /* at once, A's jobs still blocked */
    assert_int_equal(atomic_load(&running[0]), OTE_CTL_JOBS_PEER_RUNNING(THREADS));
    answer_all(&q, &b, 1);
    atomic_store(&gate, true);
    answer_all(&q, a, 8);
    assert_true(atomic_load(&peak[0]) <= OTE_CTL_JOBS_PEER_RUNNING(THREADS));
    for (int i = 0; i < 8; i++)
        assert_int_equal(atomic_load(&a[i].answered), 1);
    ote_ctl_jobs_stop(&host, &q);
    ote_ctl_jobs_destroy(&q);
}

static void test_share_of_accepted_and_turns(void **state)
{
    static tjob_t a[MAX], b[8];
    atomic_bool gate = false;
    ote_ctl_jobs_t q;
    int na = 0, nb = 0, first_b = -1, a_after = 0;

    (void)state;
    pool_init(&q);
    /* A alone: accepted up to its share, then BUSY. */
    while (na < MAX && start(&q, &a[na], 0, &gate) == OTE_OK)
        na++;
    assert_int_equal(na, OTE_CTL_JOBS_PEER_MAX(MAX));
    /* B is still admitted, up to what is left of the pool. */
    while (nb < 8 && start(&q, &b[nb], 1, &gate) == OTE_OK)
        nb++;
    assert_int_equal(nb, MAX - na);
    /* Threads: A holds its running share, B the thread left. */
    wait_running(0, OTE_CTL_JOBS_PEER_RUNNING(THREADS));
    wait_running(1, 1);
    atomic_store(&gate, true);
    answer_all(&q, a, na);
    answer_all(&q, b, nb);
    /* Every B job started before A's waiting ones were all through: turns, not A's queue first. */
    for (int i = 0; i < atomic_load(&order_len) && i < 64; i++) {
        if (order[i] == 1 && first_b < 0)
            first_b = i;
        if (order[i] == 1)
            a_after = 0;
        else if (first_b >= 0)
            a_after++;
    }
    assert_true(first_b >= 0);
    assert_true(a_after > 0); /* A's jobs went on after B's last */
    ote_ctl_jobs_stop(&host, &q);
    ote_ctl_jobs_destroy(&q);
}

static void test_stop_runs_waiting(void **state)
{
    static tjob_t a[6];
    atomic_bool gate = false;
    ote_ctl_jobs_t q;
    int ran = 0;

    (void)state;
    pool_init(&q);
    for (int i = 0; i < 6; i++)
        assert_int_equal(start(&q, &a[i], 0, &gate), OTE_OK);
    usleep(20 * 1000);
    atomic_store(&gate, true);
    /* Stop with some still waiting for a thread: each runs to its end. */
    ote_ctl_jobs_stop(&host, &q);
    for (int i = 0; i < 6; i++)
        ran += atomic_load(&a[i].started);
    assert_int_equal(ran, 6);
    ote_ctl_jobs_destroy(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_never_holds_every_thread),
        cmocka_unit_test(test_share_of_accepted_and_turns),
        cmocka_unit_test(test_stop_runs_waiting),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
