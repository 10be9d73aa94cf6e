/*
 * base/util.h: the growth helpers of arrays and rings (ote_array_reserve,
 * ote_ring_grow), from no capacity, past a first capacity of 0, and sizes
 * past SIZE_MAX refused without a change.
 */
#include "base/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

/* From nothing, with first capacities of 8 and of 0: room for need, contents kept. */
static void test_array_reserve_grows(void **state)
{
    size_t firsts[] = {8, 0, 1};

    (void)state;
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++) {
        uint32_t *a = NULL;
        size_t cap  = 0;

        for (uint32_t i = 0; i < 1000; i++) {
            assert_int_equal(ote_array_reserve((void **)&a, &cap, i + 1, sizeof(*a), firsts[f]),
                             OTE_OK);
            assert_true(cap >= i + 1);
            a[i] = i * 7u;
        }
        for (uint32_t i = 0; i < 1000; i++)
            assert_int_equal(a[i], i * 7u);
        /* Room already there: nothing moves. */
        {
            uint32_t *before = a;
            size_t cap_before = cap;

            assert_int_equal(ote_array_reserve((void **)&a, &cap, 10, sizeof(*a), firsts[f]),
                             OTE_OK);
            assert_ptr_equal(a, before);
            assert_int_equal(cap, cap_before);
        }
        free(a);
    }
}

/* A first capacity of 0 asked for one element gets exactly one. */
static void test_array_reserve_first_zero(void **state)
{
    uint64_t *a = NULL;
    size_t cap  = 0;

    (void)state;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 1, sizeof(*a), 0), OTE_OK);
    assert_int_equal(cap, 1);
    a[0] = 42;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 3, sizeof(*a), 0), OTE_OK);
    assert_int_equal(cap, 4);
    assert_int_equal(a[0], 42);
    free(a);
}

/* Sizes past SIZE_MAX: OTE_ERR_NO_MEMORY, the array and its capacity unchanged. */
static void test_array_reserve_overflow(void **state)
{
    uint64_t *a = NULL;
    size_t cap  = 0;

    (void)state;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 4, sizeof(*a), 4), OTE_OK);
    a[3] = 9;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, SIZE_MAX / 4, sizeof(*a), 4),
                     OTE_ERR_NO_MEMORY);
    assert_int_equal(ote_array_reserve((void **)&a, &cap, SIZE_MAX, 1, 4), OTE_ERR_NO_MEMORY);
    assert_int_equal(cap, 4);
    assert_int_equal(a[3], 9);
    free(a);
}

/* A ring that wrapped keeps its order when it grows, from a first capacity of 0 too. */
static void test_ring_grow_order(void **state)
{
    size_t firsts[] = {4, 0};

    (void)state;
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++) {
        int *r       = NULL;
        size_t cap   = 0, head = 0, count = 0;
        int next_in  = 0, next_out = 0;

        for (int round = 0; round < 200; round++) {
            /* Push three, pop two: the ring wraps and grows as it fills. */
            for (int k = 0; k < 3; k++) {
                if (count == cap)
                    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, count, sizeof(*r),
                                                   firsts[f]),
                                     OTE_OK);
                assert_true(count < cap);
                r[(head + count++) % cap] = next_in++;
            }
            for (int k = 0; k < 2; k++) {
                assert_int_equal(r[head], next_out++);
                head = (head + 1) % cap;
                count--;
            }
        }
        for (size_t i = 0; i < count; i++)
            assert_int_equal(r[(head + i) % cap], next_out + (int)i);
        free(r);
    }
}

/* A ring whose doubled size passes SIZE_MAX is refused and left as it was. */
static void test_ring_grow_overflow(void **state)
{
    int *r      = NULL;
    size_t cap  = 0, head = 0;

    (void)state;
    /* Two elements of SIZE_MAX / 2 + 1 bytes do not fit in a size_t. */
    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 0, SIZE_MAX / 2 + 1, 2),
                     OTE_ERR_NO_MEMORY);
    assert_null(r);
    assert_int_equal(cap, 0);
    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 0, sizeof(*r), 2), OTE_OK);
    r[0] = 5;
    head = 0;
    {
        size_t big = cap;

        cap = SIZE_MAX / 2 + 1; /* doubling it would pass SIZE_MAX */
        assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 1, sizeof(*r), 2),
                         OTE_ERR_NO_MEMORY);
        assert_int_equal(cap, SIZE_MAX / 2 + 1);
        cap = big;
    }
    assert_int_equal(r[0], 5);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_reserve_grows),
        cmocka_unit_test(test_array_reserve_first_zero),
        cmocka_unit_test(test_array_reserve_overflow),
        cmocka_unit_test(test_ring_grow_order),
        cmocka_unit_test(test_ring_grow_overflow),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
