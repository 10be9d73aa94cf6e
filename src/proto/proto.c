/*
 * Rails and slices. A rail serves an operation between two memory types if
 * its transport has the operation and reaches both; among those, rails
 * slower than a quarter of the best are dropped, so a single-copy intra-host
 * transport is used alone where it exists, and a transport without an
 * operation (UCT tcp has no GET) only carries what it can.
 */
#include "proto.h"

#include "core/log.h"

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

bool ote_proto_rails_unchecked(const ote_rail_set_t *rails)
{
    for (size_t i = 0; i < rails->num_rails; i++) {
        if (!(rails->rails[i]->caps.ops & OTE_TL_CAP_CHECKED))
            return true;
    }
    return false;
}

bool ote_proto_rail_dominated(const ote_tl_caps_t *c, ote_rail_t *const *rails, size_t n)
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
                              rails[i]->caps.bandwidth > c->bandwidth * RAIL_DROP_RATIO;
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
    double best   = 0;

    out->num_rails = 0;
    for (size_t i = 0; i < all->num_rails; i++) {
        const ote_rail_t *r = all->rails[i];

        if (r->ep == NULL || !rail_serves(&r->caps, need, local_mem, remote_mem))
            continue;
        if (r->caps.bandwidth > best)
            best = r->caps.bandwidth;
    }
    for (size_t i = 0; i < all->num_rails; i++) {
        ote_rail_t *r = all->rails[i];

        if (r->ep == NULL || !rail_serves(&r->caps, need, local_mem, remote_mem) ||
            r->caps.bandwidth * RAIL_DROP_RATIO < best)
            continue;
        out->rails[out->num_rails++] = r;
    }
    return out->num_rails ? OTE_OK : OTE_ERR_UNREACHABLE;
}

static size_t rails_slice_size(const ote_rail_set_t *rails, size_t slice_size)
{
    size_t s = slice_size;

    if (s == 0) {
        for (size_t i = 0; i < rails->num_rails; i++)
            s = s > rails->rails[i]->caps.slice_size ? s : rails->rails[i]->caps.slice_size;
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

void ote_proto_slice_plan(const ote_rail_set_t *rails, ote_op_t op, void *local,
                          uint64_t remote, size_t length, size_t count, ote_slice_t *slices,
                          unsigned *cursor)
{
    size_t base = length / count, extra = length % count, off = 0;

    for (size_t i = 0; i < count; i++) {
        size_t len = base + (i < extra);

        slices[i].rail   = rails->rails[(*cursor)++ % rails->num_rails];
        slices[i].op     = op;
        slices[i].local  = (uint8_t *)local + off;
        slices[i].remote = remote + off;
        slices[i].length = len;
        off += len;
    }
}

ote_status_t ote_proto_slice_post(ote_slice_t *s)
{
    ote_rail_t *rail = s->rail;
    ote_tl_ep_t *ep  = rail->ep;

    if (ep == NULL)
        return OTE_ERR_CANCELED;
    if (s->op == OTE_OP_WRITE)
        return rail->iface->ep_ops->put_zcopy(ep, s->local, s->length, s->local_region,
                                              s->remote, s->rkey, s->rkey_len, &s->comp);
    return rail->iface->ep_ops->get_zcopy(ep, s->local, s->length, s->local_region, s->remote,
                                          s->rkey, s->rkey_len, &s->comp);
}
