/*
 * src/core/segment/: segments, peers (or files) opened by name.
 *
 * Owns: its state in the engine (ote_segment_table_t: open segments,
 * file exports) and struct ote_segment, the types in segment_def.h; a
 * segment's life and descriptor (segment.c, this header), its control
 * client and pool (segment_ctl.c), re-reads of its descriptor
 * (segment_reread.c) and its page index for the remote-range checks
 * (range_index.c), a peer's exported file as a segment
 * (segment_export.c) and this engine's exports (fexport.c), its rails'
 * wire-up (wireup.c) and the spray of its slices onto them (spray.c);
 * each file declares its functions in the header of its name, which
 * this header includes for the rooms above.
 *
 * May call: worker/ (the ifaces rails are opened on, the workers that
 * post slices), obs/, meta/ (lookups), wire/ (descriptor and control
 * codecs), the engine's facts (core/engine_facts.h); proto and below. Never ctl/ or xfer/, but for a
 * slice's end reported to its task (spray.c -> xfer/batch.h).
 */
#ifndef OTE_CORE_SEGMENT_H
#define OTE_CORE_SEGMENT_H

#include "segment_def.h"
#include "segment_ctl.h"
#include "segment_export.h"
#include "segment_reread.h"
#include "spray.h"
#include "wireup.h"

/*
 * A segment of name with no descriptor and no rails, its control client
 * aimed at ctl_addr (one reference; ote_segment_put frees it). NULL: no
 * memory.
 */
ote_segment_h ote_segment_new_bare(ote_engine_h e, const char *name, const char *ctl_addr);

void         ote_segment_put(ote_segment_h seg);
void         ote_segment_get(ote_segment_h seg);
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

/* The name opens a component's local object ("file:..."), not a peer. */
bool         ote_segment_is_object_name(const char *name);

/* The segment's peer instance is gone: later calls fail PEER_RESTARTED. */
void         ote_segment_mark_stale(ote_segment_h seg);
/*
 * The device dev went down (up false) or came up: pause or resume every
 * rail on it of every open segment; a transport gone from the engine
 * stays paused (the device monitor and engine_join.c call it).
 */
void         ote_segments_link(ote_engine_h e, const char *dev, bool up);
/* ote_segment_open for the engine's own use (seg->internal). */
ote_status_t ote_segment_open_internal(ote_engine_h e, const char *name, ote_segment_h *seg_p);
/* The segment's current descriptor with a reference; ote_segment_desc_put drops it. */
ote_desc_t  *ote_segment_desc_get(ote_segment_h seg);
void         ote_segment_desc_put(ote_desc_t *desc);

#endif
