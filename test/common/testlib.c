#include "testlib.h"
#include "base/cuda_api.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void ote_test_fill(void *p, uint64_t off, size_t len, uint64_t seed)
{
    ote_pattern_fill(p, off, len, seed);
}

long ote_test_check(const void *p, uint64_t off, size_t len, uint64_t seed)
{
    return ote_pattern_check(p, off, len, seed);
}

int ote_test_write_file(const char *path, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len ? len : 1);
    int fd       = buf != NULL ? open(path, O_CREAT | O_WRONLY, 0644) : -1;
    int rc       = -1;

    if (fd >= 0) {
        ote_pattern_fill(buf, 0, len, seed);
        if (pwrite(fd, buf, len, 0) == (ssize_t)len && ftruncate(fd, (off_t)len) == 0)
            rc = 0;
        close(fd);
    }
    free(buf);
    return rc;
}

long ote_test_proc_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, st = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    p = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (p == NULL || (p = strrchr(buf, ')')) == NULL)
        return -1;
    /* state, then fields 4..13, then utime (14) and stime (15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

int ote_test_victim_file(char *path)
{
    uint8_t b[4096];
    int fd = mkstemp(path);

    memset(b, 0x5c, sizeof(b));
    if (fd >= 0 && write(fd, b, sizeof(b)) != (ssize_t)sizeof(b)) {
        close(fd);
        unlink(path);
        fd = -1;
    }
    return fd;
}

bool ote_test_victim_intact(int fd, const char *path)
{
    uint8_t b[4097];
    ssize_t n = pread(fd, b, sizeof(b), 0);
    bool ok   = n == 4096;

    for (ssize_t i = 0; ok && i < n; i++)
        ok = b[i] == 0x5c;
    close(fd);
    unlink(path);
    return ok;
}

bool ote_test_stderr_begin(ote_test_stderr_t *c)
{
    char path[] = "/tmp/ote_test_log.XXXXXX";

    c->fd    = mkstemp(path);
    c->saved = dup(2);
    if (c->fd < 0 || c->saved < 0) {
        if (c->fd >= 0)
            close(c->fd);
        if (c->saved >= 0)
            close(c->saved);
        return false;
    }
    unlink(path);
    fflush(stderr);
    dup2(c->fd, 2);
    return true;
}

char *ote_test_stderr_end(ote_test_stderr_t *c)
{
    FILE *f  = NULL;
    long n   = -1;
    char *log = NULL;

    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    f = fdopen(c->fd, "r");
    if (f != NULL && fseek(f, 0, SEEK_END) == 0)
        n = ftell(f);
    if (n >= 0 && (log = calloc(1, (size_t)n + 1)) != NULL) {
        rewind(f);
        if (fread(log, 1, (size_t)n, f) != (size_t)n) {
            free(log);
            log = NULL;
        }
    }
    if (f != NULL)
        fclose(f);
    else
        close(c->fd);
    if (log != NULL)
        fputs(log, stderr); /* still in the test's own log */
    return log;
}

ote_status_t ote_test_engine_logged(const ote_engine_params_t *p, ote_engine_h *e_p,
                                    char **log_p)
{
    ote_test_stderr_t c;
    ote_status_t st;

    *log_p = NULL;
    if (!ote_test_stderr_begin(&c))
        return OTE_ERR_IO;
    st     = ote_engine_create(p, e_p);
    *log_p = ote_test_stderr_end(&c);
    return *log_p != NULL ? st : OTE_ERR_IO;
}

ote_status_t ote_test_batch_run(ote_engine_h e, const ote_xfer_req_t *reqs, size_t n,
                                int timeout_ms, ote_task_status_t *st)
{
    ote_batch_h b;
    size_t first;
    ote_status_t status = ote_batch_create(e, n, &b);

    if (status != OTE_OK)
        return status;
    status = ote_batch_submit(b, reqs, n, &first);
    if (status == OTE_OK)
        status = ote_batch_wait(b, timeout_ms);
    for (size_t i = 0; status == OTE_OK && i < n; i++)
        status = ote_batch_task_status(b, first + i, &st[i]);
    ote_batch_release(b);
    return status;
}

ote_status_t ote_test_xfer(ote_engine_h e, ote_segment_h seg, ote_op_t op, void *local,
                           uint64_t remote, size_t len, int timeout_ms, ote_task_status_t *st)
{
    ote_xfer_req_t r = {.op = op, .local_addr = local, .segment = seg, .remote_addr = remote,
                        .length = len};

    return ote_test_batch_run(e, &r, 1, timeout_ms, st);
}

bool ote_test_write_lands(ote_engine_h e, ote_segment_h seg, void *local, void *remote,
                          size_t len, uint64_t seed, int timeout_ms)
{
    ote_task_status_t st = {0};
    ote_status_t status;
    long bad;

    ote_test_fill(local, 0, len, seed);
    status = ote_test_xfer(e, seg, OTE_OP_WRITE, local, (uint64_t)(uintptr_t)remote, len,
                           timeout_ms, &st);
    if (status != OTE_OK || st.state != OTE_TASK_COMPLETED) {
        fprintf(stderr, "# WRITE of %zu bytes to %p: %s, task state %d (%s)\n", len, remote,
                ote_status_string(status), (int)st.state, ote_status_string(st.error));
        return false;
    }
    bad = ote_test_check(remote, 0, len, seed);
    if (bad >= 0) {
        fprintf(stderr, "# WRITE of %zu bytes to %p completed, byte %ld is wrong\n", len, remote,
                bad);
        return false;
    }
    return true;
}

void ote_test_setenv_or_unset(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

uint64_t ote_test_hash(const void *p, size_t len)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const char *ote_test_program(const char *name)
{
    static char path[4096];
    const char *dir = getenv("ORBITTE_TEST_BUILDDIR");

    if (dir == NULL)
        dir = ".";
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

/* Whether pid ended within timeout_ms (polled every 10 ms); reaps it. */
static bool wait_exit(pid_t pid, int timeout_ms, int *status)
{
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if (waitpid(pid, status, WNOHANG) == pid)
            return true;
        usleep(10000);
    }
    return false;
}

int ote_test_target_start(ote_test_target_t *t, const char *const *wrapper,
                          const char *const *argv_extra)
{
    const char *argv[64];
    int n = 0, pfd[2];
    char line[512];
    pid_t parent;
    FILE *f;

    memset(t, 0, sizeof(*t));
    for (const char *const *w = wrapper; w && *w && n < 16; w++)
        argv[n++] = *w;
    argv[n++] = ote_test_program("common/ote_test_target");
    for (const char *const *a = argv_extra; a && *a && n < 62; a++)
        argv[n++] = *a;
    argv[n] = NULL;
    if (pipe(pfd) != 0)
        return -1;
    parent = getpid();
    t->pid = fork();
    if (t->pid < 0)
        return -1;
    if (t->pid == 0) {
        /*
         * The target dies with the test (kept across exec): a test that
         * fails an assertion skips its teardown, and its target would
         * otherwise serve on, polling, beside every later test.
         */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        close(pfd[0]);
        dup2(pfd[1], STDOUT_FILENO);
        close(pfd[1]);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    f = fdopen(pfd[0], "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long addr;
        size_t len;
        unsigned acc;

        if (sscanf(line, "SEGMENT %255s", t->name) == 1)
            continue;
        if (sscanf(line, "REGION %llx %zu %u", &addr, &len, &acc) == 3 &&
            t->num_regions < OTE_TEST_MAX_REGIONS) {
            t->addr[t->num_regions]   = addr;
            t->length[t->num_regions] = len;
            t->access[t->num_regions] = acc;
            t->num_regions++;
            continue;
        }
        if (strncmp(line, "READY", 5) == 0) {
            fclose(f);
            return t->name[0] ? 0 : -1;
        }
    }
    fclose(f);
    {
        int status = 0;

        if (wait_exit(t->pid, 2000, &status)) {
            fprintf(stderr, "test target (%s) ended before READY: %s %d\n", argv[0],
                    WIFEXITED(status) ? "exit status" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            t->pid = 0;
        }
    }
    ote_test_target_kill(t);
    return -1;
}

void ote_test_target_kill(ote_test_target_t *t)
{
    int status;

    if (t->pid > 0) {
        kill(t->pid, SIGKILL);
        waitpid(t->pid, &status, 0);
        t->pid = 0;
    }
}

void ote_test_target_stop(ote_test_target_t *t)
{
    int status;

    if (t->pid <= 0)
        return;
    kill(t->pid, SIGTERM);
    if (wait_exit(t->pid, 5000, &status)) {
        t->pid = 0;
        return;
    }
    ote_test_target_kill(t);
}

int ote_test_target_cmd(ote_engine_h e, ote_segment_h seg, const char *cmd, char *reply,
                        size_t reply_len, int timeout_ms)
{
    if (ote_notify_send(e, seg, cmd, strlen(cmd)) != OTE_OK)
        return -1;
    return ote_test_target_reply(e, reply, reply_len, timeout_ms);
}

int ote_test_target_reply(ote_engine_h e, char *reply, size_t reply_len, int timeout_ms)
{
    struct timespec ts;
    long waited = 0;

    while (waited < (long)timeout_ms * 1000) {
        ote_notif_t n;
        size_t count = 0;

        ote_notify_recv(e, &n, 1, &count);
        if (count == 1) {
            snprintf(reply, reply_len, "%.*s", (int)n.length, n.data);
            return 0;
        }
        ts = (struct timespec){.tv_nsec = 200000};
        nanosleep(&ts, NULL);
        waited += 200;
    }
    return -1;
}

int ote_test_threads_named(int pid, const char *prefix)
{
    char dir[64];
    struct dirent *de;
    DIR *d;
    int n = 0;

    if (pid == 0)
        snprintf(dir, sizeof(dir), "/proc/self/task");
    else
        snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
    if ((d = opendir(dir)) == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        char path[400], comm[64] = "";
        FILE *fp;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/comm", dir, de->d_name);
        if ((fp = fopen(path, "r")) == NULL)
            continue;
        if (fgets(comm, sizeof(comm), fp) != NULL && strncmp(comm, prefix, strlen(prefix)) == 0)
            n++;
        fclose(fp);
    }
    closedir(d);
    return n;
}

void ote_test_setenv_all(const char *const *settings)
{
    for (; *settings != NULL; settings++) {
        const char *eq = strchr(*settings, '=');
        char name[128];

        if (eq == NULL || (size_t)(eq - *settings) >= sizeof(name))
            abort();
        memcpy(name, *settings, (size_t)(eq - *settings));
        name[eq - *settings] = '\0';
        setenv(name, eq + 1, 1);
    }
}

ote_engine_h ote_test_engine(const char *listen)
{
    ote_engine_params_t p = {.listen_addr = listen ? listen : "127.0.0.1:0"};
    ote_engine_h e = NULL;
    ote_status_t st = ote_engine_create(&p, &e);

    if (st != OTE_OK) {
        fprintf(stderr, "engine create: %s\n", ote_status_string(st));
        abort();
    }
    return e;
}

ote_test_pair_t *ote_test_pair_start(const char *tls, const char *listen,
                                     const char *const *wrapper,
                                     const char *const *argv_extra, size_t local_len)
{
    ote_test_pair_t *p = calloc(1, sizeof(*p));
    ote_status_t st;

    if (p == NULL)
        return NULL;
    ote_test_setenv_or_unset("OTE_TLS", tls);
    p->e = ote_test_engine(listen);
    if (ote_test_target_start(&p->target, wrapper, argv_extra) != 0) {
        fprintf(stderr, "test pair: the target did not start\n");
        goto err_engine;
    }
    st = ote_mem_alloc(p->e, local_len, NULL, 0, (void **)&p->local, &p->mlocal);
    if (st != OTE_OK) {
        fprintf(stderr, "test pair: allocating %zu bytes: %s\n", local_len,
                ote_status_string(st));
        goto err_target;
    }
    return p;

err_target:
    ote_test_target_stop(&p->target);
err_engine:
    ote_engine_destroy(p->e);
    free(p);
    return NULL;
}

void ote_test_pair_stop(ote_test_pair_t *p)
{
    ote_test_target_stop(&p->target);
    if (p->seg)
        ote_segment_close(p->seg);
    ote_mem_free(p->e, p->mlocal);
    ote_engine_destroy(p->e);
    unsetenv("OTE_TLS");
    free(p);
}

int ote_test_cuda_copy(void *dst, const void *src, size_t len)
{
    const ote_cuda_api_t *a = ote_cuda_api();

    if (a == NULL)
        return -1;
    if (a->memcpy_async(dst, src, len, OTE_CUDA_MEMCPY_DEFAULT, NULL) != OTE_CUDA_SUCCESS ||
        a->stream_synchronize(NULL) != OTE_CUDA_SUCCESS)
        return -1;
    return 0;
}

int ote_test_target_expect(ote_engine_h e, ote_segment_h seg, const char *cmd,
                           const char *want, int timeout_ms)
{
    char reply[128];

    if (ote_test_target_cmd(e, seg, cmd, reply, sizeof(reply), timeout_ms) != 0) {
        fprintf(stderr, "'%s': no answer\n", cmd);
        return -1;
    }
    if (strcmp(reply, want) != 0) {
        fprintf(stderr, "'%s' answered '%s', expected '%s'\n", cmd, reply, want);
        return -1;
    }
    return 0;
}

int ote_test_dns_blackhole(void)
{
    char conf[] = "/tmp/ote_resolv_XXXXXX";
    struct sockaddr_in dns = {.sin_family      = AF_INET,
                              .sin_port        = htons(53),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct ifreq ifr       = {.ifr_name = "lo"};
    int fd, sock, rc;

    if (unshare(CLONE_NEWNET | CLONE_NEWNS) != 0 ||
        mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        return -1;
    fd = mkstemp(conf);
    if (fd < 0)
        return -1;
    rc = dprintf(fd, "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n") > 0 ? 0 : -1;
    close(fd);
    if (rc == 0)
        rc = mount(conf, "/etc/resolv.conf", NULL, MS_BIND, NULL);
    unlink(conf);
    if (rc != 0)
        return -1;
    /* Kept open for the life of the process: the queries wait in it. */
    sock = socket(AF_INET, SOCK_DGRAM, 0);
    if (sock < 0 || ioctl(sock, SIOCGIFFLAGS, &ifr) != 0)
        return -1;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0 ||
        bind(sock, (struct sockaddr *)&dns, sizeof(dns)) != 0)
        return -1;
    return 0;
}

int ote_test_in_dns_blackhole(int (*fn)(void))
{
    int status;
    pid_t pid;

    if (geteuid() != 0) {
        printf("# name service that does not answer: needs root (network and mount "
               "namespaces)\n");
        return 77;
    }
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int rc = ote_test_dns_blackhole() == 0 ? fn() : 77;

        fflush(stdout);
        _exit(rc);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    if (WEXITSTATUS(status) == 77)
        printf("# name service that does not answer: namespaces or mounts refused\n");
    return WEXITSTATUS(status);
}
