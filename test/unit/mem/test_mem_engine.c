/*
 * The memory API on a real engine: location strings and detection,
 * engine-owned memory (page-aligned, NUMA-bound, registered in the same
 * call), and OTE_RCACHE_* read from the environment.
 */
#include "core/engine_int.h"
#include "testlib.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RW (OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)

static int setup(void **state)
{
    *state = ote_test_engine(NULL);
    return 0;
}

static int teardown(void **state)
{
    ote_engine_destroy(*state);
    return 0;
}

static void test_invalid_locations(void **state)
{
    ote_engine_h e = *state;
    static const char *bad[] = {"cpu:99", "cuda:0", "gpu:1", "cpu:", "cpu:-1", "cpu:0x",
                                "", "cpu", "cuda:", "cpu:0:1",
                                "cpu:000000000000000000000000000000000000000001"};
    size_t len = 65536;
    void *buf  = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(buf != MAP_FAILED);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ote_mem_desc_t d = {.addr = buf, .length = len, .location = bad[i], .access = RW};
        ote_mem_h mem    = NULL;
        void *addr       = NULL;

        assert_int_equal(ote_mem_register(e, &d, 1, &mem), OTE_ERR_INVALID_PARAM);
        assert_null(mem);
        assert_int_equal(ote_mem_alloc(e, 4096, bad[i], RW, &addr, &mem), OTE_ERR_INVALID_PARAM);
        assert_null(addr);
    }
    /* One bad location fails the whole batch. */
    {
        ote_mem_desc_t d[2] = {{.addr = buf, .length = 4096, .location = "cpu:0"},
                               {.addr = (char *)buf + 4096, .length = 4096, .location = "gpu:1"}};
        ote_mem_h mems[2];

        assert_int_equal(ote_mem_register(e, d, 2, mems), OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_mem_table_count(e->facts.regions), 0);
    }
    munmap(buf, len);
}

static int page_node(void *p)
{
    int node = -1;

    if (syscall(SYS_get_mempolicy, &node, NULL, 0UL, p, 3 /* MPOL_F_NODE|MPOL_F_ADDR */) != 0)
        return -1;
    return node;
}

static void test_detect_location(void **state)
{
    ote_engine_h e = *state;
    size_t len     = 1 << 20;
    char *buf      = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ote_mem_desc_t d[2];
    ote_mem_h mem[2];
    char expect[32];

    assert_true(buf != MAP_FAILED);
    memset(buf, 1, len);
    d[0] = (ote_mem_desc_t){.addr = buf, .length = len / 2, .location = NULL, .access = RW};
    d[1] = (ote_mem_desc_t){.addr = buf + len / 2, .length = len / 2, .location = "*"};
    assert_int_equal(ote_mem_register(e, d, 2, mem), OTE_OK);
    snprintf(expect, sizeof(expect), "cpu:%d", page_node(buf));
    assert_string_equal(mem[0]->location, expect);
    assert_int_equal(mem[0]->mem_type, OTE_MEM_TYPE_HOST);
    snprintf(expect, sizeof(expect), "cpu:%d", page_node(buf + len / 2));
    assert_string_equal(mem[1]->location, expect);
    assert_true(ote_mem_numa_node_online(atoi(mem[0]->location + 4)));
    /* Given explicitly, the location is kept as given. */
    {
        ote_mem_desc_t x = {.addr = buf, .length = 4096, .location = "cpu:0"};
        ote_mem_h m;

        assert_int_equal(ote_mem_register(e, &x, 1, &m), OTE_OK);
        assert_string_equal(m->location, "cpu:0");
        assert_int_equal(ote_mem_deregister(e, m), OTE_OK);
    }
    assert_int_equal(ote_mem_deregister(e, mem[0]), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mem[1]), OTE_OK);
    assert_int_equal(ote_mem_deregister(e, mem[1]), OTE_ERR_NOT_REGISTERED);
    munmap(buf, len);
}

static void test_alloc_owned(void **state)
{
    ote_engine_h e = *state;
    long page      = sysconf(_SC_PAGESIZE);
    static const char *locs[] = {NULL, "*", "cpu:0"};

    for (size_t i = 0; i < 3; i++) {
        size_t len = 3 * (size_t)page + 123; /* not a page multiple */
        ote_region_t *got;
        ote_mem_h mem;
        char *addr;

        assert_int_equal(ote_mem_alloc(e, len, locs[i], RW, (void **)&addr, &mem), OTE_OK);
        assert_int_equal((uintptr_t)addr % (uintptr_t)page, 0);
        assert_true(mem->owned);
        assert_int_equal(mem->length, len);
        /* Registered in the same call: a lookup finds it. */
        assert_int_equal(ote_mem_region_acquire(e->facts.regions, (uintptr_t)addr, len,
                                                OTE_ACCESS_REMOTE_WRITE, &got),
                         OTE_OK);
        assert_ptr_equal(got, mem);
        ote_mem_region_put(got);
        /* Every byte usable; a bound allocation lands on its node. */
        ote_test_fill(addr, 0, len, 42 + i);
        assert_int_equal(ote_test_check(addr, 0, len, 42 + i), -1);
        if (locs[i] != NULL && strcmp(locs[i], "cpu:0") == 0) {
            assert_string_equal(mem->location, "cpu:0");
            for (size_t off = 0; off < len; off += (size_t)page)
                assert_int_equal(page_node(addr + off), 0);
        } else {
            assert_int_equal(strncmp(mem->location, "cpu:", 4), 0);
        }
        /* Engine-owned memory goes with ote_mem_free only. */
        assert_int_equal(ote_mem_deregister(e, mem), OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_mem_free(e, mem), OTE_OK);
        assert_int_equal(ote_mem_region_acquire(e->facts.regions, (uintptr_t)addr, 1, 0, &got),
                         OTE_ERR_NOT_REGISTERED);
    }
    {
        void *addr;
        ote_mem_h mem;

        assert_int_equal(ote_mem_alloc(e, 0, NULL, 0, &addr, &mem), OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_mem_alloc(e, 4096, NULL, 1u << 9, &addr, &mem),
                         OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_mem_table_count(e->facts.regions), 0);
    }
    /* A user registration is not freed with ote_mem_free. */
    {
        char buf[128];
        ote_mem_desc_t d = {.addr = buf, .length = sizeof(buf)};
        ote_mem_h mem;

        assert_int_equal(ote_mem_register(e, &d, 1, &mem), OTE_OK);
        assert_int_equal(ote_mem_free(e, mem), OTE_ERR_INVALID_PARAM);
        assert_int_equal(ote_mem_deregister(e, mem), OTE_OK);
    }
}

/* The engine's cache follows OTE_RCACHE_ENABLE and keeps entries when hooked. */
static void rcache_env(bool enable)
{
    ote_mem_rcache_stats_t s;
    ote_engine_h e;
    size_t len = 1 << 20;
    char *buf  = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    assert_true(buf != MAP_FAILED);
    setenv("OTE_RCACHE_ENABLE", enable ? "y" : "n", 1);
    e = ote_test_engine(NULL);
    unsetenv("OTE_RCACHE_ENABLE");
    for (int i = 0; i < 16; i++) {
        ote_mem_desc_t d = {.addr = buf + i * 65536, .length = 65536, .access = RW};
        ote_mem_h m;

        assert_int_equal(ote_mem_register(e, &d, 1, &m), OTE_OK);
        assert_int_equal(ote_mem_deregister(e, m), OTE_OK);
        assert_int_equal(ote_mem_register(e, &d, 1, &m), OTE_OK);
        assert_int_equal(ote_mem_deregister(e, m), OTE_OK);
    }
    ote_mem_table_rcache_stats(e->facts.regions, &s);
    if (!enable) {
        assert_false(s.retains);
        assert_int_equal(s.hits, 0);
        assert_int_equal(s.misses, 32);
        assert_int_equal(s.entries, 0);
    } else if (s.retains) {
        assert_int_equal(s.hits, 16);
        assert_int_equal(s.misses, 16);
        assert_int_equal(s.unreferenced, 16);
        /* Unmapping the memory drops what was kept of it. */
        munmap(buf, len);
        buf = NULL;
        ote_mem_table_rcache_stats(e->facts.regions, &s);
        assert_int_equal(s.unreferenced, 0);
    }
    if (buf != NULL)
        munmap(buf, len);
    ote_engine_destroy(e);
}

static void test_rcache_env_off(void **state)
{
    rcache_env(false);
}

static void test_rcache_env_on(void **state)
{
    rcache_env(true);
}

enum { MEMFD_ROUNDS = 20000 };

/* Allocate and free host memory in a loop; count allocations whose memfd is not theirs. */
static void *memfd_churn(void *arg)
{
    long *bad = arg;

    for (int i = 0; i < MEMFD_ROUNDS; i++) {
        size_t len = 0;
        void *p;
        struct stat st;
        unsigned char b = 0, mark = (unsigned char)(i | 1);
        int fd;

        if (ote_mem_host_alloc(65536, -1, &p, &len) != OTE_OK) {
            (*bad)++;
            continue;
        }
        fd = ote_mem_host_memfd(p);
        ((volatile unsigned char *)p)[100] = mark;
        if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size != len ||
            pread(fd, &b, 1, 100) != 1 || b != mark)
            (*bad)++;
        ote_mem_host_free(p, len);
    }
    return NULL;
}

/*
 * Threads that allocate and free at once: each allocation's memfd is the
 * one behind its pages (a free that unmapped before it left the list could
 * take the entry of a new allocation at the same address and close its fd).
 */
static void test_memfd_alloc_free_threads(void **state)
{
    long bad[2] = {0, 0};
    pthread_t th;
    int probe;
    size_t len;
    void *p;

    (void)state;
    assert_int_equal(ote_mem_host_alloc(4096, -1, &p, &len), OTE_OK);
    probe = ote_mem_host_memfd(p);
    ote_mem_host_free(p, len);
    if (probe < 0)
        skip(); /* no memfd here: nothing to mix up */
    assert_int_equal(pthread_create(&th, NULL, memfd_churn, &bad[1]), 0);
    memfd_churn(&bad[0]);
    pthread_join(th, NULL);
    if (bad[0] + bad[1] > 0)
        fail_msg("%ld of %d allocations had another allocation's memfd or none",
                 bad[0] + bad[1], 2 * MEMFD_ROUNDS);
}

/*
 * The memfd behind engine memory cannot be opened again for writing by
 * another process that holds a descriptor of it (shm hands a read-only
 * one to peers of a read-only region): the file is 0400. Run as root, the
 * child gives up root first (a peer without it; root may override file
 * permissions, and could write into this process anyway).
 */
static void test_memfd_not_reopened_writable(void **state)
{
    size_t len;
    void *p;
    int fd, status;
    struct stat st;
    pid_t pid;

    (void)state;
    assert_int_equal(ote_mem_host_alloc(65536, -1, &p, &len), OTE_OK);
    fd = ote_mem_host_memfd(p);
    if (fd < 0) {
        ote_mem_host_free(p, len);
        skip(); /* no memfd here: nothing is handed to peers */
    }
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0400);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char path[64];
        int rw;

        if (geteuid() == 0 &&
            (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0 ||
             prctl(PR_SET_DUMPABLE, 1) != 0))
            _exit(2);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        rw = open(path, O_RDWR);
        _exit(rw < 0 && errno == EACCES ? 0 : 1);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The owner's own mapping still writes, and the file holds it. */
    ((volatile unsigned char *)p)[7] = 0xa5;
    {
        unsigned char b = 0;

        assert_int_equal(pread(fd, &b, 1, 7), 1);
        assert_int_equal(b, 0xa5);
    }
    ote_mem_host_free(p, len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_invalid_locations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_detect_location, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_owned, setup, teardown),
        cmocka_unit_test(test_rcache_env_off),
        cmocka_unit_test(test_rcache_env_on),
        cmocka_unit_test(test_memfd_alloc_free_threads),
        cmocka_unit_test(test_memfd_not_reopened_writable),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
