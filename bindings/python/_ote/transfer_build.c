/*
 * orbitte.Transfer, its making (Engine.transfer): the requests of a transfer
 * gathered once from address and length columns (sequences or numpy
 * arrays), by index lists where given, checked (indices in range, both
 * sides' lengths equal) and, with merge, runs contiguous on both sides made
 * one request. Posting and polling them is transfer.c's.
 */
#include "transfer.h"

/* n indices, each below bound, from a sequence of ints or a 1-D buffer of
 * 4- or 8-byte integers (PyMem_Malloc'd); -1 with an exception otherwise. */
static int index_array(PyObject *o, Py_ssize_t bound, const char *what, Py_ssize_t **out,
                       Py_ssize_t *n_p)
{
    Py_buffer v;
    Py_ssize_t n, *a;

    if (PyObject_CheckBuffer(o)) {
        const char *f;
        int sgn;

        if (PyObject_GetBuffer(o, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        f = v.format ? v.format : "B";
        if (*f == '<' || *f == '=' || *f == '@')
            f++;
        sgn = strchr("qlin", *f) != NULL;
        if (v.ndim != 1 || f[0] == '\0' || f[1] != '\0' || strchr("qlinQLIN", *f) == NULL ||
            (v.itemsize != 8 && v.itemsize != 4)) {
            PyBuffer_Release(&v);
            PyErr_Format(PyExc_TypeError, "transfer: %s must be 1-D 32- or 64-bit integers", what);
            return -1;
        }
        n = v.len / v.itemsize;
        a = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*a));
        if (a == NULL) {
            PyBuffer_Release(&v);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            long long x;

            if (v.itemsize == 8)
                x = sgn ? ((const int64_t *)v.buf)[i]
                        : (((const uint64_t *)v.buf)[i] > (uint64_t)PY_SSIZE_T_MAX
                               ? -1 : (long long)((const uint64_t *)v.buf)[i]);
            else
                x = sgn ? ((const int32_t *)v.buf)[i] : (long long)((const uint32_t *)v.buf)[i];
            if (x < 0 || x >= bound) {
                PyBuffer_Release(&v);
                PyMem_Free(a);
                PyErr_Format(PyExc_IndexError,
                             "transfer: %s at position %zd is %lld, not in 0 .. %zd", what, i,
                             x, bound - 1);
                return -1;
            }
            a[i] = (Py_ssize_t)x;
        }
        PyBuffer_Release(&v);
    } else {
        PyObject *seq = PySequence_Fast(o, "transfer: indices are a sequence or an array");

        if (seq == NULL)
            return -1;
        n = PySequence_Fast_GET_SIZE(seq);
        a = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*a));
        if (a == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t x = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));

            if (x == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                PyMem_Free(a);
                return -1;
            }
            if (x < 0 || x >= bound) {
                Py_DECREF(seq);
                PyMem_Free(a);
                PyErr_Format(PyExc_IndexError,
                             "transfer: %s at position %zd is %zd, not in 0 .. %zd", what, i, x,
                             bound - 1);
                return -1;
            }
            a[i] = x;
        }
        Py_DECREF(seq);
    }
    *out = a;
    *n_p = n;
    return 0;
}

PyObject *Engine_transfer(EngineObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"op", "local_addrs", "remote_addrs", "lengths", "local_index",
                             "remote_index", "remote_lengths", "merge", NULL};
    PyObject *op_obj, *lo, *ro, *le, *lio = Py_None, *rio = Py_None, *rlo = Py_None;
    uint64_t *la = NULL, *ra = NULL, *ln = NULL, *rl = NULL;
    Py_ssize_t nl = 0, nr = 0, nn = 0, nrl = 0, n, *li = NULL, *ri = NULL;
    TransferObject *t = NULL;
    int merge = 0;
    ote_op_t op;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|OOOp:transfer", kwlist, &op_obj, &lo, &ro,
                                     &le, &lio, &rio, &rlo, &merge))
        return NULL;
    if (engine_check(self) < 0 || op_value(op_obj, &op) < 0)
        return NULL;
    if (u64_array(lo, "transfer: local_addrs", &la, &nl) < 0 ||
        u64_array(ro, "transfer: remote_addrs", &ra, &nr) < 0 ||
        u64_array(le, "transfer: lengths", &ln, &nn) < 0)
        goto out;
    if ((lio == Py_None) != (rio == Py_None) || (lio != Py_None && rlo == Py_None)) {
        raise_invalid("Engine.transfer()",
                      "local_index, remote_index and remote_lengths go together");
        goto out;
    }
    if (lio != Py_None) {
        Py_ssize_t nri;

        if (u64_array(rlo, "transfer: remote_lengths", &rl, &nrl) < 0)
            goto out;
        if (nl != nn || nr != nrl) {
            raise_invalid("Engine.transfer()", "an address column and its lengths differ in size");
            goto out;
        }
        if (index_array(lio, nl, "local index", &li, &n) < 0 ||
            index_array(rio, nr, "remote index", &ri, &nri) < 0)
            goto out;
        if (n != nri) {
            raise_invalid("Engine.transfer()", "as many local as remote indices");
            goto out;
        }
    } else {
        n = nl;
        if (nl != nr || nl != nn) {
            raise_invalid("Engine.transfer()", "as many local, remote addresses and lengths");
            goto out;
        }
    }
    if (n == 0) {
        raise_invalid("Engine.transfer()", "no requests");
        goto out;
    }
    /* the conversions may have run Python code that closed the engine */
    if (engine_check(self) < 0)
        goto out;
    t = PyObject_GC_New(TransferObject, &TransferType);
    if (t == NULL)
        goto out;
    memset((char *)t + sizeof(PyObject), 0, sizeof(*t) - sizeof(PyObject));
    t->state = -1;
    t->reqs  = PyMem_Calloc((size_t)n, sizeof(*t->reqs));
    Py_INCREF(self);
    t->engine = self;
    PyObject_GC_Track(t);
    if (t->reqs == NULL) {
        Py_CLEAR(t);
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t a = li ? la[li[i]] : la[i], r = ri ? ra[ri[i]] : ra[i];
        uint64_t l = li ? ln[li[i]] : ln[i];
        ote_xfer_req_t *cur = t->count ? &t->reqs[t->count - 1] : NULL;

        if (ri && rl[ri[i]] != l) {
            Py_CLEAR(t);
            raise_invalid("Engine.transfer()", "local and remote lengths differ");
            goto out;
        }
        if (req_range_check(a, r, l, "Engine.transfer()", i) < 0) {
            Py_CLEAR(t);
            goto out;
        }
        t->bytes += l;
        /* a run contiguous on both sides is one request */
        if (merge && cur && (uint64_t)(uintptr_t)cur->local_addr + cur->length == a &&
            cur->remote_addr + cur->length == r) {
            cur->length += (size_t)l;
            continue;
        }
        t->reqs[t->count++] = (ote_xfer_req_t){.op = op, .local_addr = (void *)(uintptr_t)a,
                                               .remote_addr = r, .length = (size_t)l};
    }
    t->merged = (size_t)n - t->count;
    /* local READs into read-only registrations are refused here, and again at each post */
    if (op == OTE_OP_READ && self->nro > 0) {
        for (size_t i = 0; i < t->count; i++) {
            if (ro_check(self, (uint64_t)(uintptr_t)t->reqs[i].local_addr, t->reqs[i].length,
                         "Engine.transfer()", (Py_ssize_t)i) < 0) {
                Py_CLEAR(t);
                break;
            }
        }
    }
out:
    PyMem_Free(la);
    PyMem_Free(ra);
    PyMem_Free(ln);
    PyMem_Free(rl);
    PyMem_Free(li);
    PyMem_Free(ri);
    return (PyObject *)t;
}
