/*
 * The series: one renderer per family over snapshots, written out as
 * Prometheus text exposition 0.0.4 (the endpoint) or handed to a callback
 * (ote_engine_stats). Labels are bounded: op, transport, device, status,
 * memory, store, result; never a peer or a request.
 */
#include "obs_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_labels[OBS_OPS]            = {"read", "write"};
static const char *const meta_labels[OBS_META_RESULTS] = {"ok", "not_found", "error"};
static const char *const mem_labels[OBS_MEM_TYPES]     = {"host", "cuda"};

/* A label value as the exposition format wants it: \, " and newline escaped. */
static void esc(char *out, size_t len, const char *in)
{
    size_t o = 0;

    for (; *in != '\0' && o + 3 < len; in++) {
        if (*in == '\\' || *in == '"') {
            out[o++] = '\\';
            out[o++] = *in;
        } else if (*in == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *in;
        }
    }
    out[o] = '\0';
}

typedef struct {
    ote_obs_sink_t *sink;
    const char     *type;
    int             stop;
} emit_t;

static void emit(emit_t *em, const ote_obs_snap_t *s, const char *name, double v,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void emit(emit_t *em, const ote_obs_snap_t *s, const char *name, double v,
                 const char *fmt, ...)
{
    char labels[512];
    va_list ap;

    if (em->stop)
        return;
    va_start(ap, fmt);
    vsnprintf(labels, sizeof(labels), fmt, ap);
    va_end(ap);
    em->stop = em->sink->sample(em->sink, s, name, em->type, labels, v);
}

/* The distinct transports of s's pairs, in order. */
static size_t transports(const ote_obs_snap_t *s, const char *out[OBS_TL_MAX], size_t idx[OBS_TL_SLOTS])
{
    size_t n = 0;

    for (size_t p = 0; p < s->num_pairs; p++) {
        size_t j = 0;

        while (j < n && strcmp(out[j], s->pairs[p].transport) != 0)
            j++;
        if (j == n)
            out[n++] = s->pairs[p].transport;
        idx[p] = j;
    }
    return n;
}

/* Per op and transport (summed over devices), plus "none" when it counted. */
static void by_op_tl(emit_t *em, const ote_obs_snap_t *s, const char *name,
                     const uint64_t v[OBS_OPS][OBS_TL_SLOTS])
{
    const char *tl[OBS_TL_MAX];
    size_t idx[OBS_TL_SLOTS];
    size_t n = transports(s, tl, idx);

    for (int op = 0; op < OBS_OPS; op++) {
        uint64_t sum[OBS_TL_MAX] = {0};
        char e[OTE_TL_NAME_MAX * 2];

        for (size_t p = 0; p < s->num_pairs; p++)
            sum[idx[p]] += v[op][p];
        for (size_t t = 0; t < n; t++) {
            esc(e, sizeof(e), tl[t]);
            emit(em, s, name, (double)sum[t], "op=\"%s\",transport=\"%s\"", op_labels[op], e);
        }
        if (v[op][OBS_TL_NONE] != 0 || n == 0)
            emit(em, s, name, (double)v[op][OBS_TL_NONE], "op=\"%s\",transport=\"none\"",
                 op_labels[op]);
    }
}

static void f_xfer_bytes(emit_t *em, const ote_obs_snap_t *s)
{
    by_op_tl(em, s, "ote_transfer_bytes_total", s->xfer_bytes);
}

static void f_xfer_reqs(emit_t *em, const ote_obs_snap_t *s)
{
    by_op_tl(em, s, "ote_transfer_requests_total", s->xfer_reqs);
}

static void f_xfer_fail(emit_t *em, const ote_obs_snap_t *s)
{
    for (int op = 0; op < OBS_OPS; op++)
        for (int st = 0; st < OBS_STATUS_SLOTS; st++)
            if (ote_obs_status_label(st) != NULL)
                emit(em, s, "ote_transfer_failures_total", (double)s->xfer_fail[op][st],
                     "op=\"%s\",status=\"%s\"", op_labels[op], ote_obs_status_label(st));
}

static void f_latency(emit_t *em, const ote_obs_snap_t *s)
{
    char name[96], le[32];

    for (int op = 0; op < OBS_OPS; op++) {
        uint64_t cum = 0;

        for (size_t i = 0; i <= OBS_LAT_BOUNDS; i++) {
            cum += s->lat[op][i];
            if (i < OBS_LAT_BOUNDS)
                snprintf(le, sizeof(le), "%.9g", (double)ote_obs_lat_bounds_ns[i] * 1e-9);
            else
                snprintf(le, sizeof(le), "+Inf");
            emit(em, s, "ote_transfer_latency_seconds_bucket", (double)cum,
                 "op=\"%s\",le=\"%s\"", op_labels[op], le);
        }
        snprintf(name, sizeof(name), "ote_transfer_latency_seconds_sum");
        emit(em, s, name, (double)s->lat_sum_ns[op] * 1e-9, "op=\"%s\"", op_labels[op]);
        emit(em, s, "ote_transfer_latency_seconds_count", (double)cum, "op=\"%s\"",
             op_labels[op]);
    }
}

static void f_size(emit_t *em, const ote_obs_snap_t *s)
{
    char le[32];

    for (int op = 0; op < OBS_OPS; op++) {
        uint64_t cum = 0;

        for (size_t i = 0; i <= OBS_SIZE_BOUNDS; i++) {
            cum += s->size[op][i];
            if (i < OBS_SIZE_BOUNDS)
                snprintf(le, sizeof(le), "%" PRIu64, ote_obs_size_bounds[i]);
            else
                snprintf(le, sizeof(le), "+Inf");
            emit(em, s, "ote_transfer_size_bytes_bucket", (double)cum, "op=\"%s\",le=\"%s\"",
                 op_labels[op], le);
        }
        emit(em, s, "ote_transfer_size_bytes_sum", (double)s->size_sum[op], "op=\"%s\"",
             op_labels[op]);
        emit(em, s, "ote_transfer_size_bytes_count", (double)cum, "op=\"%s\"", op_labels[op]);
    }
}

static void by_rail(emit_t *em, const ote_obs_snap_t *s, const char *name, const uint64_t *v,
                    const int *state)
{
    for (size_t p = 0; p < s->num_pairs; p++) {
        char t[OTE_TL_NAME_MAX * 2], d[OTE_TL_DEV_MAX * 2];

        esc(t, sizeof(t), s->pairs[p].transport);
        esc(d, sizeof(d), s->pairs[p].device);
        emit(em, s, name, v != NULL ? (double)v[p] : (double)state[p],
             "transport=\"%s\",device=\"%s\"", t, d);
    }
}

static void f_rail_bytes(emit_t *em, const ote_obs_snap_t *s)
{
    by_rail(em, s, "ote_rail_bytes_total", s->rail_bytes, NULL);
}

static void f_rail_errors(emit_t *em, const ote_obs_snap_t *s)
{
    by_rail(em, s, "ote_rail_errors_total", s->rail_errors, NULL);
}

static void f_rail_state(emit_t *em, const ote_obs_snap_t *s)
{
    by_rail(em, s, "ote_rail_state", NULL, s->rail_state);
}

static void f_rail_failovers(emit_t *em, const ote_obs_snap_t *s)
{
    by_rail(em, s, "ote_rail_failovers_total", s->rail_failovers, NULL);
}

static void f_notif_fail(emit_t *em, const ote_obs_snap_t *s)
{
    for (int st = 0; st < OBS_STATUS_SLOTS; st++)
        if (ote_obs_status_label(st) != NULL)
            emit(em, s, "ote_notification_failures_total", (double)s->notif_fail[st],
                 "status=\"%s\"", ote_obs_status_label(st));
}

static void f_registered(emit_t *em, const ote_obs_snap_t *s)
{
    for (int m = 0; m < OBS_MEM_TYPES; m++)
        emit(em, s, "ote_registered_bytes", (double)s->registered_bytes[m], "memory=\"%s\"",
             mem_labels[m]);
}

static void f_meta(emit_t *em, const ote_obs_snap_t *s)
{
    for (int r = 0; r < OBS_META_RESULTS; r++)
        emit(em, s, "ote_metadata_requests_total", (double)s->meta[r],
             "store=\"%s\",result=\"%s\"", s->store, meta_labels[r]);
}

static void f_build(emit_t *em, const ote_obs_snap_t *s)
{
    emit(em, s, "ote_build_info", 1, "version=\"%s\",transports=\"%s\"", OTE_VERSION_STRING,
         s->transports);
}

typedef struct {
    const char *name, *type, *help;
    void (*render)(emit_t *em, const ote_obs_snap_t *s);
    /* render NULL: one sample without labels, the snapshot's uint64_t at this offset. */
    size_t value;
} family_t;

#define SNAP_VALUE(_field) .value = offsetof(ote_obs_snap_t, _field)

static const family_t families[] = {
    {"ote_transfer_bytes_total", "counter",
     "Bytes that arrived, by operation and transport (a request's partial bytes included)",
     f_xfer_bytes},
    {"ote_transfer_requests_total", "counter",
     "Requests that ended (any state), by operation and the transport that ended them",
     f_xfer_reqs},
    {"ote_transfer_failures_total", "counter",
     "Requests that ended without completing, by operation and status", f_xfer_fail},
    {"ote_transfer_latency_seconds", "histogram",
     "Submit to completion of requests that completed", f_latency},
    {"ote_transfer_size_bytes", "histogram", "Length of requests that completed", f_size},
    {"ote_inflight_requests", "gauge", "Requests admitted and not yet ended",
     SNAP_VALUE(inflight_reqs)},
    {"ote_inflight_bytes", "gauge", "Bytes of requests admitted and not yet ended",
     SNAP_VALUE(inflight_bytes)},
    {"ote_rail_bytes_total", "counter", "Bytes delivered on the rails of a transport and device",
     f_rail_bytes},
    {"ote_rail_errors_total", "counter", "Slices that failed on the rails of a transport and device",
     f_rail_errors},
    {"ote_rail_state", "gauge",
     "1 when a rail of an open segment on this transport and device is active, else 0",
     f_rail_state},
    {"ote_rail_failovers_total", "counter",
     "Slices that failed on this transport and device and were posted on another rail",
     f_rail_failovers},
    {"ote_notifications_sent_total", "counter", "Notifications the peer queued",
     SNAP_VALUE(notif_sent)},
    {"ote_notifications_received_total", "counter", "Notifications queued for ote_notify_recv",
     SNAP_VALUE(notif_recv)},
    {"ote_notification_failures_total", "counter", "Notifications not delivered, by status",
     f_notif_fail},
    {"ote_registered_bytes", "gauge", "Bytes of the registered regions, by memory type",
     f_registered},
    {"ote_registrations_total", "counter", "Regions registered (ote_mem_register, ote_mem_alloc)",
     SNAP_VALUE(registrations)},
    {"ote_segments_open", "gauge", "Segments the application opened and did not close",
     SNAP_VALUE(segments_open)},
    {"ote_peer_restarts_total", "counter", "Segments that found their peer restarted",
     SNAP_VALUE(peer_restarts)},
    {"ote_metadata_requests_total", "counter",
     "Descriptor fetches from the metadata (p2p peers or the store), by result", f_meta},
    {"ote_admission_rejections_total", "counter",
     "Submits refused BUSY for OTE_MAX_INFLIGHT_TASKS / OTE_MAX_INFLIGHT_BYTES",
     SNAP_VALUE(admission_rej)},
    {"ote_build_info", "gauge", "The library's version and the engine's transports", f_build},
};

int ote_obs_render(const ote_obs_snap_t *const *snaps, size_t count, ote_obs_sink_t *sink)
{
    emit_t em = {.sink = sink};

    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]) && !em.stop; f++) {
        if (sink->family != NULL)
            sink->family(sink, families[f].name, families[f].type, families[f].help);
        em.type = families[f].type;
        for (size_t i = 0; i < count && !em.stop; i++) {
            if (families[f].render != NULL)
                families[f].render(&em, snaps[i]);
            else
                emit(&em, snaps[i], families[f].name,
                     (double)*(const uint64_t *)((const char *)snaps[i] + families[f].value),
                     "%s", "");
        }
    }
    return em.stop;
}

/* ---- exposition ------------------------------------------------------------- */

typedef struct {
    ote_obs_sink_t sink;
    char          *buf;
    size_t         len, cap;
    bool           oom;
} text_sink_t;

static void text_add(text_sink_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text_sink_t *t, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (t->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        {
            size_t cap = t->cap * 2 + (size_t)n;
            char *b    = realloc(t->buf, cap);

            if (b == NULL) {
                t->oom = true;
                return;
            }
            t->buf = b;
            t->cap = cap;
        }
    }
}

static void text_family(ote_obs_sink_t *sink, const char *name, const char *type, const char *help)
{
    text_sink_t *t = (text_sink_t *)sink;

    text_add(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static int text_sample(ote_obs_sink_t *sink, const ote_obs_snap_t *snap, const char *name,
                       const char *type, const char *labels, double value)
{
    text_sink_t *t = (text_sink_t *)sink;
    char e[2 * OTE_DESC_NAME_MAX + 2];

    esc(e, sizeof(e), snap->engine);
    text_add(t, "%s{engine=\"%s\"%s%s} %.17g\n", name, e, labels[0] ? "," : "", labels, value);
    return 0;
}

char *ote_obs_expose(const ote_obs_snap_t *const *snaps, size_t count, size_t *len_p)
{
    text_sink_t t = {.sink = {.family = text_family, .sample = text_sample}};

    t.cap = 16384;
    t.buf = malloc(t.cap);
    if (t.buf == NULL)
        return NULL;
    t.buf[0] = '\0';
    ote_obs_render(snaps, count, &t.sink);
    if (t.oom) {
        free(t.buf);
        return NULL;
    }
    *len_p = t.len;
    return t.buf;
}

/* ---- ote_engine_stats --------------------------------------------------------- */

typedef struct {
    ote_obs_sink_t sink;
    ote_stats_cb_t cb;
    void          *arg;
} api_sink_t;

static int api_sample(ote_obs_sink_t *sink, const ote_obs_snap_t *snap, const char *name,
                      const char *type, const char *labels, double value)
{
    api_sink_t *a = (api_sink_t *)sink;
    ote_stat_t st = {.name = name, .type = type, .labels = labels, .value = value};

    (void)snap;
    return a->cb(a->arg, &st);
}

ote_status_t ote_engine_stats(ote_engine_h e, ote_stats_cb_t cb, void *arg)
{
    api_sink_t a = {.sink = {.sample = api_sample}, .cb = cb, .arg = arg};
    const ote_obs_snap_t *one;
    ote_obs_snap_t *snap;

    if (e == NULL || cb == NULL)
        return OTE_ERR_INVALID_PARAM;
    snap = malloc(sizeof(*snap));
    if (snap == NULL)
        return OTE_ERR_NO_MEMORY;
    ote_obs_snapshot(e, snap);
    one = snap;
    ote_obs_render(&one, 1, &a.sink);
    free(snap);
    return OTE_OK;
}
