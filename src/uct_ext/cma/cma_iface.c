/*
 * Native cma component: single-copy transfers between processes of one host
 * with process_vm_readv/writev, checked by the target. It is the stream
 * base's local mode (stream/stream_local.h: by reference over an abstract AF_UNIX
 * socket, the target copies, a PROBE after HELLO) with its own table
 * (OTE_CMA_*); this file opens its ifaces.
 */
#include "uct_ext/stream/stream.h"

#include "base/config.h"

static const ote_tl_iface_ops_t cma_iface_ops = OTE_STREAM_LOCAL_IFACE_OPS_INIT(
    ote_stream_local_iface_query, ote_stream_local_iface_progress,
    ote_stream_local_iface_event_arm, ote_stream_local_iface_close);

/* OTE_CMA_*; shm has the same entries under OTE_SHM_. */
static const ote_cfg_entry_t cma_config_fields[] = {
    OTE_STREAM_LOCAL_CONFIG_ENTRIES(0, NULL),
};

OTE_CONFIG_TABLE_DEFINE(ote_cma_config_table, "CMA_", "cma", cma_config_fields,
                        ote_stream_local_config_t, NULL);

/* By reference, its address, the probe: the local mode's as they are. */
static const ote_stream_hooks_t cma_hooks = {
    OTE_STREAM_LOCAL_HOOKS(ote_stream_local_target_handle),
};

static ote_status_t cma_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                   const ote_tl_iface_params_t *params,
                                   ote_tl_iface_t **iface_p)
{
    ote_stream_local_iface_t *iface;
    ote_stream_local_config_t cfg;
    ote_status_t status;

    status = ote_stream_local_iface_open(&cfg, sizeof(*iface), res, params, &cma_hooks,
                                         &cma_iface_ops, &iface);
    if (status == OTE_OK)
        *iface_p = &iface->stream.super;
    return status;
}

/* cma runs on the stream base's local mode with its own table (OTE_CMA_*). */
OTE_TL_COMPONENT_DEFINE(ote_cma_component, "cma", &ote_cma_config_table,
                        ote_stream_local_query_resources, ote_tl_unsupported_md_open,
                        ote_tl_no_md_close, cma_iface_open, ote_tl_no_reason);
