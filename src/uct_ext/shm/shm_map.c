/*
 * Native shm component, initiator side: mappings of the peer's regions,
 * the copies through them, and the fallback by reference (cma's path) for
 * ranges the peer does not map.
 */
#include "shm_int.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

atomic_uint_least64_t ote_shm_bytes_mapped, ote_shm_bytes_by_ref;

void ote_shm_stats(uint64_t *mapped_p, uint64_t *by_ref_p)
{
    *mapped_p = atomic_load(&ote_shm_bytes_mapped);
    *by_ref_p = atomic_load(&ote_shm_bytes_by_ref);
}

ote_status_t ote_shm_map_check(const ote_stream_hdr_t *h, const uint8_t *trailer,
                               size_t trailer_len, int fd, uint64_t want, uint64_t want_len,
                               ote_shm_grant_info_t *info_p)
{
    ote_shm_grant_info_t info;
    struct stat st;
    uint64_t flags;
    int seals, mode;

    if (h->type != OTE_STREAM_MAP_ACK || h->status != OTE_OK || trailer == NULL ||
        trailer_len != OTE_STREAM_MAP_ACK_TRAILER_LEN || fd < 0)
        return OTE_ERR_PROTOCOL;
    info.base   = h->addr;
    info.length = h->length;
    info.grant  = ote_get_u64(trailer);
    flags       = ote_get_u64(trailer + 8);
    if (info.length == 0 || info.length > SIZE_MAX || info.base + info.length < info.base ||
        want_len == 0 || want + want_len < want || want < info.base ||
        want + want_len > info.base + info.length || info.grant == 0 ||
        (flags & ~(uint64_t)OTE_SHM_MAP_WRITABLE))
        return OTE_ERR_PROTOCOL;
    info.writable = (flags & OTE_SHM_MAP_WRITABLE) != 0;
    /* A memfd that can never shrink: no page of the mapping can go away under a copy. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 ||
        (uint64_t)st.st_size < info.length)
        return OTE_ERR_PROTOCOL;
    seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
        return OTE_ERR_PROTOCOL;
    mode = fcntl(fd, F_GETFL);
    if (mode < 0 || (info.writable && (mode & O_ACCMODE) != O_RDWR))
        return OTE_ERR_PROTOCOL;
    *info_p = info;
    return OTE_OK;
}

static shm_map_t *map_find(shm_conn_t *sc, uint64_t addr, size_t length)
{
    for (size_t i = 0; i < sc->num_maps; i++) {
        shm_map_t *m = &sc->maps[i];

        if (addr >= m->base && addr - m->base <= m->length &&
            length <= m->length - (addr - m->base))
            return m;
    }
    return NULL;
}

static bool refused(const shm_conn_t *sc, uint64_t addr, size_t length)
{
    for (size_t i = 0; i < OTE_SHM_REFUSED; i++) {
        if (sc->refused_len[i] && addr >= sc->refused_base[i] &&
            addr - sc->refused_base[i] <= sc->refused_len[i] &&
            length <= sc->refused_len[i] - (addr - sc->refused_base[i]))
            return true;
    }
    return false;
}

/*
 * The target closes the connection when this side does not unmap in time
 * (a stopped process): before copying through a mapping, look at the
 * socket when it was not looked at lately, so that after a stop the first
 * copy finds the connection closed and drops the mappings instead.
 */
static bool conn_fresh(ote_stream_conn_t *c, shm_conn_t *sc)
{
    uint64_t now = ote_time_ns();
    char b;
    ssize_t n;

    if (now - sc->checked_ns < OTE_SHM_CHECK_NS)
        return true;
    n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        ote_stream_conn_fail(c, OTE_ERR_REMOTE_DISCONNECT);
        return false;
    }
    /* Pending messages (an UNMAP) are served before the next copy. */
    if (n > 0)
        ote_stream_conn_rx(c);
    if (c->dead)
        return false;
    sc->checked_ns = now;
    return true;
}

/* memcpy between local and the mapping, under the local region's access guard. */
static ote_status_t map_copy(const shm_map_t *m, void *local, ote_region_t *local_region,
                             uint64_t remote, size_t length, bool put)
{
    uint8_t *peer = m->map + (remote - m->base);

    if (local_region != NULL && !ote_mem_region_access_begin(local_region))
        return OTE_ERR_NOT_REGISTERED;
    if (put)
        memcpy(peer, local, length);
    else
        memcpy(local, peer, length);
    if (local_region != NULL)
        ote_mem_region_access_end(local_region);
    atomic_fetch_add_explicit(&ote_shm_bytes_mapped, length, memory_order_relaxed);
    return OTE_OK;
}

static ote_status_t post_ref(ote_stream_ep_t *ep, bool put, void *local, size_t length,
                             ote_region_t *local_region, uint64_t remote,
                             ote_tl_completion_t *comp)
{
    ote_status_t status = ote_stream_ep_post(ep, put ? OTE_STREAM_PUT_REF : OTE_STREAM_GET_REF,
                                             local, length, local_region, remote, comp);

    if (status == OTE_INPROGRESS)
        atomic_fetch_add_explicit(&ote_shm_bytes_by_ref, length, memory_order_relaxed);
    return status;
}

ote_status_t ote_shm_post(ote_tl_ep_t *tl_ep, bool put, void *local, size_t length,
                          ote_region_t *local_region, uint64_t remote,
                          ote_tl_completion_t *comp)
{
    ote_stream_ep_t *ep  = (ote_stream_ep_t *)tl_ep;
    ote_stream_conn_t *c = ote_stream_ep_conn(ep);
    shm_conn_t *sc    = c != NULL ? ote_shm_conn(c) : NULL;
    shm_map_t *m;

    if (sc == NULL)
        return post_ref(ep, put, local, length, local_region, remote, comp);
    m = map_find(sc, remote, length);
    if (m != NULL && (!put || m->writable)) {
        if (!conn_fresh(c, sc))
            return post_ref(ep, put, local, length, local_region, remote, comp);
        m = map_find(sc, remote, length); /* an UNMAP may have been served */
        if (m != NULL && (!put || m->writable)) {
            shm_iface_t *iface = (shm_iface_t *)tl_ep->iface;
            uint8_t *peer      = m->map + (remote - m->base);

            /* Queued: the iface's next progress copies it, shared out when large. */
            if (ote_shm_copy_add(&iface->copier, put ? peer : local, put ? local : peer,
                                 length, local_region, comp) == OTE_OK)
                return OTE_INPROGRESS;
            return map_copy(m, local, local_region, remote, length, put);
        }
    }
    /* Read-only mapping for a write, no mapping room, or memory not mapped: the target checks. */
    if (m != NULL || refused(sc, remote, length) || sc->num_maps >= OTE_SHM_MAX_MAPS)
        return post_ref(ep, put, local, length, local_region, remote, comp);
    return ote_stream_ep_post_map(ep, put ? OTE_STREAM_PUT_REF : OTE_STREAM_GET_REF, local, length,
                                  local_region, remote, comp);
}


/* A checked grant mapped (or the mapping of that grant already held); NULL on failure. */
static shm_map_t *map_add(shm_conn_t *sc, const ote_shm_grant_info_t *g, int fd)
{
    shm_map_t *m;
    void *p;

    for (size_t i = 0; i < sc->num_maps; i++) {
        if (sc->maps[i].grant == g->grant)
            return &sc->maps[i];
    }
    if (ote_array_reserve((void **)&sc->maps, &sc->cap_maps, sc->num_maps + 1, sizeof(*sc->maps),
                          8) != OTE_OK)
        return NULL;
    /* Aligned as the owner's mapping, so the file's huge pages map whole here too. */
    p = ote_mmap_huge((size_t)g->length, PROT_READ | (g->writable ? PROT_WRITE : 0), MAP_SHARED,
                      fd);
    if (p == MAP_FAILED) {
        ote_warn("shm: cannot map %llu bytes of the peer: %s", (unsigned long long)g->length,
                 strerror(errno));
        return NULL;
    }
    m  = &sc->maps[sc->num_maps++];
    *m = (shm_map_t){.base = g->base, .length = g->length, .map = p, .grant = g->grant,
                     .writable = g->writable};
    return m;
}

static void map_ack(ote_stream_conn_t *c, const ote_stream_hdr_t *h, const uint8_t *trailer)
{
    ote_stream_op_t op  = ote_stream_conn_op_pop(c);
    ote_stream_ep_t *ep = c->ep;
    bool put         = op.then == OTE_STREAM_PUT_REF;
    shm_conn_t *sc   = ote_shm_conn(c);
    ote_shm_grant_info_t g;
    ote_status_t status;
    shm_map_t *m = NULL;
    int fd;

    if (h->status == OTE_OK) {
        fd     = ote_stream_conn_rx_fd_pop(c);
        status = ote_shm_map_check(h, trailer, OTE_STREAM_MAP_ACK_TRAILER_LEN, fd, op.remote_addr,
                                   op.length, &g);
        if (status != OTE_OK) {
            ote_fd_close(fd);
            op.comp->func(op.comp, OTE_ERR_PROTOCOL);
            ote_stream_conn_protocol_error(c, "MAP_ACK without a usable memfd");
            return;
        }
        if (sc != NULL)
            m = map_add(sc, &g, fd);
        close(fd);
        if (m != NULL && (!put || m->writable)) {
            status = map_copy(m, op.local, op.local_region, op.remote_addr, op.length, put);
            op.comp->func(op.comp, status);
            return;
        }
    } else if (h->status == OTE_ERR_UNSUPPORTED) {
        /* Memory the peer does not map: by reference from now on. */
        if (sc != NULL) {
            bool named = h->length && op.remote_addr >= h->addr &&
                         op.remote_addr - h->addr <= h->length &&
                         op.length <= h->length - (op.remote_addr - h->addr);

            sc->refused_base[sc->refused_next] = named ? h->addr : op.remote_addr;
            sc->refused_len[sc->refused_next]  = named ? h->length : op.length;
            sc->refused_next = (sc->refused_next + 1) % OTE_SHM_REFUSED;
        }
    } else {
        /* The target's checks refused the range: what a copy would get. */
        op.comp->func(op.comp, (ote_status_t)h->status);
        return;
    }
    status = post_ref(ep, put, op.local, op.length, op.local_region, op.remote_addr, op.comp);
    if (status != OTE_INPROGRESS)
        op.comp->func(op.comp, status);
}

static void unmap(ote_stream_conn_t *c, const ote_stream_hdr_t *h)
{
    shm_conn_t *sc  = ote_shm_conn(c);
    ote_stream_hdr_t r = {.type = OTE_STREAM_UNMAP_ACK, .id = h->id};

    /* Copies posted before the UNMAP arrived land first. */
    ote_shm_copy_flush(&((shm_iface_t *)c->iface)->copier);

    for (size_t i = 0; sc != NULL && i < sc->num_maps; i++) {
        if (sc->maps[i].grant == h->id) {
            munmap(sc->maps[i].map, (size_t)sc->maps[i].length);
            sc->maps[i] = sc->maps[--sc->num_maps];
            break;
        }
    }
    /* Also for a grant never mapped: nothing of it is mapped here. */
    if (ote_stream_conn_tx_push_fd(c, &r, NULL, 0, -1) != OTE_OK)
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
}

void ote_shm_initiator_hook(ote_stream_conn_t *c, const ote_stream_hdr_t *h, const uint8_t *trailer)
{
    if (h->type == OTE_STREAM_UNMAP)
        unmap(c, h);
    else
        map_ack(c, h, trailer);
}

/* The connection closed: every mapping made through it goes. */
void ote_shm_initiator_closed(ote_stream_conn_t *c, shm_conn_t *sc)
{
    ote_shm_copy_flush(&((shm_iface_t *)c->iface)->copier);
    for (size_t i = 0; i < sc->num_maps; i++)
        munmap(sc->maps[i].map, (size_t)sc->maps[i].length);
    free(sc->maps);
    sc->maps     = NULL;
    sc->num_maps = sc->cap_maps = 0;
}
