/*
 * The clock, the statistics, the notification wait and die() of the benchmark
 * tools (perftest_stats.h).
 */
#include "perftest_stats.h"

#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

/* The nearest-rank percentile: the smallest value with at least p of them at or below it. */
double perftest_percentile(double *v, size_t n, double p)
{
    double rank = ceil(p * (double)n);

    qsort(v, n, sizeof(*v), cmp_double);
    return v[rank < 1 ? 0 : rank > (double)n ? n - 1 : (size_t)rank - 1];
}

double perftest_mean(const double *v, size_t n)
{
    double sum = 0;

    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return sum / (double)n;
}

void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "%s: ", tool_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void engine_event_wait(ote_engine_h e, int timeout_ms)
{
    struct pollfd pfd = {.fd = ote_engine_event_fd(e), .events = POLLIN};
    uint64_t v;

    if (poll(&pfd, 1, timeout_ms) > 0)
        (void)!read(pfd.fd, &v, sizeof(v));
}
