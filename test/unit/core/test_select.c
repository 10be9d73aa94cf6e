/*
 * OTE_TLS / OTE_NET_DEVICES: UCX's syntax, aliases, negation, ranges, errors;
 * the native tcp transport's devices (one per interface) and the addresses
 * its descriptor entries carry.
 */
#include "base/config.h"
#include "core/engine_int.h"
#include "base/util.h"
#include "testlib.h"
#include "uct_ext/tcp/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <ote/ote.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void ote_engine_print_transports(ote_engine_h e, FILE *f);

static ote_select_t *parse_ok(const char *tls, const char *devs)
{
    ote_select_t *sel = NULL;

    assert_int_equal(ote_select_parse(tls, devs, &sel), OTE_OK);
    assert_non_null(sel);
    return sel;
}

static void parse_bad(const char *tls, const char *devs)
{
    ote_select_t *sel = NULL;

    assert_int_equal(ote_select_parse(tls, devs, &sel), OTE_ERR_INVALID_PARAM);
    assert_null(sel);
}

static void test_all(void **state)
{
    const char *specs[] = {NULL, "", "all", "  all"};

    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        ote_select_t *sel = parse_ok(specs[i], specs[i]);

        assert_true(ote_select_tl(sel, "tcp"));
        assert_true(ote_select_tl(sel, "uct_tcp"));
        assert_true(ote_select_tl(sel, "cma"));
        assert_true(ote_select_device(sel, "eth0"));
        assert_true(ote_select_device(sel, "mlx5_0:1"));
        assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
        ote_select_free(sel);
    }
}

static void test_names(void **state)
{
    ote_select_t *sel = parse_ok(" tcp , cma ", NULL);

    /* tcp is the native component; UCT's tcp is uct_tcp. */
    assert_true(ote_select_tl(sel, "tcp"));
    assert_false(ote_select_tl(sel, "uct_tcp"));
    assert_false(ote_select_tl(sel, "posix"));
    /* cma listed but not seen yet: an error at engine start. */
    assert_int_equal(ote_select_check_unmatched(sel), OTE_ERR_NO_DEVICE);
    assert_true(ote_select_tl(sel, "cma"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
    ote_select_free(sel);

    sel = parse_ok("uct_tcp", NULL);
    assert_true(ote_select_tl(sel, "uct_tcp"));
    assert_false(ote_select_tl(sel, "tcp"));
    ote_select_free(sel);

    /* "all" among names: everything. */
    sel = parse_ok("tcp,all", NULL);
    assert_true(ote_select_tl(sel, "cma"));
    assert_true(ote_select_tl(sel, "tcp"));
    ote_select_free(sel);
}

/* A selection and what it must and must not select. */
typedef struct {
    const char *spec;
    const char *in[8];
    const char *out[8];
    int         unmatched; /* ote_select_check_unmatched() after them, or UNASKED */
} select_case_t;

#define UNASKED OTE_INPROGRESS /* never an answer of check_unmatched */

/* Each case as OTE_TLS (devices false) or OTE_NET_DEVICES. */
static void check_cases(const select_case_t *cases, size_t n, bool devices)
{
    for (size_t c = 0; c < n; c++) {
        ote_select_t *sel =
            devices ? parse_ok(NULL, cases[c].spec) : parse_ok(cases[c].spec, NULL);
        bool (*selects)(ote_select_t *, const char *) =
            devices ? ote_select_device : ote_select_tl;

        for (size_t i = 0; i < 8 && cases[c].in[i]; i++) {
            if (!selects(sel, cases[c].in[i]))
                fail_msg("%s should select %s", cases[c].spec, cases[c].in[i]);
        }
        for (size_t i = 0; i < 8 && cases[c].out[i]; i++) {
            if (selects(sel, cases[c].out[i]))
                fail_msg("%s should not select %s", cases[c].spec, cases[c].out[i]);
        }
        if (cases[c].unmatched != UNASKED)
            assert_int_equal(ote_select_check_unmatched(sel), cases[c].unmatched);
        ote_select_free(sel);
    }
}

static void test_aliases(void **state)
{
    static const select_case_t cases[] = {
        {"shm", {"cma", "uct_cma", "posix", "sysv", "knem"}, {"tcp", "uct_tcp", "self", "rc_mlx5"}},
        {"sm", {"cma", "uct_cma", "posix", "sysv", "xpmem"}, {"tcp", "rc_verbs"}},
        {"mm", {"posix", "sysv", "xpmem"}, {"cma", "uct_cma", "knem"}},
        {"ib", {"rc_mlx5", "rc_verbs", "dc_mlx5", "ud_mlx5", "ud_verbs"}, {"tcp", "cma", "uct_cma"}},
        {"cma", {"cma"}, {"uct_cma", "tcp"}},
        {"uct_cma", {"uct_cma"}, {"cma"}},
        {"rc", {"rc_mlx5", "rc_verbs"}, {"dc_mlx5", "ud_verbs", "tcp"}},
        {"rc_x", {"rc_mlx5"}, {"rc_verbs"}},
        {"rc_v", {"rc_verbs"}, {"rc_mlx5"}},
        {"dc", {"dc_mlx5"}, {"rc_mlx5"}},
        {"ud", {"ud_mlx5", "ud_verbs"}, {"rc_verbs"}},
        {"cuda", {"cuda_copy", "cuda_ipc", "gdr_copy"}, {"cma", "tcp"}},
        {"tcp", {"tcp"}, {"uct_tcp"}},
        /* An alias that meets none of its members here is as missing as a name. */
        {"tcp,ib", {"tcp"}, {"cma"}, OTE_ERR_NO_DEVICE},
        /* "\\rc" names a transport called rc, never the alias. */
        {"\\rc", {"rc"}, {"rc_mlx5"}, UNASKED},
    };

    check_cases(cases, sizeof(cases) / sizeof(cases[0]), false);
}

static void test_negation(void **state)
{
    static const select_case_t tls[] = {
        {"^shm", {"tcp", "uct_tcp"}, {"cma", "uct_cma", "posix"}, OTE_OK},
        /* Excluding something absent is not an error. */
        {"^rc_mlx5,uct_tcp", {"tcp"}, {"uct_tcp"}, OTE_OK},
    };
    static const select_case_t devices[] = {
        {"^eth1", {"eth0", "eth10"}, {"eth1"}, OTE_OK},
        {"^mlx5_[0-1]:1", {"mlx5_1:2", "mlx5_2:1"}, {"mlx5_0:1", "mlx5_1:1"}, UNASKED},
    };

    check_cases(tls, sizeof(tls) / sizeof(tls[0]), false);
    check_cases(devices, sizeof(devices) / sizeof(devices[0]), true);
}

static void test_devices(void **state)
{
    static const select_case_t cases[] = {
        {"eth0,mlx5_0:1", {"eth0", "mlx5_0:1"}, {"eth00", "eth1", "mlx5_0:2"}, OTE_OK},
        /* A device without a port names all its ports. */
        {"mlx5_0", {"mlx5_0:1", "mlx5_0:2"}, {"mlx5_1:1"}, UNASKED},
        {"mlx5_[0-3]:1",
         {"mlx5_0:1", "mlx5_2:1", "mlx5_3:1"},
         {"mlx5_4:1", "mlx5_2:2", "mlx5_:1", "mlx5_x:1"},
         UNASKED},
        {"eth[1],mlx5_[8-11]",
         {"eth1", "mlx5_10:1", "mlx5_8:2"},
         {"eth0", "mlx5_12:1", "mlx5_1:1"},
         UNASKED},
        /* A range that met nothing is missing. */
        {"eth0,ib[0-1]", {"eth0"}, {"lo"}, OTE_ERR_NO_DEVICE},
    };

    check_cases(cases, sizeof(cases) / sizeof(cases[0]), true);
}

static void test_errors(void **state)
{
    char many[2048] = "", long_name[128];

    parse_bad("^all", NULL);
    parse_bad("^", NULL);
    parse_bad(",", NULL);
    parse_bad(" , ,", NULL);
    parse_bad("tcp,^cma", NULL);
    parse_bad(NULL, "^");
    parse_bad(NULL, "mlx5_[0-3:1");
    parse_bad(NULL, "mlx5_0-3]:1");
    parse_bad(NULL, "mlx5_[3-1]:1");
    parse_bad(NULL, "eth[a]");
    parse_bad(NULL, "eth[]");
    parse_bad(NULL, "eth[-1]");
    parse_bad(NULL, "eth[1-]");
    parse_bad(NULL, "eth[[1]]");
    for (int i = 0; i < 70; i++)
        strcat(many, i ? ",t" : "t");
    parse_bad(many, NULL);
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    parse_bad(long_name, NULL);
    memset(many, 'y', sizeof(many) - 1);
    many[sizeof(many) - 1] = '\0';
    parse_bad(many, NULL);
}

/* After a test that creates engines: none of the variables it set stays. */
static int env_clear(void **state)
{
    unsetenv("OTE_TLS");
    unsetenv("OTE_NET_DEVICES");
    unsetenv("OTE_LOG_LEVEL");
    return 0;
}

/* The engine applies the selection: missing names fail at start. */
static void test_engine_selection(void **state)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e;
    char *text  = NULL;
    size_t size = 0;
    FILE *f;

    setenv("OTE_TLS", "no_such_tl", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_NO_DEVICE);
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_NET_DEVICES", "no_such_dev0", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_NO_DEVICE);
    setenv("OTE_NET_DEVICES", "^no_such_dev0", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    ote_engine_destroy(e);
    unsetenv("OTE_NET_DEVICES");
    setenv("OTE_TLS", "tcp,^uct_tcp", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
#ifdef HAVE_UCX
    /* Present, but cannot serve user buffers: nothing usable selected. */
    setenv("OTE_TLS", "posix", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_UNREACHABLE);
    setenv("OTE_TLS", "uct_cma", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    f = open_memstream(&text, &size);
    ote_engine_print_transports(e, f);
    fclose(f);
    /* UCT's cma under its OrbitTE name, apart from the native one. */
    assert_non_null(strstr(text, "transport uct_cma    device memory       local     "
                                 "selected: yes"));
    assert_non_null(strstr(text, "transport cma        device memory       local     "
                                 "selected: no (not in OTE_TLS)"));
    assert_non_null(strstr(text, "ops: put_zcopy get_zcopy checked  memory: local host remote "
                                 "host  scope: process host"));
    assert_non_null(strstr(text, "transport tcp        device lo           network   "
                                 "selected: no (not in OTE_TLS)"));
    assert_non_null(strstr(text, "transport uct_tcp    device lo           network   "
                                 "selected: no (not in OTE_TLS)"));
    assert_non_null(strstr(text, "ops: put_zcopy get_zcopy  memory: local host remote host  "
                                 "scope: host"));
    /* uct_tcp has no GET. */
    assert_non_null(strstr(text, "ops: put_zcopy  memory: local host remote host  "
                                 "scope: host\n"));
    free(text);
    ote_engine_destroy(e);
#else
    (void)f;
    (void)text;
    (void)size;
#endif
}

/* Run create with stderr captured; *log_p gets what the engine logged. */
static ote_status_t create_logged(const ote_engine_params_t *p, ote_engine_h *e_p, char **log_p)
{
    ote_status_t st = ote_test_engine_logged(p, e_p, log_p);

    assert_non_null(*log_p);
    return st;
}

/* Interfaces up and running with an IPv4 address: the tcp devices of a 0.0.0.0 engine. */
static size_t ipv4_interfaces(char names[][IF_NAMESIZE], size_t max)
{
    struct ifaddrs *ifa;
    size_t n = 0;

    assert_int_equal(getifaddrs(&ifa), 0);
    for (struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
        bool dup = false;

        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            (i->ifa_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING))
            continue;
        for (size_t k = 0; k < n; k++)
            dup |= strcmp(names[k], i->ifa_name) == 0;
        if (!dup && n < max)
            snprintf(names[n++], IF_NAMESIZE, "%s", i->ifa_name);
    }
    freeifaddrs(ifa);
    return n;
}

/* The tcp entries of e's descriptor: dev -> the addresses it lists. */
static size_t desc_tcp_addrs(ote_engine_h e, const char *dev, ote_stream_sockaddr_t *out)
{
    ote_buf_t b = {0};
    ote_desc_t *d;
    size_t n = 0;

    assert_int_equal(ote_engine_desc_encode(e, &b), OTE_OK);
    assert_int_equal(ote_desc_decode(b.data, b.len, &d), OTE_OK);
    for (size_t k = 0; k < d->num_tls; k++) {
        if (strcmp(d->tls[k].tl_name, "tcp") == 0 && strcmp(d->tls[k].dev_name, dev) == 0) {
            assert_int_equal(ote_tcp_addr_unpack(d->tls[k].addr, d->tls[k].addr_len, out,
                                                 OTE_TCP_MAX_ADDRS, &n),
                             OTE_OK);
            break;
        }
    }
    ote_desc_free(d);
    free(b.data);
    return n;
}

/*
 * An engine listening on every address has one native tcp device per
 * interface, named as the kernel names it; OTE_NET_DEVICES=lo keeps native
 * tcp on lo, and lo's descriptor entry carries 127.0.0.1.
 */
static void test_tcp_devices(void **state)
{
    ote_engine_params_t any = {.listen_addr = "0.0.0.0:0"};
    char names[32][IF_NAMESIZE];
    size_t nif = ipv4_interfaces(names, 32);
    ote_stream_sockaddr_t addrs[OTE_TCP_MAX_ADDRS];
    ote_engine_h e;
    size_t n;

    setenv("OTE_TLS", "tcp", 1);
    unsetenv("OTE_NET_DEVICES");
    assert_int_equal(ote_engine_create(&any, &e), OTE_OK);
    assert_int_equal(e->facts.num_tls, nif);
    for (size_t k = 0; k < nif; k++) {
        bool found = false;

        for (size_t t = 0; t < e->facts.num_tls; t++)
            found |= strcmp(e->facts.tls[t].resource.dev_name, names[k]) == 0 &&
                     strcmp(e->facts.tls[t].resource.tl_name, "tcp") == 0;
        if (!found)
            fail_msg("no tcp device for interface %s", names[k]);
        /* Each publishes its own interface's addresses, with a port. */
        assert_true(desc_tcp_addrs(e, names[k], addrs) > 0);
    }
    ote_engine_destroy(e);

    setenv("OTE_NET_DEVICES", "lo", 1);
    assert_int_equal(ote_engine_create(&any, &e), OTE_OK);
    assert_int_equal(e->facts.num_tls, 1);
    assert_string_equal(e->facts.tls[0].resource.tl_name, "tcp");
    assert_string_equal(e->facts.tls[0].resource.dev_name, "lo");
    /* Loopback reaches this host only. */
    assert_int_equal(e->facts.tls[0].caps.scope, OTE_TL_SCOPE_HOST);
    n = desc_tcp_addrs(e, "lo", addrs);
    assert_int_equal(n, 1);
    assert_int_equal(addrs[0].ss.ss_family, AF_INET);
    assert_int_equal(ntohl(((struct sockaddr_in *)&addrs[0].ss)->sin_addr.s_addr),
                     INADDR_LOOPBACK);
    assert_int_not_equal(ote_sockaddr_port((struct sockaddr *)&addrs[0].ss), 0);
    ote_engine_destroy(e);

    /* So does an engine bound to 127.0.0.1, which serves lo alone. */
    {
        ote_engine_params_t lo = {.listen_addr = "127.0.0.1:0"};

        assert_int_equal(ote_engine_create(&lo, &e), OTE_OK);
        assert_int_equal(e->facts.num_tls, 1);
        assert_string_equal(e->facts.tls[0].resource.dev_name, "lo");
        ote_engine_destroy(e);
    }
}

/* An IPv4 address/prefix as one address of netif. */
static void netif_add(ote_tcp_netif_t *netif, const char *ip, int prefix)
{
    ote_tcp_ifaddr_t *a     = &netif->addrs[netif->num_addrs++];
    struct sockaddr_in *sin = (struct sockaddr_in *)&a->addr;
    struct sockaddr_in *m   = (struct sockaddr_in *)&a->mask;

    memset(a, 0, sizeof(*a));
    sin->sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
    m->sin_family      = AF_INET;
    m->sin_addr.s_addr = htonl(prefix ? 0xffffffffu << (32 - prefix) : 0);
}

/* Whether the kernel's route to ip leaves from an address netif holds. */
static bool routes(const ote_tcp_netif_t *netif, const char *ip)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9)};

    assert_int_equal(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
    return ote_tcp_netif_routes(netif, (struct sockaddr *)&sin, sizeof(sin));
}

/*
 * Off its subnets an interface reaches only what the kernel routes from its
 * own address: 127.0.0.5 leaves from 127.0.0.1, which an interface holding
 * 127.0.0.1 has and one holding only 192.0.2.1 (not on this host) has not.
 */
static void test_tcp_netif_routes(void **state)
{
    ote_tcp_netif_t here = {.name = "x0"}, other = {.name = "x1"};
    (void)state;

    netif_add(&here, "127.0.0.1", 32);
    netif_add(&other, "192.0.2.1", 24);
    assert_false(ote_tcp_netif_on_link(&here, &(struct sockaddr){.sa_family = AF_UNSPEC}));
    assert_true(routes(&here, "127.0.0.5"));
    assert_false(routes(&other, "127.0.0.5"));
    assert_true(ote_tcp_netif_on_link(&other, (struct sockaddr *)&(struct sockaddr_in){
                                                  .sin_family = AF_INET,
                                                  .sin_addr   = {htonl(0xc0000207u)}}));
    /* The second address of an interface counts as much as the first. */
    netif_add(&other, "127.0.0.1", 32);
    assert_true(routes(&other, "127.0.0.5"));
}

/* Names that are not here: OTE_ERR_NO_DEVICE, its own message, and a log naming them. */
static void test_unknown_names(void **state)
{
    ote_engine_params_t p = {.listen_addr = "0.0.0.0:0"};
    ote_engine_h e = NULL;
    char *log;

    assert_string_equal(ote_status_string(OTE_ERR_NO_DEVICE),
                        "no transport or device of that name");
    assert_string_not_equal(ote_status_string(OTE_ERR_NO_DEVICE),
                            ote_status_string(OTE_ERR_UNREACHABLE));

    setenv("OTE_TLS", "tpc", 1);
    assert_int_equal(create_logged(&p, &e, &log), OTE_ERR_NO_DEVICE);
    assert_non_null(strstr(log, "OTE_TLS: unknown transport 'tpc'; transports here: tcp,cma"));
    assert_non_null(strstr(log, "aliases: shm, sm, mm, ib,"));
    free(log);

    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_NET_DEVICES", "lo,no_such_dev0", 1);
    assert_int_equal(create_logged(&p, &e, &log), OTE_ERR_NO_DEVICE);
    assert_non_null(strstr(log, "OTE_NET_DEVICES: no network device 'no_such_dev0' here; "
                                "devices here: lo"));
    assert_null(strstr(log, "'lo'"));
    free(log);
}

/*
 * ^cma excludes the native cma only: where UCX has a cma, uct_cma stays
 * selected, and the engine says so at info level; ^cma,uct_cma says nothing.
 */
static void test_exclude_cma(void **state)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e = NULL;
    bool cma = false, uct_cma = false;
    char *log;

    setenv("OTE_LOG_LEVEL", "info", 1);
    setenv("OTE_TLS", "^cma", 1);
    assert_int_equal(create_logged(&p, &e, &log), OTE_OK);
    for (size_t t = 0; t < e->facts.num_tls; t++) {
        cma |= strcmp(e->facts.tls[t].resource.tl_name, "cma") == 0;
        uct_cma |= strcmp(e->facts.tls[t].resource.tl_name, "uct_cma") == 0;
    }
    assert_false(cma);
#ifdef HAVE_UCX
    assert_true(uct_cma);
    assert_non_null(strstr(log, "info  engine.c:"));
    assert_non_null(strstr(log, "OTE_TLS='^cma' excludes the native cma only: UCT's (uct_cma) "
                                "is selected"));
#else
    assert_false(uct_cma);
    assert_null(strstr(log, "excludes the native cma only"));
#endif
    free(log);
    ote_engine_destroy(e);

    setenv("OTE_TLS", "^cma,uct_cma", 1);
    assert_int_equal(create_logged(&p, &e, &log), OTE_OK);
    for (size_t t = 0; t < e->facts.num_tls; t++)
        assert_null(strstr(e->facts.tls[t].resource.tl_name, "cma"));
    assert_null(strstr(log, "excludes the native"));
    free(log);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all),     cmocka_unit_test(test_names),
        cmocka_unit_test(test_aliases), cmocka_unit_test(test_negation),
        cmocka_unit_test(test_devices), cmocka_unit_test(test_errors),
        cmocka_unit_test_teardown(test_engine_selection, env_clear),
        cmocka_unit_test_teardown(test_tcp_devices, env_clear),
        cmocka_unit_test(test_tcp_netif_routes),
        cmocka_unit_test_teardown(test_unknown_names, env_clear),
        cmocka_unit_test_teardown(test_exclude_cma, env_clear),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
