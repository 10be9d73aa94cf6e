/*
 * RDMA ports and the engine: OTE_NET_DEVICES against each port the
 * discovery found (uct_ext/rdma), their state read again while the engine
 * runs (a port down pauses its rails), and what ote_info -d says of them.
 */
#include "base/log.h"
#include "base/util.h"
#include "core/engine_int.h"
#include "core/segment/segment.h"
#include "uct_ext/rdma/rdma.h"
#include "core/worker/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The ports' monitor: what sysfs showed last, and its thread. */
struct ote_engine_rdma_mon {
    pthread_mutex_t lock;      /* now, stop */
    pthread_cond_t  cond;      /* CLOCK_MONOTONIC: stop */
    pthread_mutex_t poll_lock; /* one round at a time */
    ote_rdma_t     *now;       /* the last discovery after e->rdma; NULL: none since */
    long            poll_ms;
    bool            stop;
    bool            started;
    pthread_t       thread;
};

#define NO_TRANSPORT "no transport here runs on it (UCX offers no rc, dc or ud transport on it)"

/* The transports the engine opened on a port, "rc_mlx5, ud_verbs", or "". */
static void port_transports(ote_engine_h e, const ote_rdma_port_t *port, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t k = 0; k < e->facts.num_tls; k++) {
        size_t n = strlen(buf);

        if (strcmp(e->facts.tls[k].resource.dev_name, port->name) == 0)
            snprintf(buf + n, len - n, "%s%s", n ? ", " : "", e->facts.tls[k].resource.tl_name);
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
    struct ote_engine_rdma_mon *m = e->rdma_mon;
    const ote_rdma_t *rdma;

    if (m != NULL)
        pthread_mutex_lock(&m->lock);
    rdma = m != NULL && m->now != NULL ? m->now : e->rdma;
    if (rdma == NULL) {
        if (m != NULL)
            pthread_mutex_unlock(&m->lock);
        return;
    }
    fprintf(f, "#\n# RDMA devices (sysfs %s/class/infiniband%s%s)\n", rdma->root,
            rdma->verbs[0] ? "; " : "", rdma->verbs);
    if (rdma->num_devs == 0)
        fprintf(f, "#   none\n");
    for (size_t d = 0; d < rdma->num_devs; d++) {
        fprintf(f, "#   device %s: %zu port(s)\n", rdma->devs[d].name, rdma->devs[d].num_ports);
        for (size_t p = 0; p < rdma->devs[d].num_ports; p++)
            print_port(f, e, sel, &rdma->devs[d].ports[p]);
    }
    if (m != NULL)
        pthread_mutex_unlock(&m->lock);
}

bool ote_engine_rdma_port_is_down(ote_engine_h e, const char *dev)
{
    struct ote_engine_rdma_mon *m = e->rdma_mon;
    const ote_rdma_port_t *port;
    bool down;

    if (m == NULL)
        return false;
    pthread_mutex_lock(&m->lock);
    port = ote_rdma_port_find(m->now != NULL ? m->now : e->rdma, dev);
    down = port != NULL && port->state != OTE_RDMA_PORT_ACTIVE;
    pthread_mutex_unlock(&m->lock);
    return down;
}


void ote_engine_rdma_port_event(ote_engine_h e, const char *dev, bool up)
{
    ote_segments_link(e, dev, up);
}

/* A port's change between two discoveries: log it, and act on its rails. */
static void port_changed(ote_engine_h e, const ote_rdma_port_t *was, const ote_rdma_port_t *is)
{
    bool was_up = was != NULL && was->state == OTE_RDMA_PORT_ACTIVE;
    bool is_up  = is != NULL && is->state == OTE_RDMA_PORT_ACTIVE;
    char tls[256];

    if (is == NULL && was != NULL) {
        ote_info("rdma %s: gone", was->name);
    } else if (is == NULL) {
        return;
    } else if (was == NULL) {
        port_transports(e, is, tls, sizeof(tls));
        ote_info("rdma %s: new port, %s%s%s%s", is->name, is->state_name,
                 is->unusable[0] ? " (" : "", is->unusable, is->unusable[0] ? ")" : "");
    } else if (was_up != is_up) {
        ote_info("rdma %s: port %s", is->name, is->state_name);
    }
    if (was_up == is_up)
        return;
    port_transports(e, is != NULL ? is : was, tls, sizeof(tls));
    if (tls[0] != '\0')
        ote_engine_rdma_port_event(e, is != NULL ? is->name : was->name, is_up);
    else if (is_up)
        ote_info("rdma %s: usable now, but no transport opened on it: %s", is->name,
                 NO_TRANSPORT);
}

void ote_engine_rdma_poll(ote_engine_h e)
{
    struct ote_engine_rdma_mon *m = e->rdma_mon;
    const ote_rdma_t *prev;
    ote_rdma_t *now = NULL, *old;

    if (m == NULL)
        return;
    pthread_mutex_lock(&m->poll_lock);
    prev = m->now != NULL ? m->now : e->rdma; /* only this function writes m->now */
    if (!ote_rdma_changed(prev) || ote_rdma_discover(prev->root, &now) != OTE_OK) {
        /* The network interfaces may have changed all the same. */
        ote_engine_join_round(e, prev, false);
        pthread_mutex_unlock(&m->poll_lock);
        return;
    }
    /* Transports open on the ports usable now before their changes are told. */
    ote_engine_join_round(e, now, true);
    for (size_t d = 0; d < now->num_devs; d++) {
        for (size_t p = 0; p < now->devs[d].num_ports; p++) {
            const ote_rdma_port_t *is  = &now->devs[d].ports[p];
            const ote_rdma_port_t *was = ote_rdma_port_find(prev, is->name);

            if (was == NULL || (was->state == OTE_RDMA_PORT_ACTIVE) !=
                                   (is->state == OTE_RDMA_PORT_ACTIVE))
                port_changed(e, was, is);
        }
    }
    for (size_t d = 0; d < prev->num_devs; d++) {
        for (size_t p = 0; p < prev->devs[d].num_ports; p++) {
            if (ote_rdma_port_find(now, prev->devs[d].ports[p].name) == NULL)
                port_changed(e, &prev->devs[d].ports[p], NULL);
        }
    }
    pthread_mutex_lock(&m->lock);
    old    = m->now;
    m->now = now;
    pthread_mutex_unlock(&m->lock);
    ote_rdma_free(old);
    pthread_mutex_unlock(&m->poll_lock);
}

static void *monitor_main(void *arg)
{
    ote_engine_h e                = arg;
    struct ote_engine_rdma_mon *m = e->rdma_mon;

    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        struct timespec ts = ote_clock_after(CLOCK_MONOTONIC, (uint64_t)m->poll_ms * 1000000ull);

        while (!m->stop && pthread_cond_timedwait(&m->cond, &m->lock, &ts) == 0)
            ;
        if (m->stop)
            break;
        pthread_mutex_unlock(&m->lock);
        ote_engine_rdma_poll(e);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

ote_status_t ote_engine_rdma_monitor_start(ote_engine_h e)
{
    struct ote_engine_rdma_mon *m;
    ote_rdma_config_t cfg;
    ote_status_t status;

    if (e->rdma == NULL)
        return OTE_OK;
    status = ote_config_fill(&ote_rdma_config_table, &cfg);
    if (status != OTE_OK)
        return status;
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        ote_config_release(&ote_rdma_config_table, &cfg);
        return OTE_ERR_NO_MEMORY;
    }
    m->poll_ms = cfg.poll_ms;
    ote_config_release(&ote_rdma_config_table, &cfg);
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->poll_lock, NULL);
    ote_cond_init_monotonic(&m->cond);
    e->rdma_mon = m;
    if (m->poll_ms > 0) {
        if (pthread_create(&m->thread, NULL, monitor_main, e) != 0) {
            ote_warn("rdma: no thread to read the ports again; their state is the one at start");
            return OTE_OK;
        }
        m->started = true;
    }
    return OTE_OK;
}

void ote_engine_rdma_monitor_stop(ote_engine_h e)
{
    struct ote_engine_rdma_mon *m = e->rdma_mon;

    if (m == NULL)
        return;
    ote_cond_stop(&m->lock, &m->cond, &m->stop);
    if (m->started)
        pthread_join(m->thread, NULL);
    e->rdma_mon = NULL;
    ote_rdma_free(m->now);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->poll_lock);
    pthread_cond_destroy(&m->cond);
    free(m);
}
