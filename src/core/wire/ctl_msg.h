/*
 * Control-plane messages: a fixed 16-byte header, then `length` bytes.
 *   0 u32 magic (OTE_CTL_MAGIC)   4 u8 version   5 u8 type   6 u16 flags (0)
 *   8 u32 length                 12 u32 seq (echoed in the response)
 * Every request gets one response with the same seq. Payloads are decoded
 * with bounds checks; anything malformed is OTE_ERR_PROTOCOL.
 */
#ifndef OTE_CORE_CTL_MSG_H
#define OTE_CORE_CTL_MSG_H

#include "desc.h"
#include "proto/ctl_target.h"
#include "proto/file_io_msg.h"
#include "proto/putback_msg.h"
#include "proto/stage_msg.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The protocols' services, the one line a protocol registers on: the
 * control listener serves them after its own (ctl/ctl.c, in this order:
 * they stop in it), and the codec knows their message types from them
 * (ote_ctl_type_info).
 */
#define OTE_CTL_PROTO_SERVICES \
    &ote_proto_stage_service, &ote_proto_file_io_service, &ote_proto_putback_service

#define OTE_CTL_MAGIC    0x4354454fu /* "OTEC" */
#define OTE_CTL_VERSION  1
#define OTE_CTL_HDR_LEN  16
/* Largest NOTIFY payload: instances, seq, str8 sender, u32 length, data. */
#define OTE_CTL_NOTIFY_MAX_LEN (8 + 8 + 8 + 1 + 255 + 4 + OTE_NOTIFY_MAX)

typedef enum {
    OTE_CTL_GET_DESC   = 1, /* -> DESC                                     */
    OTE_CTL_DESC       = 2, /* i32 status, descriptor bytes                */
    OTE_CTL_NOTIFY     = 3, /* u64 sender key, u64 target instance,     
                               u64 seq, str8 from, u32 length, data
                               -> NOTIFY_ACK                               */
    OTE_CTL_NOTIFY_ACK = 4, /* i32 status                                  */
    OTE_CTL_AUTH_HELLO = 5, /* nonce_i -> AUTH_PROOF (or AUTH_DONE AUTH
                               from a target without a key); see auth.h  */
    OTE_CTL_AUTH_PROOF = 6, /* target: nonce_t, mac; initiator: mac       */
    OTE_CTL_AUTH_DONE  = 7, /* i32 status                                  */
    OTE_CTL_CONNECT    = 8, /* to-ep wire-up, see ote_ctl_connect_t    -> CONNECT_ACK */
    OTE_CTL_CONNECT_ACK = 9, /* i32 status, u16 length, address blob     */
    /*
     * 10..15: the protocols' own, defined with their messages in proto/:
     * OTE_CTL_STAGE, STAGE_ACK (stage_msg.h: remote staging), OTE_CTL_PUTBACK,
     * PUTBACK_ACK (putback_msg.h: READ over put-only rails), OTE_CTL_FILE_IO,
     * FILE_IO_ACK (file_io_msg.h: READ/WRITE of an exported file), each
     * with its row in its service (proto/ctl_target.h).
     */
    OTE_CTL_NOTIFY_BATCH = 16, /* several notifications, see
                                  ote_ctl_notify_batch_t -> NOTIFY_BATCH_ACK */
    OTE_CTL_NOTIFY_BATCH_ACK = 17, /* i32 status, u16 queued               */
    OTE_CTL_CORE_TYPE_MAX = 17, /* the largest of core's own */
    OTE_CTL_TYPE_MAX   = 17,
} ote_ctl_type_t;

/* The answer protocols refuse with before authentication (proto/ctl_target.h). */
_Static_assert(OTE_CTL_REFUSE_AUTH_DONE == OTE_CTL_AUTH_DONE, "AUTH_DONE");

typedef struct {
    uint8_t  type;
    uint32_t length;
    uint32_t seq;
} ote_ctl_hdr_t;

typedef struct {
    uint64_t sender_key;      /* the sender's notification key (notify_send.c) */
    uint64_t target_instance; /* the receiver it was addressed to */
    uint64_t seq;
    char     from[256];
    size_t   length;
    const uint8_t *data; /* points into the payload */
} ote_ctl_notify_t;

/*
 * NOTIFY_BATCH: u64 sender key, u64 target instance, str8 from,
 * u16 count (1..OTE_CTL_NOTIFY_BATCH_MAX), then count times: u64 seq,
 * u32 length (<= OTE_NOTIFY_MAX), data. The seqs strictly grow within a
 * frame (a sender's numbers, see notify_send.c); the whole payload is at most
 * OTE_CTL_NOTIFY_BATCH_MAX_LEN. The answer, NOTIFY_BATCH_ACK, is i32
 * status, u16 queued: the first `queued` notifications of the frame are
 * queued by the receiver (now, or by an earlier copy of the frame); status
 * OK when all are, else why the next one is not (BUSY: backlog full,
 * PEER_RESTARTED: another instance, nothing queued; NO_MEMORY); the
 * decoder refuses any other status.
 */
#define OTE_CTL_NOTIFY_BATCH_MAX     256
#define OTE_CTL_NOTIFY_BATCH_MAX_LEN (64 * 1024)
#define OTE_CTL_NOTIFY_BATCH_HDR_LEN (8 + 8 + 1 + 255 + 2)
#define OTE_CTL_NOTIFY_ITEM_HDR_LEN  (8 + 4)

typedef struct {
    uint64_t       seq;
    size_t         length;
    const uint8_t *data; /* points into the payload */
} ote_ctl_notify_item_t;

typedef struct {
    uint64_t              sender_key;
    uint64_t              target_instance;
    char                  from[256];
    size_t                count;
    ote_ctl_notify_item_t items[OTE_CTL_NOTIFY_BATCH_MAX];
} ote_ctl_notify_batch_t;

ote_status_t ote_ctl_notify_batch_encode(const ote_ctl_notify_batch_t *m, ote_buf_t *out);
ote_status_t ote_ctl_notify_batch_decode(const uint8_t *buf, size_t len,
                                         ote_ctl_notify_batch_t *m_p);
ote_status_t ote_ctl_notify_batch_ack_encode(ote_status_t status, size_t queued, uint8_t out[6]);
ote_status_t ote_ctl_notify_batch_ack_decode(const uint8_t *buf, size_t len,
                                             ote_status_t *status_p, size_t *queued_p);

/*
 * CONNECT: u8 op, u64 initiator instance, u64 target instance, then
 *   op CONNECT: u64 conn id, u16 target worker, str8 transport, str8 device,
 *               u16 length, the initiator ep's address blob;
 *   op RELEASE: u16 count (1..OTE_CTL_CONNECT_MAX_IDS), count x u64 conn id.
 * The target answers CONNECT_ACK with its own ep's blob (empty for RELEASE).
 */
enum { OTE_CTL_CONNECT_OP_CONNECT = 1, OTE_CTL_CONNECT_OP_RELEASE = 2 };
#define OTE_CTL_CONNECT_MAX_IDS 256
/* Largest CONNECT payload: the CONNECT op or the largest RELEASE. */
#define OTE_CTL_CONNECT_MAX_LEN                                                         \
    (1 + 8 + 8 +                                                                        \
     ((8 + 2 + 1 + 255 + 1 + 255 + 2 + OTE_TL_ADDR_MAX) > (2 + 8 * OTE_CTL_CONNECT_MAX_IDS) \
          ? (8 + 2 + 1 + 255 + 1 + 255 + 2 + OTE_TL_ADDR_MAX)                           \
          : (2 + 8 * OTE_CTL_CONNECT_MAX_IDS)))

typedef struct {
    uint8_t        op;
    uint64_t       initiator;
    uint64_t       target;
    uint64_t       conn_id;
    uint16_t       worker;
    char           tl_name[OTE_TL_NAME_MAX];
    char           dev_name[OTE_TL_DEV_MAX];
    size_t         addr_len;
    const uint8_t *addr;   /* points into the payload */
    size_t         num_ids;
    uint64_t       ids[OTE_CTL_CONNECT_MAX_IDS];
} ote_ctl_connect_t;

ote_status_t ote_ctl_connect_encode(const ote_ctl_connect_t *m, ote_buf_t *out);
ote_status_t ote_ctl_connect_decode(const uint8_t *buf, size_t len, ote_ctl_connect_t *m_p);
ote_status_t ote_ctl_connect_ack_encode(ote_status_t status, const void *addr, size_t addr_len,
                                        ote_buf_t *out);
/* addr_p points into buf. */
ote_status_t ote_ctl_connect_ack_decode(const uint8_t *buf, size_t len, ote_status_t *status_p,
                                        const uint8_t **addr_p, size_t *addr_len_p);

void         ote_ctl_hdr_encode(const ote_ctl_hdr_t *hdr, uint8_t *buf);
/* Magic, version, flags 0, a type with a row (ote_ctl_type_info), length <= max_payload. */
ote_status_t ote_ctl_hdr_decode(const uint8_t *buf, size_t len, size_t max_payload,
                                ote_ctl_hdr_t *hdr_p);

ote_status_t ote_ctl_notify_encode(const ote_ctl_notify_t *n, ote_buf_t *out);
ote_status_t ote_ctl_notify_decode(const uint8_t *buf, size_t len, ote_ctl_notify_t *n_p);

/*
 * What a control message type is (ote_ctl_type_info_t, proto/ctl_target.h),
 * from the rows the listener's checks read (and tests and fuzz targets,
 * rather than lists of their own): core's own types' in ctl_msg.c, then
 * those of each protocol's service (OTE_CTL_PROTO_SERVICES).
 */
/* The row of type; NULL for a type without one (0 among them). */
const ote_ctl_type_info_t *ote_ctl_type_info(uint8_t type);
/* Core's own row of a type (its numbers are 1..9 and 16..17), NULL for a protocol's. */
const ote_ctl_type_info_t *ote_ctl_core_type_info(uint8_t type);

/*
 * Largest payload a listener accepts for a request of this type, checked
 * before anything is allocated: its row's request_max, at most cfg_max.
 * Types that only travel as responses, and unknown types, are
 * OTE_ERR_PROTOCOL.
 */
ote_status_t ote_ctl_request_max_len(uint8_t type, size_t cfg_max, size_t *max_p);

/* A response that is only a status. */
ote_status_t ote_ctl_status_decode(const uint8_t *buf, size_t len, ote_status_t *status_p);

#endif
