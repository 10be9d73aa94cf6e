/*
 * PUTBACK's target-side checks, spoken raw on the control port as a
 * hostile peer would: the target (engine T) must refuse, with the status
 * of its region table, every PUTBACK whose range it has not published for
 * remote read (out of bounds, unregistered, write-only, deregistered,
 * wrapping past the end of the address space), one for another instance,
 * and one whose initiator is not the instance behind the name; malformed
 * requests close the connection. Each time nothing is written: the
 * initiator's (engine I's) memory, which the PUTBACK would land in, keeps
 * its pattern. A PUTBACK carries no rkey: the target checks the range
 * against its own table, so a wrong or forged key has nothing to reach.
 * A good PUTBACK first shows that a write would be seen.
 */
#include "security_wire.h"
#include "proto/putback.h"
#include "proto/putback_msg.h"
#include "testlib.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY      "putback-security-cluster-key-0123"
#define LEN      (1u << 20)
#define SMALL    65536u
#define SEED_T   0x7461726765ull /* T's readable region */
#define SEED_I   0x696e6974ull   /* I's destination, before anything lands */
#define WAIT_MS  20000
/* T's bound on reaching the engine a PUTBACK names (OTE_CONNECT_TIMEOUT_MS). */
#define CONNECT_MS 2000

static struct {
    ote_engine_h e_t, e_i;
    ote_auth_t  *auth;
    uint64_t     inst_t, inst_i;
    uint8_t     *readable;  /* T: REMOTE_READ | REMOTE_WRITE */
    uint8_t     *writeonly; /* T: REMOTE_WRITE only */
    uint8_t     *gone;      /* T: registered with REMOTE_READ, then deregistered */
    uint8_t     *unreg;     /* T: never registered */
    uint8_t     *dest;      /* I: REMOTE_WRITE */
    uint8_t     *dest_ro;   /* I: REMOTE_READ only */
    ote_mem_h    m_t[2], m_i[2];
} fx;

static uint8_t *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(p != MAP_FAILED);
    return p;
}

static uint64_t instance_of(ote_engine_h e)
{
    ote_desc_t *d = NULL;
    uint64_t id;

    assert_int_equal(sw_fetch_desc(ote_engine_name(e), fx.auth, &d), OTE_OK);
    id = d->instance_id;
    ote_desc_free(d);
    return id;
}

static int setup(void **state)
{
    ote_mem_desc_t d[3];
    ote_mem_h gone;

    (void)state;
    /* Native tcp both ways: the target's WRITE back is checked at I too. */
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_AUTH_KEY", KEY, 1);
    setenv("OTE_CONNECT_TIMEOUT_MS", "2000", 1); /* CONNECT_MS */
    fx.e_t  = ote_test_engine("127.0.0.1:0");
    fx.e_i  = ote_test_engine("127.0.0.1:0");
    fx.auth = sw_auth_new(KEY);
    assert_non_null(fx.auth);

    /* Unregistered pages on both sides: the bytes next to it belong to no region. */
    fx.readable  = map(LEN + 2 * 4096) + 4096;
    fx.writeonly = map(SMALL);
    fx.gone      = map(SMALL);
    fx.unreg     = map(SMALL);
    ote_test_fill(fx.readable, 0, LEN, SEED_T);
    ote_test_fill(fx.writeonly, 0, SMALL, SEED_T);
    ote_test_fill(fx.gone, 0, SMALL, SEED_T);
    d[0] = (ote_mem_desc_t){.addr = fx.readable, .length = LEN,
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    d[1] = (ote_mem_desc_t){.addr = fx.writeonly, .length = SMALL,
                            .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(fx.e_t, d, 2, fx.m_t), OTE_OK);
    d[2] = (ote_mem_desc_t){.addr = fx.gone, .length = SMALL, .access = OTE_ACCESS_REMOTE_READ};
    assert_int_equal(ote_mem_register(fx.e_t, &d[2], 1, &gone), OTE_OK);
    assert_int_equal(ote_mem_deregister(fx.e_t, gone), OTE_OK);

    fx.dest    = map(LEN);
    fx.dest_ro = map(SMALL);
    d[0] = (ote_mem_desc_t){.addr = fx.dest, .length = LEN, .access = OTE_ACCESS_REMOTE_WRITE};
    d[1] = (ote_mem_desc_t){.addr = fx.dest_ro, .length = SMALL, .access = OTE_ACCESS_REMOTE_READ};
    assert_int_equal(ote_mem_register(fx.e_i, d, 2, fx.m_i), OTE_OK);

    fx.inst_t = instance_of(fx.e_t);
    fx.inst_i = instance_of(fx.e_i);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ote_engine_destroy(fx.e_i);
    ote_engine_destroy(fx.e_t);
    ote_auth_destroy(fx.auth);
    munmap(fx.readable - 4096, LEN + 2 * 4096);
    munmap(fx.writeonly, SMALL);
    munmap(fx.gone, SMALL);
    munmap(fx.unreg, SMALL);
    munmap(fx.dest, LEN);
    munmap(fx.dest_ro, SMALL);
    return 0;
}

/* A connection to T's control port, authenticated. */
static int ctl_open(void)
{
    int fd = sw_connect_name(ote_engine_name(fx.e_t));

    assert_true(fd >= 0);
    assert_int_equal(sw_ctl_authenticate(fd, fx.auth), OTE_OK);
    return fd;
}

/* A PUTBACK from I (by default) for remote+len into I's dest. */
static ote_ctl_putback_t request(uint64_t remote, uint32_t len)
{
    ote_ctl_putback_t m = {.initiator = fx.inst_i, .target = fx.inst_t, .id = 42,
                           .remote = remote, .local = (uintptr_t)fx.dest, .length = len};

    snprintf(m.name, sizeof(m.name), "%s", ote_engine_name(fx.e_i));
    return m;
}

/* Send m on a fresh connection; the status of its PUTBACK_ACK (id checked). */
static ote_status_t putback(const ote_ctl_putback_t *m)
{
    ote_buf_t out = {0};
    uint8_t *p    = NULL;
    uint32_t plen = 0;
    ote_status_t st = OTE_ERR_IO;
    uint64_t id     = 0;

    assert_int_equal(ote_ctl_putback_encode(m, &out), OTE_OK);
    assert_int_equal(sw_ctl_request(ote_engine_name(fx.e_t), fx.auth, OTE_CTL_PUTBACK, 9,
                                    out.data, out.len, OTE_CTL_PUTBACK_ACK, &p, &plen, WAIT_MS),
                     0);
    free(out.data);
    assert_int_equal(ote_ctl_putback_ack_decode(p, plen, &st, &id), OTE_OK);
    assert_true(id == m->id);
    free(p);
    return st;
}

/* Nothing landed in I, nothing changed in T. */
static void nothing_written(void)
{
    assert_int_equal(ote_test_check(fx.dest, 0, LEN, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.dest_ro, 0, SMALL, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.readable, 0, LEN, SEED_T), -1);
    assert_int_equal(ote_test_check(fx.writeonly, 0, SMALL, SEED_T), -1);
}

static void reset_dest(void)
{
    ote_test_fill(fx.dest, 0, LEN, SEED_I);
    ote_test_fill(fx.dest_ro, 0, SMALL, SEED_I);
}

/* The control case: a good PUTBACK lands, byte for byte, and only where asked. */
static void test_good_putback_lands(void **state)
{
    ote_ctl_putback_t m = request((uintptr_t)fx.readable + 4096, 8192);
    (void)state;

    reset_dest();
    m.local = (uintptr_t)fx.dest + 65536;
    assert_int_equal(putback(&m), OTE_OK);
    assert_int_equal(ote_test_check(fx.dest + 65536, 4096, 8192, SEED_T), -1);
    assert_int_equal(ote_test_check(fx.dest, 0, 65536, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.dest + 65536 + 8192, 65536 + 8192,
                                    LEN - 65536 - 8192, SEED_I), -1);
    reset_dest();
}

/* Ranges T has not published for remote read: refused with the region table's status. */
static void test_range_refused(void **state)
{
    const uint64_t r = (uintptr_t)fx.readable;
    const struct {
        uint64_t     remote;
        uint32_t     length;
        ote_status_t want;
        const char  *what;
    } cases[] = {
        {r + LEN - 100, 200, OTE_ERR_OUT_OF_BOUNDS, "crosses the end of the region"},
        {r + LEN - 1, OTE_CTL_PUTBACK_MAX_BYTES, OTE_ERR_OUT_OF_BOUNDS, "largest length"},
        {r + LEN, 1, OTE_ERR_NOT_REGISTERED, "one past the end"},
        {r - 1, 2, OTE_ERR_NOT_REGISTERED, "starts before the region"},
        {(uintptr_t)fx.unreg, 64, OTE_ERR_NOT_REGISTERED, "never registered"},
        {(uintptr_t)fx.gone, 64, OTE_ERR_NOT_REGISTERED, "deregistered"},
        {(uintptr_t)fx.writeonly, 64, OTE_ERR_ACCESS, "registered without remote read"},
        {0, 64, OTE_ERR_NOT_REGISTERED, "address 0"},
        {UINT64_MAX - 100, 100, OTE_ERR_NOT_REGISTERED, "ends at 2^64 - 1"},
    };
    (void)state;

    reset_dest();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ote_ctl_putback_t m = request(cases[i].remote, cases[i].length);
        ote_status_t st     = putback(&m);

        if (st != cases[i].want)
            fail_msg("%s: %s, want %s", cases[i].what, ote_status_string(st),
                     ote_status_string(cases[i].want));
        nothing_written();
    }
}

/* Instances: another target, or an initiator that is not the one behind the name. */
static void test_instances_refused(void **state)
{
    ote_ctl_putback_t m = request((uintptr_t)fx.readable, 4096);
    (void)state;

    reset_dest();
    m.target = fx.inst_t + 1;
    assert_int_equal(putback(&m), OTE_ERR_NOT_FOUND);
    nothing_written();

    m        = request((uintptr_t)fx.readable, 4096);
    m.initiator = fx.inst_i ^ 0x8000;
    assert_int_equal(putback(&m), OTE_ERR_PEER_RESTARTED);
    nothing_written();

    /* A name no engine answers at. */
    m = request((uintptr_t)fx.readable, 4096);
    snprintf(m.name, sizeof(m.name), "127.0.0.1:1");
    assert_int_equal(putback(&m), OTE_ERR_UNREACHABLE);
    nothing_written();
}

/*
 * The name of a local file (file:///...) or of a peer's export: no
 * engine's, and refused before anything is opened. A file segment opened
 * by T would carry T's own instance, so a request naming T as initiator
 * would pass the instance check and T would write the PUTBACK's bytes into
 * a file of its host.
 */
static void test_object_names_refused(void **state)
{
    char path[] = "/tmp/ote_putback_victim.XXXXXX", *name;
    ote_ctl_putback_t m = request((uintptr_t)fx.readable, 4096);
    int fd;

    (void)state;
    reset_dest();
    fd = ote_test_victim_file(path);
    assert_true(fd >= 0);
    for (int i = 0; i < 2; i++) {
        name = m.name;
        if (i == 0)
            snprintf(name, sizeof(m.name), "file://%s", path);
        else
            snprintf(name, sizeof(m.name), "exported@%s", ote_engine_name(fx.e_t));
        m.initiator = fx.inst_t; /* T itself: what a file segment there would carry */
        m.local     = 0;
        assert_int_equal(putback(&m), OTE_ERR_INVALID_PARAM);
    }
    assert_true(ote_test_victim_intact(fd, path));
    nothing_written();
}

/* Destinations I did not open to remote writes: I's own checks refuse T's WRITE. */
static void test_destination_refused(void **state)
{
    ote_ctl_putback_t m = request((uintptr_t)fx.readable, 4096);
    (void)state;

    reset_dest();
    m.local = (uintptr_t)fx.dest_ro;
    assert_int_equal(putback(&m), OTE_ERR_ACCESS);
    nothing_written();
    m.local = (uintptr_t)fx.dest + LEN - 100;
    assert_int_equal(putback(&m), OTE_ERR_OUT_OF_BOUNDS);
    nothing_written();
    m.local = (uintptr_t)fx.unreg;
    assert_int_equal(putback(&m), OTE_ERR_NOT_REGISTERED);
    nothing_written();
}

/*
 * Malformed PUTBACKs (lengths out of range, ranges that wrap past 2^64,
 * bytes missing or left over): the connection is closed and nothing is
 * written.
 */
static void test_malformed_closed(void **state)
{
    ote_ctl_putback_t m = request((uintptr_t)fx.readable, 4096);
    ote_buf_t good      = {0};
    uint8_t buf[OTE_CTL_PUTBACK_MAX_LEN + 8];
    (void)state;

    reset_dest();
    assert_int_equal(ote_ctl_putback_encode(&m, &good), OTE_OK);
    assert_true(good.len <= sizeof(buf) - 8);
    for (int k = 0; k < 10; k++) {
        size_t len = good.len;
        int fd     = ctl_open();

        memcpy(buf, good.data, good.len);
        switch (k) {
        case 0: ote_put_u32(buf + 40, 0); break;                             /* length 0 */
        case 1: ote_put_u32(buf + 40, OTE_CTL_PUTBACK_MAX_BYTES + 1); break; /* too long */
        case 2: ote_put_u32(buf + 40, UINT32_MAX); break;
        case 3: buf[len++] = 0; break;                                        /* trailing byte */
        case 4: len -= 1; break;                                              /* name cut */
        case 5: buf[44] = 0; len = 45; break;                                 /* empty name */
        case 6: len = 40; break;                                              /* no length */
        case 7: ote_put_u64(buf + 24, UINT64_MAX - 10); break;                /* remote wraps */
        case 8: ote_put_u64(buf + 24, UINT64_MAX - 4094); break;              /* by one byte */
        case 9: ote_put_u64(buf + 32, UINT64_MAX - 100); break;               /* local wraps */
        }
        assert_int_equal(sw_ctl_send(fd, OTE_CTL_PUTBACK, 3, buf, len), 0);
        if (!sw_closed(fd, WAIT_MS, NULL))
            fail_msg("malformed PUTBACK %d: the connection stayed open", k);
        close(fd);
        nothing_written();
    }
    free(good.data);
    /* T still serves a good one. */
    assert_int_equal(putback(&m), OTE_OK);
    assert_int_equal(ote_test_check(fx.dest, 0, 4096, SEED_T), -1);
    reset_dest();
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A listener that never accepts: a connect to it succeeds and then nothing answers. */
static int black_hole(char *name, size_t len)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen       = sizeof(a);
    int fd               = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 64), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    snprintf(name, len, "127.0.0.1:%u", ntohs(a.sin_port));
    return fd;
}

/* A connection to T's control port from another address of the loopback, authenticated. */
static int ctl_open_from(const char *src)
{
    const char *colon = strrchr(ote_engine_name(fx.e_t), ':');
    struct sockaddr_in a = {.sin_family = AF_INET}, to = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_non_null(colon);
    assert_true(fd >= 0);
    assert_int_equal(inet_pton(AF_INET, src, &a.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port        = htons((uint16_t)atoi(colon + 1));
    assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
    assert_int_equal(sw_ctl_authenticate(fd, fx.auth), OTE_OK);
    return fd;
}

/*
 * A peer whose PUTBACKs name engines that never answer (each holds a
 * thread of T's pool for the whole connect timeout) does not hold the
 * pool from another peer: a good PUTBACK from another address is served
 * at once, not after the slow ones. The slow ones are each answered (not
 * OK) and nothing is written.
 */
static void test_slow_peer_shares_pool(void **state)
{
    enum { SLOW = 2 * OTE_PUTBACK_TARGET_THREADS };
    ote_ctl_putback_t m = request((uintptr_t)fx.readable, 4096);
    char names[SLOW][64];
    int holes[SLOW], fds[SLOW];
    uint64_t t0, ms;
    (void)state;

    reset_dest();
    for (int i = 0; i < SLOW; i++) {
        ote_ctl_putback_t slow = request((uintptr_t)fx.readable, 4096);
        ote_buf_t out          = {0};

        holes[i] = black_hole(names[i], sizeof(names[i]));
        snprintf(slow.name, sizeof(slow.name), "%.63s", names[i]);
        slow.id = 100 + (uint64_t)i;
        fds[i]  = ctl_open_from("127.0.0.2");
        assert_int_equal(ote_ctl_putback_encode(&slow, &out), OTE_OK);
        assert_int_equal(sw_ctl_send(fds[i], OTE_CTL_PUTBACK, 9, out.data, out.len), 0);
        free(out.data);
    }
    usleep(200 * 1000); /* the slow ones are running, or waiting for a thread */
    t0 = now_ms();
    assert_int_equal(putback(&m), OTE_OK);
    ms = now_ms() - t0;
    print_message("good PUTBACK beside %d slow ones: %llu ms\n", SLOW, (unsigned long long)ms);
    assert_true(ms < CONNECT_MS / 2);
    assert_int_equal(ote_test_check(fx.dest, 0, 4096, SEED_T), -1);
    reset_dest();
    for (int i = 0; i < SLOW; i++) {
        ote_ctl_hdr_t h;
        uint8_t *p       = NULL;
        ote_status_t st  = OTE_OK;
        uint64_t id      = 0;

        assert_int_equal(sw_ctl_recv(fds[i], &h, &p, WAIT_MS), 0);
        assert_int_equal(h.type, OTE_CTL_PUTBACK_ACK);
        assert_int_equal(ote_ctl_putback_ack_decode(p, h.length, &st, &id), OTE_OK);
        assert_true(id == 100 + (uint64_t)i);
        assert_true(st != OTE_OK);
        free(p);
        close(fds[i]);
        close(holes[i]);
    }
    nothing_written();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_putback_lands),
        cmocka_unit_test(test_range_refused),
        cmocka_unit_test(test_instances_refused),
        cmocka_unit_test(test_object_names_refused),
        cmocka_unit_test(test_destination_refused),
        cmocka_unit_test(test_malformed_closed),
        cmocka_unit_test(test_slow_peer_shares_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
