/*
 * orbitte.Batch: a batch's life (Engine.batch, release), its tasks' states
 * (orbitte.TaskStatus), waiting and cancelling, its telemetry
 * (orbitte.BatchTelemetry) and its method table. Turning requests into
 * submissions is batch_submit.c's.
 */
#include "module.h"

#include <sched.h>

static PyStructSequence_Field task_status_fields[] = {
    {"state", "the task's state: PENDING, COMPLETED, FAILED, CANCELED or TIMEOUT"},
    {"error", "why it did not complete (a status code; 0 when it did)"},
    {"transferred", "bytes known to have arrived"},
    {NULL, NULL}};
PyStructSequence_Desc task_status_desc = {"orbitte.TaskStatus",
                                                 "One task's state, error and bytes moved.",
                                                 task_status_fields, 3};

static PyStructSequence_Field batch_telemetry_fields[] = {
    {"start_us", "first submit, microseconds since the Unix epoch (0 before any)"},
    {"post_ns", "nanoseconds spent inside the batch's submit calls"},
    {"xfer_ns", "nanoseconds from the first submit to the end of the last task that ended"},
    {"bytes", "bytes transferred by the tasks that ended"},
    {"requests", "requests submitted"},
    {"ended", "of which ended (any state)"},
    {"completed", "of which COMPLETED"},
    {NULL, NULL}};
PyStructSequence_Desc batch_telemetry_desc = {
    "orbitte.BatchTelemetry", "What a batch did so far (ote_batch_telemetry).",
    batch_telemetry_fields, 7};

PyObject *Engine_batch(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity = 1024;
    BatchObject *b;
    ote_batch_h h;
    ote_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:batch", kwlist, &capacity))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (capacity <= 0) {
        raise_invalid(NULL, "batch: capacity must be > 0");
        return NULL;
    }
    if (self->nparked > 0) {
        engine_reap(self);
        if (engine_check(self) < 0)
            return NULL;
    }
    st = ote_batch_create(self->e, (size_t)capacity, &h);
    if (st != OTE_OK)
        return raise_status(st, "Engine.batch()");
    b = PyObject_GC_New(BatchObject, &BatchType);
    if (b == NULL) {
        ote_batch_release(h);
        return NULL;
    }
    Py_INCREF(self);
    b->engine   = self;
    b->batch    = h;
    b->capacity = (size_t)capacity;
    b->calls    = NULL;
    b->held     = NULL;
    b->nheld    = 0;
    b->held_cap = 0;
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

/* ---- Batch ---------------------------------------------------------------- */

int batch_check(BatchObject *b)
{
    if (b->engine->e == NULL) {
        raise_closed("engine");
        return -1;
    }
    if (b->batch == NULL) {
        raise_closed("batch");
        return -1;
    }
    return 0;
}

/* ---- the memory a batch holds ------------------------------------------------- */

void memory_unhold(MemoryObject *m)
{
    /* deregistered while held: its export and kept object were left to here */
    if (--m->holders == 0 && m->mem == NULL)
        memory_drop_export(m);
    Py_DECREF(m);
}

void batch_unhold(MemoryObject **held, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memory_unhold(held[i]);
    PyMem_Free(held);
}

/* Whether tasks of the batch are still in flight (a status that cannot be read: no). */
static int batch_pending(ote_batch_h h)
{
    ote_task_status_t ts;

    return ote_batch_status(h, &ts) == OTE_OK && ts.state == OTE_TASK_PENDING;
}

/* Keep a released batch (NULL: the engine is being destroyed) and what it holds. */
static int engine_park(EngineObject *eo, ote_batch_h h, MemoryObject **held, size_t n)
{
    if (eo->nparked == eo->parked_cap) {
        size_t cap = eo->parked_cap ? 2 * eo->parked_cap : 4;
        parked_batch_t *p = PyMem_Realloc(eo->parked, cap * sizeof(*p));

        if (p == NULL)
            return -1;
        eo->parked     = p;
        eo->parked_cap = cap;
    }
    eo->parked[eo->nparked++] = (parked_batch_t){.batch = h, .held = held, .nheld = n};
    return 0;
}

void engine_reap(EngineObject *eo)
{
    parked_batch_t *done;
    size_t keep = 0, ndone = 0;

    if (eo->e == NULL || eo->nparked == 0)
        return;
    done = PyMem_Malloc(eo->nparked * sizeof(*done));
    if (done == NULL)
        return; /* the next reap */
    for (size_t i = 0; i < eo->nparked; i++) {
        if (eo->parked[i].batch != NULL && !batch_pending(eo->parked[i].batch))
            done[ndone++] = eo->parked[i];
        else
            eo->parked[keep++] = eo->parked[i];
    }
    eo->nparked = keep;
    /* every release before the first Py_DECREF: that may run code that closes the engine */
    for (size_t i = 0; i < ndone; i++)
        ote_batch_release(done[i].batch);
    for (size_t i = 0; i < ndone; i++)
        batch_unhold(done[i].held, done[i].nheld);
    PyMem_Free(done);
}

void engine_unpark_all(EngineObject *eo)
{
    parked_batch_t *p = eo->parked;
    size_t n          = eo->nparked;

    eo->parked     = NULL;
    eo->nparked    = 0;
    eo->parked_cap = 0;
    for (size_t i = 0; i < n; i++)
        batch_unhold(p[i].held, p[i].nheld);
    PyMem_Free(p);
}

/*
 * Release the handle (refused while another thread is inside a call using
 * it). The memory its submits held goes once its tasks ended: a batch with
 * tasks in flight is parked on the engine until then (ote_batch_release
 * returns at once and the library drains them), as while the engine is
 * being destroyed. Where no memory is left to park it, the batch and what
 * it holds are kept for ever: a leak, not memory freed under a transfer.
 */
static int batch_release(BatchObject *b, const char *what)
{
    EngineObject *eo     = b->engine;
    ote_batch_h h        = b->batch;
    MemoryObject **held  = b->held;
    size_t nheld         = b->nheld;

    if (h != NULL && calls_refuse(b->calls, what, "batch") < 0)
        return -1;
    b->batch    = NULL;
    b->held     = NULL;
    b->nheld    = 0;
    b->held_cap = 0;
    if (h != NULL && eo->e != NULL) {
        if (nheld > 0 && batch_pending(h)) {
            if (engine_park(eo, h, held, nheld) < 0)
                return 0;
            held = NULL;
            h    = NULL;
        }
        if (h != NULL)
            ote_batch_release(h);
    } else if (nheld > 0 && eo->destroying) {
        if (engine_park(eo, NULL, held, nheld) < 0)
            return 0;
        held = NULL;
    }
    if (held != NULL)
        batch_unhold(held, nheld);
    engine_reap(eo);
    return 0;
}

static int Batch_traverse(BatchObject *b, visitproc visit, void *arg)
{
    Py_VISIT(b->engine);
    for (size_t i = 0; i < b->nheld; i++)
        Py_VISIT(b->held[i]);
    return 0;
}

static void Batch_dealloc(BatchObject *b)
{
    PyObject *t, *v, *tb;

    PyObject_GC_UnTrack(b);
    PyErr_Fetch(&t, &v, &tb);
    (void)batch_release(b, "Batch.__del__()"); /* no call can be in flight: each holds b */
    PyErr_Restore(t, v, tb);
    Py_CLEAR(b->engine);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *Batch_release(BatchObject *b, PyObject *unused)
{
    (void)unused;
    if (batch_release(b, "Batch.release()") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Batch_enter(BatchObject *b, PyObject *unused)
{
    (void)unused;
    if (batch_check(b) < 0)
        return NULL;
    Py_INCREF(b);
    return (PyObject *)b;
}

static PyObject *Batch_exit(BatchObject *b, PyObject *args)
{
    (void)args;
    if (batch_release(b, "Batch.__exit__()") < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *task_status_object(const ote_task_status_t *ts)
{
    PyObject *o = PyStructSequence_New(&TaskStatusType);

    if (o == NULL)
        return NULL;
    PyStructSequence_SetItem(o, 0, PyLong_FromLong(ts->state));
    PyStructSequence_SetItem(o, 1, PyLong_FromLong(ts->error));
    PyStructSequence_SetItem(o, 2, PyLong_FromSize_t(ts->transferred));
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return NULL;
    }
    return o;
}

/*
 * One non-blocking progress pass of the engine from this thread (the GIL
 * released), for a status poll that found a task pending. A caller that polls
 * without ever waiting would otherwise get no answer until a worker thread
 * looks: one parked by an earlier wait (Batch.wait, Transfer.poll) looks again
 * only every OTE_POLL_PARK_US (5 ms by default), and with
 * OTE_PROGRESS_THREAD=n nothing else reads the answer at all.
 */
static void batch_poll_progress(BatchObject *b)
{
    ote_engine_h e = b->engine->e;
    py_call_t c;

    call_enter(&b->engine->calls, &c, "Batch.status()");
    Py_BEGIN_ALLOW_THREADS
    (void)ote_engine_progress(e);
    Py_END_ALLOW_THREADS
    call_leave(&b->engine->calls, &c);
}

/* Still pending after that pass: leave the CPU to the threads that complete it (the
 * peer's, the engine's own) before the caller polls again, as ote_batch_wait's polling does. */
static void batch_poll_yield(void)
{
    Py_BEGIN_ALLOW_THREADS
    sched_yield();
    Py_END_ALLOW_THREADS
}

static PyObject *Batch_status(BatchObject *b, PyObject *args)
{
    PyObject *task_obj = Py_None;
    ote_task_status_t ts;
    ote_status_t st;
    Py_ssize_t task = -1;

    if (!PyArg_ParseTuple(args, "|O:status", &task_obj))
        return NULL;
    if (task_obj != Py_None) {
        /* any integer with __index__ (numpy's too), as cancel and notify_status take */
        PyObject *i = PyNumber_Index(task_obj);

        if (i == NULL)
            return NULL;
        task = PyLong_AsSsize_t(i);
        Py_DECREF(i);
        if (task == -1 && PyErr_Occurred())
            return NULL;
        if (task < 0) {
            raise_invalid(NULL, "status: no such task");
            return NULL;
        }
    }
    if (batch_check(b) < 0)
        return NULL;
    for (int pass = 0;; pass++) {
        st = task < 0 ? ote_batch_status(b->batch, &ts)
                      : ote_batch_task_status(b->batch, (size_t)task, &ts);
        if (st == OTE_ERR_INVALID_PARAM && task >= 0)
            return raise_invalid(NULL, "status: no such task");
        if (st != OTE_OK)
            return raise_status(st, "Batch.status()");
        if (ts.state != OTE_TASK_PENDING)
            break;
        if (pass == 1) {
            batch_poll_yield();
            break;
        }
        batch_poll_progress(b);
        /* another thread may have released the batch or closed the engine meanwhile */
        if (batch_check(b) < 0)
            return NULL;
    }
    if (task < 0)
        return PyLong_FromLong(ts.state);
    return task_status_object(&ts);
}

static PyObject *Batch_telemetry(BatchObject *b, PyObject *unused)
{
    ote_batch_telemetry_t t = {.version = OTE_BATCH_TELEMETRY_VERSION};
    uint64_t v[7];
    ote_status_t st;
    PyObject *o;
    int k;

    (void)unused;
    if (batch_check(b) < 0)
        return NULL;
    st = ote_batch_telemetry(b->batch, &t);
    if (st != OTE_OK)
        return raise_status(st, "Batch.telemetry()");
    v[0] = t.start_us;
    v[1] = t.post_ns;
    v[2] = t.xfer_ns;
    v[3] = t.bytes;
    v[4] = t.requests;
    v[5] = t.ended;
    v[6] = t.completed;
    o = PyStructSequence_New(&BatchTelemetryType);
    if (o == NULL)
        return NULL;
    for (k = 0; k < 7; k++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[k]);

        if (x == NULL) {
            Py_DECREF(o);
            return NULL;
        }
        PyStructSequence_SetItem(o, k, x);
    }
    return o;
}

static PyObject *Batch_notify_status(BatchObject *b, PyObject *args)
{
    Py_ssize_t task;
    ote_status_t st, ns;

    if (!PyArg_ParseTuple(args, "n:notify_status", &task))
        return NULL;
    if (batch_check(b) < 0)
        return NULL;
    if (task < 0) {
        raise_invalid(NULL, "notify_status: no such task");
        return NULL;
    }
    st = ote_batch_notify_status(b->batch, (size_t)task, &ns);
    if (st == OTE_ERR_INVALID_PARAM)
        return raise_invalid(NULL, "notify_status: no such task, or its submit had no notify");
    if (st != OTE_OK)
        return raise_status(st, "Batch.notify_status()");
    return PyLong_FromLong(ns);
}

static PyObject *Batch_wait(BatchObject *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"timeout", NULL};
    PyObject *timeout_obj = Py_None;
    int timeout_ms = -1;
    ote_status_t st;
    ote_task_status_t ts;
    ote_batch_h batch;
    py_call_t c, ce;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &timeout_obj))
        return NULL;
    if (timeout_ms_value(timeout_obj, "Batch.wait()", &timeout_ms) < 0)
        return NULL;
    if (batch_check(b) < 0)
        return NULL;
    batch = b->batch;
    call_enter(&b->calls, &c, "Batch.wait()");
    call_enter(&b->engine->calls, &ce, "Batch.wait()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_batch_wait(batch, timeout_ms);
    Py_END_ALLOW_THREADS
    call_leave(&b->engine->calls, &ce);
    call_leave(&b->calls, &c);
    if (st != OTE_OK)
        return raise_status(st, "Batch.wait()");
    st = ote_batch_status(b->batch, &ts);
    if (st != OTE_OK)
        return raise_status(st, "Batch.wait()");
    return PyLong_FromLong(ts.state);
}

static PyObject *Batch_cancel(BatchObject *b, PyObject *args)
{
    Py_ssize_t task;
    ote_status_t st;

    if (!PyArg_ParseTuple(args, "n:cancel", &task))
        return NULL;
    if (batch_check(b) < 0)
        return NULL;
    if (task < 0) {
        raise_invalid(NULL, "cancel: no such task");
        return NULL;
    }
    st = ote_batch_cancel(b->batch, (size_t)task);
    if (st == OTE_ERR_INVALID_PARAM)
        return raise_invalid(NULL, "cancel: no such task");
    if (st != OTE_OK)
        return raise_status(st, "Batch.cancel()");
    Py_RETURN_NONE;
}

static PyObject *Batch_get_capacity(BatchObject *b, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(b->capacity);
}

static PyObject *Batch_get_closed(BatchObject *b, void *unused)
{
    (void)unused;
    return PyBool_FromLong(b->batch == NULL || b->engine->e == NULL);
}

static PyMethodDef Batch_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))Batch_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(segment, requests, notify=None)\n--\n\n"
     "Submit requests, a sequence of (op, local, remote_addr, length) tuples (local: an int "
     "address, a Memory, or (Memory, offset)). With notify (bytes-like), the peer receives it "
     "once every task of this call completed. Returns the first task id; the tasks are "
     "first .. first+len(requests)-1. Nothing is submitted when it raises; a READ into a "
     "read-only registration raises InvalidParamError. The batch holds each Memory given as "
     "a local (and so the object registered) until it is released and its tasks have ended; "
     "an int address is the caller's to keep registered and alive."},
    {"submit_arrays", (PyCFunction)(void (*)(void))Batch_submit_arrays,
     METH_VARARGS | METH_KEYWORDS,
     "submit_arrays(segment, op, local_addrs, remote_addrs, lengths, notify=None)\n--\n\n"
     "As submit, from parallel sequences or arrays of 64-bit integers (numpy uint64); "
     "lengths may be one int for all. Returns the first task id. The addresses are ints: "
     "the memory is the caller's to keep registered and alive until the tasks ended."},
    {"status", (PyCFunction)Batch_status, METH_VARARGS,
     "status(task=None)\n--\n\nWith a task id (any int, numpy's included): its "
     "TaskStatus(state, error, transferred). "
     "Without: the batch's summary state (PENDING while any task is, else FAILED if any "
     "failed, else COMPLETED). A poll that finds the task (or the batch) PENDING progresses "
     "the engine once from this thread (ote_engine_progress, the GIL released) and looks "
     "again, so that a loop of status() calls completes its transfers by itself."},
    {"notify_status", (PyCFunction)Batch_notify_status, METH_VARARGS,
     "notify_status(task)\n--\n\nThe status of the notification submitted with task: "
     "INPROGRESS (1), OK (0) once the peer queued it, or why it was not delivered (<0)."},
    {"wait", (PyCFunction)(void (*)(void))Batch_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None)\n--\n\nBlock (GIL released) until every task ended and every "
     "notification was delivered or failed; returns the summary state. Raises TimeoutError "
     "after timeout seconds (None: no limit; at most 2147483.647 s, about 24.8 days: a longer "
     "one, infinity included, waits that long; NaN or < 0: InvalidParamError)."},
    {"cancel", (PyCFunction)Batch_cancel, METH_VARARGS,
     "cancel(task)\n--\n\nCancel a task; it ends CANCELED once no posted slice can still land."},
    {"telemetry", (PyCFunction)Batch_telemetry, METH_NOARGS,
     "telemetry()\n--\n\nBatchTelemetry(start_us, post_ns, xfer_ns, bytes, requests, ended, "
     "completed): what the batch did so far (ote_batch_telemetry); never blocks. Final once "
     "ended == requests, until the next submit (the figures add up over submits)."},
    {"release", (PyCFunction)Batch_release, METH_NOARGS,
     "release()\n--\n\nRelease the batch; tasks in flight drain first (it returns at once). "
     "The Memory objects its submits took as locals are let go of once its tasks have ended "
     "(until then the engine keeps them). Idempotent; once the engine is closed (it released "
     "the batch) it only lets go of them. Raises BusyError, the batch left open, while "
     "another thread is inside wait() or a submit on it."},
    {"__enter__", (PyCFunction)Batch_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Batch_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Batch_getset[] = {
    {"capacity", (getter)Batch_get_capacity, NULL, "Tasks the batch can hold.", NULL},
    {"closed", (getter)Batch_get_closed, NULL,
     "True once released (or its engine closed).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc       = "A batch of READ/WRITE tasks (Engine.batch).",
    .tp_dealloc   = (destructor)Batch_dealloc,
    .tp_traverse  = (traverseproc)Batch_traverse,
    .tp_free      = PyObject_GC_Del,
    .tp_methods   = Batch_methods,
    .tp_getset    = Batch_getset,
};

PyTypeObject TaskStatusType, BatchTelemetryType;
