/*
 * File segments: an engine reads and writes local files through io_uring.
 * Every transfer is checked byte for byte against the file (pread) or
 * against a pattern; errors end tasks with their documented statuses.
 */
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ote/ote.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define WAIT_MS 20000

static char dir[4096];

/* A file of len bytes with the pattern of seed; its segment name in name. */
static void make_file(const char *leaf, size_t len, uint64_t seed, char *path, size_t plen,
                      char *name, size_t nlen)
{
    snprintf(path, plen, "%s/%s", dir, leaf);
    assert_int_equal(ote_test_write_file(path, len, seed), 0);
    snprintf(name, nlen, "file://%s", path);
}

static ote_engine_h engine(const char *direct, const char *workers)
{
    ote_engine_h e;

    ote_test_setenv_or_unset("OTE_FILE_DIRECT", direct);
    setenv("OTE_NUM_WORKERS", workers ? workers : "2", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_FILE_DIRECT");
    unsetenv("OTE_NUM_WORKERS");
    return e;
}

/* Submit one request and wait for it; its final status. */
static ote_task_status_t xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                              uint64_t off, size_t len)
{
    ote_task_status_t st;

    assert_int_equal(ote_test_xfer(e, seg, op, local, off, len, WAIT_MS, &st), OTE_OK);
    return st;
}

static void expect_ok(ote_task_status_t st, size_t len)
{
    if (st.state != OTE_TASK_COMPLETED)
        fprintf(stderr, "task ended %d: %s\n", st.state, ote_status_string(st.error));
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(st.transferred, len);
}

/* A test file, its segment open on an engine, and local memory. */
typedef struct {
    char          path[4200], name[4300];
    ote_engine_h  e;
    ote_segment_h seg;
    uint8_t      *buf;
    ote_mem_h     m;
} file_fx_t;

/* The file made as make_file does. */
static void fx_make(file_fx_t *f, const char *leaf, size_t len, uint64_t seed)
{
    make_file(leaf, len, seed, f->path, sizeof(f->path), f->name, sizeof(f->name));
}

/* An empty file of len bytes (a hole), left open: its descriptor. */
static int fx_make_sparse(file_fx_t *f, const char *leaf, size_t len)
{
    int fd;

    snprintf(f->path, sizeof(f->path), "%s/%s", dir, leaf);
    snprintf(f->name, sizeof(f->name), "file://%s", f->path);
    fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    return fd;
}

/* With the file made: blen bytes of local memory on e, the file's segment open. */
static void fx_start(file_fx_t *f, ote_engine_h e, size_t blen)
{
    f->e = e;
    assert_int_equal(ote_mem_alloc(e, blen, NULL, 0, (void **)&f->buf, &f->m), OTE_OK);
    assert_int_equal(ote_segment_open(e, f->name, &f->seg), OTE_OK);
}

/* The segment closes cleanly, the memory and the engine go, and the file. */
static void fx_end(file_fx_t *f)
{
    assert_int_equal(ote_segment_close(f->seg), OTE_OK);
    assert_int_equal(ote_mem_free(f->e, f->m), OTE_OK);
    ote_engine_destroy(f->e);
    unlink(f->path); /* gone already where the test unlinked it */
}

/* n READs of req bytes each, request k from offset k * req into f->buf + k * req. */
static void fx_reads(file_fx_t *f, ote_xfer_req_t *r, size_t n, size_t req)
{
    for (size_t k = 0; k < n; k++)
        r[k] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = f->buf + k * req,
                                .segment = f->seg, .remote_addr = k * req, .length = req};
}

static void file_read(const char *path, void *buf, size_t len, off_t off)
{
    int fd = open(path, O_RDONLY);

    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, len, off), (ssize_t)len);
    close(fd);
}

/* Whether this directory's file system takes O_DIRECT. */
static bool direct_supported(void)
{
    char path[4200];
    int fd;

    snprintf(path, sizeof(path), "%s/direct-probe", dir);
    fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
    if (fd >= 0)
        close(fd);
    unlink(path);
    return fd >= 0;
}

/* How many fds of this process open path with O_DIRECT, and in all. */
static void count_fds(const char *path, int *direct_p, int *all_p)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;

    *direct_p = *all_p = 0;
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char link[300], target[4200], info[300], line[128];
        ssize_t n;
        FILE *fi;

        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strcmp(target, path) != 0)
            continue;
        (*all_p)++;
        snprintf(info, sizeof(info), "/proc/self/fdinfo/%s", de->d_name);
        fi = fopen(info, "r");
        while (fi != NULL && fgets(line, sizeof(line), fi) != NULL) {
            unsigned long flags;

            if (sscanf(line, "flags: %lo", &flags) == 1 && (flags & O_DIRECT))
                (*direct_p)++;
        }
        if (fi)
            fclose(fi);
    }
    closedir(d);
}

/*
 * Aligned and unaligned READs and WRITEs with one O_DIRECT policy; the
 * file is compared with a model after each write.
 */
static void rw_pattern(const char *direct)
{
    const size_t flen = 4u << 20;
    uint8_t *model = malloc(flen), *check = malloc(flen);
    file_fx_t f;
    static const struct {
        uint64_t off;
        size_t   len;
        size_t   boff; /* offset in the buffer: alignment of memory */
    } cases[] = {
        {0, 1u << 20, 0},           /* aligned */
        {8192, 65536, 4096},        /* aligned, smaller */
        {4096, 12288, 1},           /* aligned file range, unaligned memory */
        {100, 5000, 0},             /* unaligned offset and length */
        {1u << 20, 1, 7},           /* one byte */
        {(4u << 20) - 777, 777, 3}, /* up to the end of the file */
        {12345, (1u << 20) + 3, 4095},
    };
    int ndirect, nall;

    fx_make(&f, "rw.dat", flen, 11);
    ote_test_fill(model, 0, flen, 11);
    fx_start(&f, engine(direct, NULL), 4u << 20);
    count_fds(f.path, &ndirect, &nall);
    if (direct != NULL && strcmp(direct, "n") == 0)
        assert_int_equal(ndirect, 0);
    else
        assert_int_equal(ndirect, 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t off = cases[i].off;
        size_t len   = cases[i].len;
        uint8_t *loc = f.buf + cases[i].boff;

        /* READ: the file's bytes land in memory. */
        memset(f.buf, 0xee, 4u << 20);
        expect_ok(xfer(f.e, f.seg, OTE_OP_READ, loc, off, len), len);
        assert_memory_equal(loc, model + off, len);
        assert_int_equal(f.buf[cases[i].boff + len], 0xee);
        /* WRITE: a new pattern lands in the file, nothing around it changes. */
        ote_test_fill(loc, off, len, 1000 + i);
        memcpy(model + off, loc, len);
        expect_ok(xfer(f.e, f.seg, OTE_OP_WRITE, loc, off, len), len);
        file_read(f.path, check, flen, 0);
        assert_memory_equal(check, model, flen);
    }
    fx_end(&f);
    free(model);
    free(check);
}

static void test_rw_auto(void **state)
{
    if (!direct_supported())
        printf("O_DIRECT not offered in %s: the auto case runs buffered\n", dir);
    rw_pattern(direct_supported() ? NULL : "n");
}

static void test_rw_buffered(void **state)
{
    rw_pattern("n");
}

/* OTE_FILE_DIRECT=y: aligned requests work with O_DIRECT, unaligned ones fail INVALID_PARAM. */
static void test_direct_on(void **state)
{
    ote_task_status_t st;
    file_fx_t f;

    if (!direct_supported()) {
        printf("skipped: O_DIRECT not offered in %s\n", dir);
        skip();
    }
    fx_make(&f, "direct.dat", 1u << 20, 5);
    fx_start(&f, engine("y", NULL), 1u << 20);
    expect_ok(xfer(f.e, f.seg, OTE_OP_READ, f.buf, 65536, 65536), 65536);
    assert_int_equal(ote_test_check(f.buf, 65536, 65536, 5), -1);
    st = xfer(f.e, f.seg, OTE_OP_READ, f.buf + 1, 65536, 4096);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_INVALID_PARAM);
    st = xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 100, 4096);
    assert_int_equal(st.error, OTE_ERR_INVALID_PARAM);
    st = xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 4096, 100);
    assert_int_equal(st.error, OTE_ERR_INVALID_PARAM);
    fx_end(&f);
}

/* A 64 MiB file through a 1 MiB buffer: many requests, written then read back. */
static void test_large_file(void **state)
{
    const size_t flen = 64u << 20, blen = 1u << 20, req = 64u << 10;
    uint8_t *check = malloc(blen);
    file_fx_t f;
    int fd = fx_make_sparse(&f, "large.dat", flen);

    fx_start(&f, engine(NULL, NULL), blen);
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t off = 0; off < flen; off += blen) {
            ote_xfer_req_t r[16];
            ote_task_status_t st[16];

            if (pass == 0)
                ote_test_fill(f.buf, off, blen, 77);
            else
                memset(f.buf, 0, blen);
            for (size_t k = 0; k < blen / req; k++)
                r[k] = (ote_xfer_req_t){.op = pass == 0 ? OTE_OP_WRITE : OTE_OP_READ,
                                        .local_addr = f.buf + k * req, .segment = f.seg,
                                        .remote_addr = off + k * req, .length = req};
            assert_int_equal(ote_test_batch_run(f.e, r, 16, WAIT_MS, st), OTE_OK);
            for (size_t k = 0; k < 16; k++)
                expect_ok(st[k], req);
            if (pass == 0) {
                assert_int_equal(pread(fd, check, blen, (off_t)off), (ssize_t)blen);
                assert_int_equal(ote_test_check(check, off, blen, 77), -1);
            } else {
                assert_int_equal(ote_test_check(f.buf, off, blen, 77), -1);
            }
        }
    }
    close(fd);
    fx_end(&f);
    free(check);
}

typedef struct {
    ote_engine_h  e;
    ote_segment_h seg;
    uint8_t      *buf;
    uint64_t      base;
    size_t        len;
    uint64_t      seed;
    int           failures;
} thr_t;

/* One thread: write its half in 32 KiB requests, read it back, check. */
static void *thread_rw(void *arg)
{
    thr_t *t = arg;
    const size_t req = 32u << 10;
    size_t n = t->len / req;

    for (int pass = 0; pass < 2; pass++) {
        ote_xfer_req_t *r = calloc(n, sizeof(*r));
        ote_batch_h b;
        size_t first;

        if (pass == 0)
            ote_test_fill(t->buf, t->base, t->len, t->seed);
        else
            memset(t->buf, 0, t->len);
        for (size_t k = 0; k < n; k++)
            r[k] = (ote_xfer_req_t){.op = pass == 0 ? OTE_OP_WRITE : OTE_OP_READ,
                                    .local_addr = t->buf + k * req, .segment = t->seg,
                                    .remote_addr = t->base + k * req, .length = req};
        if (ote_batch_create(t->e, n, &b) != OTE_OK ||
            ote_batch_submit(b, r, n, &first) != OTE_OK || ote_batch_wait(b, WAIT_MS) != OTE_OK)
            t->failures++;
        for (size_t k = 0; k < n; k++) {
            ote_task_status_t st;

            if (ote_batch_task_status(b, first + k, &st) != OTE_OK ||
                st.state != OTE_TASK_COMPLETED)
                t->failures++;
        }
        ote_batch_release(b);
        free(r);
    }
    if (ote_test_check(t->buf, t->base, t->len, t->seed) != -1)
        t->failures++;
    return NULL;
}

static void test_two_threads(void **state)
{
    const size_t half = 8u << 20;
    char path[4200], name[4300];
    ote_engine_h e = engine(NULL, NULL);
    ote_segment_h seg;
    thr_t t[2];
    pthread_t th[2];
    uint8_t *check = malloc(2 * half);
    ote_mem_h m[2];

    make_file("threads.dat", 2 * half, 3, path, sizeof(path), name, sizeof(name));
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_OK);
    for (int i = 0; i < 2; i++) {
        t[i] = (thr_t){.e = e, .seg = seg, .base = i * half, .len = half, .seed = 40 + i};
        assert_int_equal(ote_mem_alloc(e, half, NULL, 0, (void **)&t[i].buf, &m[i]), OTE_OK);
        assert_int_equal(pthread_create(&th[i], NULL, thread_rw, &t[i]), 0);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(t[i].failures, 0);
    }
    file_read(path, check, 2 * half, 0);
    assert_int_equal(ote_test_check(check, 0, half, 40), -1);
    assert_int_equal(ote_test_check(check + half, half, half, 41), -1);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(ote_mem_free(e, m[i]), OTE_OK);
    ote_engine_destroy(e);
    unlink(path);
    free(check);
}

/*
 * Cancel everything right after submitting: each task ends CANCELED or
 * COMPLETED (with its data), and none hangs.
 */
static void test_cancel(void **state)
{
    const size_t n = 256, req = 256u << 10, flen = n * req;
    ote_xfer_req_t *r = calloc(n, sizeof(*r));
    ote_engine_h e;
    file_fx_t f;
    ote_batch_h b;
    size_t first, canceled = 0, completed = 0;

    /* One request in the ring at a time: the others wait where a cancel reaches them. */
    setenv("OTE_URING_QD", "1", 1);
    e = engine(NULL, "1");
    unsetenv("OTE_URING_QD");

    fx_make(&f, "cancel.dat", flen, 9);
    fx_start(&f, e, flen);
    memset(f.buf, 0, flen);
    fx_reads(&f, r, n, req);
    assert_int_equal(ote_batch_create(f.e, n, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, n, &first), OTE_OK);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(ote_batch_cancel(b, first + k), OTE_OK);
    assert_int_equal(ote_batch_wait(b, WAIT_MS), OTE_OK);
    for (size_t k = 0; k < n; k++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + k, &st), OTE_OK);
        assert_true(st.state == OTE_TASK_COMPLETED || st.state == OTE_TASK_CANCELED);
        if (st.state == OTE_TASK_COMPLETED) {
            completed++;
            assert_int_equal(ote_test_check(f.buf + k * req, k * req, req, 9), -1);
        } else {
            canceled++;
            assert_int_equal(st.error, OTE_ERR_CANCELED);
            assert_true(st.transferred < req);
        }
    }
    printf("cancel: %zu completed, %zu canceled\n", completed, canceled);
    ote_batch_release(b);
    /* Closing the segment with tasks in flight: they end, nothing hangs. */
    assert_int_equal(ote_batch_create(f.e, n, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, n, &first), OTE_OK);
    assert_int_equal(ote_segment_close(f.seg), OTE_OK);
    assert_int_equal(ote_batch_wait(b, WAIT_MS), OTE_OK);
    for (size_t k = 0; k < n; k++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + k, &st), OTE_OK);
        assert_true(st.state == OTE_TASK_COMPLETED || st.state == OTE_TASK_CANCELED);
    }
    ote_batch_release(b);
    assert_int_equal(ote_mem_free(f.e, f.m), OTE_OK);
    ote_engine_destroy(f.e);
    unlink(f.path);
    free(r);
}

/* The checks of a read-only file, in a process that may not write it. */
static int read_only_child(const char *path, const char *name)
{
    ote_engine_h e = engine(NULL, "1");
    ote_segment_h seg;
    ote_region_info_t ri;
    ote_task_status_t st;
    size_t count;
    uint8_t *buf;
    ote_mem_h m;

    if (ote_mem_alloc(e, 65536, NULL, 0, (void **)&buf, &m) != OTE_OK ||
        ote_segment_open(e, name, &seg) != OTE_OK)
        return 2;
    if (ote_segment_regions(seg, &ri, 1, &count) != OTE_OK || count != 1 || ri.addr != 0 ||
        ri.length != 65536 || ri.access != OTE_ACCESS_REMOTE_READ)
        return 3;
    st = xfer(e, seg, OTE_OP_WRITE, buf, 0, 4096);
    if (st.state != OTE_TASK_FAILED || st.error != OTE_ERR_ACCESS)
        return 4;
    st = xfer(e, seg, OTE_OP_READ, buf, 100, 60000);
    if (st.state != OTE_TASK_COMPLETED || ote_test_check(buf, 100, 60000, 21) != -1)
        return 5;
    ote_segment_close(seg);
    ote_mem_free(e, m);
    ote_engine_destroy(e);
    return 0;
}

static void test_read_only(void **state)
{
    char path[4200], name[4300], rodir[64] = "/tmp/file-ro.XXXXXX";
    pid_t pid;
    int ws;

    /*
     * root writes any file: the child gives that up first, so the file lies
     * where every user can reach it (the build tree's parents may not let
     * others through).
     */
    assert_non_null(mkdtemp(rodir));
    assert_int_equal(chmod(rodir, 0755), 0);
    snprintf(path, sizeof(path), "%s/ro.dat", rodir);
    snprintf(name, sizeof(name), "file://%s", path);
    assert_int_equal(ote_test_write_file(path, 65536, 21), 0);
    assert_int_equal(chmod(path, 0444), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(10);
        _exit(read_only_child(path, name));
    }
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
    unlink(path);
    rmdir(rodir);
}

/* WRITEs past RLIMIT_FSIZE fail EFBIG, as on a full file system: IO. */
static void test_file_size_limit(void **state)
{
    ote_task_status_t st;
    struct rlimit old, lim = {.rlim_cur = 1u << 20};
    file_fx_t f;

    close(fx_make_sparse(&f, "fsize.dat", 4u << 20));
    fx_start(&f, engine(NULL, "1"), 1u << 20);
    ote_test_fill(f.buf, 0, 1u << 20, 2);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    st = xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 2u << 20, 1u << 20);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_IO);
    assert_int_equal(st.transferred, 0);
    /* Under the limit again: the same WRITE lands. */
    expect_ok(xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 2u << 20, 1u << 20), 1u << 20);
    fx_end(&f);
}

/* A file unlinked after the open stays usable: the segment holds the inode. */
static void test_deleted_while_open(void **state)
{
    file_fx_t f;

    fx_make(&f, "deleted.dat", 1u << 20, 31);
    fx_start(&f, engine(NULL, NULL), 1u << 20);
    assert_int_equal(unlink(f.path), 0);
    expect_ok(xfer(f.e, f.seg, OTE_OP_READ, f.buf, 0, 1u << 20), 1u << 20);
    assert_int_equal(ote_test_check(f.buf, 0, 1u << 20, 31), -1);
    ote_test_fill(f.buf, 0, 1u << 20, 32);
    expect_ok(xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 0, 1u << 20), 1u << 20);
    memset(f.buf, 0, 1u << 20);
    expect_ok(xfer(f.e, f.seg, OTE_OP_READ, f.buf + 5, 3, 500000), 500000);
    assert_int_equal(ote_test_check(f.buf + 5, 3, 500000, 32), -1);
    fx_end(&f);
}

/* READ past the end: OUT_OF_BOUNDS, transferred = the bytes the file had. */
static void eof_case(const char *direct)
{
    ote_task_status_t st;
    file_fx_t f;

    fx_make(&f, "eof.dat", 10000, 17);
    fx_start(&f, engine(direct, NULL), 65536);
    memset(f.buf, 0, 65536);
    st = xfer(f.e, f.seg, OTE_OP_READ, f.buf, 0, 16384);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(st.transferred, 10000);
    assert_int_equal(ote_test_check(f.buf, 0, 10000, 17), -1);
    st = xfer(f.e, f.seg, OTE_OP_READ, f.buf + 1, 9000, 2000);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(st.transferred, 1000);
    assert_int_equal(ote_test_check(f.buf + 1, 9000, 1000, 17), -1);
    st = xfer(f.e, f.seg, OTE_OP_READ, f.buf, 20000, 4096);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(st.transferred, 0);
    /* WRITEs stay inside the region: the file's size at open (or refresh). */
    st = xfer(f.e, f.seg, OTE_OP_WRITE, f.buf, 8192, 4096);
    assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
    fx_end(&f);
}

static void test_read_past_eof(void **state)
{
    eof_case(NULL);
    eof_case("n");
}

typedef struct {
    const char *path;
    int         delay_us;
} trunc_arg_t;

static void *truncate_later(void *arg)
{
    trunc_arg_t *a = arg;

    usleep((useconds_t)a->delay_us);
    if (truncate(a->path, 0) != 0)
        abort();
    return NULL;
}

/* A file truncated under many READs: every task ends, none crashes. */
static void test_truncated_under_transfer(void **state)
{
    const size_t n = 128, req = 128u << 10;
    ote_xfer_req_t *r = calloc(n, sizeof(*r));
    file_fx_t f;
    trunc_arg_t a = {.path = f.path, .delay_us = 200};
    pthread_t th;
    ote_batch_h b;
    size_t first, short_reads = 0;

    fx_make(&f, "trunc.dat", n * req, 13);
    fx_start(&f, engine(NULL, NULL), n * req);
    fx_reads(&f, r, n, req);
    assert_int_equal(ote_batch_create(f.e, n, &b), OTE_OK);
    assert_int_equal(pthread_create(&th, NULL, truncate_later, &a), 0);
    assert_int_equal(ote_batch_submit(b, r, n, &first), OTE_OK);
    pthread_join(th, NULL);
    assert_int_equal(ote_batch_wait(b, WAIT_MS), OTE_OK);
    for (size_t k = 0; k < n; k++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + k, &st), OTE_OK);
        if (st.state == OTE_TASK_COMPLETED) {
            assert_int_equal(ote_test_check(f.buf + k * req, k * req, req, 13), -1);
        } else {
            assert_int_equal(st.state, OTE_TASK_FAILED);
            assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
            assert_true(st.transferred < req);
            short_reads++;
        }
    }
    ote_batch_release(b);
    /* After the truncate every READ meets the end at once. */
    {
        ote_task_status_t st = xfer(f.e, f.seg, OTE_OP_READ, f.buf, 0, 4096);

        assert_int_equal(st.error, OTE_ERR_OUT_OF_BOUNDS);
        assert_int_equal(st.transferred, 0);
    }
    printf("truncate: %zu of %zu READs met the end\n", short_reads, n);
    fx_end(&f);
    free(r);
}

/* Names: what does not exist, relative paths, directories; notifications. */
static void test_names_and_unsupported(void **state)
{
    char path[4200], name[4300], dname[4300];
    ote_engine_h e = engine(NULL, "1");
    ote_segment_h seg;
    ote_region_info_t ri;
    ote_xfer_req_t r;
    size_t count, first;
    ote_batch_h b;
    uint8_t *buf;
    ote_mem_h m;

    snprintf(name, sizeof(name), "file://%s/no-such-file", dir);
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_segment_open(e, "file://relative/path", &seg), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_segment_open(e, "file:relative", &seg), OTE_ERR_INVALID_PARAM);
    snprintf(dname, sizeof(dname), "file://%s", dir);
    assert_int_equal(ote_segment_open(e, dname, &seg), OTE_ERR_INVALID_PARAM);
    /* A FIFO is refused, not waited on for a writer (read-only to its opener or not). */
    snprintf(path, sizeof(path), "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0444), 0);
    snprintf(dname, sizeof(dname), "file://%s", path);
    assert_int_equal(ote_segment_open(e, dname, &seg), OTE_ERR_INVALID_PARAM);
    unlink(path);

    make_file("names.dat", 12345, 1, path, sizeof(path), name, sizeof(name));
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_OK);
    assert_int_equal(ote_segment_regions(seg, &ri, 1, &count), OTE_OK);
    assert_int_equal(count, 1);
    assert_int_equal(ri.addr, 0);
    assert_int_equal(ri.length, 12345);
    assert_int_equal(ri.access, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE);
    assert_string_equal(ri.location, "file");
    /* A refresh takes the file's size now. */
    assert_int_equal(truncate(path, 20000), 0);
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    assert_int_equal(ote_segment_regions(seg, &ri, 1, &count), OTE_OK);
    assert_int_equal(ri.length, 20000);
    assert_int_equal(ote_mem_alloc(e, 8192, NULL, 0, (void **)&buf, &m), OTE_OK);
    ote_test_fill(buf, 0, 8192, 4);
    expect_ok(xfer(e, seg, OTE_OP_WRITE, buf, 20000 - 8192, 8192), 8192);
    /* Notifications need a peer. */
    assert_int_equal(ote_notify_send(e, seg, "x", 1), OTE_ERR_UNSUPPORTED);
    r = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = buf, .segment = seg,
                         .remote_addr = 0, .length = 100};
    assert_int_equal(ote_batch_create(e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit_notify(b, &r, 1, "x", 1, &first), OTE_ERR_UNSUPPORTED);
    ote_batch_release(b);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_free(e, m), OTE_OK);
    ote_engine_destroy(e);
    unlink(path);
}

/*
 * A task whose I/O never completes ends OTE_ERR_TIMEOUT after
 * OTE_XFER_TIMEOUT_MS: the segment's fd is replaced by an empty FIFO (a
 * device that never answers), so the READ waits in the ring until the
 * timeout cancels it; one queued behind it (OTE_URING_QD=1) ends too, and
 * the ring serves other files afterwards.
 */
static void test_timeout(void **state)
{
    char path[4200], name[4300], path2[4200], name2[4300], fifo[4200];
    ote_xfer_req_t r[2];
    ote_task_status_t st[2];
    ote_engine_h e;
    ote_segment_h seg, seg2;
    ote_mem_h m;
    uint8_t *buf;
    size_t swapped = 0;
    int pfd;
    DIR *d;
    struct dirent *de;

    make_file("timeout.dat", 65536, 3, path, sizeof(path), name, sizeof(name));
    make_file("timeout2.dat", 65536, 4, path2, sizeof(path2), name2, sizeof(name2));
    snprintf(fifo, sizeof(fifo), "%s/timeout.fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* Read-write and non-blocking: the open does not wait, and reads never see an end. */
    pfd = open(fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    assert_true(pfd >= 0);
    setenv("OTE_XFER_TIMEOUT_MS", "300", 1);
    setenv("OTE_URING_QD", "1", 1);
    e = engine("n", "1");
    unsetenv("OTE_XFER_TIMEOUT_MS");
    unsetenv("OTE_URING_QD");
    assert_int_equal(ote_mem_alloc(e, 65536, NULL, 0, (void **)&buf, &m), OTE_OK);
    memset(buf, 0, 65536);
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_OK);
    d = opendir("/proc/self/fd");
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        char link[300], target[4200];
        ssize_t n;

        snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0)
            continue;
        target[n] = 0;
        if (strcmp(target, path) == 0) {
            assert_true(dup2(pfd, atoi(de->d_name)) >= 0);
            swapped++;
        }
    }
    closedir(d);
    assert_int_equal(swapped, 1); /* OTE_FILE_DIRECT=n: one fd */
    r[0] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = buf, .segment = seg,
                            .remote_addr = 0, .length = 4096};
    r[1] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = buf + 4096, .segment = seg,
                            .remote_addr = 4096, .length = 4096};
    assert_int_equal(ote_test_batch_run(e, r, 2, WAIT_MS, st), OTE_OK);
    for (size_t k = 0; k < 2; k++) {
        assert_int_equal(st[k].state, OTE_TASK_TIMEOUT);
        assert_int_equal(st[k].error, OTE_ERR_TIMEOUT);
        assert_int_equal(st[k].transferred, 0);
    }
    /* The ring goes on serving: another file on the same worker. */
    assert_int_equal(ote_segment_open(e, name2, &seg2), OTE_OK);
    expect_ok(xfer(e, seg2, OTE_OP_READ, buf, 0, 65536), 65536);
    assert_int_equal(ote_test_check(buf, 0, 65536, 4), -1);
    assert_int_equal(ote_segment_close(seg2), OTE_OK);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_free(e, m), OTE_OK);
    ote_engine_destroy(e);
    close(pfd);
    unlink(fifo);
    unlink(path);
    unlink(path2);
}

/* OTE_TLS: "file" alone carries file segments; a list without it leaves them out. */
static void test_tls_selection(void **state)
{
    char path[4200], name[4300];
    ote_engine_h e;
    ote_segment_h seg;

    make_file("tls.dat", 4096, 1, path, sizeof(path), name, sizeof(name));
    setenv("OTE_TLS", "file", 1);
    e = engine(NULL, "1");
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_OK);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    ote_engine_destroy(e);
    setenv("OTE_TLS", "^file", 1);
    e = engine(NULL, "1");
    assert_int_equal(ote_segment_open(e, name, &seg), OTE_ERR_UNREACHABLE);
    ote_engine_destroy(e);
    unsetenv("OTE_TLS");
    unlink(path);
}

int main(void)
{
    const char *base = getenv("ORBITTE_TEST_BUILDDIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rw_auto),
        cmocka_unit_test(test_rw_buffered),
        cmocka_unit_test(test_direct_on),
        cmocka_unit_test(test_large_file),
        cmocka_unit_test(test_two_threads),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_read_only),
        cmocka_unit_test(test_file_size_limit),
        cmocka_unit_test(test_deleted_while_open),
        cmocka_unit_test(test_read_past_eof),
        cmocka_unit_test(test_truncated_under_transfer),
        cmocka_unit_test(test_names_and_unsupported),
        cmocka_unit_test(test_tls_selection),
        cmocka_unit_test(test_timeout),
    };
    int rc;

    /* On the build's disk (which usually takes O_DIRECT), not on a tmpfs. */
    snprintf(dir, sizeof(dir), "%s/file-test.XXXXXX", base ? base : ".");
    if (mkdtemp(dir) == NULL || chmod(dir, 0755) != 0) {
        perror("mkdtemp");
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(dir);
    return rc;
}
