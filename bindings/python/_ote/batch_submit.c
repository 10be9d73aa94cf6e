/*
 * Batch.submit and Batch.submit_arrays: Python requests (tuples, or parallel
 * integer arrays) checked and turned into ote_xfer_req_t, then posted in one
 * ote_batch_submit (or ote_batch_submit_notify) call with the GIL released.
 */
#include "module.h"

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

int op_value(PyObject *o, ote_op_t *op)
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

PyObject *Batch_submit(BatchObject *b, PyObject *args, PyObject *kw)
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
int u64_array(PyObject *o, const char *what, uint64_t **out, Py_ssize_t *n_p)
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
            PyErr_Format(PyExc_TypeError, "%s must hold 64-bit integers", what);
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

PyObject *Batch_submit_arrays(BatchObject *b, PyObject *args, PyObject *kw)
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
    if (u64_array(lo, "submit_arrays: local_addrs", &la, &nl) < 0 ||
        u64_array(ro, "submit_arrays: remote_addrs", &ra, &nr) < 0)
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
    } else if (u64_array(le, "submit_arrays: lengths", &ln, &nn) < 0) {
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
