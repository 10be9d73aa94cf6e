/*
 * FILE_IO by rails (ops 3 and 4) spoken raw on an exporting engine's
 * control port, as a hostile peer would: the exporter (engine X) moves a
 * file's bytes over its rails into or out of the memory of the engine the
 * request names (engine I, in this process), and must do so only where I
 * registered that memory for the access (I's native tcp checks it), only
 * into the instance the request names, and never past the exported size.
 * Each refusal leaves I's memory and the file as they were; malformed
 * requests close the connection. A good READ and WRITE first show that
 * the bytes would be seen.
 */
#include "security_wire.h"
#include "proto/file_io_msg.h"
#include "testlib.h"

#include <fcntl.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY       "fileio-security-cluster-key-01234"
#define FILE_SIZE (1u << 20)
#define MEM       (1u << 20)
#define SEED_F    0x66696c65ull /* the file */
#define SEED_I    0x696e6974ull /* I's memory, before anything lands */
#define WAIT_MS   20000

static struct {
    char             path[256];
    ote_engine_h     e_x, e_i;
    ote_file_export_h x;
    ote_auth_t      *auth;
    uint64_t         inst_x, inst_i, file_id;
    uint8_t         *rw; /* I: REMOTE_READ | REMOTE_WRITE */
    uint8_t         *ro; /* I: REMOTE_READ only  */
    uint8_t         *wo; /* I: REMOTE_WRITE only */
    ote_mem_h        mem[3];
} fx;

static void file_fill(void)
{
    assert_int_equal(ote_test_write_file(fx.path, FILE_SIZE, SEED_F), 0);
}

/* The file still holds its pattern: -1, else the first offset that differs. */
static long file_bad(void)
{
    uint8_t *buf = malloc(FILE_SIZE);
    int fd       = open(fx.path, O_RDONLY);
    long bad;

    assert_non_null(buf);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
    close(fd);
    bad = ote_test_check(buf, 0, FILE_SIZE, SEED_F);
    free(buf);
    return bad;
}

/*
 * The file and the memory a READ may land in get their patterns again. The
 * read-only region keeps the one setup gave it: it is only ever read (by
 * I's worker, through a socket that ThreadSanitizer does not see as a
 * synchronization), never written.
 */
static void reset(void)
{
    file_fill();
    ote_test_fill(fx.rw, 0, MEM, SEED_I);
    ote_test_fill(fx.wo, 0, MEM, SEED_I);
}

/* Nothing landed in I, nothing changed in the file. */
static void nothing_moved(void)
{
    assert_int_equal(file_bad(), -1);
    assert_int_equal(ote_test_check(fx.rw, 0, MEM, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.ro, 0, MEM, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.wo, 0, MEM, SEED_I), -1);
}

static int setup(void **state)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    uint8_t *base;
    ote_mem_desc_t d[3];
    ote_desc_t *desc = NULL;
    int fd;

    (void)state;
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_AUTH_KEY", KEY, 1);
    snprintf(fx.path, sizeof(fx.path), "%s/ote-sec-fileio-XXXXXX", tmp);
    fd = mkstemp(fx.path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, FILE_SIZE), 0);
    close(fd);
    file_fill();
    fx.e_x  = ote_test_engine("127.0.0.1:0");
    fx.e_i  = ote_test_engine("127.0.0.1:0");
    fx.auth = sw_auth_new(KEY);
    assert_non_null(fx.auth);
    assert_int_equal(ote_file_export(fx.e_x, "f", fx.path,
                                     OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, &fx.x),
                     OTE_OK);
    /* Three regions with an unregistered page after each. */
    base = mmap(NULL, 3 * (MEM + 4096), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                -1, 0);
    assert_true(base != MAP_FAILED);
    fx.rw = base;
    fx.ro = base + MEM + 4096;
    fx.wo = base + 2 * (MEM + 4096);
    d[0]  = (ote_mem_desc_t){.addr = fx.rw, .length = MEM,
                             .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    d[1]  = (ote_mem_desc_t){.addr = fx.ro, .length = MEM, .access = OTE_ACCESS_REMOTE_READ};
    d[2]  = (ote_mem_desc_t){.addr = fx.wo, .length = MEM, .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(fx.e_i, d, 3, fx.mem), OTE_OK);
    assert_int_equal(sw_fetch_desc(ote_engine_name(fx.e_x), fx.auth, &desc), OTE_OK);
    fx.inst_x = desc->instance_id;
    assert_int_equal(desc->num_exports, 1);
    fx.file_id = desc->exports[0].id;
    ote_desc_free(desc);
    assert_int_equal(sw_fetch_desc(ote_engine_name(fx.e_i), fx.auth, &desc), OTE_OK);
    fx.inst_i = desc->instance_id;
    ote_desc_free(desc);
    ote_test_fill(fx.ro, 0, MEM, SEED_I);
    reset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    ote_file_unexport(fx.x);
    ote_engine_destroy(fx.e_i);
    ote_engine_destroy(fx.e_x);
    ote_auth_destroy(fx.auth);
    munmap(fx.rw, 3 * (MEM + 4096));
    unlink(fx.path);
    return 0;
}

/* A FILE_IO by rails from I: op READ or WRITE of the file at off, I's memory at local. */
static ote_ctl_file_io_t request(uint8_t op, uint64_t off, uint32_t len, const void *local)
{
    ote_ctl_file_io_t m = {.op = op, .rails = true, .initiator = fx.inst_i,
                           .target = fx.inst_x, .file_id = fx.file_id, .offset = off,
                           .length = len, .local = (uintptr_t)local};

    snprintf(m.name, sizeof(m.name), "%s", ote_engine_name(fx.e_i));
    return m;
}

/* Send m on a fresh authenticated connection; the answer's status and count. */
static ote_status_t file_io(const ote_ctl_file_io_t *m, size_t *count_p)
{
    ote_buf_t out = {0};
    uint8_t *p    = NULL;
    uint32_t plen = 0;
    ote_status_t st = OTE_ERR_IO;
    size_t count    = 0;

    assert_int_equal(ote_ctl_file_io_encode(m, &out), OTE_OK);
    assert_int_equal(sw_ctl_request(ote_engine_name(fx.e_x), fx.auth, OTE_CTL_FILE_IO, 7,
                                    out.data, out.len, OTE_CTL_FILE_IO_ACK, &p, &plen, WAIT_MS),
                     0);
    free(out.data);
    assert_int_equal(ote_ctl_file_io_rails_ack_decode(p, plen, m->length, &st, &count), OTE_OK);
    free(p);
    if (count_p != NULL)
        *count_p = count;
    return st;
}

/* The control case: a READ lands byte for byte, and only where asked; a WRITE is written. */
static void test_good_lands(void **state)
{
    ote_ctl_file_io_t m = request(OTE_CTL_FILE_IO_READ, 4096, 8192, fx.rw + 100);
    size_t n = 0;

    (void)state;
    reset();
    assert_int_equal(file_io(&m, &n), OTE_OK);
    assert_int_equal(n, 8192);
    assert_int_equal(ote_test_check(fx.rw + 100, 4096, 8192, SEED_F), -1);
    assert_int_equal(ote_test_check(fx.rw, 0, 100, SEED_I), -1);
    assert_int_equal(ote_test_check(fx.rw + 100 + 8192, 100 + 8192, MEM - 100 - 8192, SEED_I),
                     -1);
    m = request(OTE_CTL_FILE_IO_WRITE, 0, 4096, fx.ro + 5);
    assert_int_equal(file_io(&m, &n), OTE_OK);
    assert_int_equal(n, 0);
    {
        uint8_t buf[4096];
        int fd = open(fx.path, O_RDONLY);

        assert_true(fd >= 0);
        assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
        close(fd);
        assert_int_equal(ote_test_check(buf, 5, sizeof(buf), SEED_I), -1);
    }
    reset();
}

/* I's memory without the access, or outside its regions: refused by I's checks. */
static void test_initiator_memory_refused(void **state)
{
    static const struct {
        uint8_t  op;
        size_t   at; /* offset from fx.rw */
        uint32_t len;
        ote_status_t want;
    } cases[] = {
        /* READ into memory I registered for remote read only. */
        {OTE_CTL_FILE_IO_READ, MEM + 4096, 4096, OTE_ERR_ACCESS},
        /* WRITE from memory I registered for remote write only. */
        {OTE_CTL_FILE_IO_WRITE, 2 * (MEM + 4096), 4096, OTE_ERR_ACCESS},
        /* Across the end of a region, and into the page after it. */
        {OTE_CTL_FILE_IO_READ, MEM - 100, 4096, OTE_ERR_OUT_OF_BOUNDS},
        {OTE_CTL_FILE_IO_READ, MEM, 4096, OTE_ERR_NOT_REGISTERED},
        {OTE_CTL_FILE_IO_WRITE, MEM + 10, 100, OTE_ERR_NOT_REGISTERED},
    };

    (void)state;
    reset();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ote_ctl_file_io_t m = request(cases[i].op, 0, cases[i].len, fx.rw + cases[i].at);
        size_t n = 1;
        ote_status_t st = file_io(&m, &n);

        if (st != cases[i].want)
            fail_msg("case %zu: %s, expected %s", i, ote_status_string(st),
                     ote_status_string(cases[i].want));
        assert_int_equal(n, 0);
        nothing_moved();
    }
}

/* Another instance than the one behind the name, another target, past the file: refused. */
static void test_identity_and_bounds_refused(void **state)
{
    ote_ctl_file_io_t m;
    size_t n = 1;

    (void)state;
    reset();
    m           = request(OTE_CTL_FILE_IO_READ, 0, 4096, fx.rw);
    m.initiator = fx.inst_i ^ 1;
    assert_int_equal(file_io(&m, &n), OTE_ERR_PEER_RESTARTED);
    assert_int_equal(n, 0);
    nothing_moved();
    m        = request(OTE_CTL_FILE_IO_READ, 0, 4096, fx.rw);
    m.target = fx.inst_x ^ 1;
    assert_int_equal(file_io(&m, NULL), OTE_ERR_NOT_FOUND);
    m = request(OTE_CTL_FILE_IO_READ, FILE_SIZE - 10, 4096, fx.rw);
    assert_int_equal(file_io(&m, NULL), OTE_ERR_OUT_OF_BOUNDS);
    m = request(OTE_CTL_FILE_IO_WRITE, FILE_SIZE, 1, fx.rw);
    assert_int_equal(file_io(&m, NULL), OTE_ERR_OUT_OF_BOUNDS);
    /* A name nobody serves. */
    m = request(OTE_CTL_FILE_IO_READ, 0, 4096, fx.rw);
    snprintf(m.name, sizeof(m.name), "127.0.0.1:1");
    assert_int_not_equal(file_io(&m, NULL), OTE_OK);
    nothing_moved();
}

/*
 * A local file's name (file:///...) or an export's as the sender: refused
 * before anything is opened. A READ by rails would otherwise write the
 * exported file's bytes into another file of X's host (a file segment X
 * opened carries X's own instance, so naming X as initiator passed).
 */
static void test_object_names_refused(void **state)
{
    char path[] = "/tmp/ote_fileio_victim.XXXXXX";
    ote_ctl_file_io_t m;
    int fd;

    (void)state;
    reset();
    fd = ote_test_victim_file(path);
    assert_true(fd >= 0);
    for (int i = 0; i < 2; i++) {
        m           = request(OTE_CTL_FILE_IO_READ, 0, 4096, NULL);
        m.initiator = fx.inst_x;
        if (i == 0)
            snprintf(m.name, sizeof(m.name), "file://%s", path);
        else
            snprintf(m.name, sizeof(m.name), "other@%s", ote_engine_name(fx.e_x));
        assert_int_equal(file_io(&m, NULL), OTE_ERR_INVALID_PARAM);
    }
    assert_true(ote_test_victim_intact(fd, path));
    nothing_moved();
}

/* Malformed requests by rails close the connection; nothing moves. */
static void test_malformed_closed(void **state)
{
    (void)state;
    reset();
    for (int k = 0; k < 5; k++) {
        ote_ctl_file_io_t m = request(OTE_CTL_FILE_IO_READ, 0, 4096, fx.rw);
        ote_buf_t out = {0};
        int fd = sw_connect_name(ote_engine_name(fx.e_x));
        size_t len;

        assert_true(fd >= 0);
        assert_int_equal(sw_ctl_authenticate(fd, fx.auth), OTE_OK);
        assert_int_equal(ote_ctl_file_io_encode(&m, &out), OTE_OK);
        len = out.len;
        if (k == 0)
            out.data[len - 2] = '\0'; /* a NUL inside the name */
        else if (k == 1)
            len--; /* the name one byte short */
        else if (k == 2)
            out.data[OTE_CTL_FILE_IO_HDR_LEN + 8] = 0; /* an empty name, bytes left over */
        else if (k == 3)
            memset(out.data + OTE_CTL_FILE_IO_HDR_LEN, 0xff, 8); /* the local range wraps */
        else
            out.data[0] = 5; /* no such op */
        assert_int_equal(sw_ctl_send(fd, OTE_CTL_FILE_IO, 3, out.data, len), 0);
        free(out.data);
        if (!sw_closed(fd, WAIT_MS, NULL))
            fail_msg("malformed FILE_IO %d: the connection stayed open", k);
        close(fd);
    }
    nothing_moved();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_lands),
        cmocka_unit_test(test_initiator_memory_refused),
        cmocka_unit_test(test_identity_and_bounds_refused),
        cmocka_unit_test(test_object_names_refused),
        cmocka_unit_test(test_malformed_closed),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
