/*
 * Memory-layer microbenchmark (not a test: it prints numbers, asserts
 * nothing about time).
 *
 *  - lookup: ote_mem_region_acquire + put of a random 4 KiB range inside a
 *    random region, with 10, 1,000 and 100,000 regions in the table;
 *  - registration: 10,000 distinct 64 KiB regions of real memory, one
 *    ote_mem_table_register call each (location detected), then
 *    deregistration; then the same 10,000 registered again with the
 *    registration cache on and off.
 *
 * The memory domain is a stand-in whose mem_reg spins --md-cost-us
 * microseconds (0: free), so that the numbers show the table's own cost
 * and what the cache saves when registration is expensive.
 *
 * Usage: bench_mem [--md-cost-us N] [--lookups N] [--threads N]
 */
#include "mem/mem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static long md_cost_ns;
static long md_regs;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ote_status_t spin_mem_reg(ote_md_t *md, void *addr, size_t length, unsigned access,
                                 void **memh_p)
{
    double until = now_s() + (double)md_cost_ns * 1e-9;

    while (md_cost_ns > 0 && now_s() < until)
        ;
    __atomic_fetch_add(&md_regs, 1, __ATOMIC_RELAXED);
    *memh_p = addr != NULL ? addr : (void *)1;
    return OTE_OK;
}

static void spin_mem_dereg(ote_md_t *md, void *memh)
{
}

static const ote_md_ops_t spin_ops = {.mem_reg   = spin_mem_reg,
                                      .mem_dereg = spin_mem_dereg,
                                      .rkey_pack = ote_md_unsupported_rkey_pack};
static ote_md_t spin_md = {.name = "spin", .ops = &spin_ops, .mem_types = OTE_MEM_TYPE_HOST};

static void die(const char *what, ote_status_t st)
{
    fprintf(stderr, "bench_mem: %s: %s\n", what, ote_status_string(st));
    exit(1);
}

static ote_mem_table_t *table_new(bool rcache)
{
    ote_mem_table_params_t p = {.rcache_enable      = rcache,
                                .rcache_max_size    = SIZE_MAX,
                                .rcache_max_regions = 65536};
    ote_mem_table_t *t;
    ote_status_t st;

    st = ote_mem_table_create(&p, &t);
    if (st != OTE_OK)
        die("table", st);
    st = ote_mem_table_add_md(t, &spin_md);
    if (st != OTE_OK)
        die("add md", st);
    return t;
}

/* ---- lookups ------------------------------------------------------------ */

#define LOOKUP_BASE   0x200000000000ull
#define LOOKUP_REGION (64u << 10)
#define LOOKUP_STRIDE (128u << 10)

typedef struct {
    ote_mem_table_t *table;
    size_t           nregions;
    long             lookups;
    uint64_t         seed;
    double           seconds;
    long             failed;
} lookup_arg_t;

static void *lookup_run(void *p)
{
    lookup_arg_t *a = p;
    uint64_t x      = a->seed;
    double t0       = now_s();

    for (long i = 0; i < a->lookups; i++) {
        ote_region_t *r;
        uint64_t addr;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        addr = LOOKUP_BASE + (x % a->nregions) * LOOKUP_STRIDE +
               ((x >> 40) % (LOOKUP_REGION / 4096)) * 4096;
        if (ote_mem_region_acquire(a->table, addr, 4096, OTE_ACCESS_REMOTE_WRITE, &r) != OTE_OK) {
            a->failed++;
            continue;
        }
        ote_mem_region_put(r);
    }
    a->seconds = now_s() - t0;
    return NULL;
}

static void bench_lookup(size_t nregions, long lookups, int threads)
{
    ote_mem_table_t *t = table_new(true);
    enum { CHUNK = 1000 };
    ote_mem_desc_t d[CHUNK];
    ote_region_t *r[CHUNK];
    lookup_arg_t args[16];
    pthread_t th[16];
    double ns1, nsn = 0;

    for (size_t i = 0; i < nregions; i += CHUNK) {
        size_t n = nregions - i < CHUNK ? nregions - i : CHUNK;
        ote_status_t st;

        for (size_t k = 0; k < n; k++)
            d[k] = (ote_mem_desc_t){.addr     = (void *)(uintptr_t)(LOOKUP_BASE +
                                                                   (i + k) * LOOKUP_STRIDE),
                                    .length   = LOOKUP_REGION,
                                    .location = "cpu:0",
                                    .access   = OTE_ACCESS_REMOTE_WRITE};
        st = ote_mem_table_register(t, d, n, r);
        if (st != OTE_OK)
            die("register", st);
    }
    /* Warm up, then one thread alone. */
    args[0] = (lookup_arg_t){.table = t, .nregions = nregions, .lookups = lookups / 10,
                             .seed = 88172645463325252ull};
    lookup_run(&args[0]);
    args[0].lookups = lookups;
    lookup_run(&args[0]);
    ns1 = args[0].seconds * 1e9 / (double)lookups;
    if (args[0].failed)
        fprintf(stderr, "bench_mem: %ld lookups failed\n", args[0].failed);
    /* Several threads at once: read-mostly scaling. */
    if (threads > 1) {
        for (int k = 0; k < threads; k++) {
            args[k] = (lookup_arg_t){.table = t, .nregions = nregions, .lookups = lookups,
                                     .seed = 88172645463325252ull + (uint64_t)k * 7919};
            pthread_create(&th[k], NULL, lookup_run, &args[k]);
        }
        for (int k = 0; k < threads; k++) {
            pthread_join(th[k], NULL);
            nsn += args[k].seconds * 1e9 / (double)lookups;
        }
        nsn /= threads;
    }
    if (threads > 1)
        printf("lookup   %8zu regions   %8.1f ns/lookup   %8.1f ns/lookup with %d threads\n",
               nregions, ns1, nsn, threads);
    else
        printf("lookup   %8zu regions   %8.1f ns/lookup\n", nregions, ns1);
    ote_mem_table_destroy(t);
}

/* ---- registration ------------------------------------------------------- */

#define REG_COUNT  10000
#define REG_LENGTH (64u << 10)

static double register_all(ote_mem_table_t *t, char *buf, ote_region_t **r)
{
    double t0 = now_s();

    for (size_t i = 0; i < REG_COUNT; i++) {
        ote_mem_desc_t d = {.addr   = buf + i * REG_LENGTH,
                            .length = REG_LENGTH,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
        ote_status_t st  = ote_mem_table_register(t, &d, 1, &r[i]);

        if (st != OTE_OK)
            die("register", st);
    }
    return now_s() - t0;
}

static double deregister_all(ote_mem_table_t *t, ote_region_t **r)
{
    double t0 = now_s();

    for (size_t i = 0; i < REG_COUNT; i++) {
        ote_status_t st = ote_mem_table_deregister(t, r[i]);

        if (st != OTE_OK)
            die("deregister", st);
    }
    return now_s() - t0;
}

static void bench_register(bool rcache)
{
    size_t len = (size_t)REG_COUNT * REG_LENGTH;
    char *buf  = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ote_region_t **r = calloc(REG_COUNT, sizeof(*r));
    ote_mem_table_t *t;
    ote_mem_rcache_stats_t s;
    double first, dereg1, again, dereg2;
    long regs0;

    if (buf == MAP_FAILED || r == NULL) {
        fprintf(stderr, "bench_mem: out of memory\n");
        exit(1);
    }
    t      = table_new(rcache);
    regs0  = md_regs;
    first  = register_all(t, buf, r);
    dereg1 = deregister_all(t, r);
    again  = register_all(t, buf, r);
    dereg2 = deregister_all(t, r);
    ote_mem_table_rcache_stats(t, &s);
    printf("register %s  10000 x 64 KiB distinct: %9.0f regions/s   deregister %9.0f/s\n",
           rcache ? "cache on " : "cache off", REG_COUNT / first, REG_COUNT / dereg1);
    printf("register %s  same 10000 again:      %9.0f regions/s   deregister %9.0f/s"
           "   (md registrations %ld, cache hits %llu)\n",
           rcache ? "cache on " : "cache off", REG_COUNT / again, REG_COUNT / dereg2,
           md_regs - regs0, (unsigned long long)s.hits);
    ote_mem_table_destroy(t);
    munmap(buf, len);
    free(r);
}

int main(int argc, char **argv)
{
    long lookups = 2000000;
    int threads  = 2;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--md-cost-us") == 0 && i + 1 < argc) {
            md_cost_ns = atol(argv[++i]) * 1000;
        } else if (strcmp(argv[i], "--lookups") == 0 && i + 1 < argc) {
            lookups = atol(argv[++i]);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--md-cost-us N] [--lookups N] [--threads N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (lookups < 10 || threads < 1 || threads > 16) {
        fprintf(stderr, "bench_mem: --lookups >= 10, 1 <= --threads <= 16\n");
        return 2;
    }
    printf("# bench_mem: md mem_reg cost %ld us, %ld lookups per size\n", md_cost_ns / 1000,
           lookups);
    bench_lookup(10, lookups, threads);
    bench_lookup(1000, lookups, threads);
    bench_lookup(100000, lookups, threads);
    bench_register(true);
    bench_register(false);
    return 0;
}
