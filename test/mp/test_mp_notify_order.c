/*
 * The notification contract of ote.h: every notification whose send
 * returned OK is queued exactly once by the receiver, in send order per
 * sender, whatever segment handles or threads sent it; one that cannot be
 * delivered is reported. Two engines of this process talk over their
 * control listeners on loopback.
 */
#include "mp_util.h"
#include "security_wire.h"

#include <signal.h>

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Take every notification queued now, waiting up to quiet_ms for stragglers. */
static size_t drain(ote_engine_h e, ote_notif_t *out, size_t max, long quiet_ms)
{
    size_t n = 0;
    long idle = 0;

    while (idle < quiet_ms) {
        size_t got = 0;

        assert_int_equal(ote_notify_recv(e, out + n, max - n, &got), OTE_OK);
        n += got;
        if (got == 0) {
            sleep_ms(10);
            idle += 10;
        } else {
            idle = 0;
        }
        if (n == max)
            break;
    }
    return n;
}

/* Messages "m<i>" for i in [0, count): each once, in order. */
static void assert_sequence(const ote_notif_t *n, size_t got, size_t count, const char *prefix)
{
    assert_int_equal(got, count);
    for (size_t i = 0; i < count; i++) {
        char want[64];

        snprintf(want, sizeof(want), "%s%zu", prefix, i);
        assert_int_equal(n[i].length, strlen(want));
        assert_memory_equal(n[i].data, want, n[i].length);
    }
}

/* One batch: 4 KiB from buf_tx WRITTEN to buf_rx with notification msg, waited for. */
static ote_batch_h write_notified(ote_engine_h tx, ote_segment_h seg, uint8_t *buf_tx,
                                  uint8_t *buf_rx, const char *msg, size_t *first_p)
{
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = buf_tx, .segment = seg,
                        .remote_addr = (uint64_t)(uintptr_t)buf_rx, .length = 4096};
    ote_batch_h b;

    assert_int_equal(ote_batch_create(tx, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(b, &r, 1, msg, strlen(msg), first_p), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    return b;
}

static ote_status_t send_str(ote_engine_h e, ote_segment_h seg, const char *prefix, size_t i)
{
    char msg[64];

    snprintf(msg, sizeof(msg), "%s%zu", prefix, i);
    return ote_notify_send(e, seg, msg, strlen(msg));
}

static void test_segment_per_message(void **state)
{
    ote_engine_h rx = ote_test_engine(NULL), tx = ote_test_engine(NULL);
    static ote_notif_t got[64];
    ote_segment_h seg;

    (void)state;
    /* A new handle for every message: 20 of 20 arrive. */
    for (size_t i = 0; i < 20; i++) {
        assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &seg), OTE_OK);
        assert_int_equal(send_str(tx, seg, "m", i), OTE_OK);
        assert_int_equal(ote_segment_close(seg), OTE_OK);
    }
    assert_sequence(got, drain(rx, got, 64, 200), 20, "m");
    /* Two handles to one peer, alternating. */
    {
        ote_segment_h a, b;

        assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &a), OTE_OK);
        assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &b), OTE_OK);
        for (size_t i = 0; i < 10; i++)
            assert_int_equal(send_str(tx, i % 2 ? b : a, "h", i), OTE_OK);
        assert_sequence(got, drain(rx, got, 64, 200), 10, "h");
        ote_segment_close(a);
        ote_segment_close(b);
    }
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    char          prefix[8];
    size_t        count;
    int           failures;
} sender_t;

static void *sender_main(void *arg)
{
    sender_t *s = arg;

    for (size_t i = 0; i < s->count; i++)
        s->failures += send_str(s->e, s->seg, s->prefix, i) != OTE_OK;
    return NULL;
}

static void test_threads_one_segment(void **state)
{
    enum { PER_THREAD = 200 };
    ote_engine_h rx = ote_test_engine(NULL), tx = ote_test_engine(NULL);
    static ote_notif_t got[2 * PER_THREAD + 8];
    sender_t s[2];
    pthread_t th[2];
    size_t next[2] = {0, 0}, n;
    ote_segment_h seg, other;

    (void)state;
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &seg), OTE_OK);
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &other), OTE_OK);
    for (int k = 0; k < 2; k++) {
        /* One thread on the shared handle, one on a second handle. */
        s[k] = (sender_t){.e = tx, .seg = k == 0 ? seg : other, .count = PER_THREAD};
        snprintf(s[k].prefix, sizeof(s[k].prefix), "%c", 'a' + k);
        assert_int_equal(pthread_create(&th[k], NULL, sender_main, &s[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(s[k].failures, 0);
    }
    n = drain(rx, got, sizeof(got) / sizeof(got[0]), 300);
    assert_int_equal(n, 2 * PER_THREAD);
    /* Each thread's messages once each and in its order. */
    for (size_t i = 0; i < n; i++) {
        int k = got[i].data[0] - 'a';
        char want[64];

        assert_true(k == 0 || k == 1);
        snprintf(want, sizeof(want), "%c%zu", 'a' + k, next[k]++);
        assert_int_equal(got[i].length, strlen(want));
        assert_memory_equal(got[i].data, want, got[i].length);
    }
    assert_int_equal(next[0], PER_THREAD);
    assert_int_equal(next[1], PER_THREAD);
    ote_segment_close(seg);
    ote_segment_close(other);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

/*
 * A receiving engine that queues up to backlog notifications and a sending
 * engine that waits timeout_ms for room, with the sender's segment of it.
 */
static void notify_pair(const char *backlog, const char *timeout_ms, ote_engine_h *rx_p,
                        ote_engine_h *tx_p, ote_segment_h *seg_p)
{
    setenv("OTE_MAX_NOTIF_BACKLOG", backlog, 1);
    *rx_p = ote_test_engine(NULL);
    unsetenv("OTE_MAX_NOTIF_BACKLOG");
    setenv("OTE_NOTIFY_TIMEOUT_MS", timeout_ms, 1);
    *tx_p = ote_test_engine(NULL);
    unsetenv("OTE_NOTIFY_TIMEOUT_MS");
    assert_int_equal(ote_segment_open(*tx_p, ote_engine_name(*rx_p), seg_p), OTE_OK);
}

typedef struct {
    ote_engine_h e;
    long         delay_ms;
    size_t       taken;
} drainer_t;

static void *drainer_main(void *arg)
{
    drainer_t *d = arg;
    ote_notif_t n[4];
    size_t got = 0;

    sleep_ms(d->delay_ms);
    ote_notify_recv(d->e, n, 4, &got);
    d->taken = got;
    return NULL;
}

/* A full backlog is waited for up to OTE_NOTIFY_TIMEOUT_MS, then reported; never lost. */
static void test_full_backlog(void **state)
{
    ote_engine_h rx, tx;
    static ote_notif_t got[16];
    ote_segment_h seg;
    ote_mem_h mem_rx, mem_tx;
    uint8_t *buf_rx, *buf_tx;
    ote_batch_h b;
    ote_status_t nst;
    ote_task_status_t ts;
    uint64_t t0;
    size_t first, n;
    drainer_t d;
    pthread_t th;

    (void)state;
    notify_pair("4", "300", &rx, &tx, &seg);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(send_str(tx, seg, "f", i), OTE_OK);
    /* Full: BUSY after the timeout, nothing queued. */
    t0 = now_ms();
    assert_int_equal(send_str(tx, seg, "x", 0), OTE_ERR_BUSY);
    assert_true(now_ms() - t0 >= 250);
    /* Room appears while the sender waits: delivered. */
    d = (drainer_t){.e = rx, .delay_ms = 100};
    assert_int_equal(pthread_create(&th, NULL, drainer_main, &d), 0);
    assert_int_equal(send_str(tx, seg, "f", 4), OTE_OK);
    pthread_join(th, NULL);
    assert_int_equal(d.taken, 4);
    n = drain(rx, got, 16, 100);
    assert_int_equal(n, 1);
    assert_memory_equal(got[0].data, "f4", 2);

    /* A batch whose notification cannot be queued completes its data and says so. */
    assert_int_equal(ote_mem_alloc(rx, 4096, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&buf_rx,
                                   &mem_rx),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(tx, 4096, NULL, 0, (void **)&buf_tx, &mem_tx), OTE_OK);
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(send_str(tx, seg, "g", i), OTE_OK);
    ote_test_fill(buf_tx, 0, 4096, 7);
    b = write_notified(tx, seg, buf_tx, buf_rx, "late", &first);
    assert_int_equal(ote_batch_task_status(b, first, &ts), OTE_OK);
    assert_int_equal(ts.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(buf_rx, 0, 4096, 7), -1);
    assert_int_equal(ote_batch_notify_status(b, first, &nst), OTE_OK);
    assert_int_equal(nst, OTE_ERR_BUSY);
    ote_batch_release(b);
    n = drain(rx, got, 16, 100);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(got[i].data[0], 'g');

    /* With room, the batch's notification is OK once wait returns. */
    b = write_notified(tx, seg, buf_tx, buf_rx, "done", &first);
    assert_int_equal(ote_batch_notify_status(b, first, &nst), OTE_OK);
    assert_int_equal(nst, OTE_OK);
    ote_batch_release(b);
    n = drain(rx, got, 16, 100);
    assert_int_equal(n, 1);
    assert_memory_equal(got[0].data, "done", 4);

    ote_segment_close(seg);
    ote_mem_free(tx, mem_tx);
    ote_mem_free(rx, mem_rx);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    char          prefix;
    int           failures;
} many_sender_t;

enum { MANY_THREADS = 4, MANY_CALLS = 5, MANY_PER_CALL = 300 };

/* MANY_CALLS calls of MANY_PER_CALL messages "<prefix><i>", every status checked. */
static void *many_sender_main(void *arg)
{
    many_sender_t *s = arg;
    static __thread char text[MANY_PER_CALL][16];
    ote_notify_msg_t m[MANY_PER_CALL];
    ote_status_t st[MANY_PER_CALL];

    for (size_t c = 0; c < MANY_CALLS; c++) {
        for (size_t i = 0; i < MANY_PER_CALL; i++) {
            int len = snprintf(text[i], sizeof(text[i]), "%c%zu", s->prefix,
                               c * MANY_PER_CALL + i);

            m[i] = (ote_notify_msg_t){.data = text[i], .length = (size_t)len};
            st[i] = OTE_ERR_IO;
        }
        if (ote_notify_send_many(s->e, s->seg, m, MANY_PER_CALL, st) != OTE_OK)
            s->failures++;
        for (size_t i = 0; i < MANY_PER_CALL; i++)
            s->failures += st[i] != OTE_OK;
    }
    return NULL;
}

/*
 * Many notifications in flight at once, from one thread's calls of up to
 * 300 and from threads beside it, through a backlog of 64 the receiver
 * drains meanwhile: every one queued once, each thread's in its order.
 */
static void test_many_in_flight(void **state)
{
    enum { TOTAL = MANY_THREADS * MANY_CALLS * MANY_PER_CALL };
    static ote_notif_t got[TOTAL + 64];
    ote_engine_h rx, tx;
    ote_segment_h seg;
    many_sender_t s[MANY_THREADS];
    pthread_t th[MANY_THREADS];
    size_t next[MANY_THREADS] = {0}, n = 0;
    uint64_t deadline;

    (void)state;
    notify_pair("64", "60000", &rx, &tx, &seg);
    for (int k = 0; k < MANY_THREADS; k++) {
        s[k] = (many_sender_t){.e = tx, .seg = seg, .prefix = (char)('a' + k)};
        assert_int_equal(pthread_create(&th[k], NULL, many_sender_main, &s[k]), 0);
    }
    deadline = now_ms() + 60000;
    while (n < TOTAL && now_ms() < deadline) {
        size_t c = 0;

        assert_int_equal(ote_notify_recv(rx, got + n, TOTAL + 64 - n, &c), OTE_OK);
        n += c;
        if (c == 0)
            sleep_ms(1);
    }
    for (int k = 0; k < MANY_THREADS; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(s[k].failures, 0);
    }
    n += drain(rx, got + n, TOTAL + 64 - n, 200);
    assert_int_equal(n, TOTAL);
    for (size_t i = 0; i < n; i++) {
        int k = got[i].data[0] - 'a';
        char want[16];

        assert_true(k >= 0 && k < MANY_THREADS);
        snprintf(want, sizeof(want), "%c%zu", 'a' + k, next[k]++);
        assert_int_equal(got[i].length, strlen(want));
        assert_memory_equal(got[i].data, want, got[i].length);
    }
    for (int k = 0; k < MANY_THREADS; k++)
        assert_int_equal(next[k], MANY_CALLS * MANY_PER_CALL);
    /* Bad messages are refused before any is sent; the statuses say which. */
    {
        static char big[OTE_NOTIFY_MAX + 1];
        ote_notify_msg_t bad[3] = {{.data = "x", .length = 1}, {.data = NULL, .length = 3},
                                   {.data = big, .length = sizeof(big)}};
        ote_status_t bst[3] = {OTE_OK, OTE_OK, OTE_OK};
        size_t c = 0;

        assert_int_equal(ote_notify_send_many(tx, seg, bad, 2, NULL), OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_notify_send_many(tx, seg, bad, 3, bst), OTE_ERR_INVALID_PARAM);
        assert_int_equal(bst[0], OTE_ERR_CANCELED);
        assert_int_equal(bst[1], OTE_ERR_INVALID_PARAM);
        assert_int_equal(bst[2], OTE_ERR_INVALID_PARAM);
        bad[1] = bad[0];
        assert_int_equal(ote_notify_send_many(tx, seg, &bad[1], 2, bst), OTE_ERR_INVALID_PARAM);
        assert_int_equal(bst[0], OTE_ERR_CANCELED);
        assert_int_equal(bst[1], OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_notify_recv(rx, got, 4, &c), OTE_OK);
        assert_int_equal(c, 0);
    }
    ote_segment_close(seg);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

/* A batch left open is released by ote_engine_destroy (the leak checker sees it otherwise). */
static void test_destroy_releases_batches(void **state)
{
    ote_engine_h rx = ote_test_engine(NULL), tx = ote_test_engine(NULL);
    ote_segment_h seg;
    ote_mem_h mem_rx, mem_tx;
    uint8_t *buf_rx, *buf_tx;
    ote_batch_h b1, b2;
    size_t first;

    (void)state;
    assert_int_equal(ote_mem_alloc(rx, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&buf_rx,
                                   &mem_rx),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(tx, 1 << 20, NULL, 0, (void **)&buf_tx, &mem_tx), OTE_OK);
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &seg), OTE_OK);
    assert_int_equal(ote_batch_create(tx, 8, &b1), OTE_OK);
    assert_int_equal(ote_batch_create(tx, 8, &b2), OTE_OK);
    {
        ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = buf_tx, .segment = seg,
                            .remote_addr = (uint64_t)(uintptr_t)buf_rx, .length = 1 << 20};

        assert_int_equal(ote_batch_submit_notify(b1, &r, 1, "n", 1, &first), OTE_OK);
        assert_int_equal(ote_batch_submit(b2, &r, 1, &first), OTE_OK);
    }
    ote_batch_wait(b1, 10000);
    /* b1 done, b2 perhaps still in flight: neither released by the caller. */
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    ote_status_t  status;
} busy_sender_t;

static void *busy_sender_main(void *arg)
{
    busy_sender_t *s = arg;

    s->status = send_str(s->e, s->seg, "x", 0);
    return NULL;
}

/*
 * The handle a sender waits on is closed under it (the receiver's backlog
 * is full, so the sender keeps sending): the call still ends, not OK,
 * and nothing it touches was freed (the ASan pass sees the rest).
 */
static void test_close_while_sending(void **state)
{
    static ote_notif_t got[4];
    ote_engine_h rx, tx;
    busy_sender_t s;
    pthread_t th;

    (void)state;
    notify_pair("1", "1500", &rx, &tx, &s.seg);
    s.e = tx;
    assert_int_equal(send_str(tx, s.seg, "f", 0), OTE_OK);
    assert_int_equal(pthread_create(&th, NULL, busy_sender_main, &s), 0);
    sleep_ms(300);
    assert_int_equal(ote_segment_close(s.seg), OTE_OK);
    pthread_join(th, NULL);
    assert_int_not_equal(s.status, OTE_OK);
    assert_int_equal(drain(rx, got, 4, 100), 1);
    assert_memory_equal(got[0].data, "f0", 2);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

/*
 * A third party that knows the sender's instance id (it is in the
 * sender's descriptor) sends a NOTIFY_BATCH in its name with the largest
 * number: the sender's next notifications must still be queued, not taken
 * for retries of what the receiver already has.
 */
static void test_spoofed_sender(void **state)
{
    static ote_notif_t got[8];
    ote_engine_h rx = ote_test_engine(NULL), tx = ote_test_engine(NULL);
    static ote_ctl_notify_batch_t m;
    ote_desc_t *dtx, *drx;
    ote_buf_t out = {0};
    ote_ctl_hdr_t h;
    uint8_t *resp = NULL;
    ote_segment_h seg;
    ote_status_t st;
    size_t q;
    int fd;

    (void)state;
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx), &seg), OTE_OK);
    assert_int_equal(send_str(tx, seg, "a", 0), OTE_OK);
    assert_sequence(got, drain(rx, got, 8, 100), 1, "a");

    assert_int_equal(sw_fetch_desc(ote_engine_name(tx), NULL, &dtx), OTE_OK);
    assert_int_equal(sw_fetch_desc(ote_engine_name(rx), NULL, &drx), OTE_OK);
    m.sender_key      = dtx->instance_id;
    m.target_instance = drx->instance_id;
    snprintf(m.from, sizeof(m.from), "%s", ote_engine_name(tx));
    m.count    = 1;
    m.items[0] = (ote_ctl_notify_item_t){.seq = UINT64_MAX, .length = 4,
                                         .data = (const uint8_t *)"evil"};
    assert_int_equal(ote_ctl_notify_batch_encode(&m, &out), OTE_OK);
    fd = sw_connect_name(ote_engine_name(rx));
    assert_true(fd >= 0);
    assert_int_equal(sw_ctl_send(fd, OTE_CTL_NOTIFY_BATCH, 1, out.data, out.len), 0);
    assert_int_equal(sw_ctl_recv(fd, &h, &resp, 5000), 0);
    assert_int_equal(h.type, OTE_CTL_NOTIFY_BATCH_ACK);
    assert_int_equal(ote_ctl_notify_batch_ack_decode(resp, h.length, &st, &q), OTE_OK);
    assert_int_equal(st, OTE_OK);
    free(resp);
    close(fd);
    free(out.data);
    assert_int_equal(drain(rx, got, 8, 100), 1);
    assert_memory_equal(got[0].data, "evil", 4);

    /* The real sender's next ones arrive, each once. */
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(send_str(tx, seg, "b", i), OTE_OK);
    assert_sequence(got, drain(rx, got, 8, 200), 3, "b");
    ote_desc_free(dtx);
    ote_desc_free(drx);
    ote_segment_close(seg);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx);
}

/*
 * A receiver that does not answer costs one exchange (OTE_CONNECT_TIMEOUT_MS,
 * twice at most), not one per frame: 1,000 notifications of 4 KiB (67
 * frames) to a stopped peer all fail within that bound.
 */
static void test_stopped_receiver_bound(void **state)
{
    enum { N = 1000, LEN = 4096 };
    static const char *const args[] = {"--region", "4k:rw", NULL};
    static uint8_t data[LEN];
    static ote_notify_msg_t msgs[N];
    static ote_status_t st[N];
    ote_test_target_t t;
    ote_segment_h seg;
    ote_engine_h tx;
    uint64_t t0, took;

    (void)state;
    assert_int_equal(ote_test_target_start(&t, NULL, args), 0);
    setenv("OTE_CONNECT_TIMEOUT_MS", "300", 1);
    tx = ote_test_engine(NULL);
    unsetenv("OTE_CONNECT_TIMEOUT_MS");
    assert_non_null(tx);
    assert_int_equal(ote_segment_open(tx, t.name, &seg), OTE_OK);
    assert_int_equal(send_str(tx, seg, "s", 0), OTE_OK);
    for (size_t i = 0; i < N; i++)
        msgs[i] = (ote_notify_msg_t){.data = data, .length = LEN};
    mp_stop_process(t.pid);
    t0 = now_ms();
    assert_int_not_equal(ote_notify_send_many(tx, seg, msgs, N, st), OTE_OK);
    took = now_ms() - t0;
    kill(t.pid, SIGCONT);
    for (size_t i = 0; i < N; i++) {
        if (st[i] == OTE_OK)
            fail_msg("message %zu to a stopped peer reported OK", i);
    }
    if (took > 2000)
        fail_msg("1000 notifications to a stopped peer took %llu ms to fail (bound 2 x 300 ms)",
                 (unsigned long long)took);
    ote_segment_close(seg);
    ote_engine_destroy(tx);
    ote_test_target_stop(&t);
}

/*
 * The notifications that follow batches go to each peer side by side: one
 * whose receiver's backlog stays full (its sender retries for
 * OTE_NOTIFY_TIMEOUT_MS) does not hold another peer's, which arrives at
 * once; the first still ends BUSY, its data written.
 */
static void test_lanes_side_by_side(void **state)
{
    enum { TIMEOUT_MS = 2000 };
    ote_engine_h rx_a, rx_b, tx;
    ote_segment_h seg_a, seg_b;
    ote_mem_h mem_a, mem_b, mem_tx;
    uint8_t *buf_a, *buf_b, *buf_tx;
    ote_xfer_req_t r;
    ote_batch_h ba, bb;
    ote_status_t nst;
    ote_notif_t got[4];
    size_t first_a, first_b;
    uint64_t t0, took;

    (void)state;
    notify_pair("1", "2000", &rx_a, &tx, &seg_a);
    rx_b = ote_test_engine(NULL);
    assert_int_equal(ote_segment_open(tx, ote_engine_name(rx_b), &seg_b), OTE_OK);
    assert_int_equal(ote_mem_alloc(rx_a, 4096, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&buf_a,
                                   &mem_a),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(rx_b, 4096, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&buf_b,
                                   &mem_b),
                     OTE_OK);
    assert_int_equal(ote_mem_alloc(tx, 4096, NULL, 0, (void **)&buf_tx, &mem_tx), OTE_OK);
    assert_int_equal(ote_segment_refresh(seg_a), OTE_OK);
    assert_int_equal(ote_segment_refresh(seg_b), OTE_OK);
    ote_test_fill(buf_tx, 0, 4096, 9);
    /* A's backlog is full (one, never taken): its next notification waits for room. */
    assert_int_equal(send_str(tx, seg_a, "f", 0), OTE_OK);
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = buf_tx, .segment = seg_a,
                         .remote_addr = (uint64_t)(uintptr_t)buf_a, .length = 4096};
    assert_int_equal(ote_batch_create(tx, 1, &ba), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(ba, &r, 1, "to-a", 4, &first_a), OTE_OK);
    sleep_ms(200);
    /* B's comes at once, not after A's timeout. */
    r.segment     = seg_b;
    r.remote_addr = (uint64_t)(uintptr_t)buf_b;
    t0            = now_ms();
    assert_int_equal(ote_batch_create(tx, 1, &bb), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(bb, &r, 1, "to-b", 4, &first_b), OTE_OK);
    assert_int_equal(ote_batch_wait(bb, 10000), OTE_OK);
    took = now_ms() - t0;
    print_message("notification to B beside A's full backlog: %llu ms\n",
                  (unsigned long long)took);
    assert_true(took < TIMEOUT_MS / 2);
    assert_int_equal(ote_batch_notify_status(bb, first_b, &nst), OTE_OK);
    assert_int_equal(nst, OTE_OK);
    assert_int_equal(drain(rx_b, got, 4, 100), 1);
    assert_memory_equal(got[0].data, "to-b", 4);
    assert_int_equal(ote_test_check(buf_b, 0, 4096, 9), -1);
    /* A's: its data written, the notification BUSY once its time ran out. */
    assert_int_equal(ote_batch_wait(ba, 10000), OTE_OK);
    assert_int_equal(ote_batch_notify_status(ba, first_a, &nst), OTE_OK);
    assert_int_equal(nst, OTE_ERR_BUSY);
    assert_int_equal(ote_test_check(buf_a, 0, 4096, 9), -1);
    ote_batch_release(ba);
    ote_batch_release(bb);
    ote_segment_close(seg_a);
    ote_segment_close(seg_b);
    ote_mem_free(tx, mem_tx);
    ote_mem_free(rx_a, mem_a);
    ote_mem_free(rx_b, mem_b);
    ote_engine_destroy(tx);
    ote_engine_destroy(rx_a);
    ote_engine_destroy(rx_b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_segment_per_message),
        cmocka_unit_test(test_threads_one_segment),
        cmocka_unit_test(test_full_backlog),
        cmocka_unit_test(test_lanes_side_by_side),
        cmocka_unit_test(test_close_while_sending),
        cmocka_unit_test(test_spoofed_sender),
        cmocka_unit_test(test_stopped_receiver_bound),
        cmocka_unit_test(test_many_in_flight),
        cmocka_unit_test(test_destroy_releases_batches),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
