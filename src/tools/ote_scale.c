/*
 * ote_scale: how OrbitTE's costs grow (docs/performance.md, "Scale").
 *
 *   ote_scale requests|regions|peers|notify [options]
 *
 * Each curve starts its own targets (`ote_scale serve`) or senders
 * (`ote_scale notify-send`) as child processes on loopback and prints CSV
 * rows "curve,series,x,metric,value" on stdout. A curve's rows carry the
 * counts they were measured with (requests, bytes, regions seen, ...), so
 * that a reader can check them. contrib/bench/scale.sh runs the curves in
 * interleaved rounds and takes the medians.
 */
#include "scale.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

const char tool_name[] = "ote_scale";

scale_opts_t sopt = {
    .per_peer = 16, .messages = 20000, .checks = 4096, .idle_s = 5, .reps = 5,
    .listen_ip = "127.0.0.1",
};

void scale_row(const char *curve, const char *series, size_t x, const char *metric, double v)
{
    printf("%s,%s,%zu,%s,%.12g\n", curve, series, x, metric, v);
    fflush(stdout);
}

ote_engine_h scale_engine(void)
{
    char addr[80];
    ote_engine_params_t p = {.listen_addr = addr};
    ote_engine_h e;
    ote_status_t st;

    snprintf(addr, sizeof(addr), "%s:0", sopt.listen_ip);
    st = ote_engine_create(&p, &e);

    if (st != OTE_OK)
        die("engine: %s", ote_status_string(st));
    return e;
}

/* ------------------------------------------------------------------ */
/* Child processes                                                    */
/* ------------------------------------------------------------------ */

void scale_spawn(scale_child_t *c, const char *const *args)
{
    int in[2], out[2];
    pid_t parent = getpid();
    size_t n = 0;
    const char *argv[48];
    /*
     * This program's path, read before the fork: under valgrind the link
     * names the program, where exec of /proc/self/exe would start valgrind
     * itself; the children then run without it.
     */
    char exe[4096];
    ssize_t exe_len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (exe_len <= 0)
        snprintf(exe, sizeof(exe), "/proc/self/exe");
    else
        exe[exe_len] = '\0';

    if (sopt.target_netns[0] != '\0') {
        /* In the targets' namespace: `ip netns exec` runs this program in the same process. */
        argv[n++] = "ip";
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = sopt.target_netns;
        argv[n++] = exe;
    } else {
        argv[n++] = "ote_scale";
    }
    for (; *args != NULL && n < 44; args++)
        argv[n++] = *args;
    if (sopt.target_netns[0] != '\0') {
        argv[n++] = "--listen";
        argv[n++] = sopt.target_ip;
    }
    argv[n] = NULL;
    /* Close-on-exec: a later child must not hold this one's stdin open. */
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    c->pid = fork();
    if (c->pid < 0)
        die("fork: %s", strerror(errno));
    if (c->pid == 0) {
        /* Never outlive the measuring process. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        dup2(in[0], STDIN_FILENO);
        dup2(out[1], STDOUT_FILENO);
        close(in[0]); close(in[1]); close(out[0]); close(out[1]);
        if (sopt.target_netns[0] != '\0')
            execvp("ip", (char *const *)argv);
        else
            execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->in  = fdopen(in[1], "w");
    c->out = fdopen(out[0], "r");
    if (c->in == NULL || c->out == NULL)
        die("fdopen: %s", strerror(errno));
}

void scale_child_line(scale_child_t *c, char *line, size_t len)
{
    if (fgets(line, (int)len, c->out) == NULL)
        die("child %d ended early (see its messages above)", (int)c->pid);
    line[strcspn(line, "\n")] = '\0';
}

void scale_child_end(scale_child_t *c)
{
    int waited = 0, status = 0;
    pid_t pid = c->pid;

    if (pid <= 0)
        return;
    fclose(c->in);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (waited++ == 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            die("child %d did not end within 10 s of its stdin closing", (int)pid);
        }
        usleep(10000);
    }
    fclose(c->out);
    c->pid = 0;
    /* A child that failed (a sanitizer's report included) fails the curve. */
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("child %d ended with status %#x", (int)pid, (unsigned)status);
}

/* ------------------------------------------------------------------ */
/* /proc                                                              */
/* ------------------------------------------------------------------ */

static FILE *proc_open(pid_t pid, const char *what)
{
    char path[64];

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/%s", what);
    else
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
    return fopen(path, "r");
}

long scale_proc_kib(pid_t pid, const char *field)
{
    FILE *f = proc_open(pid, "status");
    char line[256];
    long v = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, strlen(field)) == 0) {
            v = strtol(line + strlen(field), NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

long scale_proc_fds(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *de;
    long n = 0;
    bool self = pid == 0 || pid == getpid();

    if (pid == 0)
        pid = getpid();
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return self ? n - 1 : n; /* less the descriptor opendir holds, when it is our own */
}

/*
 * Sum over the threads of pid (/proc/PID/task/TID/FILE) of the number that
 * follows key in FILE (key NULL: its first number). -1 when none could be read.
 */
static double proc_tasks_sum(pid_t pid, const char *file, const char *key)
{
    char path[320], line[256];
    DIR *d;
    struct dirent *de;
    double sum = 0;
    bool any   = false;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)(pid == 0 ? getpid() : pid));
    d = opendir(path);
    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL) {
        FILE *f;

        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", (int)(pid == 0 ? getpid() : pid),
                 de->d_name, file);
        f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread ended meanwhile */
        while (fgets(line, sizeof(line), f) != NULL) {
            if (key == NULL || strncmp(line, key, strlen(key)) == 0) {
                sum += strtod(line + (key ? strlen(key) : 0), NULL);
                any = true;
                break;
            }
        }
        fclose(f);
    }
    closedir(d);
    return any ? sum : -1;
}

double scale_proc_cpu_s(pid_t pid)
{
    FILE *f;
    char buf[1024], *p;
    unsigned long utime = 0, stime = 0;
    size_t n;
    /* Nanoseconds on a CPU, per thread (the scheduler's own count). */
    double ns = proc_tasks_sum(pid, "schedstat", NULL);

    if (ns >= 0)
        return ns / 1e9;
    /* No schedstat in this kernel: utime + stime, in clock ticks. */
    f = proc_open(pid, "stat");
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields 14 and 15, counted after the command's closing parenthesis. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                            &stime) != 2)
        return -1;
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

double scale_proc_wakeups(pid_t pid)
{
    return proc_tasks_sum(pid, "status", "voluntary_ctxt_switches:");
}

bool scale_peak_reset(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    bool ok;

    if (f == NULL)
        return false;
    ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* ------------------------------------------------------------------ */
/* The target                                                         */
/* ------------------------------------------------------------------ */

/*
 * The size of an engine's descriptor as peers read it: one GET_DESC on its
 * control listener (docs/wire-protocol.md), the DESC payload less its
 * status. 0 when it could not be read.
 */
static size_t desc_bytes(const char *name)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    uint8_t h[16] = {0x4f, 0x45, 0x54, 0x43, 1, 1}; /* magic 0x4354454f LE, version 1, GET_DESC */
    size_t len = 0, got = 0;
    const char *colon = strrchr(name, ':');
    char host[64];
    int fd;

    if (colon == NULL || (size_t)(colon - name) >= sizeof(host))
        return 0;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - name), name);
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return 0;
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || write(fd, h, 16) != 16)
        goto out;
    while (got < 16) {
        ssize_t r = read(fd, h + got, 16 - got);

        if (r <= 0)
            goto out;
        got += (size_t)r;
    }
    if (h[5] != 2)
        goto out;
    len = (size_t)h[8] | (size_t)h[9] << 8 | (size_t)h[10] << 16 | (size_t)h[11] << 24;
    len = len >= 4 ? len - 4 : 0;
out:
    close(fd);
    return len;
}

/*
 * ote_scale serve ENGINES REGIONS SIZE: ENGINES engines, each with REGIONS
 * regions of SIZE bytes (adjacent, in one mapping, one ote_mem_register
 * call each). Prints engine 0's figures, then "engine NAME ADDR" per
 * engine and "ready"; ends when its stdin closes.
 */
int scale_serve_main(int argc, char **argv)
{
    size_t k, n, size, lookups;
    ote_engine_h *e;
    ote_mem_h **mems;
    uint8_t **bufs;
    double t0, t1;
    char line[64];

    if (argc != 5)
        die("usage: ote_scale serve ENGINES REGIONS SIZE");
    k    = scale_number(argv[2], 1, "serve: ENGINES");
    n    = scale_number(argv[3], 1, "serve: REGIONS");
    size = scale_number(argv[4], 1, "serve: SIZE");
    e    = calloc(k, sizeof(*e));
    mems = calloc(k, sizeof(*mems));
    bufs = calloc(k, sizeof(*bufs));
    for (size_t i = 0; i < k; i++) {
        e[i]    = scale_engine();
        mems[i] = calloc(n, sizeof(**mems));
        bufs[i] = mmap(NULL, n * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mems[i] == NULL || bufs[i] == MAP_FAILED)
            die("serve: %zu regions of %zu bytes: out of memory", n, size);
        /* Touched now: the RSS the curves read later is the engine's, not these pages'. */
        memset(bufs[i], 0, n * size);
        if (i == 0)
            printf("desc_bytes_empty %zu\n", desc_bytes(ote_engine_name(e[0])));
        t0 = now_s();
        for (size_t r = 0; r < n; r++) {
            ote_mem_desc_t d = {.addr = bufs[i] + r * size, .length = size,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
            ote_status_t st = ote_mem_register(e[i], &d, 1, &mems[i][r]);

            if (st != OTE_OK)
                die("serve: registering region %zu: %s", r, ote_status_string(st));
        }
        t1 = now_s();
        if (i == 0)
            printf("register_s %.9f\ndesc_bytes %zu\n", t1 - t0, desc_bytes(ote_engine_name(e[0])));
    }
    /* ote_mem_register of ranges engine 0 has: a lookup and a reference. */
    lookups = n < 10000 ? (n > 1000 ? n : 1000) : 10000;
    {
        ote_mem_h *h = calloc(lookups, sizeof(*h));
        size_t hits = 0;

        t0 = now_s();
        for (size_t i = 0; i < lookups; i++) {
            size_t r = (i * 7919) % n;
            ote_mem_desc_t d = {.addr = bufs[0] + r * size, .length = size,
                                .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};

            if (ote_mem_register(e[0], &d, 1, &h[i]) != OTE_OK)
                h[i] = NULL;
        }
        t1 = now_s();
        for (size_t i = 0; i < lookups; i++) {
            if (h[i] != NULL) {
                hits += h[i] == mems[0][(i * 7919) % n];
                ote_mem_deregister(e[0], h[i]);
            }
        }
        printf("lookup_ns %.3f\nlookup_hits %zu %zu\n", (t1 - t0) * 1e9 / (double)lookups, hits,
               lookups);
        free(h);
    }
    for (size_t i = 0; i < k; i++)
        printf("engine %s %llu\n", ote_engine_name(e[i]), (unsigned long long)(uintptr_t)bufs[i]);
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof(line), stdin) != NULL)
        ;
    for (size_t i = 0; i < k; i++) {
        ote_engine_destroy(e[i]); /* its regions go with it */
        munmap(bufs[i], n * size);
        free(mems[i]);
    }
    free(e);
    free(mems);
    free(bufs);
    return 0;
}

void scale_target_start(scale_target_t *t, size_t engines, size_t regions, size_t region_size)
{
    char a[3][32], line[512];
    const char *args[] = {"serve", a[0], a[1], a[2], NULL};
    size_t k = 0;

    memset(t, 0, sizeof(*t));
    snprintf(a[0], sizeof(a[0]), "%zu", engines);
    snprintf(a[1], sizeof(a[1]), "%zu", regions);
    snprintf(a[2], sizeof(a[2]), "%zu", region_size);
    t->engines = engines;
    t->names   = calloc(engines, sizeof(*t->names));
    t->addrs   = calloc(engines, sizeof(*t->addrs));
    scale_spawn(&t->child, args);
    for (;;) {
        unsigned long long v, w;
        char name[64];
        double d;

        scale_child_line(&t->child, line, sizeof(line));
        if (strcmp(line, "ready") == 0)
            break;
        if (sscanf(line, "engine %63s %llu", name, &v) == 2 && k < engines) {
            snprintf(t->names[k], sizeof(t->names[k]), "%s", name);
            t->addrs[k++] = v;
        } else if (sscanf(line, "register_s %lf", &d) == 1) {
            t->register_s = d;
        } else if (sscanf(line, "lookup_ns %lf", &d) == 1) {
            t->lookup_ns = d;
        } else if (sscanf(line, "lookup_hits %llu %llu", &v, &w) == 2) {
            t->lookup_hits = v == w ? (size_t)v : 0;
        } else if (sscanf(line, "desc_bytes_empty %llu", &v) == 1) {
            t->desc_bytes_empty = v;
        } else if (sscanf(line, "desc_bytes %llu", &v) == 1) {
            t->desc_bytes = v;
        }
    }
    if (k != engines)
        die("target named %zu of its %zu engines", k, engines);
}

void scale_target_stop(scale_target_t *t)
{
    scale_child_end(&t->child);
    free(t->names);
    free(t->addrs);
}

/* ------------------------------------------------------------------ */
/* Options                                                            */
/* ------------------------------------------------------------------ */

size_t scale_number(const char *s, size_t min, const char *what)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v     = strtoull(s, &end, 10);
    if (end != s && (*end == 'k' || *end == 'K') && v <= ULLONG_MAX >> 10)
        v <<= 10, end++;
    else if (end != s && (*end == 'm' || *end == 'M') && v <= ULLONG_MAX >> 20)
        v <<= 20, end++;
    if (end == s || *end != '\0' || errno != 0 || s[0] == '-' || v < min || v > SIZE_MAX)
        die("%s: '%s' is not a number of at least %zu", what, s, min);
    return (size_t)v;
}

static size_t parse_list(const char *s, size_t *out, const char *what)
{
    char buf[512], *save = NULL;
    size_t n = 0;

    snprintf(buf, sizeof(buf), "%s", s);
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (n == SCALE_MAX_POINTS)
            die("%s: at most %d points", what, SCALE_MAX_POINTS);
        out[n++] = scale_number(t, 1, what);
    }
    return n;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ote_scale CURVE [options]   (CSV rows curve,series,x,metric,value)\n"
            "  requests  one batch of N requests (WRITE, tcp) per point\n"
            "            --counts N,...  (default 1,16,256,4096,65536,1048576)\n"
            "            --sizes S,...   (default 64,4096)  --reps R (default 5)\n"
            "  regions   a target with N registered regions of 4 KiB\n"
            "            --counts N,...  (default 1,10,100,1000,10000,100000)\n"
            "            --checks M      requests spread over them (default 4096)\n"
            "  peers     one initiator opening N targets\n"
            "            --counts N,...  (default 1,4,16,64,256)\n"
            "            --per-peer K    4 KiB WRITEs per peer in the batch (default 16)\n"
            "            --idle S        idle seconds for the CPU reading (default 5)\n"
            "  notify    N senders (engines) to one receiver\n"
            "            --counts N,...  (default 1,8,64)\n"
            "            --messages M    notifications per point (default 20000)\n"
            "            --per-call K,...  messages per send call, a series each (default\n"
            "                            1,64: ote_notify_send(), ote_notify_send_many())\n"
            "  --listen IP       this process's engines listen there (default 127.0.0.1)\n"
            "  --target-netns NS --target-ip IP  targets and senders run in network\n"
            "                    namespace NS (`ip netns exec`, root), listening on IP\n"
            "  OTE_TLS defaults to tcp here, OTE_MAX_INFLIGHT_TASKS to 4194304 and\n"
            "  OTE_MAX_INFLIGHT_BYTES to 64g (the largest batch is 4 GiB).\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"counts", required_argument, NULL, 'c'}, {"sizes", required_argument, NULL, 's'},
        {"reps", required_argument, NULL, 'r'},   {"checks", required_argument, NULL, 'k'},
        {"per-peer", required_argument, NULL, 'p'}, {"idle", required_argument, NULL, 'i'},
        {"messages", required_argument, NULL, 'm'}, {"help", no_argument, NULL, 'h'},
        {"per-call", required_argument, NULL, 'n'},
        {"listen", required_argument, NULL, 'l'}, {"target-netns", required_argument, NULL, 'N'},
        {"target-ip", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    /* The curves and their --counts, --sizes and --per-call when not given (NULL: none). */
    static const struct {
        const char *name, *counts, *sizes, *per_call;
        int (*run)(void);
    } curves[] = {
        {"requests", "1,16,256,4096,65536,1048576", "64,4096", NULL, scale_requests},
        {"regions", "1,10,100,1000,10000,100000", NULL, NULL, scale_regions},
        {"peers", "1,4,16,64,256", NULL, NULL, scale_peers},
        {"notify", "1,8,64", NULL, "1,64", scale_notify},
    };
    const char *curve;
    int c;

    signal(SIGPIPE, SIG_IGN);
    if (getenv("OTE_TLS") == NULL)
        setenv("OTE_TLS", "tcp", 1);
    if (getenv("OTE_LOG_LEVEL") == NULL)
        setenv("OTE_LOG_LEVEL", "error", 1);
    /* A batch of 1,048,576 requests of 4 KiB is 4 GiB in flight: above the defaults. */
    if (getenv("OTE_MAX_INFLIGHT_TASKS") == NULL)
        setenv("OTE_MAX_INFLIGHT_TASKS", "4194304", 1);
    if (getenv("OTE_MAX_INFLIGHT_BYTES") == NULL)
        setenv("OTE_MAX_INFLIGHT_BYTES", "64g", 1);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    curve = argv[1];
    /* Children started in another namespace end with --listen IP (scale_spawn). */
    if (argc >= 4 && strcmp(argv[argc - 2], "--listen") == 0 &&
        (strcmp(curve, "serve") == 0 || strcmp(curve, "notify-send") == 0)) {
        snprintf(sopt.listen_ip, sizeof(sopt.listen_ip), "%s", argv[argc - 1]);
        argc -= 2;
        argv[argc] = NULL;
    }
    if (strcmp(curve, "serve") == 0)
        return scale_serve_main(argc, argv);
    if (strcmp(curve, "notify-send") == 0)
        return scale_notify_send_main(argc, argv);
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': sopt.num_counts = parse_list(optarg, sopt.counts, "--counts"); break;
        case 's': sopt.num_sizes = parse_list(optarg, sopt.sizes, "--sizes"); break;
        case 'r': sopt.reps = scale_number(optarg, 1, "--reps"); break;
        case 'k': sopt.checks = scale_number(optarg, 1, "--checks"); break;
        case 'p': sopt.per_peer = scale_number(optarg, 1, "--per-peer"); break;
        case 'i': sopt.idle_s = atof(optarg); break;
        case 'm': sopt.messages = scale_number(optarg, 1, "--messages"); break;
        case 'n': sopt.num_per_call = parse_list(optarg, sopt.per_call, "--per-call"); break;
        case 'l': snprintf(sopt.listen_ip, sizeof(sopt.listen_ip), "%s", optarg); break;
        case 'N': snprintf(sopt.target_netns, sizeof(sopt.target_netns), "%s", optarg); break;
        case 'T': snprintf(sopt.target_ip, sizeof(sopt.target_ip), "%s", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (sopt.reps == 0 || sopt.checks == 0 || sopt.per_peer == 0 || sopt.messages == 0 ||
        sopt.idle_s <= 0)
        die("--reps, --checks, --per-peer, --messages and --idle must be positive");
    if ((sopt.target_netns[0] != '\0') != (sopt.target_ip[0] != '\0'))
        die("--target-netns and --target-ip go together");
    for (size_t i = 0; i < sizeof(curves) / sizeof(curves[0]); i++) {
        if (strcmp(curve, curves[i].name) != 0)
            continue;
        if (sopt.num_counts == 0)
            sopt.num_counts = parse_list(curves[i].counts, sopt.counts, "--counts");
        if (sopt.num_sizes == 0 && curves[i].sizes != NULL)
            sopt.num_sizes = parse_list(curves[i].sizes, sopt.sizes, "--sizes");
        if (curves[i].per_call != NULL) {
            if (sopt.num_per_call == 0)
                sopt.num_per_call = parse_list(curves[i].per_call, sopt.per_call, "--per-call");
            for (size_t j = 0; j < sopt.num_per_call; j++) {
                if (sopt.per_call[j] == 0 || sopt.per_call[j] > 1024)
                    die("--per-call: 1 to 1024 messages per call");
            }
        }
        return curves[i].run();
    }
    usage(stderr);
    return 2;
}
