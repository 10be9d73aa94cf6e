/*
 * segment_export.c: a peer's exported file as a segment.
 */
#ifndef OTE_CORE_SEGMENT_EXPORT_H
#define OTE_CORE_SEGMENT_EXPORT_H

#include "segment_def.h"

/* The name ("<export>@<engine name>") opens a peer's exported file. */
bool         ote_segment_is_export_name(const char *name);
/* Find the export in the peer's descriptor; its descriptor and rails. */
ote_status_t ote_segment_open_export(ote_segment_h seg, const char *name, ote_desc_t **desc_p);
/*
 * Read the peer's descriptor again (refresh_lock held): *desc_p is the
 * segment's next; a new peer instance is PEER_RESTARTED (segment marked
 * stale) unless rebind, which builds the rails to it.
 */
ote_status_t ote_segment_resolve_export(ote_segment_h seg, bool rebind, ote_desc_t **desc_p,
                                        int *restarted_p);

#endif
