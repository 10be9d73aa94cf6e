/*
 * Fixture of the staging tests on the CUDA test double (test_mp_cuda_stage,
 * test_mp_cuda_rstage): a test target, an engine of this process that
 * stages through 1 MiB chunks, 4 per slice, with the target's segment open,
 * and local memory at a location of the test's choice.
 */
#ifndef OTE_MP_STAGE_FX_H
#define OTE_MP_STAGE_FX_H

#include "mp_util.h"
#include "proto/stage.h"

typedef struct {
    ote_test_target_t target;
    bool              target_up;
    ote_engine_h      e;
    ote_segment_h     seg;
    void             *buf; /* len bytes at location; NULL when none was asked for */
    ote_mem_h         mem;
} stage_fx_t;

/* An engine on 127.0.0.1 with the transports of tls and staging as above. */
static inline ote_engine_h stage_fx_engine(const char *tls)
{
    ote_engine_h e;

    setenv("OTE_TLS", tls, 1);
    setenv("OTE_STAGE_CHUNK_SIZE", "1m", 1);
    setenv("OTE_STAGE_SLOTS", "4", 1);
    e = ote_test_engine("127.0.0.1:0");
    unsetenv("OTE_TLS");
    unsetenv("OTE_STAGE_CHUNK_SIZE");
    unsetenv("OTE_STAGE_SLOTS");
    return e;
}

/* Start the target with args, under the environment the caller has set. */
static inline void stage_fx_start_target(stage_fx_t *f, const char *const *args)
{
    assert_int_equal(ote_test_target_start(&f->target, NULL, args), 0);
    f->target_up = true;
}

/* Stop the target if it still runs (a teardown calls this after a failed test). */
static inline void stage_fx_stop_target(stage_fx_t *f)
{
    if (f->target_up)
        ote_test_target_stop(&f->target);
    f->target_up = false;
}

/* Teardown of a test with a stage_fx_t as its state: the target stops, whatever the test did. */
static inline int stage_fx_teardown(void **state)
{
    stage_fx_stop_target(*state);
    return 0;
}

/* A cmocka test f on the fixture at fx_p, stopped by stage_fx_teardown. */
#define stage_fx_test(f, fx_p) \
    cmocka_unit_test_prestate_setup_teardown(f, NULL, stage_fx_teardown, fx_p)

/* SIGKILL the target mid-test. */
static inline void stage_fx_kill_target(stage_fx_t *f)
{
    ote_test_target_kill(&f->target);
    f->target_up = false;
}

/*
 * With the target started: the engine, len bytes of local memory at
 * location (none when location is NULL), and the target's segment open.
 */
static inline void stage_fx_open(stage_fx_t *f, const char *tls, const char *location,
                                 size_t len)
{
    f->e   = stage_fx_engine(tls);
    f->buf = NULL;
    f->mem = NULL;
    if (location != NULL)
        assert_int_equal(ote_mem_alloc(f->e, len, location, 0, &f->buf, &f->mem), OTE_OK);
    assert_int_equal(ote_segment_open(f->e, f->target.name, &f->seg), OTE_OK);
}

/*
 * Ends the fixture: the segment closes cleanly while the target lives (a
 * dead one's may not; a test that closed it sets f->seg NULL), then the
 * target stops, the memory and engine go.
 */
static inline void stage_fx_close(stage_fx_t *f)
{
    if (f->seg == NULL)
        ; /* the test closed it */
    else if (f->target_up)
        assert_int_equal(ote_segment_close(f->seg), OTE_OK);
    else
        ote_segment_close(f->seg);
    stage_fx_stop_target(f);
    if (f->mem != NULL)
        assert_int_equal(ote_mem_free(f->e, f->mem), OTE_OK);
    ote_engine_destroy(f->e);
}

/* One request in a batch of its own, waited for up to 30 s: the task's status. */
static inline ote_task_status_t stage_fx_run1(stage_fx_t *f, const ote_xfer_req_t *r)
{
    ote_task_status_t st;

    assert_int_equal(ote_test_batch_run(f->e, r, 1, 30000, &st), OTE_OK);
    return st;
}

/* st completed with len bytes moved; what names the transfer when it did not. */
static inline void stage_fx_expect_done(ote_task_status_t st, size_t len, const char *what)
{
    if (st.state != OTE_TASK_COMPLETED)
        fail_msg("%s: %s", what, ote_status_string(st.error));
    assert_int_equal(st.transferred, len);
}

/*
 * n WRITEs in one batch, request i of len / n bytes from buf + i * (len / n)
 * to the same offset of the target's region 0; each completes whole.
 */
static inline void stage_fx_write_slices(stage_fx_t *f, size_t len, size_t n)
{
    ote_xfer_req_t r[16];
    ote_task_status_t st[16];

    assert_true(n <= 16);
    for (size_t i = 0; i < n; i++)
        r[i] = (ote_xfer_req_t){.op = OTE_OP_WRITE, .local_addr = (char *)f->buf + i * (len / n),
                                .segment = f->seg,
                                .remote_addr = f->target.addr[0] + i * (len / n),
                                .length = len / n};
    assert_int_equal(ote_test_batch_run(f->e, r, n, 30000, st), OTE_OK);
    for (size_t i = 0; i < n; i++)
        stage_fx_expect_done(st[i], len / n, "one of several writes");
}

#endif
