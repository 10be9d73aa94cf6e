/*
 * orbitte._ote, the module: the exception classes a status maps to, the
 * module's functions and constants, and PyInit__ote, which readies the types
 * the other files define (engine.c, memory.c, segment.c, batch.c,
 * batch_submit.c, notify.c, stats.c). module.h says what they share.
 */
#include "module.h"

#include <limits.h>
#include <math.h>

/* ---- errors ------------------------------------------------------------- */

/*
 * The exception classes are defined in Python (orbitte/__init__.py), which
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

PyObject *raise_status(ote_status_t status, const char *what)
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
PyObject *raise_invalid(const char *what, const char *why)
{
    return raise_error(OTE_ERR_INVALID_PARAM, what, why);
}

PyObject *raise_error(ote_status_t status, const char *what, const char *why)
{
    PyObject *cls = error_class(status), *exc;

    exc = PyObject_CallFunction(cls, "isz", (int)status, why, what);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

int calls_refuse(const py_call_t *calls, const char *what, const char *obj)
{
    char why[256], more[48] = "";
    size_t n = 0;

    if (calls == NULL)
        return 0;
    for (const py_call_t *c = calls; c != NULL; c = c->next)
        n++;
    if (n > 1)
        snprintf(more, sizeof(more), " (and %zu more call%s)", n - 1, n > 2 ? "s" : "");
    snprintf(why, sizeof(why),
             "%s is in progress on this %s in another thread%s; the %s stays open: "
             "retry once it returned",
             calls->what, obj, more, obj);
    raise_error(OTE_ERR_BUSY, what, why);
    return -1;
}

int timeout_ms_value(PyObject *o, const char *what, int *ms_p)
{
    double s;

    if (o == Py_None) {
        *ms_p = -1;
        return 0;
    }
    s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (isnan(s)) {
        raise_invalid(what, "timeout is NaN");
        return -1;
    }
    if (s < 0) {
        raise_invalid(what, "timeout must be >= 0");
        return -1;
    }
    /* The library's limit (int milliseconds): longer ones, infinity included, wait that long. */
    *ms_p = s * 1000.0 >= (double)INT_MAX ? INT_MAX : (int)(s * 1000.0 + 0.5);
    return 0;
}

int access_converter(PyObject *o, void *access_p)
{
    PyObject *i = PyNumber_Index(o);
    unsigned long v;

    if (i == NULL)
        return 0;
    v = PyLong_AsUnsignedLong(i);
    Py_DECREF(i);
    if (v == (unsigned long)-1 && PyErr_Occurred())
        return 0;
    if (v > UINT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "access flags out of range");
        return 0;
    }
    *(unsigned *)access_p = (unsigned)v;
    return 1;
}

int u64_arg(PyObject *o, const char *what, const char *name, uint64_t *v_p)
{
    unsigned long long v;

    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int", what, name);
        return -1;
    }
    v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_OverflowError, "%s: %s must be in 0 .. 2^64-1", what, name);
        }
        return -1;
    }
    *v_p = v;
    return 0;
}

int req_range_check(uint64_t local, uint64_t remote, uint64_t length, const char *what,
                    Py_ssize_t i)
{
    char why[96];

    if (length == 0) {
        snprintf(why, sizeof(why), "request %zd has length 0", i);
        raise_invalid(what, why);
        return -1;
    }
    if (local + length < local || remote + length < remote || length > SIZE_MAX) {
        PyErr_Format(PyExc_OverflowError,
                     "%s: request %zd: the %s range passes the end of the address space", what,
                     i, local + length < local ? "local" : "remote");
        return -1;
    }
    return 0;
}

PyObject *raise_closed(const char *what)
{
    char why[64];

    snprintf(why, sizeof(why), "the %s is closed", what);
    return raise_invalid(NULL, why);
}

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
    if (init_type(m, &EngineType, "Engine") < 0 || init_type(m, &MemoryType, "Memory") < 0 ||
        init_type(m, &SegmentType, "Segment") < 0 || init_type(m, &BatchType, "Batch") < 0 ||
        init_type(m, &TransferType, "Transfer") < 0)
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
