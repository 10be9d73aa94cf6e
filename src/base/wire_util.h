/* Little-endian field access for wire formats, and status checks. */
#ifndef OTE_BASE_WIRE_UTIL_H
#define OTE_BASE_WIRE_UTIL_H

#include <ote/ote.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline void ote_put_u16(uint8_t *b, uint16_t v)
{
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}

static inline void ote_put_u32(uint8_t *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline void ote_put_u64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t ote_get_u16(const uint8_t *b)
{
    return (uint16_t)(b[0] | (b[1] << 8));
}

static inline uint32_t ote_get_u32(const uint8_t *b)
{
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
           ((uint32_t)b[3] << 24);
}

static inline uint64_t ote_get_u64(const uint8_t *b)
{
    return (uint64_t)ote_get_u32(b) | ((uint64_t)ote_get_u32(b + 4) << 32);
}

static inline bool ote_status_is_known(int32_t s)
{
    return s >= OTE_ERR_STORE_UNAVAILABLE && s <= OTE_INPROGRESS;
}

#endif
