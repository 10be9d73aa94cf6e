/* Native tcp component: its address blob (the addresses an iface publishes). */
#include "tcp.h"

#include "base/util.h"

#include <arpa/inet.h>
#include <string.h>

ote_status_t ote_tcp_addr_pack(const ote_stream_sockaddr_t *addrs, size_t count, void *buf,
                               size_t max, size_t *len_p)
{
    uint8_t *b = buf;
    size_t off = 0;

    if (count == 0 || count > OTE_TCP_MAX_ADDRS)
        return OTE_ERR_INVALID_PARAM;
    for (size_t i = 0; i < count; i++) {
        const struct sockaddr_storage *ss = &addrs[i].ss;

        const struct sockaddr_in *in   = (const struct sockaddr_in *)ss;
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
        /* An entry: 4 or 6, the port, the address (network order). */
        const void *port, *ip;
        size_t ip_len;

        if (ss->ss_family == AF_INET)
            port = &in->sin_port, ip = &in->sin_addr, ip_len = 4;
        else if (ss->ss_family == AF_INET6)
            port = &in6->sin6_port, ip = &in6->sin6_addr, ip_len = 16;
        else
            return OTE_ERR_INVALID_PARAM;
        if (max - off < 3 + ip_len)
            return OTE_ERR_INVALID_PARAM;
        b[off] = ip_len == 4 ? 4 : 6;
        memcpy(b + off + 1, port, 2);
        memcpy(b + off + 3, ip, ip_len);
        off += 3 + ip_len;
    }
    *len_p = off;
    return OTE_OK;
}

ote_status_t ote_tcp_addr_unpack(const void *buf, size_t len, ote_stream_sockaddr_t *out,
                                 size_t max, size_t *count_p)
{
    const uint8_t *b = buf;
    size_t off = 0, n = 0;

    if (buf == NULL || len == 0)
        return OTE_ERR_PROTOCOL;
    while (off < len) {
        struct sockaddr_storage *ss;
        struct sockaddr_in *in;
        struct sockaddr_in6 *in6;
        void *port, *ip;
        size_t ip_len;

        if (n == max || n == OTE_TCP_MAX_ADDRS)
            return OTE_ERR_PROTOCOL;
        ss = &out[n].ss;
        memset(ss, 0, sizeof(*ss));
        in  = (struct sockaddr_in *)ss;
        in6 = (struct sockaddr_in6 *)ss;
        if (b[off] == 4) {
            in->sin_family = AF_INET;
            port = &in->sin_port, ip = &in->sin_addr, ip_len = 4, out[n].len = sizeof(*in);
        } else if (b[off] == 6) {
            in6->sin6_family = AF_INET6;
            port = &in6->sin6_port, ip = &in6->sin6_addr, ip_len = 16, out[n].len = sizeof(*in6);
        } else {
            return OTE_ERR_PROTOCOL;
        }
        if (len - off < 3 + ip_len)
            return OTE_ERR_PROTOCOL;
        memcpy(port, b + off + 1, 2);
        memcpy(ip, b + off + 3, ip_len);
        off += 3 + ip_len;
        if (ote_sockaddr_port((struct sockaddr *)ss) == 0)
            return OTE_ERR_PROTOCOL;
        n++;
    }
    *count_p = n;
    return OTE_OK;
}
