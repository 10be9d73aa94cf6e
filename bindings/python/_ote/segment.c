/*
 * orbitte.Segment: an opened peer (Engine.open by name, Engine.open_desc from a
 * descriptor, which Engine.desc_export produces), the regions it published
 * (orbitte.Region) and re-reading its descriptor.
 */
#include "module.h"

static PyStructSequence_Field region_fields[] = {{"addr", "start address on the peer"},
                                                 {"length", "bytes"},
                                                 {"location", "'cpu:N' or 'cuda:N'"},
                                                 {"access", "REMOTE_READ | REMOTE_WRITE"},
                                                 {NULL, NULL}};
PyStructSequence_Desc region_desc = {"orbitte.Region", "A region a peer published.",
                                            region_fields, 4};

/* The Segment of an opened handle, labelled name; on failure the handle is closed. */
static PyObject *segment_new(EngineObject *engine, ote_segment_h seg, PyObject *name)
{
    SegmentObject *s = PyObject_GC_New(SegmentObject, &SegmentType);

    if (s == NULL) {
        ote_segment_close(seg);
        return NULL;
    }
    Py_INCREF(engine);
    s->engine = engine;
    s->seg    = seg;
    Py_INCREF(name);
    s->name  = name;
    s->calls = NULL;
    PyObject_GC_Track(s);
    return (PyObject *)s;
}

PyObject *Engine_open(EngineObject *self, PyObject *args)
{
    PyObject *name_obj;
    const char *name;
    ote_engine_h e;
    ote_segment_h seg;
    ote_status_t st;
    py_call_t c;

    if (!PyArg_ParseTuple(args, "U:open", &name_obj))
        return NULL;
    name = PyUnicode_AsUTF8(name_obj);
    if (name == NULL)
        return NULL;
    if (engine_check(self) < 0)
        return NULL;
    e = self->e;
    call_enter(&self->calls, &c, "Engine.open()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_open(e, name, &seg);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &c);
    if (st != OTE_OK) {
        char what[320];

        snprintf(what, sizeof(what), "Engine.open('%.280s')", name);
        return raise_status(st, what);
    }
    return segment_new(self, seg, name_obj);
}

/* This engine's descriptor as the signed bytes of ote_engine_desc_export(). */
PyObject *Engine_desc_export(EngineObject *self, PyObject *unused)
{
    PyObject *out;
    void *buf = NULL;
    size_t len = 0;
    ote_engine_h e;
    ote_status_t st;
    py_call_t c;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    e = self->e;
    call_enter(&self->calls, &c, "Engine.desc_export()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_engine_desc_export(e, &buf, &len);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &c);
    if (st != OTE_OK)
        return raise_status(st, "Engine.desc_export()");
    out = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return out;
}

/* A peer opened from its desc_export() bytes (ote_segment_open_desc); name labels it. */
PyObject *Engine_open_desc(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"desc", "name", NULL};
    PyObject *name_obj = NULL;
    Py_buffer desc;
    ote_engine_h e;
    ote_segment_h seg;
    ote_status_t st;
    py_call_t c;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|U:open_desc", kwlist, &desc, &name_obj))
        return NULL;
    if (engine_check(self) < 0) {
        PyBuffer_Release(&desc);
        return NULL;
    }
    e = self->e;
    call_enter(&self->calls, &c, "Engine.open_desc()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_open_desc(e, desc.buf, (size_t)desc.len, &seg);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &c);
    PyBuffer_Release(&desc);
    if (st != OTE_OK)
        return raise_status(st, st == OTE_ERR_AUTH
                                    ? "Engine.open_desc(): the descriptor's signature does not "
                                      "match OTE_AUTH_KEY (altered, unsigned or another key)"
                                    : "Engine.open_desc()");
    return segment_new(self, seg, name_obj != NULL ? name_obj : Py_None);
}

/* ---- Segment -------------------------------------------------------------- */

int segment_check(SegmentObject *s)
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

/* Refused (-1, BusyError) while another thread is inside a call using the handle. */
static int segment_close(SegmentObject *s, const char *what)
{
    ote_segment_h seg = s->seg;
    EngineObject *eo  = s->engine;
    ote_status_t st;
    py_call_t c;

    if (seg != NULL && calls_refuse(s->calls, what, "segment") < 0)
        return -1;
    s->seg = NULL;
    if (seg == NULL || eo->e == NULL)
        return 0;
    call_enter(&eo->calls, &c, "Segment.close()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_close(seg);
    Py_END_ALLOW_THREADS
    call_leave(&eo->calls, &c);
    if (st != OTE_OK) {
        raise_status(st, "Segment.close()");
        return -1;
    }
    return 0;
}

static int Segment_traverse(SegmentObject *s, visitproc visit, void *arg)
{
    Py_VISIT(s->engine);
    Py_VISIT(s->name);
    return 0;
}

static void Segment_dealloc(SegmentObject *s)
{
    PyObject *t, *v, *tb;

    PyObject_GC_UnTrack(s);
    PyErr_Fetch(&t, &v, &tb);
    if (segment_close(s, "Segment.__del__()") < 0)
        PyErr_WriteUnraisable((PyObject *)s);
    PyErr_Restore(t, v, tb);
    Py_CLEAR(s->name);
    Py_CLEAR(s->engine);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *Segment_close(SegmentObject *s, PyObject *unused)
{
    (void)unused;
    if (segment_close(s, "Segment.close()") < 0)
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
    if (segment_close(s, "Segment.__exit__()") < 0)
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
    py_call_t c, ce;

    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    seg = s->seg;
    call_enter(&s->calls, &c, "Segment.refresh()");
    call_enter(&s->engine->calls, &ce, "Segment.refresh()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_refresh(seg);
    Py_END_ALLOW_THREADS
    call_leave(&s->engine->calls, &ce);
    call_leave(&s->calls, &c);
    if (st != OTE_OK)
        return raise_status(st, "Segment.refresh()");
    Py_RETURN_NONE;
}

static PyObject *Segment_reopen(SegmentObject *s, PyObject *unused)
{
    ote_status_t st;
    ote_segment_h seg;
    int restarted = 0;
    py_call_t c, ce;

    (void)unused;
    if (segment_check(s) < 0)
        return NULL;
    seg = s->seg;
    call_enter(&s->calls, &c, "Segment.reopen()");
    call_enter(&s->engine->calls, &ce, "Segment.reopen()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_segment_reopen(seg, &restarted);
    Py_END_ALLOW_THREADS
    call_leave(&s->engine->calls, &ce);
    call_leave(&s->calls, &c);
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
     "Idempotent; does nothing once the engine is closed (the engine closed it). Raises "
     "BusyError, the segment left open, while another thread is inside a call that uses it "
     "with the GIL released (refresh, reopen, Engine.send, Batch.submit, Transfer.post)."},
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

PyTypeObject SegmentType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name      = "orbitte.Segment",
    .tp_basicsize = sizeof(SegmentObject),
    .tp_flags     = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc       = "An opened peer (Engine.open).",
    .tp_dealloc   = (destructor)Segment_dealloc,
    .tp_traverse  = (traverseproc)Segment_traverse,
    .tp_free      = PyObject_GC_Del,
    .tp_methods   = Segment_methods,
    .tp_getset    = Segment_getset,
    .tp_repr      = (reprfunc)Segment_repr,
};

PyTypeObject RegionType;
