#include "buf.h"

#include "wire_util.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffer writer ---------------------------------------------------- */

void ote_buf_put(ote_buf_t *b, const void *p, size_t len)
{
    if (b->failed)
        return;
    if (b->len + len > b->cap) {
        size_t ncap = b->cap ? b->cap : 256;
        uint8_t *n;

        while (ncap < b->len + len)
            ncap *= 2;
        n = realloc(b->data, ncap);
        if (n == NULL) {
            b->failed = 1;
            return;
        }
        b->data = n;
        b->cap  = ncap;
    }
    memcpy(b->data + b->len, p, len);
    b->len += len;
}

void ote_buf_put_u8(ote_buf_t *b, uint8_t v)
{
    ote_buf_put(b, &v, 1);
}

void ote_buf_put_u16(ote_buf_t *b, uint16_t v)
{
    uint8_t x[2];

    ote_put_u16(x, v);
    ote_buf_put(b, x, 2);
}

void ote_buf_put_u32(ote_buf_t *b, uint32_t v)
{
    uint8_t x[4];

    ote_put_u32(x, v);
    ote_buf_put(b, x, 4);
}

void ote_buf_put_u64(ote_buf_t *b, uint64_t v)
{
    uint8_t x[8];

    ote_put_u64(x, v);
    ote_buf_put(b, x, 8);
}

/* s after its length in len_bytes (1 or 2); failed if it does not fit. */
static void put_str(ote_buf_t *b, const char *s, size_t len_bytes)
{
    size_t l = strlen(s);

    if (l >= (size_t)1 << (8 * len_bytes)) {
        b->failed = 1;
        return;
    }
    if (len_bytes == 1)
        ote_buf_put_u8(b, (uint8_t)l);
    else
        ote_buf_put_u16(b, (uint16_t)l);
    ote_buf_put(b, s, l);
}

void ote_buf_put_str8(ote_buf_t *b, const char *s)
{
    put_str(b, s, 1);
}

void ote_buf_put_str16(ote_buf_t *b, const char *s)
{
    put_str(b, s, 2);
}

/* ---- bounds-checked reader -------------------------------------------- */

const uint8_t *ote_rd_bytes(ote_rd_t *r, size_t len)
{
    const uint8_t *p;

    if (r->failed || len > r->left) {
        r->failed = 1;
        return NULL;
    }
    p = r->p;
    r->p += len;
    r->left -= len;
    return p;
}

uint8_t ote_rd_u8(ote_rd_t *r)
{
    const uint8_t *p = ote_rd_bytes(r, 1);

    return p ? p[0] : 0;
}

uint16_t ote_rd_u16(ote_rd_t *r)
{
    const uint8_t *p = ote_rd_bytes(r, 2);

    return p ? ote_get_u16(p) : 0;
}

uint32_t ote_rd_u32(ote_rd_t *r)
{
    const uint8_t *p = ote_rd_bytes(r, 4);

    return p ? ote_get_u32(p) : 0;
}

uint64_t ote_rd_u64(ote_rd_t *r)
{
    const uint8_t *p = ote_rd_bytes(r, 8);

    return p ? ote_get_u64(p) : 0;
}

static void rd_str(ote_rd_t *r, size_t len, char *out, size_t max)
{
    const uint8_t *p;

    if (len >= max) {
        r->failed = 1;
        return;
    }
    p = ote_rd_bytes(r, len);
    if (p == NULL || memchr(p, '\0', len) != NULL) {
        r->failed = 1;
        return;
    }
    memcpy(out, p, len);
    out[len] = '\0';
}

void ote_rd_str8(ote_rd_t *r, char *out, size_t max)
{
    rd_str(r, ote_rd_u8(r), out, max);
}

void ote_rd_str16(ote_rd_t *r, char *out, size_t max)
{
    rd_str(r, ote_rd_u16(r), out, max);
}
