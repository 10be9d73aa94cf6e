/*
 * What the eps of PUTBACK and of a peer's exported file share: each of
 * their slices is one control exchange, a job of the engine's protocol
 * pool (jobs.h), and the ep holds nothing a slice needs once posted.
 */
#ifndef OTE_PROTO_CTL_EP_H
#define OTE_PROTO_CTL_EP_H

#include "jobs.h"
#include "proto.h"

/*
 * The ep ops of such a rail: put and get are the protocol's, the rest
 * shared (no connection of its own to make or rebuild).
 */
#define OTE_PROTO_CTL_EP_OPS(_put_zcopy, _get_zcopy)                                           \
    {                                                                                          \
        .put_zcopy       = (_put_zcopy),                                                       \
        .get_zcopy       = (_get_zcopy),                                                       \
        .inflight_bytes  = ote_proto_ctl_ep_inflight_bytes,                                    \
        .is_alive        = ote_proto_ctl_ep_is_alive,                                          \
        .destroy         = ote_proto_ctl_ep_destroy,                                           \
        OTE_TL_EP_OPS_NO_CONNECTION,                                                           \
    }

/*
 * The iface of such a rail (and of a staging rail, stage_int.h), apart
 * from its ep: a slice's end reads its rail's iface (the counters' pair,
 * the rail's logs), and a slice may end after the segment destroyed the ep
 * (closing a segment does not wait for the pool's jobs or for device
 * copies). The ep and each request in flight hold a reference
 * (hooks->iface_ref, or the staging op's); the last one frees it.
 */
typedef struct ote_proto_ctl_iface {
    ote_tl_iface_t iface; /* first: the ep's and the rail's iface pointer */
    atomic_long    refs;
} ote_proto_ctl_iface_t;

/* A zeroed iface with one reference (the ep's), or NULL. */
ote_proto_ctl_iface_t *ote_proto_ctl_iface_new(void);
/* One more reference; put drops one (NULL: nothing), the last frees the iface. */
void                   ote_proto_ctl_iface_get(ote_proto_ctl_iface_t *i);
void                   ote_proto_ctl_iface_put(ote_proto_ctl_iface_t *i);

/* 0: the rail's own accounting (rail.c) counts what is in flight. */
size_t       ote_proto_ctl_ep_inflight_bytes(ote_tl_ep_t *tl_ep);
/* Always: each request is its own control exchange, nothing to rebuild. */
bool         ote_proto_ctl_ep_is_alive(ote_tl_ep_t *tl_ep);
/*
 * Frees the ep (allocated whole, its iface an ote_proto_ctl_iface_t) and
 * drops its reference on the iface; a slice in flight holds its own copy of
 * the hooks and its own reference.
 */
void         ote_proto_ctl_ep_destroy(ote_tl_ep_t *tl_ep);
/*
 * Queue job, the first member of its op (allocated with malloc), on the
 * pool: INPROGRESS, or the pool's error with the op freed.
 */
ote_status_t ote_proto_ctl_ep_submit(const ote_proto_ctl_hooks_t *hooks, ote_proto_job_t *job);
/* End a slice with status, under its worker's lock; then drop the request's iface reference. */
void         ote_proto_ctl_ep_complete(const ote_proto_ctl_hooks_t *hooks,
                                       ote_tl_completion_t *comp, ote_status_t status);

#endif
