/* The uct component's configuration table. */
#include "uct_config.h"

#include <stddef.h>

#define UCT_F(_f) offsetof(ote_uct_config_t, _f)

static const ote_cfg_entry_t uct_config_fields[] = {
    {"CONNECT", "auto", OTE_CFG_STRING, UCT_F(connect),
     "UCT wire-up: auto (to-iface where the transport can, else to-ep), or ep (to-ep "
     "wherever the transport supports it)."},
};

const ote_config_table_t ote_uct_config_table = {
    .prefix      = "UCT_",
    .component   = "uct",
    .fields      = uct_config_fields,
    .num_fields  = OTE_CONFIG_NUM_FIELDS(uct_config_fields),
    .struct_size = sizeof(ote_uct_config_t),
};
