/*
 * Every slot of every operations table points at a function: the tables of
 * every component, and those of the ifaces and eps an engine opens on the
 * CUDA test double with every transport selected (tcp, cma, cuda_copy,
 * cuda_ipc, file, and UCT's where built), those of the memory domains it
 * opens (with the cuFile double, the file component's), and those of the
 * staging protocol's rails. Staging is no transport: no worker iface is
 * its, and every worker has its staging context.
 */
#include "cuda_test.h"
#include "testlib.h"

#include "core/engine_int.h"
#include "core/worker/worker.h"
#include "proto/proto.h"
#include "proto/stage.h"
#include "uct_ext/tl.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* A table of n function pointers, none NULL. */
#define ASSERT_ALL_SET(tbl, what, name)                                                     \
    do {                                                                                    \
        void (*const *fn_)(void) = (void (*const *)(void))(const void *)(tbl);              \
        for (size_t i_ = 0; i_ < sizeof(*(tbl)) / sizeof(fn_[0]); i_++) {                   \
            if (fn_[i_] == NULL)                                                            \
                fail_msg("%s of %s: slot %zu is NULL", what, name, i_);                     \
        }                                                                                   \
    } while (0)

static void check_component(ote_tl_component_t *comp)
{
    const ote_tl_component_ops_t *o = comp->ops;

    assert_non_null(o->name);
    /* Its settings: a table with a description for every variable. */
    assert_non_null(o->config_table);
    assert_non_null(o->config_table->component);
    for (size_t i = 0; i < o->config_table->num_fields; i++)
        assert_non_null(o->config_table->fields[i].desc);
    assert_non_null(o->query_resources);
    assert_non_null(o->md_open);
    assert_non_null(o->md_close);
    assert_non_null(o->iface_open);
    assert_non_null(o->unavailable);
}

static void test_component_tables(void **state)
{
    size_t n = 0;

    for (size_t c = 0; ote_tl_components[c] != NULL; c++, n++)
        check_component(ote_tl_components[c]);
    assert_true(n >= 4);
    ASSERT_ALL_SET(&ote_proto_stage_ep_ops, "ep ops", OTE_PROTO_STAGE_NAME);
}

static void test_iface_and_ep_tables(void **state)
{
    ote_engine_h e;
    ote_segment_h self;
    size_t seen = 0;
    bool cuda = false, tcp = false, stage = false, cufile_md = false;

    setenv("OTE_TLS", "all", 1);
    e = ote_test_engine("127.0.0.1:0");
    assert_non_null(e);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &self), OTE_OK);
    for (size_t w = 0; w < e->facts.num_workers; w++) {
        for (size_t i = 0; i < e->facts.workers[w].num_ifaces; i++) {
            ote_tl_iface_t *iface = e->facts.workers[w].ifaces[i];
            const char *name      = iface->resource.tl_name;

            ASSERT_ALL_SET(iface->ops, "iface ops", name);
            ASSERT_ALL_SET(iface->ep_ops, "ep ops", name);
            cuda |= strcmp(name, "cuda_copy") == 0;
            tcp |= strcmp(name, "tcp") == 0;
            assert_string_not_equal(name, OTE_PROTO_STAGE_NAME);
            seen++;
        }
        stage = e->facts.workers[w].stage != NULL;
    }
    for (size_t k = 0; k < e->facts.num_mds; k++) {
        ASSERT_ALL_SET(e->facts.mds[k]->ops, "md ops", e->facts.mds[k]->name);
        cufile_md |= strcmp(e->facts.mds[k]->name, "file:cufile") == 0;
    }
    assert_int_equal(ote_segment_close(self), OTE_OK);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    assert_true(seen >= 3);
    assert_true(tcp && cuda && stage);
#ifdef HAVE_LIBURING
    assert_true(cufile_md);
#else
    (void)cufile_md;
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_component_tables),
                                       cmocka_unit_test(test_iface_and_ep_tables)};

    char cufile[4200];

    cuda_test_use_double(1);
    snprintf(cufile, sizeof(cufile), "%s/unit/cuda/.libs/libote_cufile_double.so",
             getenv("ORBITTE_TEST_BUILDDIR") ? getenv("ORBITTE_TEST_BUILDDIR") : ".");
    setenv("OTE_CUFILE_LIB", cufile, 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
