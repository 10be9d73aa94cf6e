/*
 * orbitte.Memory: a registration (Engine._register_buffer, Engine._register_ptr)
 * or engine-owned memory (Engine.alloc); host memory exports the buffer
 * protocol, and a registration holds the object whose memory it is.
 */
#include "module.h"

static MemoryObject *memory_new(EngineObject *engine)
{
    MemoryObject *m = PyObject_GC_New(MemoryObject, &MemoryType);

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
    m->holders  = 0;
    m->mark     = 0;
    memset(&m->view, 0, sizeof(m->view));
    PyObject_GC_Track(m);
    return m;
}

/* ---- read-only registrations ------------------------------------------------ */

/* Sorted by start; m's range is removed when m is deregistered (ro_remove). */
static int ro_add(EngineObject *eo, MemoryObject *m)
{
    uint64_t start = (uint64_t)(uintptr_t)m->addr;
    size_t lo = 0, hi = eo->nro;

    if (eo->nro == eo->ro_cap) {
        size_t cap = eo->ro_cap ? 2 * eo->ro_cap : 4;
        ro_range_t *ro = PyMem_Realloc(eo->ro, cap * sizeof(*ro));

        if (ro == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        eo->ro     = ro;
        eo->ro_cap = cap;
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (eo->ro[mid].start <= start)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&eo->ro[lo + 1], &eo->ro[lo], (eo->nro - lo) * sizeof(eo->ro[0]));
    eo->ro[lo] = (ro_range_t){.start = start, .end = start + m->length, .owner = m};
    eo->nro++;
    if (m->length > eo->ro_maxlen)
        eo->ro_maxlen = m->length;
    return 0;
}

static void ro_remove(EngineObject *eo, MemoryObject *m)
{
    for (size_t i = 0; i < eo->nro; i++) {
        if (eo->ro[i].owner != m)
            continue;
        memmove(&eo->ro[i], &eo->ro[i + 1], (eo->nro - i - 1) * sizeof(eo->ro[0]));
        eo->nro--;
        eo->ro_maxlen = 0;
        for (size_t k = 0; k < eo->nro; k++)
            if (eo->ro[k].end - eo->ro[k].start > eo->ro_maxlen)
                eo->ro_maxlen = eo->ro[k].end - eo->ro[k].start;
        return;
    }
}

void ro_clear(EngineObject *eo)
{
    PyMem_Free(eo->ro);
    eo->ro        = NULL;
    eo->nro       = 0;
    eo->ro_cap    = 0;
    eo->ro_maxlen = 0;
}

int ro_check(EngineObject *eo, uint64_t addr, uint64_t length, const char *what,
             Py_ssize_t request)
{
    uint64_t end = addr + length < addr ? UINT64_MAX : addr + length;
    size_t lo = 0, hi = eo->nro;

    if (length == 0)
        return 0;
    /* the ranges before lo start below end */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (eo->ro[mid].start < end)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo-- > 0) {
        const ro_range_t *r = &eo->ro[lo];
        char why[200];

        if (r->end > addr) {
            snprintf(why, sizeof(why),
                     "request %zd READs into [0x%llx, 0x%llx), which overlaps read-only memory "
                     "registered at [0x%llx, 0x%llx)",
                     request, (unsigned long long)addr, (unsigned long long)end,
                     (unsigned long long)r->start, (unsigned long long)r->end);
            raise_invalid(what, why);
            return -1;
        }
        /* this one and those before it start ro_maxlen or more below addr: they end by it */
        if (r->start <= addr && addr - r->start >= eo->ro_maxlen)
            break;
    }
    return 0;
}

/* ---- registration ----------------------------------------------------------- */

static int memory_register(MemoryObject *m, const char *location)
{
    ote_mem_desc_t d = {.addr = m->addr, .length = m->length, .location = location,
                        .access = m->access};
    EngineObject *eo = m->engine;
    ote_mem_h h;
    ote_status_t st;
    py_call_t c;

    if (engine_check(eo) < 0) /* taking the buffer may have run code that closed it */
        return -1;
    call_enter(&eo->calls, &c, "Engine.register()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_mem_register(eo->e, &d, 1, &h);
    Py_END_ALLOW_THREADS
    call_leave(&eo->calls, &c);
    if (st != OTE_OK) {
        raise_status(st, "Engine.register()");
        return -1;
    }
    m->mem = h;
    if (m->readonly && ro_add(eo, m) < 0) {
        m->mem = NULL;
        (void)ote_mem_deregister(eo->e, h);
        return -1;
    }
    return 0;
}

/*
 * _register_buffer(obj, location, access): registers an object exporting
 * the buffer protocol (C-contiguous); the registration holds the export.
 */
PyObject *Engine_register_buffer(EngineObject *self, PyObject *args)
{
    PyObject *obj;
    const char *location = NULL;
    unsigned int access;
    MemoryObject *m;

    if (!PyArg_ParseTuple(args, "OzO&:_register_buffer", &obj, &location, access_converter,
                          &access))
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
PyObject *Engine_register_ptr(EngineObject *self, PyObject *args)
{
    PyObject *addr_obj, *nbytes_obj;
    uint64_t addr, nbytes;
    const char *location = NULL;
    unsigned int access;
    PyObject *keep;
    int host, readonly;
    MemoryObject *m;

    if (!PyArg_ParseTuple(args, "OOzO&Opp:_register_ptr", &addr_obj, &nbytes_obj, &location,
                          access_converter, &access, &keep, &host, &readonly))
        return NULL;
    if (u64_arg(addr_obj, "register", "the address", &addr) < 0 ||
        u64_arg(nbytes_obj, "register", "the length", &nbytes) < 0)
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (addr == 0 || nbytes == 0) {
        raise_invalid(NULL,
                        "register: address and length must be nonzero");
        return NULL;
    }
    if (addr + nbytes < addr || nbytes > SIZE_MAX) {
        PyErr_SetString(PyExc_OverflowError,
                        "register: the range passes the end of the address space");
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

PyObject *Engine_alloc(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"length", "location", "access", NULL};
    PyObject *length_obj;
    uint64_t length;
    const char *location = NULL;
    unsigned int access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE;
    MemoryObject *m;
    ote_mem_h h;
    void *addr;
    ote_status_t st;
    py_call_t c;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|zO&:alloc", kwlist, &length_obj, &location,
                                     access_converter, &access))
        return NULL;
    if (u64_arg(length_obj, "alloc", "the length", &length) < 0)
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    if (length == 0) {
        raise_invalid(NULL, "alloc: length must be > 0");
        return NULL;
    }
    m = memory_new(self);
    if (m == NULL)
        return NULL;
    call_enter(&self->calls, &c, "Engine.alloc()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_mem_alloc(self->e, (size_t)length, location, access, &addr, &h);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &c);
    if (st != OTE_OK) {
        Py_DECREF(m);
        return raise_status(st, "Engine.alloc()");
    }
    m->mem    = h;
    m->addr   = addr;
    m->length = (size_t)length;
    m->access = access;
    m->owned  = 1;
    /* device memory is "cuda:N"; "cuda_host:N" is pinned host memory */
    m->host   = location == NULL || strncmp(location, "cuda:", 5) != 0;
    return (PyObject *)m;
}

/* ---- Memory --------------------------------------------------------------- */

void memory_drop_export(MemoryObject *m)
{
    if (m->has_view) {
        PyBuffer_Release(&m->view);
        m->has_view = 0;
    }
    Py_CLEAR(m->keep);
}

/*
 * Deregister (free engine-owned memory) and let go of the buffer export and
 * the kept object; those stay while a batch holds the memory (until it lets
 * go: batch_unhold), and while the engine is being destroyed in another
 * thread (its tasks may still land: deregister() raises BusyError; a dealloc
 * then leaves them held for ever, which only leaks).
 */
static int memory_release(MemoryObject *m, int dealloc)
{
    EngineObject *eo = m->engine;
    ote_status_t st = OTE_OK;

    if (m->exports > 0) {
        PyErr_SetString(PyExc_BufferError,
                        "deregister: views of this memory are still exported");
        return -1;
    }
    if (eo->destroying && (m->mem != NULL || m->has_view || m->keep != NULL)) {
        if (dealloc)
            return 0;
        raise_error(OTE_ERR_BUSY, "Memory.deregister()",
                    "Engine.close() is in progress in another thread");
        return -1;
    }
    if (m->mem != NULL) {
        ote_mem_h h = m->mem;

        m->mem = NULL;
        if (m->readonly)
            ro_remove(eo, m);
        if (eo->e != NULL) {
            ote_engine_h e = eo->e;
            int owned = m->owned;
            py_call_t c;

            call_enter(&eo->calls, &c, "Memory.deregister()");
            Py_BEGIN_ALLOW_THREADS
            st = owned ? ote_mem_free(e, h) : ote_mem_deregister(e, h);
            Py_END_ALLOW_THREADS
            call_leave(&eo->calls, &c);
        }
    }
    if (m->holders == 0)
        memory_drop_export(m);
    if (st != OTE_OK) {
        raise_status(st, "Memory.deregister()");
        return -1;
    }
    return 0;
}

static int Memory_traverse(MemoryObject *m, visitproc visit, void *arg)
{
    Py_VISIT(m->engine);
    Py_VISIT(m->keep);
    if (m->has_view)
        Py_VISIT(m->view.obj);
    return 0;
}

/* No batch holds it (each holds a reference) and no view is exported (each holds one). */
static void Memory_dealloc(MemoryObject *m)
{
    PyObject *t, *v, *tb;

    PyObject_GC_UnTrack(m);
    PyErr_Fetch(&t, &v, &tb);
    m->exports = 0;
    if (memory_release(m, 1) < 0)
        PyErr_WriteUnraisable((PyObject *)m);
    PyErr_Restore(t, v, tb);
    Py_CLEAR(m->engine);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *Memory_deregister(MemoryObject *m, PyObject *unused)
{
    (void)unused;
    if (memory_release(m, 0) < 0)
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
    if (memory_release(m, 0) < 0)
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
    if (m->owned)
        m->engine->owned_views++; /* Engine.close() would free it */
    return 0;
}

static void Memory_releasebuffer(MemoryObject *m, Py_buffer *view)
{
    (void)view;
    if (m->exports > 0) {
        m->exports--;
        if (m->owned)
            m->engine->owned_views--;
    }
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
     "buffer export. While a batch holds this Memory (it was a local of the batch's "
     "submits, and the batch is not released or its tasks have not ended) the registered "
     "object and its buffer export are let go of only once the batch lets go of it. "
     "Raises BufferError, nothing done, while views of the memory (memoryview(mem)) are "
     "exported, also once the engine is closed."},
    {"__enter__", (PyCFunction)Memory_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Memory_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Memory_getset[] = {
    {"addr", (getter)Memory_get_addr, NULL, "Start address (int).", NULL},
    {"length", (getter)Memory_get_length, NULL, "Length in bytes.", NULL},
    {"access", (getter)Memory_get_access, NULL, "REMOTE_READ | REMOTE_WRITE flags.", NULL},
    {"registered", (getter)Memory_get_registered, NULL, "False once deregistered.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject MemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte.Memory",
    .tp_basicsize = sizeof(MemoryObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc       = "A registered region (Engine.register or Engine.alloc).",
    .tp_dealloc   = (destructor)Memory_dealloc,
    .tp_traverse  = (traverseproc)Memory_traverse,
    .tp_free      = PyObject_GC_Del,
    .tp_methods   = Memory_methods,
    .tp_getset    = Memory_getset,
    .tp_repr      = (reprfunc)Memory_repr,
    .tp_as_buffer = &Memory_as_buffer,
};
