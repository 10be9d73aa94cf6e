#include "tl.h"


extern ote_tl_component_t ote_tcp_component;
extern ote_tl_component_t ote_cma_component;
extern ote_tl_component_t ote_cuda_copy_component;
extern ote_tl_component_t ote_cuda_ipc_component;
#ifdef HAVE_LIBURING
extern ote_tl_component_t ote_file_component;
#endif
#ifdef HAVE_UCX
extern ote_tl_component_t ote_uct_component;
#endif

ote_tl_component_t *const ote_tl_components[] = {
    &ote_tcp_component,
    &ote_cma_component,
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

ote_status_t ote_tl_unsupported_zcopy(ote_tl_ep_t *ep, void *local, size_t length,
                                      ote_region_t *local_region, uint64_t remote_addr,
                                      const void *rkey, size_t rkey_len,
                                      ote_tl_completion_t *comp)
{
    return OTE_ERR_UNSUPPORTED;
}
