/*
 * orbitte._ote: the CPython extension over libote, one file per type as
 * CPython's own modules are laid out. This private header holds what those
 * files share: the object structs, the type objects, the error helpers
 * (module.c) and the Engine methods that live with the type they make.
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
#ifndef ORBITTE_OTE_MODULE_H
#define ORBITTE_OTE_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <ote/ote.h>

#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Shared between this extension's files only: never exported from the .so. */
#pragma GCC visibility push(hidden)

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

/* The types (engine.c, memory.c, segment.c, batch.c) and the struct sequences
 * (segment.c, batch.c, notify.c), readied by PyInit__ote (module.c). */
extern PyTypeObject EngineType, MemoryType, SegmentType, BatchType;
extern PyTypeObject TransferType; /* transfer.c */
extern PyTypeObject TaskStatusType, RegionType, NotificationType, BatchTelemetryType;
extern PyStructSequence_Desc task_status_desc, region_desc, notification_desc,
    batch_telemetry_desc;

/* module.c: raise the exception class of a status (set by _set_errors); NULL. */
PyObject *raise_status(ote_status_t status, const char *what);
/* An invalid argument found here, before the library was called; NULL. */
PyObject *raise_invalid(const char *what, const char *why);
/* InvalidParamError "the <what> is closed"; NULL. */
PyObject *raise_closed(const char *what);

/* A timeout in seconds (None: -1, no limit) as the int milliseconds of the
 * library: InvalidParamError when NaN or negative; at most INT_MAX. -1 on error. */
int timeout_ms_value(PyObject *o, const char *what, int *ms_p);
/* An access flags argument (unsigned int), for PyArg's O&: OverflowError out of range. */
int access_converter(PyObject *o, void *access_p);

/* -1 with the exception set when the object (or its engine) is closed, else 0. */
int engine_check(EngineObject *eo);
int segment_check(SegmentObject *s);
int batch_check(BatchObject *b);

/* Engine methods, in Engine_methods (engine.c), defined beside their type. */
PyObject *Engine_register_buffer(EngineObject *self, PyObject *args); /* memory.c */
PyObject *Engine_register_ptr(EngineObject *self, PyObject *args);
PyObject *Engine_alloc(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *Engine_open(EngineObject *self, PyObject *args); /* segment.c */
PyObject *Engine_desc_export(EngineObject *self, PyObject *unused);
PyObject *Engine_open_desc(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *Engine_batch(EngineObject *self, PyObject *args, PyObject *kw); /* batch.c */
PyObject *Engine_send(EngineObject *self, PyObject *args);                /* notify.c */
PyObject *Engine_recv(EngineObject *self, PyObject *args, PyObject *kw);
PyObject *Engine_stats(EngineObject *self, PyObject *unused); /* stats.c */

/* Batch methods, in Batch_methods (batch.c), defined in batch_submit.c. */
PyObject *Batch_submit(BatchObject *b, PyObject *args, PyObject *kw);
PyObject *Batch_submit_arrays(BatchObject *b, PyObject *args, PyObject *kw);

/* batch_submit.c, also used by transfer_build.c: an op (READ or WRITE), and n 64-bit
 * values copied (PyMem_Malloc) from a sequence of ints or an 8-byte integer buffer. */
int op_value(PyObject *o, ote_op_t *op);
int u64_array(PyObject *o, const char *what, uint64_t **out, Py_ssize_t *n_p);
PyObject *Engine_transfer(EngineObject *self, PyObject *args, PyObject *kw); /* transfer_build.c */

#pragma GCC visibility pop

#endif
