/*
 * The clock and the statistics that ote_perftest and ote_scale both print,
 * how both wait for notifications and how both give up (perftest_stats.c):
 * one copy, linked into each tool.
 */
#ifndef OTE_TOOLS_PERFTEST_STATS_H
#define OTE_TOOLS_PERFTEST_STATS_H

#include <ote/ote.h>
#include <stddef.h>

/* CLOCK_MONOTONIC in seconds: the same clock in every process of the host. */
double now_s(void);
/* Statistics over n samples (perftest_percentile sorts v). */
double perftest_percentile(double *v, size_t n, double p);
double perftest_mean(const double *v, size_t n);

/* Sleep until e's event fd fires (a notification arrived) or timeout_ms pass. */
void engine_event_wait(ote_engine_h e, int timeout_ms);

/* The tool's name, the prefix of die()'s message (each tool defines it). */
extern const char tool_name[];
/* "<tool_name>: <message>" on stderr, then exit(1). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
