/*
 * Submit-to-completion rate of small transfers: an engine writes to itself
 * (its own segment, over the transports OTE_TLS selects, loopback for tcp).
 * Each of --threads submitting threads keeps --window batches of --batch
 * WRITEs of --size bytes in flight, waits for the oldest, releases it and
 * submits the next, for --seconds. Prints tasks per second, the process's
 * CPU time per million tasks (submitters, workers and the receiving side
 * together: all are this process) and the peak resident size (VmHWM).
 *
 * --flood: no waiting at all; every batch is released as soon as it is
 * submitted (detached), BUSY answers are retried. Shows what admission
 * keeps in memory under a flood of submissions.
 *
 *   bench_load [--threads N] [--batch B] [--window W] [--size BYTES]
 *              [--seconds S] [--flood]
 */
#include <ote/ote.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define AREA (64u << 20)

static ote_engine_h  g_e;
static ote_segment_h g_seg;
static uint8_t      *g_local, *g_remote;
static size_t        g_batch = 128, g_size = 4096, g_window = 1;
static double        g_seconds = 3.0;
static int           g_flood;
static atomic_bool   g_stop;

typedef struct {
    int           index;
    unsigned long tasks, busy, errors;
} thr_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static long vm_kib(const char *key)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;

    if (fp == NULL)
        return -1;
    while (fgets(line, sizeof(line), fp)) {
        if (strncmp(line, key, strlen(key)) == 0)
            v = atol(line + strlen(key) + 1);
    }
    fclose(fp);
    return v;
}

static void fill_reqs(ote_xfer_req_t *r, size_t n, size_t *cursor)
{
    for (size_t i = 0; i < n; i++) {
        size_t off = (*cursor * g_size) % (AREA - g_size);

        (*cursor)++;
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = g_local + off,
                                .segment = g_seg, .remote_addr = (uintptr_t)g_remote + off,
                                .length = g_size};
    }
}

/* Wait for a batch, count its completed tasks, release it. */
static void reap(thr_t *t, ote_batch_h b)
{
    ote_task_status_t st;

    if (ote_batch_wait(b, 60000) != OTE_OK || ote_batch_status(b, &st) != OTE_OK ||
        st.state != OTE_TASK_COMPLETED)
        t->errors++;
    else
        t->tasks += g_batch;
    ote_batch_release(b);
}

static void *submitter(void *arg)
{
    thr_t *t = arg;
    ote_xfer_req_t *r = calloc(g_batch, sizeof(*r));
    ote_batch_h *ring = calloc(g_window, sizeof(*ring));
    size_t cursor = (size_t)t->index * 4096, head = 0, count = 0;

    if (r == NULL || ring == NULL)
        abort();
    while (!atomic_load(&g_stop)) {
        ote_batch_h b;
        size_t first;
        ote_status_t st;

        if (ote_batch_create(g_e, g_batch, &b) != OTE_OK)
            abort();
        fill_reqs(r, g_batch, &cursor);
        while ((st = ote_batch_submit(b, r, g_batch, &first)) == OTE_ERR_BUSY) {
            t->busy++;
            if (!g_flood && count > 0) {
                reap(t, ring[head]);
                head = (head + 1) % g_window;
                count--;
            }
            if (atomic_load(&g_stop))
                break;
        }
        if (st != OTE_OK) {
            if (st != OTE_ERR_BUSY)
                t->errors++;
            ote_batch_release(b);
            continue;
        }
        if (g_flood) {
            t->tasks += g_batch; /* submitted; completion is not waited for */
            ote_batch_release(b);
            continue;
        }
        if (count == g_window) {
            reap(t, ring[head]);
            head = (head + 1) % g_window;
            count--;
        }
        ring[(head + count) % g_window] = b;
        count++;
    }
    while (count > 0) {
        reap(t, ring[head]);
        head = (head + 1) % g_window;
        count--;
    }
    free(r);
    free(ring);
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = 1;
    ote_mem_h ml, mr;
    ote_mem_desc_t d;
    pthread_t th[64];
    thr_t t[64];
    unsigned long tasks = 0, busy = 0, errors = 0;
    double t0, c0, dt, dc;
    long rss0;

    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "0";

        if (strcmp(argv[i], "--threads") == 0)
            nthreads = atoi(v), i++;
        else if (strcmp(argv[i], "--batch") == 0)
            g_batch = strtoul(v, NULL, 0), i++;
        else if (strcmp(argv[i], "--window") == 0)
            g_window = strtoul(v, NULL, 0), i++;
        else if (strcmp(argv[i], "--size") == 0)
            g_size = strtoul(v, NULL, 0), i++;
        else if (strcmp(argv[i], "--seconds") == 0)
            g_seconds = atof(v), i++;
        else if (strcmp(argv[i], "--flood") == 0)
            g_flood = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--batch B] [--window W] [--size BYTES] "
                            "[--seconds S] [--flood]\n", argv[0]);
            return 2;
        }
    }
    if (nthreads < 1 || nthreads > 64 || g_batch == 0 || g_window == 0 || g_size == 0 ||
        g_size > AREA / 2) {
        fprintf(stderr, "bench_load: bad arguments\n");
        return 2;
    }
    {
        ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
        ote_status_t st       = ote_engine_create(&p, &g_e);

        if (st != OTE_OK) {
            fprintf(stderr, "engine: %s\n", ote_status_string(st));
            return 1;
        }
    }
    g_remote = mmap(NULL, AREA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_remote == MAP_FAILED)
        return 1;
    memset(g_remote, 0, AREA);
    d = (ote_mem_desc_t){.addr = g_remote, .length = AREA,
                         .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    if (ote_mem_register(g_e, &d, 1, &mr) != OTE_OK ||
        ote_mem_alloc(g_e, AREA, NULL, 0, (void **)&g_local, &ml) != OTE_OK ||
        ote_segment_open(g_e, ote_engine_name(g_e), &g_seg) != OTE_OK) {
        fprintf(stderr, "bench_load: setup failed\n");
        return 1;
    }
    memset(g_local, 0x5a, AREA);
    rss0 = vm_kib("VmRSS:");
    t0 = now_s();
    c0 = cpu_s();
    for (int i = 0; i < nthreads; i++) {
        t[i] = (thr_t){.index = i};
        pthread_create(&th[i], NULL, submitter, &t[i]);
    }
    usleep((useconds_t)(g_seconds * 1e6));
    atomic_store(&g_stop, true);
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        tasks += t[i].tasks;
        busy += t[i].busy;
        errors += t[i].errors;
    }
    dt = now_s() - t0;
    dc = cpu_s() - c0;
    printf("threads %d batch %zu window %zu size %zu%s: %lu tasks in %.2f s = %.0f tasks/s, "
           "%.2f CPU-s per million tasks, %lu BUSY, %lu errors, VmRSS before %ld KiB, "
           "VmHWM %ld KiB\n",
           nthreads, g_batch, g_window, g_size, g_flood ? " flood (submitted)" : "", tasks, dt,
           (double)tasks / dt, tasks ? dc / (double)tasks * 1e6 : 0.0, busy, errors, rss0,
           vm_kib("VmHWM:"));
    ote_segment_close(g_seg);
    ote_mem_free(g_e, ml);
    ote_mem_deregister(g_e, mr);
    ote_engine_destroy(g_e);
    munmap(g_remote, AREA);
    return errors ? 1 : 0;
}
