/* memcpy reference: block-sized copies cycling over src/dst of footprint bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
int main(int argc, char **argv)
{
    size_t bs = strtoull(argv[1], 0, 0), fp = strtoull(argv[2], 0, 0), total = strtoull(argv[3], 0, 0);
    char *s = mmap(0, fp, 3, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *d = mmap(0, fp, 3, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct timespec a, b;
    size_t off = 0, done = 0;
    memset(s, 1, fp); memset(d, 2, fp);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (; done < total; done += bs) {
        memcpy(d + off, s + off, bs);
        off = (off + bs * 7) % (fp - bs + 1) / bs * bs; /* scattered, like the KV blocks */
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.3f GB/s\n", total / ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9) / 1e9);
    return 0;
}
