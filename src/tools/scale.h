/*
 * ote_scale's parts (docs/performance.md, "Scale"): how OrbitTE's costs
 * grow with the requests of a batch, the regions of a target, the peers of
 * an initiator and the senders of notifications. ote_scale.c: options,
 * rows, child processes, /proc readings, the serving target; scale_curves.c:
 * the curves. Each curve prints CSV rows "curve,series,x,metric,value" on
 * stdout; contrib/bench/scale.sh runs rounds of them and takes medians.
 */
#ifndef OTE_TOOLS_SCALE_H
#define OTE_TOOLS_SCALE_H

#include "perftest_stats.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define SCALE_MAX_POINTS 32

typedef struct {
    size_t counts[SCALE_MAX_POINTS]; /* --counts: the x of the curve */
    size_t num_counts;
    size_t sizes[SCALE_MAX_POINTS];  /* --sizes: request sizes (requests curve) */
    size_t num_sizes;
    size_t per_peer;                 /* peers: 4 KiB WRITEs per peer in the batch */
    size_t messages;                 /* notify: notifications per curve point */
    size_t per_call[SCALE_MAX_POINTS]; /* notify: messages per send call (a series each) */
    size_t num_per_call;
    size_t checks;                   /* regions: requests of the range-check batch */
    double idle_s;                   /* peers: idle window for the CPU reading */
    size_t reps;                     /* requests/regions: batches per point (median) */
    char   listen_ip[64];            /* --listen: this process's engines (default 127.0.0.1) */
    char   target_netns[64];         /* --target-netns NS: children run there ("": here) */
    char   target_ip[64];            /* --target-ip: their engines' address (with the above) */
} scale_opts_t;

extern scale_opts_t sopt;

/*
 * A decimal number (a k or m suffix: KiB, MiB) of at least min; what names
 * it in the message of the death that anything else is.
 */
size_t scale_number(const char *s, size_t min, const char *what);

/* One CSV row on stdout. */
void scale_row(const char *curve, const char *series, size_t x, const char *metric, double v);

/* A child process of this program (ote_scale serve / notify-send), on pipes. */
typedef struct {
    pid_t pid;
    FILE *in;  /* its stdin: commands; closing it ends the child */
    FILE *out; /* its stdout: lines */
} scale_child_t;

/* Start `ote_scale ARGS...` (NULL-terminated); it dies with us. */
void scale_spawn(scale_child_t *c, const char *const *args);
/* The child's next line, without the newline; dies at its end. */
void scale_child_line(scale_child_t *c, char *line, size_t len);
/* Close its stdin and reap it; dies when it failed or had not ended within 10 s. */
void scale_child_end(scale_child_t *c);

/* /proc readings of process pid (0: this one). */
long   scale_proc_kib(pid_t pid, const char *field); /* "VmRSS:", "VmHWM:" */
long   scale_proc_fds(pid_t pid);
/* CPU time of its threads (/proc/PID/task/TID/schedstat, ns; else ticks of /proc/PID/stat). */
double scale_proc_cpu_s(pid_t pid);
/* Times its threads went to sleep (voluntary_ctxt_switches of /proc/PID/task/TID/status). */
double scale_proc_wakeups(pid_t pid);
/* Reset this process's VmHWM to its VmRSS (/proc/self/clear_refs "5"). */
bool   scale_peak_reset(void);

/*
 * A target: `ote_scale serve` with K engines, each with N regions of S
 * bytes; tgt->names[k] and tgt->addrs[k] (its first region) once ready.
 */
typedef struct {
    scale_child_t child;
    size_t        engines;
    char        (*names)[64];
    uint64_t     *addrs;
    double        register_s;       /* engine 0: N ote_mem_register calls */
    double        lookup_ns;        /* engine 0: one call on a registered range */
    size_t        lookup_hits;      /* of those, the calls that found the handle */
    size_t        desc_bytes_empty; /* engine 0's descriptor without regions */
    size_t        desc_bytes;       /* with its N regions */
} scale_target_t;

void scale_target_start(scale_target_t *t, size_t engines, size_t regions, size_t region_size);
void scale_target_stop(scale_target_t *t);

/* The serving side and the notification senders (child processes). */
int scale_serve_main(int argc, char **argv);
int scale_notify_send_main(int argc, char **argv);

/* The curves. */
int scale_requests(void);
int scale_regions(void);
int scale_peers(void);
int scale_notify(void);

/* An engine on loopback; dies on failure. */
ote_engine_h scale_engine(void);

#endif
