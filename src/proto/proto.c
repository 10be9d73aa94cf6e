/*
 * Rails and slices. A rail serves an operation between two memory types if
 * its transport has the operation and reaches both; among those, a rail is
 * dropped when another beats it (rail_beats): an intra-host rail beats any
 * network rail, so a single-copy intra-host transport is used alone where it
 * exists, and one that maps the peer's memory (shm) beats the other
 * intra-host ones; a rail whose target checks every access beats an unchecked one
 * that is at most 4 times faster; and any rail beats one more than 4 times
 * slower. A transport without an operation (UCT tcp has no GET) only
 * carries what it can; its READs go by PUTBACK (putback.c) where no other
 * rail can READ.
 */
#include "proto.h"
#include "putback.h"

#include "base/log.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* A rail slower than a quarter of the best one that can serve is dropped. */
#define RAIL_DROP_RATIO 4

static bool rail_serves(const ote_tl_caps_t *c, unsigned op_cap, unsigned local_mem,
                        unsigned remote_mem)
{
    if ((c->ops & OTE_TL_CAP_DEVICE_PAIRS) && local_mem == OTE_MEM_TYPE_HOST &&
        remote_mem == OTE_MEM_TYPE_HOST)
        return false;
    return (c->ops & op_cap) && (c->mem_local & local_mem) && (c->mem_remote & remote_mem);
}

static bool caps_checked(const ote_tl_caps_t *c)
{
    return (c->ops & OTE_TL_CAP_CHECKED) != 0;
}

/*
 * True when b is never chosen where a serves the same request. a_net, b_net:
 * network transports (on a NIC, even when a peer on this host is reached
 * over loopback) as opposed to intra-host ones (cma, shared memory).
 */
static bool rail_beats(const ote_tl_caps_t *a, bool a_net, const ote_tl_caps_t *b, bool b_net)
{
    if (a_net != b_net)
        return !a_net;
    if (!a_net && (a->ops & OTE_TL_CAP_MAPPED) != (b->ops & OTE_TL_CAP_MAPPED))
        return (a->ops & OTE_TL_CAP_MAPPED) != 0;
    if (a->bandwidth > b->bandwidth * RAIL_DROP_RATIO)
        return true;
    return caps_checked(a) && !caps_checked(b) && a->bandwidth * RAIL_DROP_RATIO >= b->bandwidth;
}

int ote_proto_caps_cmp(const ote_tl_caps_t *a, bool a_net, const ote_tl_caps_t *b, bool b_net)
{
    if (a_net != b_net)
        return a_net ? 1 : -1;
    if (caps_checked(a) != caps_checked(b))
        return caps_checked(a) ? -1 : 1;
    if (a->bandwidth != b->bandwidth)
        return a->bandwidth > b->bandwidth ? -1 : 1;
    return 0;
}

bool ote_proto_rails_unchecked(const ote_rail_set_t *rails)
{
    for (size_t i = 0; i < rails->num_rails; i++) {
        if (!(rails->rails[i]->caps.ops & OTE_TL_CAP_CHECKED))
            return true;
    }
    return false;
}

static bool rail_net(const ote_rail_t *r)
{
    return r->iface->resource.is_network;
}

bool ote_proto_rail_dominated(const ote_tl_caps_t *c, bool network, ote_rail_t *const *rails,
                              size_t n)
{
    static const unsigned ops[]  = {OTE_TL_CAP_PUT_ZCOPY, OTE_TL_CAP_GET_ZCOPY};
    static const unsigned mems[] = {OTE_MEM_TYPE_HOST, OTE_MEM_TYPE_CUDA};

    for (size_t o = 0; o < 2; o++) {
        for (size_t l = 0; l < 2; l++) {
            for (size_t m = 0; m < 2; m++) {
                bool covered = false;

                if (!rail_serves(c, ops[o], mems[l], mems[m]))
                    continue;
                for (size_t i = 0; i < n && !covered; i++) {
                    covered = rails[i]->ep != NULL &&
                              rail_serves(&rails[i]->caps, ops[o], mems[l], mems[m]) &&
                              rail_beats(&rails[i]->caps, rail_net(rails[i]), c, network);
                }
                if (!covered)
                    return false;
            }
        }
    }
    return true;
}

ote_status_t ote_proto_rails_select(const ote_rail_set_t *all, ote_op_t op, unsigned local_mem,
                                    unsigned remote_mem, ote_rail_set_t *out)
{
    unsigned need = op == OTE_OP_WRITE ? OTE_TL_CAP_PUT_ZCOPY : OTE_TL_CAP_GET_ZCOPY;
    bool serves[OTE_PROTO_MAX_RAILS];
    size_t n = all->num_rails < OTE_PROTO_MAX_RAILS ? all->num_rails : OTE_PROTO_MAX_RAILS;

    out->num_rails = 0;
    for (size_t i = 0; i < n; i++) {
        const ote_rail_t *r = all->rails[i];

        serves[i] = r->ep != NULL && rail_serves(&r->caps, need, local_mem, remote_mem);
    }
    /* A READ goes by PUTBACK only where no rail can READ itself. */
    for (size_t i = 0; i < n; i++) {
        if (serves[i] && !ote_proto_putback_rail(all->rails[i])) {
            for (size_t k = 0; k < n; k++)
                serves[k] = serves[k] && !ote_proto_putback_rail(all->rails[k]);
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        bool beaten = false;

        for (size_t k = 0; k < n && serves[i] && !beaten; k++)
            beaten = k != i && serves[k] &&
                     rail_beats(&all->rails[k]->caps, rail_net(all->rails[k]),
                                &all->rails[i]->caps, rail_net(all->rails[i]));
        if (serves[i] && !beaten) {
            out->weight[out->num_rails]  = 1;
            out->rails[out->num_rails++] = all->rails[i];
        }
    }
    return out->num_rails ? OTE_OK : OTE_ERR_UNREACHABLE;
}

void ote_proto_rails_rank(ote_rail_set_t *set, const char *location)
{
    const ote_topo_table_t *table = NULL;
    double score[OTE_PROTO_MAX_RAILS], weight[OTE_PROTO_MAX_RAILS];
    ote_rail_t *kept[OTE_PROTO_MAX_RAILS];
    float kept_w[OTE_PROTO_MAX_RAILS];
    size_t n = 0;
    int place;

    for (size_t i = 0; i < set->num_rails && table == NULL; i++)
        table = set->rails[i]->topo;
    place = ote_topo_table_place(table, location);
    if (place < 0)
        return;
    for (size_t i = 0; i < set->num_rails; i++) {
        int nic = set->rails[i]->topo == table ? set->rails[i]->topo_nic : -1;

        score[i] = nic >= 0 ? table->score[place][nic] : -1;
    }
    ote_topo_rank(score, set->num_rails, weight);
    /*
     * Nearest first (insertion keeps the order among equals); the far ones
     * last, weight -1: they carry only when no other rail may.
     */
    for (size_t i = 0; i < set->num_rails; i++) {
        float w  = weight[i] > 0 ? (float)weight[i] : -1.0f;
        size_t k = n;

        while (k > 0 && kept_w[k - 1] < w) {
            kept[k]   = kept[k - 1];
            kept_w[k] = kept_w[k - 1];
            k--;
        }
        kept[k]   = set->rails[i];
        kept_w[k] = w;
        n++;
    }
    for (size_t i = 0; i < n; i++) {
        set->rails[i]  = kept[i];
        set->weight[i] = kept_w[i];
    }
    set->num_rails = n;
}

/*
 * A slice may be sprayed to any rail of the set: it takes the smallest size
 * a rail of the set prefers (OTE_SLICE_SIZE overrides), and never more than
 * a rail's largest message.
 */
static size_t rails_slice_size(const ote_rail_set_t *rails, size_t slice_size)
{
    size_t s = slice_size;

    if (s == 0) {
        for (size_t i = 0; i < rails->num_rails; i++) {
            size_t pref = rails->rails[i]->caps.slice_size;

            if (pref != 0 && (s == 0 || pref < s))
                s = pref;
        }
        if (s == 0)
            s = 1u << 20;
    }
    for (size_t i = 0; i < rails->num_rails; i++) {
        if (rails->rails[i]->caps.max_msg && s > rails->rails[i]->caps.max_msg)
            s = rails->rails[i]->caps.max_msg;
    }
    return s;
}

size_t ote_proto_slice_count(const ote_rail_set_t *rails, size_t length, size_t slice_size)
{
    size_t s = rails_slice_size(rails, slice_size);

    return (length + s - 1) / s;
}

void ote_proto_slice_plan(ote_op_t op, void *local, uint64_t remote, size_t length,
                          size_t count, ote_slice_t *slices)
{
    size_t base = length / count, extra = length % count, off = 0;

    for (size_t i = 0; i < count; i++) {
        size_t len = base + (i < extra);

        slices[i].rail   = NULL;
        slices[i].op     = op;
        slices[i].local  = (uint8_t *)local + off;
        slices[i].remote = remote + off;
        slices[i].length = len;
        off += len;
    }
}

/* The memo's inputs, as they are now for this request. */
static bool memo_matches(const ote_proto_plan_memo_t *m, const ote_rail_set_t *all,
                         const ote_proto_req_t *req, unsigned remote_mem)
{
    if (!m->valid || m->num != all->num_rails || m->op != req->op ||
        m->local_mem != req->local_region->mem_type || m->remote_mem != remote_mem ||
        memcmp(m->location, req->local_region->location, sizeof(m->location)) != 0)
        return false;
    for (size_t i = 0; i < m->num; i++) {
        if (m->in[i] != all->rails[i] || ((m->live >> i) & 1) != (all->rails[i]->ep != NULL))
            return false;
    }
    return true;
}

/* The rails that reach both memories, ranked; from the memo when its inputs are these. */
static ote_status_t plan_rails(const ote_rail_set_t *all, const ote_proto_req_t *req,
                               unsigned remote_mem, ote_proto_plan_memo_t *m,
                               ote_rail_set_t *rails)
{
    ote_status_t status;

    if (m != NULL && memo_matches(m, all, req, remote_mem)) {
        /* The rails in use only: the set is sized for OTE_PROTO_MAX_RAILS. */
        rails->num_rails = m->rails.num_rails;
        for (size_t i = 0; i < rails->num_rails; i++) {
            rails->rails[i]  = m->rails.rails[i];
            rails->weight[i] = m->rails.weight[i];
        }
        return m->status;
    }
    status = ote_proto_rails_select(all, req->op, req->local_region->mem_type, remote_mem,
                                    rails);
    if (status == OTE_OK)
        ote_proto_rails_rank(rails, req->local_region->location);
    if (m != NULL && all->num_rails <= OTE_PROTO_MAX_RAILS) {
        m->valid        = true;
        m->num          = all->num_rails;
        m->live         = 0;
        m->op           = req->op;
        m->local_mem    = req->local_region->mem_type;
        m->remote_mem   = remote_mem;
        m->status       = status;
        m->rails        = *rails;
        /*
         * A copy of the whole fixed-size array (a NUL-terminated string of
         * the same size): snprintf's formatting was about 570 instructions,
         * a fifth of a 1-request submit's plan (docs/performance.md).
         */
        _Static_assert(sizeof(m->location) == sizeof(req->local_region->location),
                       "the memo's location and the region's are the same array");
        memcpy(m->location, req->local_region->location, sizeof(m->location));
        for (size_t i = 0; i < m->num; i++) {
            m->in[i] = all->rails[i];
            m->live |= (uint32_t)(all->rails[i]->ep != NULL) << i;
        }
    }
    return status;
}

ote_status_t ote_proto_plan(const ote_rail_set_t *all, const ote_proto_req_t *req,
                            const ote_proto_remote_t *remote, size_t slice_size,
                            ote_proto_plan_memo_t *memo, ote_proto_route_t *route,
                            ote_slice_t *inline_slice, ote_slice_t **slices_p,
                            size_t *count_p)
{
    const ote_rail_set_t *rails = &route->rails;
    ote_slice_t *slices;
    ote_status_t status;
    size_t n;

    status = plan_rails(all, req, remote->mem_type, memo, &route->rails);
    if (status != OTE_OK)
        return status;
    if (!remote->published) {
        for (size_t k = 0; k < rails->num_rails; k++) {
            if (rails->rails[k]->caps.max_msg && req->length > rails->rails[k]->caps.max_msg) {
                ote_debug("plan: %#llx+%zu is in no region the peer published and is too "
                          "large to be checked whole; refresh the segment",
                          (unsigned long long)req->remote, req->length);
                return OTE_ERR_NOT_REGISTERED;
            }
        }
        n = 1;
    } else {
        n = ote_proto_slice_count(rails, req->length, slice_size);
    }
    if (n == 1) {
        slices = inline_slice;
        memset(slices, 0, sizeof(*slices));
    } else {
        slices = calloc(n, sizeof(*slices));
        if (slices == NULL)
            return OTE_ERR_NO_MEMORY;
    }
    route->rkeys     = remote->rkeys;
    route->num_rkeys = remote->num_rkeys;
    ote_proto_slice_plan(req->op, req->local, req->remote, req->length, n, slices);
    for (size_t k = 0; k < n; k++) {
        slices[k].local_region = req->local_region;
        slices[k].route        = route;
    }
    *slices_p = slices;
    *count_p  = n;
    return OTE_OK;
}

void ote_proto_plan_release(ote_slice_t *slices, ote_slice_t *inline_slice)
{
    if (slices != inline_slice)
        free(slices);
}

ote_status_t ote_proto_slice_post(ote_slice_t *s)
{
    ote_rail_t *rail = s->rail;
    ote_tl_ep_t *ep;

    if (rail == NULL || (ep = rail->ep) == NULL)
        return OTE_ERR_CANCELED;
    /* After the ep: rails built for a new instance say so before they are published. */
    if (s->route != NULL && s->route->rails_instance != NULL &&
        atomic_load(s->route->rails_instance) != s->route->instance)
        return OTE_ERR_PEER_RESTARTED;
    if (s->op == OTE_OP_WRITE)
        return rail->iface->ep_ops->put_zcopy(ep, s->local, s->length, s->local_region,
                                              s->remote, s->rkey, s->rkey_len, &s->comp);
    return rail->iface->ep_ops->get_zcopy(ep, s->local, s->length, s->local_region, s->remote,
                                          s->rkey, s->rkey_len, &s->comp);
}
