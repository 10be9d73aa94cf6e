/*
 * base/par.h: a loop shared with helper threads calls every item once, and
 * the check that tells which copies may be shared (ote_par_spans_conflict).
 */
#include "base/par.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#define ITEMS 10000

static void count_item(void *arg, size_t i)
{
    atomic_uint *calls = arg;

    atomic_fetch_add(&calls[i], 1);
}

static void run_counted(ote_par_t *p, size_t n)
{
    atomic_uint *calls = calloc(n, sizeof(*calls));

    assert_non_null(calls);
    ote_par_run(p, n, count_item, calls);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(atomic_load(&calls[i]), 1);
    free(calls);
}

/* Every item once, with helpers, without them and without a pool, loop after loop. */
static void test_run_each_once(void **state)
{
    ote_par_t *p = ote_par_create(2, "test-par");
    ote_par_t *none = ote_par_create(0, "test-none");
    (void)state;

    assert_non_null(p);
    assert_non_null(none);
    assert_int_equal(ote_par_width(p), 2);
    assert_int_equal(ote_par_width(none), 0);
    for (int round = 0; round < 20; round++) {
        run_counted(p, ITEMS);
        run_counted(p, 1 + (size_t)round);
    }
    assert_true(ote_par_started(p) <= 2);
    run_counted(none, ITEMS);
    run_counted(NULL, 100);
    ote_par_run(p, 0, count_item, NULL);
    ote_par_destroy(p);
    ote_par_destroy(none);
    ote_par_destroy(NULL);
}

#define SPAN(s, e, w) ((ote_par_span_t){(s), (e), (w)})

static bool conflict(ote_par_span_t *s, size_t n)
{
    return ote_par_spans_conflict(s, n);
}

static void test_spans(void **state)
{
    (void)state;
    {
        /* Disjoint writes and adjacent ranges share nothing. */
        ote_par_span_t s[] = {SPAN(300, 400, true), SPAN(0, 100, true), SPAN(100, 200, false),
                              SPAN(200, 300, true)};
        assert_false(conflict(s, 4));
    }
    {
        /* Two reads of the same bytes may run together. */
        ote_par_span_t s[] = {SPAN(0, 100, false), SPAN(50, 150, false), SPAN(10, 20, false)};
        assert_false(conflict(s, 3));
    }
    {
        /* A write into bytes another copy reads, whichever starts first. */
        ote_par_span_t a[] = {SPAN(0, 100, false), SPAN(99, 200, true)};
        ote_par_span_t b[] = {SPAN(0, 100, true), SPAN(99, 200, false)};
        assert_true(conflict(a, 2));
        assert_true(conflict(b, 2));
    }
    {
        /* Two writes to one place; a write inside a long read that began much earlier. */
        ote_par_span_t a[] = {SPAN(500, 600, true), SPAN(0, 10, false), SPAN(550, 560, true)};
        ote_par_span_t b[] = {SPAN(0, 1000, false), SPAN(10, 20, false), SPAN(900, 901, true)};
        assert_true(conflict(a, 3));
        assert_true(conflict(b, 3));
    }
    {
        /* A read inside a long write that began earlier, behind a span in between. */
        ote_par_span_t s[] = {SPAN(0, 1000, true), SPAN(1, 2, true), SPAN(995, 996, false)};
        assert_true(conflict(s, 3));
        s[1] = SPAN(2000, 2001, true);
        s[2] = SPAN(1000, 1001, false);
        assert_false(conflict(s, 3));
    }
    {
        /* Ends at the top of the address space. */
        ote_par_span_t s[] = {SPAN(UINT64_MAX - 10, UINT64_MAX, true),
                              SPAN(UINT64_MAX - 1, UINT64_MAX, false)};
        assert_true(conflict(s, 2));
    }
    assert_false(conflict(NULL, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_each_once),
        cmocka_unit_test(test_spans),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
