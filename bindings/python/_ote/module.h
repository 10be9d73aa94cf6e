/*
 * orbitte._ote: the CPython extension over libote, one file per type as
 * CPython's own modules are laid out. This private header holds what those
 * files share: the object structs, the type objects, the error helpers
 * (module.c) and the Engine methods that live with the type they make.
 *
 * Objects: Engine, Memory (a registration), Segment (an opened peer),
 * Batch and Transfer. Each holds a reference to its Engine, so an engine
 * outlives them unless Engine.close() is called first; then they are void
 * (the engine released them): every call on them raises InvalidParamError,
 * entering a with block included, except the releasing calls
 * (Memory.deregister(), Segment.close(), Batch.release(),
 * Transfer.release(), leaving a with block), which are idempotent: on a
 * void object they only drop what the Python object itself holds (a
 * registered buffer's export and the object kept alive) and return None.
 * Memory.deregister() raises BufferError, void or not, while views of the
 * memory (memoryview(mem)) are exported.
 *
 * Every call that can wait releases the GIL. While such a call uses a
 * handle it is on the in-flight list (py_call_t) of each object whose
 * handle it uses and of the engine: Segment.close(), Batch.release() and
 * Engine.close() raise BusyError meanwhile and leave the object open
 * (Transfer counts its own calls, transfer.h: its post() and release()
 * raise InvalidParamError). A thread inside a method holds a reference to
 * the object, so no dealloc runs under such a call. Engine.close() also
 * raises BufferError while views of memory it allocated (Engine.alloc) are
 * exported; while it destroys the engine (the GIL released, its tasks may
 * still land), Memory.deregister() raises BusyError and released batches
 * keep their memory until it is done (EngineObject.destroying).
 *
 * The objects take part in garbage collection: each traverses its engine
 * and what it keeps. Memory, Segment, Batch and Transfer have no tp_clear,
 * so a cycle through an orbitte.Engine's __dict__ is broken there and the
 * deallocs release in order, each object before its engine. The Engine's
 * tp_clear acts only when batches are parked on it: it destroys the engine,
 * which ends their tasks, and lets go of their memory.
 *
 * A Batch holds every Memory passed as a local to its submits until it is
 * released and its tasks have ended: a batch released with tasks in flight
 * is parked on its engine (EngineObject.parked) and reaped once they ended
 * (at the next Engine.batch() or Batch.release()), or when the engine is
 * destroyed. A held Memory deregistered meanwhile leaves the library at
 * once but keeps its buffer export and kept object until no batch holds it.
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

/*
 * A call in flight with the GIL released, on the stack of the thread making
 * it: linked into the in-flight list of each object whose handle it uses
 * (call_enter) until it has the GIL again (call_leave).
 */
typedef struct py_call {
    const char     *what; /* "Batch.wait()" */
    struct py_call *next;
} py_call_t;

/* A read-only registration's range [start, end): local READs into it are refused. */
typedef struct {
    uint64_t start, end;
    void    *owner; /* the MemoryObject */
} ro_range_t;

struct MemoryObject;

/* A batch released while its tasks were in flight, and the memory it held
 * (batch NULL: released while the engine was being destroyed). */
typedef struct {
    ote_batch_h           batch;
    struct MemoryObject **held;
    size_t                nheld;
} parked_batch_t;

typedef struct {
    PyObject_HEAD
    ote_engine_h    e;           /* NULL once closed */
    int             destroying;  /* Engine.close() is destroying it (the GIL released) */
    char            name[300];
    py_call_t      *calls;       /* in flight on the engine or any of its objects */
    Py_ssize_t      owned_views; /* buffer views of Engine.alloc() memory exported */
    ro_range_t     *ro;          /* read-only registrations, sorted by start */
    size_t          nro, ro_cap;
    uint64_t        ro_maxlen;   /* the longest of them */
    parked_batch_t *parked;      /* released batches whose tasks may still use their memory */
    size_t          nparked, parked_cap;
} EngineObject;

typedef struct MemoryObject {
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
    Py_ssize_t    holders;  /* batches holding it (as many times as they took it) */
    uint64_t      mark;     /* tells one submit's Memory objects apart (batch_submit.c) */
} MemoryObject;

typedef struct {
    PyObject_HEAD
    EngineObject *engine;
    ote_segment_h seg; /* NULL once closed */
    PyObject     *name;
    py_call_t    *calls;
} SegmentObject;

typedef struct {
    PyObject_HEAD
    EngineObject  *engine;
    ote_batch_h    batch; /* NULL once released */
    size_t         capacity;
    py_call_t     *calls;
    MemoryObject **held;  /* the Memory objects its submits took as locals */
    size_t         nheld, held_cap;
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

/* The exception class of status with message why; NULL. */
PyObject *raise_error(ote_status_t status, const char *what, const char *why);
/* BusyError (status BUSY) "<calls->what> is in progress on this <obj> in another
 * thread ..." when calls is not empty: -1; else 0. */
int calls_refuse(const py_call_t *calls, const char *what, const char *obj);
/* A timeout in seconds (None: -1, no limit) as the int milliseconds of the
 * library: InvalidParamError when NaN or negative; at most INT_MAX. -1 on error. */
int timeout_ms_value(PyObject *o, const char *what, int *ms_p);
/* An access flags argument (unsigned int), for PyArg's O&: OverflowError out of range. */
int access_converter(PyObject *o, void *access_p);
/* An int argument in 0 .. 2^64-1 (TypeError, OverflowError otherwise); -1 on error. */
int u64_arg(PyObject *o, const char *what, const char *name, uint64_t *v_p);
/*
 * Request i of what: a nonzero length (InvalidParamError) and both ranges
 * within the address space (OverflowError); -1 with the exception set.
 */
int req_range_check(uint64_t local, uint64_t remote, uint64_t length, const char *what,
                    Py_ssize_t i);

static inline void call_enter(py_call_t **list, py_call_t *c, const char *what)
{
    c->what = what;
    c->next = *list;
    *list   = c;
}

static inline void call_leave(py_call_t **list, py_call_t *c)
{
    for (py_call_t **p = list; *p != NULL; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            return;
        }
    }
}

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

/* memory.c: the read-only registrations of an engine. ro_check: -1 with
 * InvalidParamError (what: the call, request: its index) when a local READ
 * of [addr, addr+length) overlaps one; call only when eo->nro is not 0. */
int ro_check(EngineObject *eo, uint64_t addr, uint64_t length, const char *what,
             Py_ssize_t request);
void ro_clear(EngineObject *eo);
/* memory.c: let go of a deregistered Memory's buffer export and kept object. */
void memory_drop_export(MemoryObject *m);

/* batch.c: batches and the memory they hold. memory_unhold drops one hold
 * of m (and the reference that came with it), batch_unhold each of
 * held[0..n) (and frees the array); engine_reap releases the parked batches
 * whose tasks ended; engine_unpark_all drops every parked batch once the
 * engine is destroyed (it released them). */
void memory_unhold(MemoryObject *m);
void batch_unhold(MemoryObject **held, size_t n);
void engine_reap(EngineObject *eo);
void engine_unpark_all(EngineObject *eo);

#pragma GCC visibility pop

#endif
