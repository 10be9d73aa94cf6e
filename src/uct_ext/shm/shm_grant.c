/*
 * Native shm component, target side: MAP answered with a memfd after the
 * usual checks, each mapping recorded as an export of its region, and the
 * revocation deregistration asks for (UNMAP, UNMAP_ACK, or the connection
 * closed once OTE_SHM_UNMAP_TIMEOUT_MS passed).
 */
#include "shm_int.h"

#include "base/log.h"
#include "base/util.h"
#include "base/wire_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void grant_revoke(ote_mem_export_t *x);
static void grant_wait(ote_mem_export_t *x);

static const ote_mem_export_ops_t grant_ops = {.revoke = grant_revoke, .wait = grant_wait};

static void map_reply(ote_stream_conn_t *c, const ote_stream_hdr_t *h, ote_status_t status,
                      const ote_region_t *region)
{
    ote_stream_hdr_t r = {.type = OTE_STREAM_MAP_ACK, .id = h->id, .status = status};

    if (status != OTE_OK)
        ote_debug("shm peer %s: MAP %#llx+%llu refused: %s", c->peer,
                  (unsigned long long)h->addr, (unsigned long long)h->length,
                  ote_status_string(status));
    /* UNSUPPORTED names the region, so that the peer goes by reference for all of it. */
    if (status == OTE_ERR_UNSUPPORTED && region != NULL) {
        r.addr   = region->addr;
        r.length = region->length;
    }
    ote_stream_conn_reply(c, &r);
}

/*
 * The descriptor the peer gets: the memfd itself where it may write, else
 * the same file opened again read-only, so that it cannot map it writable.
 */
static int grant_fd(const ote_region_t *r, bool writable)
{
    char path[64];

    if (writable)
        return fcntl(r->memfd, F_DUPFD_CLOEXEC, 0);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", r->memfd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

static void handle_map(ote_stream_conn_t *c, const ote_stream_hdr_t *h, uint64_t then)
{
    shm_iface_t *iface = (shm_iface_t *)c->iface;
    shm_conn_t *sc     = ote_shm_conn(c);
    uint8_t trailer[OTE_STREAM_MAP_ACK_TRAILER_LEN];
    ote_stream_hdr_t r;
    ote_region_t *region;
    shm_grant_t *g;
    ote_status_t status;
    bool writable;
    int fd;

    if (then != OTE_STREAM_PUT_REF && then != OTE_STREAM_GET_REF) {
        ote_stream_conn_protocol_error(c, "MAP for an unknown kind of copy");
        return;
    }
    if (sc == NULL) {
        map_reply(c, h, OTE_ERR_NO_MEMORY, NULL);
        return;
    }
    status = ote_mem_region_acquire(c->iface->regions, h->addr, h->length,
                                    then == OTE_STREAM_PUT_REF ? OTE_ACCESS_REMOTE_WRITE
                                                            : OTE_ACCESS_REMOTE_READ,
                                    &region);
    if (status != OTE_OK) {
        map_reply(c, h, status, NULL);
        return;
    }
    /*
     * Only engine-owned host memory has a memfd; a mapping lets the peer
     * read, so a write-only region is not mapped either.
     */
    if (region->mem_type != OTE_MEM_TYPE_HOST || region->memfd < 0 ||
        !(region->access & OTE_ACCESS_REMOTE_READ)) {
        map_reply(c, h, OTE_ERR_UNSUPPORTED, region);
        ote_mem_region_put(region);
        return;
    }
    writable = (region->access & OTE_ACCESS_REMOTE_WRITE) != 0;
    for (g = sc->grants; g != NULL; g = g->next) {
        if (g->region == region && !g->taken)
            break;
    }
    if (g != NULL) {
        ote_mem_region_put(region); /* the grant holds one */
    } else {
        g = calloc(1, sizeof(*g));
        if (g == NULL) {
            ote_mem_region_put(region);
            map_reply(c, h, OTE_ERR_NO_MEMORY, NULL);
            return;
        }
        g->x.ops  = &grant_ops;
        g->iface  = iface;
        g->conn   = c;
        g->region = region;
        g->id     = ++iface->next_grant;
        if (!ote_mem_region_export_add(region, &g->x)) {
            free(g);
            ote_mem_region_put(region);
            map_reply(c, h, OTE_ERR_NOT_REGISTERED, NULL);
            return;
        }
        g->next    = sc->grants;
        sc->grants = g;
    }
    fd = grant_fd(region, writable);
    if (fd < 0) {
        ote_warn("shm: cannot pass the memory of %#llx+%zu: %s",
                 (unsigned long long)region->addr, region->length, strerror(errno));
        map_reply(c, h, OTE_ERR_IO, NULL);
        return;
    }
    r = (ote_stream_hdr_t){.type = OTE_STREAM_MAP_ACK, .id = h->id, .status = OTE_OK,
                        .addr = region->addr, .length = region->length};
    ote_put_u64(trailer, g->id);
    ote_put_u64(trailer + 8, writable ? OTE_SHM_MAP_WRITABLE : 0);
    if (ote_stream_conn_tx_push_fd(c, &r, trailer, sizeof(trailer), fd) != OTE_OK)
        ote_stream_conn_fail(c, OTE_ERR_NO_MEMORY);
}

static void handle_unmap_ack(ote_stream_conn_t *c, const ote_stream_hdr_t *h)
{
    shm_conn_t *sc = ote_shm_conn(c);

    for (shm_grant_t *g = sc ? sc->grants : NULL; g != NULL; g = g->next) {
        if (g->id == h->id && g->taken && !g->done) {
            g->done = true;
            pthread_cond_broadcast(&((shm_iface_t *)c->iface)->cond);
            return;
        }
    }
    /* An answer to nothing asked: harmless, ignored. */
}

void ote_shm_target_handle(ote_stream_conn_t *c, const ote_stream_hdr_t *h, uint64_t trailer)
{
    switch (h->type) {
    case OTE_STREAM_MAP:
        /* Its answer comes after those of the requests before it. */
        if (c->ref_npending)
            ote_stream_local_target_flush(c);
        if (!c->dead)
            handle_map(c, h, trailer);
        break;
    case OTE_STREAM_UNMAP_ACK:
        handle_unmap_ack(c, h);
        break;
    default:
        ote_stream_local_target_handle(c, h, trailer);
        break;
    }
}

/* Under the worker lock: the connection closed; its grants end. */
void ote_shm_target_closed(ote_stream_conn_t *c, shm_conn_t *sc)
{
    shm_iface_t *iface = (shm_iface_t *)c->iface;
    shm_grant_t *g, *next;

    for (g = sc->grants; g != NULL; g = next) {
        next    = g->next;
        g->conn = NULL;
        g->next = NULL;
        g->done = true;
        if (!g->taken && ote_mem_region_export_remove(g->region, &g->x)) {
            ote_mem_region_put(g->region);
            free(g);
        } else {
            g->taken = true; /* deregistration has it: grant_wait frees it */
        }
    }
    sc->grants = NULL;
    pthread_cond_broadcast(&iface->cond);
}

/* Deregistering thread: ask the peer to unmap; no waiting. */
static void grant_revoke(ote_mem_export_t *x)
{
    shm_grant_t *g     = (shm_grant_t *)x;
    shm_iface_t *iface = g->iface;
    pthread_mutex_t *lock = iface->local.stream.worker_lock;

    pthread_mutex_lock(lock);
    g->taken       = true;
    g->deadline_ns = ote_time_ns() + iface->unmap_timeout_ns;
    if (g->conn != NULL && !g->conn->dead && !g->done) {
        ote_stream_hdr_t h = {.type = OTE_STREAM_UNMAP, .id = g->id, .addr = g->region->addr,
                           .length = g->region->length};

        ote_stream_conn_reply(g->conn, &h);
        /* A reply that could not be queued failed the connection, which let the grant go. */
        if (g->conn != NULL && !g->conn->dead)
            ote_stream_conn_flush(g->conn);
    } else {
        g->done = true;
    }
    pthread_mutex_unlock(lock);
}

static void unlink_grant(shm_grant_t *g)
{
    shm_conn_t *sc = g->conn != NULL ? g->conn->ext : NULL;

    for (shm_grant_t **pp = sc ? &sc->grants : NULL; pp != NULL && *pp != NULL;
         pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            break;
        }
    }
    g->conn = NULL;
}

/*
 * Deregistering thread: until the peer answered or its connection is gone;
 * past the deadline the connection is closed, which fails whatever the
 * peer still has in flight on it and tells it to drop its mappings.
 */
static void grant_wait(ote_mem_export_t *x)
{
    shm_grant_t *g        = (shm_grant_t *)x;
    shm_iface_t *iface    = g->iface;
    pthread_mutex_t *lock = iface->local.stream.worker_lock;
    struct timespec ts;

    pthread_mutex_lock(lock);
    while (!g->done && ote_time_ns() < g->deadline_ns) {
        ts.tv_sec  = (time_t)(g->deadline_ns / 1000000000ull);
        ts.tv_nsec = (long)(g->deadline_ns % 1000000000ull);
        pthread_cond_timedwait(&iface->cond, lock, &ts);
    }
    if (!g->done && g->conn != NULL) {
        ote_warn("shm peer %s did not unmap %#llx+%zu within OTE_SHM_UNMAP_TIMEOUT_MS; "
                 "its connection is closed", g->conn->peer,
                 (unsigned long long)g->region->addr, g->region->length);
        ote_stream_conn_fail(g->conn, OTE_ERR_TIMEOUT); /* ends the grant: done */
    }
    unlink_grant(g);
    pthread_mutex_unlock(lock);
    ote_mem_region_put(g->region);
    free(g);
}
