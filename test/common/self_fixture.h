/*
 * The fixture of the cmocka tests in which an engine transfers to itself:
 * len bytes of its own memory (local), len bytes registered for remote
 * READ and WRITE (remote) and 64 KiB for remote READ only (ro), and its
 * own segment open (self). Asserts on failure.
 */
#ifndef OTE_TEST_SELF_FIXTURE_H
#define OTE_TEST_SELF_FIXTURE_H

#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#define OTE_TEST_SELF_RO_LEN 65536

typedef struct {
    ote_engine_h  e;
    ote_segment_h self;
    uint8_t      *local, *remote, *ro;
    ote_mem_h     mlocal, mremote, mro;
    size_t        len;
} ote_test_self_t;

/* ro_location: the location the read-only range is registered with (NULL: found out). */
static inline ote_test_self_t *ote_test_self_open(size_t len, const char *ro_location)
{
    ote_test_self_t *f = calloc(1, sizeof(*f));
    ote_mem_desc_t d[2];
    ote_mem_h m[2];

    assert_non_null(f);
    f->len = len;
    f->e   = ote_test_engine("127.0.0.1:0");
    assert_int_equal(ote_mem_alloc(f->e, len, NULL, 0, (void **)&f->local, &f->mlocal), OTE_OK);
    f->remote = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    f->ro     = mmap(NULL, OTE_TEST_SELF_RO_LEN, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(f->remote != MAP_FAILED && f->ro != MAP_FAILED);
    d[0] = (ote_mem_desc_t){.addr = f->remote, .length = len,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    d[1] = (ote_mem_desc_t){.addr = f->ro, .length = OTE_TEST_SELF_RO_LEN,
                            .location = ro_location, .access = OTE_ACCESS_REMOTE_READ};
    assert_int_equal(ote_mem_register(f->e, d, 2, m), OTE_OK);
    f->mremote = m[0];
    f->mro     = m[1];
    assert_int_equal(ote_segment_open(f->e, ote_engine_name(f->e), &f->self), OTE_OK);
    return f;
}

static inline void ote_test_self_close(ote_test_self_t *f)
{
    assert_int_equal(ote_segment_close(f->self), OTE_OK);
    assert_int_equal(ote_mem_deregister(f->e, f->mremote), OTE_OK);
    assert_int_equal(ote_mem_deregister(f->e, f->mro), OTE_OK);
    assert_int_equal(ote_mem_free(f->e, f->mlocal), OTE_OK);
    ote_engine_destroy(f->e);
    munmap(f->remote, f->len);
    munmap(f->ro, OTE_TEST_SELF_RO_LEN);
    free(f);
}

/* One transfer to the engine itself, waited for: its status. */
static inline ote_task_status_t ote_test_self_xfer(ote_test_self_t *f, ote_op_t op, void *local,
                                                   uint64_t remote, size_t len, int timeout_ms)
{
    ote_task_status_t st;

    assert_int_equal(ote_test_xfer(f->e, f->self, op, local, remote, len, timeout_ms, &st),
                     OTE_OK);
    return st;
}

/*
 * WRITEs the engine refuses: to memory not registered, past the end of
 * remote, and to ro, which is left untouched.
 */
static inline void ote_test_self_refusals(ote_test_self_t *f, int timeout_ms)
{
    ote_task_status_t st;

    st = ote_test_self_xfer(f, OTE_OP_WRITE, f->local, 0x1000, 64, timeout_ms);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_REMOTE_NOT_REGISTERED);
    assert_int_equal(st.transferred, 0);
    st = ote_test_self_xfer(f, OTE_OP_WRITE, f->local, (uintptr_t)f->remote + f->len - 10, 64,
                            timeout_ms);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    memset(f->ro, 0x7e, OTE_TEST_SELF_RO_LEN);
    st = ote_test_self_xfer(f, OTE_OP_WRITE, f->local, (uintptr_t)f->ro, 64, timeout_ms);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_ACCESS);
    for (size_t i = 0; i < OTE_TEST_SELF_RO_LEN; i++)
        assert_int_equal(f->ro[i], 0x7e);
}

#endif
