/*
 * Native tcp component: what its files share. tcp is one user of the stream
 * connection base (stream/stream.h): it adds network interfaces, its
 * address format (several IPv4/IPv6 addresses per iface), the choice of a
 * peer's address and the socket settings of OTE_TCP_*.
 */
#ifndef OTE_TCP_H
#define OTE_TCP_H

#include "uct_ext/stream/stream.h"

/* Addresses one tcp iface publishes, and one interface holds, at most. */
#define OTE_TCP_MAX_ADDRS OTE_STREAM_MAX_ADDRS

/* One address of a network interface, with its netmask. */
typedef struct {
    struct sockaddr_storage addr;
    struct sockaddr_storage mask;
} ote_tcp_ifaddr_t;

/*
 * A network interface that is up and running, named as the kernel (and
 * UCX) names it, with its IPv4 and IPv6 addresses; IPv6 link-local ones are
 * left out (they mean nothing without the interface's index on the peer).
 */
typedef struct {
    char             name[OTE_TL_DEV_MAX];
    bool             loopback;
    ote_tcp_ifaddr_t addrs[OTE_TCP_MAX_ADDRS];
    size_t           num_addrs;
} ote_tcp_netif_t;

/* The tcp iface: the stream iface, the addresses peers are given, and the interface served. */
typedef struct {
    ote_stream_iface_t    stream;
    ote_stream_sockaddr_t advertise[OTE_TCP_MAX_ADDRS];
    size_t                num_advertise;
    ote_tcp_netif_t       netif;
} ote_tcp_iface_t;

/* OTE_TCP_*: the settings of a tcp iface (ote_stream_config_t). */
extern const ote_config_table_t ote_tcp_config_table;

/* tcp_addr.c */
/*
 * Address blob: 1 to OTE_TCP_MAX_ADDRS entries back to back, each u8 family
 * (4 or 6), u16 port (network order), 4 or 16 address bytes.
 */
ote_status_t ote_tcp_addr_pack(const ote_stream_sockaddr_t *addrs, size_t count, void *buf,
                               size_t max, size_t *len_p);
ote_status_t ote_tcp_addr_unpack(const void *buf, size_t len, ote_stream_sockaddr_t *out,
                                 size_t max, size_t *count_p);

/* tcp_netif.c */
/* Interfaces up and running with at least one address; *list_p is freed by the caller. */
ote_status_t ote_tcp_netif_query(ote_tcp_netif_t **list_p, size_t *count_p);
/* The interface called name; OTE_ERR_NO_DEVICE if there is none. */
ote_status_t ote_tcp_netif_find(const char *name, ote_tcp_netif_t *netif_p);
/* sa is one of the interface's addresses (for loopback: inside its subnet). */
bool ote_tcp_netif_holds(const ote_tcp_netif_t *netif, const struct sockaddr *sa);
/* sa lies in the subnet of one of the interface's addresses. */
bool ote_tcp_netif_on_link(const ote_tcp_netif_t *netif, const struct sockaddr *sa);
/*
 * The kernel's route to sa leaves from one of the interface's addresses (it
 * picks that source address for sa); true where the route cannot be looked
 * up, so that connect() reports the error.
 */
bool ote_tcp_netif_routes(const ote_tcp_netif_t *netif, const struct sockaddr *sa,
                          socklen_t len);
/* 127.0.0.0/8, ::1 or an IPv4-mapped loopback address. */
bool ote_tcp_sockaddr_is_loopback(const struct sockaddr *sa);

#endif
