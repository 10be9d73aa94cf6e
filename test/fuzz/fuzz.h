/* Shared by the fuzz targets. */
#ifndef OTE_FUZZ_H
#define OTE_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An invariant of the decoder under test: a violation is a finding. */
#define FUZZ_CHECK(cond)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                \
        }                                                                           \
    } while (0)

/*
 * What a decoder accepted encodes again to exactly its input: _encoded is
 * the encoder's call, which writes _out (an ote_buf_t, freed here).
 */
#define FUZZ_CHECK_REENCODES(_encoded, _out, _p, _len)                                   \
    do {                                                                               \
        FUZZ_CHECK((_encoded) == OTE_OK);                                              \
        FUZZ_CHECK((_out).len == (_len) && memcmp((_out).data, (_p), (_len)) == 0);    \
        free((_out).data);                                                             \
    } while (0)

/*
 * A target of a request decoder and its answer's: the first input byte
 * picks one (even: request, odd: answer), which gets the rest in a buffer
 * of its own, so that a read past it is caught.
 */
static inline int fuzz_request_or_answer(const uint8_t *data, size_t size,
                                         void (*request)(const uint8_t *p, size_t len),
                                         void (*answer)(const uint8_t *p, size_t len))
{
    uint8_t *copy;
    size_t len;

    if (size == 0)
        return 0;
    len  = size - 1;
    copy = malloc(len ? len : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 1, len);
    ((data[0] & 1) == 0 ? request : answer)(copy, len);
    free(copy);
    return 0;
}

#endif
