#include "config.h"

#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

ote_status_t ote_cfg_parse_size(const char *s, size_t *out_p)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;

    while (isspace((unsigned char)*s))
        s++;
    if (strcasecmp(s, "inf") == 0 || strcasecmp(s, "unlimited") == 0) {
        *out_p = SIZE_MAX;
        return OTE_OK;
    }
    if (!isdigit((unsigned char)*s))
        return OTE_ERR_INVALID_PARAM;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno)
        return OTE_ERR_INVALID_PARAM;
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    case 't': shift = 40; end++; break;
    default: return OTE_ERR_INVALID_PARAM;
    }
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end != '\0')
        return OTE_ERR_INVALID_PARAM;
    if (shift && v > (SIZE_MAX >> shift))
        return OTE_ERR_INVALID_PARAM;
    *out_p = (size_t)(v << shift);
    return OTE_OK;
}

ote_status_t ote_cfg_parse_int(const char *s, long *out_p)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return OTE_ERR_INVALID_PARAM;
    *out_p = v;
    return OTE_OK;
}

ote_status_t ote_cfg_parse_bool(const char *s, bool *out_p)
{
    static const char *const yes[] = {"y", "yes", "on", "1", "true"};
    static const char *const no[]  = {"n", "no", "off", "0", "false"};

    for (size_t i = 0; i < 5; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out_p = true;
            return OTE_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out_p = false;
            return OTE_OK;
        }
    }
    return OTE_ERR_INVALID_PARAM;
}

ote_status_t ote_cfg_parse_ternary(const char *s, int *out_p)
{
    bool b;

    if (strcasecmp(s, "auto") == 0 || strcasecmp(s, "try") == 0) {
        *out_p = OTE_TERNARY_AUTO;
        return OTE_OK;
    }
    if (ote_cfg_parse_bool(s, &b) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    *out_p = b ? OTE_TERNARY_YES : OTE_TERNARY_NO;
    return OTE_OK;
}

const ote_cfg_entry_t *ote_config_find(const ote_config_table_t *table, const char *name)
{
    size_t plen = strlen(table->prefix);

    for (size_t i = 0; i < table->num_fields; i++) {
        const char *alias = table->fields[i].alias;

        if (alias != NULL && strcmp(alias, name) == 0)
            return &table->fields[i];
    }
    if (strncmp(name, table->prefix, plen) != 0)
        return NULL;
    for (size_t i = 0; i < table->num_fields; i++) {
        if (strcmp(table->fields[i].name, name + plen) == 0)
            return &table->fields[i];
    }
    return NULL;
}

/* The parsers write the field only when the value parses. */
static ote_status_t config_apply(void *opts, const ote_cfg_entry_t *e, const char *value)
{
    void *field = (char *)opts + e->offset;
    char *copy;
    int level;

    switch (e->type) {
    case OTE_CFG_STRING:
        copy = strdup(value);
        if (copy == NULL)
            return OTE_ERR_NO_MEMORY;
        free(*(char **)field);
        *(char **)field = copy;
        return OTE_OK;
    case OTE_CFG_INT:
        return ote_cfg_parse_int(value, (long *)field);
    case OTE_CFG_SIZE:
        return ote_cfg_parse_size(value, (size_t *)field);
    case OTE_CFG_BOOL:
        return ote_cfg_parse_bool(value, (bool *)field);
    case OTE_CFG_TERNARY:
        return ote_cfg_parse_ternary(value, (int *)field);
    case OTE_CFG_LOGLEVEL:
        level = ote_log_level_parse(value);
        if (level < 0)
            return OTE_ERR_INVALID_PARAM;
        *(int *)field = level;
        return OTE_OK;
    }
    return OTE_OK;
}

ote_status_t ote_config_set(const ote_config_table_t *table, void *opts, const char *name,
                            const char *value)
{
    const ote_cfg_entry_t *e = ote_config_find(table, name);
    ote_status_t status;

    if (e == NULL)
        return OTE_ERR_NOT_FOUND;
    status = config_apply(opts, e, value);
    if (status != OTE_OK)
        ote_error("OTE_%s: cannot parse '%s'", name, value);
    return status;
}

/* A value outside its entry's bounds is logged and INVALID_PARAM. */
static ote_status_t config_check_bounds(const ote_config_table_t *table, const void *opts)
{
    for (size_t i = 0; i < table->num_fields; i++) {
        const ote_cfg_entry_t *e = &table->fields[i];
        const void *field        = (const char *)opts + e->offset;
        char value[32], range[64];

        if (e->min == 0 && e->max == 0)
            continue;
        if (e->type == OTE_CFG_INT) {
            long v = *(const long *)field;

            if (v >= e->min && v <= e->max)
                continue;
            snprintf(value, sizeof(value), "%ld", v);
        } else if (e->type == OTE_CFG_SIZE) {
            size_t v = *(const size_t *)field;

            if (v >= (unsigned long long)e->min && v <= (unsigned long long)e->max)
                continue;
            snprintf(value, sizeof(value), "%zu", v);
        } else {
            continue;
        }
        if (e->max == OTE_CFG_NO_MAX)
            snprintf(range, sizeof(range), "%lld or more", e->min);
        else
            snprintf(range, sizeof(range), "%lld..%lld", e->min, e->max);
        ote_error("OTE_%s%s must be %s, not %s", table->prefix, e->name, range, value);
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

ote_status_t ote_config_validate(const ote_config_table_t *table, const void *opts)
{
    ote_status_t status = config_check_bounds(table, opts);

    if (status == OTE_OK && table->validate != NULL)
        status = table->validate(opts);
    return status;
}

ote_status_t ote_config_fill(const ote_config_table_t *table, void *opts)
{
    ote_status_t status;
    char name[128];

    memset(opts, 0, table->struct_size);
    for (size_t i = 0; i < table->num_fields; i++) {
        status = config_apply(opts, &table->fields[i], table->fields[i].dflt);
        if (status != OTE_OK)
            goto err;
    }
    for (size_t i = 0; i < table->num_fields; i++) {
        const char *value;

        snprintf(name, sizeof(name), "OTE_%s%s", table->prefix, table->fields[i].name);
        value = getenv(name);
        if (value == NULL && table->fields[i].alias != NULL) {
            snprintf(name, sizeof(name), "OTE_%s", table->fields[i].alias);
            value = getenv(name);
        }
        if (value == NULL)
            continue;
        status = ote_config_set(table, opts, name + 4, value);
        if (status != OTE_OK)
            goto err;
    }
    status = ote_config_validate(table, opts);
    if (status != OTE_OK)
        goto err;
    return OTE_OK;

err:
    ote_config_release(table, opts);
    return status;
}

void ote_config_warn_unknown(const ote_config_table_t *const *tables, size_t count)
{
    char name[128];

    for (char **env = environ; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        bool known     = false;
        size_t len;

        if (strncmp(*env, "OTE_", 4) != 0 || eq == NULL)
            continue;
        len = (size_t)(eq - *env) - 4;
        if (len >= sizeof(name))
            continue;
        memcpy(name, *env + 4, len);
        name[len] = '\0';
        for (size_t t = 0; t < count && !known; t++)
            known = ote_config_find(tables[t], name) != NULL;
        if (!known)
            ote_warn("unknown configuration variable OTE_%s ignored (see ote_info -c)", name);
    }
}

void ote_config_release(const ote_config_table_t *table, void *opts)
{
    for (size_t i = 0; i < table->num_fields; i++) {
        if (table->fields[i].type == OTE_CFG_STRING) {
            char **field = (char **)((char *)opts + table->fields[i].offset);
            free(*field);
            *field = NULL;
        }
    }
}

static void config_format(const void *opts, const ote_cfg_entry_t *e, char *buf, size_t len)
{
    const void *field = (const char *)opts + e->offset;
    static const char *const tern[] = {"n", "y", "auto"};
    static const char *const lvl[] = {"none", "error", "warn", "info", "debug", "trace"};
    size_t sz;

    switch (e->type) {
    case OTE_CFG_STRING:
        /* The secret itself is never printed. */
        if (strcmp(e->name, "AUTH_KEY") == 0 && *(char *const *)field && **(char *const *)field)
            snprintf(buf, len, "(set)");
        else
            snprintf(buf, len, "%s", *(char *const *)field ? *(char *const *)field : "");
        break;
    case OTE_CFG_INT: snprintf(buf, len, "%ld", *(const long *)field); break;
    case OTE_CFG_SIZE:
        sz = *(const size_t *)field;
        if (sz == SIZE_MAX)
            snprintf(buf, len, "inf");
        else
            snprintf(buf, len, "%zu", sz);
        break;
    case OTE_CFG_BOOL: snprintf(buf, len, "%s", *(const bool *)field ? "y" : "n"); break;
    case OTE_CFG_TERNARY: snprintf(buf, len, "%s", tern[*(const int *)field]); break;
    case OTE_CFG_LOGLEVEL: snprintf(buf, len, "%s", lvl[*(const int *)field]); break;
    }
}

void ote_config_print(const ote_config_table_t *table, const void *opts, FILE *stream)
{
    static const char *const tnames[] = {"string", "int", "size", "bool", "ternary", "level"};
    char val[256];

    for (size_t i = 0; i < table->num_fields; i++) {
        const ote_cfg_entry_t *e = &table->fields[i];

        config_format(opts, e, val, sizeof(val));
        fprintf(stream, "#\n# %s%s%s%s\n# type: %s, default: %s\n#\nOTE_%s%s=%s\n", e->desc,
                e->alias ? " Also read as OTE_" : "", e->alias ? e->alias : "",
                e->alias ? " where this is not set." : "", tnames[e->type],
                e->dflt[0] ? e->dflt : "\"\"", table->prefix, e->name, val);
    }
}
