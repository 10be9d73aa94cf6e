/*
 * Wire format of the stream connections (stream.h): tcp's data connections,
 * cma's and shm's local ones.
 *
 * Every message starts with a fixed 32-byte header, little-endian:
 *   0  u16 magic  (OTE_STREAM_MAGIC)
 *   2  u8  version
 *   3  u8  type
 *   4  i32 status (responses)
 *   8  u64 id     (echoed in the response)
 *  16  u64 addr   (target address; HELLO: the target instance expected)
 *  24  u64 length (payload bytes that follow, or bytes asked for)
 * WRITE and READ_RESP carry `length` payload bytes after the header.
 * Responses come back in request order on each connection.
 *
 * With a key (OTE_AUTH_KEY) a connection opens with the handshake of
 * base/auth.h before HELLO: AUTH_HELLO (nonce_i), AUTH_PROOF from the target
 * (nonce_t, mac), AUTH_PROOF from the initiator (mac), AUTH_DONE (status).
 * A target without a key answers AUTH_HELLO with AUTH_DONE(AUTH); a target
 * with a key answers a plain HELLO with HELLO_ACK(AUTH); both then close.
 *
 * By-reference mode (the cma component, over a local stream socket): no data
 * travels on the connection, but for small writes and reads (below). PUT_REF
 * and GET_REF name the target range in addr/length and are followed by an
 * 8-byte trailer, the initiator's own address of the data; the target
 * checks the range against its region table and copies with
 * process_vm_readv/writev, then answers REF_ACK. PROBE
 * (length 16, trailer: the initiator's address of a 16-byte probe) follows
 * HELLO once: the target reads the first 8 bytes and writes their
 * complement into the second 8, and answers PROBE_ACK(status, addr = the
 * value read), so a peer the kernel does not let us reach is found at
 * connect time.
 *
 * Shared mappings (the shm component, by-reference mode with descriptor
 * passing): MAP (addr, length: the range the next copy needs; trailer: the
 * copy, PUT_REF or GET_REF) asks for the memfd of the region that covers
 * it. MAP_ACK answers: on OK addr/length = the whole region, a 16-byte
 * trailer (u64 grant id, u64 flags: bit 0 writable) and exactly one file
 * descriptor (SCM_RIGHTS) on the bytes of the message; on error no
 * descriptor, and UNSUPPORTED when the region cannot be mapped (the copy
 * goes by reference). UNMAP (target -> initiator: id = grant id, addr/length
 * = the region) asks the peer to unmap; UNMAP_ACK (id = grant id) says it
 * did, or never held it.
 *
 * Small writes and reads by value (by-reference mode, where the target's
 * HELLO_ACK sets OTE_STREAM_CAP_INLINE_WRITE and OTE_STREAM_CAP_INLINE_READ in
 * addr): a put of up to OTE_STREAM_INLINE_MAX bytes travels as a WRITE with
 * its payload, answered by WRITE_ACK, and a get as a READ_REQ answered by
 * READ_RESP with the bytes, as on tcp; the target answers the by-reference
 * requests before them first, so the answers keep the order of the
 * requests. It saves the target a process_vm_readv or process_vm_writev,
 * which costs more than sending the bytes.
 *
 * Vectored writes and reads (tcp, where the target's HELLO_ACK sets OTE_STREAM_CAP_WRITEV
 * in addr): WRITEV carries n = addr WRITEs of consecutive requests on the
 * connection, 2 <= n <= OTE_STREAM_WRITEV_MAX, id = the first request's id,
 * length = their payload bytes in all; a table of n entries (u64 addr, u64
 * length; each length 1..OTE_STREAM_WRITEV_ENTRY_MAX) follows the header, then
 * the payloads in table order. The target checks every entry before it
 * places any of its bytes; a refused entry's bytes are read and dropped,
 * the others land. WRITEV_ACK (id and addr = n echoed) answers all n
 * requests: status OK, length = the bytes of all; or, when any entry
 * failed, the first failure's status, length 0, and a trailer of n i32
 * statuses (OTE_STREAM_WRITEV_STATUS_LEN each), one per entry in table order.
 * READV_REQ is the same for READ_REQs (the same capability, addr = n,
 * length = the bytes asked for in all, the same table, no payload);
 * READV_RESP (id and addr = n echoed) carries, after its header, the bytes
 * of every entry the target could read, in table order, length = their
 * sum: status OK when that is all of them, else the first failure's
 * status and, before the bytes, the trailer of n statuses.
 */
#ifndef OTE_STREAM_WIRE_H
#define OTE_STREAM_WIRE_H

#include <ote/ote.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_STREAM_MAGIC     0x544fu
#define OTE_STREAM_VERSION   1
#define OTE_STREAM_HDR_LEN   32
#define OTE_STREAM_AUTH_HELLO_LEN  32
#define OTE_STREAM_AUTH_TPROOF_LEN 64
#define OTE_STREAM_AUTH_IPROOF_LEN 32
#define OTE_STREAM_REF_TRAILER_LEN 8  /* after PUT_REF, GET_REF, PROBE */
#define OTE_STREAM_PROBE_LEN       16
#define OTE_STREAM_MAP_ACK_TRAILER_LEN 16 /* after MAP_ACK: grant id, flags */
#define OTE_STREAM_TRAILER_MAX     16
#define OTE_STREAM_WRITEV_MAX      64          /* WRITEs one WRITEV carries  */
#define OTE_STREAM_WRITEV_ENTRY_MAX (64 * 1024) /* largest payload of one     */
#define OTE_STREAM_WRITEV_ENTRY_LEN 16         /* table entry: addr, length  */
#define OTE_STREAM_WRITEV_STATUS_LEN 4         /* WRITEV_ACK trailer: a status */
#define OTE_STREAM_CAP_WRITEV      1ull        /* HELLO_ACK addr: takes WRITEV, READV_REQ */
#define OTE_STREAM_CAP_INLINE_WRITE 2ull       /* HELLO_ACK addr, by reference: takes WRITE */
#define OTE_STREAM_CAP_INLINE_READ 4ull        /* ... and READ_REQ                          */
#define OTE_STREAM_INLINE_MAX      256         /* ... of up to this many bytes              */

typedef enum {
    OTE_STREAM_HELLO     = 1, /* initiator -> target: id = initiator instance  */
    OTE_STREAM_HELLO_ACK = 2, /* target -> initiator: status                   */
    OTE_STREAM_WRITE     = 3, /* header + payload                              */
    OTE_STREAM_WRITE_ACK = 4, /* status, length = bytes placed                 */
    OTE_STREAM_READ_REQ  = 5, /* addr, length                                  */
    OTE_STREAM_READ_RESP = 6, /* status; on OK length payload bytes follow     */
    OTE_STREAM_AUTH_HELLO = 7, /* initiator: length = 32, nonce_i             */
    OTE_STREAM_AUTH_PROOF = 8, /* target: 64 (nonce_t, mac); initiator: 32    */
    OTE_STREAM_AUTH_DONE  = 9, /* target: status                              */
    OTE_STREAM_PUT_REF    = 10, /* initiator: addr, length; trailer: source   */
    OTE_STREAM_GET_REF    = 11, /* initiator: addr, length; trailer: dest     */
    OTE_STREAM_REF_ACK    = 12, /* target: status, length = bytes copied      */
    OTE_STREAM_PROBE      = 13, /* initiator: length 16; trailer: probe addr  */
    OTE_STREAM_PROBE_ACK  = 14, /* target: status, addr = value read          */
    OTE_STREAM_MAP        = 15, /* initiator: addr, length; trailer: the copy */
    OTE_STREAM_MAP_ACK    = 16, /* target: status, region; trailer + an fd    */
    OTE_STREAM_UNMAP      = 17, /* target: id = grant, addr, length           */
    OTE_STREAM_UNMAP_ACK  = 18, /* initiator: id = grant                      */
    OTE_STREAM_WRITEV     = 19, /* addr = n; table of n (addr, length); data */
    OTE_STREAM_WRITEV_ACK = 20, /* status, addr = n; on error n statuses      */
    OTE_STREAM_READV_REQ  = 21, /* addr = n; table of n (addr, length)        */
    OTE_STREAM_READV_RESP = 22, /* status, addr = n; [n statuses]; the bytes  */
    OTE_STREAM_TYPE_MAX   = 22,
} ote_stream_msg_type_t;

typedef struct {
    uint8_t  version;
    uint8_t  type;
    int32_t  status;
    uint64_t id;
    uint64_t addr;
    uint64_t length;
} ote_stream_hdr_t;

void ote_stream_hdr_encode(const ote_stream_hdr_t *hdr, uint8_t *buf);
/* The fields of a header this side encoded, without checks. */
void ote_stream_hdr_peek(const uint8_t *buf, ote_stream_hdr_t *hdr_p);

/*
 * Decode and check magic, version, type, and that length <= max_payload for
 * messages that carry or ask for a payload (authentication messages have
 * fixed lengths). Requests carry status 0; a response's status is OK or a
 * known error, and an error response carries no payload. Returns
 * OTE_ERR_PROTOCOL on any violation.
 */
ote_status_t ote_stream_hdr_decode(const uint8_t *buf, size_t len, size_t max_payload,
                                   ote_stream_hdr_t *hdr_p);

/*
 * Bytes that follow a decoded header and belong to it, handled together
 * with it (handshake payloads, by-reference trailers, WRITEV's table, a
 * failed WRITEV_ACK's statuses); 0 for messages whose payload is streamed
 * (WRITE, READ_RESP).
 */
size_t ote_stream_hdr_inline_len(const ote_stream_hdr_t *hdr);

/* One entry of a WRITEV table. */
typedef struct {
    uint64_t addr;
    uint64_t length;
} ote_stream_vec_entry_t;

void ote_stream_vec_entry_encode(const ote_stream_vec_entry_t *entry, uint8_t *buf);

/*
 * Decode the table of the WRITEV or READV_REQ hdr (ote_stream_hdr_inline_len(hdr)
 * bytes at buf) into out[hdr->addr]: each entry 1..min(max_payload,
 * OTE_STREAM_WRITEV_ENTRY_MAX) bytes without wrapping, their sum hdr->length;
 * OTE_ERR_PROTOCOL otherwise.
 */
ote_status_t ote_stream_vec_decode(const ote_stream_hdr_t *hdr, const uint8_t *buf,
                                   size_t max_payload, ote_stream_vec_entry_t *out);

/*
 * The statuses of a failed WRITEV_ACK or READV_RESP hdr (its inline bytes at
 * buf) into out[hdr->addr]: each OK or a known error; OTE_ERR_PROTOCOL
 * otherwise.
 */
ote_status_t ote_stream_vec_status_decode(const ote_stream_hdr_t *hdr, const uint8_t *buf,
                                          ote_status_t *out);

#endif
