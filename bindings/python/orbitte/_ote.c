/*
 * orbitte._ote: the CPython extension over libote.
 *
 * Objects: Engine, Memory (a registration), Segment (an opened peer) and
 * Batch. Memory, Segment and Batch hold a reference to their Engine, so an
 * engine outlives them unless Engine.close() is called first; then they
 * are void (the engine released them): every call on them raises
 * InvalidParamError, entering a with block included, except the releasing
 * calls (Memory.deregister(), Segment.close(), Batch.release(), leaving a
 * with block), which are idempotent: on a void object they only drop what
 * the Python object itself holds (a registered buffer's export and the
 * object kept alive) and return None. Every call that can wait releases the
 * GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ote/ote.h>

#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ---- errors ------------------------------------------------------------- */

/*
 * The exception classes are defined in Python (orbitte/_errors.py), which
 * hands them here with _set_errors(base, {status: class}).
 */
static PyObject *Error;
static PyObject *status_class[32]; /* by -status; NULL: Error */

static PyObject *error_class(ote_status_t status)
{
    int idx = -(int)status;

    if (idx > 0 && idx < (int)(sizeof(status_class) / sizeof(status_class[0])) &&
        status_class[idx] != NULL)
        return status_class[idx];
    return Error != NULL ? Error : PyExc_RuntimeError;
}

static PyObject *raise_status(ote_status_t status, const char *what)
{
    PyObject *cls = error_class(status), *exc;

    exc = PyObject_CallFunction(cls, "isz", (int)status, ote_status_string(status), what);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

/* An invalid argument found here, before the library was called. */
static PyObject *raise_invalid(const char *what, const char *why)
{
    PyObject *cls = error_class(OTE_ERR_INVALID_PARAM), *exc;

    exc = PyObject_CallFunction(cls, "isz", (int)OTE_ERR_INVALID_PARAM, why, what);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_closed(const char *what)
{
    char why[64];

    snprintf(why, sizeof(why), "the %s is closed", what);
    return raise_invalid(NULL, why);
}

/* ---- types -------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    ote_engine_h e; /* NULL once closed */
    char         name[300];
} EngineObject;

typedef struct {
    PyObject_HEAD
    EngineObject *engine;
    ote_mem_h     mem;      /* NULL once deregistered */
    void         *addr;
    size_t        length;
    unsigned      access;
    int           host;     /* host memory: exports the buffer protocol */
    int           readonly; /* a read-only buffer: local READs into it are refused */
    int           owned;    /* from ote_mem_alloc */
    int           exports;  /* buffer views handed out */
    Py_buffer     view;     /* the exporter's buffer, when registered from one */
    int           has_view;
    PyObject     *keep;     /* the object whose memory this is, kept alive */
} MemoryObject;

typedef struct {
    PyObject_HEAD
    EngineObject *engine;
    ote_segment_h seg; /* NULL once closed */
    PyObject     *name;
} SegmentObject;

typedef struct {
    PyObject_HEAD
    EngineObject *engine;
    ote_batch_h   batch; /* NULL once released */
    size_t        capacity;
} BatchObject;

static PyTypeObject EngineType, MemoryType, SegmentType, BatchType;
static PyTypeObject TaskStatusType, RegionType, NotificationType, BatchTelemetryType;

static PyStructSequence_Field task_status_fields[] = {
    {"state", "the task's state: PENDING, COMPLETED, FAILED, CANCELED or TIMEOUT"},
    {"error", "why it did not complete (a status code; 0 when it did)"},
    {"transferred", "bytes known to have arrived"},
    {NULL, NULL}};
static PyStructSequence_Desc task_status_desc = {"orbitte.TaskStatus",
                                                 "One task's state, error and bytes moved.",
                                                 task_status_fields, 3};
static PyStructSequence_Field region_fields[] = {{"addr", "start address on the peer"},
                                                 {"length", "bytes"},
                                                 {"location", "'cpu:N' or 'cuda:N'"},
                                                 {"access", "REMOTE_READ | REMOTE_WRITE"},
                                                 {NULL, NULL}};
static PyStructSequence_Desc region_desc = {"orbitte.Region", "A region a peer published.",
                                            region_fields, 4};
static PyStructSequence_Field notification_fields[] = {
    {"sender", "the sender's segment name"}, {"data", "the message (bytes)"}, {NULL, NULL}};
static PyStructSequence_Desc notification_desc = {"orbitte.Notification",
                                                  "A received notification.",
                                                  notification_fields, 2};

static PyStructSequence_Field batch_telemetry_fields[] = {
    {"start_us", "first submit, microseconds since the Unix epoch (0 before any)"},
    {"post_ns", "nanoseconds spent inside the batch's submit calls"},
    {"xfer_ns", "nanoseconds from the first submit to the end of the last task that ended"},
    {"bytes", "bytes transferred by the tasks that ended"},
    {"requests", "requests submitted"},
    {"ended", "of which ended (any state)"},
    {"completed", "of which COMPLETED"},
    {NULL, NULL}};
static PyStructSequence_Desc batch_telemetry_desc = {
    "orbitte.BatchTelemetry", "What a batch did so far (ote_batch_telemetry).",
    batch_telemetry_fields, 7};

static int engine_check(EngineObject *eo)
{
    if (eo->e == NULL) {
        raise_closed("engine");
        return -1;
    }
    return 0;
}

/* ---- Engine --------------------------------------------------------------- */

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

static void engine_close(EngineObject *self)
{
    ote_engine_h e = self->e;

    if (e == NULL)
        return;
    self->e = NULL;
    Py_BEGIN_ALLOW_THREADS
    ote_engine_destroy(e);
    Py_END_ALLOW_THREADS
}

static void Engine_dealloc(EngineObject *self)
{
    engine_close(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Engine_close(EngineObject *self, PyObject *unused)
{
    (void)unused;
    engine_close(self);
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
    engine_close(self);
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

static MemoryObject *memory_new(EngineObject *engine)
{
    MemoryObject *m = PyObject_New(MemoryObject, &MemoryType);

    if (m == NULL)
        return NULL;
    Py_INCREF(engine);
    m->engine   = engine;
    m->mem      = NULL;
    m->addr     = NULL;
    m->length   = 0;
    m->access   = 0;
    m->host     = 0;
    m->readonly = 0;
    m->owned    = 0;
    m->exports  = 0;
    m->has_view = 0;
    m->keep     = NULL;
    memset(&m->view, 0, sizeof(m->view));
    return m;
}

static int memory_register(MemoryObject *m, const char *location)
{
    ote_mem_desc_t d = {.addr = m->addr, .length = m->length, .location = location,
                        .access = m->access};
    ote_mem_h h;
    ote_status_t st;

    Py_BEGIN_ALLOW_THREADS
    st = ote_mem_register(m->engine->e, &d, 1, &h);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK) {
        raise_status(st, "Engine.register()");
        return -1;
    }
    m->mem = h;
    return 0;
}

/*
 * _register_buffer(obj, location, access): registers an object exporting
 * the buffer protocol (C-contiguous); the registration holds the export.
 */
static PyObject *Engine_register_buffer(EngineObject *self, PyObject *args)
{
    PyObject *obj;
    const char *location = NULL;
    unsigned int access;
    MemoryObject *m;

    if (!PyArg_ParseTuple(args, "OzI:_register_buffer", &obj, &location, &access))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    m = memory_new(self);
    if (m == NULL)
        return NULL;
    if (PyObject_GetBuffer(obj, &m->view, PyBUF_C_CONTIGUOUS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    m->has_view = 1;
    if (m->view.readonly && (access & OTE_ACCESS_REMOTE_WRITE)) {
        Py_DECREF(m);
        raise_invalid(NULL,
                        "a read-only buffer cannot be registered for REMOTE_WRITE");
        return NULL;
    }
    m->addr     = m->view.buf;
    m->length   = (size_t)m->view.len;
    m->access   = access;
    m->host     = 1;
    m->readonly = m->view.readonly;
    if (memory_register(m, location) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

/*
 * _register_ptr(addr, nbytes, location, access, keep, host, readonly):
 * registers raw memory; keep is held until deregistration.
 */
static PyObject *Engine_register_ptr(EngineObject *self, PyObject *args)
{
    unsigned long long addr, nbytes;
    const char *location = NULL;
    unsigned int access;
    PyObject *keep;
    int host, readonly;
    MemoryObject *m;

    if (!PyArg_ParseTuple(args, "KKzIOpp:_register_ptr", &addr, &nbytes, &location, &access,
                          &keep, &host, &readonly))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (addr == 0 || nbytes == 0) {
        raise_invalid(NULL,
                        "register: address and length must be nonzero");
        return NULL;
    }
    if (readonly && (access & OTE_ACCESS_REMOTE_WRITE)) {
        raise_invalid(NULL,
                        "read-only memory cannot be registered for REMOTE_WRITE");
        return NULL;
    }
    m = memory_new(self);
    if (m == NULL)
        return NULL;
    m->addr     = (void *)(uintptr_t)addr;
    m->length   = (size_t)nbytes;
    m->access   = access;
    m->host     = host;
    m->readonly = readonly;
    if (keep != Py_None) {
        Py_INCREF(keep);
        m->keep = keep;
    }
    if (memory_register(m, location) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static PyObject *Engine_alloc(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "location", "access", NULL};
    Py_ssize_t length;
    const char *location = NULL;
    unsigned int access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE;
    MemoryObject *m;
    ote_mem_h h;
    void *addr;
    ote_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|zI:alloc", kwlist, &length, &location,
                                     &access))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (length <= 0) {
        raise_invalid(NULL, "alloc: length must be > 0");
        return NULL;
    }
    m = memory_new(self);
    if (m == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ote_mem_alloc(self->e, (size_t)length, location, access, &addr, &h);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK) {
        Py_DECREF(m);
        return raise_status(st, "Engine.alloc()");
    }
    m->mem    = h;
    m->addr   = addr;
    m->length = (size_t)length;
    m->access = access;
    m->owned  = 1;
    m->host   = location == NULL || strncmp(location, "cuda", 4) != 0;
    return (PyObject *)m;
}

static PyObject *Engine_open(EngineObject *self, PyObject *args)
{
    PyObject *name_obj;
    const char *name;
    SegmentObject *s;
    ote_segment_h seg;
    ote_status_t st;

    if (!PyArg_ParseTuple(args, "U:open", &name_obj))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    name = PyUnicode_AsUTF8(name_obj);
    if (name == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_open(self->e, name, &seg);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK) {
        char what[320];

        snprintf(what, sizeof(what), "Engine.open('%.280s')", name);
        return raise_status(st, what);
    }
    s = PyObject_New(SegmentObject, &SegmentType);
    if (s == NULL) {
        ote_segment_close(seg);
        return NULL;
    }
    Py_INCREF(self);
    s->engine = self;
    s->seg    = seg;
    Py_INCREF(name_obj);
    s->name = name_obj;
    return (PyObject *)s;
}

/* This engine's descriptor as the signed bytes of ote_engine_desc_export(). */
static PyObject *Engine_desc_export(EngineObject *self, PyObject *unused)
{
    PyObject *out;
    void *buf = NULL;
    size_t len = 0;
    ote_status_t st;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    st = ote_engine_desc_export(self->e, &buf, &len);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK)
        return raise_status(st, "Engine.desc_export()");
    out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return out;
}

/* A peer opened from its desc_export() bytes (ote_segment_open_desc); name labels it. */
static PyObject *Engine_open_desc(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"desc", "name", NULL};
    PyObject *name_obj = NULL;
    Py_buffer desc;
    SegmentObject *s;
    ote_segment_h seg;
    ote_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|U:open_desc", kwlist, &desc, &name_obj))
        return NULL;
    if (engine_check(self) < 0) {
        PyBuffer_Release(&desc);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_open_desc(self->e, desc.buf, (size_t)desc.len, &seg);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&desc);
    if (st != OTE_OK)
        return raise_status(st, st == OTE_ERR_AUTH
                                    ? "Engine.open_desc(): the descriptor's signature does not "
                                      "match OTE_AUTH_KEY (altered, unsigned or another key)"
                                    : "Engine.open_desc()");
    s = PyObject_New(SegmentObject, &SegmentType);
    if (s == NULL) {
        ote_segment_close(seg);
        return NULL;
    }
    if (name_obj == NULL)
        name_obj = Py_None;
    Py_INCREF(self);
    s->engine = self;
    s->seg    = seg;
    Py_INCREF(name_obj);
    s->name = name_obj;
    return (PyObject *)s;
}

static PyObject *Engine_batch(EngineObject *self, PyObject *args, PyObject *kw)
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
    st = ote_batch_create(self->e, (size_t)capacity, &h);
    if (st != OTE_OK)
        return raise_status(st, "Engine.batch()");
    b = PyObject_New(BatchObject, &BatchType);
    if (b == NULL) {
        ote_batch_release(h);
        return NULL;
    }
    Py_INCREF(self);
    b->engine   = self;
    b->batch    = h;
    b->capacity = (size_t)capacity;
    return (PyObject *)b;
}

static PyObject *Engine_send(EngineObject *self, PyObject *args)
{
    PyObject *seg_obj;
    Py_buffer msg;
    SegmentObject *s;
    ote_status_t st;

    if (!PyArg_ParseTuple(args, "O!y*:send", &SegmentType, &seg_obj, &msg))
        return NULL;
    s = (SegmentObject *)seg_obj;
    if (engine_check(self) < 0 || s->engine != self || s->seg == NULL) {
        PyBuffer_Release(&msg);
        if (!PyErr_Occurred())
            raise_invalid(NULL,
                            s->seg == NULL ? "send: the segment is closed"
                                           : "send: the segment belongs to another engine");
        return NULL;
    }
    if ((size_t)msg.len > OTE_NOTIFY_MAX) {
        PyBuffer_Release(&msg);
        return raise_invalid("Engine.send()", "a notification holds at most NOTIFY_MAX bytes");
    }
    Py_BEGIN_ALLOW_THREADS
    st = ote_notify_send(self->e, s->seg, msg.buf, (size_t)msg.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&msg);
    if (st != OTE_OK)
        return raise_status(st, "Engine.send()");
    Py_RETURN_NONE;
}

static PyObject *Engine_recv(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max", NULL};
    Py_ssize_t max = 64;
    ote_notif_t *n;
    size_t count = 0;
    ote_status_t st;
    PyObject *list;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|n:recv", kwlist, &max))
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (max <= 0 || max > 65536) {
        raise_invalid(NULL, "recv: max must be 1..65536");
        return NULL;
    }
    n = PyMem_Malloc((size_t)max * sizeof(*n));
    if (n == NULL)
        return PyErr_NoMemory();
    st = ote_notify_recv(self->e, n, (size_t)max, &count);
    if (st != OTE_OK) {
        PyMem_Free(n);
        return raise_status(st, "Engine.recv()");
    }
    list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        PyObject *item = PyStructSequence_New(&NotificationType), *from, *data;

        from = PyUnicode_DecodeUTF8(n[i].from, (Py_ssize_t)strnlen(n[i].from, sizeof(n[i].from)),
                                    "replace");
        data = PyBytes_FromStringAndSize(n[i].data, (Py_ssize_t)n[i].length);
        if (item == NULL || from == NULL || data == NULL) {
            Py_XDECREF(item);
            Py_XDECREF(from);
            Py_XDECREF(data);
            Py_CLEAR(list);
            break;
        }
        PyStructSequence_SetItem(item, 0, from);
        PyStructSequence_SetItem(item, 1, data);
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
    PyMem_Free(n);
    return list;
}

/* One non-blocking progress pass from the calling thread (ote_engine_progress),
 * the GIL released: a caller that polls a batch gets its answers without a hand-off
 * to a worker thread. */
static PyObject *Engine_progress(EngineObject *self, PyObject *unused)
{
    ote_engine_h e;
    ote_status_t st;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    e = self->e;
    Py_BEGIN_ALLOW_THREADS
    st = ote_engine_progress(e);
    Py_END_ALLOW_THREADS
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

/* ---- Engine.stats ------------------------------------------------------------ */

/* k="v",... (exposition form: \\ \" \n escaped) into a dict; NULL with an exception set. */
static PyObject *stats_labels(const char *s)
{
    PyObject *d = PyDict_New();
    char *val   = PyMem_Malloc(strlen(s) + 1);

    if (d == NULL || val == NULL) {
        Py_XDECREF(d);
        PyMem_Free(val);
        return PyErr_NoMemory();
    }
    while (*s != '\0') {
        const char *eq = strchr(s, '=');
        PyObject *k, *v;
        size_t n = 0;
        int rc;

        if (eq == NULL || eq[1] != '"')
            break; /* not the library's form: what was read so far */
        k = PyUnicode_FromStringAndSize(s, eq - s);
        for (s = eq + 2; *s != '\0' && *s != '"'; s++) {
            if (*s == '\\' && s[1] != '\0') {
                s++;
                val[n++] = *s == 'n' ? '\n' : *s;
            } else {
                val[n++] = *s;
            }
        }
        v  = PyUnicode_DecodeUTF8(val, (Py_ssize_t)n, "replace");
        rc = (k != NULL && v != NULL) ? PyDict_SetItem(d, k, v) : -1;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (rc < 0) {
            Py_DECREF(d);
            PyMem_Free(val);
            return NULL;
        }
        if (*s == '"')
            s++;
        if (*s == ',')
            s++;
    }
    PyMem_Free(val);
    return d;
}

static int stats_cb(void *arg, const ote_stat_t *st)
{
    PyObject *list = arg, *labels, *item;
    int rc;

    labels = stats_labels(st->labels);
    if (labels == NULL)
        return 1;
    item = Py_BuildValue("(sNd)", st->name, labels, st->value);
    if (item == NULL)
        return 1;
    rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc < 0;
}

static PyObject *Engine_stats(EngineObject *self, PyObject *unused)
{
    PyObject *list;
    ote_status_t st;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    list = PyList_New(0);
    if (list == NULL)
        return NULL;
    /* The GIL stays held: the callback builds Python objects (the walk never waits). */
    st = ote_engine_stats(self->e, stats_cb, list);
    if (PyErr_Occurred() || st != OTE_OK) {
        Py_DECREF(list);
        return st != OTE_OK && !PyErr_Occurred() ? raise_status(st, "stats") : NULL;
    }
    return list;
}

static PyMethodDef Engine_methods[] = {
    {"close", (PyCFunction)Engine_close, METH_NOARGS,
     "close()\n--\n\nDestroy the engine: tasks in flight end CANCELED; its batches, segments "
     "and registrations are released. Idempotent."},
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
     "Engine-owned page-aligned memory, registered; host memory exports the buffer "
     "protocol (memoryview(mem))."},
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

/* ---- Memory --------------------------------------------------------------- */

static int memory_release(MemoryObject *m)
{
    ote_status_t st = OTE_OK;

    if (m->exports > 0) {
        PyErr_SetString(PyExc_BufferError,
                        "deregister: views of this memory are still exported");
        return -1;
    }
    if (m->mem != NULL && m->engine->e != NULL) {
        ote_mem_h h = m->mem;
        ote_engine_h e = m->engine->e;

        Py_BEGIN_ALLOW_THREADS
        st = m->owned ? ote_mem_free(e, h) : ote_mem_deregister(e, h);
        Py_END_ALLOW_THREADS
    }
    m->mem = NULL;
    if (m->has_view) {
        PyBuffer_Release(&m->view);
        m->has_view = 0;
    }
    Py_CLEAR(m->keep);
    if (st != OTE_OK) {
        raise_status(st, "Memory.deregister()");
        return -1;
    }
    return 0;
}

static void Memory_dealloc(MemoryObject *m)
{
    PyObject *t, *v, *tb;

    PyErr_Fetch(&t, &v, &tb);
    m->exports = 0;
    if (memory_release(m) < 0)
        PyErr_WriteUnraisable((PyObject *)m);
    PyErr_Restore(t, v, tb);
    Py_CLEAR(m->engine);
    PyObject_Free(m);
}

static PyObject *Memory_deregister(MemoryObject *m, PyObject *unused)
{
    (void)unused;
    if (memory_release(m) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Memory_enter(MemoryObject *m, PyObject *unused)
{
    (void)unused;
    if (engine_check(m->engine) < 0)
        return NULL;
    if (m->mem == NULL)
        return raise_invalid(NULL, "the memory is deregistered");
    Py_INCREF(m);
    return (PyObject *)m;
}

static PyObject *Memory_exit(MemoryObject *m, PyObject *args)
{
    (void)args;
    if (memory_release(m) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *Memory_repr(MemoryObject *m)
{
    return PyUnicode_FromFormat("<orbitte.Memory addr=0x%llx length=%zu access=%u%s>",
                                (unsigned long long)(uintptr_t)m->addr, m->length, m->access,
                                m->mem == NULL ? " deregistered" : "");
}

static int Memory_getbuffer(MemoryObject *m, Py_buffer *view, int flags)
{
    if (m->mem == NULL || m->engine->e == NULL) {
        PyErr_SetString(PyExc_BufferError, "the memory is deregistered");
        return -1;
    }
    if (!m->host) {
        PyErr_SetString(PyExc_BufferError, "device memory has no host buffer");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)m, m->addr, (Py_ssize_t)m->length, m->readonly,
                          flags) < 0)
        return -1;
    m->exports++;
    return 0;
}

static void Memory_releasebuffer(MemoryObject *m, Py_buffer *view)
{
    (void)view;
    if (m->exports > 0)
        m->exports--;
}

static PyBufferProcs Memory_as_buffer = {(getbufferproc)Memory_getbuffer,
                                         (releasebufferproc)Memory_releasebuffer};

static PyObject *Memory_get_addr(MemoryObject *m, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)m->addr);
}

static PyObject *Memory_get_length(MemoryObject *m, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(m->length);
}

static PyObject *Memory_get_access(MemoryObject *m, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(m->access);
}

static PyObject *Memory_get_registered(MemoryObject *m, void *unused)
{
    (void)unused;
    return PyBool_FromLong(m->mem != NULL && m->engine->e != NULL);
}

static PyMethodDef Memory_methods[] = {
    {"deregister", (PyCFunction)Memory_deregister, METH_NOARGS,
     "deregister()\n--\n\nDrop the registration (engine-allocated memory is freed); "
     "transfers already using it drain first. Idempotent; once the engine is closed (it "
     "released the registration) it only lets go of the registered object and its "
     "buffer export."},
    {"__enter__", (PyCFunction)Memory_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Memory_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Memory_getset[] = {
    {"addr", (getter)Memory_get_addr, NULL, "Start address (int).", NULL},
    {"length", (getter)Memory_get_length, NULL, "Length in bytes.", NULL},
    {"access", (getter)Memory_get_access, NULL, "REMOTE_READ | REMOTE_WRITE flags.", NULL},
    {"registered", (getter)Memory_get_registered, NULL, "False once deregistered.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* ---- Segment -------------------------------------------------------------- */

static int segment_check(SegmentObject *s)
{
    if (s->engine->e == NULL) {
        raise_closed("engine");
        return -1;
    }
    if (s->seg == NULL) {
        raise_closed("segment");
        return -1;
    }
    return 0;
}

static int segment_close(SegmentObject *s)
{
    ote_segment_h seg = s->seg;
    ote_status_t st;

    s->seg = NULL;
    if (seg == NULL || s->engine->e == NULL)
        return 0;
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_close(seg);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK) {
        raise_status(st, "Segment.close()");
        return -1;
    }
    return 0;
}

static void Segment_dealloc(SegmentObject *s)
{
    PyObject *t, *v, *tb;

    PyErr_Fetch(&t, &v, &tb);
    if (segment_close(s) < 0)
        PyErr_WriteUnraisable((PyObject *)s);
    PyErr_Restore(t, v, tb);
    Py_CLEAR(s->name);
    Py_CLEAR(s->engine);
    PyObject_Free(s);
}

static PyObject *Segment_close(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    if (segment_close(s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Segment_enter(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    Py_INCREF(s);
    return (PyObject *)s;
}

static PyObject *Segment_exit(SegmentObject *s, PyObject *args)
{
    (void)args;
    if (segment_close(s) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *Segment_regions(SegmentObject *s, PyObject *unused)
{
    ote_region_info_t *r = NULL;
    size_t count = 0, max = 0;
    ote_status_t st;
    PyObject *list;

    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    for (;;) {
        st = ote_segment_regions(s->seg, r, max, &count);
        if (st != OTE_OK) {
            PyMem_Free(r);
            return raise_status(st, "Segment.regions()");
        }
        if (count <= max)
            break;
        PyMem_Free(r);
        max = count;
        r   = PyMem_Malloc(max * sizeof(*r));
        if (r == NULL)
            return PyErr_NoMemory();
    }
    list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        PyObject *item = PyStructSequence_New(&RegionType);
        PyObject *f[4];

        f[0] = PyLong_FromUnsignedLongLong(r[i].addr);
        f[1] = PyLong_FromSize_t(r[i].length);
        f[2] = PyUnicode_DecodeUTF8(r[i].location,
                                    (Py_ssize_t)strnlen(r[i].location, sizeof(r[i].location)),
                                    "replace");
        f[3] = PyLong_FromUnsignedLong(r[i].access);
        if (item == NULL || !f[0] || !f[1] || !f[2] || !f[3]) {
            Py_XDECREF(item);
            for (int k = 0; k < 4; k++)
                Py_XDECREF(f[k]);
            Py_CLEAR(list);
            break;
        }
        for (int k = 0; k < 4; k++)
            PyStructSequence_SetItem(item, k, f[k]);
        PyList_SetItem(list, (Py_ssize_t)i, item);
    }
    PyMem_Free(r);
    return list;
}

static PyObject *Segment_refresh(SegmentObject *s, PyObject *unused)
{
    ote_status_t st;
    ote_segment_h seg;

    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    seg = s->seg;
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_refresh(seg);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK)
        return raise_status(st, "Segment.refresh()");
    Py_RETURN_NONE;
}

static PyObject *Segment_reopen(SegmentObject *s, PyObject *unused)
{
    ote_status_t st;
    ote_segment_h seg;
    int restarted = 0;

    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    seg = s->seg;
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_reopen(seg, &restarted);
    Py_END_ALLOW_THREADS
    if (st != OTE_OK)
        return raise_status(st, "Segment.reopen()");
    return PyBool_FromLong(restarted);
}

static PyObject *Segment_get_name(SegmentObject *s, void *unused)
{
    (void)unused;
    Py_INCREF(s->name);
    return s->name;
}

static PyObject *Segment_get_closed(SegmentObject *s, void *unused)
{
    (void)unused;
    return PyBool_FromLong(s->seg == NULL || s->engine->e == NULL);
}

static PyObject *Segment_repr(SegmentObject *s)
{
    return PyUnicode_FromFormat("<orbitte.Segment %R%s>", s->name,
                                s->seg == NULL ? " closed" : "");
}

static PyMethodDef Segment_methods[] = {
    {"close", (PyCFunction)Segment_close, METH_NOARGS,
     "close()\n--\n\nClose the segment; tasks in flight against it end CANCELED. "
     "Idempotent; does nothing once the engine is closed (the engine closed it)."},
    {"__enter__", (PyCFunction)Segment_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Segment_exit, METH_VARARGS, NULL},
    {"regions", (PyCFunction)Segment_regions, METH_NOARGS,
     "regions()\n--\n\nThe regions the peer published, as a list of Region(addr, length, "
     "location, access)."},
    {"refresh", (PyCFunction)Segment_refresh, METH_NOARGS,
     "refresh()\n--\n\nFetch the peer's descriptor again. Raises PeerRestartedError when "
     "another instance now serves the name (the segment stays bound to the old one)."},
    {"reopen", (PyCFunction)Segment_reopen, METH_NOARGS,
     "reopen()\n--\n\nBind the segment to the instance serving its name now. Returns True "
     "when the instance changed: every address the old one published is void."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Segment_getset[] = {
    {"name", (getter)Segment_get_name, NULL, "The name the segment was opened with.", NULL},
    {"closed", (getter)Segment_get_closed, NULL, "True once closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* ---- Batch ---------------------------------------------------------------- */

static int batch_check(BatchObject *b)
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

static void batch_release(BatchObject *b)
{
    if (b->batch != NULL && b->engine->e != NULL)
        ote_batch_release(b->batch);
    b->batch = NULL;
}

static void Batch_dealloc(BatchObject *b)
{
    batch_release(b);
    Py_CLEAR(b->engine);
    PyObject_Free(b);
}

static PyObject *Batch_release(BatchObject *b, PyObject *unused)
{
    (void)unused;
    batch_release(b);
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
    batch_release(b);
    Py_RETURN_FALSE;
}

/* A local address: an int, a Memory (its start), or (Memory, offset). */
static int local_address(PyObject *o, uint64_t *addr, int *readonly)
{
    *readonly = 0;
    if (PyObject_TypeCheck(o, &MemoryType)) {
        MemoryObject *m = (MemoryObject *)o;

        *addr     = (uint64_t)(uintptr_t)m->addr;
        *readonly = m->readonly;
        return 0;
    }
    if (PyTuple_Check(o) && PyTuple_GET_SIZE(o) == 2 &&
        PyObject_TypeCheck(PyTuple_GET_ITEM(o, 0), &MemoryType)) {
        MemoryObject *m = (MemoryObject *)PyTuple_GET_ITEM(o, 0);
        unsigned long long off = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(o, 1));

        if (off == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (off > m->length) {
            raise_invalid(NULL,
                            "submit: the offset is past the end of the memory");
            return -1;
        }
        *addr     = (uint64_t)(uintptr_t)m->addr + off;
        *readonly = m->readonly;
        return 0;
    }
    if (PyLong_Check(o)) {
        unsigned long long v = PyLong_AsUnsignedLongLong(o);

        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *addr = v;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError,
                    "a local address is an int, a Memory or a (Memory, offset) tuple");
    return -1;
}

static int op_value(PyObject *o, ote_op_t *op)
{
    long v = PyLong_AsLong(o);

    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v != OTE_OP_READ && v != OTE_OP_WRITE) {
        raise_invalid(NULL, "op must be READ or WRITE");
        return -1;
    }
    *op = (ote_op_t)v;
    return 0;
}

static PyObject *batch_post(BatchObject *b, SegmentObject *s, ote_xfer_req_t *reqs, size_t n,
                            Py_buffer *notify)
{
    ote_status_t st;
    size_t first = 0;
    ote_batch_h batch = b->batch;

    Py_BEGIN_ALLOW_THREADS
    if (notify != NULL)
        st = ote_batch_submit_notify(batch, reqs, n, notify->buf, (size_t)notify->len, &first);
    else
        st = ote_batch_submit(batch, reqs, n, &first);
    Py_END_ALLOW_THREADS
    (void)s;
    if (st != OTE_OK)
        return raise_status(st, "Batch.submit()");
    return PyLong_FromSize_t(first);
}

static int submit_prepare(BatchObject *b, PyObject *seg_obj, PyObject *notify_obj,
                          Py_buffer *notify, int *has_notify)
{
    SegmentObject *s = (SegmentObject *)seg_obj;

    *has_notify = 0;
    if (batch_check(b) < 0)
        return -1;
    if (s->engine != b->engine) {
        raise_invalid(NULL,
                        "submit: the segment belongs to another engine");
        return -1;
    }
    if (segment_check(s) < 0)
        return -1;
    if (notify_obj != Py_None) {
        if (PyObject_GetBuffer(notify_obj, notify, PyBUF_SIMPLE) < 0)
            return -1;
        *has_notify = 1;
        if ((size_t)notify->len > OTE_NOTIFY_MAX) {
            PyBuffer_Release(notify);
            *has_notify = 0;
            raise_invalid("Batch.submit()", "a notification holds at most NOTIFY_MAX bytes");
            return -1;
        }
    }
    return 0;
}

static PyObject *Batch_submit(BatchObject *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "requests", "notify", NULL};
    PyObject *seg_obj, *reqs_obj, *notify_obj = Py_None, *seq = NULL, *r = NULL;
    Py_buffer notify;
    int has_notify = 0;
    ote_xfer_req_t *reqs = NULL;
    Py_ssize_t n;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|O:submit", kwlist, &SegmentType, &seg_obj,
                                     &reqs_obj, &notify_obj))
        return NULL;
    if (submit_prepare(b, seg_obj, notify_obj, &notify, &has_notify) < 0)
        return NULL;
    seq = PySequence_Fast(reqs_obj, "submit: requests must be a sequence of "
                                    "(op, local, remote_addr, length) tuples");
    if (seq == NULL)
        goto out;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0) {
        raise_invalid(NULL, "submit: no requests");
        goto out;
    }
    reqs = PyMem_Calloc((size_t)n, sizeof(*reqs));
    if (reqs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        unsigned long long remote, length;
        uint64_t local;
        int ro;

        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
            PyErr_Format(PyExc_TypeError,
                         "submit: request %zd is not an (op, local, remote_addr, length) tuple",
                         i);
            goto out;
        }
        if (op_value(PyTuple_GET_ITEM(t, 0), &reqs[i].op) < 0 ||
            local_address(PyTuple_GET_ITEM(t, 1), &local, &ro) < 0)
            goto out;
        remote = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
        if (remote == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        length = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 3));
        if (length == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        if (ro && reqs[i].op == OTE_OP_READ) {
            char why[96];

            snprintf(why, sizeof(why), "request %zd READs into read-only memory", i);
            raise_invalid("Batch.submit()", why);
            goto out;
        }
        reqs[i].local_addr  = (void *)(uintptr_t)local;
        reqs[i].segment     = ((SegmentObject *)seg_obj)->seg;
        reqs[i].remote_addr = remote;
        reqs[i].length      = (size_t)length;
    }
    r = batch_post(b, (SegmentObject *)seg_obj, reqs, (size_t)n, has_notify ? &notify : NULL);
out:
    PyMem_Free(reqs);
    Py_XDECREF(seq);
    if (has_notify)
        PyBuffer_Release(&notify);
    return r;
}

/* n 64-bit values from a sequence of ints or a buffer of 8-byte unsigned integers. */
static int u64_array(PyObject *o, const char *what, uint64_t **out, Py_ssize_t *n_p)
{
    Py_buffer v;

    if (PyObject_CheckBuffer(o) && PyObject_GetBuffer(o, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) ==
                                       0) {
        const char *f = v.format ? v.format : "B";

        if (*f == '<' || *f == '=' || *f == '@')
            f++;
        if (v.itemsize != 8 || (strcmp(f, "Q") != 0 && strcmp(f, "L") != 0 &&
                                strcmp(f, "K") != 0 && strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
            PyBuffer_Release(&v);
            PyErr_Format(PyExc_TypeError, "submit_arrays: %s must hold 64-bit integers", what);
            return -1;
        }
        *n_p = v.len / 8;
        *out = PyMem_Malloc((size_t)(*n_p ? *n_p : 1) * 8);
        if (*out == NULL) {
            PyBuffer_Release(&v);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(*out, v.buf, (size_t)v.len);
        PyBuffer_Release(&v);
        return 0;
    }
    PyErr_Clear();
    {
        PyObject *seq = PySequence_Fast(o, "submit_arrays: expected a sequence or an array");

        if (seq == NULL)
            return -1;
        *n_p = PySequence_Fast_GET_SIZE(seq);
        *out = PyMem_Malloc((size_t)(*n_p ? *n_p : 1) * 8);
        if (*out == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < *n_p; i++) {
            unsigned long long x = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));

            if (x == (unsigned long long)-1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                PyMem_Free(*out);
                *out = NULL;
                return -1;
            }
            (*out)[i] = x;
        }
        Py_DECREF(seq);
    }
    return 0;
}

static PyObject *Batch_submit_arrays(BatchObject *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "op", "local_addrs", "remote_addrs", "lengths",
                             "notify", NULL};
    PyObject *seg_obj, *op_obj, *lo, *ro, *le, *notify_obj = Py_None, *r = NULL;
    uint64_t *la = NULL, *ra = NULL, *ln = NULL;
    Py_ssize_t nl = 0, nr = 0, nn = 0;
    ote_xfer_req_t *reqs = NULL;
    Py_buffer notify;
    int has_notify = 0;
    ote_op_t op;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOO|O:submit_arrays", kwlist, &SegmentType,
                                     &seg_obj, &op_obj, &lo, &ro, &le, &notify_obj))
        return NULL;
    if (op_value(op_obj, &op) < 0)
        return NULL;
    if (submit_prepare(b, seg_obj, notify_obj, &notify, &has_notify) < 0)
        return NULL;
    if (u64_array(lo, "local_addrs", &la, &nl) < 0 || u64_array(ro, "remote_addrs", &ra, &nr) < 0)
        goto out;
    if (PyLong_Check(le)) {
        unsigned long long one = PyLong_AsUnsignedLongLong(le);

        if (one == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        nn = nl;
        ln = PyMem_Malloc((size_t)(nn ? nn : 1) * 8);
        if (ln == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        for (Py_ssize_t i = 0; i < nn; i++)
            ln[i] = one;
    } else if (u64_array(le, "lengths", &ln, &nn) < 0) {
        goto out;
    }
    if (nl != nr || nl != nn || nl == 0) {
        char why[128];

        snprintf(why, sizeof(why), "%zd local, %zd remote addresses and %zd lengths", nl, nr,
                 nn);
        raise_invalid("Batch.submit_arrays()", why);
        goto out;
    }
    reqs = PyMem_Calloc((size_t)nl, sizeof(*reqs));
    if (reqs == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nl; i++)
        reqs[i] = (ote_xfer_req_t){.op = op, .local_addr = (void *)(uintptr_t)la[i],
                                   .segment = ((SegmentObject *)seg_obj)->seg,
                                   .remote_addr = ra[i], .length = (size_t)ln[i]};
    r = batch_post(b, (SegmentObject *)seg_obj, reqs, (size_t)nl, has_notify ? &notify : NULL);
out:
    PyMem_Free(reqs);
    PyMem_Free(la);
    PyMem_Free(ra);
    PyMem_Free(ln);
    if (has_notify)
        PyBuffer_Release(&notify);
    return r;
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

static PyObject *Batch_status(BatchObject *b, PyObject *args)
{
    PyObject *task_obj = Py_None;
    ote_task_status_t ts;
    ote_status_t st;

    if (!PyArg_ParseTuple(args, "|O:status", &task_obj))
        return NULL;
    if (batch_check(b) < 0)
        return NULL;
    if (task_obj == Py_None) {
        st = ote_batch_status(b->batch, &ts);
        if (st != OTE_OK)
            return raise_status(st, "Batch.status()");
        return PyLong_FromLong(ts.state);
    }
    {
        Py_ssize_t task = PyLong_AsSsize_t(task_obj);

        if (task == -1 && PyErr_Occurred())
            return NULL;
        if (task < 0) {
            raise_invalid(NULL, "status: no such task");
            return NULL;
        }
        st = ote_batch_task_status(b->batch, (size_t)task, &ts);
        if (st != OTE_OK)
            return raise_status(st, "Batch.status()");
        return task_status_object(&ts);
    }
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

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &timeout_obj))
        return NULL;
    if (batch_check(b) < 0)
        return NULL;
    if (timeout_obj != Py_None) {
        double t = PyFloat_AsDouble(timeout_obj);

        if (t == -1.0 && PyErr_Occurred())
            return NULL;
        if (t < 0) {
            raise_invalid(NULL, "wait: timeout must be >= 0");
            return NULL;
        }
        timeout_ms = t * 1000.0 > 2147483647.0 ? 2147483647 : (int)(t * 1000.0 + 0.5);
    }
    batch = b->batch;
    Py_BEGIN_ALLOW_THREADS
    st = ote_batch_wait(batch, timeout_ms);
    Py_END_ALLOW_THREADS
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
     "first .. first+len(requests)-1. Nothing is submitted when it raises."},
    {"submit_arrays", (PyCFunction)(void (*)(void))Batch_submit_arrays,
     METH_VARARGS | METH_KEYWORDS,
     "submit_arrays(segment, op, local_addrs, remote_addrs, lengths, notify=None)\n--\n\n"
     "As submit, from parallel sequences or arrays of 64-bit integers (numpy uint64); "
     "lengths may be one int for all. Returns the first task id."},
    {"status", (PyCFunction)Batch_status, METH_VARARGS,
     "status(task=None)\n--\n\nWith a task id: its TaskStatus(state, error, transferred). "
     "Without: the batch's summary state (PENDING while any task is, else FAILED if any "
     "failed, else COMPLETED)."},
    {"notify_status", (PyCFunction)Batch_notify_status, METH_VARARGS,
     "notify_status(task)\n--\n\nThe status of the notification submitted with task: "
     "INPROGRESS (1), OK (0) once the peer queued it, or why it was not delivered (<0)."},
    {"wait", (PyCFunction)(void (*)(void))Batch_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None)\n--\n\nBlock (GIL released) until every task ended and every "
     "notification was delivered or failed; returns the summary state. Raises TimeoutError "
     "after timeout seconds."},
    {"cancel", (PyCFunction)Batch_cancel, METH_VARARGS,
     "cancel(task)\n--\n\nCancel a task; it ends CANCELED once no posted slice can still land."},
    {"telemetry", (PyCFunction)Batch_telemetry, METH_NOARGS,
     "telemetry()\n--\n\nBatchTelemetry(start_us, post_ns, xfer_ns, bytes, requests, ended, "
     "completed): what the batch did so far (ote_batch_telemetry); never blocks. Final once "
     "ended == requests, until the next submit (the figures add up over submits)."},
    {"release", (PyCFunction)Batch_release, METH_NOARGS,
     "release()\n--\n\nRelease the batch; tasks in flight drain first. Idempotent; "
     "does nothing once the engine is closed (the engine released it)."},
    {"__enter__", (PyCFunction)Batch_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Batch_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Batch_getset[] = {
    {"capacity", (getter)Batch_get_capacity, NULL, "Tasks the batch can hold.", NULL},
    {"closed", (getter)Batch_get_closed, NULL,
     "True once released (or its engine closed).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

/* ---- module --------------------------------------------------------------- */

static PyObject *mod_status_string(PyObject *m, PyObject *args)
{
    int st;

    (void)m;
    if (!PyArg_ParseTuple(args, "i:status_string", &st))
        return NULL;
    return PyUnicode_FromString(ote_status_string((ote_status_t)st));
}

static PyObject *mod_raise_status(PyObject *m, PyObject *args)
{
    int st;
    const char *what = NULL;

    (void)m;
    if (!PyArg_ParseTuple(args, "i|z:_raise", &st, &what))
        return NULL;
    return raise_status((ote_status_t)st, what);
}

/* _set_errors(base, {status: class}): the exception classes raise_status uses. */
static PyObject *mod_set_errors(PyObject *m, PyObject *args)
{
    PyObject *base, *map, *k, *v;
    Py_ssize_t pos = 0;

    (void)m;
    if (!PyArg_ParseTuple(args, "OO!:_set_errors", &base, &PyDict_Type, &map))
        return NULL;
    while (PyDict_Next(map, &pos, &k, &v)) {
        long st = PyLong_AsLong(k);

        if (st == -1 && PyErr_Occurred())
            return NULL;
        if (st >= 0 || -st >= (long)(sizeof(status_class) / sizeof(status_class[0])))
            return PyErr_Format(PyExc_ValueError, "_set_errors: status %ld out of range", st);
        Py_INCREF(v);
        Py_XSETREF(status_class[-st], v);
    }
    Py_INCREF(base);
    Py_XSETREF(Error, base);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_set_errors", mod_set_errors, METH_VARARGS, NULL},
    {"status_string", mod_status_string, METH_VARARGS,
     "status_string(status)\n--\n\nThe message of a status code."},
    {"_raise", mod_raise_status, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "orbitte._ote",
                                       "The C extension under the orbitte package.", -1,
                                       module_methods, NULL, NULL, NULL, NULL};

static int init_type(PyObject *m, PyTypeObject *t, const char *name)
{
    if (PyType_Ready(t) < 0)
        return -1;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, (PyObject *)t) < 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__ote(void)
{
    PyObject *m = PyModule_Create(&moduledef);

    if (m == NULL)
        return NULL;

    EngineType = (PyTypeObject){PyVarObject_HEAD_INIT(NULL, 0)};
    EngineType.tp_name      = "orbitte._ote.Engine";
    EngineType.tp_basicsize = sizeof(EngineObject);
    EngineType.tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE;
    EngineType.tp_doc       = "Engine(name=None, listen_addr=None, metadata=None)\n--\n\n"
                              "An engine (ote_engine_create): reads the OTE_* environment.";
    EngineType.tp_new       = PyType_GenericNew;
    EngineType.tp_init      = (initproc)Engine_init;
    EngineType.tp_dealloc   = (destructor)Engine_dealloc;
    EngineType.tp_methods   = Engine_methods;
    EngineType.tp_getset    = Engine_getset;

    MemoryType = (PyTypeObject){PyVarObject_HEAD_INIT(NULL, 0)};
    MemoryType.tp_name      = "orbitte.Memory";
    MemoryType.tp_basicsize = sizeof(MemoryObject);
    MemoryType.tp_flags     = Py_TPFLAGS_DEFAULT;
    MemoryType.tp_doc       = "A registered region (Engine.register or Engine.alloc).";
    MemoryType.tp_dealloc   = (destructor)Memory_dealloc;
    MemoryType.tp_methods   = Memory_methods;
    MemoryType.tp_getset    = Memory_getset;
    MemoryType.tp_repr      = (reprfunc)Memory_repr;
    MemoryType.tp_as_buffer = &Memory_as_buffer;

    SegmentType = (PyTypeObject){PyVarObject_HEAD_INIT(NULL, 0)};
    SegmentType.tp_name      = "orbitte.Segment";
    SegmentType.tp_basicsize = sizeof(SegmentObject);
    SegmentType.tp_flags     = Py_TPFLAGS_DEFAULT;
    SegmentType.tp_doc       = "An opened peer (Engine.open).";
    SegmentType.tp_dealloc   = (destructor)Segment_dealloc;
    SegmentType.tp_methods   = Segment_methods;
    SegmentType.tp_getset    = Segment_getset;
    SegmentType.tp_repr      = (reprfunc)Segment_repr;

    BatchType = (PyTypeObject){PyVarObject_HEAD_INIT(NULL, 0)};
    BatchType.tp_name      = "orbitte.Batch";
    BatchType.tp_basicsize = sizeof(BatchObject);
    BatchType.tp_flags     = Py_TPFLAGS_DEFAULT;
    BatchType.tp_doc       = "A batch of READ/WRITE tasks (Engine.batch).";
    BatchType.tp_dealloc   = (destructor)Batch_dealloc;
    BatchType.tp_methods   = Batch_methods;
    BatchType.tp_getset    = Batch_getset;

    if (init_type(m, &EngineType, "Engine") < 0 || init_type(m, &MemoryType, "Memory") < 0 ||
        init_type(m, &SegmentType, "Segment") < 0 || init_type(m, &BatchType, "Batch") < 0)
        goto fail;
    if (PyStructSequence_InitType2(&TaskStatusType, &task_status_desc) < 0 ||
        PyStructSequence_InitType2(&RegionType, &region_desc) < 0 ||
        PyStructSequence_InitType2(&NotificationType, &notification_desc) < 0 ||
        PyStructSequence_InitType2(&BatchTelemetryType, &batch_telemetry_desc) < 0)
        goto fail;
    Py_INCREF(&TaskStatusType);
    PyModule_AddObject(m, "TaskStatus", (PyObject *)&TaskStatusType);
    Py_INCREF(&RegionType);
    PyModule_AddObject(m, "Region", (PyObject *)&RegionType);
    Py_INCREF(&NotificationType);
    PyModule_AddObject(m, "Notification", (PyObject *)&NotificationType);
    Py_INCREF(&BatchTelemetryType);
    PyModule_AddObject(m, "BatchTelemetry", (PyObject *)&BatchTelemetryType);

    PyModule_AddIntConstant(m, "READ", OTE_OP_READ);
    PyModule_AddIntConstant(m, "WRITE", OTE_OP_WRITE);
    PyModule_AddIntConstant(m, "REMOTE_READ", OTE_ACCESS_REMOTE_READ);
    PyModule_AddIntConstant(m, "REMOTE_WRITE", OTE_ACCESS_REMOTE_WRITE);
    PyModule_AddIntConstant(m, "NOTIFY_MAX", OTE_NOTIFY_MAX);
    PyModule_AddIntConstant(m, "PENDING", OTE_TASK_PENDING);
    PyModule_AddIntConstant(m, "COMPLETED", OTE_TASK_COMPLETED);
    PyModule_AddIntConstant(m, "FAILED", OTE_TASK_FAILED);
    PyModule_AddIntConstant(m, "CANCELED", OTE_TASK_CANCELED);
    PyModule_AddIntConstant(m, "TIMEOUT", OTE_TASK_TIMEOUT);
    PyModule_AddStringConstant(m, "library_version", ote_version());
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
