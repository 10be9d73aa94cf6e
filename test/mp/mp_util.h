/* Helpers shared by the multi-process tests in this folder. */
#ifndef OTE_MP_UTIL_H
#define OTE_MP_UTIL_H

#include "base/util.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* Deterministic random numbers for tests (splitmix64). */
static inline uint64_t mp_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Log-uniform size in [1, max]. */
static inline size_t mp_rand_size(uint64_t *s, size_t max)
{
    int bits = 0;
    size_t v;

    while (((size_t)1 << bits) < max)
        bits++;
    v = (size_t)(mp_rand(s) & (((size_t)1 << (mp_rand(s) % (unsigned)(bits + 1))) - 1)) + 1;
    return v > max ? max : v;
}

/*
 * The usual fixture of these tests: a test target with the regions of args,
 * an engine of this process with the target's segment open, and local_len
 * bytes of local memory; asserts on failure.
 */
typedef struct {
    ote_test_target_t t;
    ote_engine_h      e;
    ote_segment_h     seg;
    uint8_t          *local;
    ote_mem_h         mem;
} mp_fx_t;

static inline void mp_fx_start(mp_fx_t *f, const char *const *args, size_t local_len)
{
    assert_int_equal(ote_test_target_start(&f->t, NULL, args), 0);
    f->e = ote_test_engine(NULL);
    assert_non_null(f->e);
    assert_int_equal(ote_segment_open(f->e, f->t.name, &f->seg), OTE_OK);
    assert_int_equal(ote_mem_alloc(f->e, local_len, NULL, 0, (void **)&f->local, &f->mem),
                     OTE_OK);
}

/* Ends the fixture; quit: the target is asked to exit first. */
static inline void mp_fx_stop(mp_fx_t *f, bool quit)
{
    char reply[64];

    if (quit)
        ote_test_target_cmd(f->e, f->seg, "quit", reply, sizeof(reply), 100);
    ote_segment_close(f->seg);
    ote_mem_free(f->e, f->mem);
    ote_engine_destroy(f->e);
    ote_test_target_stop(&f->t);
}

/* ote_segment_refresh(seg) on a thread of its own (pthread_create's function, arg an mp_refresh_t). */
typedef struct {
    ote_segment_h seg;
    ote_status_t  status;
} mp_refresh_t;

static inline void *mp_refresh_main(void *arg)
{
    mp_refresh_t *r = arg;

    r->status = ote_segment_refresh(r->seg);
    return NULL;
}

/*
 * With f's target stopped (SIGSTOP) while another thread waits for its
 * answer (what: to what): a WRITE of len bytes of f's local memory to
 * remote, whose submit returns within bound_ms; then the target goes on
 * (SIGCONT) and the WRITE completes.
 */
static inline void mp_submit_beside_stopped(mp_fx_t *f, uint64_t remote, size_t len,
                                            const char *what, uint64_t bound_ms)
{
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = f->local, .segment = f->seg,
                        .remote_addr = remote, .length = len};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    uint64_t t0, ms;

    assert_int_equal(ote_batch_create(f->e, 1, &b), OTE_OK);
    t0 = ote_time_ns();
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    ms = (ote_time_ns() - t0) / 1000000u;
    print_message("submit beside %s the peer does not answer: %llu ms\n", what,
                  (unsigned long long)ms);
    assert_true(ms < bound_ms);
    assert_int_equal(kill(f->t.pid, SIGCONT), 0);
    assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    ote_batch_release(b);
}

/* A TCP port on 127.0.0.1 that was free a moment ago. */
static inline unsigned mp_free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len         = sizeof(sa);
    int fd                = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* True when the thread's /proc stat file says it is stopped (T). */
static inline bool mp_task_stopped(const char *path)
{
    char buf[512], *p;
    bool stopped = false;
    FILE *fp     = fopen(path, "r");

    if (fp == NULL)
        return true; /* the thread is gone: it runs no more */
    if (fgets(buf, sizeof(buf), fp) && (p = strrchr(buf, ')')) != NULL)
        stopped = p[1] == ' ' && p[2] == 'T';
    fclose(fp);
    return stopped;
}

/* Bytes the network interface dev sent (its sysfs statistics). */
static inline uint64_t mp_if_tx_bytes(const char *dev)
{
    char path[128];
    unsigned long long v = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/tx_bytes", dev);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%llu", &v), 1);
    fclose(f);
    return v;
}

/*
 * SIGSTOP, and wait until every thread of the process is stopped indeed:
 * delivery is not immediate, and until then a polling thread of the
 * process may still answer.
 */
static inline void mp_stop_process(pid_t pid)
{
    char dir[64], path[128];

    kill(pid, SIGSTOP);
    snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
    for (int i = 0; i < 5000; i++) {
        DIR *d = opendir(dir);
        struct dirent *de;
        bool all = d != NULL;

        while (d != NULL && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(path, sizeof(path), "%s/%.20s/stat", dir, de->d_name);
            all = all && mp_task_stopped(path);
        }
        if (d != NULL)
            closedir(d);
        if (all)
            return;
        usleep(1000);
    }
    fail_msg("process %d did not stop", (int)pid);
}

/* Longest command these helpers send to a test target. */
#define MP_TARGET_CMD_MAX 256

/* The printf-formatted command (into cmd) sent to the target; its reply in reply. */
static inline void mp_target_cmdv(ote_engine_h e, ote_segment_h seg, char *cmd, char *reply,
                                  size_t reply_len, const char *fmt, va_list ap)
{
    vsnprintf(cmd, MP_TARGET_CMD_MAX, fmt, ap);
    assert_int_equal(ote_test_target_cmd(e, seg, cmd, reply, reply_len, 20000), 0);
}

/* Send a printf-formatted command to the target; its reply in reply. */
static inline void mp_target_cmd(ote_engine_h e, ote_segment_h seg, char *reply, size_t reply_len,
                                 const char *fmt, ...)
{
    char cmd[MP_TARGET_CMD_MAX];
    va_list ap;

    va_start(ap, fmt);
    mp_target_cmdv(e, seg, cmd, reply, reply_len, fmt, ap);
    va_end(ap);
}

/* Send a printf-formatted command to the target and assert that it answers "ok". */
static inline void mp_target_ok(ote_engine_h e, ote_segment_h seg, const char *fmt, ...)
{
    char cmd[MP_TARGET_CMD_MAX], reply[128];
    va_list ap;

    va_start(ap, fmt);
    mp_target_cmdv(e, seg, cmd, reply, sizeof(reply), fmt, ap);
    va_end(ap);
    if (strcmp(reply, "ok") != 0)
        fail_msg("'%s' -> '%s'", cmd, reply);
}

/*
 * WRITE [0, len) of local to remote as task-sized tasks of one batch (len
 * a multiple of task, at most 4096 tasks); every task must complete whole
 * within timeout_ms.
 */
static inline void mp_write_tasks(ote_engine_h e, ote_segment_h seg, uint8_t *local,
                                  uint64_t remote, size_t len, size_t task, int timeout_ms)
{
    size_t n = len / task;
    ote_xfer_req_t *r    = calloc(n, sizeof(*r));
    ote_task_status_t *st = calloc(n, sizeof(*st));

    assert_true(n > 0 && n <= 4096 && r != NULL && st != NULL);
    for (size_t i = 0; i < n; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = local + i * task,
                                .segment = seg, .remote_addr = remote + i * task,
                                .length = task};
    assert_int_equal(ote_test_batch_run(e, r, n, timeout_ms, st), OTE_OK);
    for (size_t i = 0; i < n; i++) {
        if (st[i].state != OTE_TASK_COMPLETED)
            fail_msg("task %zu: %s", i, ote_status_string(st[i].error));
        assert_int_equal(st[i].transferred, task);
    }
    free(r);
    free(st);
}

/* Send cmd to the pair's target and assert that it answers want. */
static inline void mp_pair_expect(ote_test_pair_t *p, const char *cmd, const char *want)
{
    assert_int_equal(ote_test_target_expect(p->e, p->seg, cmd, want, 20000), 0);
}

/* WRITE [0, len) of the pair's region in tasks of task bytes, seed's pattern; all must complete. */
static inline void mp_pair_write_all(ote_test_pair_t *p, size_t len, size_t task, uint64_t seed)
{
    ote_test_fill(p->local, 0, len, seed);
    mp_write_tasks(p->e, p->seg, p->local, p->target.addr[0], len, task, 50000);
}

/* The pair's target holds seed's pattern in [0, len) of its region. */
static inline void mp_pair_check_all(ote_test_pair_t *p, size_t len, uint64_t seed)
{
    char c[128];

    snprintf(c, sizeof(c), "check 0 0 %zu %llu", len, (unsigned long long)seed);
    assert_int_equal(ote_test_target_expect(p->e, p->seg, c, "ok", 30000), 0);
}

/* Seconds on the monotonic clock, for the progress lines tests print. */
static inline double mp_now_s(void)
{
    return (double)ote_time_ns() / 1e9;
}

/* This process's open descriptors (/proc/self/fd). */
static inline int mp_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;

    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] != '.')
            n++;
    }
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/*
 * One WRITE of len bytes at local to remote of seg: the task's final state,
 * or -1 if refused at submit.
 */
static inline int mp_write_one(ote_engine_h e, ote_segment_h seg, void *local, uint64_t remote,
                               size_t len)
{
    ote_xfer_req_t r = {.op = OTE_OP_WRITE, .local_addr = local, .segment = seg,
                        .remote_addr = remote, .length = len};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    int state = -1;

    assert_int_equal(ote_batch_create(e, 1, &b), OTE_OK);
    if (ote_batch_submit(b, &r, 1, &first) == OTE_OK) {
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        state = (int)st.state;
    }
    ote_batch_release(b);
    return state;
}

/*
 * Traffic both ways with seg's target: a WRITE of 64 KiB of seed's pattern
 * that it must hold, then its own WRITE ("push") of 64 KiB into local +
 * 64 KiB over the rails it opens to this engine (local: 128 KiB registered
 * for remote WRITE).
 */
static inline void mp_traffic_both_ways(ote_engine_h e, ote_segment_h seg, uint8_t *local,
                                        uint64_t remote, unsigned seed)
{
    char cmd[64];

    ote_test_fill(local, 0, 65536, seed);
    assert_int_equal(mp_write_one(e, seg, local, remote, 65536), OTE_TASK_COMPLETED);
    snprintf(cmd, sizeof(cmd), "check 0 0 65536 %u", seed);
    assert_int_equal(ote_test_target_expect(e, seg, cmd, "ok", 10000), 0);
    snprintf(cmd, sizeof(cmd), "push 0 %llx 65536 %u",
             (unsigned long long)(uintptr_t)(local + 65536), seed);
    assert_int_equal(ote_test_target_expect(e, seg, cmd, "ok", 20000), 0);
}

#endif
