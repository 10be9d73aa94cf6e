/*
 * Configuration tables: each component describes its OTE_* environment
 * variables (name, default, type, description) in a table with a prefix and
 * reads them into its own options struct with the functions below.
 * `ote_info -c` prints every table. Nothing else in the library reads
 * getenv() for OTE_ variables.
 */
#ifndef OTE_BASE_CONFIG_H
#define OTE_BASE_CONFIG_H

#include <ote/ote.h>
#include <stdbool.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    OTE_CFG_STRING,
    OTE_CFG_INT,     /* signed decimal                                */
    OTE_CFG_SIZE,    /* bytes with optional k/m/g/t suffix (binary)    */
    OTE_CFG_BOOL,    /* y/n, yes/no, on/off, 1/0, true/false           */
    OTE_CFG_TERNARY, /* auto, or a bool                                */
    OTE_CFG_LOGLEVEL,
} ote_cfg_type_t;

enum { OTE_TERNARY_NO = 0, OTE_TERNARY_YES = 1, OTE_TERNARY_AUTO = 2 };

typedef struct {
    const char    *name;    /* without OTE_ and without the table's prefix */
    const char    *dflt;
    ote_cfg_type_t type;
    size_t         offset;  /* of the field in the table's options struct */
    const char    *desc;
    /* OTE_CFG_INT and OTE_CFG_SIZE: the values allowed (both 0: any). */
    long long      min, max;
    /*
     * Optional: the variable's former name, without OTE_ (from before the
     * table had its prefix), still read where the variable is not set.
     */
    const char    *alias;
} ote_cfg_entry_t;

/* The max of an entry bounded only below. */
#define OTE_CFG_NO_MAX LLONG_MAX
/* The max of a time in ms or µs (100 years of ms): in ns it still fits 64 bits. */
#define OTE_CFG_TIME_MAX (100ll * 365 * 86400 * 1000)

/*
 * A table describes one options struct: the variables OTE_<prefix><name> of
 * one component, as UCX's ucs_config_field_t tables. The struct holds a
 * field per entry: char * (string), long (int), size_t (size), bool, int
 * (ternary, log level).
 */
typedef struct ote_config_table {
    const char            *prefix;      /* after OTE_: "TCP_"; "" for none     */
    const char            *component;   /* who reads it: "engine", "tcp", ...  */
    const ote_cfg_entry_t *fields;
    size_t                 num_fields;
    size_t                 struct_size;
    /* Optional (NULL): checks across fields; logs why it fails. */
    ote_status_t (*validate)(const void *opts);
} ote_config_table_t;

#define OTE_CONFIG_NUM_FIELDS(_fields) (sizeof(_fields) / sizeof((_fields)[0]))

/*
 * Define the table _var of options struct _type from the entries _fields,
 * as UCX's UCS_CONFIG_DECLARE_TABLE: _validate may be NULL.
 */
#define OTE_CONFIG_TABLE_DEFINE(_var, _prefix, _component, _fields, _type, _validate)          \
    const ote_config_table_t _var = {                                                          \
        .prefix      = (_prefix),                                                              \
        .component   = (_component),                                                           \
        .fields      = (_fields),                                                              \
        .num_fields  = OTE_CONFIG_NUM_FIELDS(_fields),                                         \
        .struct_size = sizeof(_type),                                                          \
        .validate    = (_validate),                                                            \
    }

/*
 * Fill opts (table->struct_size bytes) from the defaults, then from the
 * environment, then validate. A value that does not parse is
 * OTE_ERR_INVALID_PARAM with a log line naming the variable; on any error
 * nothing is left allocated in opts.
 */
ote_status_t ote_config_fill(const ote_config_table_t *table, void *opts);
/*
 * Apply one setting by its variable name without OTE_ ("TCP_CONNS"):
 * OTE_ERR_NOT_FOUND if the table has no such variable. Does not validate.
 */
ote_status_t ote_config_set(const ote_config_table_t *table, void *opts, const char *name,
                            const char *value);
/* Each entry within its bounds, then the table's validation if any (after ote_config_set). */
ote_status_t ote_config_validate(const ote_config_table_t *table, const void *opts);
/* Free the strings of opts. */
void         ote_config_release(const ote_config_table_t *table, void *opts);
/* Print every variable of the table with its value in opts, default and description. */
void         ote_config_print(const ote_config_table_t *table, const void *opts, FILE *stream);
/* The entry of a variable named without OTE_ (its name or its alias), or NULL. */
const ote_cfg_entry_t *ote_config_find(const ote_config_table_t *table, const char *name);
/*
 * Warn about every OTE_ variable of the environment that none of the
 * tables knows (ote_info -c lists them).
 */
void         ote_config_warn_unknown(const ote_config_table_t *const *tables, size_t count);

/* Parsers, exposed for the unit tests. */
ote_status_t ote_cfg_parse_size(const char *s, size_t *out_p);
ote_status_t ote_cfg_parse_int(const char *s, long *out_p);
ote_status_t ote_cfg_parse_bool(const char *s, bool *out_p);
ote_status_t ote_cfg_parse_ternary(const char *s, int *out_p);

#endif
