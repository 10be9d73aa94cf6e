/*
 * Protocol layer: rails (a local iface and an ep to the peer that reach
 * both memories), slicing of requests, and posting slices on rails.
 */
#ifndef OTE_PROTO_PROTO_H
#define OTE_PROTO_PROTO_H

#include "mem/mem.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <stdatomic.h>
#include <stdbool.h>

#define OTE_PROTO_MAX_RAILS 16

typedef struct ote_rail {
    ote_tl_iface_t *iface;
    ote_tl_ep_t    *ep;          /* NULL once the segment closed */
    ote_tl_caps_t   caps;
    size_t          worker;      /* index of the worker owning iface and ep */
    int             remote_md;   /* md index in the peer descriptor, -1 none */
    uint64_t        conn_id;     /* to-ep: key of the peer's accepted ep, 0 none */
} ote_rail_t;

/* One piece of a task, posted on one rail. */
typedef struct ote_slice {
    ote_tl_completion_t comp;    /* first member: the completion is the slice */
    struct ote_slice   *next;    /* worker queue link */
    void               *task;    /* owner (core task) */
    ote_rail_t         *rail;
    ote_op_t            op;
    void               *local;
    uint64_t            remote;
    size_t              length;
    ote_region_t       *local_region;
    const void         *rkey;
    size_t              rkey_len;
    const atomic_bool  *cancel;  /* the task's cancel flag, NULL if none */
} ote_slice_t;

typedef struct {
    ote_rail_t *rails[OTE_PROTO_MAX_RAILS];
    size_t      num_rails;
} ote_rail_set_t;

/*
 * Choose rails that can serve op between local memory of type local_mem and
 * remote memory of type remote_mem, and among them drop each rail another
 * one beats: intra-host rails beat network transports (resource.is_network,
 * whatever their scope); then a rail whose target
 * checks accesses beats an unchecked one up to 4 times faster; then any rail
 * beats one more than 4 times slower.
 */
ote_status_t ote_proto_rails_select(const ote_rail_set_t *all, ote_op_t op, unsigned local_mem,
                                    unsigned remote_mem, ote_rail_set_t *out);

/*
 * Order of preference when rails are built (qsort style): intra-host before
 * network transports (a_net, b_net: resource.is_network), checked before
 * unchecked, then faster first.
 */
int ote_proto_caps_cmp(const ote_tl_caps_t *a, bool a_net, const ote_tl_caps_t *b, bool b_net);

/* True if a rail of the set lets the target go unchecked (UCT transports). */
bool ote_proto_rails_unchecked(const ote_rail_set_t *rails);

/*
 * True when a rail with these caps would never be chosen next to the rails
 * already built: for every operation and memory pair it serves, one of them
 * beats it (see ote_proto_rails_select). Such a rail is not worth connecting.
 */
bool ote_proto_rail_dominated(const ote_tl_caps_t *caps, bool network, ote_rail_t *const *rails,
                              size_t n);

/*
 * How many slices a request of length is cut into on these rails, with a
 * slice size limit (0 = the rails' own preference).
 */
size_t ote_proto_slice_count(const ote_rail_set_t *rails, size_t length, size_t slice_size);

/*
 * Fill slices[0..count) for a request: consecutive pieces, rails chosen
 * round-robin starting at *cursor (every rail of the set alike: their
 * bandwidths do not weigh in).
 */
void ote_proto_slice_plan(const ote_rail_set_t *rails, ote_op_t op, void *local,
                          uint64_t remote, size_t length, size_t count, ote_slice_t *slices,
                          unsigned *cursor);

/* A remote key the peer published for a region, for one of its memory domains. */
typedef struct {
    uint8_t        md_index;
    uint16_t       length;
    const uint8_t *data;
} ote_proto_rkey_t;

/* What the peer's descriptor says of a request's remote range. */
typedef struct {
    bool                    published; /* a region the peer published covers it */
    unsigned                mem_type;  /* that region's OTE_MEM_TYPE_* (HOST if none) */
    const ote_proto_rkey_t *rkeys;     /* that region's keys */
    size_t                  num_rkeys;
} ote_proto_remote_t;

/* One request, as the caller hands it to ote_proto_plan(). */
typedef struct {
    ote_op_t      op;
    void         *local;
    ote_region_t *local_region; /* the registered region local lies in */
    uint64_t      remote;
    size_t        length;
} ote_proto_req_t;

/*
 * Plan one request on a peer's rails: choose the rails that reach both
 * memories (ote_proto_rails_select), cut the request into slices over them
 * from *cursor, and give each slice its rail's remote key. A range no
 * published region covers may be one the peer registered since: it goes
 * whole in one slice, so that a checking target checks the whole range
 * (NOT_REGISTERED when it is too large for one message). One slice uses
 * *inline_slice; more are allocated. *slices_p and *count_p are set on
 * success only; release the slices with ote_proto_plan_release().
 * UNREACHABLE when no rail reaches both memories.
 */
ote_status_t ote_proto_plan(const ote_rail_set_t *all, const ote_proto_req_t *req,
                            const ote_proto_remote_t *remote, size_t slice_size,
                            atomic_uint *cursor, ote_slice_t *inline_slice,
                            ote_slice_t **slices_p, size_t *count_p);
void         ote_proto_plan_release(ote_slice_t *slices, ote_slice_t *inline_slice);

/*
 * Post a slice on its rail (worker thread). Returns OTE_INPROGRESS if the
 * completion will be called, or the final status otherwise.
 */
ote_status_t ote_proto_slice_post(ote_slice_t *slice);

/*
 * Protocols an engine opens as it opens the transports (staging through
 * pinned host chunks), NULL-terminated.
 */
extern ote_tl_component_t *const ote_proto_components[];

#endif
