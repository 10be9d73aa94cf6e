/*
 * ote_scale's curves (scale.h): requests per batch, regions of a target,
 * peers of an initiator, senders of notifications. Every point prints the
 * counts it measured (requests, bytes, regions seen, notifications
 * received) beside its times, so that a reader can check one against the
 * other; nothing here decides whether a figure is good.
 */
#include "scale.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t max_of(const size_t *v, size_t n)
{
    size_t m = 0;

    for (size_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static ote_segment_h open_segment(ote_engine_h e, const char *name)
{
    ote_segment_h seg;
    ote_status_t st = ote_segment_open(e, name, &seg);

    if (st != OTE_OK)
        die("opening %s: %s", name, ote_status_string(st));
    return seg;
}

static void *alloc_local(ote_engine_h e, size_t len, ote_mem_h *mem_p)
{
    void *buf;
    ote_status_t st = ote_mem_alloc(e, len, NULL, 0, &buf, mem_p);

    if (st != OTE_OK)
        die("allocating %zu bytes: %s", len, ote_status_string(st));
    memset(buf, 0x5a, len);
    return buf;
}

/*
 * One batch of reqs: the time of its submit (create and submit) and of its
 * completion (submit to the end of ote_batch_wait), in seconds; its
 * telemetry in *tel. Dies when the engine refuses it.
 */
static void run_batch(ote_engine_h e, const ote_xfer_req_t *reqs, size_t n, double *submit_s,
                      double *complete_s, ote_batch_telemetry_t *tel)
{
    ote_batch_h b;
    size_t first;
    double t0 = now_s(), t1, t2;
    ote_status_t st = ote_batch_create(e, n, &b);

    if (st == OTE_OK)
        st = ote_batch_submit(b, reqs, n, &first);
    if (st != OTE_OK)
        die("submitting %zu requests: %s", n, ote_status_string(st));
    t1 = now_s();
    st = ote_batch_wait(b, 600000);
    t2 = now_s();
    if (st != OTE_OK)
        die("waiting for %zu requests: %s", n, ote_status_string(st));
    memset(tel, 0, sizeof(*tel));
    tel->version = OTE_BATCH_TELEMETRY_VERSION;
    if (ote_batch_telemetry(b, tel) != OTE_OK)
        die("batch telemetry");
    ote_batch_release(b);
    *submit_s   = t1 - t0;
    *complete_s = t2 - t0;
}

/* ------------------------------------------------------------------ */
/* Requests per batch                                                 */
/* ------------------------------------------------------------------ */

int scale_requests(void)
{
    size_t maxc = max_of(sopt.counts, sopt.num_counts), maxs = max_of(sopt.sizes, sopt.num_sizes);
    /* Requests beyond 64 MiB wrap around the regions (both sides). */
    size_t cap = maxc * maxs < (64ul << 20) ? maxc * maxs : 64ul << 20;
    scale_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    ote_mem_h mem;
    uint8_t *local;
    double *sub = calloc(sopt.reps, sizeof(double)), *comp = calloc(sopt.reps, sizeof(double));

    cap = cap < maxs ? maxs : cap;
    scale_target_start(&t, 1, 1, cap);
    e     = scale_engine();
    seg   = open_segment(e, t.names[0]);
    local = alloc_local(e, cap, &mem);
    for (size_t si = 0; si < sopt.num_sizes; si++) {
        size_t size = sopt.sizes[si], slots = cap / size;
        char series[32];

        snprintf(series, sizeof(series), "write %zuB", size);
        for (size_t ci = 0; ci < sopt.num_counts; ci++) {
            size_t count = sopt.counts[ci];
            ote_xfer_req_t *reqs = calloc(count, sizeof(*reqs));
            ote_batch_telemetry_t tel;
            double s, c, warm_s, warm_c;
            long rss0, hwm;
            bool peak;

            if (reqs == NULL)
                die("%zu requests: out of memory", count);
            for (size_t i = 0; i < count; i++) {
                size_t off = (i % slots) * size;

                reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = local + off,
                                           .segment = seg, .remote_addr = t.addrs[0] + off,
                                           .length = size};
            }
            /* A first batch of this shape, untimed: connections, pools. */
            run_batch(e, reqs, count < 256 ? count : 256, &warm_s, &warm_c, &tel);
            peak = scale_peak_reset();
            rss0 = scale_proc_kib(0, "VmRSS:");
            for (size_t r = 0; r < sopt.reps; r++)
                run_batch(e, reqs, count, &sub[r], &comp[r], &tel);
            hwm = scale_proc_kib(0, "VmHWM:");
            s   = perftest_percentile(sub, sopt.reps, 0.5);
            c   = perftest_percentile(comp, sopt.reps, 0.5);
            scale_row("requests", series, count, "requests", (double)tel.requests);
            scale_row("requests", series, count, "completed", (double)tel.completed);
            scale_row("requests", series, count, "bytes", (double)tel.bytes);
            scale_row("requests", series, count, "submit_ns_per_req", s * 1e9 / (double)count);
            scale_row("requests", series, count, "complete_ns_per_req", c * 1e9 / (double)count);
            scale_row("requests", series, count, "req_per_s", (double)count / c);
            if (peak && rss0 > 0 && hwm > 0)
                scale_row("requests", series, count, "peak_bytes_per_req",
                          (double)(hwm > rss0 ? hwm - rss0 : 0) * 1024 / (double)count);
            free(reqs);
        }
    }
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    scale_target_stop(&t);
    free(sub);
    free(comp);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Regions of a target                                                */
/* ------------------------------------------------------------------ */

#define REGION_SIZE 4096

int scale_regions(void)
{
    ote_engine_h e = scale_engine();
    size_t m = sopt.checks;
    ote_mem_h mem;
    uint8_t *local = alloc_local(e, m * 64, &mem);
    ote_xfer_req_t *reqs = calloc(m, sizeof(*reqs));
    double *sub = calloc(sopt.reps, sizeof(double)), *comp = calloc(sopt.reps, sizeof(double));

    for (size_t ci = 0; ci < sopt.num_counts; ci++) {
        size_t n = sopt.counts[ci], seen = 0;
        ote_region_info_t *regions = calloc(n, sizeof(*regions));
        ote_batch_telemetry_t tel;
        ote_segment_h seg;
        scale_target_t t;
        double t0, t1, refresh[3];
        const char *cv = "regions", *sr = "4KiB regions";

        scale_target_start(&t, 1, n, REGION_SIZE);
        t0  = now_s();
        seg = open_segment(e, t.names[0]);
        t1  = now_s();
        for (int i = 0; i < 3; i++) {
            double r0 = now_s();
            ote_status_t st = ote_segment_refresh(seg);

            if (st != OTE_OK)
                die("refreshing %s: %s", t.names[0], ote_status_string(st));
            refresh[i] = now_s() - r0;
        }
        ote_segment_regions(seg, regions, n, &seen);
        scale_row(cv, sr, n, "regions_seen", (double)seen);
        scale_row(cv, sr, n, "register_per_s", (double)n / t.register_s);
        scale_row(cv, sr, n, "register_ns_per_region", t.register_s * 1e9 / (double)n);
        scale_row(cv, sr, n, "desc_bytes", (double)t.desc_bytes);
        scale_row(cv, sr, n, "desc_bytes_per_region",
                  (double)(t.desc_bytes - t.desc_bytes_empty) / (double)n);
        scale_row(cv, sr, n, "open_ms", (t1 - t0) * 1e3);
        scale_row(cv, sr, n, "refresh_ms", perftest_percentile(refresh, 3, 0.5) * 1e3);
        scale_row(cv, sr, n, "lookup_ns", t.lookup_ns);
        scale_row(cv, sr, n, "lookup_found", t.lookup_hits > 0 ? 1 : 0);
        if (seen != n)
            die("the segment lists %zu regions, the target registered %zu", seen, n);
        /* m requests of 64 B spread over every region: the remote range checks. */
        for (size_t i = 0; i < m; i++)
            reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = local + i * 64,
                                       .segment = seg,
                                       .remote_addr = regions[(i * 7919) % n].addr + (i % 64) * 64,
                                       .length = 64};
        for (size_t r = 0; r < sopt.reps; r++)
            run_batch(e, reqs, m, &sub[r], &comp[r], &tel);
        scale_row(cv, sr, n, "check_requests", (double)tel.requests);
        scale_row(cv, sr, n, "check_completed", (double)tel.completed);
        scale_row(cv, sr, n, "check_bytes", (double)tel.bytes);
        scale_row(cv, sr, n, "check_submit_ns_per_req",
                  perftest_percentile(sub, sopt.reps, 0.5) * 1e9 / (double)m);
        ote_segment_close(seg);
        scale_target_stop(&t);
        free(regions);
    }
    free(reqs);
    free(sub);
    free(comp);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Peers of an initiator                                              */
/* ------------------------------------------------------------------ */

/* Engines per target process: 256 targets are 8 processes on 2 cores. */
#define ENGINES_PER_PROC 32

typedef struct {
    long   rss_kib, fds;
    double cpu_s, wakeups;
} proc_use_t;

static proc_use_t targets_use(const scale_target_t *t, size_t procs)
{
    proc_use_t u = {0, 0, 0, 0};

    for (size_t i = 0; i < procs; i++) {
        u.rss_kib += scale_proc_kib(t[i].child.pid, "VmRSS:");
        u.fds += scale_proc_fds(t[i].child.pid);
        u.cpu_s += scale_proc_cpu_s(t[i].child.pid);
        u.wakeups += scale_proc_wakeups(t[i].child.pid);
    }
    return u;
}

int scale_peers(void)
{
    size_t k = sopt.per_peer, block = 4096;

    for (size_t ci = 0; ci < sopt.num_counts; ci++) {
        size_t p = sopt.counts[ci], procs = (p + ENGINES_PER_PROC - 1) / ENGINES_PER_PROC, at = 0;
        scale_target_t *t = calloc(procs, sizeof(*t));
        ote_segment_h *segs = calloc(p, sizeof(*segs));
        ote_xfer_req_t *reqs = calloc(p * k, sizeof(*reqs));
        double *open_s = calloc(p, sizeof(double)), sub, comp, cpu0, cpu1, wk0, wk1, total_open = 0;
        proc_use_t t0, t1;
        long rss0, fds0, rss1, fds1, t0rss;
        ote_batch_telemetry_t tel;
        ote_engine_h e;
        ote_mem_h mem;
        uint8_t *local;
        const char *cv = "peers", *sr = sopt.target_netns[0] != '\0' ? "tcp netns" : "tcp";

        for (size_t i = 0; i < procs; i++) {
            size_t n = p / procs + (i < p % procs);

            scale_target_start(&t[i], n, 1, k * block);
        }
        e     = scale_engine();
        local = alloc_local(e, k * block, &mem);
        rss0  = scale_proc_kib(0, "VmRSS:");
        fds0  = scale_proc_fds(0);
        t0    = targets_use(t, procs);
        t0rss = t0.rss_kib;
        for (size_t i = 0; i < procs; i++) {
            for (size_t j = 0; j < t[i].engines; j++, at++) {
                double s0 = now_s();

                segs[at]   = open_segment(e, t[i].names[j]);
                open_s[at] = now_s() - s0;
                total_open += open_s[at];
                for (size_t r = 0; r < k; r++)
                    reqs[at * k + r] = (ote_xfer_req_t){
                        .op = OTE_OP_WRITE, .local_addr = local + r * block, .segment = segs[at],
                        .remote_addr = t[i].addrs[j] + r * block, .length = block};
            }
        }
        /* The first batch makes the data connections; the second is timed. */
        run_batch(e, reqs, p * k, &sub, &comp, &tel);
        run_batch(e, reqs, p * k, &sub, &comp, &tel);
        rss1 = scale_proc_kib(0, "VmRSS:");
        fds1 = scale_proc_fds(0);
        t1   = targets_use(t, procs);
        scale_row(cv, sr, p, "segments", (double)p);
        scale_row(cv, sr, p, "open_ms_per_seg", total_open * 1e3 / (double)p);
        scale_row(cv, sr, p, "open_ms_p50", perftest_percentile(open_s, p, 0.5) * 1e3);
        scale_row(cv, sr, p, "requests", (double)tel.requests);
        scale_row(cv, sr, p, "completed", (double)tel.completed);
        scale_row(cv, sr, p, "bytes", (double)tel.bytes);
        scale_row(cv, sr, p, "write_ms", comp * 1e3);
        scale_row(cv, sr, p, "write_gbps", (double)tel.bytes / comp / 1e9);
        scale_row(cv, sr, p, "init_rss_kib_per_seg", (double)(rss1 - rss0) / (double)p);
        scale_row(cv, sr, p, "init_fds_per_seg", (double)(fds1 - fds0) / (double)p);
        scale_row(cv, sr, p, "target_rss_kib_per_seg", (double)(t1.rss_kib - t0.rss_kib) / (double)p);
        scale_row(cv, sr, p, "target_fds_per_seg", (double)(t1.fds - t0.fds) / (double)p);
        /*
         * Idle: every segment open, nothing submitted. Reading the targets'
         * threads costs this process CPU that grows with them: it is done
         * outside this process's own window, each side with its own.
         */
        {
            double tw0 = now_s(), w0, w, tw;

            t0   = targets_use(t, procs);
            w0   = now_s();
            cpu0 = scale_proc_cpu_s(0);
            wk0  = scale_proc_wakeups(0);
            usleep((useconds_t)(sopt.idle_s * 1e6));
            cpu1 = scale_proc_cpu_s(0);
            wk1  = scale_proc_wakeups(0);
            w    = now_s() - w0;
            t1   = targets_use(t, procs);
            tw   = now_s() - tw0;
            scale_row(cv, sr, p, "idle_s", w);
            scale_row(cv, sr, p, "init_idle_cpu_pct", (cpu1 - cpu0) * 100 / w);
            scale_row(cv, sr, p, "target_idle_cpu_pct_per_seg",
                      (t1.cpu_s - t0.cpu_s) * 100 / tw / (double)p);
            /* The measuring thread's own sleep is one of the initiator's. */
            scale_row(cv, sr, p, "init_idle_wakeups_per_s", (wk1 - wk0) / w);
            scale_row(cv, sr, p, "target_idle_wakeups_per_s_per_seg",
                      (t1.wakeups - t0.wakeups) / tw / (double)p);
            /* RSS as above, after the window (idle connections freed their receive buffers). */
            scale_row(cv, sr, p, "init_rss_kib_per_seg_idle",
                      (double)(scale_proc_kib(0, "VmRSS:") - rss0) / (double)p);
            scale_row(cv, sr, p, "target_rss_kib_per_seg_idle",
                      (double)(t1.rss_kib - t0rss) / (double)p);
        }
        for (size_t i = 0; i < p; i++)
            ote_segment_close(segs[i]);
        ote_mem_free(e, mem);
        ote_engine_destroy(e);
        for (size_t i = 0; i < procs; i++)
            scale_target_stop(&t[i]);
        free(t);
        free(segs);
        free(reqs);
        free(open_s);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Notifications: senders to one receiver                             */
/* ------------------------------------------------------------------ */

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    size_t        count, per_call, sent, failed;
    pthread_t     th;
} sender_t;

#define PER_CALL_MAX 1024

/*
 * Each message is the CLOCK_MONOTONIC time of its send call: the delay is
 * taken at the receiver. per_call 1: ote_notify_send(); more:
 * ote_notify_send_many() of that many.
 */
static void *sender_main(void *arg)
{
    sender_t *s = arg;
    static __thread char text[PER_CALL_MAX][32];
    ote_notify_msg_t m[PER_CALL_MAX];
    ote_status_t st[PER_CALL_MAX];

    for (size_t i = 0; i < s->count;) {
        size_t k = s->count - i < s->per_call ? s->count - i : s->per_call;
        double t = now_s();

        for (size_t j = 0; j < k; j++) {
            int len = snprintf(text[j], sizeof(text[j]), "%.9f", t);

            m[j] = (ote_notify_msg_t){.data = text[j], .length = (size_t)len};
        }
        if (k == 1)
            st[0] = ote_notify_send(s->e, s->seg, m[0].data, m[0].length);
        else
            ote_notify_send_many(s->e, s->seg, m, k, st);
        for (size_t j = 0; j < k; j++) {
            if (st[j] == OTE_OK)
                s->sent++;
            else
                s->failed++;
        }
        i += k;
    }
    return NULL;
}

/*
 * ote_scale notify-send RECEIVER ENGINES COUNT PER_CALL: ENGINES engines,
 * each with a thread that sends COUNT notifications to RECEIVER, PER_CALL
 * per call, once "go" arrives on stdin; prints "ready", then "done SENT
 * FAILED".
 */
int scale_notify_send_main(int argc, char **argv)
{
    size_t k, count, per_call, sent = 0, failed = 0;
    sender_t *s;
    char line[64];

    if (argc != 6)
        die("usage: ote_scale notify-send RECEIVER ENGINES COUNT PER_CALL");
    k        = scale_number(argv[3], 1, "notify-send: ENGINES");
    count    = scale_number(argv[4], 0, "notify-send: COUNT");
    per_call = scale_number(argv[5], 1, "notify-send: PER_CALL");
    if (per_call > PER_CALL_MAX)
        die("notify-send: PER_CALL 1 to %d", PER_CALL_MAX);
    s = calloc(k, sizeof(*s));
    for (size_t i = 0; i < k; i++) {
        s[i].e     = scale_engine();
        s[i].seg   = open_segment(s[i].e, argv[2]);
        s[i].count    = count;
        s[i].per_call = per_call;
    }
    printf("ready\n");
    fflush(stdout);
    if (fgets(line, sizeof(line), stdin) == NULL || strncmp(line, "go", 2) != 0)
        return 1;
    for (size_t i = 0; i < k; i++) {
        if (pthread_create(&s[i].th, NULL, sender_main, &s[i]) != 0)
            die("notify-send: cannot start a thread");
    }
    for (size_t i = 0; i < k; i++) {
        pthread_join(s[i].th, NULL);
        sent += s[i].sent;
        failed += s[i].failed;
    }
    printf("done %zu %zu\n", sent, failed);
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL)
        ;
    for (size_t i = 0; i < k; i++) {
        ote_segment_close(s[i].seg);
        ote_engine_destroy(s[i].e);
    }
    free(s);
    return 0;
}

#define SENDER_PROCS 8
#define RECV_MAX     64

int scale_notify(void)
{
    ote_engine_h e = scale_engine();
    static ote_notif_t n[RECV_MAX];

    for (size_t pi = 0; pi < sopt.num_per_call; pi++)
    for (size_t ci = 0; ci < sopt.num_counts; ci++) {
        size_t senders = sopt.counts[ci], per_call = sopt.per_call[pi];
        size_t procs = senders < SENDER_PROCS ? senders : SENDER_PROCS;
        size_t each = sopt.messages / senders > 0 ? sopt.messages / senders : 1;
        size_t want = each * senders, got = 0, sent = 0, failed = 0;
        scale_child_t *c = calloc(procs, sizeof(*c));
        double *delay = calloc(want, sizeof(double)), t_go, t_last, deadline;
        char a[3][32], line[128], sr[64];
        const char *cv = "notify";

        /* One call per notification: the series of old; more: ote_notify_send_many(). */
        if (per_call == 1)
            snprintf(sr, sizeof(sr), "to one receiver");
        else
            snprintf(sr, sizeof(sr), "to one receiver %zu per call", per_call);
        snprintf(a[1], sizeof(a[1]), "%zu", each);
        snprintf(a[2], sizeof(a[2]), "%zu", per_call);
        for (size_t i = 0; i < procs; i++) {
            const char *args[] = {"notify-send", ote_engine_name(e), a[0], a[1], a[2], NULL};

            snprintf(a[0], sizeof(a[0]), "%zu", senders / procs + (i < senders % procs));
            scale_spawn(&c[i], args);
        }
        for (size_t i = 0; i < procs; i++) {
            scale_child_line(&c[i], line, sizeof(line));
            if (strcmp(line, "ready") != 0)
                die("sender said '%s'", line);
        }
        t_go = t_last = now_s();
        for (size_t i = 0; i < procs; i++) {
            fputs("go\n", c[i].in);
            fflush(c[i].in);
        }
        deadline = t_go + 120;
        while (got < want && now_s() < deadline) {
            size_t count = 0;

            ote_notify_recv(e, n, RECV_MAX, &count);
            if (count == 0) {
                engine_event_wait(e, 10);
                continue;
            }
            t_last = now_s();
            for (size_t i = 0; i < count && got < want; i++) {
                char msg[32];
                size_t len = n[i].length < sizeof(msg) - 1 ? n[i].length : sizeof(msg) - 1;

                memcpy(msg, n[i].data, len);
                msg[len] = '\0';
                delay[got++] = t_last - strtod(msg, NULL);
            }
        }
        for (size_t i = 0; i < procs; i++) {
            unsigned long long ok, bad;

            scale_child_line(&c[i], line, sizeof(line));
            if (sscanf(line, "done %llu %llu", &ok, &bad) != 2)
                die("sender said '%s'", line);
            sent += ok;
            failed += bad;
            scale_child_end(&c[i]);
        }
        scale_row(cv, sr, senders, "senders", (double)senders);
        scale_row(cv, sr, senders, "sent", (double)sent);
        scale_row(cv, sr, senders, "send_failures", (double)failed);
        scale_row(cv, sr, senders, "received", (double)got);
        if (got > 0) {
            scale_row(cv, sr, senders, "notif_per_s", (double)got / (t_last - t_go));
            scale_row(cv, sr, senders, "delay_p50_us", perftest_percentile(delay, got, 0.5) * 1e6);
            scale_row(cv, sr, senders, "delay_p99_us", perftest_percentile(delay, got, 0.99) * 1e6);
        }
        free(c);
        free(delay);
    }
    ote_engine_destroy(e);
    return 0;
}
