/*
 * The checks before a submit talks to the peer (batch_check.c).
 */
#ifndef OTE_CORE_BATCH_CHECK_H
#define OTE_CORE_BATCH_CHECK_H

#include "xfer_def.h"

/* The arguments alone: requests well formed, their bytes counted. */
ote_status_t ote_batch_submit_validate(const ote_xfer_req_t *reqs, size_t count,
                                       const void *msg, size_t msg_len, size_t *bytes_p);
/*
 * What may talk to the peer, before any lock of the batch is taken (other
 * threads keep reading statuses): connections a timeout reset are made
 * again (a peer found restarted marks the segment stale, refused at
 * preparation); over transports that do not check at the target, each
 * remote range is checked against the peer's descriptor (refused[i]);
 * found[i] is the region that covered it with the access, or NULL: a hint
 * for the preparation, which checks it against the descriptor it then
 * holds (a refresh may have replaced the one checked).
 */
void         ote_batch_peer_checks(ote_engine_h e, const ote_xfer_req_t *reqs, size_t count,
                                   bool putback, ote_status_t *refused,
                                   const ote_desc_region_t **found);

#endif
