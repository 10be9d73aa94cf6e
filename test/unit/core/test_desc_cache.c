/*
 * The control listener's cache of its engine's encoded descriptor: fetches
 * (GET_DESC) while nothing changed reuse it, and a fetch after a region is
 * registered or deregistered, or a file exported or unexported, sees the
 * change.
 */
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Internal counters (core/engine.h). */
unsigned long ote_engine_desc_served(ote_engine_h engine);
unsigned long ote_engine_desc_encodes(ote_engine_h engine);

#define PAGE 4096

static size_t seg_regions(ote_segment_h seg, ote_region_info_t *info, size_t max)
{
    size_t count = 0;

    assert_int_equal(ote_segment_regions(seg, info, max, &count), OTE_OK);
    return count;
}

/* Refresh seg from target: one more descriptor served; returns the encodings since before. */
static unsigned long refresh(ote_engine_h target, ote_segment_h seg)
{
    unsigned long served = ote_engine_desc_served(target);
    unsigned long enc    = ote_engine_desc_encodes(target);

    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    assert_true(ote_engine_desc_served(target) > served);
    return ote_engine_desc_encodes(target) - enc;
}

static void test_cache_and_changes(void **state)
{
    ote_engine_h t = ote_test_engine(NULL), ini = ote_test_engine(NULL);
    uint8_t *buf   = aligned_alloc(PAGE, 3 * PAGE);
    ote_mem_desc_t d[3];
    ote_mem_h m[3], dup;
    ote_region_info_t info[4];
    ote_segment_h seg;

    (void)state;
    assert_non_null(t);
    assert_non_null(ini);
    assert_non_null(buf);
    for (int i = 0; i < 3; i++)
        d[i] = (ote_mem_desc_t){.addr = buf + i * PAGE, .length = PAGE,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(t, &d[0], 1, &m[0]), OTE_OK);
    assert_int_equal(ote_segment_open(ini, ote_engine_name(t), &seg), OTE_OK);
    assert_true(ote_engine_desc_encodes(t) >= 1);
    assert_int_equal(seg_regions(seg, info, 4), 1);

    /* Nothing changed: served again, not encoded again. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(refresh(t, seg), 0);

    /* A new region: the next fetch encodes and lists it. */
    assert_int_equal(ote_mem_register(t, &d[1], 1, &m[1]), OTE_OK);
    assert_int_equal(refresh(t, seg), 1);
    assert_int_equal(seg_regions(seg, info, 4), 2);
    assert_int_equal(info[0].addr, (uintptr_t)d[0].addr);
    assert_int_equal(info[1].addr, (uintptr_t)d[1].addr);
    assert_int_equal(info[1].length, PAGE);
    assert_int_equal(refresh(t, seg), 0);

    /* Registering a range again (a reference) publishes nothing new. */
    assert_int_equal(ote_mem_register(t, &d[0], 1, &dup), OTE_OK);
    assert_ptr_equal(dup, m[0]);
    assert_int_equal(refresh(t, seg), 0);
    assert_int_equal(ote_mem_deregister(t, dup), OTE_OK);
    assert_int_equal(refresh(t, seg), 0);
    assert_int_equal(seg_regions(seg, info, 4), 2);

    /* A region gone: the next fetch no longer lists it. */
    assert_int_equal(ote_mem_deregister(t, m[0]), OTE_OK);
    assert_int_equal(refresh(t, seg), 1);
    assert_int_equal(seg_regions(seg, info, 4), 1);
    assert_int_equal(info[0].addr, (uintptr_t)d[1].addr);

    /* Gone and back within one fetch: the generation moved, listed at its new place. */
    assert_int_equal(ote_mem_register(t, &d[2], 1, &m[2]), OTE_OK);
    assert_int_equal(ote_mem_deregister(t, m[1]), OTE_OK);
    assert_int_equal(ote_mem_register(t, &d[1], 1, &m[1]), OTE_OK);
    assert_int_equal(refresh(t, seg), 1);
    assert_int_equal(seg_regions(seg, info, 4), 2);
    assert_int_equal(info[0].addr, (uintptr_t)d[2].addr);
    assert_int_equal(info[1].addr, (uintptr_t)d[1].addr);

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_engine_destroy(ini);
    ote_engine_destroy(t);
    free(buf);
}

/* Exports are in the descriptor too: one exported or unexported is seen at the next fetch. */
static void test_cache_exports(void **state)
{
    ote_engine_h t = ote_test_engine(NULL), ini = ote_test_engine(NULL);
    char dir[] = "/tmp/ote_desc_cache_XXXXXX", path[64], name[300];
    ote_file_export_h x;
    ote_region_info_t info[2];
    ote_segment_h seg, fseg;
    unsigned long enc;

    (void)state;
    assert_non_null(t);
    assert_non_null(ini);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/f", dir);
    assert_int_equal(ote_test_write_file(path, 12345, 7), 0);
    snprintf(name, sizeof(name), "cachetest@%s", ote_engine_name(t));
    assert_int_equal(ote_segment_open(ini, ote_engine_name(t), &seg), OTE_OK);
    assert_int_equal(refresh(t, seg), 0);

    assert_int_equal(ote_file_export(t, "cachetest", path, OTE_ACCESS_REMOTE_READ, &x), OTE_OK);
    enc = ote_engine_desc_encodes(t);
    assert_int_equal(ote_segment_open(ini, name, &fseg), OTE_OK);
    assert_int_equal(ote_engine_desc_encodes(t), enc + 1);
    assert_int_equal(seg_regions(fseg, info, 2), 1);
    assert_int_equal(info[0].length, 12345);
    assert_int_equal(ote_segment_close(fseg), OTE_OK);
    assert_int_equal(refresh(t, seg), 0);

    assert_int_equal(ote_file_unexport(x), OTE_OK);
    assert_int_equal(ote_segment_open(ini, name, &fseg), OTE_ERR_NOT_FOUND);

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_engine_destroy(ini);
    ote_engine_destroy(t);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_and_changes),
        cmocka_unit_test(test_cache_exports),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
