/*
 * ote_perftest's parts: the options every part reads, and what they share
 * (perftest_params.c: options, defaults, usage; ote_perftest.c: the
 * target and the bandwidth and latency tests; perftest_kv.c: the KV-cache
 * pattern; perftest_report.c: the table, JSON rows and bytes per rail;
 * perftest_stats.c: the clock and statistics, which ote_scale shares).
 */
#ifndef OTE_TOOLS_PERFTEST_H
#define OTE_TOOLS_PERFTEST_H

#include "perftest_stats.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MAX_SIZES 32

typedef enum { T_WRITE_BW, T_READ_BW, T_WRITE_LAT, T_READ_LAT, T_KV_WRITE, T_KV_READ } test_t;
#define NUM_TESTS 6

extern const char *const test_names[NUM_TESTS];

typedef struct {
    test_t      test;
    size_t      sizes[MAX_SIZES];
    size_t      num_sizes;
    size_t      batch;
    long        iters;
    int         threads;
    int         depth;
    const char *local_mem;
    const char *remote_mem;
    const char *tls;
    const char *listen;
    const char *json;
    const char *peer;
    size_t      region;
    bool        check;
    bool        loopback;
    bool        quiet;
    bool        use_malloc; /* --malloc: memory from the heap, registered */
    size_t      kv_layers; /* kv_*: layers per request     */
    size_t      kv_blocks; /* kv_*: blocks per layer       */
} opts_t;

extern opts_t opt;

/* Seed of the pattern the target fills its region with, which READs check. */
#define TARGET_SEED 0x5eed

/*
 * --json: one object a line, each with "type" ("result", "kv_result" or
 * "rail") and "schema", this number; the fields of each type are listed in
 * docs/performance.md ("ote_perftest --json"), which a test holds the
 * records to. A field changed or removed takes a new number.
 */
#define PERFTEST_JSON_SCHEMA 1

/*
 * Memory for a test: from ote_mem_alloc, or with --malloc from the heap
 * (2 MiB aligned, huge pages asked for with MADV_HUGEPAGE, as ucx_perftest
 * asks for its buffers) and registered with ote_mem_register.
 * perftest_mem_put gives it back either way.
 */
void perftest_mem_get(ote_engine_h e, size_t len, unsigned access, void **buf_p, ote_mem_h *mem_p);
void perftest_mem_put(ote_engine_h e, void *buf, ote_mem_h mem);
/* Parse argv into opt: -1 to go on, else the exit code (--help, bad usage). */
int  perftest_parse(int argc, char **argv);
/* Dies unless memory type m is one this build has. */
void mem_check_location(const char *m);

/* The bandwidth and latency table: its header, one row per size, JSON too. */
void perftest_report_header(const char *peer);
void perftest_report_row(size_t size, long rounds, double elapsed, double *lat, FILE *json);
/* Bytes, slices, retries and errors per rail of seg over the run; in JSON too. */
void perftest_report_rails(ote_segment_h seg, FILE *json);

/*
 * The KV-cache pattern (kv_write, kv_read): a request's cache is
 * opt.kv_layers layers of opt.kv_blocks blocks of opt.sizes[0] bytes,
 * scattered over the peer's region (remote) and over local; one batch per
 * layer, submitted as the layers come, the request done when the last
 * layer landed. Prints one row; returns 0, or 1 on a failure.
 */
int perftest_kv_run(ote_engine_h e, ote_segment_h seg, const ote_region_info_t *region,
                    uint8_t *local, size_t local_len, FILE *json);
/* Local bytes the KV pattern needs. */
size_t perftest_kv_local_len(void);

#endif
