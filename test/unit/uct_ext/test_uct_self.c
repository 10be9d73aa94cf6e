/*
 * The uct component within one process: an engine transferring to itself
 * over UCT cma (uct_cma) and UCT tcp (to-iface and to-ep wire-up), the initiator-side
 * access checks that stand in for the target's on UCT transports, and the
 * descriptor refresh for ranges registered after the segment was opened.
 */
#include "core/engine_int.h"
#include "core/segment/segment.h"
#include "core/worker/worker.h"
#include "self_fixture.h"
#include "proto/putback.h"
#include "uct_ext/uct/uct.h"

#include <ote/ote.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#define LEN (8u << 20)

typedef ote_test_self_t fx_t;

static fx_t *fx_open(const char *tls, const char *connect)
{
    fx_t *f;

    setenv("OTE_TLS", tls, 1);
    if (connect)
        setenv("OTE_UCT_CONNECT", connect, 1);
    f = ote_test_self_open(LEN, NULL);
    unsetenv("OTE_UCT_CONNECT");
    unsetenv("OTE_TLS");
    return f;
}

/* Every rail of the segment runs on this transport. */
static void assert_rails(fx_t *f, const char *tl)
{
    assert_true(f->self->rail_set.num_rails > 0);
    for (size_t i = 0; i < f->self->rail_set.num_rails; i++)
        assert_string_equal(f->self->rail_set.rails[i]->iface->resource.tl_name, tl);
}

static ote_task_status_t run_one(fx_t *f, ote_op_t op, void *local, uint64_t remote, size_t len)
{
    return ote_test_self_xfer(f, op, local, remote, len, 20000);
}

/* Mixed sizes at unaligned offsets in one batch; every byte checked. */
static void xfer_mixed(fx_t *f, ote_op_t op)
{
    static const size_t sizes[] = {1, 3, 64, 4095, 4097, 65537, (1u << 20) - 1, (1u << 20) + 3,
                                   (3u << 20) + 5};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    ote_xfer_req_t r[N];
    ote_task_status_t st[N];
    size_t off[N], pos = 7;

    for (size_t i = 0; i < N; i++) {
        off[i] = pos;
        pos += sizes[i] + 13;
    }
    assert_true(pos < LEN);
    memset(f->local, 0, LEN);
    memset(f->remote, 0, LEN);
    if (op == OTE_OP_WRITE)
        ote_test_fill(f->local, 0, LEN, 31);
    else
        ote_test_fill(f->remote, 0, LEN, 32);
    for (size_t i = 0; i < N; i++)
        r[i] = (ote_xfer_req_t){.op = op, .local_addr = f->local + off[i] + 1,
                                .segment = f->self,
                                .remote_addr = (uintptr_t)f->remote + off[i],
                                .length = sizes[i]};
    assert_int_equal(ote_test_batch_run(f->e, r, N, 30000, st), OTE_OK);
    for (size_t i = 0; i < N; i++) {
        const uint8_t *dst = op == OTE_OP_WRITE ? f->remote + off[i] : f->local + off[i] + 1;
        const uint8_t *src = op == OTE_OP_WRITE ? f->local + off[i] + 1 : f->remote + off[i];

        assert_int_equal(st[i].state, OTE_TASK_COMPLETED);
        assert_int_equal(st[i].transferred, sizes[i]);
        assert_memory_equal(dst, src, sizes[i]);
        /* Nothing around the destination moved. */
        assert_int_equal(dst[-1], 0);
        assert_int_equal(dst[sizes[i]], 0);
    }
}

/*
 * With OTE_TLS=tls every rail is on tl, checked at the target or not, and
 * carries mixed sizes both ways.
 */
static void carries_both_ways(const char *tls, const char *tl, bool checked)
{
    fx_t *f = fx_open(tls, NULL);

    assert_rails(f, tl);
    for (size_t i = 0; i < f->self->rail_set.num_rails; i++)
        assert_int_equal(!!(f->self->rail_set.rails[i]->caps.ops & OTE_TL_CAP_CHECKED), checked);
    xfer_mixed(f, OTE_OP_WRITE);
    xfer_mixed(f, OTE_OP_READ);
    ote_test_self_close(f);
}

static void test_uct_cma(void **state)
{
    carries_both_ways("uct_cma", "uct_cma", false);
}

/* UCT cma does not check at the target: the initiator refuses what the peer did not publish. */
static void test_uct_cma_access_checks(void **state)
{
    fx_t *f = fx_open("uct_cma", NULL);
    ote_task_status_t st;
    uint8_t *late;
    ote_mem_h mlate;
    ote_mem_desc_t d;

    ote_test_self_refusals(f, 20000);
    st = run_one(f, OTE_OP_READ, f->local, (uintptr_t)f->ro + 100, 65436);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_memory_equal(f->local, f->ro + 100, 65436);

    /* Registered after the segment was opened: one refresh finds it. */
    late = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    d    = (ote_mem_desc_t){.addr = late, .length = 1u << 20, .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(f->e, &d, 1, &mlate), OTE_OK);
    ote_test_fill(f->local, 0, 1u << 20, 5);
    st = run_one(f, OTE_OP_WRITE, f->local, (uintptr_t)late, 1u << 20);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(late, 0, 1u << 20, 5), -1);
    /* Write-only: READ is refused without touching anything. */
    memset(f->local, 0, 4096);
    st = run_one(f, OTE_OP_READ, f->local, (uintptr_t)late, 4096);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_ACCESS);
    for (size_t i = 0; i < 4096; i++)
        assert_int_equal(f->local[i], 0);
    assert_int_equal(ote_mem_deregister(f->e, mlate), OTE_OK);
    munmap(late, 1u << 20);
    ote_test_self_close(f);
}

static void test_uct_tcp(void **state)
{
    static const char *const modes[] = {"auto", "ep"};

    for (size_t m = 0; m < 2; m++) {
        fx_t *f = fx_open("uct_tcp", modes[m]);
        ote_tl_conn_model_t want = m == 0 ? OTE_TL_CONN_TO_IFACE : OTE_TL_CONN_TO_EP;
        ote_xfer_req_t r = {.op = OTE_OP_READ, .local_addr = f->local, .segment = f->self,
                            .remote_addr = (uintptr_t)f->remote, .length = 64};
        ote_batch_h b;
        size_t first = 99;

        assert_rails(f, "uct_tcp");
        for (size_t i = 0; i < f->self->rail_set.num_rails; i++) {
            ote_rail_t *rail = f->self->rail_set.rails[i];

            if (ote_proto_putback_rail(rail))
                continue; /* READs over the rail in front of which it stands */
            assert_int_equal(rail->caps.conn_model, want);
            assert_true(want == OTE_TL_CONN_TO_IFACE || rail->conn_id != 0);
        }
        xfer_mixed(f, OTE_OP_WRITE);
        /* UCT tcp has no GET: a READ is put back by the target (PUTBACK). */
        xfer_mixed(f, OTE_OP_READ);
        assert_int_equal(ote_batch_create(f->e, 1, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
        assert_int_equal(first, 0);
        assert_int_equal(ote_batch_wait(b, 20000), OTE_OK);
        ote_batch_release(b);
        if (want == OTE_TL_CONN_TO_EP) {
            /*
             * Closing the segment releases the target side of each of its
             * connections. The PUTBACK target's segment to its initiator
             * (this engine) stays open for the next READs, and so do its.
             */
            ote_worker_t *w = &f->e->facts.workers[0];
            size_t before = 0, accepted = 0, own = 0;

            for (size_t i = 0; i < f->self->rail_set.num_rails; i++)
                own += f->self->rail_set.rails[i]->conn_id != 0;
            assert_true(own > 0);
            pthread_mutex_lock(&w->lock);
            for (size_t i = 0; i < w->num_ifaces; i++)
                before += ((ote_uct_iface_t *)w->ifaces[i])->num_accepted;
            pthread_mutex_unlock(&w->lock);
            assert_int_equal(ote_segment_close(f->self), OTE_OK);
            pthread_mutex_lock(&w->lock);
            for (size_t i = 0; i < w->num_ifaces; i++)
                accepted += ((ote_uct_iface_t *)w->ifaces[i])->num_accepted;
            pthread_mutex_unlock(&w->lock);
            assert_int_equal(accepted, before - own);
            assert_int_equal(ote_segment_open(f->e, ote_engine_name(f->e), &f->self), OTE_OK);
        }
        ote_test_self_close(f);
    }
}

/*
 * Eps accepted through the control plane (to-ep transports) count against
 * OTE_MAX_CONNS_PER_PEER for the address the CONNECT came from: past it a
 * CONNECT is BUSY, whatever instance and connection id it names.
 */
static void test_uct_accept_per_peer(void **state)
{
    fx_t *f;
    ote_worker_t *w;
    size_t tried = 0;

    (void)state;
    setenv("OTE_MAX_CONNS_PER_PEER", "1", 1);
    f = fx_open("uct_tcp", "ep");
    unsetenv("OTE_MAX_CONNS_PER_PEER");
    w = &f->e->facts.workers[0];
    for (size_t i = 0; i < w->num_ifaces; i++) {
        ote_uct_iface_t *iface = (ote_uct_iface_t *)w->ifaces[i];
        ote_tl_peer_t peer     = {.instance_id = 0x1234, .name = "another"};
        char ip[64]            = "";
        uint8_t out[256];
        size_t out_len = 0;

        if (w->ifaces[i]->ops->ep_accept != ote_uct_ep_accept)
            continue;
        pthread_mutex_lock(&w->lock);
        for (ote_uct_ep_t *x = iface->eps; x != NULL; x = x->next) {
            if (x->accepted)
                snprintf(ip, sizeof(ip), "%s", x->peer_ip);
        }
        pthread_mutex_unlock(&w->lock);
        if (ip[0] == '\0')
            continue; /* this iface carries no rail of the segment */
        peer.addr_ip = ip;
        assert_int_equal(w->ifaces[i]->ops->ep_accept(w->ifaces[i], &peer, 777, "x", 1, out,
                                                      sizeof(out), &out_len),
                         OTE_ERR_BUSY);
        tried++;
    }
    assert_true(tried > 0);
    /* The segment's own eps still carry. */
    xfer_mixed(f, OTE_OP_WRITE);
    ote_test_self_close(f);
}

static void never_called(ote_tl_completion_t *comp, ote_status_t status)
{
    (void)comp;
    (void)status;
    fail_msg("a refused post completed");
}

/*
 * A peer's rkey must be exactly what the memory domain packs:
 * uct_rkey_unpack takes no length and reads that many bytes (a shorter key
 * would be read past its end). A put with another length is PROTOCOL.
 */
static void test_uct_rkey_length(void **state)
{
    static const uint8_t three[3] = {1, 2, 3};
    fx_t *f = fx_open("uct_tcp", NULL);
    ote_tl_completion_t comp = {.func = never_called};
    ote_region_t *r;
    size_t tried = 0;

    (void)state;
    assert_int_equal(ote_mem_region_acquire(f->e->facts.regions, (uintptr_t)f->local, 64, 0, &r),
                     OTE_OK);
    for (size_t i = 0; i < f->self->rail_set.num_rails; i++) {
        ote_rail_t *rail = f->self->rail_set.rails[i];
        ote_worker_t *w  = &f->e->facts.workers[rail->worker];
        ote_status_t st;

        if (ote_proto_putback_rail(rail))
            continue;
        assert_true(((ote_uct_iface_t *)rail->iface)->md->attr.rkey_packed_size != sizeof(three));
        pthread_mutex_lock(&w->lock);
        st = rail->iface->ep_ops->put_zcopy(rail->ep, f->local, 64, r, (uintptr_t)f->remote,
                                            three, sizeof(three), &comp);
        pthread_mutex_unlock(&w->lock);
        assert_int_equal(st, OTE_ERR_PROTOCOL);
        tried++;
    }
    assert_true(tried > 0);
    ote_mem_region_put(r);
    /* The segment's own rkeys still carry. */
    xfer_mixed(f, OTE_OP_WRITE);
    ote_test_self_close(f);
}

/*
 * The shm alias takes the native shm and both cmas; the native shm is
 * chosen (it maps engine memory and carries the rest as cma does).
 */
static void test_shm_alias(void **state)
{
    carries_both_ways("shm", "shm", true);
}

/*
 * With every transport, one host: the native shm alone carries host memory
 * both ways (intra-host, mapped and checked beat cma, UCT cma and both tcps).
 */
static void test_auto_choice(void **state)
{
    carries_both_ways("all", "shm", true);
}

/*
 * A UCT domain whose registrations peers reach by rkey alone (RDMA: it
 * registers, and its peers need the rkey) grants access by registration:
 * its registrations are per region and never cached: ib's (and UCT's self
 * and tcp, UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY too, whose registrations
 * cost nothing); not cma's (UCT_MD_FLAG_REG alone) nor the mm domains'.
 */
static void test_uct_md_grant_flag(void **state)
{
    (void)state;
    assert_int_equal(ote_uct_md_flags(UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY),
                     OTE_MD_FLAG_GRANTS_ACCESS);
    assert_int_equal(ote_uct_md_flags(UCT_MD_FLAG_REG), 0);
    assert_int_equal(ote_uct_md_flags(UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_ALLOC), 0);
    assert_int_equal(ote_uct_md_flags(0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uct_md_grant_flag),
        cmocka_unit_test(test_uct_cma),
        cmocka_unit_test(test_uct_cma_access_checks),
        cmocka_unit_test(test_uct_tcp),
        cmocka_unit_test(test_uct_rkey_length),
        cmocka_unit_test(test_uct_accept_per_peer),
        cmocka_unit_test(test_shm_alias),
        cmocka_unit_test(test_auto_choice),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
