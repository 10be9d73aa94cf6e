/*
 * Work shared between the calling thread and a few helper threads: a
 * parallel loop over items (ote_par_run). The helpers start with the first
 * loop, take items one at a time beside the caller, and poll briefly for
 * the next loop before they sleep; where the other cores are busy the
 * caller takes the items itself and loses no more than the signal to a
 * sleeping helper.
 */
#ifndef OTE_BASE_PAR_H
#define OTE_BASE_PAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* With threads < 0, one less than the CPUs the process may run on, at most this. */
#define OTE_PAR_AUTO_MAX 3
#define OTE_PAR_MAX      8

typedef struct ote_par ote_par_t;
typedef void (*ote_par_fn_t)(void *arg, size_t item);

/*
 * A pool of up to threads helpers (threads < 0: automatic, see above;
 * capped at OTE_PAR_MAX), named "<name>-N"; none is started yet. NULL
 * without memory.
 */
ote_par_t *ote_par_create(long threads, const char *name);
/* Joins the helpers; NULL is ignored. No ote_par_run may be in progress. */
void       ote_par_destroy(ote_par_t *p);
/* Helpers a loop may use: 0 when none was asked for (or NULL). */
size_t     ote_par_width(const ote_par_t *p);
/* Helpers started so far. */
size_t     ote_par_started(const ote_par_t *p);
/*
 * fn(arg, i) for every i in [0, n), on this thread and the helpers; returns
 * when every call returned. One loop at a time per pool; fn must not call
 * ote_par_run on the same pool.
 */
void       ote_par_run(ote_par_t *p, size_t n, ote_par_fn_t fn, void *arg);

/* Bytes [start, end) of one address space that a copy reads or writes. */
typedef struct {
    uint64_t start, end;
    bool     write;
} ote_par_span_t;

/*
 * Whether a written span overlaps another span: two copies that touch the
 * same bytes with one of them writing them (a WRITE and a READ of what it
 * wrote, two WRITEs to one place) must run one after the other, in order,
 * not shared between threads. Compare the spans of one address space at a
 * time; the array is sorted by start.
 */
bool       ote_par_spans_conflict(ote_par_span_t *spans, size_t n);

#endif
