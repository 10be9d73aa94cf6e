/*
 * Reference for contrib/bench/run.sh: the host's own TCP stream over
 * loopback, without any library, moving the blocks of one ote_perftest batch
 * between the same memory layouts. Usage:
 *
 *   sock_blocks SIZE COUNT THREADS SCATTER SECONDS [CONNS]
 *
 * Two processes, THREADS x CONNS connections between them (CONNS: 2 by
 * default, as OTE_TCP_CONNS), one thread on each end of each. A thread's
 * pool holds COUNT blocks of SIZE bytes, and each of its CONNS connections
 * carries an equal share of them. The sender sends its share with
 * writev (at most 64 blocks a call, as ote's tcp WRITEV carries; blocks
 * that follow on in memory share an iovec element), again and again for
 * about SECONDS; the receiver reads them with readv into the blocks of its
 * own pool, in the same order. With SCATTER the blocks sit at shuffled slots
 * of pools twice their footprint on both sides (the KV pattern, as
 * memcpy_blocks.c), otherwise back to back. Prints the aggregate GB/s
 * (10^9 B/s) the receivers saw, from the start to the last byte.
 * Nothing here is a test.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IOV_BLOCKS 64
#define MAX_CONNS 64

struct end {
    int fd;
    size_t size, count; /* the pool's blocks */
    size_t first, last; /* the share of this connection: [first, last) */
    int scatter;
    double seconds;
    char *pool;         /* shared by the CONNS connections of one thread */
    size_t *slot;
    double gbps;        /* receiver: what it saw */
};

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The pool and the order of its slots (shuffled with SCATTER). */
static char *new_pool(const struct end *e, int fill, unsigned seed, size_t **slot_p)
{
    size_t slots = e->scatter ? 2 * e->count : e->count;
    char *p      = malloc(slots * e->size);
    size_t *slot = malloc(slots * sizeof(*slot));

    if (p == NULL || slot == NULL) {
        fprintf(stderr, "sock_blocks: out of memory\n");
        exit(1);
    }
    memset(p, fill, slots * e->size);
    for (size_t i = 0; i < slots; i++)
        slot[i] = i;
    for (size_t i = slots - 1; e->scatter && i > 0; i--) {
        size_t j = (size_t)rand_r(&seed) % (i + 1), t = slot[i];

        slot[i] = slot[j];
        slot[j] = t;
    }
    *slot_p = slot;
    return p;
}

/*
 * The iovec of at most IOV_BLOCKS blocks from block i, byte off of it on;
 * blocks that follow on in memory share an element. Returns the elements.
 */
static int blocks_iov(const struct end *e, size_t i, size_t off, struct iovec *iov)
{
    int k = 0;

    for (size_t n = 0; n < IOV_BLOCKS && i < e->last; n++, i++, off = 0) {
        char *b = e->pool + e->slot[i] * e->size + off;

        if (k > 0 && (char *)iov[k - 1].iov_base + iov[k - 1].iov_len == b) {
            iov[k - 1].iov_len += e->size - off;
        } else {
            iov[k].iov_base = b;
            iov[k].iov_len  = e->size - off;
            k++;
        }
    }
    return k;
}

/* Block i, byte off of it: n bytes further on, back to the share's first block at its end. */
static void advance(const struct end *e, size_t *i, size_t *off, size_t n)
{
    *off += n;
    *i += *off / e->size;
    *off %= e->size;
    if (*i == e->last)
        *i = e->first;
}

static void *send_loop(void *arg)
{
    struct end *e = arg;
    size_t i = e->first, off = 0;
    double t0;
    char go;

    if (read(e->fd, &go, 1) != 1)
        exit(1);
    t0 = now();
    while (i > e->first || off > 0 || now() - t0 < e->seconds) {
        struct iovec iov[IOV_BLOCKS];
        int k     = blocks_iov(e, i, off, iov);
        ssize_t n = writev(e->fd, iov, k);

        if (n <= 0) {
            perror("sock_blocks: writev");
            exit(1);
        }
        advance(e, &i, &off, (size_t)n);
    }
    shutdown(e->fd, SHUT_WR);
    return NULL;
}

static void *recv_loop(void *arg)
{
    struct end *e = arg;
    size_t i = e->first, off = 0;
    unsigned long long bytes = 0;
    double t0;

    t0 = now();
    if (write(e->fd, "g", 1) != 1)
        exit(1);
    for (;;) {
        struct iovec iov[IOV_BLOCKS];
        int k     = blocks_iov(e, i, off, iov);
        ssize_t n = readv(e->fd, iov, k);

        if (n == 0)
            break;
        if (n < 0) {
            perror("sock_blocks: readv");
            exit(1);
        }
        bytes += (unsigned long long)n;
        advance(e, &i, &off, (size_t)n);
    }
    e->gbps = (double)bytes / (now() - t0) / 1e9;
    if (e->pool[e->slot[e->first] * e->size] != 1) { /* the sender's bytes came */
        fprintf(stderr, "sock_blocks: the blocks did not arrive\n");
        exit(1);
    }
    return NULL;
}

/* The ends of this process: each thread's pool, shared by its connections' shares. */
static void make_ends(struct end *e, int threads, int conns, int fill)
{
    for (int t = 0; t < threads; t++) {
        struct end *g = &e[t * conns];
        size_t *slot;
        char *p = new_pool(g, fill, fill + (unsigned)t, &slot);

        for (int c = 0; c < conns; c++) {
            g[c].pool  = p;
            g[c].slot  = slot;
            g[c].first = g->count * (size_t)c / (size_t)conns;
            g[c].last  = g->count * (size_t)(c + 1) / (size_t)conns;
        }
    }
}

int main(int argc, char **argv)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen       = sizeof(a);
    static struct end e[MAX_CONNS];
    static pthread_t tid[MAX_CONNS];
    int threads, conns = argc > 6 ? atoi(argv[6]) : 2, n, ls, status;
    double gbps = 0;
    pid_t child;

    if (argc < 6 || argc > 7 || (threads = atoi(argv[3])) < 1 || conns < 1 ||
        threads * conns > MAX_CONNS) {
        fprintf(stderr, "usage: sock_blocks SIZE COUNT THREADS SCATTER SECONDS [CONNS] "
                        "(THREADS x CONNS up to %d)\n", MAX_CONNS);
        return 2;
    }
    n = threads * conns;
    for (int i = 0; i < n; i++) {
        e[i] = (struct end){.size = strtoull(argv[1], NULL, 0), .count = strtoull(argv[2], NULL, 0),
                            .scatter = atoi(argv[4]), .seconds = atof(argv[5])};
        if (e[i].size == 0 || e[i].count < (size_t)conns) {
            fprintf(stderr, "sock_blocks: SIZE must be above 0 and COUNT at least CONNS\n");
            return 2;
        }
    }
    ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, n) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("sock_blocks: listen");
        return 1;
    }
    child = fork();
    if (child < 0) {
        perror("sock_blocks: fork");
        return 1;
    }
    if (child == 0) { /* the senders */
        make_ends(e, threads, conns, 1);
        for (int i = 0; i < n; i++) {
            e[i].fd = socket(AF_INET, SOCK_STREAM, 0);
            if (e[i].fd < 0 || connect(e[i].fd, (struct sockaddr *)&a, sizeof(a)) != 0)
                _exit(1);
        }
        for (int i = 0; i < n; i++)
            pthread_create(&tid[i], NULL, send_loop, &e[i]);
        for (int i = 0; i < n; i++)
            pthread_join(tid[i], NULL);
        _exit(0);
    }
    make_ends(e, threads, conns, 2);
    for (int i = 0; i < n; i++) {
        e[i].fd = accept(ls, NULL, NULL);
        if (e[i].fd < 0) {
            perror("sock_blocks: accept");
            return 1;
        }
    }
    for (int i = 0; i < n; i++)
        pthread_create(&tid[i], NULL, recv_loop, &e[i]);
    for (int i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
        gbps += e[i].gbps;
    }
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "sock_blocks: the sending process failed\n");
        return 1;
    }
    printf("%.3f\n", gbps);
    return 0;
}
