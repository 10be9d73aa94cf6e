/*
 * src/core/segment/: segments, peers (or files) opened by name.
 *
 * Owns: its state in the engine (ote_segment_table_t: open segments,
 * file exports) and struct ote_segment, the types in segment_def.h; a
 * segment's life: its API (segment.c, this header) over the object
 * itself (segment_ref.c: made, counted, freed, marked stale), its
 * control client and pool (segment_ctl.c), its rails' wire-up
 * (wireup.c), a peer's exported file as a segment (segment_export.c);
 * above those, re-reads of its descriptor (segment_reread.c, which
 * refreshes it) and the spray of its slices onto its rails (spray.c);
 * beside them its page index for the remote-range checks
 * (range_index.c) and this engine's exports (fexport.c). Each file
 * declares its functions in the header of its name; this header
 * includes those of the files below segment.c for the rooms above,
 * which include spray.h and segment_reread.h themselves.
 *
 * Inside the room the files call one way, top first: segment_reread.c
 * -> segment.c -> segment_export.c -> wireup.c -> segment_ref.c ->
 * segment_ctl.c; spray.c calls none of them. A segment's life never
 * calls spray.c either: a close or a rebuild of its rails ends the
 * slices still waiting for them through the table's backlog_end
 * (segment_def.h), which the engine points at the spray, so that of
 * this room only spray.c is in the submit <-> completion circle.
 *
 * May call: worker/ (the ifaces rails are opened on, worker_def.h; the
 * workers that post slices, spray.c alone), obs/, meta/ (lookups), wire/
 * (descriptor and control codecs), the engine's facts
 * (core/engine_facts.h); proto and below. Never ctl/ or xfer/, but for a
 * slice's end reported to its task (spray.c -> xfer/batch.h).
 */
#ifndef OTE_CORE_SEGMENT_H
#define OTE_CORE_SEGMENT_H

#include "segment_def.h"
#include "segment_ctl.h"
#include "segment_export.h"
#include "segment_ref.h"
#include "wireup.h"

/*
 * Before a submit: connections of native rails that failed (a timeout reset
 * them) are made again, bounded by OTE_CONNECT_TIMEOUT_MS; rails whose ep
 * failed for good (UCT) get new eps after a descriptor fetch (as a
 * refresh does). Both once the rail's cool-down ended, or at once when no
 * rail may carry. OTE_OK when nothing was needed or all were made;
 * OTE_ERR_PEER_RESTARTED (segment marked stale) when the peer turned out
 * to be another instance; else why not (the rail's requests then fail
 * with the peer's side of the error: REMOTE_DISCONNECT or TIMEOUT).
 */
ote_status_t ote_segment_repair(ote_segment_h seg);
/*
 * The device dev went down (up false) or came up: pause or resume every
 * rail on it of every open segment; a transport gone from the engine
 * stays paused (the device monitor and engine_join.c call it).
 */
void         ote_segments_link(ote_engine_h e, const char *dev, bool up);
/* ote_segment_open for the engine's own use (seg->internal). */
ote_status_t ote_segment_open_internal(ote_engine_h e, const char *name, ote_segment_h *seg_p);

#endif
