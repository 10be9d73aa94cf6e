/*
 * A batch's task array of 32 MiB or more has its own mapping with
 * transparent huge pages asked for (core/xfer/batch.c): its first touch,
 * which a submit of that many requests makes, takes a page fault per huge
 * page where the kernel's policy gives them, not one per 4 KiB page (a
 * malloc'd array that large came from fresh 4 KiB pages every batch). A
 * smaller batch's array is still malloc'd. The large case is skipped where
 * the kernel gives no huge pages to madvised memory (THP "never"); under
 * a sanitizer, whose shadow memory faults too, only the mapping is checked.
 */
#include "core/xfer/xfer_def.h"
#include "testlib.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

/* True where anonymous memory advised MADV_HUGEPAGE may get huge pages. */
static bool thp_for_madvised(void)
{
    char buf[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

    if (f == NULL)
        return false;
    if (fgets(buf, sizeof(buf), f) == NULL)
        buf[0] = 0;
    fclose(f);
    return strstr(buf, "[always]") != NULL || strstr(buf, "[madvise]") != NULL;
}

static long minor_faults(void)
{
    struct rusage ru;

    getrusage(RUSAGE_THREAD, &ru); /* this thread alone: not the engine's */
    return ru.ru_minflt;
}

static void test_large_task_array(void **state)
{
    enum { CAP = 131072 };
    ote_engine_h e;
    ote_batch_h b;
    size_t bytes;
    long before, faults;

    (void)state;
    if (!thp_for_madvised()) {
        printf("# transparent huge pages are off for madvised memory here\n");
        skip();
    }
    setenv("OTE_TLS", "tcp", 1);
    e = ote_test_engine("127.0.0.1:0");
    assert_non_null(e);
    assert_int_equal(ote_batch_create(e, CAP, &b), OTE_OK);
    bytes = CAP * sizeof(*b->tasks);
    assert_true(bytes >= (32u << 20));
    /* Whole huge pages. */
    assert_true(b->tasks_mapped >= bytes && b->tasks_mapped % (2u << 20) == 0);
    before = minor_faults();
    memset(b->tasks, 0x5a, bytes); /* the first touch, as a submit of CAP requests makes it */
    faults = minor_faults() - before;
    printf("# %zu bytes of tasks: %ld page faults at their first touch (%zu pages of 4 KiB)\n",
           bytes, faults, bytes / 4096);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    /* One per 4 KiB page would be bytes / 4096; one per huge page, bytes / 2 MiB. */
    assert_true(faults < (long)(bytes / 4096 / 8));
#endif
    ote_batch_release(b);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
}

static void test_small_task_array(void **state)
{
    ote_engine_h e;
    ote_batch_h b;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    e = ote_test_engine("127.0.0.1:0");
    assert_non_null(e);
    assert_int_equal(ote_batch_create(e, 16384, &b), OTE_OK); /* about 7 MiB */
    assert_int_equal(b->tasks_mapped, 0);
    memset(b->tasks, 0, 16384 * sizeof(*b->tasks));
    ote_batch_release(b);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_large_task_array),
        cmocka_unit_test(test_small_task_array),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
