/* Little-endian field access for wire formats, and status checks. */
#ifndef OTE_BASE_WIRE_UTIL_H
#define OTE_BASE_WIRE_UTIL_H

#include <ote/ote.h>
#include <endian.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* One load or store each: the byte order is fixed by htole/letoh. */
static inline void ote_put_u16(uint8_t *b, uint16_t v)
{
    v = htole16(v);
    memcpy(b, &v, sizeof(v));
}

static inline void ote_put_u32(uint8_t *b, uint32_t v)
{
    v = htole32(v);
    memcpy(b, &v, sizeof(v));
}

static inline void ote_put_u64(uint8_t *b, uint64_t v)
{
    v = htole64(v);
    memcpy(b, &v, sizeof(v));
}

static inline uint16_t ote_get_u16(const uint8_t *b)
{
    uint16_t v;

    memcpy(&v, b, sizeof(v));
    return le16toh(v);
}

static inline uint32_t ote_get_u32(const uint8_t *b)
{
    uint32_t v;

    memcpy(&v, b, sizeof(v));
    return le32toh(v);
}

static inline uint64_t ote_get_u64(const uint8_t *b)
{
    uint64_t v;

    memcpy(&v, b, sizeof(v));
    return le64toh(v);
}

static inline bool ote_status_is_known(int32_t s)
{
    return s >= OTE_ERR_REMOTE_NOT_REGISTERED && s <= OTE_INPROGRESS;
}

#endif
