/* Configuration table and parsers. */
#include "base/config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void test_parse_size(void **state)
{
    size_t v;

    assert_int_equal(ote_cfg_parse_size("0", &v), OTE_OK);
    assert_int_equal(v, 0);
    assert_int_equal(ote_cfg_parse_size("4096", &v), OTE_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(ote_cfg_parse_size("4k", &v), OTE_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(ote_cfg_parse_size("4K", &v), OTE_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(ote_cfg_parse_size("64m", &v), OTE_OK);
    assert_int_equal(v, 64ul << 20);
    assert_int_equal(ote_cfg_parse_size("2g", &v), OTE_OK);
    assert_int_equal(v, 2ul << 30);
    assert_int_equal(ote_cfg_parse_size("1MB", &v), OTE_OK);
    assert_int_equal(v, 1ul << 20);
    assert_int_equal(ote_cfg_parse_size("inf", &v), OTE_OK);
    assert_true(v == SIZE_MAX);
    v = 77;
    assert_int_equal(ote_cfg_parse_size("", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_size("-1", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_size("12q", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_size("1kk", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_size("99999999999999999999", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_size("17179869184t", &v), OTE_ERR_INVALID_PARAM);
    assert_int_equal(v, 77); /* outputs written only on success */
}

static void test_parse_int_bool(void **state)
{
    long l = 5;
    bool b = false;
    int t;

    assert_int_equal(ote_cfg_parse_int("42", &l), OTE_OK);
    assert_int_equal(l, 42);
    assert_int_equal(ote_cfg_parse_int("-3", &l), OTE_OK);
    assert_int_equal(l, -3);
    assert_int_equal(ote_cfg_parse_int("4x", &l), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_int("", &l), OTE_ERR_INVALID_PARAM);
    assert_int_equal(l, -3);
    for (const char *const *y = (const char *const[]){"y", "yes", "on", "1", "true", "YES", 0};
         *y; y++) {
        b = false;
        assert_int_equal(ote_cfg_parse_bool(*y, &b), OTE_OK);
        assert_true(b);
    }
    for (const char *const *n = (const char *const[]){"n", "no", "off", "0", "false", 0}; *n;
         n++) {
        b = true;
        assert_int_equal(ote_cfg_parse_bool(*n, &b), OTE_OK);
        assert_false(b);
    }
    assert_int_equal(ote_cfg_parse_bool("maybe", &b), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_cfg_parse_ternary("auto", &t), OTE_OK);
    assert_int_equal(t, OTE_TERNARY_AUTO);
    assert_int_equal(ote_cfg_parse_ternary("y", &t), OTE_OK);
    assert_int_equal(t, OTE_TERNARY_YES);
    assert_int_equal(ote_cfg_parse_ternary("n", &t), OTE_OK);
    assert_int_equal(t, OTE_TERNARY_NO);
    assert_int_equal(ote_cfg_parse_ternary("sometimes", &t), OTE_ERR_INVALID_PARAM);
}

static void test_defaults_and_env(void **state)
{
    ote_config_t c;

    unsetenv("OTE_TCP_CONNS");
    unsetenv("OTE_SLICE_SIZE");
    assert_int_equal(ote_config_read(&c), OTE_OK);
    assert_int_equal(c.tcp_conns, 2);
    assert_string_equal(c.tls, "all");
    assert_true(c.rcache_enable);
    ote_config_release(&c);

    setenv("OTE_TCP_CONNS", "4", 1);
    setenv("OTE_SLICE_SIZE", "256k", 1);
    setenv("OTE_TLS", "^uct_tcp", 1);
    setenv("OTE_NO_SUCH_VARIABLE", "1", 1); /* warned about, not fatal */
    assert_int_equal(ote_config_read(&c), OTE_OK);
    assert_int_equal(c.tcp_conns, 4);
    assert_int_equal(c.slice_size, 256 * 1024);
    assert_string_equal(c.tls, "^uct_tcp");
    ote_config_release(&c);
    unsetenv("OTE_NO_SUCH_VARIABLE");
    unsetenv("OTE_TLS");

    setenv("OTE_TCP_CONNS", "lots", 1);
    assert_int_equal(ote_config_read(&c), OTE_ERR_INVALID_PARAM);
    setenv("OTE_TCP_CONNS", "0", 1); /* parses, but out of range */
    assert_int_equal(ote_config_read(&c), OTE_ERR_INVALID_PARAM);
    unsetenv("OTE_TCP_CONNS");
    setenv("OTE_LOG_LEVEL", "loud", 1);
    assert_int_equal(ote_config_read(&c), OTE_ERR_INVALID_PARAM);
    unsetenv("OTE_LOG_LEVEL");
    unsetenv("OTE_SLICE_SIZE");
}

static void test_table_complete(void **state)
{
    ote_config_t c;
    char *buf  = NULL;
    size_t len = 0;
    FILE *f;

    /* Every entry has a description, a parseable default, and appears in the listing. */
    assert_int_equal(ote_config_read(&c), OTE_OK);
    f = open_memstream(&buf, &len);
    ote_config_print(&c, f);
    fclose(f);
    for (size_t i = 0; i < ote_config_table_size; i++) {
        char needle[96];

        assert_non_null(ote_config_table[i].desc);
        assert_true(strlen(ote_config_table[i].desc) > 10);
        snprintf(needle, sizeof(needle), "\nOTE_%s=", ote_config_table[i].name);
        assert_non_null(strstr(buf, needle));
        assert_int_equal(ote_config_set(&c, ote_config_table[i].name, ote_config_table[i].dflt),
                         OTE_OK);
    }
    assert_int_equal(ote_config_set(&c, "NOPE", "1"), OTE_ERR_NOT_FOUND);
    free(buf);
    ote_config_release(&c);
}

static void test_secret_not_printed(void **state)
{
    ote_config_t c;
    char *buf  = NULL;
    size_t len = 0;
    FILE *f;

    setenv("OTE_AUTH_KEY", "hunter2-very-secret", 1);
    assert_int_equal(ote_config_read(&c), OTE_OK);
    f = open_memstream(&buf, &len);
    ote_config_print(&c, f);
    fclose(f);
    assert_null(strstr(buf, "hunter2"));
    free(buf);
    ote_config_release(&c);
    unsetenv("OTE_AUTH_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_int_bool),
        cmocka_unit_test(test_defaults_and_env),
        cmocka_unit_test(test_table_complete),
        cmocka_unit_test(test_secret_not_printed),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
