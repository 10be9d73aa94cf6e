/*
 * GPU memory to and from file segments, on the CUDA test double and the
 * cuFile test double (test/unit/cuda/cufile_double.c): direct through
 * cuFile where it loads, its driver opens and the file takes O_DIRECT;
 * staged through pinned host chunks where cuFile is missing, its driver
 * does not open, or OTE_FILE_GDS=n; OTE_FILE_GDS=y refuses to stage.
 * The call counts of the doubles and the staging statistics say which
 * path moved the bytes; every byte is checked against the file.
 *
 * cuFile is loaded once per process, so each case runs in a child.
 */
#include "../cuda/cuda_test.h"
#include "proto/stage.h"
#include "testlib.h"
#include "uct_ext/file/file.h"

#include <fcntl.h>
#include <ote/ote.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_LEN (1u << 20)
#define WAIT_MS  20000

#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);   \
            fflush(stdout);                                                         \
            _exit(1);                                                               \
        }                                                                           \
    } while (0)

typedef struct {
    long driver_opens, handles, bufs, buf_registers, reads, writes, bytes;
} cufile_stats_t;

static char dir[4096];

static const char *cufile_double_path(void)
{
    static char path[4096];
    const char *b = getenv("ORBITTE_TEST_BUILDDIR");

    snprintf(path, sizeof(path), "%s/unit/cuda/.libs/libote_cufile_double.so", b ? b : ".");
    return path;
}

static void cufile_stats(cufile_stats_t *st)
{
    void *h = dlopen(cufile_double_path(), RTLD_NOW | RTLD_LOCAL);
    void (*f)(cufile_stats_t *);

    CHECK(h != NULL);
    f = (void (*)(cufile_stats_t *))dlsym(h, "ote_cufile_double_stats");
    CHECK(f != NULL);
    f(st);
}

/* The file with the pattern of seed 1; its segment name. */
static void make_file(const char *leaf, char *path, size_t plen, char *name, size_t nlen)
{
    uint8_t *buf = malloc(FILE_LEN);
    int fd;

    CHECK(buf != NULL);
    snprintf(path, plen, "%s/%s", dir, leaf);
    ote_test_fill(buf, 0, FILE_LEN, 1);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, buf, FILE_LEN) == (ssize_t)FILE_LEN);
    close(fd);
    free(buf);
    snprintf(name, nlen, "file://%s", path);
}

static void xfer_ok(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local, uint64_t off,
                    size_t len)
{
    ote_task_status_t st;

    CHECK(ote_test_xfer(e, seg, op, local, off, len, WAIT_MS, &st) == OTE_OK);
    if (st.state != OTE_TASK_COMPLETED)
        fprintf(stderr, "task ended %s\n", ote_status_string(st.error));
    CHECK(st.state == OTE_TASK_COMPLETED);
    CHECK(st.transferred == len);
}

/*
 * WRITEs from GPU memory (aligned and not) and READs into it (aligned and
 * not); the file and the GPU memory are compared with a model.
 */
static void gpu_file_rw(ote_engine_h e, const char *path, const char *name)
{
    uint8_t *model = malloc(FILE_LEN), *got = malloc(FILE_LEN), *gpu;
    ote_segment_h seg;
    ote_mem_h m;
    int fd;

    CHECK(model != NULL && got != NULL);
    ote_test_fill(model, 0, FILE_LEN, 1);
    CHECK(ote_mem_alloc(e, FILE_LEN, "cuda:0", 0, (void **)&gpu, &m) == OTE_OK);
    CHECK(ote_segment_open(e, name, &seg) == OTE_OK);
    /* The double's device memory is host memory: the test fills it directly. */
    ote_test_fill(gpu, 0, FILE_LEN, 7);
    xfer_ok(e, seg, OTE_OP_WRITE, gpu, 0, 256u << 10);
    memcpy(model, gpu, 256u << 10);
    xfer_ok(e, seg, OTE_OP_WRITE, gpu + 300001, 300001, 1000);
    memcpy(model + 300001, gpu + 300001, 1000);
    xfer_ok(e, seg, OTE_OP_WRITE, gpu + 5, 700000, 70000);
    memcpy(model + 700000, gpu + 5, 70000);
    fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(pread(fd, got, FILE_LEN, 0) == (ssize_t)FILE_LEN);
    close(fd);
    CHECK(memcmp(got, model, FILE_LEN) == 0);
    memset(gpu, 0, FILE_LEN);
    xfer_ok(e, seg, OTE_OP_READ, gpu, 0, FILE_LEN);
    CHECK(memcmp(gpu, model, FILE_LEN) == 0);
    memset(gpu, 0, FILE_LEN);
    xfer_ok(e, seg, OTE_OP_READ, gpu + 7, 12345, 5000);
    CHECK(memcmp(gpu + 7, model + 12345, 5000) == 0);
    CHECK(ote_segment_close(seg) == OTE_OK);
    CHECK(ote_mem_free(e, m) == OTE_OK);
    free(model);
    free(got);
}

typedef enum { WANT_DIRECT, WANT_STAGED } want_t;

/* One case in this (child) process: env already set. */
static void run_case(const char *leaf, want_t want, const char *why_has)
{
    ote_file_config_t cfg;
    ote_proto_stage_stats_t s0, s1;
    cufile_stats_t c0, c1;
    char path[4200], name[4300];
    const char *why;
    ote_engine_h e;

    cuda_test_use_double(1);
    setenv("OTE_NUM_WORKERS", "1", 1);
    e = ote_test_engine("127.0.0.1:0");
    CHECK(e != NULL);
    CHECK(ote_config_fill(&ote_file_config_table, &cfg) == OTE_OK);
    (void)ote_file_gds_load(&cfg, &why);
    ote_config_release(&ote_file_config_table, &cfg);
    printf("%s: %s\n", leaf, why);
    CHECK(strstr(why, why_has) != NULL);
    make_file(leaf, path, sizeof(path), name, sizeof(name));
    ote_proto_stage_stats(&s0);
    memset(&c0, 0, sizeof(c0));
    cufile_stats(&c0);
    gpu_file_rw(e, path, name);
    ote_proto_stage_stats(&s1);
    cufile_stats(&c1);
    printf("%s: stage chunks %lu, cuFile reads %ld writes %ld buffers registered %ld\n", leaf,
           s1.chunks - s0.chunks, c1.reads - c0.reads, c1.writes - c0.writes,
           c1.buf_registers - c0.buf_registers);
    if (want == WANT_DIRECT) {
        CHECK(s1.chunks == s0.chunks);
        CHECK(c1.reads > c0.reads && c1.writes > c0.writes);
        CHECK(c1.buf_registers > c0.buf_registers);
    } else {
        CHECK(s1.chunks > s0.chunks);
        CHECK(c1.reads == c0.reads && c1.writes == c0.writes);
    }
    ote_engine_destroy(e);
    cufile_stats(&c1);
    /* Every handle and buffer registration released. */
    CHECK(c1.handles == 0 && c1.bufs == 0);
    unlink(path);
}

/* OTE_FILE_GDS=y where cuFile cannot serve the file: the open fails, nothing is staged. */
static void run_refused(const char *leaf)
{
    char path[4200], name[4300];
    ote_segment_h seg;
    ote_engine_h e;

    cuda_test_use_double(1);
    e = ote_test_engine("127.0.0.1:0");
    CHECK(e != NULL);
    make_file(leaf, path, sizeof(path), name, sizeof(name));
    CHECK(ote_segment_open(e, name, &seg) == OTE_ERR_UNSUPPORTED);
    ote_engine_destroy(e);
    unlink(path);
}

/*
 * cuFile calls that outlive OTE_XFER_TIMEOUT_MS: the one running ends when
 * its call returns (whole here, so COMPLETED: a call is never abandoned
 * while it may still write the memory), the one waiting behind it ends
 * OTE_ERR_TIMEOUT without reaching cuFile (OTE_RETRY_COUNT=0: not sent
 * again); the segment then closes cleanly.
 */
static void case_timeout(void)
{
    char path[4200], name[4300];
    ote_xfer_req_t r[2];
    cufile_stats_t c0, c1;
    ote_segment_h seg;
    ote_engine_h e;
    ote_batch_h b;
    ote_mem_h m;
    uint8_t *gpu;
    size_t first;

    cuda_test_use_double(1);
    setenv("OTE_NUM_WORKERS", "1", 1);
    e = ote_test_engine("127.0.0.1:0");
    CHECK(e != NULL);
    make_file("timeout.dat", path, sizeof(path), name, sizeof(name));
    CHECK(ote_mem_alloc(e, 8192, "cuda:0", 0, (void **)&gpu, &m) == OTE_OK);
    CHECK(ote_segment_open(e, name, &seg) == OTE_OK);
    cufile_stats(&c0);
    r[0] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = gpu, .segment = seg,
                            .remote_addr = 0, .length = 4096};
    r[1] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = gpu + 4096, .segment = seg,
                            .remote_addr = 4096, .length = 4096};
    CHECK(ote_batch_create(e, 2, &b) == OTE_OK);
    CHECK(ote_batch_submit(b, r, 2, &first) == OTE_OK);
    CHECK(ote_batch_wait(b, WAIT_MS) == OTE_OK);
    for (size_t k = 0; k < 2; k++) {
        ote_task_status_t st;

        CHECK(ote_batch_task_status(b, first + k, &st) == OTE_OK);
        printf("timeout: task %zu ended %s\n", k, ote_status_string(st.error));
        if (k == 0 && st.state == OTE_TASK_COMPLETED) {
            /* A running call is not stopped: it ended whole, after the deadline. */
            CHECK(ote_test_check(gpu, 0, 4096, 1) == -1);
            continue;
        }
        CHECK(st.state == OTE_TASK_TIMEOUT);
        CHECK(st.error == OTE_ERR_TIMEOUT);
    }
    ote_batch_release(b);
    cufile_stats(&c1);
    /* Only the first reached cuFile. */
    CHECK(c1.reads - c0.reads == 1);
    CHECK(ote_segment_close(seg) == OTE_OK);
    CHECK(ote_mem_free(e, m) == OTE_OK);
    ote_engine_destroy(e);
    cufile_stats(&c1);
    CHECK(c1.handles == 0 && c1.bufs == 0);
    unlink(path);
}

static int child(const char *what, const char *const *env, void (*body)(void))
{
    pid_t pid;
    int st;

    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        for (size_t i = 0; env[i] != NULL; i += 2)
            setenv(env[i], env[i + 1], 1);
        body();
        exit(0); /* the child made the engines: leak checkers look at its end */
    }
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("not ok - %s\n", what);
        return 1;
    }
    printf("ok - %s\n", what);
    return 0;
}

static void case_direct(void)
{
    run_case("direct.dat", WANT_DIRECT, "direct with cuFile");
}

static void case_not_found(void)
{
    run_case("notfound.dat", WANT_STAGED, "cuFile not found");
}

static void case_open_fails(void)
{
    run_case("openfail.dat", WANT_STAGED, "driver open failed");
}

static void case_gds_off(void)
{
    run_case("off.dat", WANT_STAGED, "OTE_FILE_GDS=n");
}

static void case_no_direct(void)
{
    /* cuFile loads, but the file is opened without O_DIRECT: staged. */
    run_case("nodirect.dat", WANT_STAGED, "direct with cuFile");
}

static void case_refused_missing(void)
{
    run_refused("refused1.dat");
}

static void case_refused_no_direct(void)
{
    run_refused("refused2.dat");
}

int main(void)
{
    const char *base = getenv("ORBITTE_TEST_BUILDDIR");
    const char *lib  = cufile_double_path();
    int fd, bad = 0;
    char probe[4200];

    snprintf(dir, sizeof(dir), "%s/file-gds.XXXXXX", base ? base : ".");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(probe, sizeof(probe), "%s/probe", dir);
    fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0644);
    unlink(probe);
    if (fd < 0) {
        /* cuFile needs O_DIRECT: only the staged cases can run here. */
        printf("# SKIP the direct cases: %s does not take O_DIRECT\n", dir);
    } else {
        close(fd);
        bad += child("GPU memory direct through cuFile",
                     (const char *const[]){"OTE_CUFILE_LIB", lib, NULL}, case_direct);
        bad += child("cuFile calls past OTE_XFER_TIMEOUT_MS: OTE_ERR_TIMEOUT",
                     (const char *const[]){"OTE_CUFILE_LIB", lib, "OTE_XFER_TIMEOUT_MS", "200",
                                           "OTE_RETRY_COUNT", "0",
                                           "ORBITTE_CUFILE_DOUBLE_DELAY_MS", "700", NULL},
                     case_timeout);
        bad += child("cuFile loaded, file without O_DIRECT: staged",
                     (const char *const[]){"OTE_CUFILE_LIB", lib, "OTE_FILE_DIRECT", "n", NULL},
                     case_no_direct);
        bad += child("OTE_FILE_GDS=y, file without O_DIRECT: open refused",
                     (const char *const[]){"OTE_CUFILE_LIB", lib, "OTE_FILE_DIRECT", "n",
                                           "OTE_FILE_GDS", "y", NULL},
                     case_refused_no_direct);
    }
    bad += child("cuFile not found: staged",
                 (const char *const[]){"OTE_CUFILE_LIB", "/nonexistent/libcufile.so.0", NULL},
                 case_not_found);
    bad += child("cuFile driver open fails: staged",
                 (const char *const[]){"OTE_CUFILE_LIB", lib, "ORBITTE_CUFILE_DOUBLE_OPEN_FAIL",
                                       "1", NULL},
                 case_open_fails);
    bad += child("OTE_FILE_GDS=n: staged",
                 (const char *const[]){"OTE_CUFILE_LIB", lib, "OTE_FILE_GDS", "n", NULL},
                 case_gds_off);
    bad += child("OTE_FILE_GDS=y, no cuFile: open refused",
                 (const char *const[]){"OTE_CUFILE_LIB", "/nonexistent/libcufile.so.0",
                                       "OTE_FILE_GDS", "y", NULL},
                 case_refused_missing);
    rmdir(dir);
    return bad ? 1 : 0;
}
