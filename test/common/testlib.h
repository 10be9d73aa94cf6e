/*
 * Shared helpers for OrbitTE tests: data patterns, and a target process
 * (test/common/ote_test_target) that multi-process tests start, steer with
 * notifications and ask to verify its memory.
 */
#ifndef OTE_TESTLIB_H
#define OTE_TESTLIB_H

#include "base/pattern.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OTE_TEST_MAX_REGIONS 16
/* Pattern seed of the target's guard areas (--guard). */
#define OTE_TEST_GUARD_SEED  0x6761726475ull

/* The pattern of src/base/pattern.h (ote_perftest writes and checks it too). */
void ote_test_fill(void *p, uint64_t off, size_t len, uint64_t seed);
/* Offset of the first wrong byte, or -1. */
long ote_test_check(const void *p, uint64_t off, size_t len, uint64_t seed);
/*
 * Make path (if needed) a file of exactly len bytes of the pattern of seed
 * (offset base 0); 0, or -1 with errno.
 */
int  ote_test_write_file(const char *path, size_t len, uint64_t seed);

/* CPU ticks (user + system, /proc/<pid>/stat) the process pid has used so far. */
long ote_test_proc_ticks(pid_t pid);

/*
 * A victim file for tests of requests that must not reach local files: 4096
 * bytes of 0x5c at path (a mkstemp template, filled in); its descriptor.
 * ote_test_victim_intact: whether it still holds exactly those bytes; it
 * closes and removes the file.
 */
int  ote_test_victim_file(char *path);
bool ote_test_victim_intact(int fd, const char *path);

/*
 * Root only, in a child process: move the calling process into network
 * and mount namespaces of its own, lo up, with a resolv.conf naming
 * 127.0.0.1, where a UDP socket takes the queries and never answers (a
 * name outside /etc/hosts then waits 2 s for the resolver's timeout). 0,
 * or -1 when the namespaces or mounts were refused.
 */
int  ote_test_dns_blackhole(void);
/*
 * fn run in a child process inside ote_test_dns_blackhole's namespaces:
 * its return value (0 passed), 77 where that cannot be done (not root,
 * namespaces or mounts refused: said on stdout), -1 where the child did
 * not exit.
 */
int  ote_test_in_dns_blackhole(int (*fn)(void));

/*
 * stderr captured between begin and end: end gives what was written
 * (malloc'd, NUL-ended; NULL when it could not be read back), restores
 * stderr and writes it there too. begin: false when stderr could not be
 * captured (then do not call end).
 */
typedef struct {
    int fd, saved;
} ote_test_stderr_t;
bool  ote_test_stderr_begin(ote_test_stderr_t *c);
char *ote_test_stderr_end(ote_test_stderr_t *c);

/*
 * ote_engine_create() with stderr captured: *log_p (malloc'd, NUL-ended)
 * gets what the engine logged. Returns create's status, or OTE_ERR_IO when
 * stderr could not be captured (*log_p NULL then).
 */
ote_status_t ote_test_engine_logged(const ote_engine_params_t *p, ote_engine_h *e_p,
                                    char **log_p);

/*
 * One request in a batch of its own, waited for up to timeout_ms. Returns
 * the submit's status, or OTE_ERR_TIMEOUT when the wait ran out; when OK,
 * *st holds the task's status.
 */
ote_status_t ote_test_xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                           uint64_t remote, size_t len, int timeout_ms, ote_task_status_t *st);
/*
 * Fill len bytes of local with seed's pattern and WRITE them to remote,
 * memory of this process that seg reaches (one request, timeout_ms): true
 * when the task completed and every byte at remote is the pattern; false,
 * with what went wrong on stderr, otherwise.
 */
bool ote_test_write_lands(ote_engine_h e, ote_segment_h seg, void *local, void *remote,
                          size_t len, uint64_t seed, int timeout_ms);
/*
 * n requests in one batch, waited for as ote_test_xfer does; when OK, st[i]
 * holds the status of request i.
 */
ote_status_t ote_test_batch_run(ote_engine_h e, const ote_xfer_req_t *reqs, size_t n,
                                int timeout_ms, ote_task_status_t *st);

typedef struct {
    pid_t    pid;
    char     name[256];
    size_t   num_regions;
    uint64_t addr[OTE_TEST_MAX_REGIONS];
    size_t   length[OTE_TEST_MAX_REGIONS];
    unsigned access[OTE_TEST_MAX_REGIONS];
} ote_test_target_t;

/*
 * Start the target program. argv_extra: NULL-terminated extra arguments,
 * e.g. {"--region", "64m:rw", "--region", "1m:r", NULL}. wrapper: NULL, or a
 * NULL-terminated command to run it under (e.g. {"ip","netns","exec","ns1",NULL}),
 * which must exec the target rather than fork it. The target is killed when
 * the calling thread ends (PR_SET_PDEATHSIG): call from the test's main
 * thread. Returns 0 on success.
 */
int  ote_test_target_start(ote_test_target_t *t, const char *const *wrapper,
                           const char *const *argv_extra);
/* Ask it to exit and reap it (SIGKILL after 5 s). */
void ote_test_target_stop(ote_test_target_t *t);
/* SIGKILL now and reap. */
void ote_test_target_kill(ote_test_target_t *t);

/*
 * Send a command and wait for the reply (timeout_ms). Commands:
 *   fill R OFF LEN SEED   | check R OFF LEN SEED -> "ok" / "bad OFF"
 *   zero R OFF LEN        | dereg R | crc R OFF LEN -> "crc HEX" | quit
 *   sum R OFF LEN          -> "sum HEX" (64-bit hash of the bytes)
 *   stagepinned            -> "pinned N" (remote staging chunks pinned now)
 *   peerbytes TL           -> "bytes N" (delivered on the rails of transport TL of
 *                             the segments it keeps open to initiators)
 *   guard R                -> "guard HEX HEX" (hashes of the areas before and after
 *                             region R, with --guard)
 *   late LEN ACCESS [alloc] -> "region R HEX" (a region registered now; R its index)
 *   descserved             -> "served N" (descriptor fetches its listener answered)
 * Returns 0 and fills reply on success.
 */
int ote_test_target_cmd(ote_engine_h e, ote_segment_h seg, const char *cmd, char *reply,
                        size_t reply_len, int timeout_ms);
/* The next reply (notification) the target sends, within timeout_ms; 0 when one came. */
int ote_test_target_reply(ote_engine_h e, char *reply, size_t reply_len, int timeout_ms);

/*
 * ote_test_target_cmd, then the reply compared with want: 0 when it is
 * exactly want; -1 (the command, its reply and want on stderr) otherwise.
 */
int ote_test_target_expect(ote_engine_h e, ote_segment_h seg, const char *cmd,
                           const char *want, int timeout_ms);

/*
 * dst <- src through CUDA (either may be GPU memory), finished on return;
 * the library's CUDA table must be loaded (an engine exists). 0 on success.
 */
int ote_test_cuda_copy(void *dst, const void *src, size_t len);

/* 64-bit hash of a byte range (same as the target's "sum"). */
uint64_t ote_test_hash(const void *p, size_t len);

/* Path of a program built in the test tree (uses ORBITTE_TEST_BUILDDIR or argv0's dir). */
const char *ote_test_program(const char *name);

/* Create an engine on 127.0.0.1 with an optional OTE_TLS; asserts on failure. */
ote_engine_h ote_test_engine(const char *listen);

/*
 * A cmocka test that runs one case function for one argument (a transport
 * list, a store kind: a string literal): _fn(state) finds it in *state,
 * and cmocka names the test "_fn(_arg)". One function serves each of its
 * arguments without a wrapper per argument.
 */
#define OTE_TEST_CASE(_fn, _arg) {#_fn "(" _arg ")", (_fn), NULL, NULL, (void *)(_arg)}

/* setenv(name, value), or unsetenv(name) when value is NULL. */
void ote_test_setenv_or_unset(const char *name, const char *value);

/* Set every "NAME=VALUE" of a NULL-terminated list in the environment. */
void ote_test_setenv_all(const char *const *settings);

/* Threads of process pid (0: this one) whose name starts with prefix; -1 if unreadable. */
int ote_test_threads_named(int pid, const char *prefix);

/*
 * The usual two-process fixture: an engine of this process listening on
 * listen (NULL: 127.0.0.1:0), a test target started under wrapper with
 * argv_extra, and local_len bytes of local memory allocated on the engine.
 * seg is left to the test to open.
 */
typedef struct {
    ote_engine_h      e;
    ote_test_target_t target;
    ote_segment_h     seg;
    uint8_t          *local;
    ote_mem_h         mlocal;
} ote_test_pair_t;

/* Sets OTE_TLS to tls first (unsets it when NULL). NULL on failure, having said why. */
ote_test_pair_t *ote_test_pair_start(const char *tls, const char *listen,
                                     const char *const *wrapper,
                                     const char *const *argv_extra, size_t local_len);
/* Stops the target, closes seg if open, frees the memory and the engine, unsets OTE_TLS. */
void ote_test_pair_stop(ote_test_pair_t *p);

#endif
