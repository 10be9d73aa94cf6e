/*
 * src/core/ctl/: the control-plane listener.
 *
 * Owns: the listener thread, its connections, the handler table of core's
 * own message types and of the protocols' services (proto/ctl_target.h)
 * and the host it hands them (ctl.c); the segments kept open to
 * initiators and the transfers on them for the protocols' target sides
 * (ctl_peer.c). ctl_int.h is private to this folder. The protocols'
 * services it serves after its own are listed in wire/ctl_msg.h
 * (OTE_CTL_PROTO_SERVICES).
 *
 * May call: xfer/ (batches for ote_peer_xfer, the received-notification
 * queue), segment/ (segments to initiators, exported files, rails), the
 * rooms below them, and the engine's facts (core/engine_facts.h: the
 * descriptor and ote_mem_alloc/free through its services); proto and
 * below. ctl.c calls ctl_peer.c, never the other way. Only the engine's
 * files call in (start, run, stop) and tests (the counters).
 */
#ifndef OTE_CORE_CTL_H
#define OTE_CORE_CTL_H

#include "core/engine_facts.h"

/* ctl.c */
ote_status_t ote_ctl_start(ote_engine_h engine, const char *listen_addr, ote_ctl_t **ctl_p,
                           char *bound, size_t bound_len);
ote_status_t ote_ctl_run(ote_ctl_t *ctl);
/*
 * ctl_peer.c (the host's peer_xfer, proto/ctl_target.h): one transfer between this engine's memory local and remote in the peer
 * seg (a segment the control listener keeps open to an initiator), waited
 * for until it ended: past the transfer timeout it is canceled (no retry,
 * nothing queued posted) and its posted slices end by their own timeout,
 * so that nothing of it is posted after the answer. The status it ended
 * with (TIMEOUT for a cancel).
 * putback: a PUTBACK's WRITE, whose destination needs only be registered
 * at the peer; else the peer's descriptor must give the access as for any
 * request (over transports that do not check at the target). Blocking:
 * runs on a thread of the listener's PUTBACK or file pool.
 */
ote_status_t ote_peer_xfer(ote_engine_h engine, ote_segment_h seg, ote_op_t op, void *local,
                           uint64_t remote, size_t length, bool putback);
void         ote_ctl_stop(ote_ctl_t *ctl);
/*
 * Segments opened to serve PUTBACKs (and FILE_IOs by rails) so far, and the
 * threads serving PUTBACKs (tests).
 */
void          ote_engine_putback_stats(ote_engine_h engine, unsigned long *opens_p,
                                       unsigned *threads_p);
/*
 * Bytes delivered so far on the rails of transport tl ("tcp", "uct_tcp",
 * ...) of the segments the control listener keeps open to initiators
 * (PUTBACKs and FILE_IOs by rails), open ones only (tests).
 */
uint64_t      ote_engine_peer_rail_bytes(ote_engine_h engine, const char *tl);
/* Descriptor fetches (GET_DESC) the control listener answered so far (tests). */
unsigned long ote_engine_desc_served(ote_engine_h engine);
/* Full descriptor encodings the control listener made for GET_DESC so far (tests). */
unsigned long ote_engine_desc_encodes(ote_engine_h engine);

#endif
