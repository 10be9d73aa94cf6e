/* Reference for contrib/bench/run.sh: memcpy of the footprint of one
 * ote_perftest batch. Usage: memcpy_blocks SIZE COUNT THREADS SCATTER SECONDS
 * Each thread copies COUNT blocks of SIZE bytes from its own source pool to
 * its own destination pool, again and again for about SECONDS; with SCATTER
 * the blocks sit at shuffled slots of pools twice their footprint (the KV
 * pattern), otherwise back to back. Prints the aggregate GB/s (10^9 B/s). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct job {
    size_t size, count;
    int scatter;
    double seconds;
    unsigned long long bytes;
    double elapsed;
};

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void shuffle(size_t *slot, size_t n, unsigned *seed)
{
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rand_r(seed) % (i + 1), t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
}

static void *copy_loop(void *arg)
{
    struct job *j = arg;
    size_t slots = j->scatter ? 2 * j->count : j->count;
    char *src = malloc(slots * j->size), *dst = malloc(slots * j->size);
    size_t *from = malloc(slots * sizeof(*from)), *to = malloc(slots * sizeof(*to));
    unsigned seed = 1;
    double t0;

    if (src == NULL || dst == NULL || from == NULL || to == NULL)
        exit(1);
    memset(src, 1, slots * j->size);
    memset(dst, 2, slots * j->size);
    for (size_t i = 0; i < slots; i++)
        from[i] = to[i] = i;
    if (j->scatter) {
        shuffle(from, slots, &seed);
        shuffle(to, slots, &seed);
    }
    t0 = now();
    do {
        for (size_t i = 0; i < j->count; i++)
            memcpy(dst + to[i] * j->size, src + from[i] * j->size, j->size);
        j->bytes += j->size * j->count;
        j->elapsed = now() - t0;
    } while (j->elapsed < j->seconds);
    if (dst[to[0] * j->size] != 1) /* keep the copies */
        exit(1);
    free(src);
    free(dst);
    free(from);
    free(to);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads;
    struct job job[64];
    pthread_t tid[64];
    double gbps = 0;

    if (argc != 6) {
        fprintf(stderr, "usage: memcpy_blocks SIZE COUNT THREADS SCATTER SECONDS\n");
        return 2;
    }
    threads = atoi(argv[3]);
    if (threads < 1 || threads > 64)
        return 2;
    for (int i = 0; i < threads; i++) {
        job[i] = (struct job){ .size = strtoull(argv[1], NULL, 0),
                               .count = strtoull(argv[2], NULL, 0),
                               .scatter = atoi(argv[4]),
                               .seconds = atof(argv[5]) };
        pthread_create(&tid[i], NULL, copy_loop, &job[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        gbps += (double)job[i].bytes / job[i].elapsed / 1e9;
    }
    printf("%.3f\n", gbps);
    return 0;
}
