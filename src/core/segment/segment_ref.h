/*
 * segment_ref.c: a segment as an object (made, counted, freed), its
 * descriptor's references, its stale mark, and the holder probe.
 */
#ifndef OTE_CORE_SEGMENT_REF_H
#define OTE_CORE_SEGMENT_REF_H

#include "segment_def.h"

/*
 * A segment of name with no descriptor and no rails, its control client
 * aimed at ctl_addr (one reference; ote_segment_put frees it). NULL: no
 * memory.
 */
ote_segment_h ote_segment_new_bare(ote_engine_h e, const char *name, const char *ctl_addr);

void         ote_segment_put(ote_segment_h seg);
void         ote_segment_get(ote_segment_h seg);
/* n references at once (n > 0), each dropped by its own ote_segment_put. */
void         ote_segment_get_many(ote_segment_h seg, size_t n);

/* The segment's current descriptor with a reference; ote_segment_desc_put drops it. */
ote_desc_t  *ote_segment_desc_get(ote_segment_h seg);
void         ote_segment_desc_put(ote_desc_t *desc);

/* The segment's peer instance is gone: later calls fail PEER_RESTARTED. */
void         ote_segment_mark_stale(ote_segment_h seg);

/* The name opens a component's local object ("file:..."), not a peer. */
bool         ote_segment_is_object_name(const char *name);

/*
 * Whether the engine holder describes still serves its name, asked for its
 * descriptor at holder->ctl_addr within probe_ms (connect, authentication
 * and answer): OTE_OK when that instance of that name answered;
 * OTE_ERR_NOT_FOUND when the connection was refused, nothing answered in
 * time, or another instance or name answered there; another status when
 * that cannot be told (an address that does not parse or resolve, one
 * with no route from here, authentication, a malformed or error answer,
 * a connection closed without one). A meta.h holder_cb.
 */
ote_status_t ote_segment_probe_holder(ote_engine_h e, const ote_desc_t *holder, long probe_ms);

#endif
