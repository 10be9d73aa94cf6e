/*
 * Remote staging on the CUDA test double: GPU memory of a target process
 * that only TCP reaches, through the target's pinned chunks (Pin, host
 * transfer, Delegate, Unpin). WRITE and READ from host memory and from
 * this process's GPU memory (staging on both sides), every byte checked in
 * the target; Delegate access checks with the target's memory untouched;
 * the target's pool back to full after completion, cancel, and the
 * initiator killed mid-transfer.
 */
#include "../unit/cuda/cuda_test.h"
#include "core/wire/ctl_msg.h"
#include "core/engine_int.h"
#include "core/segment/segment.h"
#include "stage_fx.h"

#include <signal.h>
#include <sys/wait.h>

#define LEN (12u << 20)
#define TLS "tcp,cuda_copy,cuda_stage"

static stage_fx_t  fx;
static const char *self_path;

static long target_pinned(void)
{
    char reply[64];
    long n = -1;

    mp_target_cmd(fx.e, fx.seg, reply, sizeof(reply), "stagepinned");
    assert_int_equal(sscanf(reply, "pinned %ld", &n), 1);
    return n;
}

/* The target's pool returns to full within 5 s. */
static void wait_pool_full(void)
{
    for (int i = 0; i < 100; i++) {
        if (target_pinned() == 0)
            return;
        usleep(50 * 1000);
    }
    fail_msg("the target's staging chunks stay pinned");
}

/*
 * Region 0: rw GPU, region 1: read-only GPU, region 2: write-only GPU. The
 * target's staging pool has slots chunks of 1 MiB.
 */
static void start_target(const char *delay_us, const char *slots)
{
    const char *const args[] = {"--region", "12m:rw@cuda:0", "--region", "2m:r@cuda:1",
                                "--region", "2m:w@cuda:0",   NULL};

    setenv("OTE_TLS", "tcp,cuda_copy", 1);
    setenv("OTE_STAGE_CHUNK_SIZE", "1m", 1);
    setenv("OTE_STAGE_SLOTS", slots, 1);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", delay_us, 1);
    stage_fx_start_target(&fx, args);
    unsetenv("OTE_TLS");
    unsetenv("OTE_STAGE_CHUNK_SIZE");
    unsetenv("OTE_STAGE_SLOTS");
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "0", 1);
}

/* Ends a test whose target lives: every chunk it pinned is back first. */
static void close_drained(void)
{
    assert_int_equal(target_pinned(), 0);
    stage_fx_close(&fx);
}

/* WRITE and READ between local memory at location and the target's GPU. */
static void data_round(const char *location, uint64_t seed)
{
    ote_proto_stage_stats_t s0, s1;
    void *buf;

    /* Room for the three slices of a request at once: no BUSY. */
    start_target("2000", "12");
    stage_fx_open(&fx, TLS, location, LEN);
    buf = fx.buf;
    ote_proto_stage_stats(&s0);

    ote_test_fill(buf, 0, LEN, seed);
    stage_fx_expect_done(stage_fx_run1(&fx, &(ote_xfer_req_t){.op = OTE_OP_WRITE,
                                                              .local_addr = buf,
                                                              .segment = fx.seg,
                                                              .remote_addr = fx.target.addr[0],
                                                              .length = LEN}),
                         LEN, "write to the peer's GPU");
    mp_target_ok(fx.e, fx.seg, "check 0 0 %u %llu", LEN, (unsigned long long)seed);
    assert_int_equal(target_pinned(), 0);

    /* READ an unaligned piece of other data back. */
    mp_target_ok(fx.e, fx.seg, "fill 0 0 %u %llu", LEN, (unsigned long long)seed + 1);
    memset(buf, 0, 16);
    stage_fx_expect_done(stage_fx_run1(&fx, &(ote_xfer_req_t){.op = OTE_OP_READ,
                                                              .local_addr = (char *)buf + 5,
                                                              .segment = fx.seg,
                                                              .remote_addr = fx.target.addr[0] + 5,
                                                              .length = LEN - 777}),
                         LEN - 777, "read from the peer's GPU");
    assert_int_equal(ote_test_check((char *)buf + 5, 5, LEN - 777, seed + 1), -1);
    ote_proto_stage_stats(&s1);
    assert_true(s1.chunks - s0.chunks >= 2 * 12);
    /*
     * Each slice (4 chunks) moves as two groups of two, the second on the
     * network while the target copies the first: one overlap per slice and
     * direction (local staging adds its own in the GPU case).
     */
    assert_int_equal(s1.remote_busy, s0.remote_busy);
    assert_true(s1.overlapped - s0.overlapped >= 2 * 3);
    assert_int_equal(s1.chunks_in_use, 0);
    close_drained();
}

static void test_rstage_host(void **state)
{
    (void)state;
    data_round("cpu:0", 51);
}

/* GPU -> local staging -> TCP -> remote staging -> GPU, and back. */
static void test_rstage_both_sides(void **state)
{
    (void)state;
    data_round("cuda:1", 61);
}

/* Send one STAGE request on seg's control connection; the answer's status. */
static ote_status_t stage_req(ote_segment_h seg, ote_ctl_stage_t *m, uint64_t *chunks,
                              size_t *count_p)
{
    ote_buf_t out = {0};
    uint8_t *resp = NULL;
    size_t len, count = 0;
    uint32_t cs = 0;
    uint64_t dummy[OTE_CTL_STAGE_MAX];
    ote_status_t remote = OTE_ERR_IO;

    m->initiator = seg->engine->facts.instance_id;
    m->target    = seg->desc->instance_id;
    assert_int_equal(ote_ctl_stage_encode(m, &out), OTE_OK);
    assert_int_equal(ote_segment_ctl_request(seg, OTE_CTL_STAGE, out.data, out.len,
                                             OTE_CTL_STAGE_ACK, &resp, &len),
                     OTE_OK);
    assert_int_equal(ote_ctl_stage_ack_decode(resp, len, &remote, &cs,
                                              chunks ? chunks : dummy, &count),
                     OTE_OK);
    if (count_p)
        *count_p = count;
    if (count)
        assert_int_equal(cs, 1u << 20);
    free(resp);
    free(out.data);
    return remote;
}

static ote_status_t delegate(ote_segment_h seg, uint8_t dir, uint64_t chunk, uint64_t gpu,
                             uint32_t len)
{
    ote_ctl_stage_t m = {.op = OTE_CTL_STAGE_DELEGATE, .dir = dir, .count = 1};

    m.e[0].chunk  = chunk;
    m.e[0].gpu    = gpu;
    m.e[0].length = len;
    return stage_req(seg, &m, NULL, NULL);
}

/* fill or check (cmd) the three regions of the access test, each with its seed. */
static void access_regions(const char *cmd)
{
    static const unsigned len[] = {LEN, 2u << 20, 2u << 20};

    for (int r = 0; r < 3; r++)
        mp_target_ok(fx.e, fx.seg, "%s %d 0 %u %d", cmd, r, len[r], 71 + r);
}

/*
 * Every Delegate is checked against the target's region table and its own
 * pins: unregistered, out of bounds, no access, not our chunk. Nothing is
 * copied then (the GPU regions keep their contents).
 */
static void test_rstage_access(void **state)
{
    ote_ctl_stage_t m = {.op = OTE_CTL_STAGE_PIN, .count = 2};
    uint64_t chunks[OTE_CTL_STAGE_MAX];
    ote_segment_h seg;
    ote_task_status_t st;
    size_t n = 0;
    void *buf;

    (void)state;
    start_target("0", "4");
    stage_fx_open(&fx, TLS, "cpu:0", LEN);
    seg = fx.seg;
    buf = fx.buf;
    access_regions("fill");

    assert_int_equal(stage_req(seg, &m, chunks, &n), OTE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(target_pinned(), 2);
    /* unregistered: just past region 0's end and far away */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0], 4096, 4096),
                     OTE_ERR_NOT_REGISTERED);
    /* out of bounds: starts in region 0, runs past its end */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0],
                              fx.target.addr[0] + LEN - 100, 4096),
                     OTE_ERR_OUT_OF_BOUNDS);
    /* no access: region 1 is read-only, region 2 write-only */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0], fx.target.addr[1], 4096),
                     OTE_ERR_ACCESS);
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_FROM_GPU, chunks[0], fx.target.addr[2], 4096),
                     OTE_ERR_ACCESS);
    /*
     * Two entries, the first allowed (region 0), the second not (region 1 is
     * read-only): refused whole, the first not copied either (the check of
     * region 0 at the end).
     */
    {
        ote_ctl_stage_t d = {.op = OTE_CTL_STAGE_DELEGATE, .dir = OTE_CTL_STAGE_TO_GPU,
                             .count = 2};

        d.e[0].chunk  = chunks[0];
        d.e[0].gpu    = fx.target.addr[0];
        d.e[0].length = 4096;
        d.e[1].chunk  = chunks[1];
        d.e[1].gpu    = fx.target.addr[1];
        d.e[1].length = 4096;
        assert_int_equal(stage_req(seg, &d, NULL, NULL), OTE_ERR_ACCESS);
    }
    /* a chunk this connection did not pin, and a chunk too long */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0] + 64, fx.target.addr[0], 64),
                     OTE_ERR_INVALID_PARAM);
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0], fx.target.addr[0],
                              (1u << 20) + 1),
                     OTE_ERR_INVALID_PARAM);
    /* allowed: region 0 from a chunk (contents of the chunk: whatever it holds) */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_FROM_GPU, chunks[1], fx.target.addr[1], 4096),
                     OTE_OK);
    m.op       = OTE_CTL_STAGE_UNPIN;
    m.e[0].chunk = chunks[0];
    m.e[1].chunk = chunks[1];
    assert_int_equal(stage_req(seg, &m, NULL, NULL), OTE_OK);
    assert_int_equal(target_pinned(), 0);
    /* Unpinned: no longer ours. */
    assert_int_equal(delegate(seg, OTE_CTL_STAGE_TO_GPU, chunks[0], fx.target.addr[0], 64),
                     OTE_ERR_INVALID_PARAM);

    /* Through the API: WRITE to the read-only region fails with ACCESS. */
    ote_test_fill(buf, 0, 2u << 20, 99);
    for (int i = 0; i < 2; i++) {
        st = stage_fx_run1(&fx, &(ote_xfer_req_t){.op = i == 0 ? OTE_OP_WRITE : OTE_OP_READ,
                                                  .local_addr = buf, .segment = seg,
                                                  .remote_addr = fx.target.addr[1 + i],
                                                  .length = 2u << 20});
        assert_int_equal(st.state, OTE_TASK_FAILED);
        assert_int_equal(st.error, OTE_ERR_ACCESS);
    }

    access_regions("check");
    close_drained();
}

/* Cancel mid-transfer, then more requests than the pool has chunks: all come back. */
static void test_rstage_cancel_and_busy(void **state)
{
    ote_proto_stage_stats_t s0, s1;
    ote_task_status_t st;
    ote_xfer_req_t r;
    ote_batch_h b;
    size_t first;

    (void)state;
    /*
     * Delegated copies take 100 ms per chunk at the target: the request
     * cannot have landed whole when it is canceled 50 ms in, however many
     * chunks the pool moves at once.
     */
    start_target("100000", "4");
    stage_fx_open(&fx, TLS, "cpu:0", LEN);
    ote_test_fill(fx.buf, 0, LEN, 81);
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = fx.buf, .segment = fx.seg,
                         .remote_addr = fx.target.addr[0], .length = LEN};
    assert_int_equal(ote_batch_create(fx.e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &r, 1, &first), OTE_OK);
    usleep(50 * 1000);
    assert_int_equal(ote_batch_cancel(b, first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_CANCELED);
    ote_batch_release(b);
    wait_pool_full();

    /* Four requests of 3 MiB (4 slices of 1 chunk each... of 3 chunks) on a 4-chunk pool. */
    ote_proto_stage_stats(&s0);
    stage_fx_write_slices(&fx, LEN, 4);
    ote_proto_stage_stats(&s1);
    assert_true(s1.remote_busy > s0.remote_busy);
    mp_target_ok(fx.e, fx.seg, "check 0 0 %u 81", LEN);
    close_drained();
}

/*
 * The segment closed while slices wait for the target's chunks (a pool of
 * 4 for 12 MiB, copies of 200 ms each): they ask the peer nothing more and
 * end CANCELED at once, not after every chunk (2.4 s) or a BUSY target's
 * transfer timeout; what they had pinned is given back with the closed
 * segment's control connection.
 */
static void test_rstage_close_in_flight(void **state)
{
    ote_task_status_t st[4];
    ote_xfer_req_t r[4];
    ote_batch_h b;
    size_t first;
    double t0, took;

    (void)state;
    start_target("200000", "4");
    stage_fx_open(&fx, TLS, "cpu:0", LEN);
    ote_test_fill(fx.buf, 0, LEN, 85);
    for (size_t i = 0; i < 4; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = (char *)fx.buf + i * (LEN / 4),
                                .segment = fx.seg, .remote_addr = fx.target.addr[0] + i * (LEN / 4),
                                .length = LEN / 4};
    assert_int_equal(ote_batch_create(fx.e, 4, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, r, 4, &first), OTE_OK);
    usleep(100 * 1000);
    t0 = mp_now_s();
    assert_int_equal(ote_segment_close(fx.seg), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    took = mp_now_s() - t0;
    fprintf(stderr, "# staged slices ended %.2f s after the close\n", took);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ote_batch_task_status(b, first + i, &st[i]), OTE_OK);
        assert_int_equal(st[i].state, OTE_TASK_CANCELED);
    }
    assert_true(took < 1.5);
    ote_batch_release(b);
    assert_int_equal(ote_segment_open(fx.e, fx.target.name, &fx.seg), OTE_OK);
    wait_pool_full();
    close_drained();
}

/*
 * A pinned chunk left unused is released after the target's
 * OTE_XFER_TIMEOUT_MS; a target that dies mid-transfer fails the task.
 */
static void test_rstage_pin_timeout_and_target_death(void **state)
{
    ote_ctl_stage_t m = {.op = OTE_CTL_STAGE_PIN, .count = 1};
    uint64_t chunk;
    ote_task_status_t st;
    ote_batch_h b;
    size_t n = 0, first;

    (void)state;
    setenv("OTE_XFER_TIMEOUT_MS", "400", 1);
    start_target("50000", "4");
    unsetenv("OTE_XFER_TIMEOUT_MS");
    stage_fx_open(&fx, TLS, "cpu:0", LEN);
    assert_int_equal(stage_req(fx.seg, &m, &chunk, &n), OTE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(target_pinned(), 1);
    usleep(700 * 1000);
    assert_int_equal(target_pinned(), 0);
    /* Released: no longer this connection's. */
    assert_int_equal(delegate(fx.seg, OTE_CTL_STAGE_TO_GPU, chunk, fx.target.addr[0], 64),
                     OTE_ERR_INVALID_PARAM);

    /* 12 chunks at 50 ms each: the target is killed well before the end. */
    assert_int_equal(ote_batch_create(fx.e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &(ote_xfer_req_t){.op = OTE_OP_WRITE,
                                                           .local_addr = fx.buf,
                                                           .segment = fx.seg,
                                                           .remote_addr = fx.target.addr[0],
                                                           .length = LEN},
                                      1, &first),
                     OTE_OK);
    usleep(150 * 1000);
    stage_fx_kill_target(&fx);
    assert_int_equal(ote_batch_wait(b, 30000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    ote_batch_release(b);
    stage_fx_close(&fx);
}

/* Child: start a slow WRITE to the target's GPU, say so, wait to be killed. */
static int child_main(const char *name, uint64_t remote)
{
    ote_engine_h e = stage_fx_engine(TLS);
    ote_segment_h seg;
    ote_batch_h b;
    size_t first;
    void *buf;
    ote_mem_h mh;

    if (e == NULL || ote_mem_alloc(e, LEN, "cpu:0", 0, &buf, &mh) != OTE_OK ||
        ote_segment_open(e, name, &seg) != OTE_OK || ote_batch_create(e, 1, &b) != OTE_OK ||
        ote_batch_submit(b, &(ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = buf,
                                              .segment = seg, .remote_addr = remote,
                                              .length = LEN},
                         1, &first) != OTE_OK)
        return 1;
    printf("STARTED\n");
    fflush(stdout);
    if (ote_batch_wait(b, 30000) == OTE_OK) {
        ote_task_status_t st;

        ote_batch_task_status(b, first, &st);
        fprintf(stderr, "child: transfer ended early: %s\n", ote_status_string(st.error));
    }
    return 2;
}

/* The initiator dies mid-transfer: its control connection goes, the target releases its chunks. */
static void test_rstage_initiator_killed(void **state)
{
    char line[64], addr[32];
    int fds[2], status;
    long pinned;
    pid_t pid;
    FILE *f;

    (void)state;
    start_target("200000", "4"); /* 12 delegated copies of 200 ms: 2.4 s */
    stage_fx_open(&fx, TLS, NULL, 0);
    assert_int_equal(pipe(fds), 0);
    snprintf(addr, sizeof(addr), "%llu", (unsigned long long)fx.target.addr[0]);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(self_path, self_path, "--child", fx.target.name, addr, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    f = fdopen(fds[0], "r");
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "STARTED\n");
    /* Mid-transfer: the child holds chunks (the transfer takes over 2 s). */
    for (int i = 0; i < 40 && (pinned = target_pinned()) == 0; i++)
        usleep(50 * 1000);
    assert_true(pinned > 0);
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    fclose(f);
    wait_pool_full();
    stage_fx_close(&fx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        stage_fx_test(test_rstage_host, &fx),
        stage_fx_test(test_rstage_both_sides, &fx),
        stage_fx_test(test_rstage_access, &fx),
        stage_fx_test(test_rstage_cancel_and_busy, &fx),
        stage_fx_test(test_rstage_close_in_flight, &fx),
        stage_fx_test(test_rstage_initiator_killed, &fx),
        stage_fx_test(test_rstage_pin_timeout_and_target_death, &fx),
    };

    self_path = argv[0];
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], strtoull(argv[3], NULL, 10));
    cuda_test_use_double(2);
    setenv("ORBITTE_CUDA_DOUBLE_DELAY_US", "0", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
