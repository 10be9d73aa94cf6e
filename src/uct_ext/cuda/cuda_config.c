/* The cuda components' configuration table. */
#include "cuda_copier.h"

#include <stddef.h>

#define CUDA_F(_f) offsetof(ote_cuda_config_t, _f)

static const ote_cfg_entry_t cuda_config_fields[] = {
    {"IPC_CACHE_ENTRIES", "256", OTE_CFG_INT, CUDA_F(ipc_cache_entries),
     "Imported CUDA IPC mappings kept per peer."},
    {"LIB", "", OTE_CFG_STRING, CUDA_F(lib),
     "Test only: a library exporting the CUDA entry points (test double) loaded instead of libcudart/libcuda."},
};

OTE_CONFIG_TABLE_DEFINE(ote_cuda_config_table, "CUDA_", "cuda", cuda_config_fields,
                        ote_cuda_config_t, NULL);

ote_status_t ote_cuda_load(void)
{
    ote_cuda_config_t cfg;
    ote_status_t status;

    if (ote_config_fill(&ote_cuda_config_table, &cfg) != OTE_OK)
        return OTE_ERR_UNSUPPORTED;
    status = ote_cuda_api_load(cfg.lib);
    ote_config_release(&ote_cuda_config_table, &cfg);
    return status;
}
