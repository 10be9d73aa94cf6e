/*
 * Spraying and failover (proto/rail.c) without a network: each slice goes
 * to the rail with the earliest predicted completion, rails have quotas of
 * bytes and slices in flight, the bandwidth estimate follows what a rail
 * delivered, and a rail that failed cools down, doubling up to a cap, and
 * is probed before it carries again; the lock-free hint that a rail has
 * no cool-down to look at (ote_proto_rail_calm).
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

#define MIB (1u << 20)
#define MS  1000000ull

static bool reconnect_needed[OTE_PROTO_MAX_RAILS];
static int  eps[OTE_PROTO_MAX_RAILS];

static bool fake_needs_reconnect(ote_tl_ep_t *ep)
{
    return reconnect_needed[(int *)ep - eps];
}

static const ote_tl_ep_ops_t fake_ep_ops = {.needs_reconnect = fake_needs_reconnect};

typedef struct {
    ote_tl_iface_t iface[OTE_PROTO_MAX_RAILS];
    ote_rail_t     rail[OTE_PROTO_MAX_RAILS];
    ote_rail_set_t set;
} rails_t;

static void add(rails_t *r, double bw, const ote_rail_params_t *p)
{
    size_t i = r->set.num_rails;

    snprintf(r->iface[i].resource.tl_name, sizeof(r->iface[i].resource.tl_name), "tcp");
    snprintf(r->iface[i].resource.dev_name, sizeof(r->iface[i].resource.dev_name), "eth%zu", i);
    r->iface[i].ep_ops       = &fake_ep_ops;
    r->rail[i].iface         = &r->iface[i];
    r->rail[i].ep            = (ote_tl_ep_t *)&eps[i];
    r->rail[i].remote_md     = -1;
    r->rail[i].caps.bandwidth = bw;
    ote_proto_rail_init(&r->rail[i], p, 1);
    reconnect_needed[i] = false;
    r->set.rails[i]     = &r->rail[i];
    r->set.num_rails++;
}

/* r emptied, then n rails (n bandwidths follow, as doubles), all with the params p. */
static void rails_reset(rails_t *r, const ote_rail_params_t *p, int n, ...)
{
    va_list ap;

    memset(r, 0, sizeof(*r));
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        add(r, va_arg(ap, double), p);
    va_end(ap);
}

static const ote_rail_params_t no_limits = {.cooldown_ns = 100 * MS, .cooldown_max_ns = 350 * MS};

/* Pick a rail of set for a slice s of len and bind s to it; NULL with *why when none. */
static ote_rail_t *set_pick_bind(ote_rail_set_t *set, ote_slice_t *s, size_t len, uint64_t now,
                                 ote_status_t *why)
{
    ote_status_t w = OTE_OK;
    ote_rail_t *rail;

    memset(s, 0, sizeof(*s));
    s->length = len;
    rail      = ote_proto_rail_pick(set, len, now, &w);
    if (why != NULL)
        *why = w;
    if (rail != NULL)
        ote_proto_slice_bind(s, rail, now);
    return rail;
}

/* Pick and bind one slice on r's rails; the rail's index, or -1 with *why. */
static int pick_bind(rails_t *r, ote_slice_t *s, size_t len, uint64_t now, ote_status_t *why)
{
    ote_rail_t *rail = set_pick_bind(&r->set, s, len, now, why);

    return rail == NULL ? -1 : (int)(rail - r->rail);
}

static ote_rail_info_t info(rails_t *r, int i, uint64_t now)
{
    ote_rail_info_t in;

    ote_proto_rail_info(&r->rail[i], now, &in);
    return in;
}

/* With nothing ending, slices fill the rails in proportion to their bandwidths (3:1). */
static void test_earliest_completion(void **state)
{
    static rails_t r;
    static ote_slice_t s[40];
    unsigned count[2] = {0, 0};

    rails_reset(&r, &no_limits, 2, 1e9, 3e9);
    for (int i = 0; i < 40; i++) {
        int k = pick_bind(&r, &s[i], MIB, 1000 * MS, NULL);

        assert_true(k == 0 || k == 1);
        count[k]++;
    }
    assert_int_equal(count[1], 30);
    assert_int_equal(count[0], 10);
    assert_int_equal(info(&r, 1, 0).inflight_bytes, 30ull * MIB);
    /* A big slice goes where it ends first: the emptier fast rail after an end. */
    for (int i = 0; i < 40; i++) {
        if (s[i].rail == &r.rail[1])
            assert_false(ote_proto_slice_end(&s[i], OTE_OK, 1000 * MS + 1));
    }
    assert_int_equal(pick_bind(&r, &s[0], 8 * MIB, 1000 * MS, NULL), 1);
}

/* Quotas of slices and bytes: the best rail full means wait (BUSY), not a slower rail. */
static void test_quotas(void **state)
{
    static rails_t r;
    ote_rail_params_t p = no_limits;
    ote_slice_t s[8];
    ote_status_t why;

    p.max_slices = 2;
    p.max_bytes  = 3 * MIB;
    rails_reset(&r, &p, 2, 4e9, 1e9);
    assert_int_equal(pick_bind(&r, &s[0], MIB, 0, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[1], MIB, 0, NULL), 0);
    /* Rail 0 (3 MiB in 4 GB/s) still beats rail 1 (1 MiB in 1 GB/s), but it is full. */
    assert_int_equal(pick_bind(&r, &s[2], MIB, 0, &why), -1);
    assert_int_equal(why, OTE_ERR_BUSY);
    assert_false(ote_proto_slice_end(&s[0], OTE_OK, 1 * MS));
    assert_int_equal(pick_bind(&r, &s[2], MIB, 1 * MS, NULL), 0);
    /* Bytes: 2 MiB in flight, 2 more would pass 3 MiB. */
    assert_false(ote_proto_slice_end(&s[1], OTE_OK, 1 * MS));
    assert_int_equal(pick_bind(&r, &s[3], 2 * MIB, 1 * MS, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[4], 2 * MIB, 1 * MS, &why), -1);
    assert_int_equal(why, OTE_ERR_BUSY);
    /* An idle rail takes a slice larger than its quota, alone. */
    rails_reset(&r, &p, 1, 1e9);
    assert_int_equal(pick_bind(&r, &s[6], 64 * MIB, 0, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[7], 1, 0, &why), -1);
}

/* The estimate follows what the rail delivered while busy. */
static void test_bandwidth_estimate(void **state)
{
    static rails_t r;
    ote_slice_t s;
    double before, after;

    rails_reset(&r, &no_limits, 1, 1e9);
    before = info(&r, 0, 0).bandwidth;
    assert_true(before == 1e9);
    for (int i = 0; i < 20; i++) {
        uint64_t t0 = (uint64_t)(1 + 100 * i) * MS;

        /* 1 MiB in 50 ms each time: about 21 MB/s. */
        assert_int_equal(pick_bind(&r, &s, MIB, t0, NULL), 0);
        assert_false(ote_proto_slice_end(&s, OTE_OK, t0 + 50 * MS));
    }
    after = info(&r, 0, 0).bandwidth;
    assert_true(after > 19e6 && after < 25e6);
    assert_int_equal(info(&r, 0, 0).bytes, 20ull * MIB);
    assert_int_equal(info(&r, 0, 0).slices, 20);
}

/* A rail failure pauses the rail; its cool-down doubles up to the cap; a probe brings it back. */
static void test_cooldown_and_probe(void **state)
{
    static rails_t r;
    ote_slice_t s[4];
    uint64_t t = 1000 * MS;

    rails_reset(&r, &no_limits, 2, 1e9, 1e9);

    /* A request's own error (access) is no failure of the rail. */
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    assert_false(ote_proto_slice_end(&s[0], OTE_ERR_ACCESS, t));
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_ACTIVE);

    /* A timeout: rail 0 pauses 100 ms, and everything goes to rail 1. */
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[1], MIB, t, NULL), 1);
    assert_true(ote_proto_slice_end(&s[0], OTE_ERR_TIMEOUT, t));
    assert_null(s[0].rail);
    assert_int_equal(s[0].last_error, OTE_ERR_TIMEOUT);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_COOLING);
    assert_int_equal(info(&r, 0, t).errors, 1);
    assert_int_equal(info(&r, 0, t).cooldown_ms, 100);
    assert_int_equal(pick_bind(&r, &s[0], MIB, t + 99 * MS, NULL), 1);
    assert_int_equal(pick_bind(&r, &s[2], MIB, t + 99 * MS, NULL), 1);
    assert_false(ote_proto_rail_probe_due(&r.rail[0], t + 99 * MS));
    assert_true(ote_proto_rail_probe_due(&r.rail[0], t + 100 * MS));
    assert_true(ote_proto_rails_usable(&r.set, t));

    /* Cool-down over: one probe slice, then (failed) 200 ms, then (failed) the cap. */
    t += 100 * MS;
    assert_int_equal(pick_bind(&r, &s[3], MIB, t, NULL), 0);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_PROBING);
    assert_true(ote_proto_slice_end(&s[3], OTE_ERR_REMOTE_DISCONNECT, t));
    assert_int_equal(info(&r, 0, t).cooldown_ms, 200);
    t += 200 * MS;
    assert_int_equal(pick_bind(&r, &s[3], MIB, t, NULL), 0);
    assert_true(ote_proto_slice_end(&s[3], OTE_ERR_TIMEOUT, t));
    assert_int_equal(info(&r, 0, t).cooldown_ms, 350);
    assert_int_equal(ote_proto_rails_last_error(&r.set), OTE_ERR_TIMEOUT);

    /* Its connections failed: not before they are made again (the probe), then one slice. */
    t += 350 * MS;
    reconnect_needed[0] = true;
    assert_int_equal(pick_bind(&r, &s[3], MIB, t, NULL), 1);
    assert_false(ote_proto_slice_end(&s[3], OTE_OK, t));
    ote_proto_rail_probed(&r.rail[0], OTE_ERR_UNREACHABLE, t);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_COOLING);
    assert_int_equal(info(&r, 0, t).cooldown_ms, 350);
    t += 350 * MS;
    reconnect_needed[0] = false;
    ote_proto_rail_probed(&r.rail[0], OTE_OK, t);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_PROBING);
    /* Rail 1 is loaded (3 slices): the probe goes to rail 0, the next slice waits for it. */
    assert_int_equal(pick_bind(&r, &s[3], MIB, t, NULL), 0);
    assert_false(ote_proto_slice_end(&s[1], OTE_OK, t));
    assert_false(ote_proto_slice_end(&s[0], OTE_OK, t));
    assert_false(ote_proto_slice_end(&s[2], OTE_OK, t));
    assert_false(ote_proto_slice_end(&s[3], OTE_OK, t + 1 * MS));
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_ACTIVE);

    /* Back to the first cool-down after a good probe. */
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    assert_true(ote_proto_slice_end(&s[0], OTE_ERR_IO, t));
    assert_int_equal(info(&r, 0, t).cooldown_ms, 100);
}

/* No rail left: every rail paused (UNREACHABLE), or only a probe in flight (BUSY: wait for it). */
static void test_no_rail_left(void **state)
{
    static rails_t r;
    ote_slice_t s[2];
    ote_status_t why;
    uint64_t t = 1000 * MS;

    rails_reset(&r, &no_limits, 1, 1e9);
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    assert_true(ote_proto_slice_end(&s[0], OTE_ERR_TIMEOUT, t));
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, &why), -1);
    assert_int_equal(why, OTE_ERR_UNREACHABLE);
    assert_false(ote_proto_rails_usable(&r.set, t));
    assert_true(ote_proto_rails_usable(&r.set, t + 100 * MS));
    assert_int_equal(pick_bind(&r, &s[0], MIB, t + 100 * MS, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[1], MIB, t + 100 * MS, &why), -1);
    assert_int_equal(why, OTE_ERR_BUSY);
    /* A closed rail never carries. */
    r.rail[0].ep = NULL;
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_CLOSED);
}

/*
 * A peer that died while its rail was idle: no slice failed, its
 * connections did. Probes forced before the pause ended (every submit
 * while no rail may carry) fail without lengthening the pause, and slices
 * never posted learn why: the peer's side of the probe's failure, never
 * UNREACHABLE; with nothing recorded, REMOTE_DISCONNECT, or UNREACHABLE
 * only while this host's port is down.
 */
static void test_idle_peer_lost(void **state)
{
    static rails_t r;
    uint64_t t = 1000 * MS;

    rails_reset(&r, &no_limits, 1, 1e9);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_REMOTE_DISCONNECT);
    reconnect_needed[0] = true;
    /* Connection refused (NOT_FOUND): a due probe failed, the pause starts. */
    ote_proto_rail_probed(&r.rail[0], OTE_ERR_NOT_FOUND, t);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_COOLING);
    assert_int_equal(info(&r, 0, t).cooldown_ms, 100);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_REMOTE_DISCONNECT);
    /* Forced probes within the pause, a millisecond apart: the pause stays as it was. */
    for (int i = 1; i <= 10; i++)
        ote_proto_rail_probed(&r.rail[0], OTE_ERR_UNREACHABLE, t + (uint64_t)i * MS);
    assert_int_equal(info(&r, 0, t + 10 * MS).cooldown_ms, 90);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_REMOTE_DISCONNECT);
    /* A probe with no answer in time: TIMEOUT. */
    ote_proto_rail_probed(&r.rail[0], OTE_ERR_TIMEOUT, t + 20 * MS);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_TIMEOUT);
    /* Due (the pause ended) and failed again: twice as long. */
    ote_proto_rail_probed(&r.rail[0], OTE_ERR_NOT_FOUND, t + 100 * MS);
    assert_int_equal(info(&r, 0, t + 100 * MS).cooldown_ms, 200);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_REMOTE_DISCONNECT);
    /* A restart found by the probe is said as it is. */
    assert_int_equal(ote_proto_peer_lost_status(OTE_ERR_PEER_RESTARTED), OTE_ERR_PEER_RESTARTED);
    assert_int_equal(ote_proto_peer_lost_status(OTE_ERR_IO), OTE_ERR_REMOTE_DISCONNECT);

    /* No error recorded, the port down: a link that passes, never UNREACHABLE. */
    rails_reset(&r, &no_limits, 1, 1e9);
    ote_proto_rail_link(&r.rail[0], false, t);
    assert_int_equal(ote_proto_rails_idle_status(&r.set), OTE_ERR_REMOTE_DISCONNECT);
    reconnect_needed[0] = false;
}

/*
 * The topology table of the ranking tests: NUMA node 0 (cpu:0) near eth0
 * and eth1 at half its score; with a GPU (cuda:0), the GPU near eth1 and
 * eth0 far (1/16); eth2 not placed.
 */
static void topo_two_nics(ote_topo_table_t *table, bool with_gpu)
{
    memset(table, 0, sizeof(*table));
    table->num_places = with_gpu ? 2 : 1;
    table->num_nics   = 2;
    snprintf(table->place[0], OTE_TOPO_PLACE_MAX, "cpu:0");
    snprintf(table->nic[0], OTE_TOPO_NIC_MAX, "eth0");
    snprintf(table->nic[1], OTE_TOPO_NIC_MAX, "eth1");
    table->score[0][0] = 1;
    table->score[0][1] = 0.5f;
    if (with_gpu) {
        snprintf(table->place[1], OTE_TOPO_PLACE_MAX, "cuda:0");
        table->score[1][0] = 0.0625f;
        table->score[1][1] = 1;
    }
}

/*
 * Ranked by topology for a memory (topo_two_nics with the GPU): for cpu:0
 * the weights split slices 2:1 at equal bandwidth; for cuda:0 eth0 is left
 * out and eth1 comes first.
 */
static void test_topology_rank(void **state)
{
    static rails_t r;
    static ote_topo_table_t table;
    static ote_slice_t s[30];
    ote_rail_params_t p = no_limits;
    ote_rail_set_t set;
    unsigned count[3] = {0, 0, 0};

    memset(&r, 0, sizeof(r));
    topo_two_nics(&table, true);
    p.topo = &table;
    for (int i = 0; i < 3; i++) {
        r.iface[i].resource.is_network = true;
        add(&r, 1e9, &p);
    }
    assert_int_equal(r.rail[0].topo_nic, 0);
    assert_int_equal(r.rail[1].topo_nic, 1);
    assert_int_equal(r.rail[2].topo_nic, -1);

    /* Host memory on node 0: all kept, eth0 and eth2 (not placed) at 1, eth1 at 1/2. */
    set = r.set;
    for (int i = 0; i < 3; i++)
        set.weight[i] = 1;
    ote_proto_rails_rank(&set, "cpu:0");
    assert_int_equal(set.num_rails, 3);
    assert_ptr_equal(set.rails[0], &r.rail[0]);
    assert_ptr_equal(set.rails[1], &r.rail[2]);
    assert_ptr_equal(set.rails[2], &r.rail[1]);
    assert_true(set.weight[2] == 0.5f);
    for (int i = 0; i < 25; i++) {
        ote_rail_t *rail = set_pick_bind(&set, &s[i], MIB, 1000 * MS, NULL);

        assert_non_null(rail);
        count[rail - r.rail]++;
    }
    assert_int_equal(count[0], 10);
    assert_int_equal(count[2], 10);
    assert_int_equal(count[1], 5);
    for (int i = 0; i < 25; i++)
        ote_proto_slice_end(&s[i], OTE_OK, 1000 * MS + 1);

    /* GPU memory: eth0 is left out (last, -1), eth1 first, eth2 kept. */
    set = r.set;
    ote_proto_rails_rank(&set, "cuda:0");
    assert_int_equal(set.num_rails, 3);
    assert_ptr_equal(set.rails[0], &r.rail[1]);
    assert_ptr_equal(set.rails[1], &r.rail[2]);
    assert_ptr_equal(set.rails[2], &r.rail[0]);
    assert_true(set.weight[2] < 0);
    /* It carries nothing while another rail may, however loaded they are... */
    for (int i = 0; i < 30; i++) {
        ote_rail_t *rail = set_pick_bind(&set, &s[i], MIB, 1000 * MS, NULL);

        assert_non_null(rail);
        assert_ptr_not_equal(rail, &r.rail[0]);
    }
    for (int i = 0; i < 30; i++)
        ote_proto_slice_end(&s[i], OTE_OK, 1000 * MS + 1);
    /* ...and takes the slices once none may (their ports down): failover keeps it. */
    ote_proto_rail_link(&r.rail[1], false, 1000 * MS);
    ote_proto_rail_link(&r.rail[2], false, 1000 * MS);
    {
        ote_status_t why;

        assert_ptr_equal(ote_proto_rail_pick(&set, MIB, 1000 * MS, &why), &r.rail[0]);
    }
    ote_proto_rail_link(&r.rail[1], true, 1000 * MS);
    ote_proto_rail_link(&r.rail[2], true, 1000 * MS);

    /* A memory the table does not know, or no table: nothing changes. */
    set = r.set;
    ote_proto_rails_rank(&set, "cpu:5");
    assert_int_equal(set.num_rails, 3);
    assert_ptr_equal(set.rails[0], &r.rail[0]);
    for (int i = 0; i < 3; i++)
        r.rail[i].topo = NULL;
    ote_proto_rails_rank(&set, "cuda:0");
    assert_int_equal(set.num_rails, 3);
}

/*
 * A port down pauses its rail until the port is up (whatever the time),
 * a failure meanwhile changes nothing; up, the rail is probed with one
 * slice and then carries.
 */
/*
 * ote_proto_rail_calm, the hint a segment's repair reads without locks:
 * never true while the rail cools (a failure, a port down, a port up
 * again), true again only once ote_proto_rail_cooling, under the lock,
 * found the rail out of its cool-down.
 */
static void test_calm_hint(void **state)
{
    static rails_t r;
    ote_slice_t s[2];
    uint64_t t = 1000 * MS;

    rails_reset(&r, &no_limits, 2, 1e9, 1e9);
    assert_true(ote_proto_rail_calm(&r.rail[0]));
    assert_true(ote_proto_rail_calm(&r.rail[1]));

    /* A failure pauses rail 0: not calm, and its look under the lock leaves it so. */
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    assert_true(ote_proto_slice_end(&s[0], OTE_ERR_TIMEOUT, t));
    assert_false(ote_proto_rail_calm(&r.rail[0]));
    assert_true(ote_proto_rail_calm(&r.rail[1]));
    assert_true(ote_proto_rail_cooling(&r.rail[0]));
    assert_false(ote_proto_rail_calm(&r.rail[0]));

    /* Cool-down over: the probe slice takes it out (PROBING); calm once looked at. */
    t += 100 * MS;
    assert_int_equal(pick_bind(&r, &s[1], MIB, t, NULL), 0);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_PROBING);
    assert_false(ote_proto_rail_calm(&r.rail[0]));
    assert_false(ote_proto_rail_cooling(&r.rail[0]));
    assert_true(ote_proto_rail_calm(&r.rail[0]));
    /* The probe fails: paused anew, not calm. */
    assert_true(ote_proto_slice_end(&s[1], OTE_ERR_IO, t));
    assert_false(ote_proto_rail_calm(&r.rail[0]));
    t += 200 * MS;
    ote_proto_rail_probed(&r.rail[0], OTE_OK, t);
    assert_false(ote_proto_rail_cooling(&r.rail[0]));
    assert_true(ote_proto_rail_calm(&r.rail[0]));

    /* A port down, and up again (probed first): not calm either time. */
    ote_proto_rail_link(&r.rail[1], false, t);
    assert_false(ote_proto_rail_calm(&r.rail[1]));
    assert_false(ote_proto_rail_cooling(&r.rail[1])); /* down is not a cool-down... */
    assert_false(ote_proto_rail_calm(&r.rail[1]));    /* ...but stays looked at */
    ote_proto_rail_link(&r.rail[1], true, t);
    assert_true(ote_proto_rail_cooling(&r.rail[1]));
    assert_false(ote_proto_rail_calm(&r.rail[1]));
    ote_proto_rail_probed(&r.rail[1], OTE_OK, t);
    assert_int_equal(info(&r, 1, t).state, OTE_RAIL_PROBING);
    assert_false(ote_proto_rail_calm(&r.rail[1]));
    assert_false(ote_proto_rail_cooling(&r.rail[1]));
    assert_true(ote_proto_rail_calm(&r.rail[1]));
}

/*
 * A plan memo kept across submissions (the segment's) is matched on the
 * local location's text, not on the region's address: a region made where
 * another was freed, for another memory, is ranked for its own (cpu:1,
 * which the table does not place: rails in their order), not given the
 * old one's choice (cpu:0: eth0, eth2, then eth1 at 1/2).
 */
static void test_plan_memo_location(void **state)
{
    static rails_t r;
    static ote_topo_table_t table;
    static ote_proto_plan_memo_t memo;
    static ote_proto_route_t route;
    ote_rail_params_t p = no_limits;
    ote_proto_remote_t remote = {.published = true, .mem_type = OTE_MEM_TYPE_HOST};
    ote_region_t *region = calloc(1, sizeof(*region));
    static uint8_t buf[64];
    ote_proto_req_t req = {.op = OTE_OP_WRITE, .local = buf, .local_region = region,
                           .remote = 0x1000, .length = sizeof(buf)};
    ote_slice_t inline_slice, *slices;
    size_t n;

    (void)state;
    assert_non_null(region);
    memset(&r, 0, sizeof(r));
    topo_two_nics(&table, false);
    p.topo = &table;
    for (int i = 0; i < 3; i++) {
        r.iface[i].resource.is_network = true;
        add(&r, 1e9, &p);
        r.rail[i].caps.ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY;
        r.rail[i].caps.mem_local  = OTE_MEM_TYPE_HOST;
        r.rail[i].caps.mem_remote = OTE_MEM_TYPE_HOST;
    }
    region->mem_type = OTE_MEM_TYPE_HOST;
    snprintf(region->location, sizeof(region->location), "cpu:0");
    memset(&memo, 0, sizeof(memo));
    for (int round = 0; round < 2; round++) {
        assert_int_equal(ote_proto_plan(&r.set, &req, &remote, MIB, &memo, &route,
                                        &inline_slice, &slices, &n),
                         OTE_OK);
        assert_int_equal(n, 1);
        assert_int_equal(route.rails.num_rails, 3);
        assert_ptr_equal(route.rails.rails[0], &r.rail[0]);
        assert_ptr_equal(route.rails.rails[1], &r.rail[2]);
        assert_ptr_equal(route.rails.rails[2], &r.rail[1]);
        assert_true(route.rails.weight[2] == 0.5f);
        ote_proto_plan_release(slices, &inline_slice);
    }
    /* The same address, another memory's region now. */
    memset(region, 0, sizeof(*region));
    region->mem_type = OTE_MEM_TYPE_HOST;
    snprintf(region->location, sizeof(region->location), "cpu:1");
    assert_int_equal(ote_proto_plan(&r.set, &req, &remote, MIB, &memo, &route, &inline_slice,
                                    &slices, &n),
                     OTE_OK);
    assert_int_equal(route.rails.num_rails, 3);
    for (int i = 0; i < 3; i++) {
        assert_ptr_equal(route.rails.rails[i], &r.rail[i]);
        assert_true(route.rails.weight[i] == 1.0f);
    }
    ote_proto_plan_release(slices, &inline_slice);
    free(region);
}

static void test_link_down_up(void **state)
{
    static rails_t r;
    ote_slice_t s[4];
    ote_status_t why;
    uint64_t t = 1000 * MS;

    rails_reset(&r, &no_limits, 2, 4e9, 1e9);
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 0);
    ote_proto_rail_link(&r.rail[0], false, t);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_COOLING);
    assert_true(info(&r, 0, t).cooldown_ms == UINT64_MAX);
    /* The slice in flight fails there: no longer pause than "until up". */
    assert_true(ote_proto_slice_end(&s[0], OTE_ERR_IO, t));
    assert_true(info(&r, 0, t).cooldown_ms == UINT64_MAX);
    t += 3600 * 1000 * MS;
    assert_false(ote_proto_rail_probe_due(&r.rail[0], t));
    assert_int_equal(pick_bind(&r, &s[0], MIB, t, NULL), 1);
    assert_true(ote_proto_rails_usable(&r.set, t));
    /* Only that rail, down: nothing carries now. */
    ote_proto_rail_link(&r.rail[1], false, t);
    assert_int_equal(pick_bind(&r, &s[1], MIB, t, &why), -1);
    assert_int_equal(why, OTE_ERR_UNREACHABLE);
    ote_proto_rail_link(&r.rail[1], true, t);
    /* Up: one probe slice, then it carries. */
    ote_proto_rail_link(&r.rail[0], true, t);
    assert_true(ote_proto_rail_probe_due(&r.rail[0], t));
    assert_int_equal(pick_bind(&r, &s[1], MIB, t, NULL), 0);
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_PROBING);
    assert_int_equal(pick_bind(&r, &s[2], MIB, t, NULL), 1);
    assert_false(ote_proto_slice_end(&s[1], OTE_OK, t + MS));
    assert_int_equal(info(&r, 0, t).state, OTE_RAIL_ACTIVE);
    assert_int_equal(info(&r, 0, t).cooldown_ms, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_earliest_completion),
        cmocka_unit_test(test_quotas),
        cmocka_unit_test(test_bandwidth_estimate),
        cmocka_unit_test(test_cooldown_and_probe),
        cmocka_unit_test(test_no_rail_left),
        cmocka_unit_test(test_idle_peer_lost),
        cmocka_unit_test(test_topology_rank),
        cmocka_unit_test(test_link_down_up),
        cmocka_unit_test(test_calm_hint),
        cmocka_unit_test(test_plan_memo_location),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
