/*
 * segment_ctl.c: the control-plane client of a segment (requests on its
 * connection, a pool of connections, the descriptor fetched from the peer).
 */
#ifndef OTE_CORE_SEGMENT_CTL_H
#define OTE_CORE_SEGMENT_CTL_H

#include "segment_def.h"

/*
 * The status a peer answered a control request with, as is; when it is
 * OTE_ERR_AUTH and this engine has no key, the error log line says that the
 * peer requires OTE_AUTH_KEY.
 */
ote_status_t ote_segment_ctl_refused(ote_segment_h seg, ote_status_t status);
/*
 * Close the segment's control connection and point the next one at ctl_addr
 * (the listener of the instance the segment is bound to now).
 */
void         ote_segment_ctl_rebind(ote_segment_h seg, const char *ctl_addr);
/* The peer's descriptor from its control listener (peer-to-peer metadata). */
ote_status_t ote_segment_fetch_desc(ote_segment_h seg, ote_desc_t **desc_p);
/*
 * One request-reply on the segment's request connection, one at a time
 * (its own lock, not seg->lock: submits on the segment go on meanwhile),
 * within OTE_CONNECT_TIMEOUT_MS.
 */
ote_status_t ote_segment_ctl_request(ote_segment_h seg, uint8_t type, const void *payload,
                                     size_t len, uint8_t expect, uint8_t **resp_p,
                                     size_t *resp_len_p);
/*
 * One request on a control connection of its own (neither seg->lock nor the
 * request connection's lock is held while it waits): for answers that take
 * as long as a transfer (PUTBACK).
 */
ote_status_t ote_segment_ctl_request_alone(ote_segment_h seg, uint8_t type, const void *payload,
                                           size_t len, uint8_t expect, long timeout_ms,
                                           uint8_t **resp_p, size_t *resp_len_p);
/*
 * One request on an idle connection of the segment's pool, or a new one
 * when none is idle; the connection goes back to the pool after a
 * complete exchange. For requests that may be sent twice (a reused
 * connection the peer closed meanwhile is retried once on a new one).
 */
ote_status_t ote_segment_ctl_request_pooled(ote_segment_h seg, uint8_t type, const void *payload,
                                            size_t len, uint8_t expect, long timeout_ms,
                                            uint8_t **resp_p, size_t *resp_len_p);
/* Close the pool's idle connections (the peer's address changed, or the segment goes). */
void         ote_segment_ctl_pool_drain(ote_segment_h seg);

#endif
