/*
 * Rail choice (proto): which of a peer's rails serve a request. Intra-host
 * transports beat network ones, a checked rail beats an unchecked one up to
 * 4 times faster, any rail beats one more than 4 times slower, and a rail
 * lacking an operation or a memory type never serves it. The same relation
 * orders and prunes the rails a segment builds.
 */
#include "proto/proto.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define PUT   OTE_TL_CAP_PUT_ZCOPY
#define GET   OTE_TL_CAP_GET_ZCOPY
#define CHK   OTE_TL_CAP_CHECKED
#define HOST  OTE_MEM_TYPE_HOST
#define CUDA  OTE_MEM_TYPE_CUDA

typedef struct {
    const char *name;
    bool        network;
    unsigned    ops;
    unsigned    mem;
    double      gbps;
} kind_t;

static const kind_t k_cma     = {"cma", false, PUT | GET | CHK, HOST, 10};
static const kind_t k_uct_cma = {"uct_cma", false, PUT | GET, HOST, 11};
static const kind_t k_tcp     = {"tcp", true, PUT | GET | CHK, HOST, 1.25};
static const kind_t k_uct_tcp = {"uct_tcp", true, PUT, HOST, 1.0};
static const kind_t k_rc      = {"rc_mlx5", true, PUT | GET, HOST | CUDA, 12};
static const kind_t k_ipc     = {"cuda_ipc", false, PUT | GET, CUDA, 50};

typedef struct {
    ote_tl_iface_t iface[OTE_PROTO_MAX_RAILS];
    ote_rail_t     rail[OTE_PROTO_MAX_RAILS];
    ote_rail_set_t set;
} rails_t;

static int dummy_ep;

static void add(rails_t *r, const kind_t *k)
{
    size_t i = r->set.num_rails;

    memset(&r->iface[i], 0, sizeof(r->iface[i]));
    snprintf(r->iface[i].resource.tl_name, sizeof(r->iface[i].resource.tl_name), "%s", k->name);
    r->iface[i].resource.is_network = k->network;
    memset(&r->rail[i], 0, sizeof(r->rail[i]));
    r->rail[i].iface           = &r->iface[i];
    r->rail[i].ep              = (ote_tl_ep_t *)&dummy_ep;
    r->rail[i].caps.ops        = k->ops;
    r->rail[i].caps.mem_local  = k->mem;
    r->rail[i].caps.mem_remote = k->mem;
    r->rail[i].caps.scope      = k->network ? OTE_TL_SCOPE_HOST | OTE_TL_SCOPE_NETWORK
                                            : OTE_TL_SCOPE_HOST;
    r->rail[i].caps.bandwidth  = k->gbps * 1e9;
    r->set.rails[i]            = &r->rail[i];
    r->set.num_rails++;
}

/* The names of the chosen rails, comma-separated, or "UNREACHABLE". */
static const char *choose(rails_t *r, ote_op_t op, unsigned lmem, unsigned rmem)
{
    static char out[256];
    ote_rail_set_t sel;

    out[0] = '\0';
    if (ote_proto_rails_select(&r->set, op, lmem, rmem, &sel) != OTE_OK)
        return "UNREACHABLE";
    for (size_t i = 0; i < sel.num_rails; i++)
        snprintf(out + strlen(out), sizeof(out) - strlen(out), "%s%s", i ? "," : "",
                 sel.rails[i]->iface->resource.tl_name);
    return out;
}

static void test_same_host_everything(void **state)
{
    rails_t r = {0};

    add(&r, &k_tcp);
    add(&r, &k_uct_tcp);
    add(&r, &k_uct_cma);
    add(&r, &k_cma);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "cma");
    assert_string_equal(choose(&r, OTE_OP_READ, HOST, HOST), "cma");
    assert_string_equal(choose(&r, OTE_OP_WRITE, CUDA, HOST), "UNREACHABLE");
}

static void test_checked_preferred(void **state)
{
    rails_t r = {0};

    /* UCT cma is a little faster, but the native one checks at the target. */
    add(&r, &k_uct_cma);
    add(&r, &k_cma);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "cma");
    /* Without the native one: UCT cma, still ahead of both tcps. */
    memset(&r, 0, sizeof(r));
    add(&r, &k_tcp);
    add(&r, &k_uct_cma);
    add(&r, &k_uct_tcp);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "uct_cma");
    assert_string_equal(choose(&r, OTE_OP_READ, HOST, HOST), "uct_cma");
}

static void test_network_only(void **state)
{
    rails_t r = {0};

    /* Checked tcp beats UCT tcp (within 4x) for PUT; UCT tcp has no GET. */
    add(&r, &k_uct_tcp);
    add(&r, &k_tcp);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "tcp");
    assert_string_equal(choose(&r, OTE_OP_READ, HOST, HOST), "tcp");
    /* UCT tcp alone: PUT yes, GET nothing. */
    memset(&r, 0, sizeof(r));
    add(&r, &k_uct_tcp);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "uct_tcp");
    assert_string_equal(choose(&r, OTE_OP_READ, HOST, HOST), "UNREACHABLE");
    /* Much faster unchecked RDMA wins over tcp; two of them share. */
    memset(&r, 0, sizeof(r));
    add(&r, &k_tcp);
    add(&r, &k_rc);
    add(&r, &k_rc);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "rc_mlx5,rc_mlx5");
}

static void test_memory_types(void **state)
{
    rails_t r = {0};

    add(&r, &k_cma);
    add(&r, &k_rc);
    add(&r, &k_ipc);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "cma");
    /* cma cannot reach GPU memory: the intra-host cuda rail does. */
    assert_string_equal(choose(&r, OTE_OP_WRITE, CUDA, CUDA), "cuda_ipc");
    /* Host to GPU: only RDMA reaches both. */
    assert_string_equal(choose(&r, OTE_OP_READ, HOST, CUDA), "rc_mlx5");
}

static void test_closed_rails(void **state)
{
    rails_t r = {0};

    add(&r, &k_cma);
    add(&r, &k_cma);
    add(&r, &k_tcp);
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "cma,cma");
    r.rail[0].ep = NULL;
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "cma");
    r.rail[1].ep = NULL;
    assert_string_equal(choose(&r, OTE_OP_WRITE, HOST, HOST), "tcp");
}

static int kind_cmp(const void *a, const void *b)
{
    const kind_t *x = *(const kind_t *const *)a, *y = *(const kind_t *const *)b;
    ote_tl_caps_t cx = {.ops = x->ops, .bandwidth = x->gbps * 1e9};
    ote_tl_caps_t cy = {.ops = y->ops, .bandwidth = y->gbps * 1e9};

    return ote_proto_caps_cmp(&cx, x->network, &cy, y->network);
}

/* Build order: intra-host, checked, faster; later ones pruned if never chosen. */
static void test_build_order_and_pruning(void **state)
{
    const kind_t *k[] = {&k_uct_tcp, &k_rc, &k_tcp, &k_uct_cma, &k_cma};
    rails_t built     = {0};

    qsort(k, 5, sizeof(k[0]), kind_cmp);
    assert_string_equal(k[0]->name, "cma");
    assert_string_equal(k[1]->name, "uct_cma");
    assert_string_equal(k[2]->name, "tcp");
    assert_string_equal(k[3]->name, "rc_mlx5");
    assert_string_equal(k[4]->name, "uct_tcp");

    add(&built, &k_cma);
    {
        ote_tl_caps_t c = {.ops = k_uct_cma.ops, .mem_local = HOST, .mem_remote = HOST,
                           .bandwidth = 11e9};

        assert_true(ote_proto_rail_dominated(&c, false, built.set.rails, built.set.num_rails));
        c = (ote_tl_caps_t){.ops = k_tcp.ops, .mem_local = HOST, .mem_remote = HOST,
                            .bandwidth = 1.25e9};
        assert_true(ote_proto_rail_dominated(&c, true, built.set.rails, built.set.num_rails));
        /* rc also reaches GPU memory, which cma does not: still worth a rail. */
        c = (ote_tl_caps_t){.ops = k_rc.ops, .mem_local = HOST | CUDA,
                            .mem_remote = HOST | CUDA, .bandwidth = 12e9};
        assert_false(ote_proto_rail_dominated(&c, true, built.set.rails, built.set.num_rails));
    }
    /* Next to tcp alone, a faster unchecked network rail is worth building. */
    memset(&built, 0, sizeof(built));
    add(&built, &k_tcp);
    {
        ote_tl_caps_t c = {.ops = k_rc.ops, .mem_local = HOST, .mem_remote = HOST,
                           .bandwidth = 12e9};

        assert_false(ote_proto_rail_dominated(&c, true, built.set.rails, built.set.num_rails));
        c = (ote_tl_caps_t){.ops = k_uct_tcp.ops, .mem_local = HOST, .mem_remote = HOST,
                            .bandwidth = 1e9};
        assert_true(ote_proto_rail_dominated(&c, true, built.set.rails, built.set.num_rails));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_host_everything),
        cmocka_unit_test(test_checked_preferred),
        cmocka_unit_test(test_network_only),
        cmocka_unit_test(test_memory_types),
        cmocka_unit_test(test_closed_rails),
        cmocka_unit_test(test_build_order_and_pruning),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
