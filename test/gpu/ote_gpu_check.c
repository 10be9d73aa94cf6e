/*
 * GPU checks: correctness and GB/s of the cuda paths next to references
 * measured in the same run. Runs on a real GPU (test/gpu/run.sh) and, with
 * OTE_CUDA_LIB pointing at the CUDA test double, on any machine (make
 * check runs it that way, with small sizes; the numbers then mean nothing).
 *
 *   ote_gpu_check [-s BYTES] [-n ITERS] copy|ipc|staged|remote|file|all
 *
 * copy    cuda_copy in one process: pinned host -> GPU and GPU -> pinned host;
 *         reference: cudaMemcpyAsync of the same buffers on one stream.
 * ipc     cuda_ipc: GPU -> GPU of another process (ote_test_target with a
 *         GPU region); reference: device-to-device copy in one process.
 * staged  GPU -> TCP -> host of another process and back (local staging on
 *         this side); reference: host -> TCP -> host on loopback.
 * remote  GPU -> TCP -> GPU of another process and back: staging on both
 *         sides (local chunks here, the target's chunks by Pin/Delegate
 *         there); reference: host -> TCP -> host on loopback.
 * file    GPU -> file segment -> GPU (cuFile where it loads, else staged; the
 *         path is printed); reference: host -> the same file -> host. The
 *         file is made in ORBITTE_TEST_BUILDDIR (or the current directory).
 * Every transfer is verified byte for byte. One line per check:
 *   RESULT name bytes GB/s ref_name ref_GB/s ratio target ok|FAIL
 * Exit status 0 when every transfer was correct (ratios are reported, not
 * asserted: tests never assert on time).
 */
#include "testlib.h"
#include "base/cuda_api.h"
#ifdef HAVE_LIBURING
#include "uct_ext/file/file.h"
#endif

#include <fcntl.h>
#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t size  = 64u << 20;
static int    iters = 5;
static int    failures;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void result(const char *name, double gbs, const char *ref_name, double ref, double target,
                   bool ok)
{
    double ratio = ref > 0 ? gbs / ref : 0;

    printf("RESULT %-16s %12zu %8.2f %-22s %8.2f %6.2f %5.2f %s\n", name, size, gbs, ref_name,
           ref, ratio, target, ok ? "ok" : "FAIL");
    fflush(stdout);
    if (!ok)
        failures++;
}

/* Run one request iters times; GB/s, or -1 if any did not complete. */
static double timed_xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                         uint64_t remote, size_t len)
{
    ote_xfer_req_t r = {.op = op, .local_addr = local, .segment = seg, .remote_addr = remote,
                        .length = len};
    ote_batch_h b;
    double t0, t;
    size_t first;

    if (ote_batch_create(e, (size_t)iters, &b) != OTE_OK)
        return -1;
    t0 = now();
    for (int i = 0; i < iters; i++) {
        ote_task_status_t st;

        if (ote_batch_submit(b, &r, 1, &first) != OTE_OK || ote_batch_wait(b, 120000) != OTE_OK ||
            ote_batch_task_status(b, first, &st) != OTE_OK || st.state != OTE_TASK_COMPLETED) {
            fprintf(stderr, "ote_gpu_check: %s of %zu bytes did not complete\n",
                    op == OTE_OP_WRITE ? "WRITE" : "READ", len);
            ote_batch_release(b);
            return -1;
        }
    }
    t = now() - t0;
    ote_batch_release(b);
    return (double)len * iters / t / 1e9;
}

/* cudaMemcpyAsync on one stream, iters times, synchronised at the end. */
static double timed_memcpy(void *dst, const void *src, size_t len)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ote_cuda_stream_t s;
    double t0, t;

    if (a->stream_create(&s, OTE_CUDA_STREAM_NON_BLOCKING) != OTE_CUDA_SUCCESS)
        return -1;
    a->memcpy_async(dst, src, len, OTE_CUDA_MEMCPY_DEFAULT, s); /* warm up */
    a->stream_synchronize(s);
    t0 = now();
    for (int i = 0; i < iters; i++)
        a->memcpy_async(dst, src, len, OTE_CUDA_MEMCPY_DEFAULT, s);
    a->stream_synchronize(s);
    t = now() - t0;
    a->stream_destroy(s);
    return (double)len * iters / t / 1e9;
}

/* GPU buffer check through a host copy. */
static bool gpu_check(const void *gpu, size_t len, uint64_t seed)
{
    uint8_t *tmp = malloc(len);
    bool ok      = tmp != NULL && ote_test_cuda_copy(tmp, gpu, len) == 0 &&
              ote_test_check(tmp, 0, len, seed) == -1;

    free(tmp);
    return ok;
}

static bool gpu_fill(void *gpu, size_t len, uint64_t seed)
{
    uint8_t *tmp = malloc(len);
    bool ok;

    if (tmp == NULL)
        return false;
    ote_test_fill(tmp, 0, len, seed);
    ok = ote_test_cuda_copy(gpu, tmp, len) == 0;
    free(tmp);
    return ok;
}

static bool remote_cmd(ote_engine_h e, ote_segment_h seg, const char *cmd)
{
    char reply[128];

    return ote_test_target_cmd(e, seg, cmd, reply, sizeof(reply), 120000) == 0 &&
           strcmp(reply, "ok") == 0;
}

static void check_copy(void)
{
    ote_engine_h e = ote_test_engine("127.0.0.1:0");
    ote_segment_h self;
    void *host, *gpu;
    ote_mem_h mh, mg;
    double w, r, ref;
    bool ok;

    if (ote_mem_alloc(e, size, "cuda_host:0", OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                      &host, &mh) != OTE_OK ||
        ote_mem_alloc(e, size, "cuda:0", OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, &gpu,
                      &mg) != OTE_OK ||
        ote_segment_open(e, ote_engine_name(e), &self) != OTE_OK) {
        fprintf(stderr, "ote_gpu_check copy: setup failed\n");
        failures++;
        ote_engine_destroy(e);
        return;
    }
    ote_test_fill(host, 0, size, 1);
    w  = timed_xfer(e, self, OTE_OP_WRITE, host, (uintptr_t)gpu, size);
    ok = w > 0 && gpu_check(gpu, size, 1);
    ref = timed_memcpy(gpu, host, size);
    result("cuda_copy_h2d", w, "cudaMemcpyAsync_h2d", ref, 0.9, ok);
    gpu_fill(gpu, size, 2);
    memset(host, 0, size);
    r  = timed_xfer(e, self, OTE_OP_READ, host, (uintptr_t)gpu, size);
    ok = r > 0 && ote_test_check(host, 0, size, 2) == -1;
    ref = timed_memcpy(host, gpu, size);
    result("cuda_copy_d2h", r, "cudaMemcpyAsync_d2h", ref, 0.9, ok);
    ote_segment_close(self);
    ote_mem_free(e, mh);
    ote_mem_free(e, mg);
    ote_engine_destroy(e);
}

static void check_ipc(void)
{
    char region[64], cmd[128];
    const char *args[] = {"--region", region, NULL};
    ote_test_target_t t;
    ote_engine_h e;
    ote_segment_h seg;
    void *gpu, *gpu2;
    ote_mem_h mg, mg2;
    double w, r, ref;
    bool ok;

    snprintf(region, sizeof(region), "%zu:rw@cuda:0", size);
    if (ote_test_target_start(&t, NULL, args) != 0) {
        fprintf(stderr, "ote_gpu_check ipc: target did not start\n");
        failures++;
        return;
    }
    e = ote_test_engine("127.0.0.1:0");
    if (ote_mem_alloc(e, size, "cuda:0", 0, &gpu, &mg) != OTE_OK ||
        ote_mem_alloc(e, size, "cuda:0", 0, &gpu2, &mg2) != OTE_OK ||
        ote_segment_open(e, t.name, &seg) != OTE_OK) {
        fprintf(stderr, "ote_gpu_check ipc: setup failed\n");
        failures++;
        ote_test_target_stop(&t);
        ote_engine_destroy(e);
        return;
    }
    gpu_fill(gpu, size, 3);
    w = timed_xfer(e, seg, OTE_OP_WRITE, gpu, t.addr[0], size);
    snprintf(cmd, sizeof(cmd), "check 0 0 %zu 3", size);
    ok  = w > 0 && remote_cmd(e, seg, cmd);
    ref = timed_memcpy(gpu2, gpu, size);
    result("cuda_ipc_write", w, "cudaMemcpy_d2d", ref, 0.8, ok);
    snprintf(cmd, sizeof(cmd), "fill 0 0 %zu 4", size);
    ok = remote_cmd(e, seg, cmd);
    r  = timed_xfer(e, seg, OTE_OP_READ, gpu2, t.addr[0], size);
    ok = ok && r > 0 && gpu_check(gpu2, size, 4);
    result("cuda_ipc_read", r, "cudaMemcpy_d2d", ref, 0.8, ok);
    ote_segment_close(seg);
    ote_test_target_stop(&t);
    ote_mem_free(e, mg);
    ote_mem_free(e, mg2);
    ote_engine_destroy(e);
}

/*
 * A target started with OTE_TLS=target_tls and args, and an engine (tcp,
 * cuda_copy, cuda_stage) with size bytes of GPU and of host memory and the
 * target's segment open; false, counted as a failure, if not.
 */
typedef struct {
    ote_test_target_t t;
    ote_engine_h      e;
    ote_segment_h     seg;
    void             *gpu, *host;
    ote_mem_h         mg, mh;
} gpu_pair_t;

static bool gpu_pair_start(gpu_pair_t *p, const char *check, const char *target_tls,
                           const char *const *args)
{
    setenv("OTE_TLS", target_tls, 1);
    if (ote_test_target_start(&p->t, NULL, args) != 0) {
        fprintf(stderr, "ote_gpu_check %s: target did not start\n", check);
        failures++;
        unsetenv("OTE_TLS");
        return false;
    }
    setenv("OTE_TLS", "tcp,cuda_copy,cuda_stage", 1);
    p->e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_TLS");
    if (ote_mem_alloc(p->e, size, "cuda:0", 0, &p->gpu, &p->mg) != OTE_OK ||
        ote_mem_alloc(p->e, size, NULL, 0, &p->host, &p->mh) != OTE_OK ||
        ote_segment_open(p->e, p->t.name, &p->seg) != OTE_OK) {
        fprintf(stderr, "ote_gpu_check %s: setup failed\n", check);
        failures++;
        ote_test_target_stop(&p->t);
        ote_engine_destroy(p->e);
        return false;
    }
    return true;
}

static void gpu_pair_stop(gpu_pair_t *p)
{
    ote_segment_close(p->seg);
    ote_test_target_stop(&p->t);
    ote_mem_free(p->e, p->mg);
    ote_mem_free(p->e, p->mh);
    ote_engine_destroy(p->e);
}

/*
 * The target fills its region 0 with seed, READ into GPU memory and
 * checked; against a READ of its region ref_region into host memory.
 */
static void read_to_gpu(gpu_pair_t *p, const char *name, unsigned seed, int ref_region)
{
    char cmd[128];
    double r, ref;
    bool ok;

    snprintf(cmd, sizeof(cmd), "fill 0 0 %zu %u", size, seed);
    ok  = remote_cmd(p->e, p->seg, cmd);
    r   = timed_xfer(p->e, p->seg, OTE_OP_READ, p->gpu, p->t.addr[0], size);
    ok  = ok && r > 0 && gpu_check(p->gpu, size, seed);
    ref = timed_xfer(p->e, p->seg, OTE_OP_READ, p->host, p->t.addr[ref_region], size);
    result(name, r, "host_tcp_host_read", ref, 0.85, ok);
}

static void check_staged(void)
{
    char region[64], cmd[128];
    const char *args[] = {"--region", region, NULL};
    gpu_pair_t p;
    double w, ref;
    bool ok;

    snprintf(region, sizeof(region), "%zu:rw", size);
    if (!gpu_pair_start(&p, "staged", "tcp", args))
        return;
    /* Reference first: host -> TCP -> host, same sizes, same connection. */
    ote_test_fill(p.host, 0, size, 5);
    ref = timed_xfer(p.e, p.seg, OTE_OP_WRITE, p.host, p.t.addr[0], size);
    gpu_fill(p.gpu, size, 6);
    w = timed_xfer(p.e, p.seg, OTE_OP_WRITE, p.gpu, p.t.addr[0], size);
    snprintf(cmd, sizeof(cmd), "check 0 0 %zu 6", size);
    ok = w > 0 && remote_cmd(p.e, p.seg, cmd);
    result("staged_gpu_tcp_host", w, "host_tcp_host", ref, 0.85, ok);
    read_to_gpu(&p, "staged_host_tcp_gpu", 7, 0);
    gpu_pair_stop(&p);
}

static void check_remote(void)
{
    char region[64], hregion[64], cmd[128];
    const char *args[] = {"--region", region, "--region", hregion, NULL};
    gpu_pair_t p;
    double w, ref;
    bool ok;

    /* Region 0: the target's GPU memory; region 1: its host memory (reference). */
    snprintf(region, sizeof(region), "%zu:rw@cuda:0", size);
    snprintf(hregion, sizeof(hregion), "%zu:rw", size);
    if (!gpu_pair_start(&p, "remote", "tcp,cuda_copy", args))
        return;
    ote_test_fill(p.host, 0, size, 8);
    ref = timed_xfer(p.e, p.seg, OTE_OP_WRITE, p.host, p.t.addr[1], size);
    snprintf(cmd, sizeof(cmd), "check 1 0 %zu 8", size);
    ok = ref > 0 && remote_cmd(p.e, p.seg, cmd);
    gpu_fill(p.gpu, size, 9);
    w = timed_xfer(p.e, p.seg, OTE_OP_WRITE, p.gpu, p.t.addr[0], size);
    snprintf(cmd, sizeof(cmd), "check 0 0 %zu 9", size);
    ok = ok && w > 0 && remote_cmd(p.e, p.seg, cmd);
    result("gpu_tcp_gpu_write", w, "host_tcp_host", ref, 0.85, ok);
    read_to_gpu(&p, "gpu_tcp_gpu_read", 10, 1);
    gpu_pair_stop(&p);
}

#ifdef HAVE_LIBURING
static void check_file(void)
{
    const char *dir = getenv("ORBITTE_TEST_BUILDDIR");
    char path[4096], name[4200];
    ote_file_config_t cfg;
    const char *why = "";
    ote_engine_h e;
    ote_segment_h seg;
    void *gpu, *host;
    ote_mem_h mg, mh;
    double w, r, ref;
    bool ok;
    int fd;

    snprintf(path, sizeof(path), "%s/gpu-check-file.dat", dir ? dir : ".");
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        fprintf(stderr, "ote_gpu_check file: cannot make %s\n", path);
        failures++;
        if (fd >= 0)
            close(fd);
        return;
    }
    close(fd);
    snprintf(name, sizeof(name), "file://%s", path);
    e = ote_test_engine("127.0.0.1:0");
    if (ote_config_fill(&ote_file_config_table, &cfg) == OTE_OK) {
        (void)ote_file_gds_load(&cfg, &why);
        ote_config_release(&ote_file_config_table, &cfg);
    }
    printf("# file: GPU memory to and from file segments: %s\n", why);
    if (ote_mem_alloc(e, size, "cuda:0", 0, &gpu, &mg) != OTE_OK ||
        ote_mem_alloc(e, size, NULL, 0, &host, &mh) != OTE_OK ||
        ote_segment_open(e, name, &seg) != OTE_OK) {
        fprintf(stderr, "ote_gpu_check file: setup failed\n");
        failures++;
        ote_engine_destroy(e);
        unlink(path);
        return;
    }
    ote_test_fill(host, 0, size, 11);
    ref = timed_xfer(e, seg, OTE_OP_WRITE, host, 0, size);
    gpu_fill(gpu, size, 12);
    w  = timed_xfer(e, seg, OTE_OP_WRITE, gpu, 0, size);
    memset(host, 0, size);
    ok = w > 0 && timed_xfer(e, seg, OTE_OP_READ, host, 0, size) > 0 &&
         ote_test_check(host, 0, size, 12) == -1;
    result("gpu_file_write", w, "host_file_write", ref, 0.85, ok);
    ote_test_fill(host, 0, size, 13);
    ok = timed_xfer(e, seg, OTE_OP_WRITE, host, 0, size) > 0;
    r  = timed_xfer(e, seg, OTE_OP_READ, gpu, 0, size);
    ok = ok && r > 0 && gpu_check(gpu, size, 13);
    ref = timed_xfer(e, seg, OTE_OP_READ, host, 0, size);
    result("gpu_file_read", r, "host_file_read", ref, 0.85, ok);
    ote_segment_close(seg);
    ote_mem_free(e, mg);
    ote_mem_free(e, mh);
    ote_engine_destroy(e);
    unlink(path);
}
#endif

int main(int argc, char **argv)
{
    const char *what;
    int opt;

    while ((opt = getopt(argc, argv, "s:n:")) != -1) {
        if (opt == 's')
            size = strtoull(optarg, NULL, 0);
        else if (opt == 'n')
            iters = atoi(optarg);
        else
            return 2;
    }
    what = optind < argc ? argv[optind] : "all";
    if (size == 0 || iters <= 0)
        return 2;
    {
        /* The CUDA table is loaded by the first engine. */
        ote_engine_h e = ote_test_engine("127.0.0.1:0");
        int n          = ote_cuda_device_count();

        ote_engine_destroy(e);
        if (n == 0) {
            fprintf(stderr, "ote_gpu_check: no CUDA device: %s\n", ote_cuda_api_source());
            return 3;
        }
        printf("# CUDA from %s, %d device(s); %zu bytes x %d per measurement\n",
               ote_cuda_api_source(), n, size, iters);
    }
    printf("#      name                     bytes     GB/s reference                  GB/s  ratio "
           "target ok\n");
    if (strcmp(what, "copy") == 0 || strcmp(what, "all") == 0)
        check_copy();
    if (strcmp(what, "ipc") == 0 || strcmp(what, "all") == 0)
        check_ipc();
    if (strcmp(what, "staged") == 0 || strcmp(what, "all") == 0)
        check_staged();
    if (strcmp(what, "remote") == 0 || strcmp(what, "all") == 0)
        check_remote();
#ifdef HAVE_LIBURING
    if (strcmp(what, "file") == 0 || strcmp(what, "all") == 0)
        check_file();
#endif
    printf("# %s\n", failures ? "FAILED" : "all transfers correct");
    return failures ? 1 : 0;
}
