/*
 * Configuration tables: the parsers, the generic machinery on a table of
 * this test's own, a component's table (tcp), and the engine's list of
 * every table.
 */
#include "base/config.h"
#include "base/log.h"
#include "core/engine.h"
#include "testlib.h"
#include "mem/mem.h"
#include "uct_ext/file/file.h"
#include "uct_ext/rdma/rdma.h"
#include "uct_ext/tcp/tcp.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- a table of this test's own ---- */

typedef struct {
    char  *name;
    long   count;
    size_t size;
    bool   flag;
    int    mode;
    int    level;
} demo_opts_t;

#define D(_f) offsetof(demo_opts_t, _f)

static const ote_cfg_entry_t demo_fields[] = {
    {"NAME", "plain", OTE_CFG_STRING, D(name), "A string setting of the demo table."},
    {"COUNT", "3", OTE_CFG_INT, D(count), "An integer setting, validated 1..10."},
    {"SIZE", "4k", OTE_CFG_SIZE, D(size), "A size setting of the demo table."},
    {"FLAG", "n", OTE_CFG_BOOL, D(flag), "A boolean setting of the demo table."},
    {"MODE", "auto", OTE_CFG_TERNARY, D(mode), "A ternary setting of the demo table."},
    {"LEVEL", "info", OTE_CFG_LOGLEVEL, D(level), "A log level setting of the demo table."},
};

static int demo_validations;

static ote_status_t demo_validate(const void *opts)
{
    const demo_opts_t *o = opts;

    demo_validations++;
    return o->count >= 1 && o->count <= 10 ? OTE_OK : OTE_ERR_INVALID_PARAM;
}

static const ote_config_table_t demo_table = {
    .prefix      = "CFGDEMO_",
    .component   = "demo",
    .fields      = demo_fields,
    .num_fields  = OTE_CONFIG_NUM_FIELDS(demo_fields),
    .struct_size = sizeof(demo_opts_t),
    .validate    = demo_validate,
};

static void demo_unset(void)
{
    for (size_t i = 0; i < demo_table.num_fields; i++) {
        char name[64];

        snprintf(name, sizeof(name), "OTE_CFGDEMO_%s", demo_fields[i].name);
        unsetenv(name);
    }
}

static void test_table_defaults(void **state)
{
    demo_opts_t o;
    int before = demo_validations;

    demo_unset();
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_OK);
    assert_string_equal(o.name, "plain");
    assert_int_equal(o.count, 3);
    assert_int_equal(o.size, 4096);
    assert_false(o.flag);
    assert_int_equal(o.mode, OTE_TERNARY_AUTO);
    assert_int_equal(o.level, OTE_LOG_INFO);
    assert_int_equal(demo_validations, before + 1);
    ote_config_release(&demo_table, &o);
    assert_null(o.name);
}

static void test_table_env(void **state)
{
    demo_opts_t o;

    demo_unset();
    ote_test_setenv_all((const char *const[]){
        "OTE_CFGDEMO_NAME=from-env", "OTE_CFGDEMO_COUNT=7", "OTE_CFGDEMO_SIZE=2m",
        "OTE_CFGDEMO_FLAG=yes", "OTE_CFGDEMO_MODE=n", "OTE_CFGDEMO_LEVEL=debug", NULL});
    /* Without the prefix it is not this table's variable. */
    setenv("OTE_COUNT", "9", 1);
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_OK);
    assert_string_equal(o.name, "from-env");
    assert_int_equal(o.count, 7);
    assert_int_equal(o.size, 2u << 20);
    assert_true(o.flag);
    assert_int_equal(o.mode, OTE_TERNARY_NO);
    assert_int_equal(o.level, OTE_LOG_DEBUG);
    ote_config_release(&demo_table, &o);
    unsetenv("OTE_COUNT");

    /* A value that does not parse, and one that parses but fails validation. */
    setenv("OTE_CFGDEMO_COUNT", "seven", 1);
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_ERR_INVALID_PARAM);
    assert_null(o.name); /* nothing left allocated */
    setenv("OTE_CFGDEMO_COUNT", "11", 1);
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_ERR_INVALID_PARAM);
    assert_null(o.name);
    setenv("OTE_CFGDEMO_COUNT", "10", 1);
    setenv("OTE_CFGDEMO_LEVEL", "loud", 1);
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_ERR_INVALID_PARAM);
    demo_unset();
}

static void test_table_set_and_print(void **state)
{
    demo_opts_t o;
    char *buf  = NULL;
    size_t len = 0;
    FILE *f;

    demo_unset();
    assert_int_equal(ote_config_fill(&demo_table, &o), OTE_OK);
    /* By the variable's name without OTE_: the prefix is part of it. */
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_COUNT", "12"), OTE_OK);
    assert_int_equal(o.count, 12);
    assert_int_equal(ote_config_validate(&demo_table, &o), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_COUNT", "5"), OTE_OK);
    assert_int_equal(ote_config_validate(&demo_table, &o), OTE_OK);
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_NAME", "renamed"), OTE_OK);
    assert_string_equal(o.name, "renamed");
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_SIZE", "inf"), OTE_OK);
    assert_true(o.size == SIZE_MAX);
    assert_int_equal(ote_config_set(&demo_table, &o, "COUNT", "5"), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_NOPE", "5"), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_config_set(&demo_table, &o, "CFGDEMO_FLAG", "perhaps"),
                     OTE_ERR_INVALID_PARAM);
    assert_false(o.flag); /* unchanged */
    assert_ptr_equal(ote_config_find(&demo_table, "CFGDEMO_MODE"), &demo_fields[4]);
    assert_null(ote_config_find(&demo_table, "MODE"));

    f = open_memstream(&buf, &len);
    ote_config_print(&demo_table, &o, f);
    fclose(f);
    assert_non_null(strstr(buf, "#\n# A string setting of the demo table.\n"
                                "# type: string, default: plain\n#\nOTE_CFGDEMO_NAME=renamed\n"));
    assert_non_null(strstr(buf, "# type: int, default: 3\n#\nOTE_CFGDEMO_COUNT=5\n"));
    assert_non_null(strstr(buf, "# type: size, default: 4k\n#\nOTE_CFGDEMO_SIZE=inf\n"));
    assert_non_null(strstr(buf, "# type: bool, default: n\n#\nOTE_CFGDEMO_FLAG=n\n"));
    assert_non_null(strstr(buf, "# type: ternary, default: auto\n#\nOTE_CFGDEMO_MODE=auto\n"));
    assert_non_null(strstr(buf, "# type: level, default: info\n#\nOTE_CFGDEMO_LEVEL=info\n"));
    free(buf);
    ote_config_release(&demo_table, &o);
}

/* What fn writes to stderr (the log). */
static char *capture_stderr(void (*fn)(void))
{
    char path[] = "/tmp/ote_test_config_XXXXXX";
    int fd      = mkstemp(path);
    int saved   = dup(STDERR_FILENO);
    char *out   = calloc(1, 65536);
    ssize_t n;

    assert_true(fd >= 0 && saved >= 0 && out != NULL);
    unlink(path);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, out, 65535, 0);
    assert_true(n >= 0);
    close(fd);
    return out;
}

static void warn_demo_and_tcp(void)
{
    const ote_config_table_t *tables[] = {&demo_table, &ote_tcp_config_table};

    ote_config_warn_unknown(tables, 2);
}

static void test_unknown_warned(void **state)
{
    char *log;

    demo_unset();
    ote_log_set_level(OTE_LOG_WARN);
    setenv("OTE_CFGDEMO_COUNT", "4", 1);
    setenv("OTE_TCP_CONNS", "4", 1);
    setenv("OTE_CFGDEMO_NOPE", "1", 1);
    setenv("OTE_CONNS", "1", 1); /* tcp's field, without tcp's prefix */
    log = capture_stderr(warn_demo_and_tcp);
    assert_non_null(strstr(log, "unknown configuration variable OTE_CFGDEMO_NOPE ignored"));
    assert_non_null(strstr(log, "unknown configuration variable OTE_CONNS ignored"));
    assert_null(strstr(log, "OTE_CFGDEMO_COUNT"));
    assert_null(strstr(log, "OTE_TCP_CONNS"));
    free(log);
    unsetenv("OTE_CFGDEMO_NOPE");
    unsetenv("OTE_CONNS");
    unsetenv("OTE_TCP_CONNS");
    demo_unset();
}

/* ---- a component's table: tcp ---- */

static void test_tcp_table(void **state)
{
    ote_stream_config_t t;

    unsetenv("OTE_TCP_CONNS");
    unsetenv("OTE_TCP_MAX_MSG");
    assert_string_equal(ote_tcp_config_table.prefix, "TCP_");
    assert_int_equal(ote_config_fill(&ote_tcp_config_table, &t), OTE_OK);
    assert_int_equal(t.conns, 2);
    assert_int_equal(t.max_msg, 64u << 20);
    assert_int_equal(t.sndbuf, 0);
    assert_true(t.nodelay);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "TCP_CONNS", "8"), OTE_OK);
    assert_int_equal(t.conns, 8);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "TCP_SNDBUF", "1m"), OTE_OK);
    assert_int_equal(t.sndbuf, 1u << 20);
    assert_int_equal(ote_config_validate(&ote_tcp_config_table, &t), OTE_OK);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "TCP_CONNS", "65"), OTE_OK);
    assert_int_equal(ote_config_validate(&ote_tcp_config_table, &t), OTE_ERR_INVALID_PARAM);
    /* The table's bounds (1..64) include both ends. */
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "TCP_CONNS", "64"), OTE_OK);
    assert_int_equal(ote_config_validate(&ote_tcp_config_table, &t), OTE_OK);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "TCP_CONNS", "0"), OTE_OK);
    assert_int_equal(ote_config_validate(&ote_tcp_config_table, &t), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "CONNS", "4"), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_config_set(&ote_tcp_config_table, &t, "SLICE_SIZE", "4"),
                     OTE_ERR_NOT_FOUND);
    ote_config_release(&ote_tcp_config_table, &t);

    setenv("OTE_TCP_CONNS", "4", 1);
    setenv("OTE_TCP_MAX_MSG", "1m", 1);
    assert_int_equal(ote_config_fill(&ote_tcp_config_table, &t), OTE_OK);
    assert_int_equal(t.conns, 4);
    assert_int_equal(t.max_msg, 1u << 20);
    ote_config_release(&ote_tcp_config_table, &t);
    setenv("OTE_TCP_MAX_MSG", "1k", 1); /* parses, but below 4k */
    assert_int_equal(ote_config_fill(&ote_tcp_config_table, &t), OTE_ERR_INVALID_PARAM);
    unsetenv("OTE_TCP_MAX_MSG");
    unsetenv("OTE_TCP_CONNS");
}

/* ---- the engine: its own table and the check of every other one ---- */

static void test_engine_defaults_and_env(void **state)
{
    ote_engine_config_t c;

    unsetenv("OTE_TCP_CONNS");
    unsetenv("OTE_SLICE_SIZE");
    assert_int_equal(ote_engine_config_read(&c), OTE_OK);
    assert_string_equal(c.tls, "all");
    assert_int_equal(c.num_workers, 1);
    assert_int_equal(c.max_conns, 4096);
    ote_engine_config_release(&c);

    setenv("OTE_TCP_CONNS", "4", 1);
    setenv("OTE_SLICE_SIZE", "256k", 1);
    setenv("OTE_TLS", "^uct_tcp", 1);
    setenv("OTE_NO_SUCH_VARIABLE", "1", 1); /* warned about, not fatal */
    assert_int_equal(ote_engine_config_read(&c), OTE_OK);
    assert_int_equal(c.slice_size, 256 * 1024);
    assert_string_equal(c.tls, "^uct_tcp");
    ote_engine_config_release(&c);
    unsetenv("OTE_NO_SUCH_VARIABLE");
    unsetenv("OTE_TLS");

    /* A component's value that does not parse or is out of range fails the engine. */
    setenv("OTE_TCP_CONNS", "lots", 1);
    assert_int_equal(ote_engine_config_read(&c), OTE_ERR_INVALID_PARAM);
    setenv("OTE_TCP_CONNS", "0", 1);
    assert_int_equal(ote_engine_config_read(&c), OTE_ERR_INVALID_PARAM);
    unsetenv("OTE_TCP_CONNS");
    for (const char *const *v = (const char *const[]){"OTE_URING_QD=0", "OTE_STAGE_SLOTS=0",
                                                       /* slots that wrapped to 0 as unsigned */
                                                       "OTE_STAGE_SLOTS=4294967296",
                                                       "OTE_STAGE_CHUNK_SIZE=1k",
                                                       "OTE_STAGE_CHUNK_SIZE=2g",
                                                       "OTE_SHM_UNMAP_TIMEOUT_MS=0",
                                                       "OTE_METADATA_TTL_S=1",
                                                       "OTE_RCACHE_MAX_SIZE=lots",
                                                       "OTE_GPU_DIRECT=sometimes",
                                                       "OTE_CUDA_IPC_CACHE_ENTRIES=x",
                                                       "OTE_NUM_WORKERS=65",
                                                       "OTE_LOG_LEVEL=loud",
                                                       /* times whose ns would pass 64 bits */
                                                       "OTE_NOTIFY_TIMEOUT_MS=18446744073709",
                                                       "OTE_SUBMIT_TIMEOUT_MS=9223372036854775807",
                                                       "OTE_XFER_TIMEOUT_MS=4000000000000",
                                                       "OTE_CONNECT_TIMEOUT_MS=4000000000000",
                                                       "OTE_METADATA_TIMEOUT_MS=4000000000000",
                                                       "OTE_POLL_GRACE_US=4000000000000",
                                                       /* negative times */
                                                       "OTE_SUBMIT_TIMEOUT_MS=-1",
                                                       "OTE_POLL_SPIN_MAX_US=-5",
                                                       "OTE_RAIL_COOLDOWN_MAX_MS=-1", 0};
         *v; v++) {
        char name[64];
        const char *eq = strchr(*v, '=');

        snprintf(name, sizeof(name), "%.*s", (int)(eq - *v), *v);
        setenv(name, eq + 1, 1);
        assert_int_equal(ote_engine_config_read(&c), OTE_ERR_INVALID_PARAM);
        unsetenv(name);
    }
    unsetenv("OTE_SLICE_SIZE");
}

/* The table in the engine's list that holds a variable (named without OTE_), or NULL. */
static const ote_config_table_t *table_of(const char *name)
{
    const ote_config_table_t *tables[OTE_CONFIG_MAX_TABLES];
    size_t n = ote_engine_config_tables(tables, OTE_CONFIG_MAX_TABLES);
    const ote_config_table_t *found = NULL;

    for (size_t i = 0; i < n; i++) {
        if (ote_config_find(tables[i], name) != NULL) {
            assert_null(found); /* in one table only */
            found = tables[i];
        }
    }
    return found;
}

static void test_tables_complete(void **state)
{
    const ote_config_table_t *tables[OTE_CONFIG_MAX_TABLES];
    size_t n = ote_engine_config_tables(tables, OTE_CONFIG_MAX_TABLES);
    static const char *const owner[][2] = {
        {"LOG_LEVEL", "engine"},  {"TLS", "engine"},         {"MAX_CONNS", "engine"},
        {"AUTH_KEY", "engine"},   {"TCP_CONNS", "tcp"},      {"TCP_NODELAY", "tcp"},
        {"SHM_UNMAP_TIMEOUT_MS", "shm"},                     {"UCT_CONNECT", "uct"},
        {"RCACHE_ENABLE", "rcache"}, {"GPU_DIRECT", "mem"},  {"STAGE_SLOTS", "stage"},
        {"CUDA_LIB", "cuda"},     {"CUDA_IPC_CACHE_ENTRIES", "cuda"},
        {"URING_QD", "file"},     {"FILE_DIRECT", "file"},   {"SYSFS_ROOT", "rdma"},
        {"METADATA", "engine"},   {"METADATA_PREFIX", "metadata"},
        {"METADATA_TTL_S", "metadata"},
    };
    char *buf  = NULL;
    size_t len = 0, vars = 0;
    FILE *f;

    assert_true(n > 1 && n < OTE_CONFIG_MAX_TABLES);
    for (size_t i = 0; i < sizeof(owner) / sizeof(owner[0]); i++) {
        const ote_config_table_t *t = table_of(owner[i][0]);

        assert_non_null(t);
        assert_string_equal(t->component, owner[i][1]);
    }
    assert_null(table_of("NOPE"));
    /* Every table an opened component reads is in the list. */
    for (size_t c = 0; ote_tl_components[c] != NULL; c++) {
        bool listed = false;

        for (size_t i = 0; i < n; i++)
            listed |= tables[i] == ote_tl_components[c]->ops->config_table;
        assert_true(listed);
    }

    /* Every entry has a description, a parseable default, and appears in the listing. */
    f = open_memstream(&buf, &len);
    assert_int_equal(ote_engine_config_print(f), OTE_OK);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        void *opts = calloc(1, tables[i]->struct_size);

        assert_int_equal(ote_config_fill(tables[i], opts), OTE_OK);
        for (size_t k = 0; k < tables[i]->num_fields; k++) {
            const ote_cfg_entry_t *e = &tables[i]->fields[k];
            char name[96], needle[128];

            assert_non_null(e->desc);
            assert_true(strlen(e->desc) > 10);
            snprintf(name, sizeof(name), "%s%s", tables[i]->prefix, e->name);
            snprintf(needle, sizeof(needle), "\nOTE_%s=", name);
            assert_non_null(strstr(buf, needle));
            assert_int_equal(ote_config_set(tables[i], opts, name, e->dflt), OTE_OK);
            vars++;
        }
        assert_int_equal(ote_config_validate(tables[i], opts), OTE_OK);
        ote_config_release(tables[i], opts);
        free(opts);
    }
    /* Every variable printed belongs to some table. */
    for (const char *p = buf; (p = strstr(p, "\nOTE_")) != NULL; p++)
        vars--;
    assert_int_equal(vars, 0);
    free(buf);
}

/*
 * Every component's table has its own prefix (only the engine's has none);
 * the names mem, file and rdma had before they had one are still read,
 * their new names win, and neither is warned about as unknown.
 */
static void warn_file_table(void)
{
    const ote_config_table_t *t[] = {&ote_file_config_table, &ote_mem_config_table,
                                     &ote_rdma_config_table};

    ote_config_warn_unknown(t, 3);
}

/* What the file, mem and rdma tables read from the environment as it is now. */
static void expect_component_tables(long uring_qd, int gpu_direct, const char *sysfs_root)
{
    ote_file_config_t fc;
    ote_mem_config_t mc;
    ote_rdma_config_t rc;

    assert_int_equal(ote_config_fill(&ote_file_config_table, &fc), OTE_OK);
    assert_int_equal(fc.uring_qd, uring_qd);
    ote_config_release(&ote_file_config_table, &fc);
    assert_int_equal(ote_config_fill(&ote_mem_config_table, &mc), OTE_OK);
    assert_int_equal(mc.gpu_direct, gpu_direct);
    assert_int_equal(ote_config_fill(&ote_rdma_config_table, &rc), OTE_OK);
    assert_string_equal(rc.sysfs_root, sysfs_root);
    ote_config_release(&ote_rdma_config_table, &rc);
}

static void test_component_prefixes(void **state)
{
    const ote_config_table_t *tables[OTE_CONFIG_MAX_TABLES];
    ote_file_config_t fc;
    size_t n = ote_engine_config_tables(tables, OTE_CONFIG_MAX_TABLES);
    char *log;

    for (size_t i = 0; i < n; i++) {
        if (strcmp(tables[i]->component, "engine") != 0)
            assert_true(tables[i]->prefix[0] != '\0');
    }
    assert_string_equal(ote_mem_config_table.prefix, "MEM_");
    assert_string_equal(ote_file_config_table.prefix, "FILE_");
    assert_string_equal(ote_rdma_config_table.prefix, "RDMA_");

    setenv("OTE_URING_QD", "7", 1);
    setenv("OTE_GPU_DIRECT", "n", 1);
    setenv("OTE_SYSFS_ROOT", "/nonexistent/old-name", 1);
    expect_component_tables(7, OTE_TERNARY_NO, "/nonexistent/old-name");

    setenv("OTE_FILE_URING_QD", "9", 1);
    setenv("OTE_MEM_GPU_DIRECT", "y", 1);
    setenv("OTE_RDMA_SYSFS_ROOT", "/nonexistent/new-name", 1);
    expect_component_tables(9, OTE_TERNARY_YES, "/nonexistent/new-name");

    /* A bad value under the old name fails as one under the new name does. */
    unsetenv("OTE_FILE_URING_QD");
    setenv("OTE_URING_QD", "lots", 1);
    assert_int_equal(ote_config_fill(&ote_file_config_table, &fc), OTE_ERR_INVALID_PARAM);

    setenv("OTE_URING_QD", "7", 1);
    ote_log_set_level(OTE_LOG_WARN);
    log = capture_stderr(warn_file_table);
    assert_null(strstr(log, "unknown configuration variable"));
    free(log);
    unsetenv("OTE_URING_QD");
    unsetenv("OTE_GPU_DIRECT");
    unsetenv("OTE_SYSFS_ROOT");
    unsetenv("OTE_MEM_GPU_DIRECT");
    unsetenv("OTE_RDMA_SYSFS_ROOT");
}

static void test_secret_not_printed(void **state)
{
    char *buf  = NULL;
    size_t len = 0;
    FILE *f;

    setenv("OTE_AUTH_KEY", "hunter2-very-secret", 1);
    f = open_memstream(&buf, &len);
    assert_int_equal(ote_engine_config_print(f), OTE_OK);
    fclose(f);
    assert_null(strstr(buf, "hunter2"));
    assert_non_null(strstr(buf, "\nOTE_AUTH_KEY=(set)\n"));
    free(buf);
    unsetenv("OTE_AUTH_KEY");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_int_bool),
        cmocka_unit_test(test_table_defaults),
        cmocka_unit_test(test_table_env),
        cmocka_unit_test(test_table_set_and_print),
        cmocka_unit_test(test_unknown_warned),
        cmocka_unit_test(test_tcp_table),
        cmocka_unit_test(test_engine_defaults_and_env),
        cmocka_unit_test(test_tables_complete),
        cmocka_unit_test(test_secret_not_printed),
        cmocka_unit_test(test_component_prefixes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
