/*
 * Byte codecs for wire messages: a growable writer and a bounds-checked
 * reader, little-endian integers and length-prefixed strings.
 */
#ifndef OTE_BASE_BUF_H
#define OTE_BASE_BUF_H

#include <ote/ote.h>
#include <stddef.h>
#include <stdint.h>

/* Growable byte buffer for encoders. */
typedef struct {
    uint8_t *data;
    size_t   len, cap;
    int      failed;
} ote_buf_t;

void ote_buf_put(ote_buf_t *b, const void *p, size_t len);
void ote_buf_put_u8(ote_buf_t *b, uint8_t v);
void ote_buf_put_u16(ote_buf_t *b, uint16_t v);
void ote_buf_put_u32(ote_buf_t *b, uint32_t v);
void ote_buf_put_u64(ote_buf_t *b, uint64_t v);
void ote_buf_put_str8(ote_buf_t *b, const char *s);  /* u8 length + bytes  */
void ote_buf_put_str16(ote_buf_t *b, const char *s); /* u16 length + bytes */

/* How an encoding into b went: OTE_ERR_NO_MEMORY when the buffer could not grow. */
static inline ote_status_t ote_buf_status(const ote_buf_t *b)
{
    return b->failed ? OTE_ERR_NO_MEMORY : OTE_OK;
}

/* Bounds-checked reader for decoders. */
typedef struct {
    const uint8_t *p;
    size_t         left;
    int            failed;
} ote_rd_t;

uint8_t  ote_rd_u8(ote_rd_t *r);
uint16_t ote_rd_u16(ote_rd_t *r);
uint32_t ote_rd_u32(ote_rd_t *r);
uint64_t ote_rd_u64(ote_rd_t *r);
const uint8_t *ote_rd_bytes(ote_rd_t *r, size_t len);
/* Length-prefixed string into out (max includes NUL); fails if too long or has NUL. */
void     ote_rd_str8(ote_rd_t *r, char *out, size_t max);
void     ote_rd_str16(ote_rd_t *r, char *out, size_t max);

/* How a decoding by r went: OTE_ERR_PROTOCOL unless it read the whole message, all valid. */
static inline ote_status_t ote_rd_end(const ote_rd_t *r)
{
    return r->failed || r->left != 0 ? OTE_ERR_PROTOCOL : OTE_OK;
}

#endif
