/*
 * A memory domain joins a running engine that has memory registered
 * (ote_engine_md_join, what a transport with a new domain goes through in
 * a join round): the published descriptor then lists it with an rkey for
 * every region, a peer's refreshed segment takes that descriptor and moves
 * data with every byte checked, registrations afterwards are published on
 * it too, and a join that fails leaves nothing on the domain and the
 * descriptor as it was. No component here brings a domain of its own, so
 * a fake one stands in and the data moves over tcp.
 */
#include "core/wire/desc.h"
#include "core/engine_int.h"
#include "fake_md.h"
#include "testlib.h"

#include <sys/mman.h>

#define LEN (1u << 20)

static ote_desc_t *engine_desc(ote_engine_h e)
{
    ote_buf_t buf = {0};
    ote_desc_t *d = NULL;

    assert_int_equal(ote_engine_desc_encode(e, &buf), OTE_OK);
    assert_int_equal(ote_desc_decode(buf.data, buf.len, &d), OTE_OK);
    free(buf.data);
    return d;
}

/* The region at addr carries an rkey on md index k naming exactly [addr, addr+len). */
static void has_rkey(const ote_desc_t *d, size_t k, uint64_t addr, size_t len)
{
    const ote_desc_region_t *r = ote_desc_find_region(d, addr, len);
    uint64_t key[2];
    size_t i;

    assert_non_null(r);
    for (i = 0; i < r->num_rkeys && r->rkeys[i].md_index != k; i++)
        ;
    assert_true(i < r->num_rkeys);
    assert_int_equal(r->rkeys[i].length, sizeof(key));
    memcpy(key, r->rkeys[i].data, sizeof(key));
    assert_true(key[0] == addr && key[1] == len);
}

static void test_engine_md_join(void **state)
{
    ote_engine_h e = ote_test_engine("127.0.0.1:0");
    fake_md_t good, bad;
    long counter = 0;
    ote_mem_h mlocal, mremote, mlater;
    ote_segment_h seg;
    ote_mem_desc_t d;
    ote_desc_t *desc;
    char *local, *remote, *later;
    size_t k;
    (void)state;

    fake_md_init(&good, "test:fake0", OTE_MD_FLAG_GRANTS_ACCESS, &counter);
    fake_md_init(&bad, "test:fake1", 0, &counter);
    assert_int_equal(ote_mem_alloc(e, LEN, NULL, 0, (void **)&local, &mlocal), OTE_OK);
    remote = mmap(NULL, 2 * LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(remote != MAP_FAILED);
    later = remote + LEN;
    d = (ote_mem_desc_t){.addr = remote, .length = LEN, .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(e, &d, 1, &mremote), OTE_OK);
    assert_int_equal(ote_segment_open(e, ote_engine_name(e), &seg), OTE_OK);
    k = e->facts.num_mds;

    /* A join whose first registration fails: nothing on it, nothing published. */
    bad.fail_at = counter + 1;
    assert_false(ote_engine_md_join(e, "test", "fake1", &bad.md));
    assert_int_equal(fake_md_live(&bad), 0);
    assert_int_equal(e->facts.num_mds, k);
    desc = engine_desc(e);
    assert_int_equal(desc->num_mds, k);
    ote_desc_free(desc);

    /* Joined: every region is registered on it and published with its rkey. */
    assert_true(ote_engine_md_join(e, "test", "fake0", &good.md));
    assert_int_equal(e->facts.num_mds, k + 1);
    assert_int_equal(fake_md_live(&good), 2);
    desc = engine_desc(e);
    assert_int_equal(desc->num_mds, k + 1);
    assert_string_equal(desc->mds[k], "test:fake0");
    has_rkey(desc, k, (uintptr_t)remote, LEN);
    has_rkey(desc, k, (uintptr_t)local, LEN);
    ote_desc_free(desc);

    /* The peer's segment takes the new descriptor and carries data. */
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    assert_true(ote_test_write_lands(e, seg, local, remote, LEN, 11, 20000));

    /* Registered afterwards: on the new domain too, and published. */
    d = (ote_mem_desc_t){.addr = later, .length = LEN, .access = OTE_ACCESS_REMOTE_WRITE};
    assert_int_equal(ote_mem_register(e, &d, 1, &mlater), OTE_OK);
    assert_int_equal(fake_md_live(&good), 3);
    desc = engine_desc(e);
    has_rkey(desc, k, (uintptr_t)later, LEN);
    ote_desc_free(desc);
    assert_int_equal(ote_segment_refresh(seg), OTE_OK);
    assert_true(ote_test_write_lands(e, seg, local, later, LEN, 12, 20000));

    assert_int_equal(ote_segment_close(seg), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mlater), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mremote), OTE_OK);
    assert_int_equal(ote_mem_free(e, mlocal), OTE_OK);
    ote_engine_destroy(e);
    assert_int_equal(fake_md_live(&good), 0);
    assert_int_equal(fake_md_live(&bad), 0);
    pthread_mutex_destroy(&good.lock);
    pthread_mutex_destroy(&bad.lock);
    munmap(remote, 2 * LEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_md_join),
    };

    setenv("OTE_TLS", "tcp", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
