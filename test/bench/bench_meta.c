/*
 * Metadata stores: segment open time and name registration / look-up rate.
 *
 *  open:   an engine opens (and closes) another engine of this process by
 *          name --opens times, through --metadata (p2p, etcd://, redis://);
 *          prints the mean and median time of one open.
 *  names:  (etcd:// and redis:// only) --threads threads stand in for
 *          --names engines: each registers its share of the names (connect,
 *          claim the name with a real engine's descriptor, keepalive thread
 *          started, as ote_engine_create does), then every thread looks
 *          up random names (read, MAC-free record check, descriptor decode)
 *          for --seconds. Prints registrations and look-ups per second.
 *
 *   bench_meta --metadata URI [--opens N] [--names N] [--threads T] [--seconds S]
 */
#include <ote/ote.h>

#include "core/wire/desc.h"
#include "core/meta/meta.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Library-internal, exported with the ote_ symbols. */
ote_status_t ote_engine_desc_encode(ote_engine_h engine, ote_buf_t *out);

static const char *uri = "p2p";
static long opens = 200, names = 1000, threads = 16, seconds = 5;
static ote_engine_h desc_engine;
static ote_meta_t **metas;
static atomic_long lookups;
static atomic_bool stop;

static double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static ote_engine_h engine(const char *name)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0", .metadata = uri,
                             .name = strcmp(uri, "p2p") ? name : NULL};
    ote_engine_h e = NULL;
    ote_status_t st = ote_engine_create(&p, &e);

    if (st != OTE_OK) {
        fprintf(stderr, "engine '%s' on %s: %s\n", name, uri, ote_status_string(st));
        exit(1);
    }
    return e;
}

static void bench_open(void)
{
    ote_engine_h a = engine("bench-target"), b = engine("bench-opener");
    double *t = calloc((size_t)opens, sizeof(*t)), sum = 0;
    void *buf;
    ote_mem_h mem;

    ote_mem_alloc(a, 1 << 20, NULL, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, &buf, &mem);
    for (long i = -10; i < opens; i++) {
        ote_segment_h seg;
        double t0 = now_s();
        ote_status_t st = ote_segment_open(b, ote_engine_name(a), &seg);

        if (st != OTE_OK) {
            fprintf(stderr, "open: %s\n", ote_status_string(st));
            exit(1);
        }
        if (i >= 0) /* the first ten warm connections and caches */
            sum += t[i] = now_s() - t0;
        ote_segment_close(seg);
    }
    qsort(t, (size_t)opens, sizeof(*t), cmp_double);
    printf("open %-28s %ld opens: mean %.0f us, median %.0f us\n", uri, opens,
           sum / (double)opens * 1e6, t[opens / 2] * 1e6);
    free(t);
    ote_mem_free(a, mem);
    ote_engine_destroy(b);
    ote_engine_destroy(a);
}

/* A real engine's descriptor, renamed: magic, version, flags, instance, then the name. */
static ote_buf_t base_desc;

static ote_status_t desc_cb(void *arg, ote_buf_t *out)
{
    const char *name = arg;
    size_t old       = base_desc.data[16];

    ote_buf_put(out, base_desc.data, 16);
    ote_buf_put_str8(out, name);
    ote_buf_put(out, base_desc.data + 17 + old, base_desc.len - 17 - old);
    return out->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

static char (*name_of)[64];
static char prefix[64]; /* per run: a run that died leaves keys behind for their TTL */

static ote_meta_params_t meta_params(const char *name)
{
    return (ote_meta_params_t){.uri = uri, .name = name, .prefix = prefix,
                               .ttl_s = 30, .timeout_ms = 5000, .desc_cb = name ? desc_cb : NULL,
                               .desc_arg = (void *)name};
}

static void *register_thread(void *arg)
{
    long k = (long)(intptr_t)arg;

    for (long i = k; i < names; i += threads) {
        char *name = name_of[i];
        ote_meta_params_t p;
        ote_status_t st;

        snprintf(name, 64, "engine-%ld", i);
        p  = meta_params(name);
        st = ote_meta_create(&p, &metas[i]);
        if (st != OTE_OK) {
            fprintf(stderr, "register %s: %s\n", name, ote_status_string(st));
            exit(1);
        }
    }
    return NULL;
}

static void *lookup_thread(void *arg)
{
    ote_meta_params_t p = meta_params(NULL);
    uint64_t x = 0x9e3779b97f4a7c15ull * ((uint64_t)(uintptr_t)arg + 1);
    ote_meta_t *m;

    if (ote_meta_create(&p, &m) != OTE_OK)
        exit(1);
    while (!atomic_load(&stop)) {
        char name[64];
        ote_desc_t *d;

        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        snprintf(name, sizeof(name), "engine-%ld", (long)(x % (uint64_t)names));
        if (ote_meta_lookup(m, name, &d) != OTE_OK) {
            fprintf(stderr, "lookup %s failed\n", name);
            exit(1);
        }
        ote_desc_free(d);
        atomic_fetch_add(&lookups, 1);
    }
    ote_meta_destroy(m);
    return NULL;
}

static void bench_names(void)
{
    pthread_t *th = calloc((size_t)threads, sizeof(*th));
    ote_buf_t desc = {0};
    double t0, reg, look;

    name_of = calloc((size_t)names, sizeof(*name_of));
    void *buf;
    ote_mem_h mem;

    desc_engine = engine("bench-desc");
    ote_mem_alloc(desc_engine, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, &buf, &mem);
    ote_engine_desc_encode(desc_engine, &desc);
    base_desc = desc;
    metas = calloc((size_t)names, sizeof(*metas));
    t0    = now_s();
    for (long k = 0; k < threads; k++)
        pthread_create(&th[k], NULL, register_thread, (void *)(intptr_t)k);
    for (long k = 0; k < threads; k++)
        pthread_join(th[k], NULL);
    reg = now_s() - t0;
    t0  = now_s();
    for (long k = 0; k < threads; k++)
        pthread_create(&th[k], NULL, lookup_thread, (void *)(intptr_t)k);
    while (now_s() - t0 < (double)seconds)
        nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    atomic_store(&stop, true);
    for (long k = 0; k < threads; k++)
        pthread_join(th[k], NULL);
    look = now_s() - t0;
    printf("names %-27s %ld names, %ld threads, descriptor %zu bytes: %.0f registrations/s, "
           "%.0f look-ups/s\n", uri, names, threads, desc.len, (double)names / reg,
           (double)atomic_load(&lookups) / look);
    t0 = now_s();
    for (long i = 0; i < names; i++)
        ote_meta_destroy(metas[i]);
    printf("names %-27s %ld names deleted in %.2f s\n", uri, names, now_s() - t0);
    free(desc.data);
    free(metas);
    free(name_of);
    free(th);
    ote_mem_free(desc_engine, mem);
    ote_engine_destroy(desc_engine);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--metadata") == 0)
            uri = argv[i + 1];
        else if (strcmp(argv[i], "--opens") == 0)
            opens = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--names") == 0)
            names = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atol(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_meta --metadata URI [--opens N] [--names N] "
                            "[--threads T] [--seconds S]\n");
            return 2;
        }
    }
    snprintf(prefix, sizeof(prefix), "orbitte-bench/%ld/", (long)getpid());
    if (opens < 1 || names < 1 || threads < 1 || seconds < 1)
        return 2;
    bench_open();
    if (strcmp(uri, "p2p") != 0)
        bench_names();
    return 0;
}
