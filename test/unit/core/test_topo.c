/*
 * Worker placement near a NIC, against hwloc exports of real machines.
 */
#include "base/topo.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#ifdef HAVE_HWLOC
static hwloc_topology_t load(const char *file)
{
    hwloc_topology_t topo;
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", OTE_TOPO_DIR, file);
    assert_int_equal(hwloc_topology_init(&topo), 0);
    assert_int_equal(hwloc_topology_set_xml(topo, path), 0);
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    assert_int_equal(hwloc_topology_load(topo), 0);
    return topo;
}

/* ote_topo_nic_cpuset on devs, as a hex string ("" when no single place). */
static void near(hwloc_topology_t topo, const char *const *devs, size_t n, char *out, size_t len)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();

    assert_non_null(set);
    out[0] = '\0';
    if (ote_topo_nic_cpuset(topo, devs, n, set) == 1)
        hwloc_bitmap_snprintf(out, len, set);
    hwloc_bitmap_free(set);
}

/* Devices, and the CPUs ote_topo_nic_cpuset places a worker on for them. */
typedef struct {
    const char *devs[3];
    size_t      n;
    const char *cpus;
} near_case_t;

static void check_near(const char *file, const near_case_t *c, size_t n)
{
    hwloc_topology_t topo = load(file);
    char buf[128];

    for (size_t i = 0; i < n; i++) {
        near(topo, c[i].n ? c[i].devs : NULL, c[i].n, buf, sizeof(buf));
        assert_string_equal(buf, c[i].cpus);
    }
    hwloc_topology_destroy(topo);
}

static void test_two_socket_gpu_nic_box(void **state)
{
    static const near_case_t c[] = {
        /* mlx5_0 and the Ethernet ports hang off socket 1. */
        {{"mlx5_0:1"}, 1, "0xff00ff00"},
        {{"mlx5_0:1", "eth0", "ib0"}, 3, "0xff00ff00"},
        /* The disk is on socket 0: two places, no single best. */
        {{"mlx5_0:1", "sda"}, 2, ""},
        /* Devices hwloc does not know (loopback, virtual NICs) pin nothing. */
        {{"lo"}, 1, ""},
        {{"eth0", "veth7"}, 2, ""},
        {{NULL}, 0, ""},
    };
    (void)state;

    check_near("32em64t-2n8c2t-pci-normalio.xml", c, sizeof(c) / sizeof(c[0]));
}

static void test_two_socket_ib_box(void **state)
{
    static const near_case_t c[] = {
        /* Every NIC of this machine is on socket 0 (CPUs 0, 2, 4, ...). */
        {{"mlx4_0:1"}, 1, "0x00555555"},
        {{"eth1", "mlx4_0:1"}, 2, "0x00555555"},
        {{"mlx5_0:1"}, 1, ""},
    };
    (void)state;

    check_near("24em64t-2n6c2t-pci.xml", c, sizeof(c) / sizeof(c[0]));
}
#endif

int main(void)
{
#ifdef HAVE_HWLOC
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_socket_gpu_nic_box),
        cmocka_unit_test(test_two_socket_ib_box),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    return 77; /* built without hwloc */
#endif
}
