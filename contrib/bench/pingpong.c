/*
 * The host's own round trip, without any library: two processes, both
 * polling their socket (non-blocking recv, sched_yield between empty polls,
 * as ote's workers poll). The initiator sends OUT bytes, the target answers
 * IN bytes; each round trip is timed on its own. Prints "p50 p99" in
 * microseconds. MODE: tcp (default; loopback, TCP_NODELAY), unix (a
 * connected AF_UNIX stream pair, as cma's control connection), unix+vm
 * (the same, and the target reads 8 bytes of the initiator with
 * process_vm_readv before it answers, as cma's target copies a small put).
 * ote_perftest's 8-byte WRITE over tcp sends a 32-byte header and 8 bytes
 * and is answered with a 32-byte header (40 32); its READ is the other way
 * round (32 40). tcp+epoll: tcp, both sides polling an epoll set that holds
 * the socket (epoll_wait with a zero timeout) and reading only what it
 * reports, as ote's stream ifaces poll: the host's cost of that readiness
 * check on the round trip. tcp+tepoll: the target alone polls through epoll
 * (as ote's tcp target does; ote's waiting initiator reads its connection
 * directly). Nothing here is a test.
 *
 *   pingpong ITERATIONS OUT IN [tcp|tcp+epoll|tcp+tepoll|unix|unix+vm]
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 1000
#define MAXMSG 4096

static double now_us(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* tcp+epoll: an epoll set holding the process's socket; -1: poll recv itself. */
static int epfd = -1;

static int epoll_on(int fd)
{
    struct epoll_event ev = {.events = EPOLLIN};

    epfd = epoll_create1(0);
    return epfd >= 0 && epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

/* n bytes into b, polling; 0 when the peer closed or failed. */
static int poll_recv(int fd, char *b, size_t n)
{
    size_t got = 0;

    while (got < n) {
        struct epoll_event ev;
        ssize_t r;

        if (epfd >= 0 && epoll_wait(epfd, &ev, 1, 0) == 0) {
            sched_yield();
            continue;
        }
        r = recv(fd, b + got, n - got, MSG_DONTWAIT);

        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            return 0;
        else
            sched_yield();
    }
    return 1;
}

static int send_all(int fd, const char *b, size_t n)
{
    return send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* A connected pair: fds[0] the initiator's, fds[1] the target's (accepted in the child for tcp). */
static int open_pair(const char *mode, int fds[2], int *listen_p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen       = sizeof(a);
    int one = 1;

    *listen_p = -1;
    if (strncmp(mode, "tcp", 3) != 0)
        return socketpair(AF_UNIX, SOCK_STREAM, 0, fds);
    *listen_p = socket(AF_INET, SOCK_STREAM, 0);
    fds[0]    = socket(AF_INET, SOCK_STREAM, 0);
    fds[1]    = -1;
    if (*listen_p < 0 || fds[0] < 0 || bind(*listen_p, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(*listen_p, 1) != 0 || getsockname(*listen_p, (struct sockaddr *)&a, &alen) != 0 ||
        connect(fds[0], (struct sockaddr *)&a, sizeof(a)) != 0)
        return -1;
    setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

int main(int argc, char **argv)
{
    static char probe[8];
    const char *mode = argc > 4 ? argv[4] : "tcp";
    char buf[MAXMSG] = {0};
    pid_t parent     = getpid(), child;
    long iters;
    size_t out, in;
    double *lat;
    int fds[2], ls, fd, one = 1;

    if (argc < 4 || argc > 5 || (iters = atol(argv[1])) <= 0 ||
        (out = strtoul(argv[2], NULL, 0)) == 0 || (in = strtoul(argv[3], NULL, 0)) == 0 ||
        out > MAXMSG || in > MAXMSG ||
        (strcmp(mode, "tcp") != 0 && strcmp(mode, "tcp+epoll") != 0 &&
         strcmp(mode, "tcp+tepoll") != 0 && strcmp(mode, "unix") != 0 &&
         strcmp(mode, "unix+vm") != 0)) {
        fprintf(stderr,
                "usage: pingpong ITERATIONS OUT IN [tcp|tcp+epoll|tcp+tepoll|unix|unix+vm] "
                "(bytes 1..%d)\n",
                MAXMSG);
        return 2;
    }
    lat = malloc((size_t)iters * sizeof(*lat));
    if (lat == NULL || open_pair(mode, fds, &ls) != 0) {
        perror("pingpong: connect");
        return 1;
    }
    child = fork();
    if (child < 0) {
        perror("pingpong: fork");
        return 1;
    }
    if (child == 0) {
        int c = ls >= 0 ? accept(ls, NULL, NULL) : fds[1];
        struct iovec l = {buf, sizeof(probe)}, r = {probe, sizeof(probe)};
        bool vm = strcmp(mode, "unix+vm") == 0;

        /* The initiator's end closes in both processes, so that its close ends this loop. */
        close(fds[0]);
        if (c < 0 || (strncmp(mode, "tcp+", 4) == 0 && !epoll_on(c)))
            _exit(1);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        while (poll_recv(c, buf, out) &&
               (!vm || process_vm_readv(parent, &l, 1, &r, 1, 0) == (ssize_t)sizeof(probe)) &&
               send_all(c, buf, in))
            ;
        _exit(0);
    }
    fd = fds[0];
    if (strcmp(mode, "tcp+epoll") == 0 && !epoll_on(fd)) {
        perror("pingpong: epoll");
        return 1;
    }
    if (ls >= 0)
        close(ls);
    else
        close(fds[1]);
    for (long i = -WARMUP; i < iters; i++) {
        double t0 = now_us();

        if (!send_all(fd, buf, out) || !poll_recv(fd, buf, in)) {
            fprintf(stderr, "pingpong: the target went away (unix+vm: process_vm_readv "
                            "refused?)\n");
            return 1;
        }
        if (i >= 0)
            lat[i] = now_us() - t0;
    }
    close(fd);
    waitpid(child, NULL, 0);
    qsort(lat, (size_t)iters, sizeof(*lat), cmp);
    /* The percentiles as ote_perftest takes them. */
    printf("%.2f %.2f\n", lat[(size_t)((double)(iters - 1) * 0.5)],
           lat[(size_t)((double)(iters - 1) * 0.99)]);
    free(lat);
    return 0;
}
