/*
 * Transport and device selection in UCX's syntax.
 *   OTE_TLS=tcp,cma | ^uct_tcp | all ; aliases shm/sm, mm, ib, rc, dc, ud,
 *   cuda as in UCX; "\name" names a transport and never an alias. "tcp",
 *   "cma" and "shm" are the native components, "uct_tcp" and "uct_cma" UCX's;
 *   shm/sm take the native shm and both cmas.
 *   OTE_NET_DEVICES=eth0,mlx5_0:1 | mlx5_[0-3]:1 | ^eth1 | all ; a device
 *   without ":port" also names each of its ports.
 * A name listed explicitly (not under ^) that matches nothing here is an
 * error at engine start (OTE_ERR_NO_DEVICE, with the names that are here),
 * never a silent fallback; so is a name whose every device was reported
 * unusable (ote_select_device_result: an RDMA port that is down, or that no
 * transport runs on).
 */
#include "base/log.h"
#include "select.h"
#include "uct_ext/tl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEL_MAX 64

typedef struct {
    char name[OTE_TL_DEV_MAX];
    bool matched;
    /* Devices only: a device it names was used, or why those it names were not. */
    bool used;
    char why[256];
} sel_token_t;

typedef struct {
    bool        all;
    bool        negate;
    sel_token_t tok[SEL_MAX];
    size_t      n;
    /* every name offered here, for the error message: "a, b, c" */
    char        seen[1024];
} sel_list_t;

struct ote_select {
    sel_list_t tls;
    sel_list_t devs;
};

/* UCX's aliases (ucp_context.c), with OrbitTE's names. */
static const struct {
    const char *alias;
    const char *members;
} aliases[] = {
    {"shm", "shm,cma,uct_cma,posix,sysv,xpmem,knem"},
    {"sm", "shm,cma,uct_cma,posix,sysv,xpmem,knem"},
    {"mm", "posix,sysv,xpmem"},
    {"ib", "rc_mlx5,rc_verbs,dc_mlx5,ud_mlx5,ud_verbs"},
    {"rc", "rc_mlx5,rc_verbs"},
    {"rc_v", "rc_verbs"},
    {"rc_x", "rc_mlx5"},
    {"dc", "dc_mlx5"},
    {"dc_x", "dc_mlx5"},
    {"ud", "ud_mlx5,ud_verbs"},
    {"ud_v", "ud_verbs"},
    {"ud_x", "ud_mlx5"},
    {"cuda", "cuda_copy,cuda_ipc,gdr_copy"},
};

/* Device pattern check: literal characters and [a-b] or [a] decimal ranges, a <= b. */
static bool dev_pattern_valid(const char *pat)
{
    while (*pat) {
        if (*pat == ']')
            return false;
        if (*pat == '[') {
            char *end;
            long lo, hi;

            if (!isdigit((unsigned char)pat[1]))
                return false;
            lo = strtol(pat + 1, &end, 10);
            hi = lo;
            if (*end == '-') {
                if (!isdigit((unsigned char)end[1]))
                    return false;
                hi = strtol(end + 1, &end, 10);
            }
            if (*end != ']' || hi < lo)
                return false;
            pat = end + 1;
            continue;
        }
        pat++;
    }
    return true;
}

static ote_status_t list_parse(const char *spec, sel_list_t *l, const char *what, bool devices)
{
    char buf[1024];
    char *save = NULL, *tok;

    memset(l, 0, sizeof(*l));
    while (spec != NULL && isspace((unsigned char)*spec))
        spec++;
    if (spec == NULL || *spec == '\0' || strcmp(spec, "all") == 0) {
        l->all = true;
        return OTE_OK;
    }
    if (strlen(spec) >= sizeof(buf)) {
        ote_error("%s: value too long", what);
        return OTE_ERR_INVALID_PARAM;
    }
    if (spec[0] == '^') {
        l->negate = true;
        spec++;
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t len;

        while (isspace((unsigned char)*tok))
            tok++;
        len = strlen(tok);
        while (len > 0 && isspace((unsigned char)tok[len - 1]))
            tok[--len] = '\0';
        if (*tok == '\0')
            continue;
        if (*tok == '^') {
            ote_error("%s: '^' only at the start of the list ('%s')", what, tok);
            return OTE_ERR_INVALID_PARAM;
        }
        if (strcmp(tok, "all") == 0) {
            if (l->negate) {
                ote_error("%s: '^all' excludes everything", what);
                return OTE_ERR_INVALID_PARAM;
            }
            l->all = true;
            continue;
        }
        if (devices && !dev_pattern_valid(tok)) {
            ote_error("%s: bad range in '%s' (expected e.g. mlx5_[0-3]:1)", what, tok);
            return OTE_ERR_INVALID_PARAM;
        }
        if (l->n == SEL_MAX || len >= OTE_TL_DEV_MAX) {
            ote_error("%s: too many or too long entries", what);
            return OTE_ERR_INVALID_PARAM;
        }
        snprintf(l->tok[l->n++].name, OTE_TL_DEV_MAX, "%s", tok);
    }
    if (l->n == 0 && !l->all) {
        ote_error("%s: empty list", what);
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

static bool in_csv(const char *csv, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = csv; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len        = comma ? (size_t)(comma - p) : strlen(p);

        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = comma ? comma + 1 : NULL;
    }
    return false;
}

/* A token names a transport directly, through an alias, or strictly ("\rc"). */
static bool tl_token_matches(const char *tok, const char *tl)
{
    if (tok[0] == '\\')
        return strcmp(tok + 1, tl) == 0;
    if (strcmp(tok, tl) == 0)
        return true;
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        if (strcmp(tok, aliases[i].alias) == 0)
            return in_csv(aliases[i].members, tl);
    }
    return false;
}

/* Device pattern: literal characters and [a-b] decimal ranges. */
static bool dev_pattern_matches(const char *pat, const char *dev)
{
    while (*pat) {
        if (*pat == '[') {
            char *end;
            long lo = strtol(pat + 1, &end, 10), hi, v;

            if (end == pat + 1 || (*end != '-' && *end != ']'))
                return false;
            hi = lo;
            if (*end == '-') {
                const char *q = end + 1;

                hi = strtol(q, &end, 10);
                if (end == q)
                    return false;
            }
            if (*end != ']' || !isdigit((unsigned char)*dev))
                return false;
            v = strtol(dev, (char **)&dev, 10);
            if (v < lo || v > hi)
                return false;
            pat = end + 1;
            continue;
        }
        if (*pat != *dev)
            return false;
        pat++;
        dev++;
    }
    return *dev == '\0';
}

ote_status_t ote_select_parse(const char *tls, const char *devices, ote_select_t **sel_p)
{
    ote_select_t *sel = calloc(1, sizeof(*sel));
    ote_status_t status;

    if (sel == NULL)
        return OTE_ERR_NO_MEMORY;
    status = list_parse(tls, &sel->tls, "OTE_TLS", false);
    if (status == OTE_OK)
        status = list_parse(devices, &sel->devs, "OTE_NET_DEVICES", true);
    if (status != OTE_OK) {
        free(sel);
        return status;
    }
    *sel_p = sel;
    return OTE_OK;
}

/* Remember a name offered here (once). */
static void seen_add(sel_list_t *l, const char *name)
{
    size_t len = strlen(l->seen);

    if (in_csv(l->seen, name) || len + strlen(name) + 2 >= sizeof(l->seen))
        return;
    snprintf(l->seen + len, sizeof(l->seen) - len, "%s%s", len ? "," : "", name);
}

/* Whether a list lets name through, marking the tokens that named it. */
static bool list_select(sel_list_t *l, const char *name,
                        bool (*matches)(const char *pat, const char *name))
{
    bool hit = false;

    seen_add(l, name);
    for (size_t i = 0; i < l->n; i++) {
        if (matches(l->tok[i].name, name)) {
            l->tok[i].matched = true;
            hit = true;
        }
    }
    if (l->negate)
        return !hit;
    return l->all || hit;
}

bool ote_select_tl(ote_select_t *sel, const char *tl)
{
    return list_select(&sel->tls, tl, tl_token_matches);
}

/* A device token names dev: directly, by a range, or as the device of a port. */
static bool dev_token_matches(const char *pat, const char *dev)
{
    const char *colon;
    char base[OTE_TL_DEV_MAX];

    if (dev_pattern_matches(pat, dev))
        return true;
    /* "mlx5_0" also names every port of mlx5_0 ("mlx5_0:1"). */
    colon = strchr(dev, ':');
    if (strchr(pat, ':') || colon == NULL)
        return false;
    snprintf(base, sizeof(base), "%.*s", (int)(colon - dev), dev);
    return dev_pattern_matches(pat, base);
}

bool ote_select_device(ote_select_t *sel, const char *dev)
{
    return list_select(&sel->devs, dev, dev_token_matches);
}

void ote_select_device_result(ote_select_t *sel, const char *dev, const char *why)
{
    if (sel->devs.negate)
        return;
    for (size_t i = 0; i < sel->devs.n; i++) {
        sel_token_t *t = &sel->devs.tok[i];
        size_t len     = strlen(t->why);

        if (!dev_token_matches(t->name, dev))
            continue;
        if (why == NULL)
            t->used = true;
        else if (len + strlen(dev) + strlen(why) + 5 < sizeof(t->why))
            snprintf(t->why + len, sizeof(t->why) - len, "%s%s: %s", len ? "; " : "", dev, why);
    }
}

bool ote_select_excludes(const ote_select_t *sel, const char *tl)
{
    if (!sel->tls.negate)
        return false;
    for (size_t i = 0; i < sel->tls.n; i++) {
        if (tl_token_matches(sel->tls.tok[i].name, tl))
            return true;
    }
    return false;
}

static const char *alias_members(const char *tok)
{
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
        if (strcmp(tok, aliases[i].alias) == 0)
            return aliases[i].members;
    }
    return NULL;
}

ote_status_t ote_select_check_unmatched(ote_select_t *sel)
{
    ote_status_t status = OTE_OK;

    if (!sel->tls.negate) {
        for (size_t i = 0; i < sel->tls.n; i++) {
            const char *tok     = sel->tls.tok[i].name;
            const char *members = tok[0] == '\\' ? NULL : alias_members(tok);

            char names[256] = "";

            if (sel->tls.tok[i].matched)
                continue;
            for (size_t k = 0; k < sizeof(aliases) / sizeof(aliases[0]); k++) {
                size_t len = strlen(names);

                snprintf(names + len, sizeof(names) - len, "%s, ", aliases[k].alias);
            }
            if (members != NULL)
                ote_error("OTE_TLS: alias '%s' (%s) matches no transport here; transports "
                          "here: %s (see ote_info -d)", tok, members,
                          sel->tls.seen[0] ? sel->tls.seen : "none");
            else
                ote_error("OTE_TLS: unknown transport '%s'; transports here: %s; aliases: "
                          "%sall (see ote_info -d)", tok,
                          sel->tls.seen[0] ? sel->tls.seen : "none", names);
            status = OTE_ERR_NO_DEVICE;
        }
    }
    if (!sel->devs.negate) {
        for (size_t i = 0; i < sel->devs.n; i++) {
            const sel_token_t *t = &sel->devs.tok[i];

            if (!t->matched) {
                ote_error("OTE_NET_DEVICES: no network device '%s' here; devices here: %s "
                          "(see ote_info -d)", t->name,
                          sel->devs.seen[0] ? sel->devs.seen : "none");
                status = OTE_ERR_NO_DEVICE;
            } else if (t->why[0] != '\0' && !t->used) {
                ote_error("OTE_NET_DEVICES: '%s' names no usable device: %s (see ote_info -d)",
                          t->name, t->why);
                status = OTE_ERR_NO_DEVICE;
            }
        }
    }
    return status;
}

void ote_select_free(ote_select_t *sel)
{
    free(sel);
}
