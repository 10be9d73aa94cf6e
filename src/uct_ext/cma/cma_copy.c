/*
 * Native cma component: the copies. The target checks and copies; the
 * initiator only names its buffers and probes the peer once per connection.
 */
#include "cma.h"

#include "core/log.h"
#include "core/util.h"
#include "core/wire_util.h"

#include <errno.h>
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

ote_status_t ote_cma_copy(pid_t pid, void *local, uint64_t peer_addr, size_t length,
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
 */
static bool peer_alive(const ote_tcp_conn_t *c)
{
#ifdef SYS_pidfd_send_signal
    if (c->peer_pidfd >= 0)
        return syscall(SYS_pidfd_send_signal, c->peer_pidfd, 0, NULL, 0) == 0;
#endif
    return true;
}

/*
 * Copy between a checked range of region and the peer, a piece at a time
 * under the region's access guard: once the owner's deregistration returns,
 * nothing more lands in (or is read from) the memory.
 */
static ote_status_t copy_guarded(ote_tcp_conn_t *c, ote_region_t *region, uint64_t addr,
                                 uint64_t peer_addr, size_t length, bool to_peer)
{
    size_t off = 0;

    while (off < length) {
        size_t n = length - off < OTE_CMA_GUARD_CHUNK ? length - off : OTE_CMA_GUARD_CHUNK;
        ote_status_t status;

        if (!peer_alive(c))
            return OTE_ERR_REMOTE_DISCONNECT;
        if (!ote_mem_region_access_begin(region))
            return OTE_ERR_NOT_REGISTERED;
        status = ote_cma_copy(c->peer_pid, (void *)(uintptr_t)(addr + off), peer_addr + off, n,
                              to_peer);
        ote_mem_region_access_end(region);
        if (status != OTE_OK)
            return status;
        off += n;
    }
    return OTE_OK;
}

static void handle_probe(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h, uint64_t peer_addr)
{
    ote_tcp_hdr_t r = {.type = OTE_TCP_PROBE_ACK, .id = h->id};
    uint64_t v = 0, nv;
    ote_status_t status;

    errno  = 0;
    status = peer_alive(c) ? ote_cma_copy(c->peer_pid, &v, peer_addr, sizeof(v), false)
                           : OTE_ERR_REMOTE_DISCONNECT;
    if (status == OTE_OK) {
        nv     = ~v;
        status = ote_cma_copy(c->peer_pid, &nv, peer_addr + sizeof(v), sizeof(nv), true);
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
    ote_tcp_conn_reply(c, &r);
}

void ote_cma_target_handle(ote_tcp_conn_t *c, const ote_tcp_hdr_t *h, uint64_t peer_addr)
{
    bool put = h->type == OTE_TCP_PUT_REF;
    ote_tcp_hdr_t r = {.type = OTE_TCP_REF_ACK, .id = h->id};
    ote_region_t *region;
    ote_status_t status;

    if (h->type == OTE_TCP_PROBE) {
        handle_probe(c, h, peer_addr);
        return;
    }
    if (peer_addr + h->length < peer_addr) {
        /* No process has such a buffer; the decoder checked our side already. */
        status = OTE_ERR_INVALID_PARAM;
        goto reply;
    }
    status = ote_mem_region_acquire(c->iface->regions, h->addr, h->length,
                                    put ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ,
                                    &region);
    if (status == OTE_OK) {
        if (region->mem_type != OTE_MEM_TYPE_HOST)
            status = OTE_ERR_UNSUPPORTED; /* device memory: not for process_vm_* */
        else
            status = copy_guarded(c, region, h->addr, peer_addr, (size_t)h->length, !put);
        ote_mem_region_put(region);
    }
reply:
    if (status != OTE_OK)
        ote_debug("cma peer %s: %s %#llx+%llu refused: %s", c->peer, put ? "PUT" : "GET",
                  (unsigned long long)h->addr, (unsigned long long)h->length,
                  ote_status_string(status));
    r.status = status;
    r.length = status == OTE_OK ? h->length : 0;
    ote_tcp_conn_reply(c, &r);
    /*
     * The initiator posts its next request when this one completes: a reply
     * held back until the other requests read with it are copied would
     * leave this side idle while the initiator catches up.
     */
    if (h->length >= OTE_CMA_REPLY_NOW)
        ote_tcp_conn_flush(c);
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

ote_status_t ote_cma_probe(ote_tcp_iface_t *iface, int fd, const ote_tl_peer_t *peer,
                           uint64_t deadline)
{
    ote_tcp_hdr_t h = {.type = OTE_TCP_PROBE, .length = OTE_TCP_PROBE_LEN};
    uint8_t trailer[OTE_TCP_REF_TRAILER_LEN];
    volatile uint64_t *probe;
    ote_status_t status;
    uint64_t v;

    allow_ptrace();
    probe = malloc(OTE_TCP_PROBE_LEN);
    if (probe == NULL)
        return OTE_ERR_NO_MEMORY;
    do {
        v = ote_random_u64();
    } while (v == 0);
    probe[0] = v;
    probe[1] = 0;
    ote_put_u64(trailer, (uint64_t)(uintptr_t)probe);
    status = ote_tcp_handshake_step(fd, &h, trailer, sizeof(trailer), deadline);
    if (status != OTE_OK)
        return status; /* the peer may still write into the probe: it stays allocated */
    if (h.type != OTE_TCP_PROBE_ACK)
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

static ote_status_t cma_ep_put_zcopy(ote_tl_ep_t *tl_ep, void *local, size_t length,
                                     ote_region_t *local_region, uint64_t remote_addr,
                                     const void *rkey, size_t rkey_len,
                                     ote_tl_completion_t *comp)
{
    return ote_tcp_ep_post((ote_tcp_ep_t *)tl_ep, OTE_TCP_PUT_REF, local, length, local_region,
                           remote_addr, comp);
}

static ote_status_t cma_ep_get_zcopy(ote_tl_ep_t *tl_ep, void *local, size_t length,
                                     ote_region_t *local_region, uint64_t remote_addr,
                                     const void *rkey, size_t rkey_len,
                                     ote_tl_completion_t *comp)
{
    return ote_tcp_ep_post((ote_tcp_ep_t *)tl_ep, OTE_TCP_GET_REF, local, length, local_region,
                           remote_addr, comp);
}

const ote_tl_ep_ops_t ote_cma_ep_ops = {
    .put_zcopy      = cma_ep_put_zcopy,
    .get_zcopy      = cma_ep_get_zcopy,
    .inflight_bytes = ote_tcp_ep_inflight_bytes,
    .is_alive       = ote_tcp_ep_is_alive,
    .destroy        = ote_tcp_ep_destroy,
};
