/*
 * The data pattern tests and ote_perftest write and verify: byte i of the
 * pattern with a seed, position-dependent so that misplaced bytes show.
 * Header-only: ote_perftest uses it with the public library alone.
 */
#ifndef OTE_BASE_PATTERN_H
#define OTE_BASE_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The pattern's 64-bit word k: its bytes, least significant first, are bytes 8k .. 8k+7. */
static inline uint64_t ote_pattern_word(uint64_t seed, uint64_t k)
{
    uint64_t x = k * 0x9e3779b97f4a7c15ull + seed;

    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return x;
}

static inline uint8_t ote_pattern_byte(uint64_t seed, uint64_t i)
{
    return (uint8_t)(ote_pattern_word(seed, i >> 3) >> (8 * (i & 7)));
}

/* The 8 bytes of a word at b, least significant first (whatever the host's byte order). */
static inline void ote_pattern_store(uint8_t *b, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(b, &w, sizeof(w));
#else
    for (int j = 0; j < 8; j++)
        b[j] = (uint8_t)(w >> (8 * j));
#endif
}

/* p[0..len) = the pattern's bytes off .. off+len: a word at a time between the ends. */
static inline void ote_pattern_fill(void *p, uint64_t off, size_t len, uint64_t seed)
{
    uint8_t *b = p;
    size_t i   = 0;

    for (; i < len && ((off + i) & 7) != 0; i++)
        b[i] = ote_pattern_byte(seed, off + i);
    for (; len - i >= 8; i += 8)
        ote_pattern_store(b + i, ote_pattern_word(seed, (off + i) >> 3));
    for (; i < len; i++)
        b[i] = ote_pattern_byte(seed, off + i);
}

/* Index of the first byte of p[0..len) that differs from the pattern at off, or -1. */
static inline long ote_pattern_check(const void *p, uint64_t off, size_t len, uint64_t seed)
{
    const uint8_t *b = p;
    size_t i         = 0;
    uint8_t w[8];

    for (; i < len && ((off + i) & 7) != 0; i++) {
        if (b[i] != ote_pattern_byte(seed, off + i))
            return (long)i;
    }
    for (; len - i >= 8; i += 8) {
        ote_pattern_store(w, ote_pattern_word(seed, (off + i) >> 3));
        if (memcmp(b + i, w, sizeof(w)) != 0)
            break; /* the bytes below find which */
    }
    for (; i < len; i++) {
        if (b[i] != ote_pattern_byte(seed, off + i))
            return (long)i;
    }
    return -1;
}

#endif
