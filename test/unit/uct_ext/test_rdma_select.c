/*
 * RDMA ports under OTE_NET_DEVICES, with the sysfs fixture tree "multi"
 * (mlx5_0:1 RoCE v2 IPv4, mlx5_1:1 InfiniBand, mlx5_2:1 RoCE v2 IPv6,
 * mlx5_3:1 down): a port named explicitly is used or the engine fails with
 * OTE_ERR_NO_DEVICE and the reason; deny lists and ranges use select.c's
 * syntax. No UCX transport runs on fixture ports, so a pinned usable port
 * fails too: the engine never falls back to the others.
 */
#include "core/engine_int.h"
#include "uct_ext/rdma/rdma.h"
#include "rdma_test.h"
#include "testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* ote_engine_create with its log (stderr) captured. */
static ote_status_t create_logged(const char *devices, ote_engine_h *e_p, char **log_p)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_status_t st;

    setenv("OTE_NET_DEVICES", devices, 1);
    st = ote_test_engine_logged(&p, e_p, log_p);
    assert_non_null(*log_p);
    return st;
}

static int setup(void **state)
{
    setenv("OTE_SYSFS_ROOT", OTE_SYSFS_DIR "/multi", 1);
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_LOG_LEVEL", "warn", 1);
    setenv("OTE_AUTH_KEY", "test-rdma-select", 1);
    return 0;
}

/* The engine reads the tree; every port is selected with "all", none is pinned. */
static void test_discovered(void **state)
{
    ote_engine_h e = NULL;
    char *log, *text;

    assert_int_equal(create_logged("all", &e, &log), OTE_OK);
    free(log);
    assert_non_null(e->rdma);
    assert_int_equal(e->rdma->num_devs, 4);
    text = transports_text(e);
    assert_non_null(strstr(text, "#     port mlx5_0:1   Ethernet, ACTIVE, selected: yes\n"
                                 "#       GID index 1 RoCE v2 IPv4 ::ffff:10.0.0.10 netdev eth0: "
                                 "chosen\n"));
    assert_non_null(strstr(text, "#     port mlx5_3:1   Ethernet, DOWN, selected: no (port "
                                 "state 1: DOWN)\n"));
    free(text);
    ote_engine_destroy(e);
}

/*
 * Pinned ports that cannot be used: NO_DEVICE, never tcp on lo alone, and
 * the log says why for each port the entry names.
 */
static void test_pin_refused(void **state)
{
    static const struct {
        const char *devices;
        const char *want[2]; /* what the log says (want[1] may be NULL) */
    } cases[] = {
        /* a port that is down */
        {"lo,mlx5_3:1",
         {"OTE_NET_DEVICES: 'mlx5_3:1' names no usable device: mlx5_3:1: port state 1: DOWN"}},
        /* a usable port that no transport runs on */
        {"lo,mlx5_0:1", {"'mlx5_0:1' names no usable device: mlx5_0:1: no transport here runs "
                         "on it"}},
        /* a device name pins each of its ports; a range each device it covers */
        {"lo,mlx5_1", {"'mlx5_1' names no usable device: mlx5_1:1: no transport"}},
        {"lo,mlx5_[2-3]:1",
         {"'mlx5_[2-3]:1' names no usable device: mlx5_2:1: no transport here runs on it (UCX "
          "offers no rc, dc or ud transport on it); mlx5_3:1: port state 1: DOWN"}},
        /* a port that is not in the tree is not here at all, and the ports are listed */
        {"lo,mlx5_9:1",
         {"no network device 'mlx5_9:1' here; devices here: lo,",
          "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"}},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ote_engine_h e = NULL;
        char *log;

        assert_int_equal(create_logged(cases[i].devices, &e, &log), OTE_ERR_NO_DEVICE);
        assert_null(e);
        for (int w = 0; w < 2 && cases[i].want[w] != NULL; w++) {
            if (strstr(log, cases[i].want[w]) == NULL)
                fail_msg("OTE_NET_DEVICES=%s: no '%s' in the log:\n%s", cases[i].devices,
                         cases[i].want[w], log);
        }
        free(log);
    }
}

/* Deny lists leave ports out, whatever their state; the others are not pinned. */
static void test_deny(void **state)
{
    ote_engine_h e = NULL;
    char *log, *text;

    assert_int_equal(create_logged("^mlx5_2,mlx5_3", &e, &log), OTE_OK);
    free(log);
    text = transports_text(e);
    assert_non_null(strstr(text, "#     port mlx5_2:1   Ethernet, ACTIVE, selected: no (not in "
                                 "OTE_NET_DEVICES)\n"));
    assert_non_null(strstr(text, "#     port mlx5_3:1   Ethernet, DOWN, selected: no (not in "
                                 "OTE_NET_DEVICES)\n"));
    assert_non_null(strstr(text, "#     port mlx5_0:1   Ethernet, ACTIVE, selected: yes\n"));
    free(text);
    ote_engine_destroy(e);
}

/* A sysfs root that is not there fails engine creation. */
static void test_bad_root(void **state)
{
    ote_engine_h e = NULL;
    char *log;

    setenv("OTE_SYSFS_ROOT", "/nonexistent/ote_sysfs", 1);
    assert_int_equal(create_logged("all", &e, &log), OTE_ERR_INVALID_PARAM);
    assert_non_null(strstr(log, "OTE_RDMA_SYSFS_ROOT: '/nonexistent/ote_sysfs' is not a directory"));
    free(log);
    setenv("OTE_SYSFS_ROOT", OTE_SYSFS_DIR "/multi", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovered), cmocka_unit_test(test_pin_refused),
        cmocka_unit_test(test_deny),       cmocka_unit_test(test_bad_root),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
