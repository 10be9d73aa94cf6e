/* Reference: single-thread memcpy bandwidth between two 256 MiB buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    size_t len = (argc > 1 ? strtoull(argv[1], NULL, 0) : 256) << 20;
    int reps   = argc > 2 ? atoi(argv[2]) : 10;
    char *a = malloc(len), *b = malloc(len);
    struct timespec t0, t1;
    double s;

    if (a == NULL || b == NULL)
        return 1;
    memset(a, 1, len);
    memset(b, 2, len);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < reps; i++)
        memcpy(i % 2 ? a : b, i % 2 ? b : a, len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("memcpy %zu MiB x %d: %.2f GB/s\n", len >> 20, reps, (double)len * reps / s / 1e9);
    return a[0] == 3; /* keep the copies */
}
