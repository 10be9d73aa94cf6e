/* uct component: endpoints, wire-up (to-iface and to-ep), one-sided operations. */
#include "uct.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bound on waiting for UCT to finish or cancel an ep's operations. */
#define OTE_UCT_QUIESCE_NS (2ull * 1000 * 1000 * 1000)
/* Unpacked rkeys an idle ep keeps before it starts over. */
#define OTE_UCT_RKEYS_MAX  65536

static ote_uct_iface_t *ep_iface(ote_uct_ep_t *ep)
{
    return (ote_uct_iface_t *)ep->super.iface;
}

static const char *ep_tl(ote_uct_ep_t *ep)
{
    return ep->super.iface->resource.tl_name;
}

/* ---- rkey cache ------------------------------------------------------------- */

static uint64_t rkey_hash(const uint8_t *p, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull ^ len;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void rkeys_clear(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);

    for (size_t i = 0; i < ep->rkeys_cap; i++) {
        ote_uct_rkey_t *k = &ep->rkeys[i];

        if (!k->used)
            continue;
        uct_rkey_release(iface->md->component, &k->bundle);
        free(k->bytes);
        k->used = false;
    }
    ep->rkeys_count = 0;
}

static ote_uct_rkey_t *rkeys_slot(ote_uct_rkey_t *tab, size_t cap, uint64_t h, const void *b,
                                  size_t len)
{
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        ote_uct_rkey_t *k = &tab[i];

        if (!k->used || (k->hash == h && k->len == len && memcmp(k->bytes, b, len) == 0))
            return k;
    }
}

static ote_status_t rkeys_grow(ote_uct_ep_t *ep)
{
    size_t ncap         = ep->rkeys_cap ? ep->rkeys_cap * 2 : 16;
    ote_uct_rkey_t *tab = calloc(ncap, sizeof(*tab));

    if (tab == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < ep->rkeys_cap; i++) {
        ote_uct_rkey_t *k = &ep->rkeys[i];

        if (k->used)
            *rkeys_slot(tab, ncap, k->hash, k->bytes, k->len) = *k;
    }
    free(ep->rkeys);
    ep->rkeys     = tab;
    ep->rkeys_cap = ncap;
    return OTE_OK;
}

/* The unpacked form of a peer's packed rkey, unpacked once per ep. */
static ote_status_t ep_rkey(ote_uct_ep_t *ep, const void *rkey, size_t len, uct_rkey_t *out)
{
    ote_uct_iface_t *iface = ep_iface(ep);
    static const uint8_t empty[1];
    ote_uct_rkey_t *k;
    uint64_t h;
    ucs_status_t s;

    if (rkey == NULL) {
        /* The peer published no rkey of this md for the range. */
        if (iface->md->attr.cap.flags & UCT_MD_FLAG_NEED_RKEY)
            return OTE_ERR_NOT_REGISTERED;
        *out = UCT_INVALID_RKEY;
        return OTE_OK;
    }
    /*
     * uct_rkey_unpack takes no length: it reads what this md packs. A key
     * of another length is not one of this md's (a shorter one would be
     * read past its end).
     */
    if (len != iface->md->attr.rkey_packed_size) {
        ote_warn("%s: the peer's remote key is %zu bytes, this memory domain packs %zu",
                 ep_tl(ep), len, (size_t)iface->md->attr.rkey_packed_size);
        return OTE_ERR_PROTOCOL;
    }
    if (len == 0)
        rkey = empty;
    h = rkey_hash(rkey, len);
    if (ep->rkeys_cap) {
        k = rkeys_slot(ep->rkeys, ep->rkeys_cap, h, rkey, len);
        if (k->used) {
            *out = k->bundle.rkey;
            return OTE_OK;
        }
    }
    if (ep->rkeys_count >= OTE_UCT_RKEYS_MAX && ep->posted.head == NULL &&
        ep->pending.head == NULL)
        rkeys_clear(ep);
    if ((ep->rkeys_count + 1) * 2 > ep->rkeys_cap && rkeys_grow(ep) != OTE_OK)
        return OTE_ERR_NO_MEMORY;
    k = rkeys_slot(ep->rkeys, ep->rkeys_cap, h, rkey, len);
    k->bytes = malloc(len ? len : 1);
    if (k->bytes == NULL)
        return OTE_ERR_NO_MEMORY;
    s = uct_rkey_unpack(iface->md->component, rkey, &k->bundle);
    if (s != UCS_OK) {
        free(k->bytes);
        ote_warn("%s: the peer's remote key does not unpack: %s", ep_tl(ep),
                 ucs_status_string(s));
        return OTE_ERR_PROTOCOL;
    }
    memcpy(k->bytes, rkey, len);
    k->hash = h;
    k->len  = (uint16_t)len;
    k->used = true;
    ep->rkeys_count++;
    *out = k->bundle.rkey;
    return OTE_OK;
}

/* ---- operations ----------------------------------------------------------------- */

/* A UCT error UCT's handler reported for this ep, if any: it names the cause. */
static ucs_status_t ep_reported_error(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);
    ucs_status_t s         = UCS_OK;

    if (ep->ep == NULL || !atomic_load(&iface->have_errs))
        return UCS_OK;
    pthread_mutex_lock(&iface->err_lock);
    for (size_t i = 0; i < iface->num_errs; i++) {
        if (iface->errs[i].ep == ep->ep)
            s = iface->errs[i].status;
    }
    pthread_mutex_unlock(&iface->err_lock);
    return s;
}

static void ep_forget_errors(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);
    size_t j               = 0;

    pthread_mutex_lock(&iface->err_lock);
    for (size_t i = 0; i < iface->num_errs; i++) {
        if (iface->errs[i].ep != ep->ep)
            iface->errs[j++] = iface->errs[i];
    }
    iface->num_errs = j;
    pthread_mutex_unlock(&iface->err_lock);
}

static ote_status_t op_status(ote_uct_ep_t *ep, ucs_status_t s)
{
    ucs_status_t reported;

    if (s == UCS_OK)
        return OTE_OK;
    /* cma reports a dead peer as an I/O error after telling the handler. */
    reported = ep != NULL ? ep_reported_error(ep) : UCS_OK;
    if (reported != UCS_OK)
        return ote_uct_status(reported);
    return ote_uct_status(s);
}

/* Take an op off its ep's accounting. */
static void op_detach(ote_uct_ep_t *ep, ote_uct_op_t *op)
{
    ote_uct_iface_t *iface = ep_iface(ep);

    ote_uct_op_list_remove(op->posted ? &ep->posted : &ep->pending, op);
    ep->inflight_bytes -= op->length;
    iface->outstanding--;
}

/* UCT completion of a posted op. */
static void op_done(uct_completion_t *self)
{
    ote_uct_op_t *op          = (ote_uct_op_t *)self;
    ote_uct_iface_t *iface    = op->iface;
    ote_uct_ep_t *ep          = op->ep;
    ote_tl_completion_t *comp = op->comp;
    ote_status_t status       = OTE_OK;

    if (ep != NULL) {
        status = op_status(ep, self->status);
        /* Canceled by ote_uct_ep_fail's flush: the ep's failure is the reason. */
        if (status != OTE_OK && ep->failed != OTE_OK)
            status = ep->failed;
        op_detach(ep, op);
    } else {
        ote_uct_op_list_remove(&iface->orphans, op);
    }
    ote_uct_op_put(iface, op);
    if (comp != NULL)
        comp->func(comp, status);
}

/* Hand an op to UCT: INPROGRESS (posted or left pending), OK, or an error. */
static ote_status_t op_issue(ote_uct_ep_t *ep, ote_uct_op_t *op)
{
    uct_iov_t iov = {.buffer = op->local, .length = op->length, .memh = op->memh,
                     .stride = 0, .count = 1};
    ucs_status_t s;

    op->uct.func   = op_done;
    op->uct.count  = 1;
    op->uct.status = UCS_OK;
    if (op->is_get)
        s = uct_ep_get_zcopy(ep->ep, &iov, 1, op->remote, op->rkey, &op->uct);
    else
        s = uct_ep_put_zcopy(ep->ep, &iov, 1, op->remote, op->rkey, &op->uct);
    if (s == UCS_INPROGRESS) {
        op->posted = true;
        ote_uct_op_list_push(&ep->posted, op);
        return OTE_INPROGRESS;
    }
    if (s == UCS_ERR_NO_RESOURCE) {
        op->posted = false;
        ote_uct_op_list_push(&ep->pending, op);
        return OTE_INPROGRESS;
    }
    return op_status(ep, s);
}

unsigned ote_uct_ep_post_pending(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);
    unsigned n             = 0;

    while (ep->pending.head != NULL && ep->ep != NULL) {
        ote_uct_op_t *op = ep->pending.head;
        ote_tl_completion_t *comp;
        ote_status_t status;

        ote_uct_op_list_remove(&ep->pending, op);
        status = op_issue(ep, op);
        if (status == OTE_INPROGRESS) {
            if (!op->posted) {
                /* Still no resources: back to the front, keep the order. */
                ote_uct_op_list_remove(&ep->pending, op);
                OTE_DLIST2_PUSH_FRONT(ep->pending.head, ep->pending.tail, op, prev, next);
                break;
            }
            n++;
            continue;
        }
        /* Ended at once: the core was told INPROGRESS, so complete it. */
        comp = op->comp;
        ep->inflight_bytes -= op->length;
        iface->outstanding--;
        ote_uct_op_put(iface, op);
        comp->func(comp, status);
        n++;
    }
    return n;
}

static ote_status_t bridge_ep_post(ote_tl_ep_t *tl_ep, bool is_get, void *local, size_t length,
                            ote_region_t *region, uint64_t remote, const void *rkey,
                            size_t rkey_len, ote_tl_completion_t *comp)
{
    ote_uct_ep_t *ep       = (ote_uct_ep_t *)tl_ep;
    ote_uct_iface_t *iface = ep_iface(ep);
    unsigned need          = is_get ? OTE_TL_CAP_GET_ZCOPY : OTE_TL_CAP_PUT_ZCOPY;
    uct_mem_h memh         = UCT_MEM_HANDLE_NULL;
    uct_rkey_t urkey;
    ote_uct_op_t *op;
    ote_status_t status;

    if (ep->failed != OTE_OK)
        return ep->failed;
    if (ep->ep == NULL || ep->accepted)
        return OTE_ERR_REMOTE_DISCONNECT;
    if (!(iface->caps.ops & need))
        return OTE_ERR_UNSUPPORTED;
    if (length == 0 || length > iface->caps.max_msg)
        return OTE_ERR_INVALID_PARAM;
    if (region != NULL && iface->super.md_index >= 0)
        memh = ote_uct_md_memh(region->memh[iface->super.md_index]);
    if (memh == UCT_MEM_HANDLE_NULL && (iface->md->attr.cap.flags & UCT_MD_FLAG_NEED_MEMH))
        return OTE_ERR_UNREACHABLE;
    status = ep_rkey(ep, rkey, rkey_len, &urkey);
    if (status != OTE_OK)
        return status;
    op = ote_uct_op_get(iface);
    if (op == NULL)
        return OTE_ERR_NO_MEMORY;
    op->comp    = comp;
    op->ep      = ep;
    op->iface   = iface;
    op->is_get  = is_get;
    op->local   = local;
    op->length  = length;
    op->memh    = memh;
    op->remote  = remote;
    op->rkey    = urkey;
    op->post_ns = ote_round_time_ns();
    if (ep->pending.head != NULL) {
        /* Behind operations that wait for resources: keep the order. */
        op->posted = false;
        ote_uct_op_list_push(&ep->pending, op);
        status = OTE_INPROGRESS;
    } else {
        status = op_issue(ep, op);
    }
    if (status != OTE_INPROGRESS) {
        ote_uct_op_put(iface, op);
        return status;
    }
    ep->inflight_bytes += length;
    iface->outstanding++;
    return OTE_INPROGRESS;
}

static ote_status_t uct_ep_put(ote_tl_ep_t *ep, void *local, size_t length,
                               ote_region_t *region, uint64_t remote, const void *rkey,
                               size_t rkey_len, ote_tl_completion_t *comp)
{
    return bridge_ep_post(ep, false, local, length, region, remote, rkey, rkey_len, comp);
}

static ote_status_t uct_ep_get(ote_tl_ep_t *ep, void *local, size_t length,
                               ote_region_t *region, uint64_t remote, const void *rkey,
                               size_t rkey_len, ote_tl_completion_t *comp)
{
    return bridge_ep_post(ep, true, local, length, region, remote, rkey, rkey_len, comp);
}

static size_t uct_ep_inflight(ote_tl_ep_t *tl_ep)
{
    return ((ote_uct_ep_t *)tl_ep)->inflight_bytes;
}

static bool uct_ep_is_alive(ote_tl_ep_t *tl_ep)
{
    return atomic_load(&((ote_uct_ep_t *)tl_ep)->alive);
}

/* ---- ending eps ---------------------------------------------------------------- */

/* Let UCT finish or cancel what it holds for this ep (cma copies, tcp acks). */
static void ep_quiesce(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);
    uint64_t deadline      = ote_time_ns() + OTE_UCT_QUIESCE_NS;

    while (ep->ep != NULL && ep->posted.head != NULL) {
        ucs_status_t s = uct_ep_flush(ep->ep, UCT_FLUSH_FLAG_CANCEL, NULL);

        if (s != UCS_INPROGRESS && s != UCS_ERR_NO_RESOURCE)
            break;
        uct_worker_progress(iface->worker);
        if (ote_time_ns() > deadline) {
            ote_warn("%s: operations to %s did not end; abandoning them", ep_tl(ep),
                     ep->peer_name);
            break;
        }
    }
}

/* End every operation of the ep with status; UCT may still complete posted ones. */
static void ep_end_all(ote_uct_ep_t *ep, ote_status_t status)
{
    ote_uct_iface_t *iface = ep_iface(ep);

    while (ep->pending.head != NULL || ep->posted.head != NULL) {
        ote_uct_op_t *op = ep->pending.head ? ep->pending.head : ep->posted.head;
        ote_tl_completion_t *comp = op->comp;
        bool posted               = op->posted;

        op_detach(ep, op);
        if (posted) {
            op->ep   = NULL;
            op->comp = NULL;
            ote_uct_op_list_push(&iface->orphans, op);
        } else {
            ote_uct_op_put(iface, op);
        }
        comp->func(comp, status);
    }
}

static void ep_unlink(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);

    OTE_DLIST_REMOVE(iface->eps, ep);
    ep->next = ep->prev = NULL;
}

static void ep_link(ote_uct_ep_t *ep)
{
    ote_uct_iface_t *iface = ep_iface(ep);

    OTE_DLIST_PUSH_FRONT(iface->eps, ep);
}

/*
 * UCT's tcp sends a PUT's bytes through a socket of the ep. An operation
 * ended here while still posted (timed out, the ep failed or freed) may
 * still have bytes in the kernel's send queue: closed normally, the socket
 * would go on retransmitting them, and they would land at the peer after
 * the slice was retried elsewhere and its task reported, over newer bytes
 * (a link that comes back up). Reset instead: SO_LINGER 0 makes UCT's close
 * of the socket drop what was not sent. The socket is the one that
 * appeared while the ep was created (ep_sock_find), still the same inode.
 */
static void ep_sock_abort(ote_uct_ep_t *ep)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    struct stat st;

    if (ep->sock_fd < 0)
        return;
    if (fstat(ep->sock_fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
        (unsigned long)st.st_ino == ep->sock_ino &&
        setsockopt(ep->sock_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0)
        ote_debug("%s: connection to %s reset: its unsent bytes are dropped", ep_tl(ep),
                  ep->peer_name);
    ep->sock_fd = -1;
}

static void ep_destroy_uct(ote_uct_ep_t *ep, bool abort_sock)
{
    if (ep->ep == NULL)
        return;
    ep_forget_errors(ep);
    if (abort_sock)
        ep_sock_abort(ep);
    uct_ep_destroy(ep->ep);
    ep->ep      = NULL;
    ep->sock_fd = -1;
}

void ote_uct_ep_fail(ote_uct_ep_t *ep, ote_status_t status)
{
    bool posted;

    if (ep->failed != OTE_OK)
        return;
    ep->failed = status;
    atomic_store(&ep->alive, false);
    /* Before the flush: UCT's tcp ends posted PUTs there, sent or not. */
    posted = ep->posted.head != NULL;
    ep_quiesce(ep);
    ep_end_all(ep, status);
    ep_destroy_uct(ep, posted);
}

void ote_uct_ep_free(ote_uct_ep_t *ep)
{
    bool posted;

    posted = ep->posted.head != NULL;
    ep_quiesce(ep);
    ep_end_all(ep, OTE_ERR_CANCELED);
    ep_destroy_uct(ep, posted);
    rkeys_clear(ep);
    free(ep->rkeys);
    ep_unlink(ep);
    free(ep);
}

/* Called with the worker lock by the core (ote_wireup_destroy). */
static void uct_ep_destroy_(ote_tl_ep_t *tl_ep)
{
    ote_uct_ep_free((ote_uct_ep_t *)tl_ep);
}

/* ---- wire-up ------------------------------------------------------------------- */

/* ---- the socket of a UCT tcp ep ------------------------------------------------ */

#define EP_SOCKS_MAX 4096

typedef struct {
    int           fd;
    unsigned long ino;
} ep_sock_t;

static bool ep_is_tcp(const ote_uct_iface_t *iface)
{
    return strcmp(iface->rsc.tl_name, "tcp") == 0;
}

/* This process's stream sockets (fd, inode), at most max; -1 if /proc cannot say. */
static int socks_list(ep_sock_t *out, int max)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((de = readdir(d)) != NULL && n < max) {
        struct stat st;
        char *end;
        long fd = strtol(de->d_name, &end, 10);
        int type     = 0;
        socklen_t tl = sizeof(type);

        if (*end != '\0' || end == de->d_name || fd < 0 || fd == dirfd(d))
            continue;
        if (fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
            getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM)
            continue;
        out[n].fd  = (int)fd;
        out[n].ino = (unsigned long)st.st_ino;
        n++;
    }
    closedir(d);
    return n;
}

/* Before uct_ep_create: the sockets already there (NULL when not tcp or unknown). */
static ep_sock_t *ep_socks_before(const ote_uct_iface_t *iface, int *n_p)
{
    ep_sock_t *v;

    *n_p = -1;
    if (!ep_is_tcp(iface))
        return NULL;
    v = malloc(sizeof(*v) * EP_SOCKS_MAX);
    if (v != NULL)
        *n_p = socks_list(v, EP_SOCKS_MAX);
    return v;
}

/* After it: the one socket that appeared is the ep's; none or several: unknown. */
static void ep_sock_find(ote_uct_ep_t *ep, ep_sock_t *before, int nb)
{
    ep_sock_t *now;
    int n, found = 0;

    ep->sock_fd = -1;
    if (before == NULL || nb < 0 || nb >= EP_SOCKS_MAX)
        goto out;
    now = malloc(sizeof(*now) * EP_SOCKS_MAX);
    if (now == NULL)
        goto out;
    n = socks_list(now, EP_SOCKS_MAX);
    for (int i = 0; i < n && n < EP_SOCKS_MAX; i++) {
        bool old = false;

        for (int j = 0; j < nb && !old; j++)
            old = before[j].fd == now[i].fd && before[j].ino == now[i].ino;
        if (old)
            continue;
        if (found++ == 0) {
            ep->sock_fd  = now[i].fd;
            ep->sock_ino = now[i].ino;
        }
    }
    if (found != 1)
        ep->sock_fd = -1;
    free(now);
out:
    free(before);
}

static ote_uct_ep_t *ep_new(ote_uct_iface_t *iface, const ote_tl_peer_t *peer)
{
    ote_uct_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL)
        return NULL;
    ep->super.iface    = &iface->super;
    ep->failed         = OTE_OK;
    ep->peer_instance  = peer->instance_id;
    ep->sock_fd        = -1;
    atomic_init(&ep->alive, true);
    snprintf(ep->peer_name, sizeof(ep->peer_name), "%s", peer->name ? peer->name : "?");
    return ep;
}

/* The device and iface parts of a peer's address, for an iface of conn_model. */
static ote_status_t peer_addr_parts(const ote_uct_iface_t *iface, ote_tl_conn_model_t conn_model,
                                    const void *addr, size_t len, const uint8_t **dev_p,
                                    size_t *dev_len_p, const uint8_t **ifa_p, size_t *ifa_len_p)
{
    if (iface->caps.conn_model != conn_model)
        return OTE_ERR_UNSUPPORTED;
    if (ote_uct_blob_unpack(addr, len, dev_p, dev_len_p, ifa_p, ifa_len_p) != OTE_OK)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

ote_status_t ote_uct_ep_create(ote_tl_iface_t *tl_iface, const void *addr, size_t addr_len,
                               const ote_tl_peer_t *peer, ote_tl_ep_t **ep_p)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    const uint8_t *dev, *ifa;
    size_t dev_len, ifa_len;
    uct_ep_params_t p;
    ote_uct_ep_t *ep;
    ep_sock_t *before;
    ucs_status_t s;
    ote_status_t status;
    int nb;

    status = peer_addr_parts(iface, OTE_TL_CONN_TO_IFACE, addr, addr_len, &dev, &dev_len, &ifa,
                             &ifa_len);
    if (status != OTE_OK)
        return status;
    /* Another kind of device (tcp on loopback has longer addresses): not ours. */
    if (dev_len != iface->attr.device_addr_len || ifa_len != iface->attr.iface_addr_len)
        return OTE_ERR_UNREACHABLE;
    ep = ep_new(iface, peer);
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_mutex_lock(iface->worker_lock);
    if (!uct_iface_is_reachable(iface->iface, (const uct_device_addr_t *)dev,
                                (const uct_iface_addr_t *)ifa)) {
        pthread_mutex_unlock(iface->worker_lock);
        free(ep);
        return OTE_ERR_UNREACHABLE;
    }
    memset(&p, 0, sizeof(p));
    p.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                   UCT_EP_PARAM_FIELD_IFACE_ADDR;
    p.iface      = iface->iface;
    p.dev_addr   = (const uct_device_addr_t *)dev;
    p.iface_addr = (const uct_iface_addr_t *)ifa;
    before       = ep_socks_before(iface, &nb);
    s            = uct_ep_create(&p, &ep->ep);
    ep_sock_find(ep, s == UCS_OK ? before : NULL, nb);
    if (s != UCS_OK) {
        free(before);
        pthread_mutex_unlock(iface->worker_lock);
        free(ep);
        ote_debug("%s: connecting to %s: %s", tl_iface->resource.tl_name,
                  peer->name ? peer->name : "?", ucs_status_string(s));
        status = ote_uct_status(s);
        /*
         * The iface said it reaches that address: UCX's UNREACHABLE here is
         * a connect that failed now (refused: nothing listens there, no
         * route while a link is down), as the native tcp says NOT_FOUND.
         */
        return status == OTE_ERR_UNREACHABLE ? OTE_ERR_NOT_FOUND : status;
    }
    ep->connected = true;
    ep_link(ep);
    pthread_mutex_unlock(iface->worker_lock);
    *ep_p = &ep->super;
    return OTE_OK;
}

/* Under the worker lock: a UCT ep not connected yet, and our blob for the peer. */
static ote_status_t ep_open_locked(ote_uct_iface_t *iface, ote_uct_ep_t *ep, void *out,
                                   size_t max, size_t *out_len_p)
{
    uint8_t dev[OTE_TL_ADDR_MAX], epa[OTE_TL_ADDR_MAX];
    uct_ep_params_t p;
    ucs_status_t s;

    if (iface->attr.device_addr_len > sizeof(dev) || iface->attr.ep_addr_len > sizeof(epa))
        return OTE_ERR_UNSUPPORTED;
    memset(&p, 0, sizeof(p));
    p.field_mask = UCT_EP_PARAM_FIELD_IFACE;
    p.iface      = iface->iface;
    s = uct_ep_create(&p, &ep->ep);
    if (s == UCS_OK)
        s = uct_iface_get_device_address(iface->iface, (uct_device_addr_t *)dev);
    if (s == UCS_OK)
        s = uct_ep_get_address(ep->ep, (uct_ep_addr_t *)epa);
    if (s != UCS_OK)
        return ote_uct_status(s);
    return ote_uct_blob_pack(dev, iface->attr.device_addr_len, epa, iface->attr.ep_addr_len,
                             out, max, out_len_p);
}

/* Under the worker lock: connect to the peer's (device, ep) blob. */
static ote_status_t ep_connect_locked(ote_uct_iface_t *iface, ote_uct_ep_t *ep,
                                      const void *addr, size_t addr_len)
{
    const uint8_t *dev, *epa;
    size_t dev_len, epa_len;
    ucs_status_t s;

    if (ote_uct_blob_unpack(addr, addr_len, &dev, &dev_len, &epa, &epa_len) != OTE_OK ||
        dev_len != iface->attr.device_addr_len || epa_len != iface->attr.ep_addr_len)
        return OTE_ERR_PROTOCOL;
    if (!uct_iface_is_reachable(iface->iface, (const uct_device_addr_t *)dev, NULL))
        return OTE_ERR_UNREACHABLE;
    s = uct_ep_connect_to_ep(ep->ep, (const uct_device_addr_t *)dev,
                             (const uct_ep_addr_t *)epa);
    if (s != UCS_OK)
        return ote_uct_status(s);
    ep->connected = true;
    return OTE_OK;
}

/* Under the worker lock: list an ep that opened (status OK), or undo one that failed. */
static ote_status_t ep_settle_locked(ote_uct_ep_t *ep, ote_status_t status)
{
    if (status != OTE_OK) {
        if (ep->ep != NULL)
            uct_ep_destroy(ep->ep);
        free(ep);
        return status;
    }
    ep_link(ep);
    return OTE_OK;
}

ote_status_t ote_uct_ep_open(ote_tl_iface_t *tl_iface, const void *peer_addr,
                             size_t peer_addr_len, const ote_tl_peer_t *peer,
                             ote_tl_ep_t **ep_p, void *addr, size_t max, size_t *len_p)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    const uint8_t *dev, *ifa;
    size_t dev_len, ifa_len;
    ote_uct_ep_t *ep;
    ote_status_t status;

    status = peer_addr_parts(iface, OTE_TL_CONN_TO_EP, peer_addr, peer_addr_len, &dev, &dev_len,
                             &ifa, &ifa_len);
    if (status != OTE_OK)
        return status;
    if (dev_len != iface->attr.device_addr_len)
        return OTE_ERR_UNREACHABLE;
    ep = ep_new(iface, peer);
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_mutex_lock(iface->worker_lock);
    if (!uct_iface_is_reachable(iface->iface, (const uct_device_addr_t *)dev, NULL))
        status = OTE_ERR_UNREACHABLE;
    else
        status = ep_open_locked(iface, ep, addr, max, len_p);
    status = ep_settle_locked(ep, status);
    pthread_mutex_unlock(iface->worker_lock);
    if (status == OTE_OK)
        *ep_p = &ep->super;
    return status;
}

static ote_status_t uct_ep_connect_to_ep_(ote_tl_ep_t *tl_ep, const void *addr, size_t len)
{
    ote_uct_ep_t *ep       = (ote_uct_ep_t *)tl_ep;
    ote_uct_iface_t *iface = ep_iface(ep);
    ote_status_t status;

    pthread_mutex_lock(iface->worker_lock);
    status = ep->ep != NULL ? ep_connect_locked(iface, ep, addr, len) : OTE_ERR_REMOTE_DISCONNECT;
    pthread_mutex_unlock(iface->worker_lock);
    return status;
}

ote_status_t ote_uct_ep_accept(ote_tl_iface_t *tl_iface, const ote_tl_peer_t *peer,
                               uint64_t conn_id, const void *addr, size_t addr_len, void *out,
                               size_t max, size_t *out_len_p)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    ote_uct_ep_t *ep;
    ote_status_t status;
    long from_peer = 0;

    if (iface->caps.conn_model != OTE_TL_CONN_TO_EP)
        return OTE_ERR_UNSUPPORTED;
    ep = ep_new(iface, peer);
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    ep->accepted = true;
    ep->conn_id  = conn_id;
    snprintf(ep->peer_ip, sizeof(ep->peer_ip), "%s", peer->addr_ip ? peer->addr_ip : "");
    pthread_mutex_lock(iface->worker_lock);
    for (ote_uct_ep_t *x = iface->eps; x != NULL; x = x->next) {
        if (x->accepted && x->conn_id == conn_id && x->peer_instance == peer->instance_id) {
            pthread_mutex_unlock(iface->worker_lock);
            free(ep);
            return OTE_ERR_EXISTS;
        }
        if (x->accepted && strcmp(x->peer_ip, ep->peer_ip) == 0)
            from_peer++;
    }
    if ((long)iface->num_accepted >= iface->max_accepted ||
        (iface->max_accepted_per_peer > 0 && from_peer >= iface->max_accepted_per_peer)) {
        pthread_mutex_unlock(iface->worker_lock);
        ote_warn("%s/%s: connection from %s refused: %s reached",
                 tl_iface->resource.tl_name, tl_iface->resource.dev_name,
                 peer->name ? peer->name : "?",
                 (long)iface->num_accepted >= iface->max_accepted ? "OTE_MAX_CONNS"
                                                                 : "OTE_MAX_CONNS_PER_PEER");
        free(ep);
        return OTE_ERR_BUSY;
    }
    status = ep_open_locked(iface, ep, out, max, out_len_p);
    if (status == OTE_OK)
        status = ep_connect_locked(iface, ep, addr, addr_len);
    status = ep_settle_locked(ep, status);
    if (status == OTE_OK)
        iface->num_accepted++;
    pthread_mutex_unlock(iface->worker_lock);
    return status;
}

bool ote_uct_ep_release(ote_tl_iface_t *tl_iface, uint64_t peer_instance, uint64_t conn_id)
{
    ote_uct_iface_t *iface = (ote_uct_iface_t *)tl_iface;
    ote_uct_ep_t *ep;

    pthread_mutex_lock(iface->worker_lock);
    for (ep = iface->eps; ep != NULL; ep = ep->next) {
        if (ep->accepted && ep->conn_id == conn_id && ep->peer_instance == peer_instance)
            break;
    }
    if (ep != NULL) {
        iface->num_accepted--;
        ote_uct_ep_free(ep);
    }
    pthread_mutex_unlock(iface->worker_lock);
    return ep != NULL;
}

const ote_tl_ep_ops_t ote_uct_ep_ops = {
    .put_zcopy       = uct_ep_put,
    .get_zcopy       = uct_ep_get,
    .inflight_bytes  = uct_ep_inflight,
    .is_alive        = uct_ep_is_alive,
    .destroy         = uct_ep_destroy_,
    .connect_to_ep   = uct_ep_connect_to_ep_,
    .needs_reconnect = ote_tl_no_reconnect_needed,
    .reconnect       = ote_tl_unsupported_reconnect,
};
