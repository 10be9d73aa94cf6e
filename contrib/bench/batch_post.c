/* The C side of nixl_post.py: the time of one ote_batch_submit() of COUNT
 * requests of SIZE bytes at shuffled slots (nothing contiguous), WRITE to a
 * second engine of this process, REPS times (each waited for and released
 * before the next). Prints one JSON line: post_ms_p50 / p10 / p90 (the
 * submit call alone) and batch_ms_p50 (ote_batch_create + submit, what a
 * binding's post pays), and exits 1 when the last transfer's bytes are wrong.
 * Build: cc -O2 -Iinclude -o batch_post contrib/bench/batch_post.c -L<build>/src/.libs -lote
 * Usage: batch_post [COUNT [SIZE [REPS]]]   (defaults 15000 4096 50) */
#include <ote/ote.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static ote_engine_h engine(void)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e;

    if (ote_engine_create(&p, &e) != OTE_OK)
        exit(2);
    return e;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 15000;
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 50;
    ote_engine_h ini = engine(), tgt = engine();
    uint8_t *src = malloc(2 * n * size), *dst = calloc(2 * n, size);
    size_t *slot = malloc(2 * n * sizeof(*slot));
    ote_xfer_req_t *reqs = calloc(n, sizeof(*reqs));
    double *post = calloc(reps, sizeof(double)), *whole = calloc(reps, sizeof(double));
    ote_mem_desc_t ds = {.addr = src, .length = 2 * n * size},
                   dd = {.addr = dst, .length = 2 * n * size,
                         .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    ote_mem_h ms, md;
    ote_segment_h seg;
    int bad = 0;

    if (!src || !dst || !slot || !reqs || !post || !whole || reps < 1)
        return 2;
    for (size_t i = 0; i < 2 * n * size; i++)
        src[i] = (uint8_t)(i * 131 + 7);
    if (ote_mem_register(ini, &ds, 1, &ms) != OTE_OK ||
        ote_mem_register(tgt, &dd, 1, &md) != OTE_OK ||
        ote_segment_open(ini, ote_engine_name(tgt), &seg) != OTE_OK)
        return 2;
    srand(1);
    for (size_t i = 0; i < 2 * n; i++)
        slot[i] = i;
    for (size_t i = 2 * n - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = slot[i];

        slot[i] = slot[j];
        slot[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        reqs[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = src + slot[i] * size,
                                   .segment = seg,
                                   .remote_addr = (uint64_t)(uintptr_t)(dst + slot[i] * size),
                                   .length = size};
    for (int r = -3; r < reps; r++) {
        ote_batch_h b;
        ote_task_status_t st;
        size_t first;
        double t0 = now_ms(), t1, t2;

        if (ote_batch_create(ini, n, &b) != OTE_OK)
            return 2;
        t1 = now_ms();
        if (ote_batch_submit(b, reqs, n, &first) != OTE_OK)
            return 2;
        t2 = now_ms();
        if (ote_batch_wait(b, 60000) != OTE_OK || ote_batch_status(b, &st) != OTE_OK ||
            st.state != OTE_TASK_COMPLETED)
            return 3;
        ote_batch_release(b);
        if (r >= 0) {
            post[r]  = t2 - t1;
            whole[r] = t2 - t0;
        }
    }
    for (size_t i = 0; i < n && !bad; i++)
        bad = memcmp(src + slot[i] * size, dst + slot[i] * size, size) != 0;
    qsort(post, reps, sizeof(double), cmp);
    qsort(whole, reps, sizeof(double), cmp);
    printf("{\"descs\": %zu, \"size\": %zu, \"reps\": %d, \"post_ms_p50\": %.3f, "
           "\"post_ms_p10\": %.3f, \"post_ms_p90\": %.3f, \"batch_ms_p50\": %.3f, "
           "\"data_ok\": %s}\n",
           n, size, reps, post[reps / 2], post[reps / 10], post[reps * 9 / 10], whole[reps / 2],
           bad ? "false" : "true");
    ote_segment_close(seg);
    ote_mem_deregister(ini, ms);
    ote_mem_deregister(tgt, md);
    ote_engine_destroy(ini);
    ote_engine_destroy(tgt);
    return bad;
}
