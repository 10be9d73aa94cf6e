/*
 * Spraying and failover (proto/rail.c) without a network: each slice goes
 * to the rail with the earliest predicted completion, rails have quotas of
 * bytes and slices in flight, the bandwidth estimate follows what a rail
 * delivered, and a rail that failed cools down, doubling up to a cap, and
 * is probed before it carries again.
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

static const ote_rail_params_t no_limits = {.cooldown_ns = 100 * MS, .cooldown_max_ns = 350 * MS};

/* Pick and bind one slice; the rail's index, or -1 with *why. */
static int pick_bind(rails_t *r, ote_slice_t *s, size_t len, uint64_t now, ote_status_t *why)
{
    ote_status_t w = OTE_OK;
    ote_rail_t *rail;

    memset(s, 0, sizeof(*s));
    s->length = len;
    rail      = ote_proto_rail_pick(&r->set, len, now, &w);
    if (why != NULL)
        *why = w;
    if (rail == NULL)
        return -1;
    ote_proto_slice_bind(s, rail, now);
    return (int)(rail - r->rail);
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

    memset(&r, 0, sizeof(r));
    add(&r, 1e9, &no_limits);
    add(&r, 3e9, &no_limits);
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

    memset(&r, 0, sizeof(r));
    p.max_slices = 2;
    p.max_bytes  = 3 * MIB;
    add(&r, 4e9, &p);
    add(&r, 1e9, &p);
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
    memset(&r, 0, sizeof(r));
    add(&r, 1e9, &p);
    assert_int_equal(pick_bind(&r, &s[6], 64 * MIB, 0, NULL), 0);
    assert_int_equal(pick_bind(&r, &s[7], 1, 0, &why), -1);
}

/* The estimate follows what the rail delivered while busy. */
static void test_bandwidth_estimate(void **state)
{
    static rails_t r;
    ote_slice_t s;
    double before, after;

    memset(&r, 0, sizeof(r));
    add(&r, 1e9, &no_limits);
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

    memset(&r, 0, sizeof(r));
    add(&r, 1e9, &no_limits);
    add(&r, 1e9, &no_limits);

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

    memset(&r, 0, sizeof(r));
    add(&r, 1e9, &no_limits);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_earliest_completion),
        cmocka_unit_test(test_quotas),
        cmocka_unit_test(test_bandwidth_estimate),
        cmocka_unit_test(test_cooldown_and_probe),
        cmocka_unit_test(test_no_rail_left),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
