/*
 * The data pattern tests and ote_perftest write and verify: byte i of the
 * pattern with a seed, position-dependent so that misplaced bytes show.
 * Header-only: ote_perftest uses it with the public library alone.
 */
#ifndef OTE_BASE_PATTERN_H
#define OTE_BASE_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint8_t ote_pattern_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (i >> 3) * 0x9e3779b97f4a7c15ull + seed;

    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint8_t)(x >> (8 * (i & 7)));
}

/* p[0..len) = the pattern's bytes off .. off+len. */
static inline void ote_pattern_fill(void *p, uint64_t off, size_t len, uint64_t seed)
{
    uint8_t *b = p;

    for (size_t i = 0; i < len; i++)
        b[i] = ote_pattern_byte(seed, off + i);
}

/* Index of the first byte of p[0..len) that differs from the pattern at off, or -1. */
static inline long ote_pattern_check(const void *p, uint64_t off, size_t len, uint64_t seed)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < len; i++) {
        if (b[i] != ote_pattern_byte(seed, off + i))
            return (long)i;
    }
    return -1;
}

#endif
