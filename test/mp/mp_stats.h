/*
 * Reading one sample of an engine's series through ote_engine_stats(), for
 * tests that compare them with what they did.
 */
#ifndef OTE_MP_STATS_H
#define OTE_MP_STATS_H

#include <ote/ote.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name, *labels;
    double      value;
    int         found;
} mp_stat_find_t;

static int mp_stat_cb(void *arg, const ote_stat_t *s)
{
    mp_stat_find_t *f = arg;

    if (strcmp(s->name, f->name) == 0 && strcmp(s->labels, f->labels) == 0) {
        f->value = s->value;
        f->found++;
    }
    return 0;
}

/* The value of name{labels} (labels as the exposition writes them, without engine); -1 absent. */
static inline double mp_stat(ote_engine_h e, const char *name, const char *labels)
{
    mp_stat_find_t f = {.name = name, .labels = labels};

    if (ote_engine_stats(e, mp_stat_cb, &f) != OTE_OK || f.found != 1)
        return -1;
    return f.value;
}

static int mp_stat_sum_cb(void *arg, const ote_stat_t *s)
{
    mp_stat_find_t *f = arg;

    if (strcmp(s->name, f->name) == 0) {
        f->value += s->value;
        f->found++;
    }
    return 0;
}

/* The sum of every sample of name, whatever its labels; -1 when there is none. */
static inline double mp_stat_sum(ote_engine_h e, const char *name)
{
    mp_stat_find_t f = {.name = name};

    if (ote_engine_stats(e, mp_stat_sum_cb, &f) != OTE_OK || f.found == 0)
        return -1;
    return f.value;
}

/* The label a status has in the failure series (independent of the library's table). */
static inline const char *mp_status_label(ote_status_t s)
{
    static const char *const names[] = {
        "ok",           "invalid_param", "no_memory",      "not_registered",
        "out_of_bounds", "access",       "unreachable",    "not_found",
        "timeout",      "canceled",      "remote_disconnect", "busy",
        "io",           "unsupported",   "protocol",       "auth",
        "exists",       "peer_restarted", "no_device",     "store_unavailable",
        "remote_not_registered",
    };
    int i = -(int)s;

    return (i > 0 && i < (int)(sizeof(names) / sizeof(names[0]))) ? names[i] : "other";
}

#define MP_NSTATUS 21 /* OTE_OK .. OTE_ERR_REMOTE_NOT_REGISTERED */

#endif
