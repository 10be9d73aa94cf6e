/*
 * RDMA ports and the engine: OTE_NET_DEVICES against each port the
 * discovery found (uct_ext/rdma), and what ote_info -d says of them.
 */
#include "engine.h"
#include "base/log.h"

#include <stdio.h>
#include <string.h>

#define NO_TRANSPORT "no transport here runs on it (UCX offers no rc, dc or ud transport on it)"

/* The transports the engine opened on a port, "rc_mlx5, ud_verbs", or "". */
static void port_transports(ote_engine_h e, const ote_rdma_port_t *port, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t k = 0; k < e->num_tls; k++) {
        size_t n = strlen(buf);

        if (strcmp(e->tls[k].resource.dev_name, port->name) == 0)
            snprintf(buf + n, len - n, "%s%s", n ? ", " : "", e->tls[k].resource.tl_name);
    }
}

void ote_engine_rdma_select(ote_engine_h e, ote_select_t *sel)
{
    for (size_t d = 0; e->rdma != NULL && d < e->rdma->num_devs; d++) {
        const ote_rdma_dev_t *dev = &e->rdma->devs[d];

        for (size_t p = 0; p < dev->num_ports; p++) {
            const ote_rdma_port_t *port = &dev->ports[p];
            const ote_rdma_gid_t *gid   = ote_rdma_port_gid(port);
            char tls[256];

            /* Also makes the port a name OTE_NET_DEVICES may give. */
            if (!ote_select_device(sel, port->name))
                continue;
            port_transports(e, port, tls, sizeof(tls));
            if (port->unusable[0] != '\0') {
                ote_info("rdma %s: not used: %s", port->name, port->unusable);
                ote_select_device_result(sel, port->name, port->unusable);
            } else if (tls[0] == '\0') {
                ote_info("rdma %s: not used: %s", port->name, NO_TRANSPORT);
                ote_select_device_result(sel, port->name, NO_TRANSPORT);
            } else {
                ote_info("rdma %s: %s over GID index %u (%s)", port->name, tls, gid->index,
                         ote_rdma_gid_class(gid));
                ote_select_device_result(sel, port->name, NULL);
            }
        }
    }
}

static void print_port(FILE *f, ote_engine_h e, ote_select_t *sel, const ote_rdma_port_t *port)
{
    const ote_rdma_gid_t *gid = ote_rdma_port_gid(port);
    bool selected             = sel == NULL || ote_select_device(sel, port->name);
    const char *why           = !selected              ? "not in OTE_NET_DEVICES"
                                : port->unusable[0] != '\0' ? port->unusable
                                                           : NULL;
    char lid[24] = "", mtu[32] = "", tls[256], addr[64];

    if (port->link == OTE_RDMA_LINK_IB)
        snprintf(lid, sizeof(lid), ", LID 0x%x", port->lid);
    if (port->active_mtu != 0)
        snprintf(mtu, sizeof(mtu), ", active MTU %u", port->active_mtu);
    port_transports(e, port, tls, sizeof(tls));
    fprintf(f, "#     port %-10s %s, %s%s%s, selected: %s%s%s%s\n", port->name,
            ote_rdma_link_name(port->link), port->state_name, lid, mtu, why ? "no" : "yes",
            why ? " (" : "", why ? why : "", why ? ")" : "");
    if (gid != NULL) {
        ote_rdma_gid_format(gid, addr, sizeof(addr));
        fprintf(f, "#       GID index %u %s %s%s%s: %s\n", gid->index, ote_rdma_gid_class(gid),
                addr, gid->ndev[0] ? " netdev " : "", gid->ndev,
                port->unusable[0] ? "first choice once the port is usable" : "chosen");
    } else {
        fprintf(f, "#       GID: none usable\n");
    }
    for (size_t i = 0; i < port->num_gids; i++) {
        const ote_rdma_gid_t *g = &port->gids[i];

        if (g == gid)
            continue;
        ote_rdma_gid_format(g, addr, sizeof(addr));
        fprintf(f, "#       GID index %u %s %s%s%s: not chosen: %s\n", g->index,
                ote_rdma_gid_class(g), addr, g->ndev[0] ? " netdev " : "", g->ndev, g->why);
    }
    fprintf(f, "#       transports: %s\n", tls[0] ? tls : "none (UCX offers no rc, dc or ud "
                                                         "transport on it here)");
}

void ote_engine_rdma_print(ote_engine_h e, ote_select_t *sel, FILE *f)
{
    const ote_rdma_t *rdma = e->rdma;

    if (rdma == NULL)
        return;
    fprintf(f, "#\n# RDMA devices (sysfs %s/class/infiniband%s%s)\n", rdma->root,
            rdma->verbs[0] ? "; " : "", rdma->verbs);
    if (rdma->num_devs == 0)
        fprintf(f, "#   none\n");
    for (size_t d = 0; d < rdma->num_devs; d++) {
        fprintf(f, "#   device %s: %zu port(s)\n", rdma->devs[d].name, rdma->devs[d].num_ports);
        for (size_t p = 0; p < rdma->devs[d].num_ports; p++)
            print_port(f, e, sel, &rdma->devs[d].ports[p]);
    }
}
