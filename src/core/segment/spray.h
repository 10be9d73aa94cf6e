/*
 * spray.c: a segment's slices onto its rails. The room's one file in the
 * submit <-> completion circle (it posts through worker.c and reports
 * slices' ends to xfer/batch.c); the rooms above include this header
 * themselves, and the segment's life reaches the spray only through
 * backlog_end (segment_def.h).
 */
#ifndef OTE_CORE_SPRAY_H
#define OTE_CORE_SPRAY_H

#include "segment_def.h"

/*
 * Slices of seg's tasks wait in the segment's backlog and go to
 * rails as rails have room (ote_proto_rail_pick); with direct, the posting
 * thread may push them out itself (ote_worker_post), else the workers do.
 * A slice no rail may carry ends with its last error (CANCELED once the
 * segment closed or its rails were built again for another instance).
 */
void ote_segment_spray(ote_segment_h seg, ote_slice_t *head, ote_slice_t *tail, bool direct);

#endif
