/*
 * ote_perftest's report: the table's header and rows, the same rows as
 * JSON and the bytes per rail at the end of a run (the statistics they
 * print are perftest_stats.c's).
 */
#include "perftest.h"

void perftest_report_header(const char *peer)
{
    printf("# ote_perftest %s to %s, %d thread(s), depth %d%s\n", test_names[opt.test], peer,
           opt.threads, opt.depth, opt.check ? ", verifying every byte" : "");
    printf("# %12s %8s %10s %12s %12s %12s %12s\n", "size", "batch", "GB/s", "lat_avg_us",
           "lat_p50_us", "lat_p99_us", "msg/s");
}

void perftest_report_row(size_t size, long rounds, double elapsed, double *lat, FILE *json)
{
    double bytes = (double)rounds * (double)size * (double)opt.batch;
    double gbps  = bytes / elapsed / 1e9;
    double msgs  = (double)rounds * (double)opt.batch / elapsed;
    double avg   = perftest_mean(lat, (size_t)rounds);
    double p50   = perftest_percentile(lat, (size_t)rounds, 0.5);
    double p99   = perftest_percentile(lat, (size_t)rounds, 0.99);

    printf("  %12zu %8zu %10.3f %12.2f %12.2f %12.2f %12.0f\n", size, opt.batch, gbps, avg * 1e6,
           p50 * 1e6, p99 * 1e6, msgs);
    fflush(stdout);
    if (json) {
        fprintf(json,
                "{\"type\":\"result\",\"schema\":%d,\"test\":\"%s\",\"size\":%zu,"
                "\"batch\":%zu,\"threads\":%d,\"depth\":%d,\"bytes\":%.0f,"
                "\"seconds\":%.6f,\"gbps\":%.4f,\"lat_avg_us\":%.3f,\"lat_p50_us\":%.3f,"
                "\"lat_p99_us\":%.3f,\"msg_per_s\":%.0f,\"checked\":%s}\n",
                PERFTEST_JSON_SCHEMA, test_names[opt.test], size, opt.batch, opt.threads,
                opt.depth, bytes, elapsed, gbps, avg * 1e6, p50 * 1e6, p99 * 1e6, msgs,
                opt.check ? "true" : "false");
        fflush(json);
    }
}

void perftest_report_rails(ote_segment_h seg, FILE *json)
{
    static const char *const states[] = {"active", "cooling", "probing", "closed"};
    ote_rail_info_t rails[16];
    size_t nrails = 0;

    if (ote_segment_rails(seg, rails, 16, &nrails) != OTE_OK)
        return;
    if (nrails > 16)
        nrails = 16;
    printf("# rail transport/device        bytes     slices  retries   errors  state    "
           "est. MB/s\n");
    for (size_t i = 0; i < nrails; i++) {
        char name[100];

        snprintf(name, sizeof(name), "%.31s/%.63s", rails[i].transport, rails[i].device);
        printf("# %4zu %-20s %12llu %9llu %8llu %8llu  %-8s %9.1f\n", i, name,
               (unsigned long long)rails[i].bytes, (unsigned long long)rails[i].slices,
               (unsigned long long)rails[i].retries, (unsigned long long)rails[i].errors,
               states[rails[i].state & 3], rails[i].bandwidth / 1e6);
    }
    if (json == NULL)
        return;
    /* One object per rail, after the rows (names come from the engine, not the peer's bytes). */
    for (size_t i = 0; i < nrails; i++)
        fprintf(json,
                "{\"type\":\"rail\",\"schema\":%d,\"rail\":%zu,\"transport\":\"%.31s\","
                "\"device\":\"%.63s\",\"bytes\":%llu,\"slices\":%llu,\"retries\":%llu,"
                "\"errors\":%llu,\"state\":\"%s\",\"bandwidth_mbps\":%.1f}\n",
                PERFTEST_JSON_SCHEMA, i, rails[i].transport, rails[i].device,
                (unsigned long long)rails[i].bytes, (unsigned long long)rails[i].slices,
                (unsigned long long)rails[i].retries, (unsigned long long)rails[i].errors,
                states[rails[i].state & 3], rails[i].bandwidth / 1e6);
}
