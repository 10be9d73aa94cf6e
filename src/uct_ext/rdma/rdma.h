/*
 * RDMA devices as the kernel shows them in sysfs:
 *   <root>/class/infiniband/<dev>/ports/<n>/{state,link_layer,lid}
 *   <root>/class/infiniband/<dev>/ports/<n>/gids/<i>
 *   <root>/class/infiniband/<dev>/ports/<n>/gid_attrs/{types,ndevs}/<i>
 * The root is /sys unless OTE_RDMA_SYSFS_ROOT (tests, diagnostics) says
 * otherwise. Discovery needs sysfs only; libibverbs, when it loads at run
 * time and the root is the real /sys, adds what sysfs does not tell (the
 * active MTU).
 *
 * Each port gets one GID, chosen automatically: on Ethernet (RoCE) a RoCE
 * v2 GID with an IPv4 address (::ffff:a.b.c.d) first, then RoCE v2 with a
 * routable IPv6 address, then RoCE v1, then RoCE v2 link-local; a lower
 * index wins within a rank. On InfiniBand the lowest IB GID (the port GID).
 * Every other GID carries the reason it was not chosen. A port that is not
 * ACTIVE, an InfiniBand port without a LID, or a port without a usable GID
 * is unusable, with the reason.
 */
#ifndef OTE_UCT_EXT_RDMA_H
#define OTE_UCT_EXT_RDMA_H

#include "base/config.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_RDMA_DEV_MAX    64  /* device name ("mlx5_0")       */
#define OTE_RDMA_PORT_MAX   72  /* port name ("mlx5_0:1")        */
#define OTE_RDMA_NDEV_MAX   16  /* netdev name (IFNAMSIZ)        */
#define OTE_RDMA_WHY_MAX    128

typedef enum {
    OTE_RDMA_LINK_IB,       /* "InfiniBand" */
    OTE_RDMA_LINK_ETHERNET, /* "Ethernet": RoCE */
    OTE_RDMA_LINK_UNKNOWN,
} ote_rdma_link_t;

typedef enum {
    OTE_RDMA_GID_IB,      /* "IB/RoCE v1" on an InfiniBand port */
    OTE_RDMA_GID_ROCE_V1, /* "IB/RoCE v1" on an Ethernet port   */
    OTE_RDMA_GID_ROCE_V2, /* "RoCE v2"                          */
    OTE_RDMA_GID_UNKNOWN, /* no type, or one not known here     */
} ote_rdma_gid_type_t;

/* Ports in sysfs state numbering (ib_port_state). */
enum { OTE_RDMA_PORT_ACTIVE = 4 };

typedef struct {
    unsigned            index;
    uint8_t             raw[16];
    ote_rdma_gid_type_t type;
    char                ndev[OTE_RDMA_NDEV_MAX]; /* "" when no netdev is behind it */
    /* Preference, higher first; 0: cannot be used. */
    int                 rank;
    /* Why it was not chosen; "" for the chosen GID. */
    char                why[OTE_RDMA_WHY_MAX];
} ote_rdma_gid_t;

typedef struct {
    char            name[OTE_RDMA_PORT_MAX]; /* "<dev>:<n>", as UCT names it */
    unsigned        num;
    ote_rdma_link_t link;
    int             state;          /* sysfs number, -1 if unreadable */
    char            state_name[24]; /* "ACTIVE", "DOWN", ...          */
    uint16_t        lid;            /* InfiniBand                     */
    unsigned        active_mtu;     /* bytes, from libibverbs; 0: unknown */
    ote_rdma_gid_t *gids;           /* non-zero entries, by index     */
    size_t          num_gids;
    int             gid;            /* index in gids[] chosen, -1: none */
    /* Why the port cannot be used; "" while it can. */
    char            unusable[OTE_RDMA_WHY_MAX];
} ote_rdma_port_t;

typedef struct {
    char             name[OTE_RDMA_DEV_MAX];
    ote_rdma_port_t *ports; /* by number */
    size_t           num_ports;
} ote_rdma_dev_t;

typedef struct ote_rdma {
    char            root[256];   /* the sysfs root read            */
    ote_rdma_dev_t *devs;        /* by name                        */
    size_t          num_devs;
    /* What libibverbs added, or why it was not asked (for ote_info). */
    char            verbs[OTE_RDMA_WHY_MAX];
} ote_rdma_t;

/*
 * OTE_RDMA_SYSFS_ROOT: where discovery reads devices from; OTE_RDMA_POLL_MS: how
 * often the engine reads them (and the network interfaces) again.
 */
typedef struct {
    char *sysfs_root;
    long  poll_ms;
} ote_rdma_config_t;

extern const ote_config_table_t ote_rdma_config_table;

/*
 * Read every RDMA device, port and GID under sysfs_root and choose a GID per
 * port. A root without class/infiniband has no devices (OTE_OK, empty
 * list); a root that is not a directory is OTE_ERR_INVALID_PARAM. Values
 * that do not parse make that GID or port unusable, with the reason.
 */
ote_status_t ote_rdma_discover(const char *sysfs_root, ote_rdma_t **rdma_p);
void         ote_rdma_free(ote_rdma_t *rdma);

/*
 * True when sysfs no longer shows what rdma holds: a device appeared or
 * went, or a port's state changed (only the state files are read; discover
 * again to know the rest).
 */
bool ote_rdma_changed(const ote_rdma_t *rdma);

/* The port named "<dev>:<n>", or NULL (also when rdma is NULL). */
const ote_rdma_port_t *ote_rdma_port_find(const ote_rdma_t *rdma, const char *name);
/* The chosen GID of a port, or NULL. */
const ote_rdma_gid_t  *ote_rdma_port_gid(const ote_rdma_port_t *port);

const char *ote_rdma_link_name(ote_rdma_link_t link);
const char *ote_rdma_gid_type_name(ote_rdma_gid_type_t type);
/* "RoCE v2 IPv4", "RoCE v2 IPv6", "RoCE v2 link-local", "RoCE v1", "IB". */
const char *ote_rdma_gid_class(const ote_rdma_gid_t *gid);
/* The GID as an address: "::ffff:10.0.0.1", "fe80::1". */
void        ote_rdma_gid_format(const ote_rdma_gid_t *gid, char *buf, size_t len);

/*
 * rdma_verbs.c: with libibverbs loadable and the root the real /sys, the
 * active MTU of each port; otherwise rdma->verbs says why it was not asked.
 */
void ote_rdma_verbs_query(ote_rdma_t *rdma);

#endif
