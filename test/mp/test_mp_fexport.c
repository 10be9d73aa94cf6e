/*
 * A peer's exported file as a segment (ote_file_export): a target process
 * exports files of a temporary directory, this process opens them as
 * "<export>@<engine name>" and moves data both ways over loopback; every
 * byte is checked, in this process's memory and in the file on disk. The
 * bytes go inside the control messages, or over the engines' data rails
 * (OTE_FILE_REMOTE, local memory registered for remote access): the
 * target's rail counters tell which.
 */
#include "mp_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define FILE_LEN  (6u << 20)
#define LOCAL_LEN (8u << 20)

typedef struct {
    char              dir[256];
    char              a[300], ro[300], wo[300], d[300], d1[300], d2[300];
    ote_test_target_t t;
    ote_engine_h      e;
    ote_segment_h     cmd; /* the target's engine: commands */
    uint8_t          *local;
    ote_mem_h         mem;
    size_t            transferred; /* of the last xfer() */
} fx_t;

static void make_file(const char *path, size_t len, uint64_t seed)
{
    assert_int_equal(ote_test_write_file(path, len, seed), 0);
}

/* The file's bytes [off, off+len) follow the pattern (offset base, seed). */
static long file_check(const char *path, uint64_t off, size_t len, uint64_t base, uint64_t seed)
{
    uint8_t *buf = malloc(len);
    int fd       = open(path, O_RDONLY);
    long bad;

    assert_non_null(buf);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, len, (off_t)off), (ssize_t)len);
    close(fd);
    bad = ote_test_check(buf, base, len, seed);
    free(buf);
    return bad;
}

/*
 * The local memory registered with access (OTE_ACCESS_*: by rails or not,
 * OTE_FILE_REMOTE); local_tls: this engine's OTE_TLS, if not the target's.
 */
static void fx_start_tls(fx_t *f, unsigned access, const char *local_tls)
{
    char xa[400], xro[400], xwo[400], xd[400];
    const char *args[] = {"--export", xa, "--export", xro, "--export", xwo, "--export", xd, NULL};
    const char *tmp    = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    memset(f, 0, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "%s/ote-fexport-XXXXXX", tmp);
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->a, sizeof(f->a), "%s/a", f->dir);
    snprintf(f->ro, sizeof(f->ro), "%s/ro", f->dir);
    snprintf(f->wo, sizeof(f->wo), "%s/wo", f->dir);
    snprintf(f->d, sizeof(f->d), "%s/d", f->dir);
    snprintf(f->d1, sizeof(f->d1), "%s/d/f1", f->dir);
    snprintf(f->d2, sizeof(f->d2), "%s/d/f2", f->dir);
    assert_int_equal(mkdir(f->d, 0755), 0);
    make_file(f->a, FILE_LEN, 1);
    make_file(f->ro, 1u << 20, 2);
    make_file(f->wo, 1u << 20, 3);
    make_file(f->d1, 256u << 10, 4);
    make_file(f->d2, 512u << 10, 5);
    snprintf(xa, sizeof(xa), "a:rw:%s", f->a);
    snprintf(xro, sizeof(xro), "ro:r:%s", f->ro);
    snprintf(xwo, sizeof(xwo), "wo:w:%s", f->wo);
    snprintf(xd, sizeof(xd), "d:rw:%s", f->d);
    assert_int_equal(ote_test_target_start(&f->t, NULL, args), 0);
    if (local_tls != NULL)
        setenv("OTE_TLS", local_tls, 1);
    f->e = ote_test_engine(NULL);
    assert_non_null(f->e);
    /* Without a transport in common no command segment: the target is stopped by signal. */
    if (local_tls != NULL)
        assert_int_equal(ote_segment_open(f->e, f->t.name, &f->cmd), OTE_ERR_UNREACHABLE);
    else
        assert_int_equal(ote_segment_open(f->e, f->t.name, &f->cmd), OTE_OK);
    assert_int_equal(ote_mem_alloc(f->e, LOCAL_LEN, NULL, access, (void **)&f->local, &f->mem),
                     OTE_OK);
}

static void fx_start_access(fx_t *f, unsigned access)
{
    fx_start_tls(f, access, NULL);
}

static void fx_start(fx_t *f)
{
    fx_start_access(f, 0);
}

static void fx_stop(fx_t *f, bool quit)
{
    char reply[64];
    const char *files[] = {f->d1, f->d2, f->a, f->ro, f->wo};

    if (quit && f->cmd != NULL)
        ote_test_target_cmd(f->e, f->cmd, "quit", reply, sizeof(reply), 100);
    if (f->cmd != NULL)
        ote_segment_close(f->cmd);
    ote_mem_free(f->e, f->mem);
    ote_engine_destroy(f->e);
    ote_test_target_stop(&f->t);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        unlink(files[i]);
    rmdir(f->d);
    rmdir(f->dir);
}

static ote_segment_h xopen(fx_t *f, const char *export_name, ote_status_t want)
{
    char name[512];
    ote_segment_h seg = NULL;

    snprintf(name, sizeof(name), "%s@%s", export_name, f->t.name);
    assert_int_equal(ote_segment_open(f->e, name, &seg), want);
    return seg;
}

/* One request, waited for: the task's status (OTE_OK when it completed). */
static ote_status_t xfer(fx_t *f, ote_segment_h seg, ote_op_t op, size_t local_off,
                         uint64_t remote, size_t len, int wait_ms)
{
    ote_xfer_req_t req = {.op = op, .local_addr = f->local + local_off, .segment = seg,
                          .remote_addr = remote, .length = len};
    ote_task_status_t st;
    ote_batch_h b;
    size_t first;
    ote_status_t status;

    assert_int_equal(ote_batch_create(f->e, 1, &b), OTE_OK);
    status = ote_batch_submit(b, &req, 1, &first);
    if (status == OTE_OK) {
        assert_int_equal(ote_batch_wait(b, wait_ms), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        status         = st.state == OTE_TASK_COMPLETED ? OTE_OK : st.error;
        f->transferred = st.transferred;
        if (st.state != OTE_TASK_COMPLETED)
            assert_int_not_equal(status, OTE_OK);
    }
    ote_batch_release(b);
    return status;
}

/* WRITE then READ back through the segment; the file on disk checked too. */
static void roundtrip(fx_t *f, ote_segment_h seg, const char *path, uint64_t remote, size_t len,
                      uint64_t seed)
{
    size_t lo = 3; /* unaligned local addresses as well */

    ote_test_fill(f->local + lo, remote, len, seed);
    assert_int_equal(xfer(f, seg, OTE_OP_WRITE, lo, remote, len, 60000), OTE_OK);
    assert_int_equal(file_check(path, remote, len, remote, seed), -1);
    memset(f->local, 0, LOCAL_LEN);
    assert_int_equal(xfer(f, seg, OTE_OP_READ, 1, remote, len, 60000), OTE_OK);
    assert_int_equal(ote_test_check(f->local + 1, remote, len, seed), -1);
}

static void test_data(void **state)
{
    fx_t f;
    ote_segment_h seg;
    ote_region_info_t reg;
    size_t count;

    (void)state;
    fx_start(&f);
    seg = xopen(&f, "a", OTE_OK);
    assert_int_equal(ote_segment_regions(seg, &reg, 1, &count), OTE_OK);
    assert_int_equal(count, 1);
    assert_int_equal(reg.addr, 0);
    assert_int_equal(reg.length, FILE_LEN);
    assert_int_equal(reg.access, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE);
    /* What the target process wrote locally reads back as is. */
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, FILE_LEN, 60000), OTE_OK);
    assert_int_equal(ote_test_check(f.local, 0, FILE_LEN, 1), -1);
    /* Aligned, then unaligned, one chunk and several (1 MiB each). */
    roundtrip(&f, seg, f.a, 0, 4096, 11);
    roundtrip(&f, seg, f.a, 1u << 20, 3u << 20, 12);
    roundtrip(&f, seg, f.a, 4097, 13, 13);
    roundtrip(&f, seg, f.a, 12345, (2u << 20) + 777, 14);
    roundtrip(&f, seg, f.a, FILE_LEN - 5, 5, 15);
    ote_segment_close(seg);
    fx_stop(&f, true);
}

static void test_checks(void **state)
{
    fx_t f;
    ote_segment_h seg, ro, wo;

    (void)state;
    fx_start(&f);
    seg = xopen(&f, "a", OTE_OK);
    /* Past the exported size, at the end and beyond it. */
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, FILE_LEN - 10, 100, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, FILE_LEN, 1, 60000), OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, UINT64_MAX - 2, 16, 60000) != OTE_OK, 1);
    /* A read-only export reads and refuses WRITEs; a write-only one the reverse. */
    ro = xopen(&f, "ro", OTE_OK);
    assert_int_equal(xfer(&f, ro, OTE_OP_READ, 0, 0, 1u << 20, 60000), OTE_OK);
    assert_int_equal(ote_test_check(f.local, 0, 1u << 20, 2), -1);
    assert_int_equal(xfer(&f, ro, OTE_OP_WRITE, 0, 0, 4096, 60000), OTE_ERR_ACCESS);
    assert_int_equal(file_check(f.ro, 0, 1u << 20, 0, 2), -1);
    wo = xopen(&f, "wo", OTE_OK);
    assert_int_equal(xfer(&f, wo, OTE_OP_READ, 0, 0, 4096, 60000), OTE_ERR_ACCESS);
    ote_test_fill(f.local, 0, 4096, 21);
    assert_int_equal(xfer(&f, wo, OTE_OP_WRITE, 0, 0, 4096, 60000), OTE_OK);
    assert_int_equal(file_check(f.wo, 0, 4096, 0, 21), -1);
    /* Names that are not exported. */
    xopen(&f, "nothing", OTE_ERR_NOT_FOUND);
    xopen(&f, "d", OTE_ERR_NOT_FOUND);
    /* Accepted requests go on after refused ones. */
    roundtrip(&f, seg, f.a, 100, 1000, 22);
    ote_segment_close(wo);
    ote_segment_close(ro);
    ote_segment_close(seg);
    fx_stop(&f, true);
}

static void test_directory(void **state)
{
    fx_t f;
    ote_segment_h s1, s2;

    (void)state;
    fx_start(&f);
    s1 = xopen(&f, "d/f1", OTE_OK);
    s2 = xopen(&f, "d/f2", OTE_OK);
    roundtrip(&f, s1, f.d1, 0, 256u << 10, 31);
    roundtrip(&f, s2, f.d2, 1, (512u << 10) - 1, 32);
    /* Each name is its own file. */
    assert_int_equal(file_check(f.d1, 0, 256u << 10, 0, 31), -1);
    assert_int_equal(xfer(&f, s1, OTE_OP_READ, 0, 256u << 10, 1, 60000), OTE_ERR_OUT_OF_BOUNDS);
    ote_segment_close(s1);
    ote_segment_close(s2);
    fx_stop(&f, true);
}

static void test_unexport(void **state)
{
    fx_t f;
    ote_segment_h seg, other;

    (void)state;
    fx_start(&f);
    seg   = xopen(&f, "a", OTE_OK);
    other = xopen(&f, "ro", OTE_OK);
    roundtrip(&f, seg, f.a, 0, 8192, 41);
    assert_int_equal(ote_test_target_expect(f.e, f.cmd, "unexport a", "ok", 20000), 0);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 4096, 60000), OTE_ERR_NOT_FOUND);
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, 0, 4096, 60000), OTE_ERR_NOT_FOUND);
    xopen(&f, "a", OTE_ERR_NOT_FOUND);
    /* The other exports are still served. */
    assert_int_equal(xfer(&f, other, OTE_OP_READ, 0, 0, 4096, 60000), OTE_OK);
    ote_segment_close(other);
    ote_segment_close(seg);
    fx_stop(&f, true);
}

static void test_truncate_unlink(void **state)
{
    fx_t f;
    ote_segment_h seg;
    ote_batch_h b;
    ote_xfer_req_t req[4];
    size_t first;

    (void)state;
    fx_start(&f);
    seg = xopen(&f, "a", OTE_OK);
    assert_int_equal(ote_batch_create(f.e, 4, &b), OTE_OK);
    for (int i = 0; i < 4; i++)
        req[i] = (ote_xfer_req_t){.op = i % 2 ? OTE_OP_WRITE : OTE_OP_READ,
                                  .local_addr = f.local + (size_t)i * (2u << 20),
                                  .segment = seg, .remote_addr = (uint64_t)i * (3u << 19),
                                  .length = 3u << 19};
    assert_int_equal(ote_batch_submit(b, req, 4, &first), OTE_OK);
    assert_int_equal(truncate(f.a, 1u << 20), 0);
    assert_int_equal(ote_batch_wait(b, 60000), OTE_OK);
    for (int i = 0; i < 4; i++) {
        ote_task_status_t st;

        assert_int_equal(ote_batch_task_status(b, first + (size_t)i, &st), OTE_OK);
        assert_true(st.state == OTE_TASK_COMPLETED ||
                    (st.state == OTE_TASK_FAILED && st.error == OTE_ERR_OUT_OF_BOUNDS));
    }
    ote_batch_release(b);
    /* After it: within the file fine, past its new end OUT_OF_BOUNDS both ways. */
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 1u << 20, 60000), OTE_OK);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 1u << 20, 4096, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    /* The bytes before the end land and are counted. */
    memset(f.local, 0xee, 4096);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, (1u << 20) - 100, 4096, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(f.transferred, 100);
    assert_int_equal(f.local[100], 0xee);
    {
        uint8_t disk[100];
        int fd = open(f.a, O_RDONLY);

        assert_true(fd >= 0);
        assert_int_equal(pread(fd, disk, 100, (1u << 20) - 100), 100);
        close(fd);
        assert_memory_equal(f.local, disk, 100);
    }
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, 2u << 20, 4096, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    /* The file was not grown back. */
    {
        struct stat st;

        assert_int_equal(stat(f.a, &st), 0);
        assert_int_equal(st.st_size, 1u << 20);
    }
    /* Unlinked on the target: served through its open descriptor. */
    assert_int_equal(unlink(f.a), 0);
    ote_test_fill(f.local, 0, 1u << 20, 51);
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, 0, 1u << 20, 60000), OTE_OK);
    memset(f.local, 0, 1u << 20);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 1u << 20, 60000), OTE_OK);
    assert_int_equal(ote_test_check(f.local, 0, 1u << 20, 51), -1);
    ote_segment_close(seg);
    fx_stop(&f, true);
}

static void test_target_gone(void **state)
{
    fx_t f;
    ote_segment_h seg;

    (void)state;
    setenv("OTE_XFER_TIMEOUT_MS", "1500", 1);
    fx_start(&f);
    seg = xopen(&f, "a", OTE_OK);
    roundtrip(&f, seg, f.a, 0, 4096, 61);
    /* A target that does not answer: the task ends TIMEOUT (OTE_XFER_TIMEOUT_MS). */
    mp_stop_process(f.t.pid);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 2u << 20, 120000), OTE_ERR_TIMEOUT);
    /*
     * Cancelled while it does not answer: it ends once its slices ended,
     * CANCELED; or it ended before the cancel came, TIMEOUT: its rails are
     * still paused after the timeout above, and a slice no rail may carry
     * ends at once with their last error (a cancel after the end changes
     * nothing).
     */
    {
        ote_xfer_req_t req = {.op = OTE_OP_READ, .local_addr = f.local, .segment = seg,
                              .remote_addr = 0, .length = FILE_LEN};
        ote_task_status_t st;
        ote_batch_h b;
        size_t first;

        assert_int_equal(ote_batch_create(f.e, 1, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
        assert_int_equal(ote_batch_cancel(b, first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 120000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
        assert_true(st.state == OTE_TASK_CANCELED || st.state == OTE_TASK_TIMEOUT);
        assert_true(st.transferred < FILE_LEN);
        ote_batch_release(b);
    }
    /*
     * Answering again: the segment carries on, on new connections, once the
     * target worked off the requests it got while stopped and the rails'
     * cool-down ended (under the short OTE_XFER_TIMEOUT_MS of this test a
     * loaded host may take a few tries).
     */
    kill(f.t.pid, SIGCONT);
    {
        ote_status_t st = OTE_ERR_TIMEOUT;

        ote_test_fill(f.local, 4096, (1u << 20) + 3, 62);
        /* Its rails cool down after those errors (OTE_RAIL_COOLDOWN_MS): tries apart. */
        for (int i = 0; i < 300 && st == OTE_ERR_TIMEOUT; i++) {
            if (i > 0)
                usleep(100 * 1000);
            st = xfer(&f, seg, OTE_OP_WRITE, 0, 4096, (1u << 20) + 3, 120000);
        }
        assert_int_equal(st, OTE_OK);
        assert_int_equal(file_check(f.a, 4096, (1u << 20) + 3, 4096, 62), -1);
        memset(f.local, 0, (1u << 20) + 3);
        assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 4096, (1u << 20) + 3, 120000), OTE_OK);
        assert_int_equal(ote_test_check(f.local, 4096, (1u << 20) + 3, 62), -1);
    }
    /* A killed one: the task fails. */
    ote_test_target_kill(&f.t);
    assert_int_not_equal(xfer(&f, seg, OTE_OP_WRITE, 0, 0, 4096, 120000), OTE_OK);
    ote_segment_close(seg);
    fx_stop(&f, false);
    unsetenv("OTE_XFER_TIMEOUT_MS");
}

/* ---- By rails (OTE_FILE_REMOTE) ------------------------------------------ */

/* Bytes the target delivered on its tl rails to the initiators it keeps open. */
static unsigned long long peer_bytes(fx_t *f, const char *tl)
{
    char cmd[64], reply[64];
    unsigned long long n = 0;

    snprintf(cmd, sizeof(cmd), "peerbytes %s", tl);
    assert_int_equal(ote_test_target_cmd(f->e, f->cmd, cmd, reply, sizeof(reply), 20000), 0);
    assert_int_equal(sscanf(reply, "bytes %llu", &n), 1);
    return n;
}

static void rails_env(const char *tls, const char *mode)
{
    setenv("OTE_TLS", tls, 1);
    setenv("OTE_FILE_REMOTE", mode, 1);
}

static void rails_env_clear(void)
{
    unsetenv("OTE_TLS");
    unsetenv("OTE_FILE_REMOTE");
}

/*
 * WRITE and READ back by rails over tl: every byte went over the target's
 * rails (its counters), none inside the control messages; then the READ
 * past the end of the file and the refusals.
 */
static void rails_data(const char *tl)
{
    static const struct {
        uint64_t remote;
        size_t   len;
    } runs[] = {{0, 4096}, {1u << 20, 3u << 20}, {4097, 13}, {12345, (2u << 20) + 777},
                {FILE_LEN - 5, 5}};
    unsigned long long moved = 0, before;
    fx_t f;
    ote_segment_h seg, ro;

    rails_env(tl, "auto");
    fx_start_access(&f, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE);
    seg = xopen(&f, "a", OTE_OK);
    /* What the target process wrote locally reads back as is, several slices. */
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, FILE_LEN, 60000), OTE_OK);
    assert_int_equal(ote_test_check(f.local, 0, FILE_LEN, 1), -1);
    moved += FILE_LEN;
    assert_true(peer_bytes(&f, tl) >= moved);
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        roundtrip(&f, seg, f.a, runs[i].remote, runs[i].len, 70 + i);
        moved += 2 * runs[i].len;
    }
    /* Each slice is one transfer on the target's rails: exactly the bytes asked for. */
    assert_int_equal(peer_bytes(&f, tl), moved);
    /* Refusals answer at once; nothing moves. */
    before = peer_bytes(&f, tl);
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, FILE_LEN - 10, 100, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    ro = xopen(&f, "ro", OTE_OK);
    ote_test_fill(f.local, 0, 4096, 79);
    assert_int_equal(xfer(&f, ro, OTE_OP_WRITE, 0, 0, 4096, 60000), OTE_ERR_ACCESS);
    assert_int_equal(file_check(f.ro, 0, 1u << 20, 0, 2), -1);
    assert_int_equal(peer_bytes(&f, tl), before);
    /* A READ that meets the end of the file: the bytes before it land, and count. */
    assert_int_equal(truncate(f.a, 1u << 20), 0);
    memset(f.local, 0xee, 8192);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 3, (1u << 20) - 100, 4096, 60000),
                     OTE_ERR_OUT_OF_BOUNDS);
    assert_int_equal(f.transferred, 100);
    assert_int_equal(f.local[2], 0xee);
    assert_int_equal(f.local[103], 0xee);
    /* Last written there by runs[3]. */
    assert_int_equal(ote_test_check(f.local + 3, (1u << 20) - 100, 100, 70 + 3), -1);
    assert_int_equal(peer_bytes(&f, tl), before + 100);
    ote_segment_close(ro);
    ote_segment_close(seg);
    fx_stop(&f, true);
    rails_env_clear();
}

static void test_rails_tcp(void **state)
{
    (void)state;
    rails_data("tcp");
}

/*
 * UCT's tcp has no GET: the target READs what a WRITE brings by PUTBACK
 * (this engine PUTs it into the target's bounce buffer).
 */
static void test_rails_uct_tcp(void **state)
{
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0"};
    ote_engine_h e        = NULL;

    (void)state;
    setenv("OTE_TLS", "uct_tcp", 1);
    if (ote_engine_create(&p, &e) != OTE_OK) {
        unsetenv("OTE_TLS");
        skip(); /* no UCX here */
    }
    ote_engine_destroy(e);
    rails_data("uct_tcp");
}

/* OTE_FILE_REMOTE=rails: local memory without the access is refused, nothing moves. */
static void test_rails_refused(void **state)
{
    fx_t f;
    ote_segment_h seg;
    ote_mem_h wonly;
    uint8_t *w;

    (void)state;
    rails_env("tcp", "rails");
    fx_start_access(&f, 0);
    seg = xopen(&f, "a", OTE_OK);
    memset(f.local, 0xee, 8192);
    assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 4096, 60000), OTE_ERR_ACCESS);
    assert_int_equal(f.transferred, 0);
    for (size_t i = 0; i < 8192; i++)
        assert_int_equal(f.local[i], 0xee);
    ote_test_fill(f.local, 0, (2u << 20) + 1, 81);
    assert_int_equal(xfer(&f, seg, OTE_OP_WRITE, 0, 0, (2u << 20) + 1, 60000), OTE_ERR_ACCESS);
    assert_int_equal(file_check(f.a, 0, FILE_LEN, 0, 1), -1);
    assert_int_equal(peer_bytes(&f, "tcp"), 0);
    /* Remote WRITE alone: READs of the file land in it, WRITEs from it are refused. */
    assert_int_equal(ote_mem_alloc(f.e, 1u << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&w,
                                   &wonly),
                     OTE_OK);
    {
        ote_xfer_req_t req = {.op = OTE_OP_READ, .local_addr = w + 1, .segment = seg,
                              .remote_addr = 7, .length = 5000};
        ote_task_status_t st;
        ote_batch_h b;
        size_t first;

        assert_int_equal(ote_batch_create(f.e, 2, &b), OTE_OK);
        assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
        req.op = OTE_OP_WRITE;
        assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
        assert_int_equal(ote_batch_wait(b, 60000), OTE_OK);
        assert_int_equal(ote_batch_task_status(b, 0, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_COMPLETED);
        assert_int_equal(ote_test_check(w + 1, 7, 5000, 1), -1);
        assert_int_equal(ote_batch_task_status(b, 1, &st), OTE_OK);
        assert_int_equal(st.error, OTE_ERR_ACCESS);
        ote_batch_release(b);
    }
    assert_int_equal(peer_bytes(&f, "tcp"), 5000);
    assert_int_equal(file_check(f.a, 0, FILE_LEN, 0, 1), -1);
    assert_int_equal(ote_mem_free(f.e, wonly), OTE_OK);
    ote_segment_close(seg);
    fx_stop(&f, true);
    rails_env_clear();
}

/* OTE_FILE_REMOTE=ctl: inside the control messages, whatever the local access. */
static void test_rails_ctl_mode(void **state)
{
    fx_t f;
    ote_segment_h seg;

    (void)state;
    rails_env("tcp", "ctl");
    fx_start_access(&f, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE);
    seg = xopen(&f, "a", OTE_OK);
    roundtrip(&f, seg, f.a, 5, (1u << 20) + 9, 91);
    assert_int_equal(peer_bytes(&f, "tcp"), 0);
    ote_segment_close(seg);
    fx_stop(&f, true);
    rails_env_clear();
}

/*
 * auto, and the target's rails do not reach this engine (it has tcp only,
 * this engine cma only): by the control plane; rails: that status. (No
 * command segment either: the target's counters are not read.)
 */
static void test_rails_unreachable(void **state)
{
    fx_t f;
    ote_segment_h seg;

    (void)state;
    for (int rails = 0; rails < 2; rails++) {
        rails_env("tcp", rails ? "rails" : "auto");
        fx_start_tls(&f, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, "cma");
        seg = xopen(&f, "a", OTE_OK);
        if (rails) {
            assert_int_equal(xfer(&f, seg, OTE_OP_READ, 0, 0, 4096, 60000),
                             OTE_ERR_UNREACHABLE);
        } else {
            roundtrip(&f, seg, f.a, 77, (1u << 20) + 5, 95);
        }
        ote_segment_close(seg);
        fx_stop(&f, true);
        rails_env_clear();
    }
}

/* Short transfer and connect timeouts for the tests of a target that stops answering. */
static void short_timeouts(bool on)
{
    if (on) {
        setenv("OTE_XFER_TIMEOUT_MS", "1000", 1);
        setenv("OTE_CONNECT_TIMEOUT_MS", "1000", 1);
    } else {
        unsetenv("OTE_XFER_TIMEOUT_MS");
        unsetenv("OTE_CONNECT_TIMEOUT_MS");
    }
}

/*
 * A target stopped while FILE_IOs by rails wait: the initiator's tasks end
 * TIMEOUT, and once the target runs again it does no I/O for them (the
 * initiator closed their connections first). Neither the READ's file bytes
 * land in the initiator's memory, used again meanwhile, nor is the WRITE's
 * range read from that memory into the file.
 */
static void test_rails_late_dropped(void **state)
{
    ote_xfer_req_t req[2];
    ote_task_status_t st;
    ote_segment_h seg;
    ote_batch_h b;
    size_t first;
    fx_t f;

    (void)state;
    short_timeouts(true);
    setenv("OTE_RETRY_COUNT", "0", 1);
    rails_env("tcp", "rails");
    fx_start_access(&f, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE);
    seg = xopen(&f, "a", OTE_OK);
    roundtrip(&f, seg, f.a, 0, 4096, 81);
    roundtrip(&f, seg, f.a, 8192, 4096, 85);
    mp_stop_process(f.t.pid);
    ote_test_fill(f.local + 8192, 8192, 4096, 83);
    req[0] = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = f.local, .segment = seg,
                              .remote_addr = 0, .length = 4096};
    req[1] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = f.local + 8192, .segment = seg,
                              .remote_addr = 8192, .length = 4096};
    assert_int_equal(ote_batch_create(f.e, 2, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, req, 2, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(b, 120000), OTE_OK);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(ote_batch_task_status(b, first + i, &st), OTE_OK);
        assert_int_equal(st.state, OTE_TASK_TIMEOUT);
    }
    ote_batch_release(b);
    /* The application's memory in use again. */
    ote_test_fill(f.local, 0, 4096, 82);
    ote_test_fill(f.local + 8192, 8192, 4096, 84);
    kill(f.t.pid, SIGCONT);
    /* The target works off what it got while stopped (well within 2 s). */
    usleep(2000 * 1000);
    assert_int_equal(ote_test_check(f.local, 0, 4096, 82), -1);
    assert_int_equal(file_check(f.a, 8192, 4096, 8192, 85), -1);
    ote_segment_close(seg);
    fx_stop(&f, true);
    rails_env_clear();
    short_timeouts(false);
    unsetenv("OTE_RETRY_COUNT");
}

/*
 * A segment closed while its slices wait in the protocol pool (the target
 * stopped): they still end, and what their end reads of their rail (its
 * iface) is still there (the ASan pass sees the rest).
 */
static void test_close_in_flight(void **state)
{
    ote_xfer_req_t req;
    ote_task_status_t st;
    ote_segment_h seg;
    ote_batch_h b;
    size_t first;
    fx_t f;

    (void)state;
    short_timeouts(true);
    fx_start(&f);
    /* The first slices on its rails: their end looks up what the rail's iface is. */
    seg = xopen(&f, "a", OTE_OK);
    mp_stop_process(f.t.pid);
    req = (ote_xfer_req_t){.op = OTE_OP_READ, .local_addr = f.local, .segment = seg,
                           .remote_addr = 0, .length = 3u << 20};
    assert_int_equal(ote_batch_create(f.e, 1, &b), OTE_OK);
    assert_int_equal(ote_batch_submit(b, &req, 1, &first), OTE_OK);
    usleep(100 * 1000);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    kill(f.t.pid, SIGCONT);
    assert_int_equal(ote_batch_wait(b, 120000), OTE_OK);
    assert_int_equal(ote_batch_task_status(b, first, &st), OTE_OK);
    assert_int_not_equal(st.state, OTE_TASK_PENDING);
    ote_batch_release(b);
    fx_stop(&f, true);
    short_timeouts(false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data),          cmocka_unit_test(test_checks),
        cmocka_unit_test(test_directory),     cmocka_unit_test(test_unexport),
        cmocka_unit_test(test_truncate_unlink), cmocka_unit_test(test_target_gone),
        cmocka_unit_test(test_rails_tcp),       cmocka_unit_test(test_rails_uct_tcp),
        cmocka_unit_test(test_rails_refused),   cmocka_unit_test(test_rails_ctl_mode),
        cmocka_unit_test(test_rails_unreachable), cmocka_unit_test(test_rails_late_dropped),
        cmocka_unit_test(test_close_in_flight),
    };

    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
