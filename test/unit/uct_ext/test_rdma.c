/*
 * RDMA discovery from sysfs fixture trees (test/unit/uct_ext/sysfs/<case>):
 * ports, link layers, states, LIDs, GIDs with their types and netdevs, the
 * GID chosen per port and the reason given for every other one; the order
 * of devices, ports and GIDs from a tree made in a temporary directory.
 */
#include "uct_ext/rdma/rdma.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static ote_rdma_t *discover(const char *fixture)
{
    char root[512];
    ote_rdma_t *rdma = NULL;

    snprintf(root, sizeof(root), "%s/%s", OTE_SYSFS_DIR, fixture);
    assert_int_equal(ote_rdma_discover(root, &rdma), OTE_OK);
    assert_non_null(rdma);
    return rdma;
}

/* discover(fixture), whose devices are names (NULL-ended), in that order. */
static ote_rdma_t *discover_devs(const char *fixture, const char *const *names)
{
    ote_rdma_t *rdma = discover(fixture);
    size_t n         = 0;

    for (; names[n] != NULL; n++) {
        assert_true(n < rdma->num_devs);
        assert_string_equal(rdma->devs[n].name, names[n]);
    }
    assert_int_equal(rdma->num_devs, n);
    return rdma;
}

static const ote_rdma_port_t *port_of(const ote_rdma_t *rdma, const char *name)
{
    const ote_rdma_port_t *port = ote_rdma_port_find(rdma, name);

    assert_non_null(port);
    assert_string_equal(port->name, name);
    return port;
}

static const ote_rdma_gid_t *gid_at(const ote_rdma_port_t *port, unsigned index)
{
    for (size_t i = 0; i < port->num_gids; i++) {
        if (port->gids[i].index == index)
            return &port->gids[i];
    }
    fail_msg("%s: no GID at index %u", port->name, index);
    return NULL;
}

static void assert_gid_text(const ote_rdma_gid_t *gid, const char *text)
{
    char buf[64];

    ote_rdma_gid_format(gid, buf, sizeof(buf));
    assert_string_equal(buf, text);
}

/* The port, on the link layer link, ACTIVE and usable. */
static const ote_rdma_port_t *usable_port(const ote_rdma_t *rdma, const char *name,
                                          ote_rdma_link_t link)
{
    const ote_rdma_port_t *port = port_of(rdma, name);

    assert_int_equal(port->link, link);
    assert_int_equal(port->state, OTE_RDMA_PORT_ACTIVE);
    assert_string_equal(port->state_name, "ACTIVE");
    assert_string_equal(port->unusable, "");
    return port;
}

/*
 * The GID the port uses: at index, of class (ote_rdma_gid_class), on the
 * netdev ndev, with no reason given against it.
 */
static const ote_rdma_gid_t *chosen_gid(const ote_rdma_port_t *port, unsigned index,
                                        const char *cls, const char *ndev)
{
    const ote_rdma_gid_t *gid = ote_rdma_port_gid(port);

    assert_non_null(gid);
    assert_int_equal(gid->index, index);
    assert_string_equal(ote_rdma_gid_class(gid), cls);
    assert_string_equal(gid->ndev, ndev);
    assert_string_equal(gid->why, "");
    return gid;
}

/* RoCE v2 with an IPv4 address wins over v2 IPv6, v2 link-local and v1. */
static void test_roce_v2_ipv4(void **state)
{
    ote_rdma_t *rdma = discover_devs("roce_v2_ipv4", (const char *const[]){"mlx5_0", NULL});
    const ote_rdma_port_t *port;
    const ote_rdma_gid_t *gid;

    port = usable_port(rdma, "mlx5_0:1", OTE_RDMA_LINK_ETHERNET);
    /* Index 6 is an empty (zero) slot of the table: not listed. */
    assert_int_equal(port->num_gids, 7);
    gid = chosen_gid(port, 3, "RoCE v2 IPv4", "eth0");
    assert_int_equal(gid->type, OTE_RDMA_GID_ROCE_V2);
    assert_gid_text(gid, "::ffff:10.0.0.1");

    assert_int_equal(gid_at(port, 0)->type, OTE_RDMA_GID_ROCE_V1);
    assert_string_equal(gid_at(port, 0)->why, "RoCE v1 ranks below RoCE v2 IPv4 (index 3)");
    assert_string_equal(gid_at(port, 1)->why,
                        "RoCE v2 link-local ranks below RoCE v2 IPv4 (index 3)");
    assert_string_equal(gid_at(port, 2)->why, "RoCE v1 ranks below RoCE v2 IPv4 (index 3)");
    assert_string_equal(gid_at(port, 4)->why, "RoCE v1 ranks below RoCE v2 IPv4 (index 3)");
    assert_string_equal(gid_at(port, 5)->why, "RoCE v2 IPv6 ranks below RoCE v2 IPv4 (index 3)");
    assert_gid_text(gid_at(port, 5), "2001:db8::1");
    assert_string_equal(gid_at(port, 7)->ndev, "eth0.100");
    assert_string_equal(gid_at(port, 7)->why, "index 3 has the same rank and comes first");
    /* A fixture tree is never handed to libibverbs. */
    assert_non_null(strstr(rdma->verbs, "not asked"));
    assert_int_equal(port->active_mtu, 0);
    ote_rdma_free(rdma);
}

/* Without an IPv4 GID: RoCE v2 with a routable IPv6 address. */
static void test_roce_v2_ipv6(void **state)
{
    ote_rdma_t *rdma            = discover("roce_v2_ipv6");
    const ote_rdma_port_t *port = port_of(rdma, "mlx5_0:1");

    assert_gid_text(chosen_gid(port, 3, "RoCE v2 IPv6", "eth1"), "2001:db8:1::5");
    assert_string_equal(gid_at(port, 1)->why,
                        "RoCE v2 link-local ranks below RoCE v2 IPv6 (index 3)");
    assert_string_equal(gid_at(port, 2)->why, "RoCE v1 ranks below RoCE v2 IPv6 (index 3)");
    ote_rdma_free(rdma);
}

/* Only RoCE v1: the lowest index; unknown types and malformed GIDs say why. */
static void test_roce_v1(void **state)
{
    ote_rdma_t *rdma            = discover("roce_v1");
    const ote_rdma_port_t *port = port_of(rdma, "mlx5_0:1");

    assert_int_equal(chosen_gid(port, 0, "RoCE v1", "eth2")->type, OTE_RDMA_GID_ROCE_V1);
    assert_string_equal(gid_at(port, 1)->why, "index 0 has the same rank and comes first");
    assert_gid_text(gid_at(port, 1), "::ffff:192.168.1.7");
    assert_int_equal(gid_at(port, 2)->type, OTE_RDMA_GID_UNKNOWN);
    assert_string_equal(gid_at(port, 2)->why, "unknown type 'RoCE v3'");
    assert_string_equal(gid_at(port, 3)->why,
                        "cannot parse 'zzzz:0000:0000:0000:0000:0000:0000:0001'");
    ote_rdma_free(rdma);
}

/* A port that is not ACTIVE cannot be used, and says so. */
static void test_port_down(void **state)
{
    ote_rdma_t *rdma            = discover("port_down");
    const ote_rdma_port_t *port = port_of(rdma, "mlx5_0:1");

    assert_int_equal(port->state, 1);
    assert_string_equal(port->state_name, "DOWN");
    assert_string_equal(port->unusable, "port state 1: DOWN");
    ote_rdma_free(rdma);
}

/* A RoCE GID with no netdev behind it is never chosen. */
static void test_ndev_missing(void **state)
{
    ote_rdma_t *rdma            = discover("ndev_missing");
    const ote_rdma_port_t *port = port_of(rdma, "mlx5_0:1");

    chosen_gid(port, 0, "RoCE v1", "eth4");
    assert_string_equal(gid_at(port, 1)->ndev, "");
    assert_string_equal(gid_at(port, 1)->why, "no netdev behind it (gid_attrs/ndevs/1)");
    assert_string_equal(port->unusable, "");

    port = port_of(rdma, "mlx5_1:1");
    assert_null(ote_rdma_port_gid(port));
    assert_string_equal(gid_at(port, 0)->why, "no netdev behind it (gid_attrs/ndevs/0)");
    assert_string_equal(port->unusable, "no usable GID (1 listed)");
    ote_rdma_free(rdma);
}

/* InfiniBand: the LID, the port GID (index 0); no LID or not ACTIVE: unusable. */
static void test_ib(void **state)
{
    ote_rdma_t *rdma = discover_devs("ib", (const char *const[]){"mlx5_0", "mlx5_1", NULL});
    const ote_rdma_port_t *port;
    const ote_rdma_gid_t *gid;

    assert_int_equal(rdma->devs[0].num_ports, 2);
    port = usable_port(rdma, "mlx5_0:1", OTE_RDMA_LINK_IB);
    assert_int_equal(port->lid, 0x1a);
    gid = chosen_gid(port, 0, "IB", "");
    assert_int_equal(gid->type, OTE_RDMA_GID_IB);
    assert_gid_text(gid, "fe80::2:c903:a1:b2c3");
    assert_string_equal(gid_at(port, 1)->why, "index 0 has the same rank and comes first");

    port = port_of(rdma, "mlx5_0:2");
    assert_int_equal(port->state, 2);
    assert_string_equal(port->unusable, "port state 2: INIT");
    port = port_of(rdma, "mlx5_1:1");
    assert_int_equal(port->lid, 0);
    assert_string_equal(port->unusable, "no LID assigned (is a subnet manager running?)");
    assert_null(ote_rdma_port_find(rdma, "mlx5_1:2"));
    assert_null(ote_rdma_port_find(rdma, "mlx5_1"));
    ote_rdma_free(rdma);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[600];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void mkdirs(const char *root, const char *rel)
{
    char path[600];

    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0755);
            *p = '/';
        }
    }
    mkdir(path, 0755);
}

/* Values that do not parse, or are longer than any real one, are refused. */
static void test_malformed(void **state)
{
    /* Below class/infiniband/bad_0/ports; "0" and "x1" are not port numbers. */
    static const char *const dirs[] = {"1/gids", "1/gid_attrs/types", "1/gid_attrs/ndevs",
                                       "2/gids", "3/gids", "3/gid_attrs/types",
                                       "3/gid_attrs/ndevs", "0", "x1"};
    static const struct {
        const char *file, *text;
    } files[] = {
        /* Port 1: an overlong state (written below), a LID that does not fit 16 bits. */
        {"1/link_layer", "InfiniBand\n"},
        {"1/lid", "0x10000\n"},
        {"1/gids/0", "fe80:0000:0000:0000:0002:c903:00a1:b2c3\n"},
        {"1/gid_attrs/types/0", "IB/RoCE v1\n"},
        {"1/gids/1", "fe80:0000:0000:0000:0002:c903:00a1:b2c3:0000\n"},
        {"1/gids/99999999", "fe80:0000:0000:0000:0002:c903:00a1:b2c3\n"},
        /* Port 2: an unknown link layer and a state without its number. */
        {"2/state", "ACTIVE\n"},
        {"2/link_layer", "Omni-Path\n"},
        /* Port 3: a netdev name longer than the kernel allows is no netdev. */
        {"3/state", "4: ACTIVE\n"},
        {"3/link_layer", "Ethernet\n"},
        {"3/gids/0", "0000:0000:0000:0000:0000:ffff:0a00:0001\n"},
        {"3/gid_attrs/types/0", "RoCE v2\n"},
        {"3/gid_attrs/ndevs/0", "a_netdev_name_that_is_too_long\n"},
    };
    char root[] = "/tmp/ote_test_rdma.XXXXXX";
    char ports[300], rel[300], cmd[400], big[300];
    ote_rdma_t *rdma = NULL;
    const ote_rdma_port_t *port;

    assert_non_null(mkdtemp(root));
    snprintf(ports, sizeof(ports), "%s/class/infiniband/bad_0/ports", root);
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(rel, sizeof(rel), "class/infiniband/bad_0/ports/%s", dirs[i]);
        mkdirs(root, rel);
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        write_file(ports, files[i].file, files[i].text);
    memset(big, 'A', sizeof(big) - 2);
    big[sizeof(big) - 2] = '\n';
    big[sizeof(big) - 1] = '\0';
    write_file(ports, "1/state", big);

    assert_int_equal(ote_rdma_discover(root, &rdma), OTE_OK);
    assert_int_equal(rdma->num_devs, 1);
    /* Ports 0 and x1 are not port numbers. */
    assert_int_equal(rdma->devs[0].num_ports, 3);
    assert_int_equal(rdma->devs[0].ports[2].num, 3);
    assert_string_equal(rdma->devs[0].ports[2].gids[0].why,
                        "no netdev behind it (gid_attrs/ndevs/0)");
    assert_string_equal(rdma->devs[0].ports[2].unusable, "no usable GID (1 listed)");
    port = port_of(rdma, "bad_0:1");
    assert_int_equal(port->state, -1);
    assert_string_equal(port->unusable, "its state cannot be read");
    assert_int_equal(port->lid, 0);
    assert_int_equal(port->num_gids, 2);
    /* The value is quoted, cut at 40 characters. */
    assert_string_equal(gid_at(port, 1)->why,
                        "cannot parse 'fe80:0000:0000:0000:0002:c903:00a1:b2c3:'");
    port = port_of(rdma, "bad_0:2");
    assert_string_equal(port->unusable, "its state cannot be read");
    ote_rdma_free(rdma);

    /* A state that reads well, on an unknown link layer. */
    write_file(ports, "2/state", "4: ACTIVE\n");
    assert_int_equal(ote_rdma_discover(root, &rdma), OTE_OK);
    assert_string_equal(port_of(rdma, "bad_0:2")->unusable, "link layer unknown or unreadable");
    ote_rdma_free(rdma);

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* A root without class/infiniband has no devices; a root that is not there is an error. */
static void test_roots(void **state)
{
    ote_rdma_t *rdma = NULL;

    assert_int_equal(ote_rdma_discover(OTE_SYSFS_DIR, &rdma), OTE_OK);
    assert_int_equal(rdma->num_devs, 0);
    assert_null(ote_rdma_port_find(rdma, "mlx5_0:1"));
    ote_rdma_free(rdma);
    rdma = NULL;
    assert_int_equal(ote_rdma_discover("/nonexistent/ote_sysfs", &rdma), OTE_ERR_INVALID_PARAM);
    assert_null(rdma);
    assert_null(ote_rdma_port_find(NULL, "mlx5_0:1"));
}

/* Write text to root/class/infiniband/dev/ports/port/name, making the directories on the way. */
static void put_port_file(const char *root, const char *dev, const char *port, const char *name,
                          const char *text)
{
    char path[512];
    size_t skip = strlen(root) + 1;
    FILE *f;

    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%s/%s", root, dev, port, name);
    for (char *p = path + skip; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
        *p = '/';
    }
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/*
 * Devices in name order (mlx5_1, mlx5_10, mlx5_2, as strcmp sorts), ports
 * and GIDs by number (1, 2, 10; 3, 9, 10), whatever order the directory
 * lists them in; of GIDs of one rank the lowest index is chosen.
 */
static void test_order(void **state)
{
    static const char *const devs[] = {"mlx5_2", "mlx5_10", "mlx5_1"};
    static const char *const ports[] = {"10", "2", "1"};
    static const char *const gids[] = {"10", "9", "3"};
    static const unsigned port_nums[] = {1, 2, 10}, gid_indexes[] = {3, 9, 10};
    char root[] = "/tmp/ote_sysfs_XXXXXX", name[32], cmd[64];
    ote_rdma_t *rdma = NULL;

    (void)state;
    assert_non_null(mkdtemp(root));
    for (int d = 0; d < 3; d++) {
        for (int p = 0; p < 3; p++) {
            put_port_file(root, devs[d], ports[p], "link_layer", "InfiniBand\n");
            put_port_file(root, devs[d], ports[p], "state", "4: ACTIVE\n");
            put_port_file(root, devs[d], ports[p], "lid", "0x1a\n");
            for (int g = 0; g < 3; g++) {
                snprintf(name, sizeof(name), "gids/%s", gids[g]);
                put_port_file(root, devs[d], ports[p], name,
                              "fe80:0000:0000:0000:0002:c903:00a1:b2c3\n");
                snprintf(name, sizeof(name), "gid_attrs/types/%s", gids[g]);
                put_port_file(root, devs[d], ports[p], name, "IB/RoCE v1\n");
            }
        }
    }
    assert_int_equal(ote_rdma_discover(root, &rdma), OTE_OK);
    assert_int_equal(rdma->num_devs, 3);
    assert_string_equal(rdma->devs[0].name, "mlx5_1");
    assert_string_equal(rdma->devs[1].name, "mlx5_10");
    assert_string_equal(rdma->devs[2].name, "mlx5_2");
    for (size_t d = 0; d < rdma->num_devs; d++) {
        const ote_rdma_dev_t *dev = &rdma->devs[d];

        assert_int_equal(dev->num_ports, 3);
        for (size_t p = 0; p < dev->num_ports; p++) {
            const ote_rdma_port_t *port = &dev->ports[p];

            assert_int_equal(port->num, port_nums[p]);
            assert_int_equal(port->num_gids, 3);
            for (size_t g = 0; g < port->num_gids; g++)
                assert_int_equal(port->gids[g].index, gid_indexes[g]);
            assert_int_equal(ote_rdma_port_gid(port)->index, 3);
        }
    }
    ote_rdma_free(rdma);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roce_v2_ipv4), cmocka_unit_test(test_roce_v2_ipv6),
        cmocka_unit_test(test_roce_v1),      cmocka_unit_test(test_port_down),
        cmocka_unit_test(test_ndev_missing), cmocka_unit_test(test_ib),
        cmocka_unit_test(test_malformed),    cmocka_unit_test(test_roots),
        cmocka_unit_test(test_order),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
