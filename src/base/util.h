/* Small helpers shared by every layer: clocks, socket addresses, blocking I/O with deadlines. */
#ifndef OTE_BASE_UTIL_H
#define OTE_BASE_UTIL_H

#include <ote/ote.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

/*
 * A thread-local variable on a hot path: the initial-exec model reads it
 * at a fixed offset from the thread pointer instead of calling
 * __tls_get_addr, as a shared library's variables otherwise do. For a few
 * bytes only: a library loaded with dlopen takes them from the static TLS
 * space the loader keeps spare.
 */
#define OTE_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))

/*
 * What a library's entry points loaded at run time on first use share
 * (CUDA, cuFile): the first caller of ote_load_once runs load, every caller
 * gets its outcome, and table is published once load succeeded.
 */
typedef struct {
    pthread_mutex_t     lock;
    bool                tried;
    ote_status_t        status;
    const void *_Atomic table;
} ote_load_once_t;

#define OTE_LOAD_ONCE_INIT {PTHREAD_MUTEX_INITIALIZER, false, OTE_ERR_UNSUPPORTED, NULL}

ote_status_t ote_load_once(ote_load_once_t *once, ote_status_t (*load)(const char *arg),
                           const char *arg, const void *table);

/* The table once loaded, else NULL. */
static inline const void *ote_load_once_table(ote_load_once_t *once)
{
    return atomic_load_explicit(&once->table, memory_order_acquire);
}

/* Ask the threads that wait on cond under lock to end: *stop set under lock, all of them woken. */
void ote_cond_stop(pthread_mutex_t *lock, pthread_cond_t *cond, bool *stop);

/* A condition variable whose timed waits count on CLOCK_MONOTONIC, as ote_time_ns does. */
void ote_cond_init_monotonic(pthread_cond_t *cond);
/* clock's time ns from now: the deadline of a timed wait on a condition of that clock. */
struct timespec ote_clock_after(clockid_t clock, uint64_t ns);

static inline uint64_t ote_time_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * The time this thread's progress round began, or 0 outside a round
 * (ote_round_begin, ote_round_end). Stamps that need no finer time than a
 * round lasts (an operation's post time for its timeout, the end of a
 * slice for a rail's rate window) take it instead of reading the clock
 * once per request.
 */
extern OTE_THREAD_LOCAL uint64_t ote_round_ns;

/* Begin a round; returns what ote_round_end restores (rounds may nest). */
static inline uint64_t ote_round_begin(void)
{
    uint64_t outer = ote_round_ns;

    ote_round_ns = ote_time_ns();
    return outer;
}

static inline void ote_round_end(uint64_t outer)
{
    ote_round_ns = outer;
}

/* The round's time inside a round, the clock outside one. */
static inline uint64_t ote_round_time_ns(void)
{
    uint64_t t = ote_round_ns;

    return t != 0 ? t : ote_time_ns();
}

#define OTE_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OTE_MAX(a, b) ((a) > (b) ? (a) : (b))

/*
 * "host:port", "[v6]:port", "host" (port 0). Numeric addresses or resolvable
 * names. ote_sockaddr_parse waits for the name service as long as it takes
 * (the engine's own addresses); ote_sockaddr_resolve at most timeout_ms
 * (a peer's address), then OTE_ERR_TIMEOUT, the lookup left to end on its
 * own. OTE_ERR_NOT_FOUND: the name does not resolve; INVALID_PARAM: not
 * of that form.
 */
ote_status_t ote_sockaddr_parse(const char *str, struct sockaddr_storage *ss, socklen_t *len_p);
ote_status_t ote_sockaddr_resolve(const char *str, long timeout_ms, struct sockaddr_storage *ss,
                                  socklen_t *len_p);
/* "ip:port" or "[ip]:port". */
void         ote_sockaddr_format(const struct sockaddr *sa, char *buf, size_t len);
/* Numeric IP without port. */
void         ote_sockaddr_ip(const struct sockaddr *sa, char *buf, size_t len);
bool         ote_sockaddr_is_any(const struct sockaddr *sa);
uint16_t     ote_sockaddr_port(const struct sockaddr *sa);
void         ote_sockaddr_set_port(struct sockaddr *sa, uint16_t port);

/* A non-blocking-capable listening socket bound to ss (port 0 = any). */
ote_status_t ote_socket_listen(const struct sockaddr_storage *ss, socklen_t len, int *fd_p);
/*
 * Connect within timeout_ms; the socket is returned in blocking mode.
 * OTE_ERR_NOT_FOUND: refused, or no route to the host or its network;
 * OTE_ERR_TIMEOUT: no answer in time.
 */
ote_status_t ote_socket_connect(const struct sockaddr_storage *ss, socklen_t len,
                                int timeout_ms, int *fd_p);
/*
 * Whether a connect within timeout_ms is refused (ECONNREFUSED: the host
 * answered that nothing listens there); false for a listener, no route
 * from here (EHOSTUNREACH, ENETUNREACH) and no answer.
 */
bool         ote_socket_refuses(const struct sockaddr_storage *ss, socklen_t len, int timeout_ms);
/* Send/receive exactly len bytes before deadline_ns (monotonic). */
/* close(fd) where fd is open (>= 0); -1, "none", is passed over. */
void         ote_fd_close(int fd);
ote_status_t ote_socket_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
ote_status_t ote_socket_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);
ote_status_t ote_socket_set_nonblock(int fd, bool on);
/* Close with a reset: queued output is dropped and the peer learns at once
 * (a graceful FIN would wait behind data a peer that does not read never takes). */
void         ote_socket_abort(int fd);
/* The reset of ote_socket_abort for whoever closes fd later. */
void         ote_socket_set_linger0(int fd);
/*
 * Dead-peer detection for a TCP connection: keepalive (idle
 * OTE_SOCKET_KEEPIDLE_S, then probes OTE_SOCKET_KEEPINTVL_S apart) and
 * TCP_USER_TIMEOUT (OTE_SOCKET_USER_TIMEOUT_MS: data or probes left
 * unacknowledged that long end the connection). A connection whose peer
 * vanished without a FIN or reset reaching us (its host or network
 * namespace gone, a link down while it died) then fails with ETIMEDOUT,
 * idle or with bytes queued, instead of staying open for ever. Best effort;
 * nothing for sockets that are not TCP.
 */
#define OTE_SOCKET_KEEPIDLE_S       5
#define OTE_SOCKET_KEEPINTVL_S      1
#define OTE_SOCKET_KEEPCNT          5
#define OTE_SOCKET_USER_TIMEOUT_MS  20000
void         ote_socket_set_keepalive(int fd);

/* First non-loopback IPv4 address of an interface that is up, else 127.0.0.1. */
void ote_default_ip(char *buf, size_t len);

/* Random 64-bit value from the kernel. */
uint64_t ote_random_u64(void);

/*
 * A small text file of the kernel's (a sysfs or procfs attribute, a
 * one-line file such as /etc/machine-id) into buf, NUL-terminated, its
 * trailing white space cut. -1 with errno, and buf empty: unreadable, or
 * longer than buf can hold (EOVERFLOW).
 */
int ote_read_attr(const char *path, char *buf, size_t len);

/*
 * The status of a failed file read or write (errno, or io_uring's -res):
 * EACCES, EPERM, EROFS are ACCESS; EINVAL (the file system refused the
 * request's alignment) INVALID_PARAM; ECANCELED CANCELED; ENOMEM
 * NO_MEMORY; ENOSPC, EDQUOT, EFBIG (the file system or the process's file
 * size limit is full), EIO, EBADF and the rest IO.
 */
ote_status_t ote_status_from_io_errno(int err);

/*
 * Grow a ring of count elements of elem bytes from *head_p (index modulo
 * *cap_p) to twice its capacity, or first_cap (1 when 0) if it has none:
 * the elements move to the front, in order, and *head_p becomes 0. On
 * failure (OTE_ERR_NO_MEMORY: no memory, or a size past SIZE_MAX) nothing
 * changes.
 */
ote_status_t ote_ring_grow(void **ring, size_t *cap_p, size_t *head_p, size_t count, size_t elem,
                           size_t first_cap);
/*
 * Room for at least need elements of elem bytes in the array *arr of
 * *cap_p: doubled from first_cap (1 when 0) as often as needed (realloc,
 * contents kept). On failure (OTE_ERR_NO_MEMORY: no memory, or a size past
 * SIZE_MAX) nothing changes.
 */
ote_status_t ote_array_reserve(void **arr, size_t *cap_p, size_t need, size_t elem,
                               size_t first_cap);

/* Mappings of at least this size start on a boundary of it (a huge page on x86-64). */
#define OTE_HUGE_ALIGN (2ull << 20)

/*
 * mmap(NULL, len, prot, flags, fd, 0), placed on an OTE_HUGE_ALIGN boundary
 * when len is at least that, with transparent huge pages asked for
 * (MADV_HUGEPAGE): the kernel backs it with huge pages where its policy
 * allows (anonymous memory: THP "enabled" always or madvise; a memfd:
 * "shmem_enabled" always, within_size or advise), and 4 KiB pages where
 * not. MAP_FAILED with errno on failure, as mmap.
 */
void *ote_mmap_huge(size_t len, int prot, int flags, int fd);

/* A moment's pause in a polling loop (x86 pause, arm yield); nothing elsewhere. */
static inline void ote_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
