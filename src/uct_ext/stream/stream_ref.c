/*
 * Stream base, local mode (cma, shm): the copies by reference. The target
 * checks and copies; the initiator only names its buffers (but for small
 * puts and gets, which travel by value through the stream receive path)
 * and probes the peer once per connection.
 */
#include "stream.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static ote_status_t errno_status(int err)
{
    switch (err) {
    case ESRCH:
        return OTE_ERR_REMOTE_DISCONNECT;
    case EPERM:
    case ENOSYS:
        return OTE_ERR_UNREACHABLE;
    case ENOMEM:
        return OTE_ERR_NO_MEMORY;
    default:
        return OTE_ERR_IO;
    }
}

ote_status_t ote_stream_local_copy(pid_t pid, void *local, uint64_t peer_addr, size_t length,
                                   bool to_peer)
{
    size_t done = 0;

    if (pid <= 0)
        return OTE_ERR_UNREACHABLE;
    while (done < length) {
        struct iovec l = {.iov_base = (uint8_t *)local + done, .iov_len = length - done};
        struct iovec r = {.iov_base = (void *)(uintptr_t)(peer_addr + done),
                          .iov_len  = length - done};
        ssize_t n = to_peer ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : process_vm_readv(pid, &l, 1, &r, 1, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno_status(errno);
        }
        if (n == 0)
            return OTE_ERR_IO;
        done += (size_t)n;
    }
    return OTE_OK;
}

/*
 * The connected process is still the one behind its pid: once it has gone,
 * another process may get the pid, and nothing must be copied to or from it.
 * One check stands for OTE_STREAM_LOCAL_PEER_RECHECK_NS: a pid is given again only
 * after the kernel's counter went round pid_max, which takes far longer,
 * and the copies of the requests of a busy peer skip a system call each.
 * Copy threads call it too: the time of the last check is atomic.
 */
static bool peer_alive(ote_stream_conn_t *c)
{
#ifdef SYS_pidfd_send_signal
    uint64_t now;

    if (c->peer_pidfd < 0)
        return true;
    now = ote_time_ns();
    if (now - atomic_load_explicit(&c->peer_seen_ns, memory_order_relaxed) <
        OTE_STREAM_LOCAL_PEER_RECHECK_NS)
        return true;
    if (syscall(SYS_pidfd_send_signal, c->peer_pidfd, 0, NULL, 0) != 0)
        return false;
    atomic_store_explicit(&c->peer_seen_ns, now, memory_order_relaxed);
#else
    (void)c;
#endif
    return true;
}

/*
 * Copy between a checked range of region and the peer, a piece at a time
 * under the region's access guard: once the owner's deregistration returns,
 * nothing more lands in (or is read from) the memory.
 */
static ote_status_t copy_guarded(ote_stream_conn_t *c, ote_region_t *region, uint64_t addr,
                                 uint64_t peer_addr, size_t length, bool to_peer)
{
    size_t off = 0;

    while (off < length) {
        size_t n = length - off < OTE_STREAM_LOCAL_GUARD_CHUNK ? length - off : OTE_STREAM_LOCAL_GUARD_CHUNK;
        ote_status_t status;

        if (!peer_alive(c))
            return OTE_ERR_REMOTE_DISCONNECT;
        if (!ote_mem_region_access_begin(region))
            return OTE_ERR_NOT_REGISTERED;
        status = ote_stream_local_copy(c->peer_pid, (void *)(uintptr_t)(addr + off),
                                       peer_addr + off, n, to_peer);
        ote_mem_region_access_end(region);
        if (status != OTE_OK)
            return status;
        off += n;
    }
    return OTE_OK;
}

static void handle_probe(ote_stream_conn_t *c, const ote_stream_hdr_t *h, uint64_t peer_addr)
{
    ote_stream_hdr_t r = {.type = OTE_STREAM_PROBE_ACK, .id = h->id};
    uint64_t v = 0, nv;
    ote_status_t status;

    errno  = 0;
    status = peer_alive(c) ? ote_stream_local_copy(c->peer_pid, &v, peer_addr, sizeof(v), false)
                           : OTE_ERR_REMOTE_DISCONNECT;
    if (status == OTE_OK) {
        nv     = ~v;
        status = ote_stream_local_copy(c->peer_pid, &nv, peer_addr + sizeof(v), sizeof(nv), true);
    }
    if (status != OTE_OK) {
        ote_warn("cma: cannot copy to or from %s: %s (ptrace permission, Yama ptrace_scope, "
                 "another user, or another pid namespace); cma refused to it",
                 c->peer,
                 c->peer_pid <= 0 ? "its process is not visible from this pid namespace"
                                  : strerror(errno));
        /* Whatever the cause, this connection cannot carry anything. */
        status = OTE_ERR_UNREACHABLE;
    }
    r.status = status;
    r.addr   = status == OTE_OK ? v : 0;
    ote_stream_conn_reply(c, &r);
}

/* A checked request of a group, with the reference on its region. */
typedef struct {
    const ote_stream_ref_req_t *req;
    ote_region_t            *region;
    ote_status_t             status;
} ref_item_t;

/* The checks of one request; on success *region_p holds a reference. */
static ote_status_t ref_check(ote_stream_conn_t *c, const ote_stream_ref_req_t *q,
                              ote_region_t **region_p)
{
    const ote_stream_hdr_t *h = &q->hdr;
    bool put               = h->type == OTE_STREAM_PUT_REF;

    if (q->peer_addr + h->length < q->peer_addr)
        return OTE_ERR_INVALID_PARAM; /* no process has such a buffer */
    /* Device memory: not for process_vm_* either. */
    return ote_stream_host_region_acquire(c, h->addr, h->length,
                                          put ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ,
                                          region_p);
}

static void ref_reply(ote_stream_conn_t *c, const ote_stream_hdr_t *h, ote_status_t status)
{
    ote_stream_hdr_t r = {.type = OTE_STREAM_REF_ACK, .id = h->id, .status = status};

    if (status != OTE_OK)
        ote_debug("cma peer %s: %s %#llx+%llu refused: %s", c->peer,
                  h->type == OTE_STREAM_PUT_REF ? "PUT" : "GET", (unsigned long long)h->addr,
                  (unsigned long long)h->length, ote_status_string(status));
    r.length = status == OTE_OK ? h->length : 0;
    ote_stream_conn_reply(c, &r);
}

/*
 * Copy a group of requests of one direction, OTE_STREAM_LOCAL_GUARD_CHUNK bytes at
 * most, with one system call under every region's guard; whatever that call
 * leaves undone is copied request by request, which finds each one's own
 * status.
 */
static void copy_group(ote_stream_conn_t *c, ref_item_t *it, size_t n, bool to_peer)
{
    struct iovec l[OTE_STREAM_REF_GATHER], r[OTE_STREAM_REF_GATHER];
    bool guarded[OTE_STREAM_REF_GATHER] = {false};
    size_t cnt = 0, first_left = 0;
    ssize_t done = -1;

    if (n == 1 || !peer_alive(c))
        goto one_by_one;
    for (size_t i = 0; i < n; i++) {
        const ote_stream_hdr_t *h = &it[i].req->hdr;

        guarded[i] = ote_mem_region_access_begin(it[i].region);
        if (!guarded[i])
            continue;
        l[cnt] = (struct iovec){.iov_base = (void *)(uintptr_t)h->addr, .iov_len = h->length};
        r[cnt] = (struct iovec){.iov_base = (void *)(uintptr_t)it[i].req->peer_addr,
                                .iov_len  = h->length};
        cnt++;
    }
    if (cnt > 0)
        done = to_peer ? process_vm_writev(c->peer_pid, l, cnt, r, cnt, 0)
                       : process_vm_readv(c->peer_pid, l, cnt, r, cnt, 0);
    for (size_t i = 0; i < n; i++) {
        if (guarded[i])
            ote_mem_region_access_end(it[i].region);
    }
    /* Requests copied whole by the call are done; the rest go one by one. */
    first_left = n;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = it[i].req->hdr.length;

        if (!guarded[i] || done < 0 || (uint64_t)done < len) {
            first_left = i;
            break;
        }
        done -= (ssize_t)len;
        it[i].status = OTE_OK;
    }
one_by_one:
    for (size_t i = first_left; i < n; i++) {
        it[i].status = copy_guarded(c, it[i].region, it[i].req->hdr.addr, it[i].req->peer_addr,
                                    (size_t)it[i].req->hdr.length, to_peer);
    }
}

/*
 * Work units of the requests deferred together, copied by several threads
 * (ote_par_run): a piece of one large request, or a group of consecutive
 * small ones of one direction copied with one system call.
 */
#define PAR_UNITS_MAX (OTE_STREAM_REF_GATHER * 64)

typedef struct {
    ote_stream_conn_t *c;
    ref_item_t     *it;
    _Atomic int     status[OTE_STREAM_REF_GATHER]; /* the first failure of each request */
    struct {
        uint32_t first, count; /* count > 1: whole requests first.. */
        uint64_t off, len;     /* count == 1: this range of request first */
    } unit[PAR_UNITS_MAX];
} par_set_t;

static void par_fail(par_set_t *set, size_t k, ote_status_t status)
{
    int ok = OTE_OK;

    if (status != OTE_OK)
        atomic_compare_exchange_strong(&set->status[k], &ok, (int)status);
}

static void par_unit(void *arg, size_t u)
{
    par_set_t *set = arg;
    size_t k       = set->unit[u].first;
    ref_item_t *it = &set->it[k];
    bool to_peer   = it->req->hdr.type == OTE_STREAM_GET_REF;

    if (set->unit[u].count > 1) {
        copy_group(set->c, it, set->unit[u].count, to_peer);
        for (size_t m = 0; m < set->unit[u].count; m++)
            par_fail(set, k + m, it[m].status);
        return;
    }
    par_fail(set, k,
             copy_guarded(set->c, it->region, it->req->hdr.addr + set->unit[u].off,
                          it->req->peer_addr + set->unit[u].off, (size_t)set->unit[u].len,
                          to_peer));
}

/* Cut the checked requests into units; their count. */
static size_t par_cut(par_set_t *set, const ote_stream_ref_req_t *q, size_t n, uint64_t piece)
{
    size_t nu = 0;

    for (size_t i = 0; i < n;) {
        uint64_t total;
        size_t j;

        if (set->it[i].status != OTE_OK) {
            i++;
            continue;
        }
        if (q[i].hdr.length >= piece) {
            for (uint64_t off = 0; off < q[i].hdr.length; off += piece) {
                uint64_t len = q[i].hdr.length - off;

                set->unit[nu].first = (uint32_t)i;
                set->unit[nu].count = 1;
                set->unit[nu].off   = off;
                set->unit[nu].len   = len < piece ? len : piece;
                nu++;
            }
            i++;
            continue;
        }
        total = q[i].hdr.length;
        for (j = i + 1; j < n && set->it[j].status == OTE_OK && q[j].hdr.type == q[i].hdr.type &&
             q[j].hdr.length < piece && total + q[j].hdr.length <= piece;
             j++)
            total += q[j].hdr.length;
        set->unit[nu].first = (uint32_t)i;
        set->unit[nu].count = (uint32_t)(j - i);
        set->unit[nu].off   = 0;
        set->unit[nu].len   = q[i].hdr.length;
        nu++;
        i = j;
    }
    return nu;
}

/* [start, start + len) as a span, its end held at the top of the address space. */
static ote_par_span_t ref_span(uint64_t start, uint64_t len, bool write)
{
    return (ote_par_span_t){start, start + len < start ? UINT64_MAX : start + len, write};
}

/*
 * Two of the requests touch the same bytes with one of them writing them:
 * they must be copied one after the other, in order. This process's ranges
 * (written by a PUT) and the peer's (written by a GET) are compared apart.
 */
static bool refs_conflict(const ote_stream_ref_req_t *q, size_t n)
{
    ote_par_span_t here[OTE_STREAM_REF_GATHER], peer[OTE_STREAM_REF_GATHER];

    for (size_t i = 0; i < n; i++) {
        bool put = q[i].hdr.type == OTE_STREAM_PUT_REF;

        here[i] = ref_span(q[i].hdr.addr, q[i].hdr.length, put);
        peer[i] = ref_span(q[i].peer_addr, q[i].hdr.length, !put);
    }
    return ote_par_spans_conflict(here, n) || ote_par_spans_conflict(peer, n);
}

/*
 * The deferred requests, when they add up to OTE_STREAM_LOCAL_PAR_SPLIT, the iface
 * has copy threads and no two of them touch the same bytes with one
 * writing (refs_conflict): every request checked in order, the copies of
 * those that pass cut into units of about OTE_STREAM_LOCAL_PAR_PIECE (pieces of
 * large requests, groups of small ones) that this thread and the copy
 * threads share, then the answers in order. False when not taken (the
 * caller serves them in order, in groups).
 */
static bool target_flush_shared(ote_stream_conn_t *c, const ote_stream_ref_req_t *q, size_t n)
{
    ote_stream_local_iface_t *iface = (ote_stream_local_iface_t *)c->iface;
    ref_item_t it[OTE_STREAM_REF_GATHER];
    bool held[OTE_STREAM_REF_GATHER]; /* checked: a reference on its region */
    uint64_t total = 0, piece;
    size_t nu;
    par_set_t *set;

    if (n < 2 || ote_par_width(iface->par) == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        total += q[i].hdr.length;
    if (total < OTE_STREAM_LOCAL_PAR_SPLIT || refs_conflict(q, n) || (set = malloc(sizeof(*set))) == NULL)
        return false;
    /* Pieces of OTE_STREAM_LOCAL_PAR_PIECE, larger where the requests are too large to count. */
    piece = OTE_STREAM_LOCAL_PAR_PIECE;
    while (total / piece + n > PAR_UNITS_MAX)
        piece *= 2;
    set->c  = c;
    set->it = it;
    for (size_t i = 0; i < n; i++) {
        it[i].req    = &q[i];
        it[i].status = ref_check(c, &q[i], &it[i].region);
        held[i]      = it[i].status == OTE_OK;
        atomic_init(&set->status[i], (int)it[i].status);
    }
    nu = par_cut(set, q, n, piece);
    ote_par_run(iface->par, nu, par_unit, set);
    for (size_t i = 0; i < n; i++) {
        ref_reply(c, &q[i].hdr, (ote_status_t)atomic_load(&set->status[i]));
        if (held[i])
            ote_mem_region_put(it[i].region);
    }
    free(set);
    ote_stream_conn_flush(c);
    return true;
}

/*
 * Serve the deferred requests in order: shared with the copy threads when
 * they are large (target_flush_shared), else consecutive ones of one
 * direction that pass their checks are copied together
 * (OTE_STREAM_LOCAL_GUARD_CHUNK bytes at most), each group answered as soon as it
 * is copied.
 */
void ote_stream_local_target_flush(ote_stream_conn_t *c)
{
    ote_stream_ref_req_t q[OTE_STREAM_REF_GATHER];
    ref_item_t it[OTE_STREAM_REF_GATHER];
    size_t n = c->ref_npending, i = 0;
    struct pollfd pfd = {.fd = c->fd, .events = POLLRDHUP};

    memcpy(q, c->ref_pending, n * sizeof(q[0]));
    c->ref_npending = 0;
    /*
     * An initiator closes its connection only once it has given up on what
     * it still had queued there (its tasks ended TIMEOUT or CANCELED): a
     * local socket does not reset, so its requests are still read here, and
     * none may be copied into or out of its memory now.
     */
    if (n > 0 && poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        ote_debug("%s peer %s closed its connection: %zu requests it gave up on dropped",
                  OTE_STREAM_CONN_TL(c), c->peer, n);
        ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
        return;
    }
    c->ref_busy     = true;
    if (target_flush_shared(c, q, n))
        i = n;
    while (i < n && !c->dead) {
        uint8_t type = q[i].hdr.type;
        uint64_t total;
        size_t k = 0;
        ote_status_t status = ref_check(c, &q[i], &it[0].region);

        if (status != OTE_OK) {
            ref_reply(c, &q[i].hdr, status);
            i++;
            continue;
        }
        it[k++].req = &q[i];
        total       = q[i].hdr.length;
        /* Gather the next ones that pass their checks; stop at the first that does not. */
        while (i + k < n && q[i + k].hdr.type == type &&
               total + q[i + k].hdr.length <= OTE_STREAM_LOCAL_GUARD_CHUNK &&
               ref_check(c, &q[i + k], &it[k].region) == OTE_OK) {
            it[k].req = &q[i + k];
            total += q[i + k].hdr.length;
            k++;
        }
        copy_group(c, it, k, type == OTE_STREAM_GET_REF);
        for (size_t m = 0; m < k; m++) {
            ref_reply(c, &it[m].req->hdr, it[m].status);
            ote_mem_region_put(it[m].region);
        }
        i += k;
        /*
         * The initiator posts its next request when one completes: answers
         * held back until every deferred request is copied would leave
         * this side idle while it catches up.
         */
        if (total >= OTE_STREAM_LOCAL_REPLY_NOW)
            ote_stream_conn_flush(c);
    }
    c->ref_busy = false;
}

void ote_stream_local_target_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h,
                                    uint64_t peer_addr)
{
    if (h->type == OTE_STREAM_PROBE) {
        /* Its answer comes after those of the requests before it. */
        if (c->ref_npending)
            ote_stream_local_target_flush(c);
        handle_probe(c, h, peer_addr);
        return;
    }
    if (c->ref_npending == OTE_STREAM_REF_GATHER)
        ote_stream_local_target_flush(c);
    /* Served when the receive call ends, with the requests read along with it. */
    c->ref_pending[c->ref_npending++] = (ote_stream_ref_req_t){.hdr = *h, .peer_addr = peer_addr};
}

/*
 * Let peers read and write this process with process_vm_*: under Yama's
 * ptrace_scope 1 only a declared ptracer may, so declare any (once). Scope
 * 0 needs nothing; 2 and 3 cannot be helped, and the probe says so.
 */
static void allow_ptrace(void)
{
    static atomic_bool done;
    char buf[8] = "";
    FILE *f;

    if (atomic_exchange(&done, true))
        return;
    f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f == NULL)
        return;
    if (fgets(buf, sizeof(buf), f) != NULL && buf[0] == '1') {
        if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0)
            ote_warn("cma: prctl(PR_SET_PTRACER): %s", strerror(errno));
        else
            ote_debug("cma: Yama ptrace_scope 1: peers may now read this process's memory");
    }
    fclose(f);
}

ote_status_t ote_stream_local_probe(ote_stream_iface_t *iface, int fd, const ote_tl_peer_t *peer,
                                    uint64_t deadline)
{
    ote_stream_hdr_t h = {.type = OTE_STREAM_PROBE, .length = OTE_STREAM_PROBE_LEN};
    uint8_t trailer[OTE_STREAM_REF_TRAILER_LEN];
    volatile uint64_t *probe;
    ote_status_t status;
    uint64_t v;

    allow_ptrace();
    probe = malloc(OTE_STREAM_PROBE_LEN);
    if (probe == NULL)
        return OTE_ERR_NO_MEMORY;
    do {
        v = ote_random_u64();
    } while (v == 0);
    probe[0] = v;
    probe[1] = 0;
    ote_put_u64(trailer, (uint64_t)(uintptr_t)probe);
    status = ote_stream_handshake_step(fd, &h, trailer, sizeof(trailer), deadline);
    if (status != OTE_OK)
        return status; /* the peer may still write into the probe: it stays allocated */
    if (h.type != OTE_STREAM_PROBE_ACK)
        return OTE_ERR_PROTOCOL; /* likewise */
    atomic_thread_fence(memory_order_acquire);
    if (h.status != OTE_OK) {
        status = OTE_ERR_UNREACHABLE;
        ote_warn("cma: %s cannot copy to or from this process with process_vm_readv/writev "
                 "(ptrace permission, Yama ptrace_scope, another user, or another pid "
                 "namespace; its log says which); cma not used to it",
                 peer->name ? peer->name : "peer");
    } else if (h.addr != v || probe[1] != ~v) {
        status = OTE_ERR_UNREACHABLE;
        ote_warn("cma: %s answered the probe with other data; cma not used to it",
                 peer->name ? peer->name : "peer");
    }
    free((void *)probe);
    return status;
}
