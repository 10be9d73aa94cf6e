/*
 * A peer's exported file as a segment, initiator side: a remote file rail
 * whose ep sends each slice as a FILE_IO control request to the peer's
 * listener (by the control plane, WRITE: the bytes in the request; READ:
 * the bytes in the answer; by rails: over the engines' data rails, see
 * ote_file_remote_mode_t), on a thread of the engine's protocol pool (jobs.h), so that the
 * blocking round trip never holds a worker. The target checks the range
 * against the exported size and the export's access, then does the I/O
 * on its file (file_io_target.c). Slices are at most
 * OTE_CTL_FILE_IO_MAX_BYTES: the rail's max_msg cuts requests into them.
 */
#ifndef OTE_PROTO_FILE_REMOTE_H
#define OTE_PROTO_FILE_REMOTE_H

#include "file_io_msg.h"
#include "jobs.h"
#include "proto.h"

/* The remote file rail's transport name (ote_segment_rails, logs). */
#define OTE_FILE_REMOTE_TL_NAME "file_remote"

/*
 * How a slice's bytes travel (OTE_FILE_REMOTE). By rails the request names
 * the slice's local address and this engine, and the target moves the
 * bytes over its own data rails to this engine (it WRITEs into the local
 * range what it read from the file, or READs from it what it writes);
 * that range must lie in a region registered for it (REMOTE_WRITE for a
 * READ, REMOTE_READ for a WRITE), and this engine's transports check that
 * access as for any peer. By the control plane the bytes go inside
 * FILE_IO and FILE_IO_ACK.
 */
typedef enum {
    OTE_FILE_REMOTE_AUTO,  /* by rails where the local region allows it, else ctl */
    OTE_FILE_REMOTE_RAILS, /* by rails; a local region without the access: ACCESS */
    OTE_FILE_REMOTE_CTL,   /* always by the control plane */
} ote_file_remote_mode_t;

typedef struct {
    ote_proto_ctl_hooks_t base;    /* ctl: FILE_IO, answered by FILE_IO_ACK */
    uint64_t          file_id;     /* the export entry in the peer's descriptor */
    size_t            max_bytes;   /* bytes per request, 1..OTE_CTL_FILE_IO_MAX_BYTES */
    ote_file_remote_mode_t mode;
    /*
     * auto: set when the peer answered that its rails do not reach this
     * engine; later slices go by the control plane at once. Outlives the
     * slices (the segment's).
     */
    atomic_bool      *rails_off;
    char              name[256];   /* this engine's name: where the target's rails go */
} ote_file_remote_hooks_t;

/* OTE_FILE_REMOTE's value ("auto", "rails", "ctl"; checked by the engine's config). */
ote_file_remote_mode_t ote_proto_file_remote_mode(const char *value);

/* Fill rail as a remote file rail of worker (host memory on this side). */
ote_status_t ote_proto_file_remote_rail_init(ote_rail_t *rail, size_t worker,
                                             const ote_file_remote_hooks_t *hooks);

#endif
