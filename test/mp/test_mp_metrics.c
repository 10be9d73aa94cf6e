/*
 * The metrics endpoint and ote_engine_stats against what was moved: two
 * engines of this process share one endpoint (OTE_METRICS_ADDR with port
 * 0); known bytes, requests, notifications, registrations and admission
 * refusals go through; the scraped values must equal them exactly, and
 * ote_engine_stats must give the same samples as /metrics.
 */
#include "mp_stats.h"
#include "mp_util.h"
#include "testlib.h"
#include "core/engine_facts.h"
#include "core/obs/obs_int.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>

/* Scrapes /metrics in a loop while transfers run (no assertion: another thread). */
typedef struct {
    const char *addr;
    atomic_bool stop;
    atomic_long scrapes;
} scraper_t;

static void *scraper_main(void *arg)
{
    scraper_t *sc = arg;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    const char *colon = strrchr(sc->addr, ':');
    char buf[65536], host[64];

    snprintf(host, sizeof(host), "%.*s", (int)(colon - sc->addr), sc->addr);
    inet_pton(AF_INET, host, &sin.sin_addr);
    sin.sin_port = htons((uint16_t)atoi(colon + 1));
    while (!atomic_load(&sc->stop)) {
        static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 &&
            send(fd, req, sizeof(req) - 1, 0) == (ssize_t)(sizeof(req) - 1)) {
            while (recv(fd, buf, sizeof(buf), 0) > 0)
                ;
            atomic_fetch_add(&sc->scrapes, 1);
        }
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

typedef struct {
    const char *text;
    const char *engine;
    size_t      count, matched;
} stats_cmp_t;

/* Every sample ote_engine_stats gives is in the scrape with the same value. */
static int stats_cb(void *arg, const ote_stat_t *st)
{
    stats_cmp_t *c = arg;
    double v = mp_scraped(c->text, "%s{engine=\"%s\"%s%s}", st->name, c->engine,
                      st->labels[0] ? "," : "", st->labels);

    c->count++;
    if (v == st->value)
        c->matched++;
    else
        print_error("%s{%s}: stats %.17g, scrape %.17g\n", st->name, st->labels, st->value, v);
    return 0;
}

#define RLEN (1u << 20)

static void test_metrics_exact(void **state)
{
    ote_engine_h a, b, c;
    ote_segment_h seg, cseg;
    ote_mem_h ma, mb, mc;
    uint8_t *la, *rb;
    ote_mem_desc_t d;
    char addr[96], *text, na[300], nb[300], msg[16];
    ote_notif_t notifs[8];
    size_t wr_sizes[] = {1, 100, 4096, 4097, 65536, 300000, 1u << 20};
    size_t rd_sizes[] = {8, 64, 5000};
    size_t wr_bytes = 0, rd_bytes = 0, nrecv = 0, got, first;
    ote_xfer_req_t reqs[8];
    ote_task_status_t st[8];
    ote_batch_telemetry_t tel = {.version = OTE_BATCH_TELEMETRY_VERSION};
    ote_batch_h batch;
    int code, busy = 0;
    stats_cmp_t cmp;
    scraper_t sc;
    pthread_t scraper;

    (void)state;
    setenv("OTE_METRICS_ADDR", "127.0.0.1:0", 1);
    setenv("OTE_TLS", "tcp", 1);
#ifndef HAVE_MHD
    {
        ote_engine_h e = NULL;

        assert_int_equal(ote_engine_create(NULL, &e), OTE_ERR_UNSUPPORTED);
        unsetenv("OTE_METRICS_ADDR");
        skip();
    }
#endif
    a = ote_test_engine("127.0.0.1:0");
    b = ote_test_engine("127.0.0.1:0");
    assert_non_null(ote_engine_metrics_addr(a));
    snprintf(addr, sizeof(addr), "%s", ote_engine_metrics_addr(a));
    assert_non_null(ote_engine_metrics_addr(b));
    /* Port 0 asked twice: one endpoint, the port the first one chose. */
    assert_string_equal(addr, ote_engine_metrics_addr(b));
    assert_int_not_equal(atoi(strrchr(addr, ':') + 1), 0);
    snprintf(na, sizeof(na), "%s", ote_engine_name(a));
    snprintf(nb, sizeof(nb), "%s", ote_engine_name(b));

    /* A malformed address fails creation. */
    setenv("OTE_METRICS_ADDR", "127.0.0.1:notaport", 1);
    c = NULL;
    assert_int_equal(ote_engine_create(NULL, &c), OTE_ERR_INVALID_PARAM);
    setenv("OTE_METRICS_ADDR", "127.0.0.1:0", 1);

    assert_int_equal(ote_mem_alloc(a, RLEN, NULL, 0, (void **)&la, &ma), OTE_OK);
    rb = aligned_alloc(4096, RLEN);
    assert_non_null(rb);
    d = (ote_mem_desc_t){.addr = rb, .length = RLEN,
                         .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(b, &d, 1, &mb), OTE_OK);
    assert_int_equal(ote_segment_open(a, nb, &seg), OTE_OK);

    /* Scraped all along the transfers: the counts stay exact. */
    sc.addr = addr;
    atomic_init(&sc.stop, false);
    atomic_init(&sc.scrapes, 0);
    assert_int_equal(pthread_create(&scraper, NULL, scraper_main, &sc), 0);

    /* Writes in one batch, its telemetry after. */
    ote_test_fill(la, 0, RLEN, 7);
    assert_int_equal(ote_batch_create(a, 16, &batch), OTE_OK);
    for (size_t i = 0; i < sizeof(wr_sizes) / sizeof(wr_sizes[0]); i++) {
        reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = la, .segment = seg,
                                   .remote_addr = (uintptr_t)rb, .length = wr_sizes[i]};
        wr_bytes += wr_sizes[i];
    }
    assert_int_equal(ote_batch_submit(batch, reqs, 7, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(batch, 20000), OTE_OK);
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(ote_batch_task_status(batch, first + i, &st[0]), OTE_OK);
        assert_int_equal(st[0].state, OTE_TASK_COMPLETED);
    }
    assert_int_equal(ote_batch_telemetry(batch, &tel), OTE_OK);
    assert_int_equal(tel.version, 1);
    assert_int_equal(tel.bytes, wr_bytes);
    assert_int_equal(tel.requests, 7);
    assert_int_equal(tel.ended, 7);
    assert_int_equal(tel.completed, 7);
    assert_true(tel.start_us != 0);
    tel.version = 0;
    assert_int_equal(ote_batch_telemetry(batch, &tel), OTE_ERR_INVALID_PARAM);
    ote_batch_release(batch);
    assert_int_equal(ote_test_check(rb, 0, RLEN, 7), -1);

    /* Reads, one batch each. */
    for (size_t i = 0; i < sizeof(rd_sizes) / sizeof(rd_sizes[0]); i++) {
        assert_int_equal(ote_test_xfer(a, seg, OTE_OP_READ, la, (uintptr_t)rb, rd_sizes[i],
                                       20000, &st[0]),
                         OTE_OK);
        assert_int_equal(st[0].state, OTE_TASK_COMPLETED);
        rd_bytes += rd_sizes[i];
    }
    /* One write outside the peer's region: a failure with its status. */
    assert_int_equal(ote_test_xfer(a, seg, OTE_OP_WRITE, la, (uintptr_t)rb + RLEN - 16, 64,
                                   20000, &st[1]),
                     OTE_OK);
    assert_int_not_equal(st[1].state, OTE_TASK_COMPLETED);
    assert_int_equal(st[1].transferred, 0);

    /* Notifications: 3 standalone, 1 after a batch. */
    for (int i = 0; i < 3; i++) {
        snprintf(msg, sizeof(msg), "n%d", i);
        assert_int_equal(ote_notify_send(a, seg, msg, strlen(msg)), OTE_OK);
    }
    reqs[0] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = la, .segment = seg,
                               .remote_addr = (uintptr_t)rb, .length = 10};
    wr_bytes += 10;
    assert_int_equal(ote_batch_create(a, 4, &batch), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(batch, reqs, 1, "after", 5, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(batch, 20000), OTE_OK);
    assert_int_equal(ote_batch_notify_status(batch, first, &st[2].error), OTE_OK);
    assert_int_equal(st[2].error, OTE_OK);
    ote_batch_release(batch);
    while (nrecv < 4) {
        assert_int_equal(ote_notify_recv(b, notifs, 8, &got), OTE_OK);
        nrecv += got;
        if (got == 0)
            usleep(1000);
    }

    while (atomic_load(&sc.scrapes) == 0) /* at least one scrape ran */
        usleep(1000);
    atomic_store(&sc.stop, true);
    assert_int_equal(pthread_join(scraper, NULL), 0);

    /*
     * Admission: an engine that progresses only when asked, with room for
     * one task in flight; every BUSY the submits get is counted.
     */
    setenv("OTE_MAX_INFLIGHT_TASKS", "1", 1);
    setenv("OTE_PROGRESS_THREAD", "n", 1);
    c = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_MAX_INFLIGHT_TASKS");
    unsetenv("OTE_PROGRESS_THREAD");
    assert_string_equal(ote_engine_metrics_addr(c), addr);
    d = (ote_mem_desc_t){.addr = la, .length = 4096};
    assert_int_equal(ote_mem_register(c, &d, 1, &mc), OTE_OK);
    assert_int_equal(ote_segment_open(c, nb, &cseg), OTE_OK);
    assert_int_equal(ote_batch_create(c, 64, &batch), OTE_OK);
    reqs[0] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = la, .segment = cseg,
                               .remote_addr = (uintptr_t)rb, .length = 4096};
    for (int i = 0; i < 32 && busy < 3; i++) {
        ote_status_t s = ote_batch_submit(batch, reqs, 1, &first);

        assert_true(s == OTE_OK || s == OTE_ERR_BUSY);
        busy += s == OTE_ERR_BUSY;
    }
    assert_true(busy > 0);
    assert_int_equal(ote_batch_wait(batch, 20000), OTE_OK);
    ote_batch_release(batch);

    text = mp_http_get(addr, "/metrics", &code);
    assert_non_null(text);
    assert_int_equal(code, 200);
#define A(fmt, ...) mp_scraped(text, fmt, na, ##__VA_ARGS__)
#define OR0(v) ((v) < 0 ? 0 : (v))
    assert_true(A("ote_transfer_bytes_total{engine=\"%s\",op=\"write\",transport=\"tcp\"}") ==
                (double)wr_bytes);
    assert_true(A("ote_transfer_bytes_total{engine=\"%s\",op=\"read\",transport=\"tcp\"}") ==
                (double)rd_bytes);
    /* 7 + 1 written, 1 refused: tcp, or none when it ended before any rail. */
    assert_true(A("ote_transfer_requests_total{engine=\"%s\",op=\"write\",transport=\"tcp\"}") +
                    OR0(A("ote_transfer_requests_total{engine=\"%s\",op=\"write\",transport=\"none\"}")) ==
                9.0);
    assert_true(A("ote_transfer_requests_total{engine=\"%s\",op=\"read\",transport=\"tcp\"}") == 3.0);
    assert_true(mp_scraped(text, "ote_transfer_failures_total{engine=\"%s\",op=\"write\",status=\"%s\"}",
                       na, mp_status_label(st[1].error)) == 1.0);
    assert_true(A("ote_transfer_failures_total{engine=\"%s\",op=\"read\",status=\"timeout\"}") == 0.0);
    assert_true(A("ote_transfer_latency_seconds_count{engine=\"%s\",op=\"write\"}") == 8.0);
    assert_true(A("ote_transfer_latency_seconds_bucket{engine=\"%s\",op=\"write\",le=\"+Inf\"}") == 8.0);
    assert_true(A("ote_transfer_latency_seconds_count{engine=\"%s\",op=\"read\"}") == 3.0);
    assert_true(A("ote_transfer_size_bytes_sum{engine=\"%s\",op=\"write\"}") == (double)wr_bytes);
    /* 1, 10, 100 <= 256; 4096 <= 4096; 4097 <= 16384; 65536; 300000 and 1 MiB. */
    assert_true(A("ote_transfer_size_bytes_bucket{engine=\"%s\",op=\"write\",le=\"256\"}") == 3.0);
    assert_true(A("ote_transfer_size_bytes_bucket{engine=\"%s\",op=\"write\",le=\"4096\"}") == 4.0);
    assert_true(A("ote_transfer_size_bytes_bucket{engine=\"%s\",op=\"write\",le=\"16384\"}") == 5.0);
    assert_true(A("ote_transfer_size_bytes_bucket{engine=\"%s\",op=\"write\",le=\"65536\"}") == 6.0);
    assert_true(A("ote_transfer_size_bytes_bucket{engine=\"%s\",op=\"write\",le=\"1048576\"}") == 8.0);
    assert_true(A("ote_transfer_size_bytes_sum{engine=\"%s\",op=\"read\"}") == (double)rd_bytes);
    assert_true(A("ote_rail_bytes_total{engine=\"%s\",transport=\"tcp\",device=\"lo\"}") ==
                (double)(wr_bytes + rd_bytes));
    assert_true(A("ote_rail_state{engine=\"%s\",transport=\"tcp\",device=\"lo\"}") == 1.0);
    assert_true(A("ote_inflight_requests{engine=\"%s\"}") == 0.0);
    assert_true(A("ote_inflight_bytes{engine=\"%s\"}") == 0.0);
    assert_true(A("ote_notifications_sent_total{engine=\"%s\"}") == 4.0);
    assert_true(mp_scraped(text, "ote_notifications_received_total{engine=\"%s\"}", nb) == 4.0);
    assert_true(mp_scraped(text, "ote_notifications_sent_total{engine=\"%s\"}", nb) == 0.0);
    assert_true(A("ote_registered_bytes{engine=\"%s\",memory=\"host\"}") == (double)RLEN);
    assert_true(mp_scraped(text, "ote_registered_bytes{engine=\"%s\",memory=\"host\"}", nb) ==
                (double)RLEN);
    assert_true(A("ote_registrations_total{engine=\"%s\"}") == 1.0);
    assert_true(A("ote_segments_open{engine=\"%s\"}") == 1.0);
    assert_true(mp_scraped(text, "ote_segments_open{engine=\"%s\"}", nb) == 0.0);
    /* The open, and the re-read that the write past the region's end made
     * before it failed (the peer could have registered the range since). */
    assert_true(A("ote_metadata_requests_total{engine=\"%s\",store=\"p2p\",result=\"ok\"}") == 2.0);
    assert_true(A("ote_admission_rejections_total{engine=\"%s\"}") == 0.0);
    assert_true(mp_scraped(text, "ote_admission_rejections_total{engine=\"%s\"}",
                       ote_engine_name(c)) == (double)busy);
    assert_true(A("ote_build_info{engine=\"%s\",version=\"%s\",transports=\"tcp\"}",
                  ote_version()) == 1.0);
    assert_non_null(strstr(text, "# TYPE ote_transfer_latency_seconds histogram\n"));
    /* One group per family: a TYPE line once, whatever the number of engines. */
    assert_ptr_equal(strstr(strstr(text, "# TYPE ote_transfer_bytes_total ") + 1,
                            "# TYPE ote_transfer_bytes_total "),
                     NULL);

    /* ote_engine_stats gives the same samples (nothing moved since). */
    cmp = (stats_cmp_t){.text = text, .engine = na};
    assert_int_equal(ote_engine_stats(a, stats_cb, &cmp), OTE_OK);
    assert_true(cmp.count > 100);
    assert_int_equal(cmp.matched, cmp.count);
    free(text);

    text = mp_http_get(addr, "/health", &code);
    assert_non_null(text);
    assert_int_equal(code, 200);
    assert_string_equal(text, "ok 3 engines\n");
    free(text);
    text = mp_http_get(addr, "/nothing", &code);
    assert_non_null(text);
    assert_int_equal(code, 404);
    free(text);

    assert_int_equal(ote_segment_close(cseg), OTE_OK);
    assert_int_equal(ote_mem_deregister(c, mc), OTE_OK);
    ote_engine_destroy(c);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_free(a, ma), OTE_OK);
    ote_engine_destroy(a);
    /* The endpoint stays for b, without a's series. */
    text = mp_http_get(addr, "/metrics", &code);
    assert_non_null(text);
    assert_int_equal(code, 200);
    assert_null(strstr(text, na));
    assert_non_null(strstr(text, nb));
    free(text);
    assert_int_equal(ote_mem_deregister(b, mb), OTE_OK);
    ote_engine_destroy(b);
    free(rb);
    unsetenv("OTE_METRICS_ADDR");
    unsetenv("OTE_TLS");
}

/* An address another socket holds fails creation (no silent fallback). */
static void test_metrics_addr_taken(void **state)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    char port[16];
    ote_engine_h e = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    (void)state;
#ifndef HAVE_MHD
    skip();
#endif
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    snprintf(port, sizeof(port), "%u", ntohs(sin.sin_port));
    setenv("OTE_METRICS_ADDR", port, 1); /* a port alone: 127.0.0.1 */
    assert_int_equal(ote_engine_create(NULL, &e), OTE_ERR_IO);
    assert_null(e);
    unsetenv("OTE_METRICS_ADDR");
    close(fd);
    /* Unset: no endpoint. */
    assert_int_equal(ote_engine_create(NULL, &e), OTE_OK);
    assert_null(ote_engine_metrics_addr(e));
    ote_engine_destroy(e);
}

/* A rails source whose second answer counts more rails than the first: only max were copied. */
static size_t fake_calls;

static ote_status_t growing_rails(ote_engine_h e, ote_rail_info_t *out, size_t max,
                                  size_t *count_p)
{
    (void)e;
    if (max >= 1) {
        memset(&out[0], 0, sizeof(out[0]));
        snprintf(out[0].transport, sizeof(out[0].transport), "faketl");
        snprintf(out[0].device, sizeof(out[0].device), "fakedev");
        out[0].state = OTE_RAIL_ACTIVE;
    }
    *count_p = fake_calls++ == 0 ? 1 : 40; /* rails came meanwhile */
    return OTE_OK;
}

/*
 * The snapshot asks for the rails twice (how many, then a copy); when
 * more came between the two, it reads only what was copied (the ASan pass
 * sees a read past the copy), and the pairs it lists are the real ones.
 */
static void test_metrics_rails_grow(void **state)
{
    static ote_obs_snap_t snap;
    ote_engine_h e = ote_test_engine(NULL);
    ote_obs_t *obs;
    size_t before, i;

    (void)state;
    assert_non_null(e);
    obs = ote_engine_facts(e)->obs;
    ote_obs_snapshot(e, &snap);
    before = snap.num_pairs;
    obs->sources.rails = growing_rails;
    fake_calls = 0;
    ote_obs_snapshot(e, &snap);
    assert_int_equal(fake_calls, 2);
    assert_int_equal(snap.num_pairs, before + 1);
    for (i = 0; i < snap.num_pairs; i++) {
        if (strcmp(snap.pairs[i].transport, "faketl") == 0)
            break;
    }
    assert_true(i < snap.num_pairs);
    assert_string_equal(snap.pairs[i].device, "fakedev");
    assert_int_equal(snap.rail_state[i], 1);
    ote_engine_destroy(e);
}

/*
 * Clients that connect to the endpoint and say nothing take at most its
 * 32 connections (the rest wait in the backlog), not file descriptors
 * without end; once they are gone it answers again.
 */
static void test_metrics_conns_bounded(void **state)
{
    enum { CLIENTS = 100 };
    struct sockaddr_storage ss;
    socklen_t len;
    int fds[CLIENTS], before, during, code = 0;
    const char *addr;
    ote_engine_h e;
    char *text;

    (void)state;
#ifndef HAVE_MHD
    skip();
#endif
    setenv("OTE_METRICS_ADDR", "0", 1);
    e = ote_test_engine(NULL);
    unsetenv("OTE_METRICS_ADDR");
    assert_non_null(e);
    addr = ote_engine_metrics_addr(e);
    assert_non_null(addr);
    assert_int_equal(ote_sockaddr_parse(addr, &ss, &len), OTE_OK);
    before = mp_count_fds();
    for (int i = 0; i < CLIENTS; i++) {
        fds[i] = socket(ss.ss_family, SOCK_STREAM, 0);
        assert_true(fds[i] >= 0);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&ss, len), 0);
    }
    usleep(500 * 1000); /* the endpoint's thread accepts what it will */
    during = mp_count_fds();
    printf("%d idle clients: %d more descriptors in this process (theirs and the endpoint's)\n",
           CLIENTS, during - before);
    assert_true(during - before <= CLIENTS + 32 + 4);
    for (int i = 0; i < CLIENTS; i++)
        close(fds[i]);
    text = NULL;
    for (int i = 0; i < 100 && (text == NULL || code != 200); i++) {
        free(text);
        usleep(50 * 1000);
        text = mp_http_get(addr, "/health", &code);
    }
    assert_non_null(text);
    assert_int_equal(code, 200);
    free(text);
    ote_engine_destroy(e);
}

typedef struct {
    ote_batch_h       b;
    ote_xfer_req_t    r;
    _Atomic int       go;  /* rounds to submit, one request each */
    _Atomic int       done;
} tel_submitter_t;

static void *tel_submitter_main(void *arg)
{
    tel_submitter_t *t = arg;
    size_t first;

    for (int round = 1; round <= atomic_load(&t->go); round++) {
        while (atomic_load(&t->done) < round - 1)
            ;
        assert_int_equal(ote_batch_submit(t->b, &t->r, 1, &first), OTE_OK);
    }
    return NULL;
}

/*
 * Another thread that sees a task end reads telemetry that already counts
 * its request and has the batch's start: the request is counted before
 * the task is posted (a task can end before its submit call returns).
 */
static void test_batch_telemetry_counts_first(void **state)
{
    enum { ROUNDS = 2000, LEN = 64 };
    ote_engine_h a = ote_test_engine(NULL), b = ote_test_engine(NULL);
    tel_submitter_t t;
    ote_segment_h seg;
    ote_mem_h ma, mb;
    uint8_t *la, *rb;
    pthread_t th;
    int bad = 0;

    (void)state;
    assert_int_equal(ote_mem_alloc(a, 4096, NULL, 0, (void **)&la, &ma), OTE_OK);
    assert_int_equal(ote_mem_alloc(b, 4096, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&rb, &mb),
                     OTE_OK);
    assert_int_equal(ote_segment_open(a, ote_engine_name(b), &seg), OTE_OK);
    t.r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = la, .segment = seg,
                           .remote_addr = (uint64_t)(uintptr_t)rb, .length = LEN};
    assert_int_equal(ote_batch_create(a, ROUNDS, &t.b), OTE_OK);
    atomic_init(&t.go, ROUNDS);
    atomic_init(&t.done, 0);
    assert_int_equal(pthread_create(&th, NULL, tel_submitter_main, &t), 0);
    for (int round = 0; round < ROUNDS; round++) {
        ote_batch_telemetry_t tel = {.version = OTE_BATCH_TELEMETRY_VERSION};
        ote_task_status_t ts;

        /* The task of this round, once it ended. */
        while (ote_batch_task_status(t.b, (size_t)round, &ts) != OTE_OK ||
               ts.state == OTE_TASK_PENDING)
            ote_engine_progress(a);
        assert_int_equal(ts.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_batch_telemetry(t.b, &tel), OTE_OK);
        if (tel.ended > tel.requests || tel.start_us == 0)
            bad++;
        atomic_store(&t.done, round + 1);
    }
    pthread_join(th, NULL);
    assert_int_equal(ote_batch_wait(t.b, 20000), OTE_OK);
    if (bad > 0)
        fail_msg("%d of %d rounds: a task had ended before its request was counted", bad, ROUNDS);
    ote_batch_release(t.b);
    ote_segment_close(seg);
    ote_mem_free(a, ma);
    ote_mem_free(b, mb);
    ote_engine_destroy(a);
    ote_engine_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_exact),
        cmocka_unit_test(test_metrics_addr_taken),
        cmocka_unit_test(test_metrics_rails_grow),
        cmocka_unit_test(test_metrics_conns_bounded),
        cmocka_unit_test(test_batch_telemetry_counts_first),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
