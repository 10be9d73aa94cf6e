/*
 * base/util.h: the growth helpers of arrays and rings (ote_array_reserve,
 * ote_ring_grow), from no capacity, past a first capacity of 0, and sizes
 * past SIZE_MAX refused without a change; mappings placed for huge pages
 * (ote_mmap_huge); base/pattern.h's word-at-a-time fill and check against
 * the pattern's definition byte by byte; a connect that is refused told
 * from one that has no route (ote_socket_refuses); a name lookup bounded
 * in time while the name service does not answer (ote_sockaddr_resolve).
 */
#define _GNU_SOURCE 1 /* unshare; as config.h defines it */
#include "base/pattern.h"
#include "base/util.h"
#include "testlib.h"

#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

/* From nothing, with first capacities of 8 and of 0: room for need, contents kept. */
static void test_array_reserve_grows(void **state)
{
    size_t firsts[] = {8, 0, 1};

    (void)state;
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++) {
        uint32_t *a = NULL;
        size_t cap  = 0;

        for (uint32_t i = 0; i < 1000; i++) {
            assert_int_equal(ote_array_reserve((void **)&a, &cap, i + 1, sizeof(*a), firsts[f]),
                             OTE_OK);
            assert_true(cap >= i + 1);
            a[i] = i * 7u;
        }
        for (uint32_t i = 0; i < 1000; i++)
            assert_int_equal(a[i], i * 7u);
        /* Room already there: nothing moves. */
        {
            uint32_t *before = a;
            size_t cap_before = cap;

            assert_int_equal(ote_array_reserve((void **)&a, &cap, 10, sizeof(*a), firsts[f]),
                             OTE_OK);
            assert_ptr_equal(a, before);
            assert_int_equal(cap, cap_before);
        }
        free(a);
    }
}

/* A first capacity of 0 asked for one element gets exactly one. */
static void test_array_reserve_first_zero(void **state)
{
    uint64_t *a = NULL;
    size_t cap  = 0;

    (void)state;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 1, sizeof(*a), 0), OTE_OK);
    assert_int_equal(cap, 1);
    a[0] = 42;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 3, sizeof(*a), 0), OTE_OK);
    assert_int_equal(cap, 4);
    assert_int_equal(a[0], 42);
    free(a);
}

/* Sizes past SIZE_MAX: OTE_ERR_NO_MEMORY, the array and its capacity unchanged. */
static void test_array_reserve_overflow(void **state)
{
    uint64_t *a = NULL;
    size_t cap  = 0;

    (void)state;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, 4, sizeof(*a), 4), OTE_OK);
    a[3] = 9;
    assert_int_equal(ote_array_reserve((void **)&a, &cap, SIZE_MAX / 4, sizeof(*a), 4),
                     OTE_ERR_NO_MEMORY);
    assert_int_equal(ote_array_reserve((void **)&a, &cap, SIZE_MAX, 1, 4), OTE_ERR_NO_MEMORY);
    assert_int_equal(cap, 4);
    assert_int_equal(a[3], 9);
    free(a);
}

/* A ring that wrapped keeps its order when it grows, from a first capacity of 0 too. */
static void test_ring_grow_order(void **state)
{
    size_t firsts[] = {4, 0};

    (void)state;
    for (size_t f = 0; f < sizeof(firsts) / sizeof(firsts[0]); f++) {
        int *r       = NULL;
        size_t cap   = 0, head = 0, count = 0;
        int next_in  = 0, next_out = 0;

        for (int round = 0; round < 200; round++) {
            /* Push three, pop two: the ring wraps and grows as it fills. */
            for (int k = 0; k < 3; k++) {
                if (count == cap)
                    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, count, sizeof(*r),
                                                   firsts[f]),
                                     OTE_OK);
                assert_true(count < cap);
                r[(head + count++) % cap] = next_in++;
            }
            for (int k = 0; k < 2; k++) {
                assert_int_equal(r[head], next_out++);
                head = (head + 1) % cap;
                count--;
            }
        }
        for (size_t i = 0; i < count; i++)
            assert_int_equal(r[(head + i) % cap], next_out + (int)i);
        free(r);
    }
}

/* A ring whose doubled size passes SIZE_MAX is refused and left as it was. */
static void test_ring_grow_overflow(void **state)
{
    int *r      = NULL;
    size_t cap  = 0, head = 0;

    (void)state;
    /* Two elements of SIZE_MAX / 2 + 1 bytes do not fit in a size_t. */
    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 0, SIZE_MAX / 2 + 1, 2),
                     OTE_ERR_NO_MEMORY);
    assert_null(r);
    assert_int_equal(cap, 0);
    assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 0, sizeof(*r), 2), OTE_OK);
    r[0] = 5;
    head = 0;
    {
        size_t big = cap;

        cap = SIZE_MAX / 2 + 1; /* doubling it would pass SIZE_MAX */
        assert_int_equal(ote_ring_grow((void **)&r, &cap, &head, 1, sizeof(*r), 2),
                         OTE_ERR_NO_MEMORY);
        assert_int_equal(cap, SIZE_MAX / 2 + 1);
        cap = big;
    }
    assert_int_equal(r[0], 5);
    free(r);
}

/* Whether [p, p + len) is mapped at all (msync fails with ENOMEM where it is not). */
static bool mapped(const void *p, size_t len)
{
    return msync((void *)p, len, MS_ASYNC) == 0;
}

/* The pages of the mapping at p that the kernel maps whole, in kB (smaps' *PmdMapped). */
static long pmd_mapped_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[256];
    bool in = false;
    long kb = 0, v;

    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;

        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = lo == (uintptr_t)p;
            continue;
        }
        if (in && (sscanf(line, "AnonHugePages: %ld kB", &v) == 1 ||
                   sscanf(line, "ShmemPmdMapped: %ld kB", &v) == 1))
            kb += v;
    }
    fclose(f);
    return kb;
}

/* Whether the host's THP policy file names one of the given modes as chosen. */
static bool thp_policy(const char *file, const char *const *modes)
{
    FILE *f = fopen(file, "r");
    char buf[256] = "";
    bool yes = false;

    if (f == NULL)
        return false;
    if (fgets(buf, sizeof(buf), f) != NULL) {
        for (const char *const *m = modes; *m != NULL; m++)
            yes |= strstr(buf, *m) != NULL;
    }
    fclose(f);
    return yes;
}

/*
 * Large mappings start on a 2 MiB boundary with nothing of the reservation
 * left around them (whatever their length), anonymous and memfd alike, and hold what is written;
 * where the host's policy gives huge pages on advice, they get them. Small
 * ones are plain mappings.
 */
static void test_mmap_huge(void **state)
{
    const char *anon_modes[]  = {"[always]", "[madvise]", NULL};
    const char *shmem_modes[] = {"[always]", "[within_size]", "[advise]", NULL};
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    /* The last: not a page multiple (a peer's region an shm map takes whole). */
    size_t lens[] = {OTE_HUGE_ALIGN * 2 + page, OTE_HUGE_ALIGN * 4, OTE_HUGE_ALIGN * 3 + 5};
    uint8_t *p;

    (void)state;
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t len = lens[i];
        int fd     = (int)syscall(SYS_memfd_create, "test-util", MFD_CLOEXEC);

        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, (off_t)len), 0);
        for (int shared = 0; shared < 2; shared++) {
            p = ote_mmap_huge(len, PROT_READ | PROT_WRITE,
                              shared ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, shared ? fd : -1);
            assert_true(p != MAP_FAILED);
            assert_int_equal((uintptr_t)p % OTE_HUGE_ALIGN, 0);
            assert_true(mapped(p, len));
            assert_false(mapped(p - page, page));
            assert_false(mapped(p + ((len + page - 1) & ~(page - 1)), page));
            memset(p, 0x5a, len);
            if (shared) {
                uint8_t b = 0;

                assert_int_equal(pread(fd, &b, 1, (off_t)len - 1), 1);
                assert_int_equal(b, 0x5a);
            }
            if (thp_policy(shared ? "/sys/kernel/mm/transparent_hugepage/shmem_enabled"
                                  : "/sys/kernel/mm/transparent_hugepage/enabled",
                           shared ? shmem_modes : anon_modes))
                assert_true(pmd_mapped_kb(p) >= (long)(OTE_HUGE_ALIGN >> 10));
            else
                printf("# %s: no huge pages on advice on this host, alignment checked only\n",
                       shared ? "memfd" : "anonymous");
            assert_int_equal(munmap(p, len), 0);
        }
        close(fd);
    }
    p = ote_mmap_huge(3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    assert_true(p != MAP_FAILED);
    p[3 * page - 1] = 1;
    assert_int_equal(munmap(p, 3 * page), 0);
    /* A failed mapping leaves errno as mmap does, and no reservation behind. */
    errno = 0;
    assert_true(ote_mmap_huge(OTE_HUGE_ALIGN, PROT_READ, MAP_SHARED, -1) == MAP_FAILED);
    assert_int_equal(errno, EBADF);
}

/*
 * ote_pattern_fill and ote_pattern_check work a word at a time between
 * unaligned ends: every start offset and length around a few words gives
 * the bytes ote_pattern_byte defines, and check finds the first wrong byte
 * wherever it lies (head, word, tail), or none.
 */
static void test_pattern_words(void **state)
{
    uint8_t buf[64 + 2], want[64];
    const uint64_t seeds[] = {0, 0x5eed, UINT64_MAX};

    (void)state;
    for (size_t s = 0; s < sizeof(seeds) / sizeof(seeds[0]); s++) {
        for (uint64_t off = 0; off < 24; off++) {
            for (size_t len = 0; len <= 40; len++) {
                memset(buf, 0xa5, sizeof(buf));
                ote_pattern_fill(buf + 1, off, len, seeds[s]);
                for (size_t i = 0; i < len; i++)
                    want[i] = ote_pattern_byte(seeds[s], off + i);
                assert_memory_equal(buf + 1, want, len);
                assert_int_equal(buf[0], 0xa5);       /* nothing before */
                assert_int_equal(buf[len + 1], 0xa5); /* nothing after */
                assert_int_equal(ote_pattern_check(buf + 1, off, len, seeds[s]), -1);
                for (size_t bad = 0; bad < len; bad++) {
                    buf[1 + bad] ^= 0x10;
                    assert_int_equal(ote_pattern_check(buf + 1, off, len, seeds[s]), (long)bad);
                    /* a second wrong byte after it does not move the answer */
                    if (bad + 9 < len)
                        buf[1 + bad + 9] ^= 0x01;
                    assert_int_equal(ote_pattern_check(buf + 1, off, len, seeds[s]), (long)bad);
                    if (bad + 9 < len)
                        buf[1 + bad + 9] ^= 0x01;
                    buf[1 + bad] ^= 0x10;
                }
            }
        }
    }
    /* The definition itself: byte i is byte i % 8 of word i / 8, least significant first. */
    assert_int_equal(ote_pattern_byte(7, 13), (uint8_t)(ote_pattern_word(7, 1) >> 40));
    /* Two seeds differ, and so do neighbouring words. */
    assert_true(ote_pattern_word(1, 0) != ote_pattern_word(2, 0));
    assert_true(ote_pattern_word(1, 0) != ote_pattern_word(1, 1));
}

/* Write text to a fresh file under /tmp; its path in path. */
static void attr_file(char *path, size_t len, const char *text)
{
    int fd;

    snprintf(path, len, "/tmp/ote_attr_XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/*
 * ote_read_attr: the whole file, trailing white space cut; a file one byte
 * longer than the buffer holds is EOVERFLOW with the buffer empty, as is a
 * file that is not there (its errno).
 */
static void test_read_attr(void **state)
{
    char path[64], buf[8];

    (void)state;
    attr_file(path, sizeof(path), "0-3 5\n\n");
    assert_int_equal(ote_read_attr(path, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "0-3 5");
    unlink(path);

    attr_file(path, sizeof(path), "1234567"); /* exactly fits with its NUL */
    assert_int_equal(ote_read_attr(path, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "1234567");
    unlink(path);

    attr_file(path, sizeof(path), "12345678");
    errno = 0;
    assert_int_equal(ote_read_attr(path, buf, sizeof(buf)), -1);
    assert_int_equal(errno, EOVERFLOW);
    assert_string_equal(buf, "");
    unlink(path);

    errno = 0;
    assert_int_equal(ote_read_attr(path, buf, sizeof(buf)), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(buf, "");
}

/*
 * Only a refused connect counts as refused: a listener does not, and no
 * route from here (a network namespace without routes, as root) neither,
 * though ote_socket_connect says OTE_ERR_NOT_FOUND for both failures.
 */
static void test_socket_refuses(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int lfd, fd, status;
    uint16_t port;
    pid_t pid;

    (void)state;
    assert_int_equal(ote_sockaddr_parse("127.0.0.1:0", &ss, &len), OTE_OK);
    assert_int_equal(ote_socket_listen(&ss, len, &lfd), OTE_OK);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&ss, &len), 0);
    port = ote_sockaddr_port((struct sockaddr *)&ss);
    assert_false(ote_socket_refuses(&ss, len, 1000));
    close(lfd); /* nothing listens there now */
    assert_true(ote_socket_refuses(&ss, len, 1000));
    assert_int_equal(ote_socket_connect(&ss, len, 1000, &fd), OTE_ERR_NOT_FOUND);

    if (geteuid() != 0) {
        printf("# no route from here: needs root (a network namespace)\n");
        return;
    }
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char addr[32];

        /* A new namespace: its lo down and no route at all (ENETUNREACH). */
        if (unshare(CLONE_NEWNET) != 0)
            _exit(3);
        snprintf(addr, sizeof(addr), "10.11.12.13:%u", (unsigned)port);
        if (ote_sockaddr_parse(addr, &ss, &len) != OTE_OK)
            _exit(4);
        if (ote_socket_connect(&ss, len, 1000, &fd) != OTE_ERR_NOT_FOUND)
            _exit(1);
        _exit(ote_socket_refuses(&ss, len, 1000) ? 2 : 0);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3) {
        printf("# no route from here: unshare(CLONE_NEWNET) refused\n");
        return;
    }
    assert_int_equal(WEXITSTATUS(status), 0);
}

static atomic_bool plain_lookup_ended;

static void *plain_lookup(void *arg)
{
    struct addrinfo *res = NULL;

    (void)arg;
    if (getaddrinfo("blackhole.invalid", NULL, NULL, &res) == 0)
        freeaddrinfo(res);
    atomic_store(&plain_lookup_ended, true);
    return NULL;
}

/* In a child, in ote_test_dns_blackhole's namespaces: 0 passed, 1 a check failed. */
static int resolve_in_blackhole(void)
{
    struct sockaddr_storage ss;
    socklen_t len;
    pthread_t th;
    uint64_t t0, ms;
    ote_status_t st;

    /* Addresses and /etc/hosts need no answer. */
    if (ote_sockaddr_resolve("127.0.0.1:80", 0, &ss, &len) != OTE_OK ||
        ote_sockaddr_port((struct sockaddr *)&ss) != 80 ||
        ote_sockaddr_resolve("[::1]:81", 0, &ss, &len) != OTE_OK || ss.ss_family != AF_INET6 ||
        ote_sockaddr_resolve("localhost:82", 1000, &ss, &len) != OTE_OK ||
        ote_sockaddr_port((struct sockaddr *)&ss) != 82)
        return 1;
    if (pthread_create(&th, NULL, plain_lookup, NULL) != 0)
        return 1;
    t0 = ote_time_ns();
    st = ote_sockaddr_resolve("blackhole.invalid:80", 300, &ss, &len);
    ms = (ote_time_ns() - t0) / 1000000;
    printf("# bounded lookup: %s after %llu ms; plain lookup %s\n", ote_status_string(st),
           (unsigned long long)ms, atomic_load(&plain_lookup_ended) ? "ended" : "still waiting");
    /* The plain getaddrinfo beside it shows that the name service does hang. */
    if (st != OTE_ERR_TIMEOUT || ms < 250 || ms > 1500 || atomic_load(&plain_lookup_ended))
        return 1;
    /* The lookup left behind ends (and frees itself) with the plain one's wait. */
    pthread_join(th, NULL);
    usleep(300000);
    return 0;
}

/*
 * ote_sockaddr_resolve against a name service that does not answer: it
 * returns TIMEOUT at its bound where getaddrinfo waits for the resolver's
 * own timeouts (a peer's control address may name any host).
 */
static void test_resolve_bounded(void **state)
{
    int rc = ote_test_in_dns_blackhole(resolve_in_blackhole);

    (void)state;
    if (rc != 77)
        assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_reserve_grows),
        cmocka_unit_test(test_array_reserve_first_zero),
        cmocka_unit_test(test_array_reserve_overflow),
        cmocka_unit_test(test_ring_grow_order),
        cmocka_unit_test(test_ring_grow_overflow),
        cmocka_unit_test(test_mmap_huge),
        cmocka_unit_test(test_pattern_words),
        cmocka_unit_test(test_read_attr),
        cmocka_unit_test(test_socket_refuses),
        cmocka_unit_test(test_resolve_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
