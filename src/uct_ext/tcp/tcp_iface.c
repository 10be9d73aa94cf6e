/*
 * Native tcp component: resources (one per network interface), the iface
 * (the stream base's, listening on the interface's addresses), its
 * settings (OTE_TCP_*) and the choice of a peer's address.
 */
#include "tcp.h"

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tcp_iface_query(ote_tl_iface_t *tl_iface, ote_tl_caps_t *caps)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    memset(caps, 0, sizeof(*caps));
    caps->ops        = OTE_TL_CAP_PUT_ZCOPY | OTE_TL_CAP_GET_ZCOPY | OTE_TL_CAP_CHECKED;
    caps->mem_local  = OTE_MEM_TYPE_HOST;
    caps->mem_remote = OTE_MEM_TYPE_HOST;
    /* A loopback interface reaches this host only. */
    caps->scope      = iface->netif.loopback ? OTE_TL_SCOPE_HOST
                                             : OTE_TL_SCOPE_HOST | OTE_TL_SCOPE_NETWORK;
    caps->max_iov    = 1;
    caps->max_msg    = iface->stream.cfg.max_msg;
    caps->align      = 1;
    caps->slice_size = 1u << 20;
    caps->bandwidth  = 1.25e9;
    caps->latency    = 20e-6;
    caps->conn_model = OTE_TL_CONN_TO_IFACE;
}

static ote_status_t tcp_iface_get_address(ote_tl_iface_t *tl_iface, void *buf, size_t max,
                                          size_t *len_p)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;

    return ote_tcp_addr_pack(iface->advertise, iface->num_advertise, buf, max, len_p);
}

static void tcp_iface_format_address(ote_tl_iface_t *tl_iface, char *buf, size_t len)
{
    ote_tcp_iface_t *iface = (ote_tcp_iface_t *)tl_iface;
    size_t off             = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < iface->num_advertise && off < len; i++) {
        char a[80];

        ote_sockaddr_format((struct sockaddr *)&iface->advertise[i].ss, a, sizeof(a));
        off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", a);
    }
}

static const ote_tl_iface_ops_t tcp_iface_ops = OTE_STREAM_IFACE_OPS_INIT(
    tcp_iface_query, tcp_iface_get_address, tcp_iface_format_address, ote_stream_iface_progress,
    ote_tl_unsupported_event_arm, ote_stream_iface_close);

#define TCP_F(_f) offsetof(ote_stream_config_t, _f)

static const ote_cfg_entry_t tcp_config_fields[] = {
    {"CONNS", "2", OTE_CFG_INT, TCP_F(conns),
     "TCP connections per peer; slices spread over them, small ones in runs of up to 512 KiB "
     "on one connection.",
     .min = 1, .max = 64},
    {"MAX_MSG", OTE_STREAM_MAX_MSG_DFLT, OTE_CFG_SIZE, TCP_F(max_msg),
     "Largest TCP data message; a peer announcing more is disconnected.",
     .min = OTE_STREAM_MAX_MSG_MIN, .max = OTE_STREAM_MAX_MSG_MAX},
    {"SNDBUF", "0", OTE_CFG_SIZE, TCP_F(sndbuf),
     "SO_SNDBUF for TCP data connections; 0 = kernel autotuning."},
    {"RCVBUF", "0", OTE_CFG_SIZE, TCP_F(rcvbuf),
     "SO_RCVBUF for TCP data connections; 0 = kernel autotuning."},
    {"NODELAY", "y", OTE_CFG_BOOL, TCP_F(nodelay),
     "Disable Nagle on TCP data connections."},
    {"VECTOR", "y", OTE_CFG_BOOL, TCP_F(vector),
     "Send WRITEs, and READs, of up to 64 KiB queued together on a connection as one "
     "vectored message (WRITEV, READV_REQ: one header and one answer for up to 64), where "
     "the peer takes them."},
};

OTE_CONFIG_TABLE_DEFINE(ote_tcp_config_table, "TCP_", "tcp", tcp_config_fields, ote_stream_config_t,
                        NULL);

/*
 * The peer's addresses this iface may connect to, best first: a loopback
 * address names the peer only from a loopback interface (on another host it
 * would be this host); addresses on the subnet of this iface's interface
 * come before those that need a router.
 */
static size_t tcp_addr_choose(const ote_stream_iface_t *stream, const ote_stream_sockaddr_t *in,
                              size_t n, ote_stream_sockaddr_t *out)
{
    const ote_tcp_iface_t *iface = (const ote_tcp_iface_t *)stream;
    size_t k                     = 0;

    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const struct sockaddr *sa = (const struct sockaddr *)&in[i].ss;
            bool ip = sa->sa_family == AF_INET || sa->sa_family == AF_INET6;

            if (ip && !iface->netif.loopback && ote_tcp_sockaddr_is_loopback(sa))
                continue;
            if ((pass == 0) != (!ip || ote_tcp_netif_on_link(&iface->netif, sa)))
                continue;
            out[k++] = in[i];
        }
    }
    return k;
}

/*
 * An address beyond this interface's subnets that the kernel reaches from
 * another interface's address would travel over that interface, not this
 * one: this rail does not reach it.
 */
static bool tcp_addr_reaches(const ote_stream_iface_t *stream, const struct sockaddr_storage *ss,
                             socklen_t sslen)
{
    const ote_tcp_iface_t *iface = (const ote_tcp_iface_t *)stream;

    return iface->netif.num_addrs == 0 || iface->netif.loopback || ss->ss_family == AF_UNIX ||
           ote_tcp_netif_on_link(&iface->netif, (const struct sockaddr *)ss) ||
           ote_tcp_netif_routes(&iface->netif, (const struct sockaddr *)ss, sslen);
}

/* tcp streams its bytes: nothing by reference, no descriptors. */
static const ote_stream_hooks_t tcp_hooks = {
    .addr_unpack  = ote_tcp_addr_unpack,
    .addr_choose  = tcp_addr_choose,
    .addr_reaches = tcp_addr_reaches,
};

static ote_status_t tcp_iface_open(const ote_tl_resource_t *res, ote_md_t *md,
                                   const ote_tl_iface_params_t *params,
                                   ote_tl_iface_t **iface_p)
{
    ote_tcp_iface_t *iface;
    struct sockaddr_storage ss;
    ote_stream_config_t cfg;
    socklen_t len;
    ote_status_t status;

    if (res->unusable != NULL)
        return OTE_ERR_UNSUPPORTED;
    status = ote_config_fill(&ote_tcp_config_table, &cfg);
    if (status != OTE_OK)
        return status;
    iface = calloc(1, sizeof(*iface));
    if (iface == NULL)
        return OTE_ERR_NO_MEMORY;
    status              = ote_stream_iface_init(&iface->stream, res, params, &cfg, &tcp_hooks);
    ote_config_release(&ote_tcp_config_table, &cfg);
    iface->stream.super.ops    = &tcp_iface_ops;
    iface->stream.super.ep_ops = &ote_stream_ep_ops;
    if (status != OTE_OK)
        goto err;

    status = ote_tcp_netif_find(res->dev_name, &iface->netif);
    if (status != OTE_OK) {
        ote_warn("tcp: interface %s is gone", res->dev_name);
        goto err;
    }
    status = ote_sockaddr_parse(params->bind_ip, &ss, &len);
    if (status != OTE_OK)
        goto err;
    ote_sockaddr_set_port((struct sockaddr *)&ss, 0);
    status = ote_socket_listen(&ss, len, &iface->stream.listen_fd);
    if (status != OTE_OK)
        goto err;
    if (getsockname(iface->stream.listen_fd, (struct sockaddr *)&ss, &len) != 0) {
        status = OTE_ERR_IO;
        goto err;
    }
    /*
     * Peers are told the interface's addresses with the port the kernel
     * chose: those the listener accepts on (IPv4 ones for 0.0.0.0, IPv6 ones
     * too for a dual-stack ::), or only the address it is bound to.
     */
    if (!ote_sockaddr_is_any((struct sockaddr *)&ss)) {
        iface->advertise[0].ss  = ss;
        iface->advertise[0].len = len;
        iface->num_advertise    = 1;
    } else {
        int v6only     = 0;
        socklen_t olen = sizeof(v6only);
        uint16_t port  = ote_sockaddr_port((struct sockaddr *)&ss);

        if (ss.ss_family == AF_INET6)
            getsockopt(iface->stream.listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &olen);
        for (size_t i = 0; i < iface->netif.num_addrs; i++) {
            ote_stream_sockaddr_t *a = &iface->advertise[iface->num_advertise];
            int family            = iface->netif.addrs[i].addr.ss_family;

            if ((ss.ss_family == AF_INET && family != AF_INET) ||
                (ss.ss_family == AF_INET6 && v6only && family != AF_INET6))
                continue;
            a->ss  = iface->netif.addrs[i].addr;
            a->len = family == AF_INET ? sizeof(struct sockaddr_in)
                                       : sizeof(struct sockaddr_in6);
            ote_sockaddr_set_port((struct sockaddr *)&a->ss, port);
            iface->num_advertise++;
        }
    }
    if (iface->num_advertise == 0) {
        status = OTE_ERR_UNSUPPORTED;
        goto err;
    }
    status = ote_stream_iface_epoll_init(&iface->stream);
    if (status != OTE_OK)
        goto err;
    *iface_p = &iface->stream.super;
    return OTE_OK;

err:
    ote_stream_iface_close(&iface->stream.super);
    return status;
}

/*
 * One device per network interface that is up and running. An engine
 * listening on one address can serve only the interface that holds it; one
 * listening on 0.0.0.0 only interfaces with an IPv4 address.
 */
static ote_status_t tcp_query_resources(ote_tl_component_t *comp,
                                        const ote_tl_iface_params_t *params,
                                        ote_tl_resource_t **res_p, size_t *count_p)
{
    struct sockaddr_storage bind;
    socklen_t blen;
    ote_tcp_netif_t *nifs;
    ote_tl_resource_t *r;
    size_t n;
    bool any;
    ote_status_t status;

    status = ote_sockaddr_parse(params->bind_ip, &bind, &blen);
    if (status != OTE_OK)
        return status;
    any    = ote_sockaddr_is_any((struct sockaddr *)&bind);
    status = ote_tcp_netif_query(&nifs, &n);
    if (status != OTE_OK)
        return status;
    r = calloc(n ? n : 1, sizeof(*r));
    if (r == NULL) {
        free(nifs);
        return OTE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        bool has_v4 = false;

        for (size_t k = 0; k < nifs[i].num_addrs; k++)
            has_v4 |= nifs[i].addrs[k].addr.ss_family == AF_INET;
        snprintf(r[i].tl_name, sizeof(r[i].tl_name), "tcp");
        snprintf(r[i].dev_name, sizeof(r[i].dev_name), "%s", nifs[i].name);
        r[i].is_network = true;
        r[i].component  = comp;
        if (!any && !ote_tcp_netif_holds(&nifs[i], (struct sockaddr *)&bind))
            r[i].unusable = "the engine listens on an address of another interface";
        else if (any && bind.ss_family == AF_INET && !has_v4)
            r[i].unusable = "no IPv4 address, and the engine listens on 0.0.0.0";
    }
    free(nifs);
    *res_p   = r;
    *count_p = n;
    return OTE_OK;
}

OTE_TL_COMPONENT_DEFINE(ote_tcp_component, "tcp", &ote_tcp_config_table, tcp_query_resources,
                        ote_tl_unsupported_md_open, ote_tl_no_md_close, tcp_iface_open,
                        ote_tl_no_reason);
