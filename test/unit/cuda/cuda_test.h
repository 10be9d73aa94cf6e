/*
 * Helpers for tests that run the cuda paths on the CUDA test double
 * (cuda_double.c, loaded by the library through OTE_CUDA_LIB).
 */
#ifndef OTE_TEST_CUDA_TEST_H
#define OTE_TEST_CUDA_TEST_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    long streams, events, ipc_open, pinned, dev_allocs, copies;
} ote_cuda_double_stats_t;

/* Path of the double in the build tree. */
static inline const char *cuda_test_double_path(void)
{
    static char path[4096];
    const char *b = getenv("ORBITTE_TEST_BUILDDIR");

    snprintf(path, sizeof(path), "%s/unit/cuda/.libs/libote_cuda_double.so", b ? b : ".");
    return path;
}

/* Select the double for engines created from now on (and child processes). */
static inline void cuda_test_use_double(int devices)
{
    char n[16];

    snprintf(n, sizeof(n), "%d", devices);
    setenv("OTE_CUDA_LIB", cuda_test_double_path(), 1);
    setenv("ORBITTE_CUDA_DOUBLE_DEVICES", n, 1);
}

/* A symbol of the double (the same instance the library loaded). */
static inline void *cuda_test_sym(const char *name)
{
    void *h = dlopen(cuda_test_double_path(), RTLD_NOW | RTLD_LOCAL);

    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", cuda_test_double_path(), dlerror());
        abort();
    }
    return dlsym(h, name);
}

static inline void cuda_test_stats(ote_cuda_double_stats_t *st)
{
    void (*f)(ote_cuda_double_stats_t *) =
        (void (*)(ote_cuda_double_stats_t *))cuda_test_sym("ote_cuda_double_stats");

    f(st);
}

#endif
