/*
 * File component internals: the open files (file_obj.c), the iface with its
 * io_uring ring (file_iface.c), and operations on the ring (file_io.c).
 *
 * One iface per worker, each with its own ring of 2 * OTE_FILE_URING_QD entries:
 * at most OTE_FILE_URING_QD reads and writes in flight, the rest of the ring for
 * cancellations. An operation (one slice) has one request in the ring at a
 * time and is continued chunk by chunk: short reads and writes, bounce
 * chunks. Its completion is called exactly once, from progress.
 */
#ifndef OTE_UCT_EXT_FILE_INT_H
#define OTE_UCT_EXT_FILE_INT_H

#include "file.h"
#include "base/cufile_api.h"
#include "uct_ext/tl.h"

#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Bounce buffers per iface, each OTE_FILE_BOUNCE_SIZE (allocated on first use). */
#define OTE_FILE_BOUNCE_COUNT 8
#define OTE_FILE_BOUNCE_SIZE  (1u << 20)
/* Largest single read or write handed to the kernel (the length is 32 bits). */
#define OTE_FILE_MAX_IO       (1u << 30)
/* user_data of cancellation requests: their completions carry nothing. */
#define OTE_FILE_CANCEL_TAG   1ull
/* Fixed-file slots per ring: two per file segment (buffered and O_DIRECT fds). */
#define OTE_FILE_FIXED_SLOTS  64
/* How long ep destroy waits for one completion before asking again. */
#define OTE_FILE_DRAIN_MS     100

/* File segments: the files the component opens as segments (file_obj.c). */
extern const ote_tl_object_ops_t ote_file_object_ops;

struct ote_file {
    uint64_t          token;     /* the address blob names the file by it */
    atomic_long       refs;
    int               fd;        /* buffered I/O                           */
    int               direct_fd; /* O_DIRECT, -1 where not used            */
    size_t            mem_align; /* O_DIRECT alignment of memory           */
    size_t            off_align; /* ... of file offsets and lengths        */
    int               direct;    /* OTE_FILE_DIRECT: OTE_TERNARY_*         */
    bool              writable;
    _Atomic uint64_t  size;      /* the region's end: bound of WRITEs      */
    bool              gds;       /* gds_handle registered: GPU memory direct */
    ote_cufile_handle_t gds_handle; /* cuFile's handle of direct_fd        */
    struct ote_file  *next;      /* open files of this process             */
    char              path[];
};

/* The file of a token, with a reference, or NULL. */
ote_file_t *ote_file_lookup(uint64_t token);
/* The file an address blob names, with a reference; NULL for anything else. */
ote_file_t *ote_file_from_address(const void *buf, size_t len);

typedef enum {
    FILE_MODE_BUFFERED, /* the buffered fd, the caller's memory          */
    FILE_MODE_DIRECT,   /* the O_DIRECT fd, the caller's memory          */
    FILE_MODE_BOUNCE,   /* the O_DIRECT fd through an aligned bounce buffer */
    FILE_MODE_GDS,      /* GPU memory with cuFile, on the iface's cuFile thread */
} file_mode_t;

/* A GPU range registered with cuFile (the file md's handle of a region). */
typedef struct {
    void  *base;
    size_t length;
    bool   registered; /* cuFileBufRegister took it; else cuFile bounces it */
} file_gds_buf_t;

typedef struct file_iface file_iface_t;
typedef struct file_ep    file_ep_t;

typedef struct file_op {
    ote_tl_completion_t *comp;
    file_ep_t           *ep;
    bool                 write;
    uint8_t             *local;
    uint64_t             offset;    /* in the file */
    size_t               length;
    size_t               done;      /* bytes moved so far */
    uint64_t             start_ns;
    bool                 in_ring;   /* a request of it is in the ring */
    bool                 timed_out; /* past OTE_XFER_TIMEOUT_MS: ends TIMEOUT */
    bool                 cancel_sent;
    /* the request in the ring */
    file_mode_t          mode;
    int                  bounce;    /* bounce buffer index, -1 none */
    size_t               skip;      /* bounce READ: bytes before offset+done */
    size_t               want;      /* bytes of the op this request moves */
    struct file_op      *prev, *next; /* iface->ops, oldest first */
    bool                 queued;    /* waits for room in the ring */
    /* FILE_MODE_GDS: on the cuFile thread from post to its return */
    const file_gds_buf_t *gds_buf;  /* the region's registration, or NULL */
    bool                 in_gds;
    bool                 gds_skip;  /* under the thread's lock: return unstarted */
    ote_status_t         gds_status;
    struct file_op      *gds_next;
} file_op_t;

struct file_ep {
    ote_tl_ep_t  super;
    ote_file_t  *file;
    size_t       ops;         /* operations not yet completed */
    size_t       bytes;       /* their bytes */
    bool         destroying;
    bool         fixed_tried; /* fixed-file slots asked for (first operation) */
    int          fixed_fd;    /* slot of file->fd in the ring, -1 none      */
    int          fixed_direct; /* slot of file->direct_fd, -1 none          */
};

/* The iface's cuFile thread: cuFile calls block, so they run off the worker. */
typedef struct {
    bool             started;
    bool             stop;
    pthread_t        thread;
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    file_op_t       *queue_head, *queue_tail; /* oldest first */
    file_op_t       *done_head, *done_tail;
    atomic_uint      ndone;      /* ops in done: progress takes the lock only then */
    unsigned         held;       /* ops on the thread (queued, running, done) */
} file_gds_t;

struct file_iface {
    ote_tl_iface_t   super;
    struct io_uring  ring;
    bool             ring_ok;
    int              efd;          /* eventfd the ring signals completions on */
    unsigned         qd;           /* reads and writes in flight, at most */
    unsigned         in_ring;      /* ... now */
    file_op_t       *ops_head, *ops_tail; /* every operation not completed */
    file_op_t       *free_ops;     /* ended operations, reused (next links them) */
    size_t           queued;       /* of them, waiting for room */
    /* bounce buffers */
    uint8_t         *bounce_mem;
    size_t           bounce_size;
    bool             bounce_fixed; /* registered with the ring */
    unsigned         bounce_free;  /* bit i: buffer i free */
    /* fixed files: the ring's sparse file table, slots taken by eps */
    bool             fixed_ok;
    uint64_t         fixed_used;   /* bit i: slot i taken */
    file_gds_t       gds;
};

/* file_io.c. gds_memh: GPU memory (the file md's handle, or NULL), moved with cuFile. */
ote_status_t ote_file_op_post(file_ep_t *ep, bool write, void *local, size_t length,
                              uint64_t offset, bool gpu, void *gds_memh,
                              ote_tl_completion_t *comp);
/* The operation ends: its completion is called, once. */
void         ote_file_op_finish(file_iface_t *iface, file_op_t *op, ote_status_t status);

/* file_gds.c: the md that registers GPU memory with cuFile, and the cuFile thread. */
extern const ote_md_ops_t ote_file_gds_md_ops;
ote_status_t ote_file_gds_md_open(ote_md_t **md_p);
void         ote_file_gds_md_close(ote_md_t *md);
/* Hand op to the thread. */
ote_status_t ote_file_gds_start(file_iface_t *iface, file_op_t *op);
/* End the operations the thread returned; how many. */
unsigned     ote_file_gds_reap(file_iface_t *iface);
/* Ask the thread to return op without I/O if it has not started it. */
void         ote_file_gds_skip(file_iface_t *iface, file_op_t *op);
/* Stop the thread (no operation held). */
void         ote_file_gds_stop(file_iface_t *iface);
/* cuFile's handle of f is released (the file's last reference). */
void         ote_file_gds_detach(ote_file_t *f);
/* Start what waits for room, submit, handle completions; events handled. */
unsigned     ote_file_iface_progress(ote_tl_iface_t *iface);
ote_status_t ote_file_iface_event_arm(ote_tl_iface_t *iface);
void         ote_file_iface_check_timeouts(ote_tl_iface_t *iface, uint64_t deadline_ns);
/*
 * Every operation of ep (every one with ep NULL) ends: those not in the
 * ring at once CANCELED, those in it once the kernel returned them (asked
 * to cancel them), so that no memory is touched after this returns.
 */
void         ote_file_iface_drain(file_iface_t *iface, file_ep_t *ep);
/* Give back ep's fixed-file slots (after its operations drained). */
void         ote_file_ep_unfix(file_ep_t *ep);

#endif
