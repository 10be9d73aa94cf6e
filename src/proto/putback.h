/*
 * READ over put-only transports (UCT's tcp has PUT and no GET): the
 * initiator sends PUTBACK over the control plane naming the remote range,
 * its own destination and its name; the target checks the range against
 * its region table for OTE_ACCESS_REMOTE_READ (as a checking transport
 * does), PUTs the bytes into exactly that destination over its own rail to
 * the initiator, and answers PUTBACK_ACK with the status once the PUT
 * completed. A putback rail stands in front of a put-only host rail and
 * serves READs of host memory only; ote_proto_rails_select takes it only
 * where no other rail serves the READ.
 */
#ifndef OTE_PROTO_PUTBACK_H
#define OTE_PROTO_PUTBACK_H

#include "jobs.h"
#include "proto.h"
#include "putback_msg.h"

typedef struct {
    ote_proto_ctl_hooks_t base;   /* ctl: PUTBACK, answered by PUTBACK_ACK */
    char             name[256];   /* this engine's name: the target opens it */
} ote_putback_hooks_t;

/* PUTBACKs a target accepts at once (running or queued; one peer address: its share,
 * ctl_target.h); more are answered BUSY. */
#define OTE_PUTBACK_TARGET_MAX     64
/*
 * Threads that serve them (putback_target.c): a pool of the control
 * listener's own, apart from the engine's protocol pool, so that two
 * engines reading from each other cannot hold every thread waiting for
 * answers the other's queued PUTBACKs would give.
 */
#define OTE_PUTBACK_TARGET_THREADS 4

/*
 * Fill rail (a free slot of the segment's rails) as the putback rail over
 * host. UNSUPPORTED unless host has PUT, no GET, and reaches host memory
 * on both ends.
 */
ote_status_t ote_proto_putback_rail_init(ote_rail_t *rail, ote_rail_t *host,
                                         const ote_putback_hooks_t *hooks);

/* True for a putback rail. */
bool ote_proto_putback_rail(const ote_rail_t *rail);

#endif
