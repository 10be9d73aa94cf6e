/* Helpers shared by the tests of RDMA port selection and polling. */
#ifndef OTE_TEST_RDMA_TEST_H
#define OTE_TEST_RDMA_TEST_H

#include <ote/ote.h>
#include <stdio.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

void ote_engine_print_transports(ote_engine_h e, FILE *f);

/* What ote_info prints about the engine's transports and ports (malloc'd). */
static inline char *transports_text(ote_engine_h e)
{
    char *text  = NULL;
    size_t size = 0;
    FILE *f     = open_memstream(&text, &size);

    assert_non_null(f);
    ote_engine_print_transports(e, f);
    fclose(f);
    return text;
}

#endif
