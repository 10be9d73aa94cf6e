/* Helpers shared by the multi-process tests in this folder. */
#ifndef OTE_MP_UTIL_H
#define OTE_MP_UTIL_H

#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>

/* Deterministic random numbers for tests (splitmix64). */
static inline uint64_t mp_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Log-uniform size in [1, max]. */
static inline size_t mp_rand_size(uint64_t *s, size_t max)
{
    int bits = 0;
    size_t v;

    while (((size_t)1 << bits) < max)
        bits++;
    v = (size_t)(mp_rand(s) & (((size_t)1 << (mp_rand(s) % (unsigned)(bits + 1))) - 1)) + 1;
    return v > max ? max : v;
}

#endif
