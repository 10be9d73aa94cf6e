/*
 * File segment bandwidth, the counterpart of fio's io_uring engine: one
 * engine worker (one ring), --qd requests of --bs bytes kept in flight
 * (each in its own batch, waited for oldest first and submitted again), at
 * random bs-aligned offsets (--rand) or one after the other (--seq), for
 * --seconds. OTE_URING_QD is set to --qd and OTE_FILE_DIRECT to --direct
 * (y or n). The file must exist and be at least --bs bytes. Prints MB/s
 * (10^6 bytes per second) and IOPS.
 *
 *   bench_file --file PATH [--read|--write] [--rand|--seq] [--bs BYTES]
 *              [--qd N] [--direct y|n] [--seconds S]
 */
#include <ote/ote.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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
    int write = 0, rand = 1;
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
        else {
            fprintf(stderr, "usage: %s --file PATH [--read|--write] [--rand|--seq] [--bs BYTES] "
                            "[--qd N] [--direct y|n] [--seconds S]\n", argv[0]);
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
    setenv("OTE_TLS", "file", 1);
    if ((s = ote_engine_create(NULL, &e)) != OTE_OK ||
        (s = ote_mem_alloc(e, qd * bs, NULL, 0, (void **)&buf, &mem)) != OTE_OK) {
        fprintf(stderr, "bench_file: %s\n", ote_status_string(s));
        return 1;
    }
    memset(buf, 0x5a, qd * bs);
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
    printf("%s %s bs=%zu qd=%zu direct=%s: %.1f MB/s, %.0f IOPS\n", write ? "write" : "read",
           rand ? "rand" : "seq", bs, qd, direct, ops * bs / (t - t0) / 1e6, ops / (t - t0));
    ote_segment_close(seg);
    ote_mem_free(e, mem);
    ote_engine_destroy(e);
    free(win);
    return 0;
}
