/* The public API within one process: an engine transferring to itself over its transports. */
#include "self_fixture.h"

#include <ote/ote.h>
#include <poll.h>
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

typedef ote_test_self_t fx_t;

#define LEN (4u << 20)

static int setup(void **state)
{
    *state = ote_test_self_open(LEN, "cpu:0");
    return 0;
}

static int teardown(void **state)
{
    ote_test_self_close(*state);
    return 0;
}

static ote_task_status_t run_one(fx_t *f, ote_op_t op, void *local, uint64_t remote, size_t len)
{
    return ote_test_self_xfer(f, op, local, remote, len, 10000);
}

static void test_write_read_self(void **state)
{
    fx_t *f = *state;
    ote_task_status_t st;

    ote_test_fill(f->local, 0, LEN, 11);
    memset(f->remote, 0, LEN);
    st = run_one(f, OTE_OP_WRITE, f->local + 3, (uintptr_t)f->remote + 5, LEN - 8);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(st.transferred, LEN - 8);
    assert_memory_equal(f->remote + 5, f->local + 3, LEN - 8);
    assert_int_equal(f->remote[4], 0);
    assert_int_equal(f->remote[LEN - 3], 0);

    ote_test_fill(f->remote, 0, LEN, 12);
    memset(f->local, 0, LEN);
    st = run_one(f, OTE_OP_READ, f->local + 1, (uintptr_t)f->remote, LEN - 1);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_memory_equal(f->local + 1, f->remote, LEN - 1);
    assert_int_equal(f->local[0], 0);
}

static void test_remote_errors(void **state)
{
    fx_t *f = *state;
    ote_task_status_t st;

    ote_test_self_refusals(f, 10000);
    st = run_one(f, OTE_OP_READ, f->local, (uintptr_t)f->ro, 65536);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
}

static void test_submit_checks(void **state)
{
    fx_t *f = *state;
    uint8_t stack[64];
    ote_xfer_req_t r[2] = {
        {.op = OTE_OP_WRITE, .local_addr = f->local, .segment = f->self,
         .remote_addr = (uintptr_t)f->remote, .length = 64},
        {.op = OTE_OP_WRITE, .local_addr = stack, .segment = f->self,
         .remote_addr = (uintptr_t)f->remote, .length = 64},
    };
    ote_batch_h b;
    size_t first = 99;
    ote_task_status_t st;

    assert_int_equal(ote_batch_create(f->e, 0, &b), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_batch_create(f->e, 2, &b), OTE_OK);
    /* Unregistered local memory: the whole call fails, nothing submitted. */
    assert_int_equal(ote_batch_submit(b, r, 2, &first), OTE_ERR_NOT_REGISTERED);
    assert_int_equal(first, 99);
    assert_int_equal(ote_batch_task_status(b, 0, &st), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_OK);
    assert_int_equal(first, 0);
    assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_OK);
    assert_int_equal(first, 1);
    /* Capacity reached. */
    assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_ERR_BUSY);
    assert_int_equal(ote_batch_wait(b, 10000), OTE_OK);
    assert_int_equal(ote_batch_status(b, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(st.transferred, 128);
    assert_int_equal(ote_batch_task_status(b, 2, &st), OTE_ERR_INVALID_PARAM);
    r[0].length = 0;
    assert_int_equal(ote_batch_submit(b, r, 1, &first), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_batch_submit(NULL, r, 1, &first), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_batch_submit(b, NULL, 1, &first), OTE_ERR_INVALID_PARAM);
    ote_batch_release(b);
}

static void test_event_fd_and_notify(void **state)
{
    fx_t *f = *state;
    int fd  = ote_engine_event_fd(f->e);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ote_notif_t n[2];
    size_t count = 0;
    uint64_t v;

    assert_true(fd >= 0);
    while (read(fd, &v, sizeof(v)) > 0)
        ;
    (void)run_one(f, OTE_OP_WRITE, f->local, (uintptr_t)f->remote, 4096);
    assert_int_equal(poll(&p, 1, 5000), 1);
    while (read(fd, &v, sizeof(v)) > 0)
        ;
    assert_int_equal(ote_notify_send(f->e, f->self, "hello", 5), OTE_OK);
    assert_int_equal(poll(&p, 1, 5000), 1);
    assert_int_equal(ote_notify_recv(f->e, n, 2, &count), OTE_OK);
    assert_int_equal(count, 1);
    assert_int_equal(n[0].length, 5);
    assert_memory_equal(n[0].data, "hello", 5);
    assert_string_equal(n[0].from, ote_engine_name(f->e));
    assert_int_equal(ote_notify_recv(f->e, n, 2, &count), OTE_OK);
    assert_int_equal(count, 0);
    {
        char big[OTE_NOTIFY_MAX + 1] = {0};

        assert_int_equal(ote_notify_send(f->e, f->self, big, sizeof(big)),
                         OTE_ERR_INVALID_PARAM);
    }
}

static void test_segment_regions(void **state)
{
    fx_t *f = *state;
    ote_region_info_t info[1];
    size_t count = 0;

    assert_int_equal(ote_segment_refresh(f->self), OTE_OK);
    assert_int_equal(ote_segment_regions(f->self, info, 1, &count), OTE_OK);
    assert_int_equal(count, 3); /* local (engine-owned, no remote access), remote, ro */
    assert_int_equal(ote_segment_regions(f->self, NULL, 0, &count), OTE_OK);
    assert_int_equal(count, 3);
}

static void test_engine_errors(void **state)
{
    /* Nobody listens on port 1 of loopback: the store does not answer. */
    ote_engine_params_t p = {.listen_addr = "127.0.0.1:0", .metadata = "etcd://127.0.0.1:1"};
    ote_engine_h e;
    ote_segment_h s;
    void *addr;
    ote_mem_h m;

    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_STORE_UNAVAILABLE);
    p.metadata = "etcd:/127.0.0.1:2379";
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    p.metadata    = NULL;
    p.listen_addr = "not an address:99999";
    assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_INVALID_PARAM);
    e = ote_test_engine(NULL);
    assert_int_equal(ote_mem_alloc(e, 4096, "cpu:999", 0, &addr, &m), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_alloc(e, 4096, "cuda:0", 0, &addr, &m), OTE_ERR_INVALID_PARAM);
    assert_int_equal(ote_mem_alloc(e, 0, NULL, 0, &addr, &m), OTE_ERR_INVALID_PARAM);
    /* Nobody listens on port 1 of loopback. */
    assert_int_equal(ote_segment_open(e, "127.0.0.1:1", &s), OTE_ERR_NOT_FOUND);
    assert_int_equal(ote_segment_open(e, "127.0.0.1", &s), OTE_ERR_INVALID_PARAM);
    ote_engine_destroy(e);

    setenv("OTE_TLS", "rc_mlx5", 1);
    assert_int_equal(ote_engine_create(&p, &e) == OTE_OK, 0);
    unsetenv("OTE_TLS");

    /* A listen address another engine holds: OTE_ERR_IO (ote.h says so). */
    {
        ote_engine_h first = ote_test_engine(NULL);
        char taken[300];

        snprintf(taken, sizeof(taken), "%s", ote_engine_name(first));
        p.listen_addr = taken;
        assert_int_equal(ote_engine_create(&p, &e), OTE_ERR_IO);
        ote_engine_destroy(first);
    }
}

/* ote_segment_regions() lists a peer's regions in its registration order. */
static void test_regions_in_registration_order(void **state)
{
    ote_engine_h e = ote_test_engine(NULL);
    size_t page    = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *buf   = aligned_alloc(page, 3 * page);
    ote_mem_desc_t d[3];
    ote_mem_h m[3];
    ote_region_info_t info[4];
    ote_segment_h seg;
    size_t count;

    (void)state;
    assert_non_null(buf);
    /* highest address first, then the lowest, then the middle one */
    for (int i = 0; i < 3; i++) {
        size_t off = (size_t)((i + 2) % 3) * page;

        d[i] = (ote_mem_desc_t){.addr = buf + off, .length = page,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
        assert_int_equal(ote_mem_register(e, &d[i], 1, &m[i]), OTE_OK);
    }
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &seg), OTE_OK);
    assert_int_equal(ote_segment_regions(seg, info, 4, &count), OTE_OK);
    assert_int_equal(count, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(info[i].addr, (uintptr_t)d[i].addr);
    /* fewer slots than regions: the first registered */
    memset(info, 0, sizeof(info));
    assert_int_equal(ote_segment_regions(seg, info, 1, &count), OTE_OK);
    assert_int_equal(count, 3);
    assert_int_equal(info[0].addr, (uintptr_t)d[0].addr);
    assert_int_equal(info[1].addr, 0);
    /* the first one goes and comes back: now it is the last */
    assert_int_equal(ote_mem_deregister(e, m[0]), OTE_OK);
    assert_int_equal(ote_mem_register(e, &d[0], 1, &m[0]), OTE_OK);
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    assert_int_equal(ote_segment_regions(seg, info, 4, &count), OTE_OK);
    assert_int_equal(count, 3);
    assert_int_equal(info[0].addr, (uintptr_t)d[1].addr);
    assert_int_equal(info[1].addr, (uintptr_t)d[2].addr);
    assert_int_equal(info[2].addr, (uintptr_t)d[0].addr);
    assert_int_equal(info[2].length, page);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(ote_mem_deregister(e, m[i]), OTE_OK);
    ote_engine_destroy(e);
    free(buf);
}

/* The whole path over IPv6 loopback: control plane, descriptor, tcp data. */
static void test_ipv6(void **state)
{
    ote_engine_h e = ote_test_engine("[::1]:0");
    ote_segment_h seg;
    uint8_t *a, *b;
    ote_mem_h ma, mb;
    ote_xfer_req_t r;
    ote_batch_h batch;
    ote_task_status_t st;
    size_t first;

    assert_non_null(strstr(ote_engine_name(e), "[::1]:"));
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, 0, (void **)&a, &ma), OTE_OK);
    assert_int_equal(ote_mem_alloc(e, 1 << 20, NULL, OTE_ACCESS_REMOTE_WRITE, (void **)&b, &mb),
                     OTE_OK);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &seg), OTE_OK);
    ote_test_fill(a, 0, 1 << 20, 6);
    r = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = a, .segment = seg,
                         .remote_addr = (uintptr_t)b, .length = 1 << 20};
    assert_int_equal(ote_batch_create(e, 1, &batch), OTE_OK);
    assert_int_equal(ote_batch_submit(batch, &r, 1, &first), OTE_OK);
    assert_int_equal(ote_batch_wait(batch, 10000), OTE_OK);
    assert_int_equal(ote_batch_task_status(batch, 0, &st), OTE_OK);
    assert_int_equal(st.state, OTE_TASK_COMPLETED);
    assert_int_equal(ote_test_check(b, 0, 1 << 20, 6), -1);
    ote_batch_release(batch);
    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_free(e, ma), OTE_OK);
    assert_int_equal(ote_mem_free(e, mb), OTE_OK);
    ote_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_read_self),
        cmocka_unit_test(test_remote_errors),
        cmocka_unit_test(test_submit_checks),
        cmocka_unit_test(test_event_fd_and_notify),
        cmocka_unit_test(test_segment_regions),
    };
    const struct CMUnitTest solo[] = {cmocka_unit_test(test_engine_errors),
                                      cmocka_unit_test(test_ipv6),
                                      cmocka_unit_test(test_regions_in_registration_order)};
    int rc = cmocka_run_group_tests(tests, setup, teardown);

    return rc | cmocka_run_group_tests(solo, NULL, NULL);
}
