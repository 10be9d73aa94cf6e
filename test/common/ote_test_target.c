/*
 * Target process for multi-process tests. Registers regions, prints
 *   SEGMENT <name>
 *   REGION <hex addr> <length> <access bits>   (one per --region)
 *   READY
 * then serves commands sent as notifications (see testlib.h) and answers
 * each with a notification to the sender's segment.
 *
 * Options: --listen ADDR (default 127.0.0.1:0)
 *          --name NAME, --metadata URI   engine name and metadata (default: OTE_* config)
 *          --region SIZE:ACCESS[@LOCATION]   ACCESS is any of r, w, or - (none);
 *                                 with @LOCATION (e.g. @cuda:0) the region is engine-owned
 *                                 memory from ote_mem_alloc there (fill/check touch it
 *                                 directly: CUDA test double only)
 *          --guard SIZE           following regions are registered in the middle
 *                                 of a mapping with SIZE unregistered bytes on each
 *                                 side, filled with OTE_TEST_GUARD_SEED; the
 *                                 command "guard R" answers "guard LEADHASH TRAILHASH"
 *          --export NAME:ACCESS:PATH   ote_file_export() of PATH (a file or a
 *                                 directory) as NAME, ACCESS any of r, w
 * The command "unexport NAME" answers "ok" once NAME is unexported.
 * The command "stagepinned" answers "pinned N": remote staging chunks pinned now.
 * The command "putbackstats" answers "opens N threads M": segments opened to
 * serve PUTBACKs so far, and the threads serving them.
 * The command "late LEN ACCESS [alloc]" registers a region of LEN bytes
 * (ACCESS any of r, w, or -) now, after start, with ote_mem_register of
 * fresh memory or, with alloc, from ote_mem_alloc; it answers
 * "region R HEXADDR" (R: its index for the other commands) or "error N".
 * The command "descserved" answers "served N": descriptor fetches
 * (GET_DESC) the control listener has answered so far.
 * The command "push R HEXADDR LEN SEED" fills the first LEN bytes of region R
 * with the pattern (offset 0, SEED) and WRITEs them to HEXADDR of the sender's
 * segment; it answers "ok" or "error N" (the task's status).
 * A silent peer is made with SIGSTOP by the test.
 */
#include "testlib.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static atomic_int stop; /* lock-free: set by a signal handler on any thread */

/* Library-internal (proto/stage.h, core/engine.h), exported with the ote_ symbols. */
long ote_stage_target_pinned_now(void);
void ote_engine_putback_stats(ote_engine_h engine, unsigned long *opens_p, unsigned *threads_p);
uint64_t ote_engine_peer_rail_bytes(ote_engine_h engine, const char *tl);
unsigned long ote_engine_desc_served(ote_engine_h engine);

static bool gpu_region(const char *where)
{
    return where != NULL && strncmp(where, "cuda:", 5) == 0;
}

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0", *name = NULL, *metadata = NULL;
    ote_engine_params_t p;
    ote_engine_h e;
    uint8_t *buf[OTE_TEST_MAX_REGIONS];
    size_t len[OTE_TEST_MAX_REGIONS];
    unsigned acc[OTE_TEST_MAX_REGIONS];
    ote_mem_h mem[OTE_TEST_MAX_REGIONS];
    size_t n = 0, guard = 0, glen[OTE_TEST_MAX_REGIONS];
    const char *where[OTE_TEST_MAX_REGIONS] = {NULL};
    bool owned[OTE_TEST_MAX_REGIONS] = {false}; /* from ote_mem_alloc on the host */
    ote_segment_h reply = NULL;
    char reply_name[256] = "";
    ote_status_t st;
    char xname[8][128], xpath[8][512];
    unsigned xacc[8];
    ote_file_export_h xh[8] = {NULL};
    size_t nx = 0;

    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
            listen = argv[++i];
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            name = argv[++i];
        } else if (strcmp(argv[i], "--metadata") == 0 && i + 1 < argc) {
            metadata = argv[++i];
        } else if (strcmp(argv[i], "--guard") == 0 && i + 1 < argc) {
            char *end;

            guard = strtoull(argv[++i], &end, 10);
            if (*end == 'k')
                guard <<= 10;
            else if (*end == 'm')
                guard <<= 20;
        } else if (strcmp(argv[i], "--export") == 0 && i + 1 < argc && nx < 8) {
            char acc_s[8];

            if (sscanf(argv[++i], "%127[^:]:%7[rw]:%511s", xname[nx], acc_s, xpath[nx]) != 3)
                return 1;
            xacc[nx] = (strchr(acc_s, 'r') ? OTE_ACCESS_REMOTE_READ : 0) |
                       (strchr(acc_s, 'w') ? OTE_ACCESS_REMOTE_WRITE : 0);
            nx++;
        } else if (strcmp(argv[i], "--region") == 0 && i + 1 < argc &&
                   n < OTE_TEST_MAX_REGIONS) {
            char *colon;
            size_t sz = strtoull(argv[++i], &colon, 10);

            if (*colon == 'k') { sz <<= 10; colon++; }
            else if (*colon == 'm') { sz <<= 20; colon++; }
            else if (*colon == 'g') { sz <<= 30; colon++; }
            acc[n] = 0;
            if (strchr(colon, '@') != NULL) {
                where[n] = strchr(colon, '@') + 1;
                buf[n]   = NULL;
                glen[n]  = 0;
                len[n]   = sz;
                acc[n] |= strchr(colon, 'r') ? OTE_ACCESS_REMOTE_READ : 0;
                acc[n] |= strchr(colon, 'w') ? OTE_ACCESS_REMOTE_WRITE : 0;
                n++;
                continue;
            }
            if (*colon == ':') {
                acc[n] |= strchr(colon, 'r') ? OTE_ACCESS_REMOTE_READ : 0;
                acc[n] |= strchr(colon, 'w') ? OTE_ACCESS_REMOTE_WRITE : 0;
            }
            buf[n] = mmap(NULL, sz + 2 * guard, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (buf[n] == MAP_FAILED)
                return 1;
            ote_test_fill(buf[n], 0, guard, OTE_TEST_GUARD_SEED);
            ote_test_fill(buf[n] + guard + sz, 0, guard, OTE_TEST_GUARD_SEED);
            buf[n] += guard;
            glen[n] = guard;
            len[n]  = sz;
            n++;
        }
    }
    p = (ote_engine_params_t){.listen_addr = listen, .name = name, .metadata = metadata};
    st = ote_engine_create(&p, &e);
    if (st != OTE_OK) {
        fprintf(stderr, "target: engine: %s\n", ote_status_string(st));
        return 1;
    }
    printf("SEGMENT %s\n", ote_engine_name(e));
    for (size_t k = 0; k < n; k++) {
        ote_mem_desc_t d = {.addr = buf[k], .length = len[k], .access = acc[k]};

        if (where[k] != NULL)
            st = ote_mem_alloc(e, len[k], where[k], acc[k], (void **)&buf[k], &mem[k]);
        else
            st = ote_mem_register(e, &d, 1, &mem[k]);
        if (st != OTE_OK) {
            fprintf(stderr, "target: register: %s\n", ote_status_string(st));
            return 1;
        }
        printf("REGION %llx %zu %u\n", (unsigned long long)(uintptr_t)buf[k], len[k], acc[k]);
    }
    for (size_t k = 0; k < nx; k++) {
        st = ote_file_export(e, xname[k], xpath[k], xacc[k], &xh[k]);
        if (st != OTE_OK) {
            fprintf(stderr, "target: export %s: %s\n", xname[k], ote_status_string(st));
            return 1;
        }
    }
    printf("READY\n");
    fflush(stdout);

    while (!stop) {
        ote_notif_t msg;
        size_t count = 0;
        char cmd[OTE_NOTIFY_MAX + 1], ans[128], acc_s[8];
        unsigned r;
        unsigned long long off, l, seed;

        ote_notify_recv(e, &msg, 1, &count);
        if (count == 0) {
            usleep(200);
            continue;
        }
        memcpy(cmd, msg.data, msg.length);
        cmd[msg.length] = '\0';
        if (strcmp(cmd, "quit") == 0)
            break;
        if (reply == NULL || strcmp(reply_name, msg.from) != 0) {
            if (reply)
                ote_segment_close(reply);
            reply = NULL;
            snprintf(reply_name, sizeof(reply_name), "%.255s", msg.from);
            if (ote_segment_open(e, reply_name, &reply) != OTE_OK)
                continue;
        }
        snprintf(ans, sizeof(ans), "error");
        if (sscanf(cmd, "fill %u %llu %llu %llu", &r, &off, &l, &seed) == 4 && r < n &&
            off + l <= len[r] && gpu_region(where[r])) {
            /* GPU memory: through a host buffer and CUDA (real devices too). */
            uint8_t *tmp = malloc(l ? l : 1);

            if (tmp != NULL) {
                ote_test_fill(tmp, off, l, seed);
                snprintf(ans, sizeof(ans), "%s",
                         ote_test_cuda_copy(buf[r] + off, tmp, l) == 0 ? "ok" : "error cuda");
            }
            free(tmp);
        } else if (sscanf(cmd, "check %u %llu %llu %llu", &r, &off, &l, &seed) == 4 && r < n &&
                   off + l <= len[r] && gpu_region(where[r])) {
            uint8_t *tmp = malloc(l ? l : 1);
            long bad     = -2;

            if (tmp != NULL && ote_test_cuda_copy(tmp, buf[r] + off, l) == 0)
                bad = ote_test_check(tmp, off, l, seed);
            free(tmp);
            if (bad == -1)
                snprintf(ans, sizeof(ans), "ok");
            else if (bad >= 0)
                snprintf(ans, sizeof(ans), "bad %llu", off + (unsigned long long)bad);
        } else if (sscanf(cmd, "fill %u %llu %llu %llu", &r, &off, &l, &seed) == 4 && r < n &&
            off + l <= len[r]) {
            ote_test_fill(buf[r] + off, off, l, seed);
            snprintf(ans, sizeof(ans), "ok");
        } else if (sscanf(cmd, "check %u %llu %llu %llu", &r, &off, &l, &seed) == 4 && r < n &&
                   off + l <= len[r]) {
            long bad = ote_test_check(buf[r] + off, off, l, seed);

            if (bad < 0)
                snprintf(ans, sizeof(ans), "ok");
            else
                snprintf(ans, sizeof(ans), "bad %llu", off + (unsigned long long)bad);
        } else if (sscanf(cmd, "zero %u %llu %llu", &r, &off, &l) == 3 && r < n &&
                   off + l <= len[r]) {
            memset(buf[r] + off, 0, l);
            snprintf(ans, sizeof(ans), "ok");
        } else if (sscanf(cmd, "sum %u %llu %llu", &r, &off, &l) == 3 && r < n &&
                   off + l <= len[r]) {
            snprintf(ans, sizeof(ans), "sum %016llx",
                     (unsigned long long)ote_test_hash(buf[r] + off, l));
        } else if (sscanf(cmd, "guard %u", &r) == 1 && r < n) {
            snprintf(ans, sizeof(ans), "guard %016llx %016llx",
                     (unsigned long long)ote_test_hash(buf[r] - glen[r], glen[r]),
                     (unsigned long long)ote_test_hash(buf[r] + len[r], glen[r]));
        } else if (sscanf(cmd, "push %u %llx %llu %llu", &r, &off, &l, &seed) == 4 && r < n &&
                   l <= len[r] && l > 0 && !gpu_region(where[r])) {
            /* off: the address in the sender's memory */
            ote_xfer_req_t q = {.op = OTE_OP_WRITE, .local_addr = buf[r], .segment = reply,
                                .remote_addr = off, .length = l};
            ote_task_status_t ts = {0};
            ote_batch_h b;
            size_t first;

            ote_test_fill(buf[r], 0, l, seed);
            st = ote_batch_create(e, 1, &b);
            if (st == OTE_OK) {
                st = ote_batch_submit(b, &q, 1, &first);
                if (st == OTE_OK)
                    st = ote_batch_wait(b, 20000);
                if (st == OTE_OK)
                    st = ote_batch_task_status(b, 0, &ts);
                if (st == OTE_OK && ts.state != OTE_TASK_COMPLETED)
                    st = ts.error != OTE_OK ? ts.error : OTE_ERR_IO;
                ote_batch_release(b);
            }
            snprintf(ans, sizeof(ans), st == OTE_OK ? "ok" : "error %d", st);
        } else if (sscanf(cmd, "late %llu %7s", &l, acc_s) == 2 && l > 0 &&
                   n < OTE_TEST_MAX_REGIONS) {
            /* A region registered after peers opened this engine's segment. */
            unsigned a = (strchr(acc_s, 'r') ? OTE_ACCESS_REMOTE_READ : 0) |
                         (strchr(acc_s, 'w') ? OTE_ACCESS_REMOTE_WRITE : 0);
            bool alloc = strstr(cmd + 5, " alloc") != NULL;
            void *p    = NULL;

            if (alloc) {
                st = ote_mem_alloc(e, l, NULL, a, &p, &mem[n]);
            } else {
                p  = mmap(NULL, l, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                st = p == MAP_FAILED ? OTE_ERR_NO_MEMORY : OTE_OK;
                if (st == OTE_OK) {
                    ote_mem_desc_t d = {.addr = p, .length = l, .access = a};

                    st = ote_mem_register(e, &d, 1, &mem[n]);
                }
            }
            if (st == OTE_OK) {
                buf[n]   = p;
                len[n]   = l;
                acc[n]   = a;
                glen[n]  = 0;
                where[n] = NULL;
                owned[n] = alloc;
                snprintf(ans, sizeof(ans), "region %zu %llx", n,
                         (unsigned long long)(uintptr_t)p);
                n++;
            } else {
                snprintf(ans, sizeof(ans), "error %d", st);
            }
        } else if (strcmp(cmd, "descserved") == 0) {
            snprintf(ans, sizeof(ans), "served %lu", ote_engine_desc_served(e));
        } else if (strcmp(cmd, "stagepinned") == 0) {
            /* Chunks of the remote staging pool pinned by initiators now. */
            snprintf(ans, sizeof(ans), "pinned %ld", ote_stage_target_pinned_now());
        } else if (strcmp(cmd, "putbackstats") == 0) {
            /* Segments opened to serve PUTBACKs, and the threads serving them. */
            unsigned long opens;
            unsigned threads;

            ote_engine_putback_stats(e, &opens, &threads);
            snprintf(ans, sizeof(ans), "opens %lu threads %u", opens, threads);
        } else if (strncmp(cmd, "peerbytes ", 10) == 0) {
            /* Bytes on the rails of transport <tl> of the segments kept to initiators. */
            snprintf(ans, sizeof(ans), "bytes %llu",
                     (unsigned long long)ote_engine_peer_rail_bytes(e, cmd + 10));
        } else if (strncmp(cmd, "unexport ", 9) == 0) {
            for (size_t k = 0; k < nx; k++) {
                if (xh[k] != NULL && strcmp(xname[k], cmd + 9) == 0) {
                    st = ote_file_unexport(xh[k]);
                    xh[k] = NULL;
                    snprintf(ans, sizeof(ans), st == OTE_OK ? "ok" : "error %d", st);
                }
            }
        } else if (sscanf(cmd, "dereg %u", &r) == 1 && r < n) {
            st = where[r] != NULL || owned[r] ? ote_mem_free(e, mem[r])
                                              : ote_mem_deregister(e, mem[r]);
            snprintf(ans, sizeof(ans), st == OTE_OK ? "ok" : "error %d", st);
        }
        ote_notify_send(e, reply, ans, strlen(ans));
    }
    if (reply)
        ote_segment_close(reply);
    ote_engine_destroy(e);
    return 0;
}
