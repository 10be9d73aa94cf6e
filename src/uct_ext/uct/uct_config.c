/* The uct component's configuration table. */
#include "uct_config.h"

#include <stddef.h>

#define UCT_F(_f) offsetof(ote_uct_config_t, _f)

static const ote_cfg_entry_t uct_config_fields[] = {
    {"CONNECT", "auto", OTE_CFG_STRING, UCT_F(connect),
     "UCT wire-up: auto (to-iface where the transport can, else to-ep), or ep (to-ep "
     "wherever the transport supports it)."},
};

OTE_CONFIG_TABLE_DEFINE(ote_uct_config_table, "UCT_", "uct", uct_config_fields, ote_uct_config_t,
                        NULL);
