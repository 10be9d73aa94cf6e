/*
 * Notifications: Engine.send and Engine.recv (orbitte.Notification). The event
 * fd that says one arrived is the engine's (Engine.fileno, engine.c).
 */
#include "module.h"

static PyStructSequence_Field notification_fields[] = {
    {"sender", "the sender's segment name"}, {"data", "the message (bytes)"}, {NULL, NULL}};
PyStructSequence_Desc notification_desc = {"orbitte.Notification",
                                                  "A received notification.",
                                                  notification_fields, 2};

PyObject *Engine_send(EngineObject *self, PyObject *args)
{
    PyObject *seg_obj;
    Py_buffer msg;
    SegmentObject *s;
    ote_engine_h e;
    ote_segment_h seg;
    ote_status_t st;
    py_call_t c, ce;

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
    e   = self->e;
    seg = s->seg;
    call_enter(&s->calls, &c, "Engine.send()");
    call_enter(&self->calls, &ce, "Engine.send()");
    Py_BEGIN_ALLOW_THREADS
    st = ote_notify_send(e, seg, msg.buf, (size_t)msg.len);
    Py_END_ALLOW_THREADS
    call_leave(&self->calls, &ce);
    call_leave(&s->calls, &c);
    PyBuffer_Release(&msg);
    if (st != OTE_OK)
        return raise_status(st, "Engine.send()");
    Py_RETURN_NONE;
}

PyObject *Engine_recv(EngineObject *self, PyObject *args, PyObject *kw)
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

PyTypeObject NotificationType;
