/*
 * orbitte._ote.Engine: creating and closing an engine, its name and event fd,
 * and its method table. The methods that make other objects live with them:
 * register/alloc in memory.c, open/open_desc/desc_export in segment.c, batch in
 * batch.c, send/recv in notify.c, stats in stats.c.
 */
#include "module.h"

/* ---- Engine --------------------------------------------------------------- */

int engine_check(EngineObject *eo)
{
    if (eo->e == NULL) {
        raise_closed("engine");
        return -1;
    }
    return 0;
}

static int Engine_init(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"name", "listen_addr", "metadata", NULL};
    const char *name = NULL, *listen = NULL, *metadata = NULL;
    ote_engine_params_t p;
    ote_engine_h e;
    ote_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zzz:Engine", kwlist, &name, &listen,
                                     &metadata))
        return -1;
    if (self->e != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Engine.__init__ called twice");
        return -1;
    }
    p = (ote_engine_params_t){.name = name, .listen_addr = listen, .metadata = metadata};
    Py_BEGIN_ALLOW_THREADS
    st = ote_engine_create(&p, &e);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK) {
        raise_status(st, "Engine()");
        return -1;
    }
    self->e = e;
    snprintf(self->name, sizeof(self->name), "%s", ote_engine_name(e));
    return 0;
}

/* Destroy the engine, then let go of what its parked batches held. While
 * the library destroys it (the GIL released) its tasks may still land:
 * destroying tells the releasing calls of other threads to keep memory. */
static void engine_destroy(EngineObject *self)
{
    ote_engine_h e = self->e;

    if (e == NULL)
        return;
    self->e          = NULL;
    self->destroying = 1;
    Py_BEGIN_ALLOW_THREADS
    ote_engine_destroy(e);
    Py_END_ALLOW_THREADS
    self->destroying = 0;
    ro_clear(self);
    engine_unpark_all(self);
}

/* Close unless a call is in flight on the engine or any of its objects, or a
 * view of memory it allocated is exported: then -1 with the exception set. */
static int engine_close(EngineObject *self, const char *what)
{
    if (self->e == NULL)
        return 0;
    if (calls_refuse(self->calls, what, "engine") < 0)
        return -1;
    if (self->owned_views > 0) {
        PyErr_Format(PyExc_BufferError,
                     "%s: %zd view%s of memory this engine allocated (Engine.alloc) %s still "
                     "exported; release %s first (the engine stays open)",
                     what, self->owned_views, self->owned_views > 1 ? "s" : "",
                     self->owned_views > 1 ? "are" : "is", self->owned_views > 1 ? "them" : "it");
        return -1;
    }
    engine_destroy(self);
    return 0;
}

/* The parked batches hold Memory objects, which hold the engine. */
static int Engine_traverse(EngineObject *self, visitproc visit, void *arg)
{
    for (size_t i = 0; i < self->nparked; i++)
        for (size_t k = 0; k < self->parked[i].nheld; k++)
            Py_VISIT(self->parked[i].held[k]);
    return 0;
}

/* Unreachable with parked batches: destroyed, which ends their tasks and lets
 * their memory go (an orbitte.Engine's __dict__ was cleared before). */
static int Engine_clear(EngineObject *self)
{
    if (self->nparked > 0 && self->calls == NULL && self->owned_views == 0)
        engine_destroy(self);
    return 0;
}

/* No call can be in flight and no view exported here: each holds the engine. */
static void Engine_dealloc(EngineObject *self)
{
    PyObject_GC_UnTrack(self);
    engine_destroy(self);
    PyMem_Free(self->ro);
    PyMem_Free(self->parked);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Engine_close(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (engine_close(self, "Engine.close()") < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Engine_enter(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Engine_exit(EngineObject *self, PyObject *args)
{
    (void)args;
    if (engine_close(self, "Engine.__exit__()") < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *Engine_get_name(EngineObject *self, void *unused)
{
    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    return PyUnicode_FromString(self->name);
}

static PyObject *Engine_get_closed(EngineObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->e == NULL);
}

static PyObject *Engine_fileno(EngineObject *self, PyObject *unused)
{
    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    return PyLong_FromLong(ote_engine_event_fd(self->e));
}

/* One non-blocking progress pass from the calling thread (ote_engine_progress),
 * the GIL released: a caller that polls a batch gets its answers without a hand-off
 * to a worker thread. */
static PyObject *Engine_progress(EngineObject *self, PyObject *unused)
{
    ote_engine_h e;
    ote_status_t st;
    py_call_t c;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    e = self->e;
    call_enter(&self->calls, &c, "Engine.progress()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_engine_progress(e);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &c);
    if (st != OTE_OK && st != OTE_ERR_BUSY)
        return raise_status(st, "Engine.progress()");
    return PyBool_FromLong(st == OTE_OK);
}

static PyObject *Engine_clear_event(EngineObject *self, PyObject *unused)
{
    uint64_t v;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    return PyBool_FromLong(read(ote_engine_event_fd(self->e), &v, sizeof(v)) == sizeof(v));
}

static PyMethodDef Engine_methods[] = {
    {"close", (PyCFunction)Engine_close, METH_NOARGS,
     "close()\n--\n\nDestroy the engine: tasks in flight end CANCELED; its batches, segments "
     "and registrations are released. Idempotent. Raises BusyError while another thread is "
     "inside a call on the engine or any of its objects that waits (the GIL released), and "
     "BufferError while views of memory it allocated (memoryview(Engine.alloc(...))) are "
     "exported; the engine stays open then."},
    {"__enter__", (PyCFunction)Engine_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Engine_exit, METH_VARARGS, NULL},
    {"fileno", (PyCFunction)Engine_fileno, METH_NOARGS,
     "fileno()\n--\n\nThe engine's event fd: readable when a task completes or a "
     "notification arrives (for select, poll or asyncio's loop.add_reader)."},
    {"progress", (PyCFunction)Engine_progress, METH_NOARGS,
     "progress()\n--\n\nProgress the engine once from this thread without blocking "
     "(ote_engine_progress); True if a worker was progressed, False if every one was "
     "busy in another thread. For callers that poll Batch.status() in a loop."},
    {"clear_event", (PyCFunction)Engine_clear_event, METH_NOARGS,
     "clear_event()\n--\n\nRead the event fd once (clears it); True if it was set."},
    {"_register_buffer", (PyCFunction)Engine_register_buffer, METH_VARARGS, NULL},
    {"_register_ptr", (PyCFunction)Engine_register_ptr, METH_VARARGS, NULL},
    {"alloc", (PyCFunction)(void (*)(void))Engine_alloc, METH_VARARGS | METH_KEYWORDS,
     "alloc(length, location=None, access=REMOTE_READ|REMOTE_WRITE)\n--\n\n"
     "Engine-owned page-aligned memory, registered; host memory (location None, 'cpu:N' "
     "or pinned 'cuda_host:N'; not 'cuda:N') exports the buffer protocol "
     "(memoryview(mem))."},
    {"open", (PyCFunction)Engine_open, METH_VARARGS,
     "open(name)\n--\n\nOpen a peer by segment name ('host:port' with the peer-to-peer "
     "metadata); blocks for at most OTE_CONNECT_TIMEOUT_MS."},
    {"desc_export", (PyCFunction)Engine_desc_export, METH_NOARGS,
     "desc_export()\n--\n\nThis engine's current descriptor as bytes, signed under "
     "OTE_AUTH_KEY as its metadata store record (ote_engine_desc_export)."},
    {"open_desc", (PyCFunction)(void (*)(void))Engine_open_desc, METH_VARARGS | METH_KEYWORDS,
     "open_desc(desc, name=None)\n--\n\nOpen a peer from its desc_export() bytes, checked "
     "and verified (ConnectionError, status AUTH or PROTOCOL); name only labels the "
     "Segment. Later re-reads go to the peer (ote_segment_open_desc)."},
    {"batch", (PyCFunction)(void (*)(void))Engine_batch, METH_VARARGS | METH_KEYWORDS,
     "batch(capacity=1024)\n--\n\nA batch holding at most capacity tasks over its life."},
    {"transfer", (PyCFunction)(void (*)(void))Engine_transfer, METH_VARARGS | METH_KEYWORDS,
     "transfer(op, local_addrs, remote_addrs, lengths, local_index=None, remote_index=None, "
     "remote_lengths=None, merge=False)\n--\n\nA Transfer: these requests (sequences or "
     "arrays of 64-bit integers, at least one), posted again and again. With the indices "
     "(sequences or 1-D arrays of 32- or 64-bit integers), request k is (local_addrs[li[k]], "
     "remote_addrs[ri[k]], lengths[li[k]]), remote_lengths[ri[k]] equal to that length "
     "(IndexError, InvalidParamError otherwise); with merge, runs of requests contiguous on "
     "both sides are one request."},
    {"send", (PyCFunction)Engine_send, METH_VARARGS,
     "send(segment, msg)\n--\n\nSend a notification (bytes-like, at most NOTIFY_MAX bytes); "
     "returns once the peer queued it, exactly once. Raises BusyError when the peer's "
     "backlog stayed full for OTE_NOTIFY_TIMEOUT_MS."},
    {"recv", (PyCFunction)(void (*)(void))Engine_recv, METH_VARARGS | METH_KEYWORDS,
     "recv(max=64)\n--\n\nUp to max received notifications, oldest first, as a list of "
     "Notification(sender, data); never blocks."},
    {"stats", (PyCFunction)Engine_stats, METH_NOARGS,
     "stats()\n--\n\nThe engine's series as the metrics endpoint serves them (without the "
     "engine label): a list of (name, labels, value), labels a dict (ote_engine_stats)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Engine_getset[] = {
    {"name", (getter)Engine_get_name, NULL, "The segment name peers open.", NULL},
    {"closed", (getter)Engine_get_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte._ote.Engine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc       = "Engine(name=None, listen_addr=None, metadata=None)\n--\n\n"
                    "An engine (ote_engine_create): reads the OTE_* environment.",
    .tp_new       = PyType_GenericNew,
    .tp_init      = (initproc)Engine_init,
    .tp_dealloc   = (destructor)Engine_dealloc,
    .tp_traverse  = (traverseproc)Engine_traverse,
    .tp_clear     = (inquiry)Engine_clear,
    .tp_free      = PyObject_GC_Del,
    .tp_methods   = Engine_methods,
    .tp_getset    = Engine_getset,
};
