/*
 * Network interfaces for the native tcp component: one device per interface
 * that is up and running, named as the kernel names it ("eth0", "lo"), as
 * UCX's tcp transport does.
 */
#include "tcp.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static bool addr_usable(const struct sockaddr *sa)
{
    if (sa == NULL)
        return false;
    if (sa->sa_family == AF_INET)
        return true;
    if (sa->sa_family == AF_INET6)
        return !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

static size_t addr_size(int family)
{
    return family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

ote_status_t ote_tcp_netif_query(ote_tcp_netif_t **list_p, size_t *count_p)
{
    struct ifaddrs *ifa, *i;
    ote_tcp_netif_t *list = NULL;
    size_t n = 0, cap = 0;

    if (getifaddrs(&ifa) != 0)
        return OTE_ERR_IO;
    for (i = ifa; i != NULL; i = i->ifa_next) {
        ote_tcp_netif_t *nif = NULL;
        ote_tcp_ifaddr_t *a;

        if ((i->ifa_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING) ||
            !addr_usable(i->ifa_addr) || strlen(i->ifa_name) >= OTE_TL_DEV_MAX)
            continue;
        for (size_t k = 0; k < n; k++) {
            if (strcmp(list[k].name, i->ifa_name) == 0)
                nif = &list[k];
        }
        if (nif == NULL) {
            if (n == cap) {
                ote_tcp_netif_t *bigger = realloc(list, (cap ? cap * 2 : 8) * sizeof(*list));

                if (bigger == NULL) {
                    free(list);
                    freeifaddrs(ifa);
                    return OTE_ERR_NO_MEMORY;
                }
                list = bigger;
                cap  = cap ? cap * 2 : 8;
            }
            nif = &list[n++];
            memset(nif, 0, sizeof(*nif));
            snprintf(nif->name, sizeof(nif->name), "%s", i->ifa_name);
            nif->loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
        }
        if (nif->num_addrs == OTE_TCP_MAX_ADDRS)
            continue;
        a = &nif->addrs[nif->num_addrs++];
        memset(a, 0, sizeof(*a));
        memcpy(&a->addr, i->ifa_addr, addr_size(i->ifa_addr->sa_family));
        if (i->ifa_netmask != NULL)
            memcpy(&a->mask, i->ifa_netmask, addr_size(i->ifa_addr->sa_family));
        a->mask.ss_family = i->ifa_addr->sa_family;
    }
    freeifaddrs(ifa);
    *list_p  = list;
    *count_p = n;
    return OTE_OK;
}

ote_status_t ote_tcp_netif_find(const char *name, ote_tcp_netif_t *netif_p)
{
    ote_tcp_netif_t *list;
    size_t n;
    ote_status_t status = ote_tcp_netif_query(&list, &n);

    if (status != OTE_OK)
        return status;
    status = OTE_ERR_NO_DEVICE;
    for (size_t k = 0; k < n; k++) {
        if (strcmp(list[k].name, name) == 0) {
            *netif_p = list[k];
            status   = OTE_OK;
            break;
        }
    }
    free(list);
    return status;
}

/* Address bytes of an IPv4 or IPv6 socket address; IPv4-mapped IPv6 as IPv4. */
static const uint8_t *addr_bytes(const struct sockaddr *sa, size_t *len_p)
{
    if (sa->sa_family == AF_INET) {
        *len_p = 4;
        return (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

        if (IN6_IS_ADDR_V4MAPPED(a)) {
            *len_p = 4;
            return a->s6_addr + 12;
        }
        *len_p = 16;
        return a->s6_addr;
    }
    *len_p = 0;
    return NULL;
}

static bool same_subnet(const ote_tcp_ifaddr_t *ia, const struct sockaddr *sa)
{
    size_t la, lm, lb;
    const uint8_t *a = addr_bytes((const struct sockaddr *)&ia->addr, &la);
    const uint8_t *m = addr_bytes((const struct sockaddr *)&ia->mask, &lm);
    const uint8_t *b = addr_bytes(sa, &lb);

    if (a == NULL || b == NULL || la != lb || lm != la)
        return false;
    for (size_t k = 0; k < la; k++) {
        if ((a[k] & m[k]) != (b[k] & m[k]))
            return false;
    }
    return true;
}

static bool same_addr(const ote_tcp_ifaddr_t *ia, const struct sockaddr *sa)
{
    size_t la, lb;
    const uint8_t *a = addr_bytes((const struct sockaddr *)&ia->addr, &la);
    const uint8_t *b = addr_bytes(sa, &lb);

    return a != NULL && b != NULL && la == lb && memcmp(a, b, la) == 0;
}

bool ote_tcp_netif_holds(const ote_tcp_netif_t *netif, const struct sockaddr *sa)
{
    for (size_t k = 0; k < netif->num_addrs; k++) {
        if (same_addr(&netif->addrs[k], sa) ||
            (netif->loopback && same_subnet(&netif->addrs[k], sa)))
            return true;
    }
    return false;
}

bool ote_tcp_netif_on_link(const ote_tcp_netif_t *netif, const struct sockaddr *sa)
{
    for (size_t k = 0; k < netif->num_addrs; k++) {
        if (same_subnet(&netif->addrs[k], sa))
            return true;
    }
    return false;
}

bool ote_tcp_netif_routes(const ote_tcp_netif_t *netif, const struct sockaddr *sa,
                          socklen_t len)
{
    struct sockaddr_storage src;
    socklen_t slen = sizeof(src);
    /* A connected datagram socket looks the route up and sends nothing. */
    int fd    = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool ours = true;

    if (fd < 0)
        return true;
    if (connect(fd, sa, len) == 0 && getsockname(fd, (struct sockaddr *)&src, &slen) == 0)
        ours = ote_tcp_netif_holds(netif, (const struct sockaddr *)&src);
    close(fd);
    return ours;
}

bool ote_tcp_sockaddr_is_loopback(const struct sockaddr *sa)
{
    size_t len;
    const uint8_t *b = addr_bytes(sa, &len);

    if (len == 4)
        return b[0] == 127;
    return len == 16 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}
