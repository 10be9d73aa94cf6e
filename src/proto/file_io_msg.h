/*
 * The FILE_IO control messages of remote file segments (a peer's exported
 * file, see file_remote.h), carried by the control plane (OTE_CTL_FILE_IO /
 * OTE_CTL_FILE_IO_ACK).
 */
#ifndef OTE_PROTO_FILE_IO_MSG_H
#define OTE_PROTO_FILE_IO_MSG_H

#include "base/buf.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * FILE_IO (READ or WRITE of a range of an exported file; the target does
 * the I/O): u8 op, u64 initiator instance, u64 target instance, u64 file
 * id (the descriptor's export entry), u64 offset, u32 length
 * (1..OTE_CTL_FILE_IO_MAX_BYTES), then by op:
 *   1 READ:  nothing (the bytes come in the answer);
 *   2 WRITE: exactly length bytes of data;
 *   3 READ by rails, 4 WRITE by rails: u64 the initiator's address, str8
 *     the initiator's engine name (1..255 bytes, no NUL); the target moves
 *     the bytes over its own rails to or from that address (it WRITEs what
 *     it read from the file, or READs what it writes to it).
 * FILE_IO_ACK: i32 status, u32 length, then
 *   ops 1, 2: length bytes: for READ the bytes read (all of them with OK,
 *     those before the end of the file with OUT_OF_BOUNDS), for WRITE none
 *     (length 0);
 *   ops 3, 4: nothing; length is the count of bytes the target WROTE into
 *     the initiator's memory for a READ (length with OK, those before the
 *     end of the file with OUT_OF_BOUNDS), 0 for a WRITE.
 */
/* Their control message types (core's ote_ctl_type_t leaves these numbers to them). */
enum { OTE_CTL_FILE_IO = 14, OTE_CTL_FILE_IO_ACK = 15 };
enum {
    OTE_CTL_FILE_IO_READ        = 1,
    OTE_CTL_FILE_IO_WRITE       = 2,
    OTE_CTL_FILE_IO_READ_RAILS  = 3, /* wire only: m.op READ with m.rails */
    OTE_CTL_FILE_IO_WRITE_RAILS = 4, /* wire only: m.op WRITE with m.rails */
};
/* The most bytes one request moves: larger requests are cut by the initiator. */
#define OTE_CTL_FILE_IO_MAX_BYTES (1u << 20)
#define OTE_CTL_FILE_IO_HDR_LEN   (1 + 8 + 8 + 8 + 8 + 4)
#define OTE_CTL_FILE_IO_MAX_LEN   (OTE_CTL_FILE_IO_HDR_LEN + OTE_CTL_FILE_IO_MAX_BYTES)
/* A request by rails: the header, the address and the name. */
#define OTE_CTL_FILE_IO_RAILS_MAX_LEN (OTE_CTL_FILE_IO_HDR_LEN + 8 + 1 + 255)
#define OTE_CTL_FILE_IO_ACK_HDR_LEN (4 + 4)

typedef struct {
    uint8_t        op;    /* OTE_CTL_FILE_IO_READ or OTE_CTL_FILE_IO_WRITE */
    bool           rails; /* the bytes go over the target's rails (ops 3, 4) */
    uint64_t       initiator;
    uint64_t       target;
    uint64_t       file_id;
    uint64_t       offset;
    uint32_t       length;
    const uint8_t *data;  /* WRITE not by rails: length bytes (into the payload when decoded) */
    uint64_t       local; /* by rails: the initiator's address, range not wrapping */
    char           name[256]; /* by rails: the initiator's engine name */
} ote_ctl_file_io_t;

ote_status_t ote_ctl_file_io_encode(const ote_ctl_file_io_t *m, ote_buf_t *out);
/* PROTOCOL unless every field is in range and the size is exact. */
ote_status_t ote_ctl_file_io_decode(const uint8_t *buf, size_t len, ote_ctl_file_io_t *m_p);
ote_status_t ote_ctl_file_io_ack_encode(ote_status_t status, const void *data, size_t len,
                                        ote_buf_t *out);
/* *data_p points into buf; at most max bytes are accepted. */
ote_status_t ote_ctl_file_io_ack_decode(const uint8_t *buf, size_t len, size_t max,
                                        ote_status_t *status_p, const uint8_t **data_p,
                                        size_t *data_len_p);
/* The answer to a request by rails: status and count, no bytes. */
ote_status_t ote_ctl_file_io_rails_ack_encode(ote_status_t status, uint32_t count,
                                              ote_buf_t *out);
/* PROTOCOL unless exactly status and count, count at most max. */
ote_status_t ote_ctl_file_io_rails_ack_decode(const uint8_t *buf, size_t len, size_t max,
                                              ote_status_t *status_p, size_t *count_p);

#endif
