/*
 * Segments on a peer's exported file: "<export>@<engine name>" (a file of
 * an exported directory: "<export>/<file>@<engine name>"). The peer's
 * descriptor, found as for any peer, lists its exports; the segment's own
 * descriptor is one region [0, exported size) with the export's access,
 * and its rails are remote file rails (proto/file_remote.h), one per
 * worker, whose slices are FILE_IO requests to the peer's listener (the
 * bytes inside them, or over the engines' data rails: OTE_FILE_REMOTE).
 */
#include "core/engine_facts.h"
#include "segment_ctl.h"
#include "segment_export.h"
#include "segment_ref.h"
#include "wireup.h"
#include "core/worker/worker_def.h"

#include "base/log.h"
#include "base/util.h"
#include "proto/file_io_msg.h"
#include "proto/file_remote.h"

#include <stdlib.h>
#include <string.h>

bool ote_segment_is_export_name(const char *name)
{
    return !ote_segment_is_object_name(name) && strchr(name, '@') != NULL;
}

static ote_status_t export_ctl(void *arg, const void *req, size_t len, uint8_t **resp_p,
                               size_t *resp_len_p)
{
    ote_segment_h seg = arg;
    const ote_engine_config_t *cfg = &ote_engine_facts(seg->engine)->config;
    const uint8_t *op = req;
    bool rails = len > 0 && (op[0] == OTE_CTL_FILE_IO_READ_RAILS ||
                             op[0] == OTE_CTL_FILE_IO_WRITE_RAILS);

    /* A request still queued when its segment closed is not sent (ote.h: CANCELED). */
    if (atomic_load(&seg->closed))
        return OTE_ERR_CANCELED;

    /*
     * One request on a connection of the segment's pool (sent twice, it
     * does the same I/O again). The target starts its I/O within one
     * transfer timeout of the request's arrival or answers TIMEOUT without
     * any (proto/file_io_target.c); by rails it then opens its segment to
     * this engine (a connect timeout) and moves the bytes, canceled past one
     * transfer timeout and ended within another, as PUTBACK's WRITE is.
     * Waiting longer than all of that makes the answer, not our clock, end
     * the slice: nothing the target does for it comes after.
     */
    return ote_segment_ctl_request_pooled(
        seg, OTE_CTL_FILE_IO, req, len, OTE_CTL_FILE_IO_ACK,
        rails ? cfg->connect_timeout_ms + 3 * cfg->xfer_timeout_ms + 1000
              : 2 * cfg->xfer_timeout_ms + 1000,
        resp_p, resp_len_p);
}

/*
 * The segment's descriptor from the peer's d: one region, the export. An
 * export d does not list (any more) is NOT_FOUND.
 */
static ote_status_t export_desc(ote_segment_h seg, const ote_desc_t *d, ote_desc_t **desc_p,
                                uint64_t *file_id_p)
{
    const ote_desc_export_t *x = ote_desc_find_export(d, seg->export_name);
    ote_desc_t *out;

    if (x == NULL) {
        ote_error("segment '%s': '%s' exports no file '%s' (%zu exported)", seg->name,
                  seg->peer_name, seg->export_name, d->num_exports);
        return OTE_ERR_NOT_FOUND;
    }
    if (x->size == 0) {
        ote_error("segment '%s': the exported file is empty", seg->name);
        return OTE_ERR_INVALID_PARAM;
    }
    out = ote_desc_new(d->instance_id, d->name, d->host_id, d->ctl_addr, 1);
    if (out == NULL)
        return OTE_ERR_NO_MEMORY;
    out->regions[0].addr     = 0;
    out->regions[0].length   = x->size;
    out->regions[0].access   = x->access;
    out->regions[0].location = "file";
    *file_id_p = x->id;
    *desc_p    = out;
    return OTE_OK;
}

/* One remote file rail per worker, on the file id of the peer's instance. */
static ote_status_t export_rails_build(ote_segment_h seg, uint64_t instance, uint64_t file_id)
{
    ote_engine_h e  = seg->engine;
    size_t max      = OTE_CTL_FILE_IO_MAX_BYTES, n = 0;
    ote_rail_params_t params = {
        .max_bytes       = ote_engine_facts(e)->config.rail_max_bytes,
        .max_slices      = (unsigned)ote_engine_facts(e)->config.rail_max_slices,
        .cooldown_ns     = (uint64_t)ote_engine_facts(e)->config.rail_cooldown_ms * 1000000ull,
        .cooldown_max_ns = (uint64_t)ote_engine_facts(e)->config.rail_cooldown_max_ms * 1000000ull,
        .topo            = NULL};
    uint32_t gen;
    ote_status_t status = OTE_OK;

    /* A request and its answer fit OTE_MAX_CTL_MSG on both ends. */
    if (ote_engine_facts(e)->config.max_ctl_msg < OTE_CTL_FILE_IO_HDR_LEN + max)
        max = ote_engine_facts(e)->config.max_ctl_msg - OTE_CTL_FILE_IO_HDR_LEN;
    atomic_store(&seg->rails_instance, instance);
    gen = atomic_fetch_add(&seg->rails_gen, 1) + 1;
    /* A new instance may reach this engine again. */
    atomic_store(&seg->export_rails_off, false);
    for (size_t w = 0; w < ote_engine_facts(e)->num_workers && n < OTE_PROTO_MAX_RAILS; w++) {
        ote_file_remote_hooks_t hooks = {
            .base      = {.ctl         = export_ctl,
                          .ctl_arg     = seg,
                          .worker_lock = &ote_engine_facts(e)->workers[w].lock,
                          .jobs        = ote_engine_facts(e)->proto_jobs,
                          .initiator   = ote_engine_facts(e)->instance_id,
                          .target      = instance},
            .file_id   = file_id,
            .max_bytes = max,
            .mode      = ote_proto_file_remote_mode(ote_engine_facts(e)->config.file_remote),
            .rails_off = &seg->export_rails_off};

        /* By rails the target opens this engine by this name, as for a PUTBACK. */
        snprintf(hooks.name, sizeof(hooks.name), "%s", ote_engine_facts(e)->name);
        status = ote_proto_file_remote_rail_init(&seg->rails[n], w, &hooks);
        if (status != OTE_OK)
            break;
        ote_proto_rail_init(&seg->rails[n], &params, gen);
        seg->rail_set.rails[n] = &seg->rails[n];
        n++;
    }
    /*
     * Built whole, then published under the lock submits plan with
     * (ote_wireup_build); on a failure what was built, for the caller's
     * ote_wireup_destroy.
     */
    pthread_mutex_lock(&seg->lock);
    seg->rail_set.num_rails = n;
    pthread_mutex_unlock(&seg->lock);
    if (status != OTE_OK)
        return status;
    seg->export_file_id = file_id;
    return OTE_OK;
}

/* Split "export@engine" into the segment's export and peer names. */
static ote_status_t export_name_split(ote_segment_h seg, const char *name)
{
    const char *at = strchr(name, '@');
    size_t xlen    = (size_t)(at - name);

    if (xlen == 0 || xlen > OTE_DESC_NAME_MAX || at[1] == '\0' ||
        strlen(at + 1) > OTE_DESC_NAME_MAX) {
        ote_error("segment '%s': an exported file is named <export>[/<file>]@<engine name>",
                  name);
        return OTE_ERR_INVALID_PARAM;
    }
    memcpy(seg->export_name, name, xlen);
    seg->export_name[xlen] = '\0';
    snprintf(seg->peer_name, sizeof(seg->peer_name), "%s", at + 1);
    return OTE_OK;
}

ote_status_t ote_segment_open_export(ote_segment_h seg, const char *name, ote_desc_t **desc_p)
{
    ote_desc_t *peer = NULL, *d = NULL;
    uint64_t file_id = 0;
    ote_status_t status;

    status = export_name_split(seg, name);
    if (status != OTE_OK)
        return status;
    snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%s", seg->peer_name);
    status = ote_segment_fetch_desc(seg, &peer);
    if (status != OTE_OK) {
        ote_error("segment '%s': cannot reach the engine '%s': %s", name, seg->peer_name,
                  ote_status_string(status));
        return status;
    }
    if (ote_engine_facts(seg->engine)->meta != NULL)
        snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%s", peer->ctl_addr);
    status = export_desc(seg, peer, &d, &file_id);
    if (status == OTE_OK)
        status = export_rails_build(seg, peer->instance_id, file_id);
    ote_desc_free(peer);
    if (status != OTE_OK) {
        ote_desc_free(d);
        return status;
    }
    *desc_p = d;
    return OTE_OK;
}

ote_status_t ote_segment_resolve_export(ote_segment_h seg, bool rebind, ote_desc_t **desc_p,
                                        int *restarted_p)
{
    ote_desc_t *peer = NULL, *d = NULL;
    uint64_t file_id = 0, bound;
    ote_status_t status;
    bool restarted;

    status = ote_segment_fetch_desc(seg, &peer);
    if (status != OTE_OK)
        return status;
    pthread_mutex_lock(&seg->lock);
    bound = seg->desc->instance_id;
    pthread_mutex_unlock(&seg->lock);
    restarted = peer->instance_id != bound;
    if (restarted && !rebind) {
        ote_desc_free(peer);
        ote_segment_mark_stale(seg);
        return OTE_ERR_PEER_RESTARTED;
    }
    status = export_desc(seg, peer, &d, &file_id);
    /* A new instance, or the name exported again (another file): new rails. */
    if (status == OTE_OK && (restarted || file_id != seg->export_file_id)) {
        ote_wireup_destroy(seg, false, 0);
        /* Connections to the old instance serve it no more. */
        ote_segment_ctl_pool_drain(seg);
        pthread_mutex_lock(&seg->lock);
        if (ote_engine_facts(seg->engine)->meta != NULL)
            snprintf(seg->ctl_addr, sizeof(seg->ctl_addr), "%s", peer->ctl_addr);
        pthread_mutex_unlock(&seg->lock);
        status = export_rails_build(seg, peer->instance_id, file_id);
        /* Slices of the old instance still waiting for a rail end CANCELED. */
        ote_segment_backlog_end(seg);
    }
    ote_desc_free(peer);
    if (status != OTE_OK) {
        ote_desc_free(d);
        return status;
    }
    if (restarted_p != NULL)
        *restarted_p = restarted;
    *desc_p = d;
    return OTE_OK;
}
