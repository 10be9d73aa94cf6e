#include "tl.h"

#include <string.h>


extern ote_tl_component_t ote_tcp_component;
extern ote_tl_component_t ote_cma_component;
extern ote_tl_component_t ote_shm_component;
extern ote_tl_component_t ote_cuda_copy_component;
extern ote_tl_component_t ote_cuda_ipc_component;
#ifdef HAVE_LIBURING
extern ote_tl_component_t ote_file_component;
#endif
#ifdef HAVE_UCX
extern ote_tl_component_t ote_uct_component;
#endif

extern const ote_config_table_t ote_tcp_config_table;
extern const ote_config_table_t ote_cma_config_table;
extern const ote_config_table_t ote_shm_config_table;
extern const ote_config_table_t ote_cuda_config_table;
extern const ote_config_table_t ote_file_config_table;
extern const ote_config_table_t ote_uct_config_table;
extern const ote_config_table_t ote_rdma_config_table;

ote_tl_component_t *const ote_tl_components[] = {
    &ote_tcp_component,
    &ote_cma_component,
    &ote_shm_component,
    &ote_cuda_copy_component,
    &ote_cuda_ipc_component,
#ifdef HAVE_LIBURING
    &ote_file_component,
#endif
#ifdef HAVE_UCX
    &ote_uct_component,
#endif
    NULL,
};

const ote_config_table_t *const ote_tl_config_tables[] = {
    &ote_tcp_config_table,  &ote_cma_config_table, &ote_shm_config_table,
    &ote_cuda_config_table, &ote_file_config_table, &ote_uct_config_table,
    &ote_rdma_config_table,
    NULL,
};

/*
 * The schemes of components this build leaves out, so that their names are
 * refused as theirs rather than taken for a peer's.
 */
static const struct {
    const char *scheme;
    const char *why;
} tl_absent_schemes[] = {
#ifndef HAVE_LIBURING
    {"file:", "file segments need liburing, which this build lacks"},
#endif
    {NULL, NULL},
};

bool ote_tl_object_find(const char *name, ote_tl_component_t **comp_p, const char **why_p)
{
    for (size_t i = 0; ote_tl_components[i] != NULL; i++) {
        const ote_tl_object_ops_t *o = ote_tl_components[i]->ops->objects;

        if (o != NULL && strncmp(name, o->scheme, strlen(o->scheme)) == 0) {
            *comp_p = ote_tl_components[i];
            *why_p  = NULL;
            return true;
        }
    }
    for (size_t i = 0; tl_absent_schemes[i].scheme != NULL; i++) {
        if (strncmp(name, tl_absent_schemes[i].scheme, strlen(tl_absent_schemes[i].scheme)) == 0) {
            *comp_p = NULL;
            *why_p  = tl_absent_schemes[i].why;
            return true;
        }
    }
    return false;
}

ote_status_t ote_tl_unsupported_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                      ote_region_t *local_region, uint64_t remote_addr,
                                      const void *rkey, size_t rkey_len,
                                      ote_tl_completion_t *comp)
{
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_tl_unsupported_md_open(ote_tl_component_t *comp, const ote_tl_resource_t *res,
                                        ote_md_t **md_p)
{
    *md_p = NULL;
    return OTE_ERR_UNSUPPORTED;
}

void ote_tl_no_md_close(ote_tl_component_t *comp, ote_md_t *md)
{
}

const char *ote_tl_no_reason(ote_tl_component_t *comp)
{
    return NULL;
}

void ote_tl_no_format_address(ote_tl_iface_t *iface, char *buf, size_t len)
{
    if (len > 0)
        buf[0] = '\0';
}

ote_status_t ote_tl_unsupported_event_arm(ote_tl_iface_t *iface)
{
    return OTE_ERR_UNSUPPORTED;
}

void ote_tl_no_check_timeouts(ote_tl_iface_t *iface, uint64_t deadline_ns)
{
}

bool ote_tl_no_deadlines(ote_tl_iface_t *iface)
{
    return false;
}

ote_status_t ote_tl_unsupported_ep_open(ote_tl_iface_t *iface, const void *peer_addr,
                                        size_t peer_addr_len, const ote_tl_peer_t *peer,
                                        ote_tl_ep_t **ep_p, void *addr, size_t max,
                                        size_t *len_p)
{
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_tl_unsupported_ep_accept(ote_tl_iface_t *iface, const ote_tl_peer_t *peer,
                                          uint64_t conn_id, const void *addr, size_t addr_len,
                                          void *out, size_t max, size_t *out_len_p)
{
    return OTE_ERR_UNSUPPORTED;
}

bool ote_tl_no_ep_release(ote_tl_iface_t *iface, uint64_t peer_instance, uint64_t conn_id)
{
    return false;
}

ote_status_t ote_tl_unsupported_connect_to_ep(ote_tl_ep_t *ep, const void *addr,
                                              size_t addr_len)
{
    return OTE_ERR_UNSUPPORTED;
}

bool ote_tl_no_reconnect_needed(ote_tl_ep_t *ep)
{
    return false;
}

ote_status_t ote_tl_unsupported_reconnect(ote_tl_ep_t *ep, const ote_tl_peer_t *peer)
{
    return OTE_ERR_UNSUPPORTED;
}
