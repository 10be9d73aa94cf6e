/*
 * File segment bandwidth, the counterpart of fio's io_uring engine: one
 * engine worker (one ring), --qd requests of --bs bytes kept in flight
 * (each in its own batch, waited for oldest first and submitted again), at
 * random bs-aligned offsets (--rand) or one after the other (--seq), for
 * --seconds. OTE_URING_QD is set to --qd and OTE_FILE_DIRECT to --direct
 * (y or n). The file must exist and be at least --bs bytes. Prints MB/s
 * (10^6 bytes per second) and IOPS.
 *
 * With --remote the file is a peer's: a child process with an engine of
 * its own (listening on 127.0.0.1) exports it (ote_file_export, buffered
 * pread/pwrite at the target), and this process opens it as
 * "f@<child's engine name>", over tcp on loopback; --direct does not apply.
 * The bytes go inside the control messages (OTE_FILE_REMOTE=ctl), or with
 * --rails over the engines' tcp data rails (OTE_FILE_REMOTE=rails, this
 * process's buffers registered for remote read and write).
 *
 *   bench_file --file PATH [--read|--write] [--rand|--seq] [--bs BYTES]
 *              [--qd N] [--direct y|n] [--seconds S] [--remote [--rails]]
 */
#include <ote/ote.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * The exporting peer: a child process whose engine exports file as "f";
 * its engine name goes to name. It lives until this process closes *fd_p.
 */
static int remote_start(const char *file, char *name, size_t max, int *fd_p, pid_t *pid_p)
{
    int up[2], down[2];
    pid_t pid;
    ssize_t n;

    if (pipe(up) != 0 || pipe(down) != 0)
        return -1;
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
        ote_file_export_h x;
        ote_engine_h e;
        char c;

        close(up[0]);
        close(down[1]);
        if (ote_engine_create(&p, &e) != OTE_OK ||
            ote_file_export(e, "f", file, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                            &x) != OTE_OK)
            _exit(1);
        if (write(up[1], ote_engine_name(e), strlen(ote_engine_name(e))) < 0)
            _exit(1);
        close(up[1]);
        while (read(down[0], &c, 1) > 0)
            ;
        ote_engine_destroy(e);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    n = read(up[0], name, max - 1);
    close(up[0]);
    if (n <= 0)
        return -1;
    name[n] = '\0';
    *fd_p   = down[1];
    *pid_p  = pid;
    return 0;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);

    if (*end == 'k' || *end == 'K')
        v *= 1024;
    else if (*end == 'm' || *end == 'M')
        v *= 1024 * 1024;
    else if (*end == 'g' || *end == 'G')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

int main(int argc, char **argv)
{
    const char *file = NULL, *direct = "y";
    size_t bs = 4096, qd = 32, nblocks;
    double seconds = 5, t0, t;
    int write = 0, rand = 1, remote = 0, rails = 0, peer_fd = -1;
    pid_t peer = 0;
    char peer_name[300];
    char name[4200], qds[32];
    struct stat st;
    ote_engine_h e;
    ote_segment_h seg;
    ote_batch_h *win;
    ote_mem_h mem;
    uint8_t *buf;
    uint64_t ops = 0, x = 0x9e3779b97f4a7c15ull, next = 0;
    ote_status_t s;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--file") && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(argv[i], "--read"))
            write = 0;
        else if (!strcmp(argv[i], "--write"))
            write = 1;
        else if (!strcmp(argv[i], "--rand"))
            rand = 1;
        else if (!strcmp(argv[i], "--seq"))
            rand = 0;
        else if (!strcmp(argv[i], "--bs") && i + 1 < argc)
            bs = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "--qd") && i + 1 < argc)
            qd = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--direct") && i + 1 < argc)
            direct = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--remote"))
            remote = 1;
        else if (!strcmp(argv[i], "--rails"))
            remote = rails = 1;
        else {
            fprintf(stderr, "usage: %s --file PATH [--read|--write] [--rand|--seq] [--bs BYTES] "
                            "[--qd N] [--direct y|n] [--seconds S] [--remote [--rails]]\n",
                    argv[0]);
            return 2;
        }
    }
    if (file == NULL || stat(file, &st) != 0 || (size_t)st.st_size < bs || bs == 0 || qd == 0) {
        fprintf(stderr, "bench_file: --file must name a file of at least --bs bytes\n");
        return 2;
    }
    nblocks = (size_t)st.st_size / bs;
    snprintf(qds, sizeof(qds), "%zu", qd);
    setenv("OTE_URING_QD", qds, 1);
    setenv("OTE_FILE_DIRECT", direct, 1);
    setenv("OTE_NUM_WORKERS", "1", 1);
    setenv("OTE_TLS", remote ? "tcp" : "file", 1);
    setenv("OTE_FILE_REMOTE", rails ? "rails" : "ctl", 1);
    if (remote && remote_start(file, peer_name, sizeof(peer_name), &peer_fd, &peer) != 0) {
        fprintf(stderr, "bench_file: the exporting peer did not start\n");
        return 1;
    }
    if ((s = ote_engine_create(NULL, &e)) != OTE_OK ||
        (s = ote_mem_alloc(e, qd * bs, NULL,
                           rails ? OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE : 0,
                           (void **)&buf, &mem)) != OTE_OK) {
        fprintf(stderr, "bench_file: %s\n", ote_status_string(s));
        return 1;
    }
    memset(buf, 0x5a, qd * bs);
    if (remote)
        snprintf(name, sizeof(name), "f@%s", peer_name);
    else
        snprintf(name, sizeof(name), "file://%s", file);
    if ((s = ote_segment_open(e, name, &seg)) != OTE_OK) {
        fprintf(stderr, "bench_file: open %s: %s\n", name, ote_status_string(s));
        return 1;
    }
    win = calloc(qd, sizeof(*win));
    t0 = now_s();
    for (size_t k = 0;; k = (k + 1) % qd) {
        ote_xfer_req_t r = {.op = write ? OTE_OP_WRITE : OTE_OP_READ, .local_addr = buf + k * bs,
                            .segment = seg, .length = bs};
        ote_task_status_t ts;
        size_t id;

        if (win[k] != NULL) {
            ote_batch_wait(win[k], -1);
            ote_batch_task_status(win[k], 0, &ts);
            if (ts.state != OTE_TASK_COMPLETED) {
                fprintf(stderr, "bench_file: task ended %s\n", ote_status_string(ts.error));
                return 1;
            }
            ote_batch_release(win[k]);
            win[k] = NULL;
            ops++;
        }
        t = now_s();
        if (t - t0 >= seconds)
            break;
        if (rand) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r.remote_addr = (x % nblocks) * bs;
        } else {
            r.remote_addr = next * bs;
            next          = (next + 1) % nblocks;
        }
        if (ote_batch_create(e, 1, &win[k]) != OTE_OK ||
            (s = ote_batch_submit(win[k], &r, 1, &id)) != OTE_OK) {
            fprintf(stderr, "bench_file: submit: %s\n", ote_status_string(s));
            return 1;
        }
    }
    /* Requests still in flight at the end are waited for, not counted. */
    for (size_t k = 0; k < qd; k++) {
        if (win[k] != NULL) {
            ote_batch_wait(win[k], -1);
            ote_batch_release(win[k]);
        }
    }
    printf("%s %s bs=%zu qd=%zu %s%s: %.1f MB/s, %.0f IOPS\n", write ? "write" : "read",
           rand ? "rand" : "seq", bs, qd, remote ? "remote " : "direct=",
           remote ? (rails ? "rails" : "ctl") : direct, ops * bs / (t - t0) / 1e6,
           ops / (t - t0));
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    if (remote) {
        close(peer_fd);
        waitpid(peer, NULL, 0);
    }
    free(win);
    return 0;
}
