/*
 * ote_perftest's KV-cache pattern, the transfer of one request's KV cache
 * between a prefill and a decode engine: L layers of B blocks of S bytes,
 * each block at its own place in a pool on either side (the pools' block
 * slots are shuffled with a fixed seed), one batch per layer submitted as
 * the layer is ready. Columns as nixlbench prints them: block size, batch
 * size (blocks per layer), bandwidth, the request's latency (first submit
 * to last layer landed), and the time spent preparing (building a layer's
 * requests) and posting (the submit call) per layer.
 */
#include "perftest.h"

#include "base/pattern.h"

#include <stdlib.h>
#include <string.h>

#define KV_LOCAL_SEED 0x6b76ull
#define KV_WARMUP     2

size_t perftest_kv_local_len(void)
{
    /*
     * A pool twice the request's cache that its blocks are scattered over,
     * then room for reading them back (--check).
     */
    return 3 * opt.kv_layers * opt.kv_blocks * opt.sizes[0];
}

/* slots[0..n) = n distinct block slots of a pool of pool_slots, shuffled. */
static void kv_scatter(size_t *slots, size_t n, size_t pool_slots, uint64_t seed)
{
    size_t *all = malloc(pool_slots * sizeof(*all));
    uint64_t x  = seed | 1;

    if (all == NULL)
        die("out of memory");
    for (size_t i = 0; i < pool_slots; i++)
        all[i] = i;
    for (size_t i = 0; i < n; i++) {
        size_t j;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        j      = i + (size_t)(x % (pool_slots - i));
        slots[i] = all[j];
        all[j]   = all[i];
    }
    free(all);
}

/* Read the request's blocks back into scratch and compare with what was written. */
static int kv_verify_write(ote_engine_h e, ote_segment_h seg, const ote_xfer_req_t *reqs,
                           size_t n, uint8_t *scratch)
{
    ote_xfer_req_t *back = calloc(n, sizeof(*back));
    ote_batch_h b;
    size_t first;
    int rc = 0;

    if (back == NULL)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        back[i]            = reqs[i];
        back[i].op         = OTE_OP_READ;
        back[i].local_addr = scratch + i * reqs[i].length;
    }
    if (ote_batch_create(e, n, &b) != OTE_OK || ote_batch_submit(b, back, n, &first) != OTE_OK ||
        ote_batch_wait(b, 60000) != OTE_OK)
        die("reading the KV blocks back failed");
    for (size_t i = 0; i < n && rc == 0; i++) {
        ote_task_status_t ts;

        ote_batch_task_status(b, first + i, &ts);
        if (ts.state != OTE_TASK_COMPLETED ||
            memcmp(scratch + i * reqs[i].length, reqs[i].local_addr, reqs[i].length) != 0) {
            fprintf(stderr, "ote_perftest: KV block %zu differs at the peer\n", i);
            rc = 1;
        }
    }
    ote_batch_release(b);
    free(back);
    return rc;
}

int perftest_kv_run(ote_engine_h e, ote_segment_h seg, const ote_region_info_t *region,
                    uint8_t *local, size_t local_len, FILE *json)
{
    size_t S = opt.sizes[0], L = opt.kv_layers, B = opt.kv_blocks, n = L * B;
    size_t remote_slots = region->length / S, local_slots = 2 * n;
    long requests = opt.iters > 0 ? opt.iters : 20;
    ote_op_t op   = opt.test == T_KV_WRITE ? OTE_OP_WRITE : OTE_OP_READ;
    size_t *rslot = malloc(n * sizeof(*rslot)), *lslot = malloc(n * sizeof(*lslot));
    ote_xfer_req_t *reqs = calloc(n, sizeof(*reqs));
    ote_batch_h *batches = calloc(L, sizeof(*batches));
    double *lat = calloc((size_t)requests, sizeof(double));
    double *prep = calloc((size_t)requests * L, sizeof(double));
    double *post = calloc((size_t)requests * L, sizeof(double));
    double total = 0;
    int rc = 0;

    if (!rslot || !lslot || !reqs || !batches || !lat || !prep || !post)
        die("out of memory");
    if (local_len < 3 * n * S)
        die("KV pattern: %zu local bytes, %zu needed", local_len, 3 * n * S);
    if (n > remote_slots)
        die("--kv %zu:%zu of %zu bytes needs %zu bytes at the peer; its region has %zu", L, B, S,
            n * S, (size_t)region->length);
    kv_scatter(rslot, n, remote_slots, 0x9e3779b97f4a7c15ull + S);
    kv_scatter(lslot, n, local_slots, 0xbf58476d1ce4e5b9ull + S);
    if (op == OTE_OP_WRITE)
        ote_pattern_fill(local, 0, local_slots * S, KV_LOCAL_SEED);
    if (!opt.quiet) {
        printf("# ote_perftest %s to %s: %zu layers x %zu blocks of %zu bytes (%.1f MiB per "
               "request), %ld requests%s\n",
               test_names[opt.test], opt.peer, L, B, S, (double)(n * S) / 1048576.0, requests,
               opt.check ? ", verifying every byte" : "");
        printf("# %10s %8s %10s %12s %12s %12s %12s %12s\n", "block_size", "batch", "GB/s",
               "avg_lat_us", "p99_lat_us", "avg_prep_us", "avg_post_us", "p99_post_us");
    }
    for (long r = -KV_WARMUP; r < requests && rc == 0; r++) {
        double t0 = now_s(), t1;

        for (size_t l = 0; l < L; l++) {
            ote_xfer_req_t *lr = &reqs[l * B];
            double a = now_s(), c;
            size_t first;
            ote_status_t st;

            for (size_t k = 0; k < B; k++) {
                size_t i = l * B + k;

                lr[k] = (ote_xfer_req_t){.op = op, .local_addr = local + lslot[i] * S,
                                         .segment = seg,
                                         .remote_addr = region->addr + rslot[i] * S,
                                         .length = S};
            }
            c  = now_s();
            st = ote_batch_create(e, B, &batches[l]);
            if (st == OTE_OK)
                st = ote_batch_submit(batches[l], lr, B, &first);
            if (st != OTE_OK)
                die("layer %zu: %s", l, ote_status_string(st));
            if (r >= 0) {
                prep[(size_t)r * L + l] = c - a;
                post[(size_t)r * L + l] = now_s() - c;
            }
        }
        for (size_t l = 0; l < L; l++) {
            ote_task_status_t ts;

            if (ote_batch_wait(batches[l], 60000) != OTE_OK)
                die("layer %zu did not complete within 60 s", l);
            ote_batch_status(batches[l], &ts);
            if (ts.state != OTE_TASK_COMPLETED) {
                fprintf(stderr, "ote_perftest: layer %zu: %s\n", l, ote_status_string(ts.error));
                rc = 1;
            }
        }
        t1 = now_s();
        for (size_t l = 0; l < L; l++)
            ote_batch_release(batches[l]);
        if (r >= 0) {
            lat[r] = t1 - t0;
            total += t1 - t0;
        }
        if (rc == 0 && opt.check && r == requests - 1) {
            if (op == OTE_OP_WRITE) {
                /* Read back into the room after the pool. */
                rc = kv_verify_write(e, seg, reqs, n, local + local_slots * S);
            } else {
                for (size_t i = 0; i < n && rc == 0; i++) {
                    if (ote_pattern_check(local + lslot[i] * S, rslot[i] * S, S, TARGET_SEED) >= 0) {
                        fprintf(stderr, "ote_perftest: KV block %zu read wrong bytes\n", i);
                        rc = 1;
                    }
                }
            }
        }
    }
    if (rc == 0) {
        double gbps = (double)(n * S) * (double)requests / total / 1e9;
        double avg_lat = perftest_mean(lat, (size_t)requests), avg_prep = perftest_mean(prep, (size_t)requests * L);
        double avg_post = perftest_mean(post, (size_t)requests * L);
        double p99_lat  = perftest_percentile(lat, (size_t)requests, 0.99);
        double p99_post = perftest_percentile(post, (size_t)requests * L, 0.99);

        printf("  %10zu %8zu %10.3f %12.1f %12.1f %12.2f %12.2f %12.2f\n", S, B, gbps,
               avg_lat * 1e6, p99_lat * 1e6, avg_prep * 1e6, avg_post * 1e6, p99_post * 1e6);
        if (json != NULL)
            fprintf(json,
                    "{\"type\":\"kv_result\",\"schema\":%d,\"test\":\"%s\","
                    "\"block_size\":%zu,\"batch\":%zu,\"layers\":%zu,"
                    "\"requests\":%ld,\"gbps\":%.4f,\"lat_avg_us\":%.3f,\"lat_p99_us\":%.3f,"
                    "\"prep_avg_us\":%.3f,\"post_avg_us\":%.3f,\"post_p99_us\":%.3f,"
                    "\"checked\":%s}\n",
                    PERFTEST_JSON_SCHEMA, test_names[opt.test], S, B, L, requests, gbps,
                    avg_lat * 1e6, p99_lat * 1e6, avg_prep * 1e6, avg_post * 1e6,
                    p99_post * 1e6, opt.check ? "true" : "false");
    }
    free(rslot);
    free(lslot);
    free(reqs);
    free(batches);
    free(lat);
    free(prep);
    free(post);
    return rc;
}
