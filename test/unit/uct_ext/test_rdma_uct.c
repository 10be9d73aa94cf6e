/*
 * The GID hand-off to UCT: on an RDMA port the chosen index goes into the
 * iface configuration as GID_INDEX, an unusable port is refused, and a
 * configuration without GID_INDEX (UCT's tcp here: no rc, dc or ud without
 * RDMA hardware) fails instead of leaving the choice to UCT.
 */
#include "uct_ext/rdma/rdma.h"
#include "uct_ext/uct/uct.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_gid_index_handoff(void **state)
{
    ote_uct_rsc_t **list = NULL, *tcp = NULL;
    ote_rdma_t *rdma     = NULL;
    uct_iface_config_t *cfg;
    ote_uct_md_t *md;
    size_t n = 0;

    assert_int_equal(ote_uct_query(&list, &n), OTE_OK);
    for (size_t i = 0; i < n && tcp == NULL; i++) {
        if (strcmp(list[i]->tl_name, "tcp") == 0)
            tcp = list[i];
    }
    free(list);
    if (tcp == NULL)
        skip(); /* UCX without its tcp transport */
    assert_int_equal(ote_uct_md_get(tcp->md_entry, &md), OTE_OK);
    assert_int_equal(uct_md_iface_config_read(md->md, "tcp", NULL, NULL, &cfg), UCS_OK);
    assert_int_equal(ote_rdma_discover(OTE_SYSFS_DIR "/multi", &rdma), OTE_OK);

    /* Not an RDMA port: nothing to hand over. */
    assert_int_equal(ote_uct_iface_config_gid("tcp", tcp->dev_name, rdma, cfg), OTE_OK);
    assert_int_equal(ote_uct_iface_config_gid("tcp", tcp->dev_name, NULL, cfg), OTE_OK);
    /* A port that is down is never opened. */
    assert_int_equal(ote_uct_iface_config_gid("rc_mlx5", "mlx5_3:1", rdma, cfg),
                     OTE_ERR_NO_DEVICE);
    /* A usable port whose transport takes no GID_INDEX: refused, not ignored. */
    assert_int_equal(ote_uct_iface_config_gid("tcp", "mlx5_0:1", rdma, cfg),
                     OTE_ERR_UNSUPPORTED);

    uct_config_release(cfg);
    ote_uct_md_put(md);
    ote_rdma_free(rdma);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gid_index_handoff),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
