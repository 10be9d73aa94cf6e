/* OTE_TLS / OTE_NET_DEVICES: UCX's syntax, aliases, negation, ranges, errors. */
#include "core/config.h"
#include "core/engine.h"

#include <ote/ote.h>
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
    assert_int_equal(ote_select_check_unmatched(sel), OTE_ERR_UNREACHABLE);
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

static void test_aliases(void **state)
{
    static const struct {
        const char *alias;
        const char *in[5];
        const char *out[5];
    } cases[] = {
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
    };

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ote_select_t *sel = parse_ok(cases[c].alias, NULL);

        for (size_t i = 0; i < 5 && cases[c].in[i]; i++) {
            if (!ote_select_tl(sel, cases[c].in[i]))
                fail_msg("%s should select %s", cases[c].alias, cases[c].in[i]);
        }
        for (size_t i = 0; i < 5 && cases[c].out[i]; i++) {
            if (ote_select_tl(sel, cases[c].out[i]))
                fail_msg("%s should not select %s", cases[c].alias, cases[c].out[i]);
        }
        assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
        ote_select_free(sel);
    }
    /* An alias that meets none of its members here is as missing as a name. */
    {
        ote_select_t *sel = parse_ok("tcp,ib", NULL);

        assert_true(ote_select_tl(sel, "tcp"));
        assert_false(ote_select_tl(sel, "cma"));
        assert_int_equal(ote_select_check_unmatched(sel), OTE_ERR_UNREACHABLE);
        ote_select_free(sel);
    }
    /* "\rc" names a transport called rc, never the alias. */
    {
        ote_select_t *sel = parse_ok("\\rc", NULL);

        assert_false(ote_select_tl(sel, "rc_mlx5"));
        assert_true(ote_select_tl(sel, "rc"));
        ote_select_free(sel);
    }
}

static void test_negation(void **state)
{
    ote_select_t *sel = parse_ok("^shm", NULL);

    assert_true(ote_select_tl(sel, "tcp"));
    assert_true(ote_select_tl(sel, "uct_tcp"));
    assert_false(ote_select_tl(sel, "cma"));
    assert_false(ote_select_tl(sel, "uct_cma"));
    assert_false(ote_select_tl(sel, "posix"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
    ote_select_free(sel);

    /* Excluding something absent is not an error. */
    sel = parse_ok("^rc_mlx5,uct_tcp", NULL);
    assert_true(ote_select_tl(sel, "tcp"));
    assert_false(ote_select_tl(sel, "uct_tcp"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
    ote_select_free(sel);

    sel = parse_ok(NULL, "^eth1");
    assert_true(ote_select_device(sel, "eth0"));
    assert_false(ote_select_device(sel, "eth1"));
    assert_true(ote_select_device(sel, "eth10"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
    ote_select_free(sel);

    sel = parse_ok(NULL, "^mlx5_[0-1]:1");
    assert_false(ote_select_device(sel, "mlx5_0:1"));
    assert_false(ote_select_device(sel, "mlx5_1:1"));
    assert_true(ote_select_device(sel, "mlx5_1:2"));
    assert_true(ote_select_device(sel, "mlx5_2:1"));
    ote_select_free(sel);
}

static void test_devices(void **state)
{
    ote_select_t *sel = parse_ok(NULL, "eth0,mlx5_0:1");

    assert_true(ote_select_device(sel, "eth0"));
    assert_false(ote_select_device(sel, "eth00"));
    assert_false(ote_select_device(sel, "eth1"));
    assert_true(ote_select_device(sel, "mlx5_0:1"));
    assert_false(ote_select_device(sel, "mlx5_0:2"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_OK);
    ote_select_free(sel);

    /* A device without a port names all its ports. */
    sel = parse_ok(NULL, "mlx5_0");
    assert_true(ote_select_device(sel, "mlx5_0:1"));
    assert_true(ote_select_device(sel, "mlx5_0:2"));
    assert_false(ote_select_device(sel, "mlx5_1:1"));
    ote_select_free(sel);

    sel = parse_ok(NULL, "mlx5_[0-3]:1");
    assert_true(ote_select_device(sel, "mlx5_0:1"));
    assert_true(ote_select_device(sel, "mlx5_2:1"));
    assert_true(ote_select_device(sel, "mlx5_3:1"));
    assert_false(ote_select_device(sel, "mlx5_4:1"));
    assert_false(ote_select_device(sel, "mlx5_2:2"));
    assert_false(ote_select_device(sel, "mlx5_:1"));
    assert_false(ote_select_device(sel, "mlx5_x:1"));
    ote_select_free(sel);

    sel = parse_ok(NULL, "eth[1],mlx5_[8-11]");
    assert_true(ote_select_device(sel, "eth1"));
    assert_false(ote_select_device(sel, "eth0"));
    assert_true(ote_select_device(sel, "mlx5_10:1"));
    assert_true(ote_select_device(sel, "mlx5_8:2"));
    assert_false(ote_select_device(sel, "mlx5_12:1"));
    assert_false(ote_select_device(sel, "mlx5_1:1"));
    ote_select_free(sel);

    /* A range that met nothing is missing. */
    sel = parse_ok(NULL, "eth0,ib[0-1]");
    assert_true(ote_select_device(sel, "eth0"));
    assert_false(ote_select_device(sel, "lo"));
    assert_int_equal(ote_select_check_unmatched(sel), OTE_ERR_UNREACHABLE);
    ote_select_free(sel);
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

/* The engine applies the selection: missing names fail at start. */
static void test_engine_selection(void **state)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e;
    char *text  = NULL;
    size_t size = 0;
    FILE *f;

    setenv("OTE_TLS", "no_such_tl", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_UNREACHABLE);
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_NET_DEVICES", "no_such_dev0", 1);
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_UNREACHABLE);
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
    unsetenv("OTE_TLS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all),     cmocka_unit_test(test_names),
        cmocka_unit_test(test_aliases), cmocka_unit_test(test_negation),
        cmocka_unit_test(test_devices), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_engine_selection),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
