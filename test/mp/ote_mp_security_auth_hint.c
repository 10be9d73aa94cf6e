/*
 * What an initiator is told when OTE_AUTH_KEY is set on one side only:
 * ote_segment_open() fails OTE_ERR_AUTH, and the initiator's own log (an
 * error or warn line) says what to do, whichever side lacks the key and
 * however the peer is found (p2p: its control listener; a Redis store:
 * the descriptor from the store, then the peer's listeners).
 */
#include "store_server.h"
#include "testlib.h"

#include "base/auth.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY          "auth-hint-cluster-key-0123456789abcdef"
#define HINT_NO_KEY  "the peer requires OTE_AUTH_KEY and this engine has none"
#define HINT_PEER_NO "the peer has no OTE_AUTH_KEY"

/* Where this process's stderr goes while a call is watched. */
typedef struct {
    FILE *tmp;
    int   saved;
} capture_t;

static void capture_begin(capture_t *c)
{
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    fflush(stderr);
    c->saved = dup(STDERR_FILENO);
    assert_true(c->saved >= 0);
    assert_true(dup2(fileno(c->tmp), STDERR_FILENO) >= 0);
}

/* The log written since capture_begin (malloc'd), also copied to the test's own log. */
static char *capture_end(capture_t *c)
{
    long n;
    char *log;

    fflush(stderr);
    dup2(c->saved, STDERR_FILENO);
    close(c->saved);
    n = ftell(c->tmp);
    assert_true(n >= 0);
    log = calloc(1, (size_t)n + 1);
    assert_non_null(log);
    rewind(c->tmp);
    assert_int_equal(fread(log, 1, (size_t)n, c->tmp), (size_t)n);
    fclose(c->tmp);
    fputs(log, stderr);
    return log;
}

/* A line of log holding text, logged at error or warn level. */
static void expect_line(const char *log, const char *text)
{
    for (const char *p = log; p != NULL && *p != '\0';) {
        const char *end = strchr(p, '\n');
        size_t len      = end != NULL ? (size_t)(end - p) : strlen(p);
        char line[2048];

        snprintf(line, sizeof(line), "%.*s", (int)len, p);
        if (strstr(line, text) != NULL) {
            if (strstr(line, " error ") == NULL && strstr(line, " warn ") == NULL)
                fail_msg("'%s' is logged below warn: %s", text, line);
            return;
        }
        p = end != NULL ? end + 1 : NULL;
    }
    fail_msg("the initiator's log does not say '%s'", text);
}

static int start_target(ote_test_target_t *t, const char *key, const char *const *extra)
{
    const char *args[8] = {"--region", "1m:rw"};
    size_t n = 2;
    int rc;

    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 7; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    if (key)
        setenv("OTE_AUTH_KEY", key, 1);
    rc = ote_test_target_start(t, NULL, args);
    unsetenv("OTE_AUTH_KEY");
    return rc;
}

/* Open name from an engine with key (or none) and metadata; its status, *log_p its log. */
static ote_status_t open_logged(const char *name, const char *key, const char *metadata,
                                char **log_p)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0", .metadata = metadata};
    ote_engine_h e;
    ote_segment_h seg;
    ote_status_t st;
    capture_t c;

    ote_test_setenv_or_unset("OTE_AUTH_KEY", key);
    assert_int_equal(ote_engine_create(&p, &e), OTE_OK);
    unsetenv("OTE_AUTH_KEY");
    capture_begin(&c);
    st = ote_segment_open(e, name, &seg);
    *log_p = capture_end(&c);
    if (st == OTE_OK)
        ote_segment_close(seg);
    ote_engine_destroy(e);
    return st;
}

static void test_p2p_initiator_without_key(void **state)
{
    ote_test_target_t t;
    char *log;

    (void)state;
    if (!ote_auth_supported())
        skip();
    assert_int_equal(start_target(&t, KEY, NULL), 0);
    assert_int_equal(open_logged(t.name, NULL, NULL, &log), OTE_ERR_AUTH);
    expect_line(log, HINT_NO_KEY);
    free(log);
    /* The same engine with the key: no hint, the open works. */
    assert_int_equal(open_logged(t.name, KEY, NULL, &log), OTE_OK);
    assert_null(strstr(log, HINT_NO_KEY));
    free(log);
    ote_test_target_stop(&t);
}

static void test_p2p_peer_without_key(void **state)
{
    ote_test_target_t t;
    char *log;

    (void)state;
    if (!ote_auth_supported())
        skip();
    assert_int_equal(start_target(&t, NULL, NULL), 0);
    assert_int_equal(open_logged(t.name, KEY, NULL, &log), OTE_ERR_AUTH);
    expect_line(log, HINT_PEER_NO);
    free(log);
    ote_test_target_stop(&t);
}

/*
 * Through a store: the descriptor comes from Redis (an engine without the
 * key does not check its signature), and the peer's tcp listener refuses
 * the connection (OTE_TLS=tcp on both sides: UCT's transports do not
 * authenticate, docs/security.md).
 */
static void test_store_initiator_without_key(void **state)
{
    const char *extra[] = {"--name", "auth-hint-t", "--metadata", NULL, NULL};
    ote_test_store_t store;
    ote_test_target_t t;
    char *log;
    int rc;

    (void)state;
    if (!ote_auth_supported())
        skip();
    rc = ote_test_store_start(&store, "redis", NULL);
    if (rc == 77)
        skip();
    assert_int_equal(rc, 0);
    extra[3] = store.uri;
    setenv("OTE_TLS", "tcp", 1);
    assert_int_equal(start_target(&t, KEY, extra), 0);
    assert_int_equal(open_logged("auth-hint-t", NULL, store.uri, &log), OTE_ERR_AUTH);
    expect_line(log, HINT_NO_KEY);
    free(log);
    assert_int_equal(open_logged("auth-hint-t", KEY, store.uri, &log), OTE_OK);
    free(log);
    unsetenv("OTE_TLS");
    ote_test_target_stop(&t);
    ote_test_store_stop(&store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p2p_initiator_without_key),
        cmocka_unit_test(test_p2p_peer_without_key),
        cmocka_unit_test(test_store_initiator_without_key),
    };

    unsetenv("OTE_AUTH_KEY");
    unsetenv("OTE_AUTH_KEY_FILE");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
