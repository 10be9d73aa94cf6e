/*
 * The PUTBACK control messages of READ over put-only transports, carried by
 * the control plane (OTE_CTL_PUTBACK / OTE_CTL_PUTBACK_ACK).
 */
#ifndef OTE_PROTO_PUTBACK_MSG_H
#define OTE_PROTO_PUTBACK_MSG_H

#include "base/buf.h"

#include <ote/ote.h>
#include <stddef.h>
#include <stdint.h>

/*
 * PUTBACK (the initiator asks the target to PUT a range of its memory into
 * the initiator's): u64 initiator instance, u64 target instance, u64 id,
 * u64 remote address (the target's memory), u64 local address (the
 * initiator's destination), u32 length (1..OTE_CTL_PUTBACK_MAX_BYTES),
 * str8 initiator name (1..255 bytes: the segment name the target opens to
 * reach the initiator).
 * PUTBACK_ACK: i32 status, u64 id (echoed).
 */
/* Their control message types (core's ote_ctl_type_t leaves these numbers to them). */
enum { OTE_CTL_PUTBACK = 12, OTE_CTL_PUTBACK_ACK = 13 };
#define OTE_CTL_PUTBACK_MAX_BYTES (64u << 20)
#define OTE_CTL_PUTBACK_MAX_LEN   (8 + 8 + 8 + 8 + 8 + 4 + 1 + 255)
#define OTE_CTL_PUTBACK_ACK_LEN   (4 + 8)

typedef struct {
    uint64_t initiator;
    uint64_t target;
    uint64_t id;
    uint64_t remote;
    uint64_t local;
    uint32_t length;
    char     name[256];
} ote_ctl_putback_t;

ote_status_t ote_ctl_putback_encode(const ote_ctl_putback_t *m, ote_buf_t *out);
/* PROTOCOL unless every field is in range and no byte is left over. */
ote_status_t ote_ctl_putback_decode(const uint8_t *buf, size_t len, ote_ctl_putback_t *m_p);
ote_status_t ote_ctl_putback_ack_encode(ote_status_t status, uint64_t id, ote_buf_t *out);
ote_status_t ote_ctl_putback_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                        uint64_t *id_p);

#endif
