/*
 * segment_reread.c: re-reads of a segment's descriptor for a remote range
 * it lacks.
 */
#ifndef OTE_CORE_SEGMENT_REREAD_H
#define OTE_CORE_SEGMENT_REREAD_H

#include "segment_def.h"

/*
 * A remote range the segment's descriptor lacks. The
 * count of re-reads started so far, read before looking the range up
 * (reread_lock taken inside).
 */
uint64_t     ote_segment_reread_ticket(ote_segment_h seg);
/*
 * Read the peer's descriptor again for a range the descriptor lacked when
 * ticket was taken: returns once a re-read that started after that has
 * ended (this caller's, or another's it waited for). One runs at a time,
 * at most one starts per OTE_DESC_REREAD_INTERVAL_MS (a caller that finds
 * the last one too recent waits for the interval to end), and the wait is
 * bounded by that interval plus OTE_CONNECT_TIMEOUT_MS twice (then
 * OTE_ERR_TIMEOUT). OTE_OK when that re-read adopted a descriptor (look
 * the range up again), else why not (the fetch's status:
 * OTE_ERR_PEER_RESTARTED, OTE_ERR_REMOTE_DISCONNECT, ...).
 */
ote_status_t ote_segment_reread(ote_segment_h seg, uint64_t ticket);

#endif
