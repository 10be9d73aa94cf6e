/* mem's configuration tables: GPUDirect registration and the registration cache. */
#include "mem.h"

#include <stddef.h>

#define MEM_F(_f)    offsetof(ote_mem_config_t, _f)
#define RCACHE_F(_f) offsetof(ote_rcache_config_t, _f)

static const ote_cfg_entry_t mem_config_fields[] = {
    {"GPU_DIRECT", "auto", OTE_CFG_TERNARY, MEM_F(gpu_direct),
     "Register GPU memory on network memory domains directly: auto, y, n.",
     .alias = "GPU_DIRECT"},
};

static const ote_cfg_entry_t rcache_config_fields[] = {
    {"ENABLE", "y", OTE_CFG_BOOL, RCACHE_F(enable),
     "Serve repeated registration of covered memory from the registration cache."},
    {"MAX_SIZE", "inf", OTE_CFG_SIZE, RCACHE_F(max_size),
     "Bytes of unreferenced registrations the cache keeps before LRU eviction."},
    {"MAX_REGIONS", "65536", OTE_CFG_INT, RCACHE_F(max_regions),
     "Unreferenced registrations the cache keeps before LRU eviction."},
};

OTE_CONFIG_TABLE_DEFINE(ote_mem_config_table, "MEM_", "mem", mem_config_fields, ote_mem_config_t,
                        NULL);

OTE_CONFIG_TABLE_DEFINE(ote_rcache_config_table, "RCACHE_", "rcache", rcache_config_fields,
                        ote_rcache_config_t, NULL);

const ote_config_table_t *const ote_mem_config_tables[] = {
    &ote_mem_config_table,
    &ote_rcache_config_table,
    NULL,
};

ote_status_t ote_mem_table_params_read(ote_mem_table_params_t *params_p)
{
    ote_rcache_config_t rc;
    ote_mem_config_t mc;
    ote_status_t status;

    status = ote_config_fill(&ote_mem_config_table, &mc);
    if (status == OTE_OK)
        status = ote_config_fill(&ote_rcache_config_table, &rc);
    if (status != OTE_OK)
        return status;
    *params_p = (ote_mem_table_params_t){
        .rcache_enable      = rc.enable,
        .rcache_max_size    = rc.max_size,
        .rcache_max_regions = rc.max_regions,
        .gpu_direct         = mc.gpu_direct == OTE_TERNARY_YES  ? OTE_MEM_GPU_DIRECT_YES
                            : mc.gpu_direct == OTE_TERNARY_NO ? OTE_MEM_GPU_DIRECT_NO
                                                              : OTE_MEM_GPU_DIRECT_AUTO,
    };
    return OTE_OK;
}
