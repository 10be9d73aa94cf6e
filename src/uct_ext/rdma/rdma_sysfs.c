/* RDMA devices, ports and GIDs from sysfs; the GID choice per port. */
#include "rdma.h"

#include "base/log.h"
#include "base/util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RDMA_F(_f) offsetof(ote_rdma_config_t, _f)

static const ote_cfg_entry_t rdma_config_fields[] = {
    {"SYSFS_ROOT", "/sys", OTE_CFG_STRING, RDMA_F(sysfs_root),
     "Test and diagnostics only: the sysfs tree RDMA devices, ports and GIDs are read from "
     "(ROOT/class/infiniband/...), e.g. a fixture tree; libibverbs is asked only with /sys.",
     .alias = "SYSFS_ROOT"},
    {"POLL_MS", "1000", OTE_CFG_INT, RDMA_F(poll_ms),
     "The state of every RDMA port, the RDMA devices and the network interfaces are read "
     "again this often: a port that goes down pauses its rails, one that comes up resumes "
     "them; a device that appears joins the running engine, one that goes away pauses its "
     "rails. 0 = never.",
     .min = 0, .max = OTE_CFG_TIME_MAX},
};

OTE_CONFIG_TABLE_DEFINE(ote_rdma_config_table, "RDMA_", "rdma", rdma_config_fields,
                        ote_rdma_config_t, NULL);

/* Bounds on what a sysfs tree may hold before we call it malformed. */
#define RDMA_MAX_DEVS   256
#define RDMA_MAX_PORTS  255   /* port numbers are u8 in verbs            */
#define RDMA_MAX_GIDS   4096  /* table entries listed per port            */
#define RDMA_VALUE_MAX  128   /* longest attribute value read (plus NUL)  */

/* Ranks of usable GIDs, higher first. */
enum {
    RANK_NONE        = 0,
    RANK_ROCE_V2_LL  = 1,
    RANK_ROCE_V1     = 2,
    RANK_ROCE_V2_IP6 = 3,
    RANK_ROCE_V2_IP4 = 4,
    RANK_IB          = 4,
};

/* snprintf into a path buffer; false if it did not fit. */
static bool path_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool path_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len;
}

/* A decimal directory entry name ("1", "17") within [lo, hi]. */
static bool parse_index(const char *s, unsigned lo, unsigned hi, unsigned *v_p)
{
    unsigned long v = 0;

    if (*s == '\0' || strlen(s) > 6)
        return false;
    for (const char *p = s; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return false;
        v = v * 10 + (unsigned long)(*p - '0');
    }
    if ((s[0] == '0' && s[1] != '\0') || v < lo || v > hi)
        return false;
    *v_p = (unsigned)v;
    return true;
}

/* Device and netdev names: what the kernel allows, bounded. */
static bool name_valid(const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n == 0 || n >= max || s[0] == '.')
        return false;
    for (; *s; s++) {
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
            return false;
    }
    return true;
}

static int not_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

static int name_cmp(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/*
 * The entries of path but dot files, sorted: numbers (GID indexes, port
 * numbers) by value (versionsort: 9 before 10), names by strcmp. A path
 * that is no readable directory has none; NO_MEMORY where scandir ran out.
 */
static ote_status_t dir_list(const char *path, bool numbers, struct dirent ***list_p, int *n_p)
{
    int n = scandir(path, list_p, not_dot, numbers ? versionsort : name_cmp);

    *n_p = n < 0 ? 0 : n;
    if (n < 0)
        *list_p = NULL;
    return n < 0 && errno == ENOMEM ? OTE_ERR_NO_MEMORY : OTE_OK;
}

static void dir_list_free(struct dirent **list, int n)
{
    for (int i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

/* Netdev names: the kernel refuses '/', ':' and white space in them. */
static bool ndev_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n >= OTE_RDMA_NDEV_MAX)
        return false;
    for (; *s; s++) {
        if (!isgraph((unsigned char)*s) || *s == '/' || *s == ':')
            return false;
    }
    return true;
}

/* Copy a name whose length name_valid() or ndev_valid() bounded. */
static void name_copy(char *dst, size_t max, const char *src)
{
    size_t n = strnlen(src, max - 1);

    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* "xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx:xxxx", as the kernel prints a GID. */
static bool gid_parse(const char *s, uint8_t raw[16])
{
    if (strlen(s) != 39)
        return false;
    for (int g = 0; g < 8; g++) {
        unsigned v = 0;

        for (int k = 0; k < 4; k++) {
            char c = s[g * 5 + k];

            if (!isxdigit((unsigned char)c))
                return false;
            v = v * 16 + (unsigned)(isdigit((unsigned char)c) ? c - '0'
                                                                : tolower((unsigned char)c) - 'a' + 10);
        }
        if (g < 7 && s[g * 5 + 4] != ':')
            return false;
        raw[2 * g]     = (uint8_t)(v >> 8);
        raw[2 * g + 1] = (uint8_t)v;
    }
    return true;
}

static bool gid_is_zero(const uint8_t raw[16])
{
    for (int i = 0; i < 16; i++) {
        if (raw[i] != 0)
            return false;
    }
    return true;
}

static bool gid_is_ipv4(const uint8_t raw[16])
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    return memcmp(raw, prefix, sizeof(prefix)) == 0;
}

static bool gid_is_link_local(const uint8_t raw[16])
{
    return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

const char *ote_rdma_link_name(ote_rdma_link_t link)
{
    switch (link) {
    case OTE_RDMA_LINK_IB: return "InfiniBand";
    case OTE_RDMA_LINK_ETHERNET: return "Ethernet";
    default: return "unknown";
    }
}

const char *ote_rdma_gid_type_name(ote_rdma_gid_type_t type)
{
    switch (type) {
    case OTE_RDMA_GID_IB: return "IB";
    case OTE_RDMA_GID_ROCE_V1: return "RoCE v1";
    case OTE_RDMA_GID_ROCE_V2: return "RoCE v2";
    default: return "unknown";
    }
}

const char *ote_rdma_gid_class(const ote_rdma_gid_t *gid)
{
    if (gid->type != OTE_RDMA_GID_ROCE_V2)
        return ote_rdma_gid_type_name(gid->type);
    if (gid_is_ipv4(gid->raw))
        return "RoCE v2 IPv4";
    return gid_is_link_local(gid->raw) ? "RoCE v2 link-local" : "RoCE v2 IPv6";
}

void ote_rdma_gid_format(const ote_rdma_gid_t *gid, char *buf, size_t len)
{
    char text[INET6_ADDRSTRLEN];

    if (inet_ntop(AF_INET6, gid->raw, text, sizeof(text)) == NULL)
        snprintf(text, sizeof(text), "?");
    snprintf(buf, len, "%s", text);
}

/* Type, netdev and rank of one GID; why set when it cannot be used. */
static void gid_classify(const char *port_dir, ote_rdma_link_t link, ote_rdma_gid_t *gid)
{
    char path[512], val[RDMA_VALUE_MAX];

    gid->type = OTE_RDMA_GID_UNKNOWN;
    gid->rank = RANK_NONE;
    if (!path_fmt(path, sizeof(path), "%s/gid_attrs/types/%u", port_dir, gid->index) ||
        ote_read_attr(path, val, sizeof(val)) != 0) {
        snprintf(gid->why, sizeof(gid->why), "its type cannot be read (gid_attrs/types/%u)",
                 gid->index);
        return;
    }
    if (strcmp(val, "IB/RoCE v1") == 0) {
        gid->type = link == OTE_RDMA_LINK_IB ? OTE_RDMA_GID_IB : OTE_RDMA_GID_ROCE_V1;
    } else if (strcmp(val, "RoCE v2") == 0) {
        gid->type = OTE_RDMA_GID_ROCE_V2;
    } else {
        snprintf(gid->why, sizeof(gid->why), "unknown type '%.40s'", val);
        return;
    }
    if (path_fmt(path, sizeof(path), "%s/gid_attrs/ndevs/%u", port_dir, gid->index) &&
        ote_read_attr(path, val, sizeof(val)) == 0 && ndev_valid(val))
        name_copy(gid->ndev, sizeof(gid->ndev), val);
    if (link == OTE_RDMA_LINK_IB) {
        if (gid->type != OTE_RDMA_GID_IB) {
            snprintf(gid->why, sizeof(gid->why), "a RoCE GID on an InfiniBand port");
            return;
        }
        gid->rank = RANK_IB;
        return;
    }
    /* RoCE: the GID is an address of a netdev; without one it carries nothing. */
    if (gid->ndev[0] == '\0') {
        snprintf(gid->why, sizeof(gid->why), "no netdev behind it (gid_attrs/ndevs/%u)",
                 gid->index);
        return;
    }
    if (gid->type == OTE_RDMA_GID_ROCE_V1)
        gid->rank = RANK_ROCE_V1;
    else if (gid_is_ipv4(gid->raw))
        gid->rank = RANK_ROCE_V2_IP4;
    else if (gid_is_link_local(gid->raw))
        gid->rank = RANK_ROCE_V2_LL;
    else
        gid->rank = RANK_ROCE_V2_IP6;
}

/* The GID table of a port: every non-zero entry, by index. */
static ote_status_t port_read_gids(const char *port_dir, ote_rdma_port_t *port)
{
    char path[512], val[RDMA_VALUE_MAX];
    struct dirent **list;
    int n;
    ote_status_t status;

    if (!path_fmt(path, sizeof(path), "%s/gids", port_dir))
        return OTE_ERR_INVALID_PARAM;
    /* No table: the port ends up without a usable GID. */
    status = dir_list(path, true, &list, &n);
    if (status != OTE_OK || n == 0)
        return status;
    port->gids = calloc((size_t)n, sizeof(*port->gids));
    for (int i = 0; i < n && port->gids != NULL; i++) {
        const char *name   = list[i]->d_name;
        ote_rdma_gid_t gid = {0};
        unsigned index;

        if (!parse_index(name, 0, 65535, &index)) {
            ote_debug("rdma %s: gids/%.32s is not a GID index; ignored", port->name, name);
            continue;
        }
        gid.index = index;
        if (!path_fmt(path, sizeof(path), "%s/gids/%u", port_dir, index) ||
            ote_read_attr(path, val, sizeof(val)) != 0)
            continue; /* an entry the kernel does not fill reads as an error */
        if (!gid_parse(val, gid.raw)) {
            snprintf(gid.why, sizeof(gid.why), "cannot parse '%.40s'", val);
        } else if (gid_is_zero(gid.raw)) {
            continue; /* an empty slot of the table */
        } else {
            gid_classify(port_dir, port->link, &gid);
        }
        if (port->num_gids == RDMA_MAX_GIDS) {
            ote_warn("rdma %s: more than %d GIDs; the rest ignored", port->name, RDMA_MAX_GIDS);
            break;
        }
        port->gids[port->num_gids++] = gid;
    }
    dir_list_free(list, n);
    if (port->gids == NULL)
        return OTE_ERR_NO_MEMORY;
    /* A table lists its empty slots too (most of them): keep the filled ones' room. */
    if (port->num_gids < (size_t)n) {
        size_t keep       = port->num_gids ? port->num_gids : 1;
        ote_rdma_gid_t *g = realloc(port->gids, keep * sizeof(*g));

        if (g != NULL)
            port->gids = g;
    }
    return OTE_OK;
}

/* The best-ranked GID, lowest index first; the others say why not. */
static void port_choose_gid(ote_rdma_port_t *port)
{
    ote_rdma_gid_t *best = NULL;

    port->gid = -1;
    for (size_t i = 0; i < port->num_gids; i++) {
        ote_rdma_gid_t *g = &port->gids[i];

        if (g->rank > RANK_NONE && (best == NULL || g->rank > best->rank)) {
            best      = g;
            port->gid = (int)i;
        }
    }
    for (size_t i = 0; i < port->num_gids; i++) {
        ote_rdma_gid_t *g = &port->gids[i];

        if (g == best || g->rank == RANK_NONE)
            continue;
        if (g->rank < best->rank)
            snprintf(g->why, sizeof(g->why), "%s ranks below %s (index %u)",
                     ote_rdma_gid_class(g), ote_rdma_gid_class(best), best->index);
        else
            snprintf(g->why, sizeof(g->why), "index %u has the same rank and comes first",
                     best->index);
    }
    if (best != NULL)
        best->why[0] = '\0';
}

/* "4: ACTIVE" */
static bool state_parse(const char *s, int *num_p, char *name, size_t len)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (end == s || v < 0 || v > 15 || end[0] != ':' || end[1] != ' ' || end[2] == '\0' ||
        strlen(end + 2) >= len)
        return false;
    for (const char *p = end + 2; *p; p++) {
        if (!isupper((unsigned char)*p) && *p != '_')
            return false;
    }
    *num_p = (int)v;
    snprintf(name, len, "%s", end + 2);
    return true;
}

/* "0x1a" */
static bool lid_parse(const char *s, uint16_t *lid_p)
{
    char *end;
    unsigned long v;

    if (strncmp(s, "0x", 2) != 0 || !isxdigit((unsigned char)s[2]))
        return false;
    errno = 0;
    v     = strtoul(s + 2, &end, 16);
    if (errno || *end != '\0' || v > 0xffff)
        return false;
    *lid_p = (uint16_t)v;
    return true;
}

static ote_status_t port_read(const char *dev_dir, const char *dev, unsigned num,
                              ote_rdma_port_t *port)
{
    char dir[512], path[600], val[RDMA_VALUE_MAX];
    ote_status_t status;

    memset(port, 0, sizeof(*port));
    port->num   = num;
    port->state = -1;
    port->gid   = -1;
    port->link  = OTE_RDMA_LINK_UNKNOWN;
    snprintf(port->name, sizeof(port->name), "%.*s:%u", OTE_RDMA_DEV_MAX - 1, dev, num);
    if (!path_fmt(dir, sizeof(dir), "%s/ports/%u", dev_dir, num))
        return OTE_ERR_INVALID_PARAM;

    if (path_fmt(path, sizeof(path), "%s/link_layer", dir) &&
        ote_read_attr(path, val, sizeof(val)) == 0) {
        if (strcmp(val, "InfiniBand") == 0)
            port->link = OTE_RDMA_LINK_IB;
        else if (strcmp(val, "Ethernet") == 0)
            port->link = OTE_RDMA_LINK_ETHERNET;
    }
    status = port_read_gids(dir, port);
    if (status != OTE_OK)
        return status;
    port_choose_gid(port);

    if (!path_fmt(path, sizeof(path), "%s/state", dir) ||
        ote_read_attr(path, val, sizeof(val)) != 0 ||
        !state_parse(val, &port->state, port->state_name, sizeof(port->state_name))) {
        port->state = -1;
        snprintf(port->state_name, sizeof(port->state_name), "unknown");
    }
    if (port->link == OTE_RDMA_LINK_IB &&
        (!path_fmt(path, sizeof(path), "%s/lid", dir) ||
         ote_read_attr(path, val, sizeof(val)) != 0 || !lid_parse(val, &port->lid)))
        port->lid = 0;

    /* One reason, the first to act on: state, link layer, LID, GIDs. */
    if (port->state < 0)
        snprintf(port->unusable, sizeof(port->unusable), "its state cannot be read");
    else if (port->state != OTE_RDMA_PORT_ACTIVE)
        snprintf(port->unusable, sizeof(port->unusable), "port state %d: %s", port->state,
                 port->state_name);
    else if (port->link == OTE_RDMA_LINK_UNKNOWN)
        snprintf(port->unusable, sizeof(port->unusable), "link layer unknown or unreadable");
    else if (port->link == OTE_RDMA_LINK_IB && port->lid == 0)
        snprintf(port->unusable, sizeof(port->unusable),
                 "no LID assigned (is a subnet manager running?)");
    else if (port->gid < 0)
        snprintf(port->unusable, sizeof(port->unusable), "no usable GID (%zu listed)",
                 port->num_gids);
    return OTE_OK;
}

static void dev_release(ote_rdma_dev_t *dev)
{
    for (size_t p = 0; p < dev->num_ports; p++)
        free(dev->ports[p].gids);
    free(dev->ports);
}

static ote_status_t dev_read(const char *class_dir, const char *name, ote_rdma_dev_t *dev)
{
    char dir[512], path[600];
    struct dirent **list;
    int n;
    ote_status_t status;

    memset(dev, 0, sizeof(*dev));
    name_copy(dev->name, sizeof(dev->name), name);
    if (!path_fmt(dir, sizeof(dir), "%s/%s", class_dir, name) ||
        !path_fmt(path, sizeof(path), "%s/ports", dir))
        return OTE_ERR_INVALID_PARAM;
    /* A device without ports offers nothing. */
    status = dir_list(path, true, &list, &n);
    if (status != OTE_OK || n == 0)
        return status;
    dev->ports = calloc((size_t)n, sizeof(*dev->ports));
    status     = dev->ports != NULL ? OTE_OK : OTE_ERR_NO_MEMORY;
    for (int i = 0; i < n && status == OTE_OK; i++) {
        ote_rdma_port_t *p = &dev->ports[dev->num_ports];
        unsigned num;

        if (!parse_index(list[i]->d_name, 1, RDMA_MAX_PORTS, &num)) {
            ote_debug("rdma %s: ports/%.32s is not a port number; ignored", name,
                      list[i]->d_name);
            continue;
        }
        status = port_read(dir, name, num, p);
        if (status == OTE_OK)
            dev->num_ports++;
        else
            free(p->gids);
    }
    dir_list_free(list, n);
    if (status != OTE_OK)
        dev_release(dev);
    return status;
}

ote_status_t ote_rdma_discover(const char *sysfs_root, ote_rdma_t **rdma_p)
{
    char class_dir[512];
    struct stat st;
    struct dirent **list;
    ote_rdma_t *rdma;
    int n;
    ote_status_t status;

    if (sysfs_root == NULL || sysfs_root[0] == '\0')
        sysfs_root = "/sys";
    if (strlen(sysfs_root) >= sizeof(rdma->root) ||
        !path_fmt(class_dir, sizeof(class_dir), "%s/class/infiniband", sysfs_root)) {
        ote_error("OTE_RDMA_SYSFS_ROOT: path too long");
        return OTE_ERR_INVALID_PARAM;
    }
    if (stat(sysfs_root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ote_error("OTE_RDMA_SYSFS_ROOT: '%s' is not a directory", sysfs_root);
        return OTE_ERR_INVALID_PARAM;
    }
    rdma = calloc(1, sizeof(*rdma));
    if (rdma == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(rdma->root, sizeof(rdma->root), "%s", sysfs_root);
    /* No class directory: no RDMA devices here. */
    status     = dir_list(class_dir, false, &list, &n);
    rdma->devs = calloc(n ? (size_t)n : 1, sizeof(*rdma->devs));
    if (rdma->devs == NULL)
        status = OTE_ERR_NO_MEMORY;
    for (int i = 0; i < n && status == OTE_OK; i++) {
        const char *name = list[i]->d_name;

        if (!name_valid(name, OTE_RDMA_DEV_MAX)) {
            ote_warn("rdma: device name '%.64s' in %s not valid; ignored", name, class_dir);
            continue;
        }
        if (rdma->num_devs == RDMA_MAX_DEVS) {
            ote_warn("rdma: more than %d devices in %s; the rest ignored", RDMA_MAX_DEVS,
                     class_dir);
            break;
        }
        status = dev_read(class_dir, name, &rdma->devs[rdma->num_devs]);
        if (status == OTE_OK)
            rdma->num_devs++;
    }
    dir_list_free(list, n);
    if (status != OTE_OK) {
        ote_rdma_free(rdma);
        return status;
    }
    ote_rdma_verbs_query(rdma);
    *rdma_p = rdma;
    return OTE_OK;
}

void ote_rdma_free(ote_rdma_t *rdma)
{
    if (rdma == NULL)
        return;
    for (size_t i = 0; i < rdma->num_devs; i++)
        dev_release(&rdma->devs[i]);
    free(rdma->devs);
    free(rdma);
}

const ote_rdma_port_t *ote_rdma_port_find(const ote_rdma_t *rdma, const char *name)
{
    for (size_t i = 0; rdma != NULL && i < rdma->num_devs; i++) {
        for (size_t p = 0; p < rdma->devs[i].num_ports; p++) {
            if (strcmp(rdma->devs[i].ports[p].name, name) == 0)
                return &rdma->devs[i].ports[p];
        }
    }
    return NULL;
}

bool ote_rdma_changed(const ote_rdma_t *rdma)
{
    char class_dir[512], path[700], val[RDMA_VALUE_MAX];
    struct dirent *d;
    size_t n     = 0;
    bool changed = false;
    DIR *dir;

    if (!path_fmt(class_dir, sizeof(class_dir), "%s/class/infiniband", rdma->root))
        return false;
    dir = opendir(class_dir);
    while (dir != NULL && !changed && (d = readdir(dir)) != NULL) {
        bool known = false;

        if (d->d_name[0] == '.' || !name_valid(d->d_name, OTE_RDMA_DEV_MAX))
            continue;
        for (size_t i = 0; i < rdma->num_devs && !known; i++)
            known = strcmp(rdma->devs[i].name, d->d_name) == 0;
        changed = !known;
        n++;
    }
    if (dir != NULL)
        closedir(dir);
    if (changed || n != rdma->num_devs)
        return true;
    for (size_t i = 0; i < rdma->num_devs; i++) {
        for (size_t p = 0; p < rdma->devs[i].num_ports; p++) {
            const ote_rdma_port_t *port = &rdma->devs[i].ports[p];
            char name[24];
            int state = -1;

            if (!path_fmt(path, sizeof(path), "%s/%s/ports/%u/state", class_dir,
                          rdma->devs[i].name, port->num) ||
                ote_read_attr(path, val, sizeof(val)) != 0 ||
                !state_parse(val, &state, name, sizeof(name)))
                state = -1;
            if (state != port->state)
                return true;
        }
    }
    return false;
}

const ote_rdma_gid_t *ote_rdma_port_gid(const ote_rdma_port_t *port)
{
    return port != NULL && port->gid >= 0 ? &port->gids[port->gid] : NULL;
}
