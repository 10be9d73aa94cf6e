/*
 * RDMA ports read again while the engine runs (OTE_RDMA_POLL_MS), against
 * a copy of the sysfs fixture tree "multi" in a temporary directory whose
 * state files the test rewrites (mlx5_0:1 ACTIVE, mlx5_3:1 DOWN at first);
 * a device that appears while the engine runs; and what a port change does
 * to the rails on it.
 */
#include "core/engine.h"
#include "uct_ext/rdma/rdma.h"
#include "base/log.h"
#include "rdma_test.h"
#include "testlib.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

static char root[256];

static void state_write(const char *dev, const char *state)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/1/state", root, dev);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", state);
    assert_int_equal(fclose(f), 0);
}

static bool text_has(ote_engine_h e, const char *line)
{
    char *text = transports_text(e);
    bool found = strstr(text, line) != NULL;

    if (!found)
        fprintf(stderr, "missing: %s\nin:\n%s\n", line, text);
    free(text);
    return found;
}

#define MLX5_0_UP   "#     port mlx5_0:1   Ethernet, ACTIVE, selected: yes\n"
#define MLX5_0_DOWN "#     port mlx5_0:1   Ethernet, DOWN, selected: no (port state 1: DOWN)\n"
#define MLX5_3_UP   "#     port mlx5_3:1   Ethernet, ACTIVE, selected: yes\n"
#define MLX5_3_DOWN "#     port mlx5_3:1   Ethernet, DOWN, selected: no (port state 1: DOWN)\n"

static int setup(void **state)
{
    char cmd[600];

    (void)state;
    snprintf(root, sizeof(root), "/tmp/ote_rdma_poll.XXXXXX");
    assert_non_null(mkdtemp(root));
    snprintf(cmd, sizeof(cmd), "cp -R '%s/multi/.' '%s'", OTE_SYSFS_DIR, root);
    assert_int_equal(system(cmd), 0);
    setenv("OTE_SYSFS_ROOT", root, 1);
    setenv("OTE_TLS", "tcp", 1);
    setenv("OTE_NET_DEVICES", "all", 1);
    setenv("OTE_LOG_LEVEL", "warn", 1);
    setenv("OTE_AUTH_KEY", "test-rdma-poll-shared-key", 1);
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Discovery's view against sysfs: only the state files and the device list are read. */
static void test_changed(void **state)
{
    ote_rdma_t *rdma = NULL;
    char cmd[600];
    (void)state;

    assert_int_equal(ote_rdma_discover(root, &rdma), OTE_OK);
    assert_false(ote_rdma_changed(rdma));
    state_write("mlx5_0", "1: DOWN");
    assert_true(ote_rdma_changed(rdma));
    state_write("mlx5_0", "4: ACTIVE");
    assert_false(ote_rdma_changed(rdma));
    /* A state that does not parse counts as unreadable: a change from ACTIVE. */
    state_write("mlx5_0", "garbage");
    assert_true(ote_rdma_changed(rdma));
    state_write("mlx5_0", "4: ACTIVE");
    /* A device that appears, then goes. */
    snprintf(cmd, sizeof(cmd), "cp -R '%s/class/infiniband/mlx5_0' '%s/class/infiniband/mlx5_9'",
             root, root);
    assert_int_equal(system(cmd), 0);
    assert_true(ote_rdma_changed(rdma));
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/class/infiniband/mlx5_9'", root);
    assert_int_equal(system(cmd), 0);
    assert_false(ote_rdma_changed(rdma));
    ote_rdma_free(rdma);
}

/* One round at a time (no thread): what ote_info -d shows follows the state files. */
static void test_engine_poll(void **state)
{
    ote_engine_h e;
    (void)state;

    setenv("OTE_RDMA_POLL_MS", "0", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_RDMA_POLL_MS");
    assert_true(text_has(e, MLX5_0_UP));
    assert_true(text_has(e, MLX5_3_DOWN));
    state_write("mlx5_0", "1: DOWN");
    state_write("mlx5_3", "4: ACTIVE");
    assert_true(text_has(e, MLX5_0_UP)); /* not read again yet */
    assert_false(ote_engine_rdma_port_down(e, "mlx5_0:1"));
    assert_true(ote_engine_rdma_port_down(e, "mlx5_3:1"));
    ote_engine_rdma_poll(e);
    assert_true(text_has(e, MLX5_0_DOWN));
    assert_true(text_has(e, MLX5_3_UP));
    /* What rails built from now on are told (wireup pauses them on a port down). */
    assert_true(ote_engine_rdma_port_down(e, "mlx5_0:1"));
    assert_false(ote_engine_rdma_port_down(e, "mlx5_3:1"));
    assert_false(ote_engine_rdma_port_down(e, "eth0"));
    state_write("mlx5_0", "4: ACTIVE");
    state_write("mlx5_3", "1: DOWN");
    ote_engine_rdma_poll(e);
    assert_true(text_has(e, MLX5_0_UP));
    assert_true(text_has(e, MLX5_3_DOWN));
    ote_engine_destroy(e);
}

/* The engine's thread reads them on its own (bound generous: the machine may be loaded). */
static void test_engine_thread(void **state)
{
    ote_engine_h e;
    bool seen = false;
    (void)state;

    setenv("OTE_RDMA_POLL_MS", "10", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_RDMA_POLL_MS");
    state_write("mlx5_3", "4: ACTIVE");
    for (int i = 0; i < 2000 && !seen; i++) {
        char *text = transports_text(e);

        seen = strstr(text, MLX5_3_UP) != NULL;
        free(text);
        if (!seen)
            usleep(10000);
    }
    assert_true(seen);
    state_write("mlx5_3", "1: DOWN");
    ote_engine_destroy(e);
}

/* One round of the monitor with stderr captured: what it logged (malloc'd). */
static char *poll_logged(ote_engine_h e)
{
    char path[] = "/tmp/ote_rdma_poll_log.XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    char *text;
    off_t n;

    assert_true(fd >= 0 && saved >= 0);
    unlink(path);
    fflush(stderr);
    dup2(fd, 2);
    ote_engine_rdma_poll(e);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    n = lseek(fd, 0, SEEK_END);
    assert_true(n >= 0);
    text = calloc(1, (size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(pread(fd, text, (size_t)n, 0), n);
    close(fd);
    return text;
}

static void log_has(const char *log, const char *what)
{
    if (strstr(log, what) == NULL)
        fail_msg("missing: %s\nin:\n%s", what, log);
}

/*
 * A device that appears while the engine runs: the round reads it as a new
 * port and asks every transport for its devices again (UCT's too); none
 * runs on a fixture port here, and the log says so. Gone again, it is told.
 */
static void test_new_device_tried(void **state)
{
    char cmd[600], *log;
    ote_engine_h e;
    (void)state;

    setenv("OTE_RDMA_POLL_MS", "0", 1);
    setenv("OTE_TLS", "all", 1);
    setenv("OTE_LOG_LEVEL", "debug", 1);
    e = ote_test_engine("127.0.0.1:0");
    setenv("OTE_LOG_LEVEL", "warn", 1);
    setenv("OTE_TLS", "tcp", 1);
    unsetenv("OTE_RDMA_POLL_MS");
    snprintf(cmd, sizeof(cmd), "cp -R '%s/class/infiniband/mlx5_0' '%s/class/infiniband/mlx5_9'",
             root, root);
    assert_int_equal(system(cmd), 0);
    log = poll_logged(e);
    log_has(log, "RDMA ports changed: every transport is asked for its devices again");
    log_has(log, "rdma mlx5_9:1: new port, ACTIVE");
    log_has(log, "rdma mlx5_9:1: usable now, but no transport opened on it: no transport here "
                 "runs on it (UCX offers no rc, dc or ud transport on it)");
    free(log);
    assert_true(text_has(e, "#   device mlx5_9: 1 port(s)\n"));
    assert_false(ote_engine_rdma_port_down(e, "mlx5_9:1"));
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/class/infiniband/mlx5_9'", root);
    assert_int_equal(system(cmd), 0);
    log = poll_logged(e);
    log_has(log, "rdma mlx5_9:1: gone");
    free(log);
    ote_log_set_level(OTE_LOG_WARN);
    ote_engine_destroy(e);
}

/* The rail's state as ote_segment_rails() tells it. */
static ote_rail_info_t rail0(ote_segment_h seg)
{
    ote_rail_info_t info[4];
    size_t n = 0;

    assert_int_equal(ote_segment_rails(seg, info, 4, &n), OTE_OK);
    assert_true(n >= 1);
    return info[0];
}

/*
 * A port down pauses the rails on its device: a transfer finds no rail and
 * ends REMOTE_DISCONNECT (a link down passes; never UNREACHABLE, which is
 * for configurations that cannot reach); the port up, the rail is probed by the next transfer and carries again.
 * (A tcp rail stands in for an RDMA one: no RDMA device here.)
 */
static void test_port_event_pauses_rails(void **state)
{
    const size_t len = 1 << 20;
    ote_engine_h e   = ote_test_engine("127.0.0.1:0");
    ote_segment_h seg;
    ote_task_status_t st;
    ote_mem_desc_t d;
    ote_mem_h mlocal, mremote;
    char *local, *remote;
    char dev[64];
    (void)state;

    assert_int_equal(ote_mem_alloc(e, len, NULL, 0, (void **)&local, &mlocal), OTE_OK);
    remote = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(remote != MAP_FAILED);
    d = (ote_mem_desc_t){.addr = remote, .length = len, .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(e, &d, 1, &mremote), OTE_OK);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &seg), OTE_OK);
    snprintf(dev, sizeof(dev), "%s", rail0(seg).device);

    ote_engine_rdma_port_event(e, dev, false);
    assert_int_equal(rail0(seg).state, OTE_RAIL_COOLING);
    assert_true(rail0(seg).cooldown_ms == UINT64_MAX);
    ote_test_fill(local, 0, len, 7);
    assert_int_equal(ote_test_xfer(e, seg, OTE_OP_WRITE, local, (uintptr_t)remote, len, 20000,
                                   &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_FAILED);
    assert_int_equal(st.error, OTE_ERR_REMOTE_DISCONNECT);
    assert_int_equal(rail0(seg).state, OTE_RAIL_COOLING);

    ote_engine_rdma_port_event(e, dev, true);
    assert_int_equal(ote_test_xfer(e, seg, OTE_OP_WRITE, local, (uintptr_t)remote, len, 20000,
                                   &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(remote, 0, len, 7), -1);
    assert_int_equal(rail0(seg).state, OTE_RAIL_ACTIVE);

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mremote), OTE_OK);
    assert_int_equal(ote_mem_free(e, mlocal), OTE_OK);
    munmap(remote, len);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changed),
        cmocka_unit_test(test_engine_poll),
        cmocka_unit_test(test_engine_thread),
        cmocka_unit_test(test_new_device_tried),
        cmocka_unit_test(test_port_event_pauses_rails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
