/*
 * ote_perftest: bandwidth and latency of one-sided READ/WRITE between two
 * engines. Without a peer argument it serves as the target and prints its
 * segment name; with one it is the initiator; --loopback starts its own
 * target process on this host and runs both.
 *
 * The initiator steers the target through notifications:
 *   "clear OFF LEN"        target zeroes the range, answers "cleared"
 *   "check OFF LEN SEED"   target verifies the write pattern, answers "ok" or "bad ..."
 *   "quit"                 target exits
 */
#include "perftest.h"

#include "base/pattern.h"

#include <ote/ote.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop_flag; /* lock-free: set by a signal handler on any thread */

/* The --loopback target process while it runs, else 0. */
static volatile pid_t target_pid;

/* The target stops at its next poll and releases its engine. */
static void on_target_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

/* Kill and reap the --loopback target, so that it never outlives us. */
static void target_reap(void)
{
    pid_t pid = target_pid;

    if (pid > 0) {
        target_pid = 0;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
}

/* The initiator ends at once on SIGINT/SIGTERM, taking its target along. */
static void on_initiator_signal(int sig)
{
    int saved = errno;

    target_reap();
    errno = saved;
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ------------------------------------------------------------------ */
/* Target                                                             */
/* ------------------------------------------------------------------ */

static int run_target(void)
{
    ote_engine_params_t p = {.listen_addr = opt.listen ? opt.listen : "0.0.0.0:0"};
    ote_engine_h e;
    ote_mem_h mem;
    void *buf;
    ote_status_t st;
    ote_segment_h reply_seg = NULL;
    char reply_name[256] = "";

    mem_check_location(opt.remote_mem);
    st = ote_engine_create(&p, &e);
    if (st != OTE_OK)
        die("engine: %s", ote_status_string(st));
    perftest_mem_get(e, opt.region, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, &buf, &mem);
    /* Readers verify this pattern. */
    ote_pattern_fill(buf, 0, opt.region, TARGET_SEED);
    printf("ote_perftest: serving segment %s region %#llx %zu\n", ote_engine_name(e),
           (unsigned long long)(uintptr_t)buf, opt.region);
    fflush(stdout);

    while (!stop_flag) {
        ote_notif_t n[8];
        size_t count = 0;

        ote_notify_recv(e, n, 8, &count);
        if (count == 0) {
            /*
             * Sleep until a notification arrives (or a signal): a thread
             * that woke every few milliseconds would take a core from the
             * worker answering the initiator now and then.
             */
            engine_event_wait(e, 1000);
            continue;
        }
        for (size_t i = 0; i < count; i++) {
            char msg[OTE_NOTIFY_MAX + 1], answer[128];
            unsigned long long off, len, seed;

            memcpy(msg, n[i].data, n[i].length);
            msg[n[i].length] = '\0';
            if (strcmp(msg, "quit") == 0) {
                stop_flag = 1;
                break;
            }
            if (reply_seg == NULL || strcmp(reply_name, n[i].from) != 0) {
                if (reply_seg)
                    ote_segment_close(reply_seg);
                reply_seg = NULL;
                snprintf(reply_name, sizeof(reply_name), "%.255s", n[i].from);
                st = ote_segment_open(e, reply_name, &reply_seg);
                if (st != OTE_OK) {
                    fprintf(stderr, "ote_perftest: cannot answer %s: %s\n", reply_name,
                            ote_status_string(st));
                    continue;
                }
            }
            if (sscanf(msg, "clear %llu %llu", &off, &len) == 2 && off + len <= opt.region) {
                memset((uint8_t *)buf + off, 0, len);
                snprintf(answer, sizeof(answer), "cleared");
            } else if (sscanf(msg, "check %llu %llu %llu", &off, &len, &seed) == 3 &&
                       off + len <= opt.region) {
                long bad = ote_pattern_check((uint8_t *)buf + off, off, len, seed);

                if (bad < 0)
                    snprintf(answer, sizeof(answer), "ok");
                else
                    snprintf(answer, sizeof(answer), "bad %llu", off + (unsigned long long)bad);
            } else {
                snprintf(answer, sizeof(answer), "error");
            }
            ote_notify_send(e, reply_seg, answer, strlen(answer));
        }
    }
    if (reply_seg)
        ote_segment_close(reply_seg);
    perftest_mem_put(e, buf, mem);
    ote_engine_destroy(e);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Initiator                                                          */
/* ------------------------------------------------------------------ */

typedef struct {
    int          id;
    ote_engine_h engine;
    ote_segment_h seg;
    uint8_t     *local;
    uint64_t     remote;
    size_t       size;
    size_t       batch;
    long         iters;
    long         warmup;
    double       elapsed;
    double      *lat;      /* per round, seconds */
    long         done;
    int          failed;
    ote_status_t error;
} worker_t;

static pthread_barrier_t barrier;
static volatile long progress_rounds;

static ote_op_t test_op(void)
{
    return opt.test == T_WRITE_BW || opt.test == T_WRITE_LAT ? OTE_OP_WRITE : OTE_OP_READ;
}

static int round_check(ote_batch_h b, size_t n, worker_t *w)
{
    for (size_t t = 0; t < n; t++) {
        ote_task_status_t ts;

        ote_batch_task_status(b, t, &ts);
        if (ts.state != OTE_TASK_COMPLETED) {
            w->failed = 1;
            w->error  = ts.error;
            return -1;
        }
    }
    return 0;
}

static void *submitter_main(void *arg)
{
    worker_t *w = arg;
    ote_xfer_req_t *reqs = calloc(w->batch, sizeof(*reqs));
    int depth = opt.depth;
    ote_batch_h *ring = calloc((size_t)depth, sizeof(*ring));
    double *start = calloc((size_t)depth, sizeof(*start));
    long submitted = 0, completed = 0, total = w->iters + w->warmup;
    double t0 = 0;

    for (size_t i = 0; i < w->batch; i++) {
        reqs[i].op          = test_op();
        reqs[i].local_addr  = w->local + i * w->size;
        reqs[i].segment     = w->seg;
        reqs[i].remote_addr = w->remote + i * w->size;
        reqs[i].length      = w->size;
    }
    pthread_barrier_wait(&barrier);
    while (completed < total && !w->failed) {
        /* Keep `depth` batches in flight. */
        while (submitted < total && submitted - completed < depth) {
            ote_batch_h *b = &ring[submitted % depth];
            size_t first;
            /* The clock starts before the submit: what a caller waits for. */
            double t_submit = now_s();
            ote_status_t st = ote_batch_create(w->engine, w->batch, b);

            if (st == OTE_OK)
                st = ote_batch_submit(*b, reqs, w->batch, &first);
            if (st != OTE_OK) {
                w->failed = 1;
                w->error  = st;
                break;
            }
            start[submitted % depth] = t_submit;
            submitted++;
        }
        if (w->failed)
            break;
        {
            ote_batch_h b = ring[completed % depth];
            ote_status_t st = ote_batch_wait(b, 60000);
            double t = now_s();

            if (st != OTE_OK) {
                w->failed = 1;
                w->error  = st;
                break;
            }
            if (round_check(b, w->batch, w) != 0)
                break;
            ote_batch_release(b);
            if (completed >= w->warmup)
                w->lat[completed - w->warmup] = t - start[completed % depth];
            completed++;
            if (completed == w->warmup)
                t0 = t;
            if (w->id == 0)
                progress_rounds = completed;
        }
    }
    w->elapsed = now_s() - t0;
    w->done    = completed > w->warmup ? completed - w->warmup : 0;
    /* On failure, wait for what is still in flight before leaving. */
    while (completed < submitted) {
        ote_batch_wait(ring[completed % depth], 60000);
        ote_batch_release(ring[completed % depth]);
        completed++;
    }
    free(reqs);
    free(ring);
    free(start);
    return NULL;
}

/* Send a command to the target and wait for its answer. */
static int target_command(ote_engine_h e, ote_segment_h seg, const char *cmd, char *answer,
                          size_t len)
{
    double deadline = now_s() + 30;
    ote_status_t st = ote_notify_send(e, seg, cmd, strlen(cmd));

    if (st != OTE_OK) {
        fprintf(stderr, "ote_perftest: notify: %s\n", ote_status_string(st));
        return -1;
    }
    while (now_s() < deadline) {
        ote_notif_t n;
        size_t count;

        ote_notify_recv(e, &n, 1, &count);
        if (count) {
            snprintf(answer, len, "%.*s", (int)n.length, n.data);
            return 0;
        }
        usleep(100);
    }
    fprintf(stderr, "ote_perftest: target did not answer '%s'\n", cmd);
    return -1;
}

static int run_initiator(const char *peer)
{
    ote_engine_params_t p = {.listen_addr = opt.listen ? opt.listen : NULL};
    ote_engine_h e;
    ote_segment_h seg;
    ote_region_info_t regions[4];
    size_t nreg = 0, max_size = 0, local_len;
    ote_mem_h mem;
    uint8_t *local;
    ote_status_t st;
    FILE *json = NULL;
    int rc = 0;
    bool lat_test = opt.test == T_WRITE_LAT || opt.test == T_READ_LAT;
    bool kv_test  = opt.test == T_KV_WRITE || opt.test == T_KV_READ;

    mem_check_location(opt.local_mem);
    mem_check_location(opt.remote_mem);
    /* Peers answer on our control plane: listen where the peer can reach us. */
    if (p.listen_addr == NULL && (strncmp(peer, "127.", 4) == 0 || strncmp(peer, "[::1]", 5) == 0))
        p.listen_addr = strncmp(peer, "[::1]", 5) == 0 ? "[::1]:0" : "127.0.0.1:0";
    st = ote_engine_create(&p, &e);
    if (st != OTE_OK)
        die("engine: %s", ote_status_string(st));
    st = ote_segment_open(e, peer, &seg);
    if (st != OTE_OK)
        die("opening segment %s: %s", peer, ote_status_string(st));
    ote_segment_regions(seg, regions, 4, &nreg);
    if (nreg == 0)
        die("peer %s publishes no region", peer);
    for (size_t i = 0; i < opt.num_sizes; i++)
        max_size = opt.sizes[i] > max_size ? opt.sizes[i] : max_size;
    local_len = kv_test ? perftest_kv_local_len() : max_size * opt.batch * (size_t)opt.threads;
    if (!kv_test && local_len > regions[0].length)
        die("size x batch x threads = %zu exceeds the peer's region (%zu)", local_len,
            (size_t)regions[0].length);
    perftest_mem_get(e, local_len, 0, (void **)&local, &mem);
    if (opt.json) {
        json = fopen(opt.json, "w");
        if (json == NULL)
            die("cannot write %s: %s", opt.json, strerror(errno));
    }
    if (kv_test) {
        rc = perftest_kv_run(e, seg, &regions[0], local, local_len, json);
        opt.num_sizes = 0; /* the rows below are the other tests' */
    } else if (!opt.quiet) {
        perftest_report_header(peer);
    }
    for (size_t si = 0; si < opt.num_sizes && rc == 0; si++) {
        size_t size = opt.sizes[si];
        size_t used = size * opt.batch * (size_t)opt.threads;
        uint64_t seed = 0x1000 + size;
        long iters = opt.iters;
        worker_t *w = calloc((size_t)opt.threads, sizeof(*w));
        pthread_t *th = calloc((size_t)opt.threads, sizeof(*th));
        bool *joined = calloc((size_t)opt.threads, sizeof(*joined));
        double elapsed = 0, *all_lat;
        long rounds = 0;
        char answer[128];

        if (iters <= 0) {
            /* About 2 GiB per size for bandwidth, 20000 rounds for latency. */
            double target = lat_test ? 20000 : (double)(2ul << 30) / (double)(size * opt.batch);

            iters = (long)fmin(fmax(target / opt.threads, 50), 200000);
        }
        if (test_op() == OTE_OP_WRITE) {
            ote_pattern_fill(local, 0, used, seed);
            if (opt.check) {
                snprintf(answer, sizeof(answer), "clear %llu %zu",
                         (unsigned long long)0, used);
                if (target_command(e, seg, answer, answer, sizeof(answer)) != 0 ||
                    strcmp(answer, "cleared") != 0)
                    die("target did not clear its region");
            }
        } else {
            memset(local, 0, used);
        }
        pthread_barrier_init(&barrier, NULL, (unsigned)opt.threads);
        progress_rounds = 0;
        for (int t = 0; t < opt.threads; t++) {
            w[t].id     = t;
            w[t].engine = e;
            w[t].seg    = seg;
            w[t].size   = size;
            w[t].batch  = opt.batch;
            w[t].local  = local + (size_t)t * size * opt.batch;
            w[t].remote = regions[0].addr + (uint64_t)t * size * opt.batch;
            w[t].iters  = iters;
            w[t].warmup = iters / 10 > 0 ? (iters / 10 < 100 ? iters / 10 : 100) : 1;
            w[t].lat    = calloc((size_t)iters, sizeof(double));
            if (pthread_create(&th[t], NULL, submitter_main, &w[t]) != 0)
                die("cannot start thread %d", t);
        }
        {
            double last = now_s();

            for (;;) {
                bool all_done = true;

                usleep(20000);
                /* A thread is joined once; threads end in any order. */
                for (int t = 0; t < opt.threads; t++) {
                    if (joined[t])
                        continue;
                    if (pthread_tryjoin_np(th[t], NULL) == 0)
                        joined[t] = true;
                    else
                        all_done = false;
                }
                if (all_done)
                    break;
                if (!opt.quiet && now_s() - last >= 1.0) {
                    fprintf(stderr, "ote_perftest: %s %zu x%zu: %ld/%ld rounds\n",
                            test_names[opt.test], size, opt.batch, progress_rounds,
                            iters + w[0].warmup);
                    last = now_s();
                }
            }
        }
        pthread_barrier_destroy(&barrier);
        all_lat = calloc((size_t)iters * (size_t)opt.threads, sizeof(double));
        for (int t = 0; t < opt.threads; t++) {
            if (w[t].failed) {
                fprintf(stderr, "ote_perftest: thread %d failed: %s\n", t,
                        ote_status_string(w[t].error));
                rc = 1;
            }
            elapsed = w[t].elapsed > elapsed ? w[t].elapsed : elapsed;
            memcpy(all_lat + rounds, w[t].lat, (size_t)w[t].done * sizeof(double));
            rounds += w[t].done;
        }
        if (rc == 0 && opt.check) {
            if (test_op() == OTE_OP_WRITE) {
                snprintf(answer, sizeof(answer), "check 0 %zu %llu", used,
                         (unsigned long long)seed);
                if (target_command(e, seg, answer, answer, sizeof(answer)) != 0 ||
                    strcmp(answer, "ok") != 0) {
                    fprintf(stderr, "ote_perftest: verification FAILED: %s\n", answer);
                    rc = 1;
                }
            } else {
                for (int t = 0; t < opt.threads && rc == 0; t++) {
                    size_t off = (size_t)t * size * opt.batch;
                    long bad = ote_pattern_check(local + off, off, size * opt.batch, TARGET_SEED);

                    if (bad >= 0) {
                        fprintf(stderr, "ote_perftest: verification FAILED at byte %zu\n",
                                off + (size_t)bad);
                        rc = 1;
                    }
                }
            }
        }
        if (rc == 0 && rounds > 0)
            perftest_report_row(size, rounds, elapsed, all_lat, json);
        for (int t = 0; t < opt.threads; t++)
            free(w[t].lat);
        free(all_lat);
        free(w);
        free(th);
        free(joined);
    }
    perftest_report_rails(seg, json);
    if (json)
        fclose(json);
    if (opt.loopback)
        ote_notify_send(e, seg, "quit", 4);
    ote_segment_close(seg);
    perftest_mem_put(e, local, mem);
    ote_engine_destroy(e);
    return rc;
}

/*
 * Start a target process on loopback and return its segment name. It shares
 * our stderr, so it must not outlive us: the kernel kills it when we die
 * (PR_SET_PDEATHSIG, tied to this thread, the main one), and every exit of
 * ours kills and reaps it (atexit, SIGINT/SIGTERM handlers).
 */
static pid_t spawn_target(const char *self, char *name, size_t len)
{
    int pfd[2];
    pid_t pid, parent = getpid();
    char line[512], region[32];
    FILE *f;

    if (pipe(pfd) != 0)
        die("pipe: %s", strerror(errno));
    snprintf(region, sizeof(region), "%zu", opt.region);
    if (atexit(target_reap) != 0)
        die("atexit failed");
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* We may have died before the prctl: then getppid() changed. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        close(pfd[0]);
        dup2(pfd[1], STDOUT_FILENO);
        close(pfd[1]);
        execl(self, "ote_perftest", "-l", "127.0.0.1:0", "-M", opt.remote_mem, "--region", region,
              opt.use_malloc ? "--malloc" : (char *)NULL, (char *)NULL);
        _exit(127);
    }
    target_pid = pid;
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    if (f == NULL || fgets(line, sizeof(line), f) == NULL ||
        sscanf(line, "ote_perftest: serving segment %255s", name) != 1)
        die("loopback target did not start");
    (void)len;
    fclose(f);
    return pid;
}

int main(int argc, char **argv)
{
    char name[256];
    pid_t child = 0;
    int rc;

    rc = perftest_parse(argc, argv);
    if (rc >= 0)
        return rc;
    if (opt.tls)
        setenv("OTE_TLS", opt.tls, 1);
    signal(SIGPIPE, SIG_IGN);
    if (opt.peer == NULL && !opt.loopback) {
        signal(SIGINT, on_target_signal);
        signal(SIGTERM, on_target_signal);
        return run_target();
    }
    signal(SIGINT, on_initiator_signal);
    signal(SIGTERM, on_initiator_signal);
    if (opt.loopback) {
        child    = spawn_target("/proc/self/exe", name, sizeof(name));
        opt.peer = name;
    }
    rc = run_initiator(opt.peer);
    if (child > 0) {
        int waited = 0;

        /* The target exits on "quit"; give it 5 s before target_reap(). */
        while (waitpid(child, NULL, WNOHANG) == 0 && waited < 5000) {
            usleep(10000);
            waited += 10;
        }
        if (waited < 5000)
            target_pid = 0;
    }
    return rc;
}
