/*
 * The engine under load. Several threads submit batches of random sizes to
 * three target processes at once: A answers throughout, C dies (SIGKILL)
 * part-way, B stops answering (SIGSTOP) later. Threads cancel tasks at
 * random, from their own thread and from a canceler thread that shares
 * their batches, and release some batches while their tasks are in flight.
 *
 * Checked: every batch a thread keeps ends within a bound (no hang); every
 * task's final status is coherent (COMPLETED with every byte, or another
 * final state with its error and fewer bytes); tasks to A never fail;
 * every byte read from A matches its pattern, every range written to A that
 * COMPLETED is found there by the target itself; BUSY and refused
 * submissions leave nothing behind.
 *
 * Transfers in flight at the same time never share a byte, locally or at a
 * target (that would be the application's data race, and ThreadSanitizer
 * would rightly report it): each thread owns slots of memory, a batch gets
 * a free slot and lays its requests out in it without overlap. A batch
 * released with tasks in flight keeps its slot for OTE_XFER_TIMEOUT_MS plus
 * a margin, by which time every one of its tasks has ended.
 *
 * Runs for OTE_TEST_STRESS_MS of submission (default 2500), over tcp (the
 * one transport where a stopped process is silent).
 */
#include "mp_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define NTHREADS    4
#define SLOT        (256u << 10)    /* one batch's memory */
#define MAX_KEEP    4               /* outstanding batches per thread */
#define NDETACH     28              /* slots for released batches */
#define NSLOTS      (MAX_KEEP + NDETACH)
#define AREA        (NSLOTS * SLOT) /* per thread: source, destination, remote */
#define MAX_REQ     (32u << 10)
#define MAX_BATCH   32
#define XFER_MS     1500
#define SEED_READ   0x5eedull

enum { PEER_A, PEER_B, PEER_C, NPEERS };

typedef struct {
    uint32_t off, len;               /* off: in the thread's area (slot * SLOT + ...) */
    uint8_t  peer, op;
} req_meta_t;

typedef struct {
    ote_batch_h b;
    size_t      n;
    int         slot;
    req_meta_t  meta[MAX_BATCH];
} kept_t;

typedef struct {
    uint32_t off, len;
} range_t;

/* A batch a thread shares with the canceler, under lock. */
typedef struct {
    pthread_mutex_t lock;
    ote_batch_h     b;
    size_t          n;
} slot_t;

typedef struct {
    int            index;
    uint64_t       rng;
    uint8_t       *local;            /* [0,AREA) source, [AREA,2*AREA) destination */
    bool           slot_used[MAX_KEEP];
    double         detach_until[NDETACH]; /* a released batch may still use it */
    unsigned       next_detach;
    range_t       *written;          /* COMPLETED writes to A */
    size_t         num_written, cap_written;
    kept_t         kept[MAX_KEEP];
    size_t         num_kept;
    /* counters */
    unsigned long  tasks, busy, refused, detached, cancels, bytes_read_ok;
    unsigned long  state[NPEERS][OTE_TASK_TIMEOUT + 1];
    int            failed;           /* first failure, printed by main */
    char           why[256];
} thr_t;

static ote_engine_h     g_e;
static ote_segment_h    g_seg[NPEERS];
static ote_test_target_t g_t[NPEERS];
static atomic_bool      g_peer_gone[NPEERS]; /* B stopped, C killed: submits may fail */
static atomic_bool      g_stop, g_cancel_stop;
static slot_t           g_slot[NTHREADS];

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define T_FAIL(t, ...)                                                                         \
    do {                                                                                       \
        if (!(t)->failed)                                                                      \
            snprintf((t)->why, sizeof((t)->why), __VA_ARGS__);                                 \
        (t)->failed = 1;                                                                       \
    } while (0)

static void add_written(thr_t *t, uint32_t off, uint32_t len)
{
    if (t->num_written == t->cap_written) {
        t->cap_written = t->cap_written ? 2 * t->cap_written : 1024;
        t->written     = realloc(t->written, t->cap_written * sizeof(*t->written));
        assert_non_null(t->written);
    }
    t->written[t->num_written++] = (range_t){off, len};
}

/* Checks one ended task; returns 0 when coherent. */
static void check_task(thr_t *t, ote_batch_h b, size_t idx, const req_meta_t *m)
{
    ote_task_status_t st;

    if (ote_batch_task_status(b, idx, &st) != OTE_OK) {
        T_FAIL(t, "task_status failed");
        return;
    }
    if (st.state > OTE_TASK_TIMEOUT) {
        T_FAIL(t, "state %d out of range", (int)st.state);
        return;
    }
    t->state[m->peer][st.state]++;
    switch (st.state) {
    case OTE_TASK_PENDING:
        T_FAIL(t, "task PENDING after its batch ended");
        return;
    case OTE_TASK_COMPLETED:
        if (st.error != OTE_OK || st.transferred != m->len) {
            T_FAIL(t, "COMPLETED with error %d, %zu of %u bytes", st.error, st.transferred,
                   m->len);
            return;
        }
        break;
    case OTE_TASK_CANCELED:
        if (st.error != OTE_ERR_CANCELED)
            T_FAIL(t, "CANCELED with error %s", ote_status_string(st.error));
        break;
    case OTE_TASK_TIMEOUT:
        if (st.error != OTE_ERR_TIMEOUT)
            T_FAIL(t, "TIMEOUT with error %s", ote_status_string(st.error));
        break;
    case OTE_TASK_FAILED:
        if (st.error == OTE_OK || st.error == OTE_ERR_CANCELED || st.error == OTE_ERR_TIMEOUT)
            T_FAIL(t, "FAILED with error %s", ote_status_string(st.error));
        break;
    }
    if (st.state != OTE_TASK_COMPLETED) {
        if (st.transferred >= m->len)
            T_FAIL(t, "%s task claims %zu of %u bytes", ote_status_string(st.error),
                   st.transferred, m->len);
        if (m->peer == PEER_A && st.state != OTE_TASK_CANCELED)
            T_FAIL(t, "task to the healthy peer ended %s", ote_status_string(st.error));
        return;
    }
    if (m->peer != PEER_A)
        return;
    if (m->op == OTE_OP_READ) {
        /* Read from A's read area at the same offset within a slot. */
        long bad = ote_test_check(t->local + AREA + m->off, m->off % SLOT, m->len, SEED_READ);

        if (bad >= 0)
            T_FAIL(t, "read %u+%u: byte %ld wrong", m->off, m->len, bad);
        else
            t->bytes_read_ok += m->len;
    } else {
        add_written(t, m->off, m->len);
    }
}

static void finish_kept(thr_t *t, kept_t *k)
{
    ote_status_t st;

    /* Take it away from the canceler first. */
    pthread_mutex_lock(&g_slot[t->index].lock);
    if (g_slot[t->index].b == k->b)
        g_slot[t->index].b = NULL;
    pthread_mutex_unlock(&g_slot[t->index].lock);
    st = ote_batch_wait(k->b, XFER_MS + 10000);
    t->slot_used[k->slot] = false;
    if (st != OTE_OK) {
        T_FAIL(t, "batch did not end within %d ms", XFER_MS + 10000);
    } else {
        ote_task_status_t sum;

        for (size_t i = 0; i < k->n; i++)
            check_task(t, k->b, i, &k->meta[i]);
        if (ote_batch_status(k->b, &sum) != OTE_OK || sum.state == OTE_TASK_PENDING)
            T_FAIL(t, "batch summary PENDING after wait");
    }
    ote_batch_release(k->b);
}

static void pop_kept(thr_t *t)
{
    finish_kept(t, &t->kept[0]);
    memmove(&t->kept[0], &t->kept[1], --t->num_kept * sizeof(t->kept[0]));
}

static void *submitter(void *arg)
{
    thr_t *t       = arg;
    uint32_t wbase = SLOT + AREA * (uint32_t)t->index; /* this thread's part of A */
    uint32_t pbase = AREA * (uint32_t)t->index;        /* ... of B and C */

    while (!atomic_load(&g_stop) && !t->failed) {
        ote_xfer_req_t reqs[MAX_BATCH];
        kept_t k = {0};
        size_t n = 1 + mp_rand(&t->rng) % MAX_BATCH, first = 0;
        ote_status_t st;
        bool others = false, detach = false;
        uint32_t cursor = 0;
        int slot = -1;

        if (mp_rand(&t->rng) % 4 == 0)
            n = 1;
        /* A slot: one for released batches whose tasks surely ended, or a free one. */
        if (mp_rand(&t->rng) % 5 == 0 && now_s() > t->detach_until[t->next_detach]) {
            detach = true;
            slot   = MAX_KEEP + (int)t->next_detach;
            t->detach_until[t->next_detach] = now_s() + (XFER_MS + 1000) / 1000.0;
            t->next_detach = (t->next_detach + 1) % NDETACH;
        } else {
            if (t->num_kept == MAX_KEEP)
                pop_kept(t);
            for (int s = 0; s < MAX_KEEP; s++) {
                if (!t->slot_used[s]) {
                    slot = s;
                    break;
                }
            }
            if (slot < 0) {
                T_FAIL(t, "no free slot");
                break;
            }
            t->slot_used[slot] = true;
        }
        k.slot = slot;
        for (size_t i = 0; i < n; i++) {
            uint32_t len  = (uint32_t)mp_rand_size(&t->rng, MAX_REQ);
            uint32_t off, in_slot;
            unsigned r    = (unsigned)(mp_rand(&t->rng) % 10);
            uint8_t peer  = r < 7 ? PEER_A : r < 9 ? PEER_B : PEER_C;
            uint8_t op    = (uint8_t)(mp_rand(&t->rng) % 2);

            cursor += (uint32_t)(mp_rand(&t->rng) % 512);
            if (cursor + len > SLOT) {
                n = i;
                break;
            }
            in_slot = cursor;
            cursor += len;
            off = (uint32_t)slot * SLOT + in_slot;
            if (peer != PEER_A && atomic_load(&g_peer_gone[peer]) && mp_rand(&t->rng) % 4)
                peer = PEER_A; /* fewer requests to a lost peer, but still some */
            others |= peer != PEER_A;
            k.meta[i] = (req_meta_t){off, len, peer, op};
            reqs[i] = (ote_xfer_req_t){.op = op, .segment = g_seg[peer], .length = len,
                                       .local_addr = op == OTE_OP_WRITE ? t->local + off
                                                                         : t->local + AREA + off};
            if (peer == PEER_A && op == OTE_OP_WRITE)
                reqs[i].remote_addr = g_t[PEER_A].addr[0] + wbase + off;
            else if (peer == PEER_A)
                reqs[i].remote_addr = g_t[PEER_A].addr[0] + in_slot;
            else
                reqs[i].remote_addr = g_t[peer].addr[0] + pbase + off;
        }
        /* n >= 1: the first request always fits (MAX_REQ + 512 < SLOT). */
        if (ote_batch_create(g_e, n, &k.b) != OTE_OK) {
            T_FAIL(t, "batch_create");
            break;
        }
        k.n = n;
        for (int tries = 0;; tries++) {
            ote_task_status_t ts;

            first = 12345;
            st    = ote_batch_submit(k.b, reqs, n, &first);
            if (st == OTE_OK)
                break;
            /* Nothing may have been submitted. */
            if (first != 12345 || ote_batch_task_status(k.b, 0, &ts) != OTE_ERR_INVALID_PARAM) {
                T_FAIL(t, "refused submit (%s) left a task behind", ote_status_string(st));
                break;
            }
            if (st == OTE_ERR_BUSY) {
                t->busy++;
                if (t->num_kept > 0) {
                    pop_kept(t);
                } else {
                    usleep(200);
                }
                if (tries < 1000)
                    continue;
                T_FAIL(t, "BUSY 1000 times in a row");
                break;
            }
            /* A submission to a lost peer may be refused; to A alone never. */
            if (!others || !(atomic_load(&g_peer_gone[PEER_B]) ||
                             atomic_load(&g_peer_gone[PEER_C]))) {
                T_FAIL(t, "submit refused: %s", ote_status_string(st));
                break;
            }
            t->refused++;
            break;
        }
        if (st != OTE_OK) {
            ote_batch_release(k.b);
            if (!detach)
                t->slot_used[slot] = false;
            continue;
        }
        if (first != 0)
            T_FAIL(t, "first task %zu, not 0", first);
        t->tasks += n;
        if (mp_rand(&t->rng) % 4 == 0) {
            size_t c = mp_rand(&t->rng) % n;

            for (size_t i = 0; i <= c; i += 1 + mp_rand(&t->rng) % 3) {
                if (ote_batch_cancel(k.b, i) != OTE_OK)
                    T_FAIL(t, "cancel refused");
                t->cancels++;
            }
        }
        if (detach) {
            /* Detached: released with tasks in flight, reclaimed when they drain. */
            ote_batch_release(k.b);
            t->detached++;
            continue;
        }
        t->kept[t->num_kept++] = k;
        pthread_mutex_lock(&g_slot[t->index].lock);
        g_slot[t->index].b = k.b;
        g_slot[t->index].n = n;
        pthread_mutex_unlock(&g_slot[t->index].lock);
    }
    while (t->num_kept > 0)
        pop_kept(t);
    return NULL;
}

/* Cancels tasks and reads statuses of batches other threads own. */
static void *canceler(void *arg)
{
    uint64_t rng = 77;
    unsigned long *count = arg;

    while (!atomic_load(&g_cancel_stop)) {
        slot_t *s = &g_slot[mp_rand(&rng) % NTHREADS];
        ote_task_status_t st;

        pthread_mutex_lock(&s->lock);
        if (s->b != NULL) {
            size_t task = mp_rand(&rng) % s->n;

            if (mp_rand(&rng) % 2 && ote_batch_cancel(s->b, task) == OTE_OK)
                (*count)++;
            ote_batch_task_status(s->b, task, &st);
            ote_batch_status(s->b, &st);
        }
        pthread_mutex_unlock(&s->lock);
        usleep(300);
    }
    return NULL;
}

static void test_stress(void **state)
{
    /* A: the read area (one slot), then each thread's area; B, C: each thread's area. */
    static const char *const args_a[] = {"--region", "33m:rw", NULL};
    static const char *const args_bc[] = {"--region", "32m:rw", NULL};
    const char *ms_env = getenv("OTE_TEST_STRESS_MS");
    double run_s = (ms_env ? atof(ms_env) : 2500.0) / 1000.0;
    thr_t th[NTHREADS];
    pthread_t tid[NTHREADS], ctid;
    ote_mem_h mem[NTHREADS];
    unsigned long cancels_other = 0, total[NPEERS][OTE_TASK_TIMEOUT + 1] = {{0}};
    unsigned long tasks = 0, busy = 0, refused = 0, detached = 0, cancels = 0, rd = 0, wr = 0;
    char cmd[128], reply[128];
    double t0;

    (void)state;
    ote_test_setenv_all((const char *const[]){"OTE_TLS=tcp", "OTE_XFER_TIMEOUT_MS=1500",
                                               "OTE_NUM_WORKERS=2", "OTE_MAX_INFLIGHT_TASKS=256",
                                               "OTE_MAX_INFLIGHT_BYTES=4m", NULL});
    assert_int_equal(ote_test_target_start(&g_t[PEER_A], NULL, args_a), 0);
    assert_int_equal(ote_test_target_start(&g_t[PEER_B], NULL, args_bc), 0);
    assert_int_equal(ote_test_target_start(&g_t[PEER_C], NULL, args_bc), 0);
    g_e = ote_test_engine(NULL);
    for (int p = 0; p < NPEERS; p++)
        assert_int_equal(ote_segment_open(g_e, g_t[p].name, &g_seg[p]), OTE_OK);
    snprintf(cmd, sizeof(cmd), "fill 0 0 %u %llu", SLOT, SEED_READ);
    assert_int_equal(ote_test_target_cmd(g_e, g_seg[PEER_A], cmd, reply, sizeof(reply), 10000), 0);
    assert_string_equal(reply, "ok");

    for (int i = 0; i < NTHREADS; i++) {
        memset(&th[i], 0, sizeof(th[i]));
        th[i].index = i;
        th[i].rng   = 1000 + (uint64_t)i;
        pthread_mutex_init(&g_slot[i].lock, NULL);
        g_slot[i].b = NULL;
        assert_int_equal(ote_mem_alloc(g_e, 2 * AREA, NULL, 0, (void **)&th[i].local, &mem[i]),
                         OTE_OK);
        ote_test_fill(th[i].local, SLOT + AREA * (uint64_t)i, AREA, 0xabc0 + (uint64_t)i);
    }
    t0 = now_s();
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&tid[i], NULL, submitter, &th[i]), 0);
    assert_int_equal(pthread_create(&ctid, NULL, canceler, &cancels_other), 0);

    usleep((useconds_t)(run_s * 0.3 * 1e6));
    atomic_store(&g_peer_gone[PEER_C], true);
    ote_test_target_kill(&g_t[PEER_C]);
    usleep((useconds_t)(run_s * 0.3 * 1e6));
    atomic_store(&g_peer_gone[PEER_B], true);
    mp_stop_process(g_t[PEER_B].pid);
    usleep((useconds_t)(run_s * 0.4 * 1e6));
    atomic_store(&g_stop, true);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(tid[i], NULL);
    atomic_store(&g_cancel_stop, true);
    pthread_join(ctid, NULL);

    for (int i = 0; i < NTHREADS; i++) {
        thr_t *t = &th[i];

        if (t->failed)
            fail_msg("thread %d: %s", i, t->why);
        tasks += t->tasks;
        busy += t->busy;
        refused += t->refused;
        detached += t->detached;
        cancels += t->cancels;
        rd += t->bytes_read_ok;
        for (int p = 0; p < NPEERS; p++)
            for (int s = 0; s <= OTE_TASK_TIMEOUT; s++)
                total[p][s] += t->state[p][s];
    }
    printf("# %.1f s, %lu tasks, %lu BUSY, %lu refused, %lu batches detached, "
           "%lu + %lu cancels\n",
           now_s() - t0, tasks, busy, refused, detached, cancels, cancels_other);
    for (int p = 0; p < NPEERS; p++)
        printf("# peer %c: %lu completed, %lu canceled, %lu timeout, %lu failed\n", 'A' + p,
               total[p][OTE_TASK_COMPLETED], total[p][OTE_TASK_CANCELED],
               total[p][OTE_TASK_TIMEOUT], total[p][OTE_TASK_FAILED]);
    assert_true(total[PEER_A][OTE_TASK_COMPLETED] > 0);
    /* The lost peers were noticed (canceled tasks may hide some). */
    assert_true(total[PEER_B][OTE_TASK_TIMEOUT] + total[PEER_B][OTE_TASK_FAILED] +
                total[PEER_B][OTE_TASK_CANCELED] > 0);
    assert_true(total[PEER_C][OTE_TASK_FAILED] + total[PEER_C][OTE_TASK_CANCELED] + refused > 0);

    /* Every COMPLETED write is on A, as the target itself reads it. */
    for (int i = 0; i < NTHREADS; i++) {
        thr_t *t = &th[i];
        uint8_t *cover = calloc(AREA, 1);

        assert_non_null(cover);
        for (size_t k = 0; k < t->num_written; k++)
            memset(cover + t->written[k].off, 1, t->written[k].len);
        for (uint32_t a = 0; a < AREA;) {
            uint32_t b;

            if (!cover[a]) {
                a++;
                continue;
            }
            for (b = a; b < AREA && cover[b]; b++)
                ;
            snprintf(cmd, sizeof(cmd), "check 0 %u %u %llu", SLOT + AREA * i + a, b - a,
                     0xabc0ull + (unsigned)i);
            assert_int_equal(
                ote_test_target_cmd(g_e, g_seg[PEER_A], cmd, reply, sizeof(reply), 10000), 0);
            if (strcmp(reply, "ok") != 0)
                fail_msg("thread %d: written range %u+%u on A: %s", i, a, b - a, reply);
            wr += b - a;
            a = b;
        }
        free(cover);
        free(t->written);
    }
    printf("# bytes checked: %lu read from A, %lu written on A\n", rd, wr);
    assert_true(rd > 0 && wr > 0);

    kill(g_t[PEER_B].pid, SIGCONT);
    for (int p = 0; p < NPEERS; p++)
        ote_segment_close(g_seg[p]);
    for (int i = 0; i < NTHREADS; i++) {
        ote_mem_free(g_e, mem[i]);
        pthread_mutex_destroy(&g_slot[i].lock);
    }
    ote_engine_destroy(g_e);
    ote_test_target_stop(&g_t[PEER_A]);
    ote_test_target_kill(&g_t[PEER_B]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
