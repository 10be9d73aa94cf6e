/*
 * Worker placement near a NIC, and NICs ranked for a memory, against hwloc
 * exports of real machines.
 */
#include "base/topo.h"
#include "core/engine_int.h"
#include "testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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

/* The score of nic for location in the topology file, with its reason. */
static double score_of(ote_topo_t *topo, const char *location, const char *nic, char *why,
                       size_t len)
{
    double s = -1;

    if (ote_topo_score(topo, location, nic, &s, why, len) != OTE_OK)
        return -1;
    return s;
}

static ote_topo_t *open_xml(const char *file)
{
    ote_topo_t *topo = NULL;
    char path[4096];

    snprintf(path, sizeof(path), "%s/%s", OTE_TOPO_DIR, file);
    assert_int_equal(ote_topo_open(path, &topo), OTE_OK);
    assert_string_equal(ote_topo_source(topo), path);
    return topo;
}

/*
 * The exported machine: cuda0, mlx5_0/ib0 and eth0/eth1 on socket 1;
 * mlx5_0 below the PCIe bridge of cuda0, the Ethernet ports below another
 * bridge of the same host bridge; the GPU 03:00.0 on socket 0.
 */
static void test_scores_one_socket_of_nics(void **state)
{
    ote_topo_t *topo = open_xml("32em64t-2n8c2t-pci-normalio.xml");
    char why[OTE_TOPO_WHY_MAX];
    (void)state;

    assert_true(score_of(topo, "cuda:0", "mlx5_0:1", why, sizeof(why)) == 1.0);
    assert_string_equal(why, "same PCIe switch");
    assert_true(score_of(topo, "cuda:0", "ib0", why, sizeof(why)) == 1.0);
    assert_true(score_of(topo, "cuda:0", "eth0", why, sizeof(why)) == 0.5);
    assert_string_equal(why, "same PCIe host bridge");
    /* The same GPU by its PCI address. */
    assert_true(score_of(topo, "pci:0000:84:00.0", "eth1", why, sizeof(why)) == 0.5);
    /* The socket-0 GPU: every NIC is across the sockets (NUMA distance 20 / 10). */
    assert_true(score_of(topo, "pci:0000:03:00.0", "mlx5_0", why, sizeof(why)) == 0.5 / 8);
    assert_string_equal(why, "across sockets: on NUMA node 1, distance 20 (10 local)");
    /* Host memory. */
    assert_true(score_of(topo, "cpu:1", "eth0", why, sizeof(why)) == 1.0);
    assert_string_equal(why, "on NUMA node 1");
    assert_true(score_of(topo, "cpu:0", "mlx5_0", why, sizeof(why)) == 0.5);
    assert_string_equal(why, "on NUMA node 1, distance 20 (10 local)");
    /* What hwloc does not place is not scored. */
    assert_true(score_of(topo, "cpu:0", "veth7", why, sizeof(why)) < 0);
    assert_string_equal(why, "veth7 not in the topology");
    assert_true(score_of(topo, "cuda:3", "eth0", why, sizeof(why)) < 0);
    assert_true(score_of(topo, "cpu:9", "eth0", why, sizeof(why)) < 0);
    assert_true(score_of(topo, "host", "eth0", why, sizeof(why)) < 0);
    ote_topo_close(topo);
}

/*
 * Ranked for one memory: the nearest NICs first, those under a quarter of
 * the best left out, NICs hwloc does not place kept as they are. The
 * machine: the export above with mlx5_0 moved to socket 0, below the root
 * port of the GPU 03:00.0 (README).
 */
static void test_rank_drops_far_nics(void **state)
{
    ote_topo_t *topo = open_xml("32em64t-2n8c2t-pci-mlx5socket0.xml");
    const char *nics[] = {"eth0", "mlx5_0:1", "eth1", "lo", "eth0"};
    ote_topo_table_t *t = NULL;
    double score[4], weight[4];
    char places[8][OTE_TOPO_PLACE_MAX];
    char why[OTE_TOPO_WHY_MAX];
    int p;
    (void)state;

    assert_int_equal(ote_topo_places(topo, places, 8), 3);
    assert_string_equal(places[0], "cpu:0");
    assert_string_equal(places[1], "cpu:1");
    assert_string_equal(places[2], "cuda:0");
    assert_int_equal(ote_topo_table_build(topo, nics, 5, NULL, 0, &t), OTE_OK);
    assert_int_equal(t->num_places, 3);
    assert_int_equal(t->num_nics, 4); /* eth0 once */
    assert_int_equal(ote_topo_table_nic(t, "mlx5_0:1"), 1);
    assert_int_equal(ote_topo_table_nic(t, "mlx5_1:1"), -1);
    assert_int_equal(ote_topo_table_place(t, "cpu:7"), -1);

    /* GPU cuda0 (socket 1): the Ethernet ports share its host bridge; mlx5_0 is across. */
    p = ote_topo_table_place(t, "cuda:0");
    assert_int_equal(p, 2);
    for (size_t k = 0; k < 4; k++)
        score[k] = t->score[p][k];
    assert_true(ote_topo_rank(score, 4, weight) == 0.5);
    assert_true(weight[0] == 1); /* eth0 */
    assert_true(weight[1] == 0); /* mlx5_0: 1/16 against 1/2, left out */
    assert_true(weight[2] == 1); /* eth1 */
    assert_true(weight[3] == 1); /* lo: not placed, kept */

    /* Host memory on node 0: mlx5_0 first, the Ethernet ports at half weight. */
    p = ote_topo_table_place(t, "cpu:0");
    for (size_t k = 0; k < 4; k++)
        score[k] = t->score[p][k];
    assert_true(ote_topo_rank(score, 4, weight) == 1.0);
    assert_true(weight[1] == 1);
    assert_true(weight[0] == 0.5 && weight[2] == 0.5);
    assert_true(weight[3] == 1);

    /* Host memory on node 1: the Ethernet ports first, mlx5_0 at half weight. */
    p = ote_topo_table_place(t, "cpu:1");
    for (size_t k = 0; k < 4; k++)
        score[k] = t->score[p][k];
    ote_topo_rank(score, 4, weight);
    assert_true(weight[0] == 1 && weight[2] == 1 && weight[1] == 0.5);
    ote_topo_table_free(t);

    /* The socket-0 GPU by PCI address: mlx5_0 below its root port, eth0 across, left out. */
    score[0] = score_of(topo, "pci:0000:03:00.0", "mlx5_0", why, sizeof(why));
    assert_string_equal(why, "same PCIe switch");
    score[1] = score_of(topo, "pci:0000:03:00.0", "eth0", why, sizeof(why));
    assert_string_equal(why, "across sockets: on NUMA node 1, distance 20 (10 local)");
    assert_true(ote_topo_rank(score, 2, weight) == 1.0);
    assert_true(weight[0] == 1 && weight[1] == 0);
    ote_topo_close(topo);
}

void ote_engine_print_transports(ote_engine_h e, FILE *f);

/*
 * What ote_info -d prints of the ranking (ote_engine_topo_print), with
 * OTE_HWLOC_XML and a fixed list of NICs in place of this machine's.
 */
static void test_info_print(void **state)
{
    const char *nics[] = {"eth0", "mlx5_0:1", "veth3"};
    char path[4096], *text = NULL;
    size_t size = 0;
    ote_engine_h e;
    FILE *f;
    (void)state;

    snprintf(path, sizeof(path), "%s/32em64t-2n8c2t-pci-mlx5socket0.xml", OTE_TOPO_DIR);
    setenv("OTE_HWLOC_XML", path, 1);
    setenv("OTE_AUTH_KEY", "test-topo-print-shared-key", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_HWLOC_XML");
    assert_non_null(e->facts.topo);
    assert_non_null(e->facts.topo_table);
    ote_topo_table_free(e->facts.topo_table);
    assert_int_equal(ote_topo_table_build(e->facts.topo, nics, 3, NULL, 0, &e->facts.topo_table),
                     OTE_OK);
    f = open_memstream(&text, &size);
    assert_non_null(f);
    ote_engine_topo_print(e, f);
    fclose(f);
    assert_non_null(strstr(text, "# Rails by topology (hwloc: "));
    assert_non_null(strstr(
        text, "#   memory cpu:0\n"
              "#     mlx5_0:1     score 1.000 weight 1.00 (on NUMA node 0)\n"
              "#     eth0         score 0.500 weight 0.50 (on NUMA node 1, distance 20 (10 "
              "local))\n"
              "#     veth3        not ranked (veth3 not in the topology): kept, weight 1\n"));
    assert_non_null(strstr(
        text, "#   memory cuda:0\n"
              "#     eth0         score 0.500 weight 1.00 (same PCIe host bridge)\n"
              "#     mlx5_0:1     score 0.062 left out: under a quarter of the best (0.500), "
              "carries only when no other rail can (across sockets: on NUMA node 0, distance 20 "
              "(10 local))\n"));
    free(text);
    ote_engine_destroy(e);
}
#endif

/* The rule on scores alone (also without hwloc). */
static void test_rank_rule(void **state)
{
    double w[4];
    (void)state;

    /* Nothing placed: every rail as it is. */
    assert_true(ote_topo_rank((double[]){-1, -1}, 2, w) < 0);
    assert_true(w[0] == 1 && w[1] == 1);
    /* Exactly a quarter stays; under it goes. */
    ote_topo_rank((double[]){0.25, 1, 0.2, -1}, 4, w);
    assert_true(w[0] == 0.25 && w[1] == 1 && w[2] == 0 && w[3] == 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_rule),
#ifdef HAVE_HWLOC
        cmocka_unit_test(test_two_socket_gpu_nic_box),
        cmocka_unit_test(test_two_socket_ib_box),
        cmocka_unit_test(test_scores_one_socket_of_nics),
        cmocka_unit_test(test_rank_drops_far_nics),
        cmocka_unit_test(test_info_print),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
