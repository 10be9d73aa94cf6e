/*
 * The uct component's configuration (OTE_UCT_*), apart from uct.h so that
 * it is compiled, and its variables known, in builds without UCX too.
 */
#ifndef OTE_UCT_EXT_UCT_UCT_CONFIG_H
#define OTE_UCT_EXT_UCT_UCT_CONFIG_H

#include "base/config.h"

typedef struct {
    char *connect; /* UCT wire-up: auto or ep */
} ote_uct_config_t;

extern const ote_config_table_t ote_uct_config_table;

#endif
