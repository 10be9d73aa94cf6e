/*
 * Batch.submit and Batch.submit_arrays: Python requests (tuples, or parallel
 * integer arrays) checked and turned into ote_xfer_req_t, then posted in one
 * ote_batch_submit (or ote_batch_submit_notify) call with the GIL released.
 *
 * Converting an argument can run Python code (an __index__, a generator),
 * which may release the batch, close the segment or the engine, or change
 * the request list. So every argument is converted first, from objects held
 * here (a list of requests is copied into a tuple), and the batch, the
 * segment and the engine are checked after that, right before the post.
 */
#include "module.h"

/* A local address: an int, a Memory (its start), or (Memory, offset); *mem_p
 * the Memory (borrowed from o) or NULL. */
static int local_address(PyObject *o, uint64_t *addr, MemoryObject **mem_p)
{
    *mem_p = NULL;
    if (PyObject_TypeCheck(o, &MemoryType)) {
        MemoryObject *m = (MemoryObject *)o;

        *addr  = (uint64_t)(uintptr_t)m->addr;
        *mem_p = m;
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
        *addr  = (uint64_t)(uintptr_t)m->addr + off;
        *mem_p = m;
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

/* The notification's bytes, first of all (a buffer exporter may run Python code). */
static int notify_get(PyObject *notify_obj, const char *what, Py_buffer *notify, int *has_notify)
{
    *has_notify = 0;
    if (notify_obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(notify_obj, notify, PyBUF_SIMPLE) < 0)
        return -1;
    if ((size_t)notify->len > OTE_NOTIFY_MAX) {
        PyBuffer_Release(notify);
        raise_invalid(what, "a notification holds at most NOTIFY_MAX bytes");
        return -1;
    }
    *has_notify = 1;
    return 0;
}

/* After the conversions, right before the post: the batch, the segment and their engine. */
static int submit_check(BatchObject *b, SegmentObject *s)
{
    if (batch_check(b) < 0)
        return -1;
    if (s->engine != b->engine) {
        raise_invalid(NULL,
                        "submit: the segment belongs to another engine");
        return -1;
    }
    return segment_check(s);
}

/* Local READs into read-only registrations are refused (only looked for when there are some). */
static int submit_ro_check(EngineObject *eo, const ote_xfer_req_t *reqs, size_t n,
                           const char *what)
{
    if (eo->nro == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (reqs[i].op == OTE_OP_READ &&
            ro_check(eo, (uint64_t)(uintptr_t)reqs[i].local_addr, reqs[i].length, what,
                     (Py_ssize_t)i) < 0)
            return -1;
    return 0;
}

static PyObject *batch_post(BatchObject *b, SegmentObject *s, ote_xfer_req_t *reqs, size_t n,
                            Py_buffer *notify, const char *what)
{
    ote_status_t st;
    size_t first = 0;
    ote_batch_h batch = b->batch;
    EngineObject *eo  = b->engine;
    py_call_t cb, cs, ce;

    call_enter(&b->calls, &cb, what);
    call_enter(&s->calls, &cs, what);
    call_enter(&eo->calls, &ce, what);
    Py_BEGIN_ALLOW_THREADS
    if (notify != NULL)
        st = ote_batch_submit_notify(batch, reqs, n, notify->buf, (size_t)notify->len, &first);
    else
        st = ote_batch_submit(batch, reqs, n, &first);
    Py_END_ALLOW_THREADS
    call_leave(&eo->calls, &ce);
    call_leave(&s->calls, &cs);
    call_leave(&b->calls, &cb);
    if (st != OTE_OK)
        return raise_status(st, what);
    return PyLong_FromSize_t(first);
}

/* Tells the Memory objects of one submit apart (MemoryObject.mark). */
static uint64_t submit_serial;

/*
 * Hold the distinct Memory objects of mems[0..n) (NULL: an int address) in
 * the batch, before the post: the engine may move bytes before the submit
 * returns. *added_p: how many, for batch_unhold_last when the post fails.
 */
static int batch_hold(BatchObject *b, MemoryObject **mems, size_t n, size_t *added_p)
{
    uint64_t serial = ++submit_serial;
    size_t add = 0;

    *added_p = 0;
    for (size_t i = 0; i < n; i++) {
        if (mems[i] != NULL && mems[i]->mark != serial) {
            mems[i]->mark = serial;
            add++;
        }
    }
    if (add == 0)
        return 0;
    if (b->nheld + add > b->held_cap) {
        size_t cap = b->held_cap ? b->held_cap : 8;
        MemoryObject **h;

        while (cap < b->nheld + add)
            cap *= 2;
        h = PyMem_Realloc(b->held, cap * sizeof(*h));
        if (h == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->held     = h;
        b->held_cap = cap;
    }
    serial = ++submit_serial;
    for (size_t i = 0; i < n; i++) {
        MemoryObject *m = mems[i];

        if (m != NULL && m->mark != serial) {
            m->mark = serial;
            Py_INCREF(m);
            m->holders++;
            b->held[b->nheld++] = m;
        }
    }
    *added_p = add;
    return 0;
}

/* The post failed: nothing was submitted; let go of what batch_hold added (one of
 * each of those objects, wherever other submits' holds put theirs meanwhile). */
static void batch_unhold_last(BatchObject *b, MemoryObject **mems, size_t n, size_t added)
{
    uint64_t serial = ++submit_serial;

    for (size_t i = 0; i < n && added > 0; i++) {
        MemoryObject *m = mems[i];

        if (m == NULL || m->mark == serial)
            continue;
        m->mark = serial;
        added--;
        for (size_t k = b->nheld; k-- > 0;) {
            if (b->held[k] == m) {
                memmove(&b->held[k], &b->held[k + 1], (b->nheld - k - 1) * sizeof(m));
                b->nheld--;
                break;
            }
        }
        memory_unhold(m);
    }
}

PyObject *Batch_submit(BatchObject *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"segment", "requests", "notify", NULL};
    PyObject *seg_obj, *reqs_obj, *notify_obj = Py_None, *seq = NULL, *r = NULL;
    SegmentObject *s;
    Py_buffer notify;
    int has_notify = 0;
    ote_xfer_req_t *reqs = NULL;
    MemoryObject **mems = NULL;
    size_t added = 0;
    Py_ssize_t n;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O|O:submit", kwlist, &SegmentType, &seg_obj,
                                     &reqs_obj, &notify_obj))
        return NULL;
    s = (SegmentObject *)seg_obj;
    if (notify_get(notify_obj, "Batch.submit()", &notify, &has_notify) < 0)
        return NULL;
    seq = PySequence_Fast(reqs_obj, "submit: requests must be a sequence of "
                                    "(op, local, remote_addr, length) tuples");
    if (seq == NULL)
        goto out;
    if (PyList_Check(seq)) {
        /* a copy: the code a conversion runs cannot change it (nor free a request) */
        Py_SETREF(seq, PyList_AsTuple(seq));
        if (seq == NULL)
            goto out;
    }
    n = PyTuple_GET_SIZE(seq);
    if (n == 0) {
        raise_invalid(NULL, "submit: no requests");
        goto out;
    }
    reqs = PyMem_Calloc((size_t)n, sizeof(*reqs));
    mems = PyMem_Calloc((size_t)n, sizeof(*mems));
    if (reqs == NULL || mems == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(seq, i);
        unsigned long long remote, length;
        uint64_t local;

        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
            PyErr_Format(PyExc_TypeError,
                         "submit: request %zd is not an (op, local, remote_addr, length) tuple",
                         i);
            goto out;
        }
        if (op_value(PyTuple_GET_ITEM(t, 0), &reqs[i].op) < 0 ||
            local_address(PyTuple_GET_ITEM(t, 1), &local, &mems[i]) < 0)
            goto out;
        remote = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
        if (remote == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        length = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 3));
        if (length == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        if (req_range_check(local, remote, length, "Batch.submit()", i) < 0)
            goto out;
        reqs[i].local_addr  = (void *)(uintptr_t)local;
        reqs[i].remote_addr = remote;
        reqs[i].length      = (size_t)length;
    }
    if (submit_check(b, s) < 0 ||
        submit_ro_check(b->engine, reqs, (size_t)n, "Batch.submit()") < 0)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++)
        reqs[i].segment = s->seg;
    if (batch_hold(b, mems, (size_t)n, &added) < 0)
        goto out;
    r = batch_post(b, s, reqs, (size_t)n, has_notify ? &notify : NULL, "Batch.submit()");
    if (r == NULL)
        batch_unhold_last(b, mems, (size_t)n, added);
out:
    PyMem_Free(reqs);
    PyMem_Free(mems);
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
    SegmentObject *s;
    Py_buffer notify;
    int has_notify = 0;
    ote_op_t op;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOO|O:submit_arrays", kwlist, &SegmentType,
                                     &seg_obj, &op_obj, &lo, &ro, &le, &notify_obj))
        return NULL;
    s = (SegmentObject *)seg_obj;
    if (op_value(op_obj, &op) < 0)
        return NULL;
    if (notify_get(notify_obj, "Batch.submit_arrays()", &notify, &has_notify) < 0)
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
    for (Py_ssize_t i = 0; i < nl; i++) {
        if (req_range_check(la[i], ra[i], ln[i], "Batch.submit_arrays()", i) < 0)
            goto out;
        reqs[i] = (ote_xfer_req_t){.op = op, .local_addr = (void *)(uintptr_t)la[i],
                                   .remote_addr = ra[i], .length = (size_t)ln[i]};
    }
    if (submit_check(b, s) < 0 ||
        submit_ro_check(b->engine, reqs, (size_t)nl, "Batch.submit_arrays()") < 0)
        goto out;
    for (Py_ssize_t i = 0; i < nl; i++)
        reqs[i].segment = s->seg;
    r = batch_post(b, s, reqs, (size_t)nl, has_notify ? &notify : NULL, "Batch.submit_arrays()");
out:
    PyMem_Free(reqs);
    PyMem_Free(la);
    PyMem_Free(ra);
    PyMem_Free(ln);
    if (has_notify)
        PyBuffer_Release(&notify);
    return r;
}
