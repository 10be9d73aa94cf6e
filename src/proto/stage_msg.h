/*
 * The STAGE control messages of remote staging, carried by the control
 * plane (OTE_CTL_STAGE / OTE_CTL_STAGE_ACK).
 */
#ifndef OTE_PROTO_STAGE_MSG_H
#define OTE_PROTO_STAGE_MSG_H

#include "base/buf.h"

#include <ote/ote.h>
#include <stddef.h>
#include <stdint.h>

/*
 * STAGE (remote staging of the target's GPU memory through its pinned
 * host chunks): u8 op, u64 initiator instance, u64 target instance, then
 *   op PIN:      u16 count (1..OTE_CTL_STAGE_MAX)             -> ACK with count chunks
 *   op DELEGATE: u8 dir (1 chunk->GPU, 2 GPU->chunk), u16 count,
 *                count x (u64 chunk, u64 GPU address, u32 length)  -> ACK, count 0
 *   op UNPIN:    u16 count, count x u64 chunk                      -> ACK, count 0
 * STAGE_ACK: i32 status, u32 chunk size (0 unless PIN), u16 count,
 *            count x u64 chunk address (PIN only).
 */
/* Their control message types (core's ote_ctl_type_t leaves these numbers to them). */
enum { OTE_CTL_STAGE = 10, OTE_CTL_STAGE_ACK = 11 };
enum { OTE_CTL_STAGE_PIN = 1, OTE_CTL_STAGE_DELEGATE = 2, OTE_CTL_STAGE_UNPIN = 3 };
enum { OTE_CTL_STAGE_TO_GPU = 1, OTE_CTL_STAGE_FROM_GPU = 2 };
#define OTE_CTL_STAGE_MAX 64
#define OTE_CTL_STAGE_MAX_LEN (1 + 8 + 8 + 1 + 2 + OTE_CTL_STAGE_MAX * (8 + 8 + 4))

typedef struct {
    uint8_t  op;
    uint8_t  dir;
    uint64_t initiator;
    uint64_t target;
    size_t   count;
    struct {
        uint64_t chunk, gpu;
        uint32_t length;
    } e[OTE_CTL_STAGE_MAX];
} ote_ctl_stage_t;

ote_status_t ote_ctl_stage_encode(const ote_ctl_stage_t *m, ote_buf_t *out);
ote_status_t ote_ctl_stage_decode(const uint8_t *buf, size_t len, ote_ctl_stage_t *m_p);
ote_status_t ote_ctl_stage_ack_encode(ote_status_t status, uint32_t chunk_size,
                                      const uint64_t *chunks, size_t count, ote_buf_t *out);
/* chunks holds OTE_CTL_STAGE_MAX entries. */
ote_status_t ote_ctl_stage_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                      uint32_t *chunk_size_p, uint64_t *chunks, size_t *count_p);

#endif
