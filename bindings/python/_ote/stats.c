/*
 * Engine.stats: the engine's series (ote_engine_stats) as Python objects, the
 * labels parsed back from their exposition form.
 */
#include "module.h"

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

PyObject *Engine_stats(EngineObject *self, PyObject *unused)
{
    PyObject *list;
    ote_status_t st;

    (void)unused;
    if (engine_check(self) < 0)
        return NULL;
    list = PyList_New(0);
    if (list == NULL)
        return NULL;
    /*
     * The GIL stays held: the callback builds Python objects. The walk takes
     * the engine's segment and region locks for as long as a copy takes
     * (docs/observability.md), never a wait on I/O or on a peer.
     */
    st = ote_engine_stats(self->e, stats_cb, list);
    if (PyErr_Occurred() || st != OTE_OK) {
        Py_DECREF(list);
        return st != OTE_OK && !PyErr_Occurred() ? raise_status(st, "stats") : NULL;
    }
    return list;
}
