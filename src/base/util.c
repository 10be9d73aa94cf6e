#include "util.h"

#include "log.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

OTE_THREAD_LOCAL uint64_t ote_round_ns;

/*
 * A name lookup that its caller may leave: getaddrinfo in a thread of its
 * own, freed by the last of the caller and that thread.
 */
typedef struct {
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    int              refs; /* the caller's and the thread's */
    bool             done;
    int              rc;
    struct addrinfo *res;
    char             host[256];
} lookup_t;

static void lookup_put(lookup_t *l)
{
    bool last;

    pthread_mutex_lock(&l->lock);
    last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (!last)
        return;
    if (l->res != NULL)
        freeaddrinfo(l->res);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static void *lookup_main(void *arg)
{
    lookup_t *l     = arg;
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(l->host, NULL, &(struct addrinfo){.ai_socktype = SOCK_STREAM}, &res);

    pthread_mutex_lock(&l->lock);
    l->rc   = rc;
    l->res  = res;
    l->done = true;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    lookup_put(l);
    return NULL;
}

/* The first address of res into ss. */
static void addr_take(const struct addrinfo *res, struct sockaddr_storage *ss, socklen_t *len_p)
{
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = (socklen_t)res->ai_addrlen;
}

/*
 * getaddrinfo of host within timeout_ms (< 0: no bound); the first address
 * into ss. A lookup still running at the bound is left to end on its own.
 */
static ote_status_t lookup(const char *host, long timeout_ms, struct sockaddr_storage *ss,
                           socklen_t *len_p)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags    = AI_NUMERICSERV | AI_NUMERICHOST};
    struct addrinfo *res  = NULL;
    ote_status_t status   = OTE_ERR_NOT_FOUND;
    pthread_attr_t attr;
    struct timespec until;
    pthread_t th;
    lookup_t *l;
    int rc;

    /* An address needs no name service. */
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != EAI_NONAME || timeout_ms < 0) {
        if (rc == EAI_NONAME)
            rc = getaddrinfo(host, NULL, &(struct addrinfo){.ai_socktype = SOCK_STREAM}, &res);
        if (rc != 0 || res == NULL)
            return OTE_ERR_NOT_FOUND;
        addr_take(res, ss, len_p);
        freeaddrinfo(res);
        return OTE_OK;
    }
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(l->host, sizeof(l->host), "%s", host);
    pthread_mutex_init(&l->lock, NULL);
    ote_cond_init_monotonic(&l->cond);
    l->refs = 2;
    if (pthread_attr_init(&attr) != 0) {
        l->refs = 1;
        lookup_put(l);
        return OTE_ERR_NO_MEMORY;
    }
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &attr, lookup_main, l);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        l->refs = 1;
        lookup_put(l);
        return OTE_ERR_NO_MEMORY;
    }
    until = ote_clock_after(CLOCK_MONOTONIC, (uint64_t)timeout_ms * 1000000ull);
    pthread_mutex_lock(&l->lock);
    while (!l->done && pthread_cond_timedwait(&l->cond, &l->lock, &until) != ETIMEDOUT)
        ;
    if (!l->done) {
        status = OTE_ERR_TIMEOUT;
    } else if (l->rc == 0 && l->res != NULL) {
        addr_take(l->res, ss, len_p);
        status = OTE_OK;
    }
    pthread_mutex_unlock(&l->lock);
    lookup_put(l);
    return status;
}

ote_status_t ote_sockaddr_parse(const char *str, struct sockaddr_storage *ss, socklen_t *len_p)
{
    return ote_sockaddr_resolve(str, -1, ss, len_p);
}

ote_status_t ote_sockaddr_resolve(const char *str, long timeout_ms, struct sockaddr_storage *ss,
                                  socklen_t *len_p)
{
    char host[256];
    const char *port_str = NULL;
    ote_status_t status;
    char *end;
    long port = 0;
    size_t hl;

    if (str == NULL || *str == '\0')
        return OTE_ERR_INVALID_PARAM;
    if (str[0] == '[') {
        const char *rb = strchr(str, ']');

        if (rb == NULL || (size_t)(rb - str - 1) >= sizeof(host))
            return OTE_ERR_INVALID_PARAM;
        hl = (size_t)(rb - str - 1);
        memcpy(host, str + 1, hl);
        host[hl] = '\0';
        if (rb[1] == ':')
            port_str = rb + 2;
        else if (rb[1] != '\0')
            return OTE_ERR_INVALID_PARAM;
    } else {
        const char *colon = strrchr(str, ':');

        if (colon != NULL && strchr(str, ':') != colon)
            colon = NULL; /* bare IPv6 without port */
        hl = colon ? (size_t)(colon - str) : strlen(str);
        if (hl >= sizeof(host))
            return OTE_ERR_INVALID_PARAM;
        memcpy(host, str, hl);
        host[hl] = '\0';
        if (colon)
            port_str = colon + 1;
    }
    if (port_str != NULL) {
        errno = 0;
        port  = strtol(port_str, &end, 10);
        if (errno || end == port_str || *end != '\0' || port < 0 || port > 65535)
            return OTE_ERR_INVALID_PARAM;
    }
    memset(ss, 0, sizeof(*ss));
    status = lookup(host, timeout_ms, ss, len_p);
    if (status != OTE_OK)
        return status;
    ote_sockaddr_set_port((struct sockaddr *)ss, (uint16_t)port);
    return OTE_OK;
}

void ote_sockaddr_ip(const struct sockaddr *sa, char *buf, size_t len)
{
    if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)len);
    else
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len);
}

void ote_sockaddr_format(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];

    ote_sockaddr_ip(sa, ip, sizeof(ip));
    if (sa->sa_family == AF_INET6)
        snprintf(buf, len, "[%s]:%u", ip, ote_sockaddr_port(sa));
    else
        snprintf(buf, len, "%s:%u", ip, ote_sockaddr_port(sa));
}

bool ote_sockaddr_is_any(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
}

uint16_t ote_sockaddr_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

void ote_sockaddr_set_port(struct sockaddr *sa, uint16_t port)
{
    if (sa->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)sa)->sin_port = htons(port);
}

ote_status_t ote_socket_set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0)
        return OTE_ERR_IO;
    fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) == 0 ? OTE_OK : OTE_ERR_IO;
}

void ote_socket_set_linger0(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};

    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

void ote_socket_set_keepalive(int fd)
{
    int one = 1, idle = OTE_SOCKET_KEEPIDLE_S, intvl = OTE_SOCKET_KEEPINTVL_S,
        cnt = OTE_SOCKET_KEEPCNT;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
        return;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &(unsigned){OTE_SOCKET_USER_TIMEOUT_MS},
               sizeof(unsigned));
}

void ote_socket_abort(int fd)
{
    ote_socket_set_linger0(fd);
    close(fd);
}

ote_status_t ote_socket_listen(const struct sockaddr_storage *ss, socklen_t len, int *fd_p)
{
    int one = 1;
    int fd  = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    if (fd < 0)
        return OTE_ERR_IO;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)ss, len) != 0 || listen(fd, 1024) != 0) {
        char a[80];

        ote_sockaddr_format((const struct sockaddr *)ss, a, sizeof(a));
        ote_error("cannot listen on %s: %s", a, strerror(errno));
        close(fd);
        return OTE_ERR_IO;
    }
    *fd_p = fd;
    return OTE_OK;
}

static int remaining_ms(uint64_t deadline_ns)
{
    uint64_t now = ote_time_ns();

    if (now >= deadline_ns)
        return 0;
    return (int)OTE_MIN((deadline_ns - now + 999999) / 1000000, (uint64_t)INT32_MAX);
}

/* ote_socket_connect, and in *errno_p the connect's errno where it failed (else 0). */
static ote_status_t socket_connect(const struct sockaddr_storage *ss, socklen_t len,
                                   int timeout_ms, int *fd_p, int *errno_p)
{
    uint64_t deadline = ote_time_ns() + (uint64_t)timeout_ms * 1000000ull;
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int err = 0;
    socklen_t el = sizeof(err);

    if (fd < 0)
        return OTE_ERR_IO;
    if (connect(fd, (const struct sockaddr *)ss, len) != 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int rc;

        if (errno != EINPROGRESS)
            goto err;
        do {
            rc = poll(&p, 1, remaining_ms(deadline));
        } while (rc < 0 && errno == EINTR);
        if (rc == 0) {
            close(fd);
            return OTE_ERR_TIMEOUT;
        }
        if (rc < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            errno = err;
            goto err;
        }
    }
    ote_socket_set_nonblock(fd, false);
    *fd_p = fd;
    return OTE_OK;

err:
    {
        ote_status_t st = (errno == ECONNREFUSED || errno == EHOSTUNREACH ||
                           errno == ENETUNREACH)
                              ? OTE_ERR_NOT_FOUND
                              : OTE_ERR_IO;

        *errno_p = errno;
        close(fd);
        return st;
    }
}

ote_status_t ote_socket_connect(const struct sockaddr_storage *ss, socklen_t len,
                                int timeout_ms, int *fd_p)
{
    int err = 0;

    return socket_connect(ss, len, timeout_ms, fd_p, &err);
}

bool ote_socket_refuses(const struct sockaddr_storage *ss, socklen_t len, int timeout_ms)
{
    int fd, err = 0;

    if (socket_connect(ss, len, timeout_ms, &fd, &err) == OTE_OK) {
        close(fd);
        return false;
    }
    return err == ECONNREFUSED;
}

static ote_status_t wait_fd(int fd, short events, uint64_t deadline_ns)
{
    struct pollfd p = {.fd = fd, .events = events};
    int rc;

    do {
        rc = poll(&p, 1, remaining_ms(deadline_ns));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return OTE_ERR_TIMEOUT;
    return rc < 0 ? OTE_ERR_IO : OTE_OK;
}

/* Send (out) or receive exactly len bytes at p before deadline_ns. */
static ote_status_t socket_io_all(int fd, uint8_t *p, size_t len, bool out, uint64_t deadline_ns)
{
    while (len > 0) {
        ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, len, MSG_DONTWAIT);

        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            ote_status_t st = wait_fd(fd, out ? POLLOUT : POLLIN, deadline_ns);

            if (st != OTE_OK)
                return st;
            continue;
        }
        /* Reset, or (receiving) the peer's orderly shutdown. */
        return OTE_ERR_REMOTE_DISCONNECT;
    }
    return OTE_OK;
}

void ote_fd_close(int fd)
{
    if (fd >= 0)
        close(fd);
}

ote_status_t ote_socket_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    /* Only read through p when sending. */
    return socket_io_all(fd, (uint8_t *)buf, len, true, deadline_ns);
}

ote_status_t ote_socket_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    return socket_io_all(fd, buf, len, false, deadline_ns);
}

void ote_default_ip(char *buf, size_t len)
{
    struct ifaddrs *ifa, *i;

    snprintf(buf, len, "127.0.0.1");
    if (getifaddrs(&ifa) != 0)
        return;
    for (i = ifa; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
            !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
            continue;
        ote_sockaddr_ip(i->ifa_addr, buf, len);
        break;
    }
    freeifaddrs(ifa);
}

uint64_t ote_random_u64(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = ote_time_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

/* The capacity a growing array moves to: twice cap, or first_cap (at least 1) when it has none. */
static size_t grown_cap(size_t cap, size_t first_cap)
{
    if (cap == 0)
        return first_cap != 0 ? first_cap : 1;
    return cap <= SIZE_MAX / 2 ? cap * 2 : 0;
}

ote_status_t ote_ring_grow(void **ring, size_t *cap_p, size_t *head_p, size_t count, size_t elem,
                           size_t first_cap)
{
    size_t ncap = grown_cap(*cap_p, first_cap);
    uint8_t *n;

    if (ncap == 0 || ncap < count || elem == 0 || ncap > SIZE_MAX / elem ||
        (n = malloc(ncap * elem)) == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < count; i++)
        memcpy(n + i * elem, (uint8_t *)*ring + ((*head_p + i) % *cap_p) * elem, elem);
    free(*ring);
    *ring   = n;
    *cap_p  = ncap;
    *head_p = 0;
    return OTE_OK;
}

ote_status_t ote_array_reserve(void **arr, size_t *cap_p, size_t need, size_t elem,
                               size_t first_cap)
{
    size_t ncap = *cap_p;
    void *n;

    if (need <= ncap)
        return OTE_OK;
    do
        ncap = grown_cap(ncap, first_cap);
    while (ncap != 0 && ncap < need);
    if (ncap == 0 || elem == 0 || ncap > SIZE_MAX / elem || (n = realloc(*arr, ncap * elem)) == NULL)
        return OTE_ERR_NO_MEMORY;
    *arr   = n;
    *cap_p = ncap;
    return OTE_OK;
}

void *ote_mmap_huge(size_t len, int prot, int flags, int fd)
{
    size_t room, page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *r, *p, *end;

    if (len < OTE_HUGE_ALIGN || len > SIZE_MAX - OTE_HUGE_ALIGN) {
        p = mmap(NULL, len, prot, flags, fd, 0);
    } else {
        /* Reserve len plus one alignment, map into its aligned part, give back the ends. */
        room = len + OTE_HUGE_ALIGN;
        r    = mmap(NULL, room, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED)
            return MAP_FAILED;
        p = (uint8_t *)(((uintptr_t)r + OTE_HUGE_ALIGN - 1) & ~(uintptr_t)(OTE_HUGE_ALIGN - 1));
        if (mmap(p, len, prot, flags | MAP_FIXED, fd, 0) == MAP_FAILED) {
            int err = errno;

            munmap(r, room);
            errno = err;
            return MAP_FAILED;
        }
        /* The mapping ends on the page after len's last byte; the reservation's rest goes. */
        end = p + ((len + page - 1) & ~(page - 1));
        if (p > r)
            munmap(r, (size_t)(p - r));
        if (end < r + room)
            munmap(end, (size_t)(r + room - end));
    }
    if (p != MAP_FAILED && len >= OTE_HUGE_ALIGN)
        (void)madvise(p, len, MADV_HUGEPAGE);
    return p;
}

int ote_read_attr(const char *path, char *buf, size_t len)
{
    size_t n = 0;
    ssize_t r;
    char extra;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    buf[0] = '\0';
    if (fd < 0)
        return -1;
    while (n < len - 1) {
        r = read(fd, buf + n, len - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;

            close(fd);
            buf[0] = '\0';
            errno   = e;
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n == len - 1 && read(fd, &extra, 1) > 0) {
        close(fd);
        buf[0] = '\0';
        errno  = EOVERFLOW;
        return -1;
    }
    close(fd);
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        n--;
    buf[n] = '\0';
    return 0;
}

ote_status_t ote_status_from_io_errno(int err)
{
    switch (err) {
    case EACCES:
    case EPERM:
    case EROFS:
        return OTE_ERR_ACCESS;
    case EINVAL:
        return OTE_ERR_INVALID_PARAM;
    case ECANCELED:
        return OTE_ERR_CANCELED;
    case ENOMEM:
        return OTE_ERR_NO_MEMORY;
    default:
        return OTE_ERR_IO;
    }
}

void ote_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t attr;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
}

struct timespec ote_clock_after(clockid_t clock, uint64_t ns)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec += (long)(ns % 1000000000ull);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

ote_status_t ote_load_once(ote_load_once_t *once, ote_status_t (*load)(const char *arg),
                           const char *arg, const void *table)
{
    ote_status_t status;

    pthread_mutex_lock(&once->lock);
    if (!once->tried) {
        once->tried  = true;
        once->status = load(arg);
        if (once->status == OTE_OK)
            atomic_store(&once->table, table);
    }
    status = once->status;
    pthread_mutex_unlock(&once->lock);
    return status;
}

void ote_cond_stop(pthread_mutex_t *lock, pthread_cond_t *cond, bool *stop)
{
    pthread_mutex_lock(lock);
    *stop = true;
    pthread_cond_broadcast(cond);
    pthread_mutex_unlock(lock);
}
