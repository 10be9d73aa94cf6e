/*
 * The host's own TCP round trip, without any library: two processes on
 * loopback, TCP_NODELAY, both polling their socket (non-blocking recv,
 * sched_yield between empty polls, as ote's workers poll). The initiator
 * sends OUT bytes, the target answers IN bytes; each round trip is timed
 * on its own. Prints "p50 p99" in microseconds. ote_perftest's 8-byte WRITE
 * sends a 32-byte header and 8 bytes and is answered with a 32-byte header
 * (40 32); its READ is the other way round (32 40). Nothing here is a test.
 *
 *   tcp_pingpong ITERATIONS OUT IN
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* n bytes into b, polling; 0 when the peer closed or failed. */
static int poll_recv(int fd, char *b, size_t n)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = recv(fd, b + got, n - got, MSG_DONTWAIT);

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

int main(int argc, char **argv)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen       = sizeof(a);
    char buf[MAXMSG]     = {0};
    long iters;
    size_t out, in;
    double *lat;
    int ls, fd, one = 1;
    pid_t child;

    if (argc != 4 || (iters = atol(argv[1])) <= 0 || (out = strtoul(argv[2], NULL, 0)) == 0 ||
        (in = strtoul(argv[3], NULL, 0)) == 0 || out > MAXMSG || in > MAXMSG) {
        fprintf(stderr, "usage: tcp_pingpong ITERATIONS OUT IN (bytes 1..%d)\n", MAXMSG);
        return 2;
    }
    lat = malloc((size_t)iters * sizeof(*lat));
    ls  = socket(AF_INET, SOCK_STREAM, 0);
    if (lat == NULL || ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(ls, 1) != 0 || getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("tcp_pingpong: listen");
        return 1;
    }
    child = fork();
    if (child < 0) {
        perror("tcp_pingpong: fork");
        return 1;
    }
    if (child == 0) {
        int c = accept(ls, NULL, NULL);

        if (c < 0)
            _exit(1);
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        while (poll_recv(c, buf, out) && send_all(c, buf, in))
            ;
        _exit(0);
    }
    close(ls);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("tcp_pingpong: connect");
        return 1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (long i = -WARMUP; i < iters; i++) {
        double t0 = now_us();

        if (!send_all(fd, buf, out) || !poll_recv(fd, buf, in)) {
            fprintf(stderr, "tcp_pingpong: the target went away\n");
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
