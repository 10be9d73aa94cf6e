/* The two lookups the regions curve of scale.sh times, for a cache
 * simulator: one engine of this process registers N adjacent 4 KiB regions
 * (as `ote_scale serve 1 N 4096`), then
 *   lookup: ote_mem_register of ranges it has (a lookup and a reference),
 *           the ranges and count ote_scale serve uses (1,000 below 10,000
 *           regions, else 10,000; region (i * 7919) % N);
 *   check:  opens its own segment (tcp loopback) and submits REPS batches
 *           of CHECKS 64 B WRITEs spread over every region (as `ote_scale
 *           regions`), after one warm-up batch that builds the segment's
 *           page index; the remote-range checks are ote_batch_peer_checks.
 * Outside valgrind the measured part only runs; under callgrind it is the
 * only part collected:
 *   valgrind --tool=callgrind --cache-sim=yes --collect-atstart=no \
 *     [--toggle-collect=ote_batch_peer_checks] ./regions_cg check|lookup N
 * (lookup toggles collection itself; check needs the --toggle-collect).
 * Exits 1 when a lookup found another region or a transfer failed.
 * Build: cc -O2 -g -Iinclude -o regions_cg contrib/bench/regions_cg.c -L<build>/src/.libs -lote
 * Usage: regions_cg check|lookup N [CHECKS [REPS]]   (defaults 4096 3) */
#include <ote/ote.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <valgrind/callgrind.h>

#define REGION 4096

static void die(const char *what, ote_status_t st)
{
    fprintf(stderr, "regions_cg: %s: %s\n", what, ote_status_string(st));
    exit(1);
}

static void batch(ote_engine_h e, const ote_xfer_req_t *reqs, size_t n)
{
    ote_batch_h b;
    size_t first;
    ote_task_status_t ts;
    ote_status_t st = ote_batch_create(e, n, &b);

    if (st == OTE_OK)
        st = ote_batch_submit(b, reqs, n, &first);
    if (st == OTE_OK)
        st = ote_batch_wait(b, 600000);
    if (st != OTE_OK)
        die("batch", st);
    for (size_t i = 0; i < n; i++) {
        st = ote_batch_task_status(b, first + i, &ts);
        if (st != OTE_OK || ts.state != OTE_TASK_COMPLETED)
            die("a task", st != OTE_OK ? st : ts.error);
    }
    ote_batch_release(b);
}

int main(int argc, char **argv)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 0;
    size_t m = argc > 3 ? strtoul(argv[3], NULL, 10) : 4096;
    size_t reps = argc > 4 ? strtoul(argv[4], NULL, 10) : 3;
    int check = argc > 1 && strcmp(argv[1], "check") == 0;
    ote_mem_h *mems = calloc(n ? n : 1, sizeof(*mems));
    uint8_t *buf = mmap(NULL, (n ? n : 1) * REGION, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ote_engine_h e;
    ote_status_t st;
    int bad = 0;

    if (argc < 3 || n == 0 || m == 0 || reps == 0 ||
        (!check && strcmp(argv[1], "lookup") != 0) || mems == NULL || buf == MAP_FAILED) {
        fprintf(stderr, "usage: regions_cg check|lookup N [CHECKS [REPS]]\n");
        return 2;
    }
    memset(buf, 0, n * REGION);
    st = ote_engine_create(&p, &e);
    if (st != OTE_OK)
        die("engine", st);
    for (size_t r = 0; r < n; r++) {
        ote_mem_desc_t d = {.addr = buf + r * REGION, .length = REGION,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};

        st = ote_mem_register(e, &d, 1, &mems[r]);
        if (st != OTE_OK)
            die("registering", st);
    }
    if (!check) {
        size_t lookups = n < 10000 ? (n > 1000 ? n : 1000) : 10000;
        ote_mem_h *h = calloc(lookups, sizeof(*h));

        CALLGRIND_TOGGLE_COLLECT;
        for (size_t i = 0; i < lookups; i++) {
            size_t r = (i * 7919) % n;
            ote_mem_desc_t d = {.addr = buf + r * REGION, .length = REGION,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};

            if (ote_mem_register(e, &d, 1, &h[i]) != OTE_OK)
                h[i] = NULL;
        }
        CALLGRIND_TOGGLE_COLLECT;
        for (size_t i = 0; i < lookups; i++) {
            bad |= h[i] != mems[(i * 7919) % n];
            if (h[i] != NULL)
                ote_mem_deregister(e, h[i]);
        }
        printf("lookups %zu over %zu regions%s\n", lookups, n, bad ? ": WRONG REGION" : "");
        free(h);
    } else {
        ote_xfer_req_t *reqs = calloc(m, sizeof(*reqs));
        uint8_t *local = calloc(m, 64);
        ote_mem_desc_t ld = {.addr = local, .length = m * 64};
        ote_mem_h lm;
        ote_segment_h seg;

        if (reqs == NULL || local == NULL)
            return 2;
        memset(local, 0x5a, m * 64);
        st = ote_mem_register(e, &ld, 1, &lm);
        if (st == OTE_OK)
            st = ote_segment_open(e, ote_engine_name(e), &seg);
        if (st != OTE_OK)
            die("segment", st);
        for (size_t i = 0; i < m; i++)
            reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = local + i * 64,
                                       .segment = seg,
                                       .remote_addr = (uint64_t)(uintptr_t)buf +
                                                      ((i * 7919) % n) * REGION + (i % 64) * 64,
                                       .length = 64};
        batch(e, reqs, m); /* connects, builds the page index */
        CALLGRIND_ZERO_STATS;
        for (size_t r = 0; r < reps; r++)
            batch(e, reqs, m);
        for (size_t i = 0; i < m; i++)
            bad |= buf[((i * 7919) % n) * REGION + (i % 64) * 64] != 0x5a;
        printf("checks %zu x %zu over %zu regions%s\n", reps, m, n, bad ? ": WRONG BYTES" : "");
        ote_segment_close(seg);
        ote_mem_deregister(e, lm);
        free(reqs);
        free(local);
    }
    ote_engine_destroy(e);
    munmap(buf, n * REGION);
    free(mems);
    return bad;
}
