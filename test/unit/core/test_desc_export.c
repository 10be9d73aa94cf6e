/*
 * ote_engine_desc_export() / ote_segment_open_desc(): a peer opened from
 * the bytes of its descriptor moves data, finds regions it registered
 * later (a miss re-reads the descriptor from the peer), and bytes that
 * were altered, truncated, of another version, unsigned or signed with
 * another key are refused with the decoder's status or OTE_ERR_AUTH.
 * Two engines of this process on loopback.
 */
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

#define LEN (1u << 20)

/* An engine with key as its OTE_AUTH_KEY (NULL: none); NULL when keys are unsupported. */
static ote_engine_h engine_keyed(const char *key)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e = NULL;
    ote_status_t st;

    ote_test_setenv_or_unset("OTE_AUTH_KEY", key);
    st = ote_engine_create(&p, &e);
    unsetenv("OTE_AUTH_KEY");
    if (st == OTE_ERR_UNSUPPORTED && key != NULL)
        return NULL;
    assert_int_equal(st, OTE_OK);
    return e;
}

static uint8_t *map(size_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    return p;
}

static ote_mem_h reg(ote_engine_h e, void *p, size_t len)
{
    ote_mem_desc_t d = {.addr = p, .length = len,
                        .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    ote_mem_h m;

    assert_int_equal(ote_mem_register(e, &d, 1, &m), OTE_OK);
    return m;
}

/* Opened from the bytes: WRITE and READ move the right bytes, a late region is found. */
static void test_open_and_move(void **state)
{
    ote_engine_h a = engine_keyed("desc-export-key"), b;
    uint8_t *target, *late, *local;
    ote_mem_h mt, ml, mloc;
    ote_segment_h seg;
    ote_task_status_t st;
    void *buf = NULL;
    size_t len = 0;

    (void)state;
    if (a == NULL)
        skip();
    b      = engine_keyed("desc-export-key");
    target = map(LEN);
    local  = map(LEN);
    mt     = reg(a, target, LEN);
    mloc   = reg(b, local, LEN);
    assert_int_equal(ote_engine_desc_export(a, &buf, &len), OTE_OK);
    assert_true(len > 16);
    assert_int_equal(ote_engine_desc_export(NULL, &buf, &len), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_segment_open_desc(b, buf, len, &seg), OTE_OK);
    assert_int_equal(ote_segment_open_desc(b, NULL, len, &seg), OTE_ERR_INVALID_PARAM);

    assert_true(ote_test_write_lands(b, seg, local, target, LEN, 7, 10000));
    ote_test_fill(target, 0, LEN, 8);
    assert_int_equal(ote_test_xfer(b, seg, OTE_OP_READ, local, (uint64_t)(uintptr_t)target, LEN,
                                   10000, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(local, 0, LEN, 8), -1);

    /* Registered after the export: the submit's miss reads the descriptor from a. */
    late = map(LEN);
    ml   = reg(a, late, LEN);
    assert_true(ote_test_write_lands(b, seg, local, late, LEN, 9, 10000));
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    free(buf);
    assert_int_equal(ote_mem_deregister(a, mt), OTE_OK);
    assert_int_equal(ote_mem_deregister(a, ml), OTE_OK);
    assert_int_equal(ote_mem_deregister(b, mloc), OTE_OK);
    ote_engine_destroy(b);
    ote_engine_destroy(a);
    munmap(target, LEN);
    munmap(late, LEN);
    munmap(local, LEN);
}

/* Every altered byte, every truncation, another version: refused, never opened. */
static void test_refused(void **state)
{
    ote_engine_h a = engine_keyed("desc-export-key"), b;
    uint8_t *target, *bad;
    ote_mem_h mt;
    ote_segment_h seg = NULL;
    void *buf = NULL;
    size_t len = 0, auth = 0, proto = 0;

    (void)state;
    if (a == NULL)
        skip();
    b      = engine_keyed("desc-export-key");
    target = map(LEN);
    mt     = reg(a, target, LEN);
    assert_int_equal(ote_engine_desc_export(a, &buf, &len), OTE_OK);
    bad = malloc(len);
    assert_non_null(bad);

    for (size_t i = 0; i < len; i++) {
        ote_status_t s;

        memcpy(bad, buf, len);
        bad[i] ^= 0x01;
        s = ote_segment_open_desc(b, bad, len, &seg);
        assert_true(s == OTE_ERR_AUTH || s == OTE_ERR_PROTOCOL);
        auth += s == OTE_ERR_AUTH;
        proto += s == OTE_ERR_PROTOCOL;
    }
    /* The MAC and most of the descriptor are caught by the MAC, the framing by the decoder. */
    assert_true(auth > len / 2 && proto > 0);
    for (size_t n = 0; n < len; n++)
        assert_int_equal(ote_segment_open_desc(b, buf, n, &seg), OTE_ERR_PROTOCOL);

    /* The record's version (offset 4), then the descriptor's (offset 12 + 4). */
    memcpy(bad, buf, len);
    bad[4] = 9;
    assert_int_equal(ote_segment_open_desc(b, bad, len, &seg), OTE_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[16] = 99;
    assert_int_equal(ote_segment_open_desc(b, bad, len, &seg), OTE_ERR_PROTOCOL);
    free(bad);
    free(buf);
    ote_engine_destroy(b);

    /* Signed with another key, and unsigned (an engine without a key): AUTH. */
    {
        ote_engine_h other = engine_keyed("another-key"), plain = engine_keyed(NULL);

        assert_int_equal(ote_engine_desc_export(other, &buf, &len), OTE_OK);
        assert_int_equal(ote_segment_open_desc(a, buf, len, &seg), OTE_ERR_AUTH);
        free(buf);
        assert_int_equal(ote_engine_desc_export(plain, &buf, &len), OTE_OK);
        assert_int_equal(ote_segment_open_desc(a, buf, len, &seg), OTE_ERR_AUTH);
        free(buf);
        ote_engine_destroy(other);
        ote_engine_destroy(plain);
    }
    assert_int_equal(ote_mem_deregister(a, mt), OTE_OK);
    ote_engine_destroy(a);
    munmap(target, LEN);
}

/* Without keys: the unsigned record opens; truncated bytes do not. */
static void test_unkeyed(void **state)
{
    ote_engine_h a = engine_keyed(NULL), b = engine_keyed(NULL);
    uint8_t *target = map(LEN), *local = map(LEN);
    ote_mem_h mt = reg(a, target, LEN), ml = reg(b, local, LEN);
    ote_segment_h seg;
    void *buf = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(ote_engine_desc_export(a, &buf, &len), OTE_OK);
    assert_int_equal(ote_segment_open_desc(b, buf, len - 1, &seg), OTE_ERR_PROTOCOL);
    assert_int_equal(ote_segment_open_desc(b, buf, len, &seg), OTE_OK);
    assert_true(ote_test_write_lands(b, seg, local, target, LEN, 11, 10000));
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    free(buf);
    assert_int_equal(ote_mem_deregister(a, mt), OTE_OK);
    assert_int_equal(ote_mem_deregister(b, ml), OTE_OK);
    ote_engine_destroy(b);
    ote_engine_destroy(a);
    munmap(target, LEN);
    munmap(local, LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_move),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_unkeyed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
