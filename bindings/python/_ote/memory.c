/*
 * orbitte.Memory: a registration (Engine._register_buffer, Engine._register_ptr)
 * or engine-owned memory (Engine.alloc); host memory exports the buffer
 * protocol, and a registration holds the object whose memory it is.
 */
#include "module.h"

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

/* An address or length argument of _register_ptr: an int, 0 .. 2^64-1 (OverflowError). */
static int u64_arg(PyObject *o, const char *name, uint64_t *v_p)
{
    unsigned long long v;

    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "register: %s must be an int", name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *v_p = v;
    return 0;
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
    if (u64_arg(addr_obj, "the address", &addr) < 0 ||
        u64_arg(nbytes_obj, "the length", &nbytes) < 0)
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
    Py_ssize_t length;
    const char *location = NULL;
    unsigned int access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE;
    MemoryObject *m;
    ote_mem_h h;
    void *addr;
    ote_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|zO&:alloc", kwlist, &length, &location,
                                     access_converter, &access))
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
    /* device memory is "cuda:N"; "cuda_host:N" is pinned host memory */
    m->host   = location == NULL || strncmp(location, "cuda:", 5) != 0;
    return (PyObject *)m;
}

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

PyTypeObject MemoryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte.Memory",
    .tp_basicsize = sizeof(MemoryObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT,
    .tp_doc       = "A registered region (Engine.register or Engine.alloc).",
    .tp_dealloc   = (destructor)Memory_dealloc,
    .tp_methods   = Memory_methods,
    .tp_getset    = Memory_getset,
    .tp_repr      = (reprfunc)Memory_repr,
    .tp_as_buffer = &Memory_as_buffer,
};
