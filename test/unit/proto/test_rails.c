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

/* Rails of these kinds (in this order): what an op between lmem and rmem is carried on. */
typedef struct {
    const kind_t *kinds[4];
    ote_op_t      op;
    unsigned      lmem, rmem;
    const char   *chosen;
} choice_t;

static void check_choices(const choice_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rails_t r = {0};

        for (size_t k = 0; k < 4 && c[i].kinds[k] != NULL; k++)
            add(&r, c[i].kinds[k]);
        assert_string_equal(choose(&r, c[i].op, c[i].lmem, c[i].rmem), c[i].chosen);
    }
}

#define ALL_HOST {&k_tcp, &k_uct_tcp, &k_uct_cma, &k_cma}

static void test_same_host_everything(void **state)
{
    static const choice_t c[] = {
        {ALL_HOST, OTE_OP_WRITE, HOST, HOST, "cma"},
        {ALL_HOST, OTE_OP_READ, HOST, HOST, "cma"},
        {ALL_HOST, OTE_OP_WRITE, CUDA, HOST, "UNREACHABLE"},
    };

    check_choices(c, sizeof(c) / sizeof(c[0]));
}

static void test_checked_preferred(void **state)
{
    static const choice_t c[] = {
        /* UCT cma is a little faster, but the native one checks at the target. */
        {{&k_uct_cma, &k_cma}, OTE_OP_WRITE, HOST, HOST, "cma"},
        /* Without the native one: UCT cma, still ahead of both tcps. */
        {{&k_tcp, &k_uct_cma, &k_uct_tcp}, OTE_OP_WRITE, HOST, HOST, "uct_cma"},
        {{&k_tcp, &k_uct_cma, &k_uct_tcp}, OTE_OP_READ, HOST, HOST, "uct_cma"},
    };

    check_choices(c, sizeof(c) / sizeof(c[0]));
}

static void test_network_only(void **state)
{
    static const choice_t c[] = {
        /* Checked tcp beats UCT tcp (within 4x) for PUT; UCT tcp has no GET. */
        {{&k_uct_tcp, &k_tcp}, OTE_OP_WRITE, HOST, HOST, "tcp"},
        {{&k_uct_tcp, &k_tcp}, OTE_OP_READ, HOST, HOST, "tcp"},
        /* UCT tcp alone: PUT yes, GET nothing. */
        {{&k_uct_tcp}, OTE_OP_WRITE, HOST, HOST, "uct_tcp"},
        {{&k_uct_tcp}, OTE_OP_READ, HOST, HOST, "UNREACHABLE"},
        /* Much faster unchecked RDMA wins over tcp; two of them share. */
        {{&k_tcp, &k_rc, &k_rc}, OTE_OP_WRITE, HOST, HOST, "rc_mlx5,rc_mlx5"},
    };

    check_choices(c, sizeof(c) / sizeof(c[0]));
}

static void test_memory_types(void **state)
{
    static const choice_t c[] = {
        {{&k_cma, &k_rc, &k_ipc}, OTE_OP_WRITE, HOST, HOST, "cma"},
        /* cma cannot reach GPU memory: the intra-host cuda rail does. */
        {{&k_cma, &k_rc, &k_ipc}, OTE_OP_WRITE, CUDA, CUDA, "cuda_ipc"},
        /* Host to GPU: only RDMA reaches both. */
        {{&k_cma, &k_rc, &k_ipc}, OTE_OP_READ, HOST, CUDA, "rc_mlx5"},
    };

    check_choices(c, sizeof(c) / sizeof(c[0]));
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

/* A rail of kind k reaching mem both ways would add nothing to the rails built. */
static bool dominated(rails_t *built, const kind_t *k, unsigned mem)
{
    ote_tl_caps_t c = {.ops = k->ops, .mem_local = mem, .mem_remote = mem,
                       .bandwidth = k->gbps * 1e9};

    return ote_proto_rail_dominated(&c, k->network, built->set.rails, built->set.num_rails);
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
    assert_true(dominated(&built, &k_uct_cma, HOST));
    assert_true(dominated(&built, &k_tcp, HOST));
    /* rc also reaches GPU memory, which cma does not: still worth a rail. */
    assert_false(dominated(&built, &k_rc, HOST | CUDA));
    /* Next to tcp alone, a faster unchecked network rail is worth building. */
    memset(&built, 0, sizeof(built));
    add(&built, &k_tcp);
    assert_false(dominated(&built, &k_rc, HOST));
    assert_true(dominated(&built, &k_uct_tcp, HOST));
}

static int fake_puts;

static ote_status_t fake_put(ote_tl_ep_t *ep, void *local, size_t length,
                             ote_region_t *local_region, uint64_t remote_addr, const void *rkey,
                             size_t rkey_len, ote_tl_completion_t *comp)
{
    (void)ep, (void)local, (void)length, (void)local_region, (void)remote_addr, (void)rkey;
    (void)rkey_len, (void)comp;
    fake_puts++;
    return OTE_INPROGRESS;
}

/*
 * A slice planned for one peer instance is not posted on rails built since
 * for another (a reopen that found a restarted peer): PEER_RESTARTED, and
 * the ep never sees it; on rails of its own instance it goes.
 */
static void test_post_other_instance(void **state)
{
    static const ote_tl_ep_ops_t ops = {.put_zcopy = fake_put};
    ote_tl_iface_t iface = {.ep_ops = &ops};
    ote_tl_ep_t ep = {.iface = &iface};
    ote_rail_t rail = {.iface = &iface, .ep = &ep};
    _Atomic uint64_t rails_instance = 0x22;
    ote_proto_route_t route = {.instance = 0x11, .rails_instance = &rails_instance};
    ote_slice_t s = {.rail = &rail, .route = &route, .op = OTE_OP_WRITE, .length = 8};

    (void)state;
    fake_puts = 0;
    assert_int_equal(ote_proto_slice_post(&s), OTE_ERR_PEER_RESTARTED);
    assert_int_equal(fake_puts, 0);
    atomic_store(&rails_instance, 0x11);
    assert_int_equal(ote_proto_slice_post(&s), OTE_INPROGRESS);
    assert_int_equal(fake_puts, 1);
    /* Unchecked routes (a local file's) go as before. */
    route.rails_instance = NULL;
    assert_int_equal(ote_proto_slice_post(&s), OTE_INPROGRESS);
    assert_int_equal(fake_puts, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_other_instance),
        cmocka_unit_test(test_same_host_everything),
        cmocka_unit_test(test_checked_preferred),
        cmocka_unit_test(test_network_only),
        cmocka_unit_test(test_memory_types),
        cmocka_unit_test(test_closed_rails),
        cmocka_unit_test(test_build_order_and_pruning),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
