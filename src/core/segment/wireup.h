/*
 * wireup.c: a segment's rails (their spraying state from the engine's
 * configuration).
 */
#ifndef OTE_CORE_WIREUP_H
#define OTE_CORE_WIREUP_H

#include "segment_def.h"

/* Build the rails to the peer d describes (segment lock not held). */
ote_status_t ote_wireup_build(ote_segment_h seg, const ote_desc_t *d);
/*
 * Destroy the rails; with release, ask the peer (peer_instance) to drop
 * the eps it accepted for them.
 */
void         ote_wireup_destroy(ote_segment_h seg, bool release, uint64_t peer_instance);
/*
 * Reconnect native rails whose connections failed; with rebuild, also
 * rebuild the eps of rails that are no longer alive (ote_segment_refresh).
 */
ote_status_t ote_wireup_repair(ote_segment_h seg, const ote_desc_t *d, bool rebuild);
/*
 * Rails for the network ifaces none of the segment's rails runs on yet
 * (devices that joined here or at the peer since the build), appended
 * (refresh lock held, same peer instance).
 */
void         ote_wireup_extend(ote_segment_h seg, const ote_desc_t *d);
/*
 * Native rails whose connections failed and whose cool-down ended (all of
 * them with force) are connected again: the probe before they carry again.
 */
ote_status_t ote_wireup_probe(ote_segment_h seg, const ote_desc_t *d, bool force);

#endif
