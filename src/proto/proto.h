/*
 * Protocol layer: rails (a local iface and an ep to the peer that reach
 * both memories), slicing of requests, and posting slices on rails.
 */
#ifndef OTE_PROTO_PROTO_H
#define OTE_PROTO_PROTO_H

#include "base/topo.h"
#include "mem/mem.h"
#include "uct_ext/tl.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define OTE_PROTO_MAX_RAILS 16

/*
 * Progress a protocol runs on a worker (as UCT's
 * uct_worker_progress_register_safe): progress is called in every round of
 * the worker, under its lock, and returns the events it handled; pending
 * says the protocol still has work no event fd announces (the worker must
 * not sleep). Core hands proto these hooks; proto includes nothing of core.
 */
typedef unsigned (*ote_proto_progress_cb_t)(void *arg);
typedef bool (*ote_proto_pending_cb_t)(void *arg);

typedef struct {
    /* Register on the worker; *id_p identifies the registration. */
    ote_status_t (*add)(void *worker, ote_proto_progress_cb_t progress,
                        ote_proto_pending_cb_t pending, void *arg, int *id_p);
    /* Unregister; the callback does not run after the worker's current round. */
    void         (*remove)(void *worker, int id);
    void          *worker;
} ote_proto_progress_hooks_t;

/* Limits and timers of a rail (from the engine's configuration). */
typedef struct {
    size_t   max_bytes;   /* bytes in flight on the rail (0: no limit)        */
    unsigned max_slices;  /* slices in flight on the rail (0: no limit)       */
    uint64_t cooldown_ns; /* first pause after an error                       */
    uint64_t cooldown_max_ns; /* the pause doubles up to this                 */
    /* How near each NIC is to each memory (the engine's; NULL: not ranked). */
    const ote_topo_table_t *topo;
} ote_rail_params_t;

/*
 * What the spraying knows of a rail (src/proto/rail.c): bytes and slices in
 * flight (bound to the rail and not ended), the bandwidth it delivered (an
 * EWMA seeded from its capabilities), its counters and its state. Shared by
 * every batch and thread that uses the segment; the counters are atomic
 * for readers without the lock (inflight_*, bytes and slices change only
 * under it), the rest is under lock.
 */
typedef struct {
    atomic_size_t     inflight_bytes;
    atomic_uint       inflight_slices;
    _Atomic uint64_t  bytes;      /* delivered */
    _Atomic uint64_t  slices;     /* delivered */
    _Atomic uint64_t  retries;    /* slices that failed here and went to another rail */
    _Atomic uint64_t  errors;     /* slices that failed here */
    pthread_mutex_t   lock;
    int               state;      /* ote_rail_state_t */
    double            bandwidth;  /* bytes per second */
    uint64_t          win_start_ns, win_bytes; /* the current measuring window */
    uint64_t          resume_ns;  /* end of the cool-down */
    uint64_t          cooldown_ns;/* the next cool-down */
    ote_status_t      last_error; /* of the last failure of the rail */
    bool              probe_busy; /* PROBING: the probe slice is in flight */
    bool              link_down;  /* its port is down: paused until it is up */
    /*
     * Set (under lock) whenever state turns COOLING, cleared (under lock)
     * by ote_proto_rail_cooling finding it not COOLING, and false when
     * ote_proto_rail_init makes the rail anew (under the segment's refresh
     * lock, which ote_proto_rail_calm's readers hold): never false while
     * the rail cools, so a reader without the rail's lock that sees it
     * false knows there is no cool-down to look at (ote_proto_rail_calm).
     */
    atomic_bool       maybe_cooling;
    uint32_t          gen;        /* slices bound before a rebuild are not counted */
    ote_rail_params_t params;
} ote_rail_spray_t;

typedef struct ote_rail {
    ote_tl_iface_t  *iface;
    ote_tl_ep_t     *ep;          /* NULL once the segment closed */
    ote_tl_caps_t    caps;
    size_t           worker;      /* index of the worker owning iface and ep */
    int              remote_md;   /* md index in the peer descriptor, -1 none */
    uint64_t         conn_id;     /* to-ep: key of the peer's accepted ep, 0 none */
    const ote_topo_table_t *topo; /* from its params */
    int              topo_nic;    /* its NIC in topo, -1: not ranked (local, unplaced) */
    ote_rail_spray_t spray;
} ote_rail_t;

/* A remote key the peer published for a region, for one of its memory domains. */
typedef struct {
    uint8_t        md_index;
    uint16_t       length;
    const uint8_t *data;
} ote_proto_rkey_t;

typedef struct ote_proto_route ote_proto_route_t;

/* One piece of a task, posted on one rail. */
typedef struct ote_slice {
    ote_tl_completion_t comp;    /* first member: the completion is the slice */
    struct ote_slice   *next;    /* worker queue link */
    void               *task;    /* owner (core task) */
    ote_rail_t         *rail;    /* NULL until bound (ote_proto_slice_bind) */
    const ote_proto_route_t *route; /* the rails it may take, the peer's keys */
    uint32_t            rail_gen;
    unsigned            retries; /* times posted again after a rail failed */
    ote_status_t        last_error;
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
    /*
     * Topology weight of each rail for the request's memory, (0, 1]: its
     * share of what its bandwidth promises (ote_proto_rails_rank); 0 counts
     * as 1 (a set nobody ranked); -1: left out, carries only when no other
     * rail of the set may (failover).
     */
    float       weight[OTE_PROTO_MAX_RAILS];
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
 * Rank the network rails of set for memory at location ("cpu:N", "cuda:N")
 * by how near their NICs are to it (the rails' topology table, see
 * base/topo.h): a rail under a quarter of the best is left out (moved
 * last with weight -1: it carries only when no other rail may, so that
 * failover still has it), the others get their weight (score / best) and
 * go nearest first; rails the topology does not place (intra-host
 * transports, virtual NICs) keep weight 1. Nothing changes without a table
 * or a placed location.
 */
void ote_proto_rails_rank(ote_rail_set_t *set, const char *location);

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
 * The rails a request may take and the remote keys of its region: a slice
 * that fails on one rail is bound again to another of these.
 */
struct ote_proto_route {
    ote_rail_set_t          rails;
    uint32_t                gen;       /* the rails' build, for the caller */
    const _Atomic uint32_t *rails_gen; /* where the caller keeps the build now (NULL: none) */
    const ote_proto_rkey_t *rkeys;
    size_t                  num_rkeys;
    /*
     * The peer instance the request was planned for (its keys are that
     * one's), and where the caller keeps the instance the rails lead to
     * now (NULL: not checked): a slice is not posted on rails built since
     * for another instance (ote_proto_slice_post: PEER_RESTARTED).
     */
    uint64_t                instance;
    const _Atomic uint64_t *rails_instance;
};

/*
 * How many slices a request of length is cut into on these rails, with a
 * slice size limit (0 = the smallest size a rail of the set prefers: a
 * slice may be sprayed to any of them).
 */
size_t ote_proto_slice_count(const ote_rail_set_t *rails, size_t length, size_t slice_size);

/*
 * Fill slices[0..count) for a request: consecutive pieces of nearly equal
 * length, not bound to a rail yet (ote_proto_rail_pick chooses as they go).
 */
void ote_proto_slice_plan(ote_op_t op, void *local, uint64_t remote, size_t length,
                          size_t count, ote_slice_t *slices);

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
 * The rails ote_proto_plan chose last, kept by a caller that plans
 * requests in a row (a segment's submissions, one after another): the next
 * request with the same inputs (the same rails in the same order, the same
 * of them connected, the same op, memory types and local location) takes
 * the same choice without making it again. Zero it before the first
 * request; the caller clears valid where rails may have been built again
 * in place (a new generation of them) and serialises its users. The local
 * location is compared as the whole fixed-size array (regions are zeroed
 * before theirs is written), so no region needs to stay alive for it.
 */
typedef struct {
    bool           valid;
    size_t         num;
    ote_rail_t    *in[OTE_PROTO_MAX_RAILS];
    uint32_t       live; /* bit i: in[i] had its ep */
    ote_op_t       op;
    unsigned       local_mem, remote_mem;
    char           location[OTE_MEM_LOCATION_MAX];
    ote_status_t   status;
    ote_rail_set_t rails;
} ote_proto_plan_memo_t;

/*
 * Plan one request on a peer's rails: choose the rails that reach both
 * memories (ote_proto_rails_select), ranked for the local memory's location
 * (ote_proto_rails_rank), into *route with the region's remote
 * keys, and cut the request into slices that point at route (bound to
 * rails later, ote_proto_rail_pick and ote_proto_slice_bind). A range no
 * published region covers may be one the peer registered since: it goes
 * whole in one slice, so that a checking target checks the whole range
 * (NOT_REGISTERED when it is too large for one message). One slice uses
 * *inline_slice; more are allocated. *slices_p and *count_p are set on
 * success only (route's rails may be written either way); release the
 * slices with ote_proto_plan_release().
 * UNREACHABLE when no rail reaches both memories. memo may be NULL.
 */
ote_status_t ote_proto_plan(const ote_rail_set_t *all, const ote_proto_req_t *req,
                            const ote_proto_remote_t *remote, size_t slice_size,
                            ote_proto_plan_memo_t *memo, ote_proto_route_t *route,
                            ote_slice_t *inline_slice, ote_slice_t **slices_p,
                            size_t *count_p);
void         ote_proto_plan_release(ote_slice_t *slices, ote_slice_t *inline_slice);

/* ---- spraying and failover (rail.c) ---------------------------------------- */

/* Set up r's spraying state (rail just built); gen tells its slices from older ones. */
void ote_proto_rail_init(ote_rail_t *r, const ote_rail_params_t *params, uint32_t gen);

/*
 * The rail of set a slice of length should go to: the one with the earliest
 * predicted completion, (bytes in flight + length) / (bandwidth * its
 * topology weight in set), among those
 * that may carry (active, or due for their probe after a cool-down; the
 * rail's ep connected); a rail the topology left out (weight -1) only when
 * no other may. Its room is taken (ote_proto_slice_bind). NULL with
 * *why_p = OTE_ERR_BUSY when that rail is at its quota (try again when a
 * slice ends), OTE_ERR_UNREACHABLE when no rail may carry. Callers pick for
 * one segment one at a time (its lock).
 */
ote_rail_t  *ote_proto_rail_pick(const ote_rail_set_t *set, size_t length, uint64_t now_ns,
                                 ote_status_t *why_p);

/* Bind s to r (from ote_proto_rail_pick): the rail, its remote key, its accounting. */
void         ote_proto_slice_bind(ote_slice_t *s, ote_rail_t *r, uint64_t now_ns);

/*
 * A slice ended with status: its rail's accounting and bandwidth estimate,
 * its error counter and cool-down. True when status is a failure of the
 * rail (connection reset, timeout, peer unreachable) that another rail of
 * the same peer instance may not have: the slice is unbound, ready to be
 * picked again (ote_proto_slice_retried counts it).
 */
bool         ote_proto_slice_end(ote_slice_t *s, ote_status_t status, uint64_t now_ns);
/* The slice s, which failed on rail from, goes to another rail. */
void         ote_proto_slice_retried(ote_rail_t *from);

/*
 * True when r's connections may be made again now: it is not cooling down,
 * or its cool-down ended. ote_proto_rail_probed then says how that went: a
 * success lets one probe slice through before the rail carries again, a
 * failure starts a longer cool-down (a failure of a probe forced before the
 * cool-down ended keeps the cool-down as it is) and is recorded as the
 * rail's last error (ote_proto_peer_lost_status of it).
 */
bool         ote_proto_rail_probe_due(ote_rail_t *r, uint64_t now_ns);
/* True while r is paused after a failure (not for a port that is down). */
bool         ote_proto_rail_cooling(ote_rail_t *r);
bool         ote_proto_rail_calm(ote_rail_t *r);
void         ote_proto_rail_probed(ote_rail_t *r, ote_status_t status, uint64_t now_ns);
/* True when some rail of set may carry now or after its cool-down (not closed). */
bool         ote_proto_rails_usable(const ote_rail_set_t *set, uint64_t now_ns);
/* The error of the rail of set that failed last (OTE_OK: none failed). */
ote_status_t ote_proto_rails_last_error(const ote_rail_set_t *set);
/*
 * What a slice that none of set's rails may carry (all paused) ends with,
 * when it was never posted: the peer's side of the last failure of a rail
 * (ote_proto_peer_lost_status: REMOTE_DISCONNECT or TIMEOUT, ...); with
 * none recorded (a rail waits for its port to come up, or the peer stopped
 * answering), REMOTE_DISCONNECT. Never UNREACHABLE: a link down passes.
 */
ote_status_t ote_proto_rails_idle_status(const ote_rail_set_t *set);
/*
 * What a rail's failure to reach a peer it reached before says of the
 * peer: TIMEOUT stays TIMEOUT (no answer in time); a refused or reset
 * connection, a route or process gone, an I/O error on its socket
 * (NOT_FOUND, UNREACHABLE, IO, REMOTE_DISCONNECT) is REMOTE_DISCONNECT;
 * any other status is returned as it is (PEER_RESTARTED, AUTH, ...).
 */
ote_status_t ote_proto_peer_lost_status(ote_status_t status);
/*
 * The rail's port went down (up false): it is paused, as in a cool-down,
 * until the port comes up again (up true), when it is probed (one slice)
 * before it carries again.
 */
void         ote_proto_rail_link(ote_rail_t *r, bool up, uint64_t now_ns);
/* The public view of a rail (ote_segment_rails). */
void         ote_proto_rail_info(ote_rail_t *r, uint64_t now_ns, ote_rail_info_t *info);

/*
 * Post a slice on its rail (worker thread). Returns OTE_INPROGRESS if the
 * completion will be called, or the final status otherwise.
 */
ote_status_t ote_proto_slice_post(ote_slice_t *slice);

/* proto's configuration tables (staging: OTE_STAGE_*), NULL-terminated. */
extern const ote_config_table_t *const ote_proto_config_tables[];

#endif
