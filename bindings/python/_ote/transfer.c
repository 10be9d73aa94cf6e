/*
 * orbitte.Transfer (Engine.transfer): one fixed list of requests (an op,
 * local and remote addresses, lengths) posted again and again, as NIXL's
 * transfer handles are. The requests are built once (transfer_build.c);
 * each post is one ote_batch_submit (or ote_batch_submit_notify) of all of
 * them with the GIL released, into the batch of the previous post while that one completed
 * and the batch has room (a batch holds capacity tasks over its life, so a
 * batch takes several posts), else into a new one. Its state, the figures
 * of its latest post (the batch's telemetry less what earlier posts added)
 * and the polling policy of orbitte.nixl's check_xfer_state live here, so
 * that a repost and a poll cost no Python object but the answer.
 */
#include "transfer.h"

#include <limits.h>
#include <math.h>
#include <sched.h>
#include <time.h>

/* Posts a batch holds once the transfer was posted again: up to 64, and
 * about 256 tasks (one post when larger). The first batch holds one post
 * (most handles made per request are posted once). */
#define POSTS_MAX  64
#define TASKS_AIM  256

static uint64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The transfer this thread polled (or posted) last, and when that left it PENDING. */
static _Thread_local const void *last_polled;
static _Thread_local uint64_t    last_polled_ns;

static int transfer_check(TransferObject *t)
{
    if (t->engine->e == NULL)
        return raise_closed("engine"), -1;
    if (t->reqs == NULL)
        return raise_closed("transfer"), -1;
    return 0;
}

static void transfer_drop_batch(TransferObject *t)
{
    if (t->batch != NULL && t->engine->e != NULL)
        ote_batch_release(t->batch);
    t->batch = NULL;
}

/* Move the latest post's state on from what its tasks (and notification) say. */
static void transfer_update(TransferObject *t)
{
    ote_task_status_t ts;

    if (t->state != OTE_TASK_PENDING)
        return;
    /* tasks below ended are known to have ended: look from there on */
    while (t->ended < t->count) {
        if (ote_batch_task_status(t->batch, t->first + t->ended, &ts) != OTE_OK ||
            ts.state == OTE_TASK_PENDING)
            return;
        if (ts.state != OTE_TASK_COMPLETED && t->error == OTE_OK)
            t->error = ts.error != OTE_OK ? ts.error
                       : ts.state == OTE_TASK_CANCELED ? OTE_ERR_CANCELED : OTE_ERR_IO;
        t->ended++;
    }
    if (t->error == OTE_OK && t->has_notify) {
        ote_status_t ns;

        if (ote_batch_notify_status(t->batch, t->first, &ns) != OTE_OK)
            ns = OTE_ERR_IO;
        if (ns == OTE_INPROGRESS)
            return;
        if (ns != OTE_OK)
            t->error = t->notify_error = ns;
    }
    t->state = t->error == OTE_OK ? OTE_TASK_COMPLETED : OTE_TASK_FAILED;
    {
        ote_batch_telemetry_t tel = {.version = OTE_BATCH_TELEMETRY_VERSION};
        uint64_t skip = t->post_t0 - t->batch_t0;

        if (ote_batch_telemetry(t->batch, &tel) == OTE_OK)
            t->xfer_ns = tel.xfer_ns > skip ? tel.xfer_ns - skip : 0;
    }
}

/* Whether t can be posted to s now; -1 with the exception set if not. */
static int transfer_post_check(TransferObject *t, SegmentObject *s)
{
    EngineObject *eo = t->engine;

    if (transfer_check(t) < 0 || segment_check(s) < 0)
        return -1;
    if (s->engine != eo)
        return raise_invalid("Transfer.post()", "the segment belongs to another engine"), -1;
    if (t->busy)
        return raise_invalid("Transfer.post()", "the transfer is in use by another thread"), -1;
    transfer_update(t);
    if (t->state == OTE_TASK_PENDING)
        return raise_invalid("Transfer.post()", "the latest post is still in progress"), -1;
    /* registrations made read-only since Engine.transfer() refused it are looked for here */
    if (eo->nro > 0 && t->reqs[0].op == OTE_OP_READ)
        for (size_t i = 0; i < t->count; i++)
            if (ro_check(eo, (uint64_t)(uintptr_t)t->reqs[i].local_addr, t->reqs[i].length,
                         "Transfer.post()", (Py_ssize_t)i) < 0)
                return -1;
    return 0;
}

static PyObject *Transfer_post(TransferObject *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "notify", NULL};
    PyObject *seg_obj, *notify_obj = Py_None;
    SegmentObject *s;
    Py_buffer notify;
    int has_notify = 0;
    ote_batch_h batch;
    ote_status_t st;
    size_t first = 0;
    uint64_t t0;
    py_call_t cs, ce;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!|O:post", kwlist, &SegmentType, &seg_obj,
                                     &notify_obj))
        return NULL;
    s = (SegmentObject *)seg_obj;
    /* the notification's bytes first: a buffer exporter may run Python code */
    if (notify_obj != Py_None) {
        if (PyObject_GetBuffer(notify_obj, &notify, PyBUF_SIMPLE) < 0)
            return NULL;
        has_notify = 1;
        if ((size_t)notify.len > OTE_NOTIFY_MAX) {
            PyBuffer_Release(&notify);
            return raise_invalid("Transfer.post()", "a notification holds at most NOTIFY_MAX bytes");
        }
    }
    if (transfer_post_check(t, s) < 0) {
        if (has_notify)
            PyBuffer_Release(&notify);
        return NULL;
    }
    if (s->seg != t->seg) {
        for (size_t i = 0; i < t->count; i++)
            t->reqs[i].segment = s->seg;
        t->seg = s->seg;
    }
    /* The batch of a completed post takes this one while it has room. */
    if (t->batch != NULL && t->state == OTE_TASK_COMPLETED && t->next + t->count <= t->cap) {
        t->base.version = OTE_BATCH_TELEMETRY_VERSION;
        if (ote_batch_telemetry(t->batch, &t->base) != OTE_OK)
            transfer_drop_batch(t);
    } else {
        transfer_drop_batch(t);
    }
    if (t->batch == NULL) {
        size_t posts = TASKS_AIM / t->count;

        posts = posts < 1 || t->posts == 0 ? 1 : posts > POSTS_MAX ? POSTS_MAX : posts;
        st = ote_batch_create(t->engine->e, t->count * posts, &t->batch);
        if (st != OTE_OK) {
            t->batch = NULL;
            t->state = -1;
            if (has_notify)
                PyBuffer_Release(&notify);
            return raise_status(st, "Transfer.post()");
        }
        t->cap  = t->count * posts;
        t->next = 0;
        memset(&t->base, 0, sizeof(t->base));
        t->batch_t0 = 0;
    }
    batch = t->batch;
    t0    = mono_ns();
    t->busy++;
    call_enter(&s->calls, &cs, "Transfer.post()");
    call_enter(&t->engine->calls, &ce, "Transfer.post()");
    Py_BEGIN_ALLOW_THREADS
    if (has_notify)
        st = ote_batch_submit_notify(batch, t->reqs, t->count, notify.buf, (size_t)notify.len,
                                     &first);
    else
        st = ote_batch_submit(batch, t->reqs, t->count, &first);
    Py_END_ALLOW_THREADS
    call_leave(&t->engine->calls, &ce);
    call_leave(&s->calls, &cs);
    t->busy--;
    if (has_notify)
        PyBuffer_Release(&notify);
    if (st != OTE_OK) {
        /* nothing was submitted; the next post takes a new batch */
        t->state = -1;
        return raise_status(st, "Transfer.post()");
    }
    if (t->next == 0)
        t->batch_t0 = t0;
    t->post_t0      = t0;
    t->posts++;
    t->first        = first;
    t->next         = first + t->count;
    t->ended        = 0;
    t->has_notify   = has_notify;
    t->error        = OTE_OK;
    t->notify_error = OTE_OK;
    t->xfer_ns      = 0;
    t->state        = OTE_TASK_PENDING;
    transfer_update(t);
    if (t->state == OTE_TASK_PENDING) {
        /* The posting thread's next poll of it, if at once, is a loop's (see poll). */
        last_polled    = t;
        last_polled_ns = mono_ns();
    } else if (last_polled == (const void *)t) {
        last_polled = NULL;
    }
    return PyLong_FromLong(t->state);
}

static PyObject *Transfer_poll(TransferObject *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"progress", "wait", "repoll_us", "yield_cpu", NULL};
    int progress = 0, yield_cpu = 0;
    double wait = 0.0;
    long long repoll_us = 0;
    ote_engine_h e;
    ote_batch_h batch;
    py_call_t ce;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|pdLp:poll", kwlist, &progress, &wait,
                                     &repoll_us, &yield_cpu))
        return NULL;
    if (isnan(wait))
        return raise_invalid("Transfer.poll()", "wait is NaN");
    if (transfer_check(t) < 0)
        return NULL;
    if (t->state < 0)
        return raise_invalid("Transfer.poll()", "not posted");
    transfer_update(t);
    if (t->state != OTE_TASK_PENDING)
        return PyLong_FromLong(t->state);
    e     = t->engine->e;
    batch = t->batch;
    if (wait > 0 && repoll_us > 0 && last_polled == (const void *)t &&
        mono_ns() - last_polled_ns < (uint64_t)repoll_us * 1000ull) {
        /* polled again at once: wait in the engine as ote_batch_wait's callers do */
        int ms = wait * 1000.0 >= (double)INT_MAX ? INT_MAX : (int)(wait * 1000.0 + 0.5);

        t->busy++;
        call_enter(&t->engine->calls, &ce, "Transfer.poll()");
        Py_BEGIN_ALLOW_THREADS
        (void)ote_batch_wait(batch, ms < 1 ? 1 : ms);
        Py_END_ALLOW_THREADS
        call_leave(&t->engine->calls, &ce);
        t->busy--;
        transfer_update(t);
    } else if (progress) {
        call_enter(&t->engine->calls, &ce, "Transfer.poll()");
        Py_BEGIN_ALLOW_THREADS
        (void)ote_engine_progress(e);
        Py_END_ALLOW_THREADS
        call_leave(&t->engine->calls, &ce);
        transfer_update(t);
        if (t->state == OTE_TASK_PENDING && yield_cpu) {
            Py_BEGIN_ALLOW_THREADS
            sched_yield();
            Py_END_ALLOW_THREADS
        }
    }
    if (t->state == OTE_TASK_PENDING) {
        last_polled    = t;
        last_polled_ns = mono_ns();
    } else if (last_polled == (const void *)t) {
        last_polled = NULL;
    }
    return PyLong_FromLong(t->state);
}

static PyObject *Transfer_wait(TransferObject *t, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout_obj = Py_None;
    int timeout_ms = -1;
    ote_batch_h batch;
    ote_status_t st;
    py_call_t ce;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &timeout_obj))
        return NULL;
    if (timeout_ms_value(timeout_obj, "Transfer.wait()", &timeout_ms) < 0)
        return NULL;
    if (transfer_check(t) < 0)
        return NULL;
    if (t->state < 0)
        return raise_invalid("Transfer.wait()", "not posted");
    batch = t->batch;
    t->busy++;
    call_enter(&t->engine->calls, &ce, "Transfer.wait()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_batch_wait(batch, timeout_ms);
    Py_END_ALLOW_THREADS
    call_leave(&t->engine->calls, &ce);
    t->busy--;
    transfer_update(t);
    if (st != OTE_OK && t->state == OTE_TASK_PENDING)
        return raise_status(st, "Transfer.wait()");
    return PyLong_FromLong(t->state);
}

static PyObject *Transfer_cancel(TransferObject *t, PyObject *unused)
{
    (void)unused;
    if (transfer_check(t) < 0)
        return NULL;
    if (t->state == OTE_TASK_PENDING)
        for (size_t i = t->ended; i < t->count; i++)
            (void)ote_batch_cancel(t->batch, t->first + i);
    Py_RETURN_NONE;
}

static PyObject *Transfer_telemetry(TransferObject *t, PyObject *unused)
{
    ote_batch_telemetry_t now = {.version = OTE_BATCH_TELEMETRY_VERSION};
    uint64_t v[7], skip;
    ote_status_t st;
    PyObject *o;

    (void)unused;
    if (transfer_check(t) < 0)
        return NULL;
    if (t->state < 0)
        return raise_invalid("Transfer.telemetry()", "not posted");
    st = ote_batch_telemetry(t->batch, &now);
    if (st != OTE_OK)
        return raise_status(st, "Transfer.telemetry()");
    /* The batch's figures add up over its posts: this post's are the difference. */
    skip = t->post_t0 - t->batch_t0;
    v[0] = now.start_us + skip / 1000;
    v[1] = now.post_ns - t->base.post_ns;
    v[2] = now.xfer_ns > skip ? now.xfer_ns - skip : 0;
    v[3] = now.bytes - t->base.bytes;
    v[4] = now.requests - t->base.requests;
    v[5] = now.ended - t->base.ended;
    v[6] = now.completed - t->base.completed;
    if (t->state == OTE_TASK_PENDING && v[5] < v[4])
        v[2] = 0; /* the end so far may be an earlier post's */
    o = PyStructSequence_New(&BatchTelemetryType);
    if (o == NULL)
        return NULL;
    for (int k = 0; k < 7; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[k]);

        if (x == NULL) {
            Py_DECREF(o);
            return NULL;
        }
        PyStructSequence_SetItem(o, k, x);
    }
    return o;
}

static PyObject *Transfer_ranges(TransferObject *t, PyObject *unused)
{
    PyObject *o;
    uint64_t *v;

    (void)unused;
    if (transfer_check(t) < 0)
        return NULL;
    o = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(t->count * 3 * sizeof(uint64_t)));
    if (o == NULL)
        return NULL;
    v = (uint64_t *)PyBytes_AS_STRING(o);
    for (size_t i = 0; i < t->count; i++) {
        v[3 * i]     = (uint64_t)(uintptr_t)t->reqs[i].local_addr;
        v[3 * i + 1] = t->reqs[i].remote_addr;
        v[3 * i + 2] = t->reqs[i].length;
    }
    return o;
}

static PyObject *Transfer_release(TransferObject *t, PyObject *unused)
{
    (void)unused;
    if (t->busy)
        return raise_invalid("Transfer.release()", "the transfer is in use by another thread");
    transfer_drop_batch(t);
    PyMem_Free(t->reqs);
    t->reqs  = NULL;
    t->state = -1;
    Py_RETURN_NONE;
}

static int Transfer_traverse(TransferObject *t, visitproc visit, void *arg)
{
    Py_VISIT(t->engine);
    return 0;
}

/* No call can be busy here: each holds t. */
static void Transfer_dealloc(TransferObject *t)
{
    PyObject_GC_UnTrack(t);
    transfer_drop_batch(t);
    PyMem_Free(t->reqs);
    Py_CLEAR(t->engine);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *Transfer_get_state(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromLong(t->state);
}

static PyObject *Transfer_get_error(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromLong(t->error);
}

static PyObject *Transfer_get_notify_error(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromLong(t->notify_error);
}

static PyObject *Transfer_get_xfer_ns(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(t->xfer_ns);
}

static PyObject *Transfer_get_count(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(t->count);
}

static PyObject *Transfer_get_merged(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(t->merged);
}

static PyObject *Transfer_get_bytes(TransferObject *t, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(t->bytes);
}

static PyObject *Transfer_get_closed(TransferObject *t, void *unused)
{
    (void)unused;
    return PyBool_FromLong(t->reqs == NULL || t->engine->e == NULL);
}

static PyMethodDef Transfer_methods[] = {
    {"post", (PyCFunction)(void (*)(void))Transfer_post, METH_VARARGS | METH_KEYWORDS,
     "post(segment, notify=None)\n--\n\nPost every request to segment in one submit (the "
     "GIL released); with notify (bytes-like, at most NOTIFY_MAX bytes) the peer receives "
     "it once all of them completed. The batch of the previous post takes it while that "
     "post completed and the batch has room, else a new batch. Returns the state: PENDING, "
     "or COMPLETED / FAILED when it already ended. InvalidParamError while the latest post "
     "is PENDING, and for a READ into a read-only registration of the engine; the submit's "
     "error otherwise, with nothing posted. The addresses are ints: the memory is the "
     "caller's to keep registered and alive until the post ended."},
    {"poll", (PyCFunction)(void (*)(void))Transfer_poll, METH_VARARGS | METH_KEYWORDS,
     "poll(progress=False, wait=0.0, repoll_us=0, yield_cpu=False)\n--\n\n"
     "The latest post's state: PENDING until every request ended and its notification "
     "was queued by the peer (or failed), then COMPLETED or FAILED (see error). While "
     "PENDING: with wait and repoll_us, when this thread's previous poll (or post) was of "
     "this transfer and left it PENDING less than repoll_us microseconds ago (a caller "
     "polling it in a loop), it waits up to wait seconds in the engine (ote_batch_wait, at least "
     "1 ms), else with progress it progresses the engine once (ote_engine_progress) and, "
     "with yield_cpu, yields the CPU if still PENDING; the GIL released in each."},
    {"wait", (PyCFunction)(void (*)(void))Transfer_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None)\n--\n\nBlock (GIL released) until the latest post ended; returns "
     "its state. TimeoutError after timeout seconds (None: no limit; at most 2147483.647 s: "
     "a longer one, infinity included, waits that long; NaN or < 0: InvalidParamError)."},
    {"cancel", (PyCFunction)Transfer_cancel, METH_NOARGS,
     "cancel()\n--\n\nCancel the latest post's requests that did not end (ote_batch_cancel)."},
    {"telemetry", (PyCFunction)Transfer_telemetry, METH_NOARGS,
     "telemetry()\n--\n\nBatchTelemetry of the latest post alone (start_us its submit; "
     "xfer_ns 0 until it ended); never blocks."},
    {"ranges", (PyCFunction)Transfer_ranges, METH_NOARGS,
     "ranges()\n--\n\nThe requests as bytes: (local address, remote address, length) "
     "per request, native uint64s (numpy.frombuffer(..., uint64).reshape(-1, 3))."},
    {"release", (PyCFunction)Transfer_release, METH_NOARGS,
     "release()\n--\n\nRelease the batch (requests in flight drain first) and the requests; "
     "idempotent. InvalidParamError while another thread waits on it or posts it."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Transfer_getset[] = {
    {"state", (getter)Transfer_get_state, NULL,
     "The latest post's state as last seen (-1: not posted).", NULL},
    {"error", (getter)Transfer_get_error, NULL,
     "FAILED: the first failed request's status, or the notification's; else 0.", NULL},
    {"notify_error", (getter)Transfer_get_notify_error, NULL,
     "The notification's status when it, not a request, failed; else 0.", NULL},
    {"xfer_ns", (getter)Transfer_get_xfer_ns, NULL,
     "The latest post's time from its submit to the end of its last request, once ended.",
     NULL},
    {"count", (getter)Transfer_get_count, NULL, "Requests per post.", NULL},
    {"merged", (getter)Transfer_get_merged, NULL,
     "Requests merged into their predecessor (merge=True), so count fewer.", NULL},
    {"bytes", (getter)Transfer_get_bytes, NULL, "Bytes per post.", NULL},
    {"closed", (getter)Transfer_get_closed, NULL,
     "True once released (or its engine closed).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject TransferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte.Transfer",
    .tp_basicsize = sizeof(TransferObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc       = "A fixed list of READ or WRITE requests posted again and again "
                    "(Engine.transfer).",
    .tp_dealloc   = (destructor)Transfer_dealloc,
    .tp_traverse  = (traverseproc)Transfer_traverse,
    .tp_free      = PyObject_GC_Del,
    .tp_methods   = Transfer_methods,
    .tp_getset    = Transfer_getset,
};
