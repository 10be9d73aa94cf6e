/*
 * The components on the stream connection code read their own tables: cma
 * OTE_CMA_*, shm OTE_SHM_*, each with the shared stream settings nested as
 * <prefix>STREAM_*. The names these were tuned by before (OTE_TCP_MAX_MSG
 * for both, OTE_CMA_COPY_THREADS for shm) are still read where the new
 * name is not set. Checked on the tables and on a real cma and shm iface
 * (the max_msg it reports).
 */
#include "uct_ext/stream/stream.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

extern const ote_config_table_t ote_cma_config_table;
extern const ote_config_table_t ote_shm_config_table;
extern ote_tl_component_t       ote_cma_component;
extern ote_tl_component_t       ote_shm_component;

static const char *const vars[] = {
    "OTE_TCP_MAX_MSG",     "OTE_CMA_STREAM_MAX_MSG", "OTE_SHM_STREAM_MAX_MSG",
    "OTE_CMA_COPY_THREADS", "OTE_SHM_COPY_THREADS",
};

static void unset_all(void)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

/* Fill table from the environment; the value of the variable name (without OTE_). */
static long long read_var(const ote_config_table_t *table, const char *name)
{
    const ote_cfg_entry_t *e = ote_config_find(table, name);
    void *opts               = calloc(1, table->struct_size);
    long long v;

    assert_non_null(e);
    assert_non_null(opts);
    assert_int_equal(ote_config_fill(table, opts), OTE_OK);
    if (e->type == OTE_CFG_SIZE)
        v = (long long)*(size_t *)((char *)opts + e->offset);
    else
        v = *(long *)((char *)opts + e->offset);
    ote_config_release(table, opts);
    free(opts);
    return v;
}

static void test_prefixes(void **state)
{
    const ote_cfg_entry_t *e;

    (void)state;
    assert_string_equal(ote_cma_config_table.prefix, "CMA_");
    assert_string_equal(ote_shm_config_table.prefix, "SHM_");
    assert_string_equal(ote_cma_config_table.component, "cma");
    assert_string_equal(ote_shm_config_table.component, "shm");
    /* The components name their own tables, not tcp's. */
    assert_ptr_equal(ote_cma_component.ops->config_table, &ote_cma_config_table);
    assert_ptr_equal(ote_shm_component.ops->config_table, &ote_shm_config_table);
    /* The old names find the same entries. */
    e = ote_config_find(&ote_cma_config_table, "CMA_STREAM_MAX_MSG");
    assert_non_null(e);
    assert_ptr_equal(ote_config_find(&ote_cma_config_table, "TCP_MAX_MSG"), e);
    e = ote_config_find(&ote_shm_config_table, "SHM_STREAM_MAX_MSG");
    assert_non_null(e);
    assert_ptr_equal(ote_config_find(&ote_shm_config_table, "TCP_MAX_MSG"), e);
    e = ote_config_find(&ote_shm_config_table, "SHM_COPY_THREADS");
    assert_non_null(e);
    assert_ptr_equal(ote_config_find(&ote_shm_config_table, "CMA_COPY_THREADS"), e);
    assert_null(ote_config_find(&ote_cma_config_table, "TCP_CONNS"));
}

static void test_max_msg(void **state)
{
    (void)state;
    unset_all();
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_STREAM_MAX_MSG"), 64ll << 20);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_STREAM_MAX_MSG"), 64ll << 20);
    /* Today's documented way: OTE_TCP_MAX_MSG tunes cma and shm too. */
    setenv("OTE_TCP_MAX_MSG", "1m", 1);
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_STREAM_MAX_MSG"), 1ll << 20);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_STREAM_MAX_MSG"), 1ll << 20);
    /* A component's own name wins, and only for that component. */
    setenv("OTE_CMA_STREAM_MAX_MSG", "2m", 1);
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_STREAM_MAX_MSG"), 2ll << 20);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_STREAM_MAX_MSG"), 1ll << 20);
    setenv("OTE_SHM_STREAM_MAX_MSG", "8m", 1);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_STREAM_MAX_MSG"), 8ll << 20);
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_STREAM_MAX_MSG"), 2ll << 20);
    unset_all();
}

static void test_copy_threads(void **state)
{
    (void)state;
    unset_all();
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_COPY_THREADS"), -1);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_COPY_THREADS"), -1);
    setenv("OTE_CMA_COPY_THREADS", "2", 1);
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_COPY_THREADS"), 2);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_COPY_THREADS"), 2);
    setenv("OTE_SHM_COPY_THREADS", "0", 1);
    assert_int_equal(read_var(&ote_shm_config_table, "SHM_COPY_THREADS"), 0);
    assert_int_equal(read_var(&ote_cma_config_table, "CMA_COPY_THREADS"), 2);
    unset_all();
}

/* The max_msg an iface of comp reports; 0 where the component offers nothing here. */
static size_t iface_max_msg(ote_tl_component_t *comp)
{
    ote_tl_iface_params_t params = {.instance_id = 1, .max_conns = 16, .max_conns_per_peer = 16,
                                    .handshake_timeout_ms = 1000};
    ote_tl_resource_t *res = NULL;
    ote_tl_iface_t *iface;
    ote_tl_caps_t caps;
    size_t count = 0;

    assert_int_equal(comp->ops->query_resources(comp, &params, &res, &count), OTE_OK);
    if (count == 0)
        return 0;
    assert_int_equal(comp->ops->iface_open(&res[0], NULL, &params, &iface), OTE_OK);
    memset(&caps, 0, sizeof(caps));
    iface->ops->query(iface, &caps);
    iface->ops->close(iface);
    free(res);
    return caps.max_msg;
}

static void test_ifaces_take_them(void **state)
{
    (void)state;
    if (!ote_stream_local_available())
        skip();
    unset_all();
    setenv("OTE_TCP_MAX_MSG", "1m", 1);
    assert_int_equal(iface_max_msg(&ote_cma_component), 1u << 20);
    assert_int_equal(iface_max_msg(&ote_shm_component), 1u << 20);
    setenv("OTE_CMA_STREAM_MAX_MSG", "2m", 1);
    setenv("OTE_SHM_STREAM_MAX_MSG", "4m", 1);
    assert_int_equal(iface_max_msg(&ote_cma_component), 2u << 20);
    assert_int_equal(iface_max_msg(&ote_shm_component), 4u << 20);
    unset_all();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefixes),
        cmocka_unit_test(test_max_msg),
        cmocka_unit_test(test_copy_threads),
        cmocka_unit_test(test_ifaces_take_them),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
