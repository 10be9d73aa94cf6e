/* The record a metadata store holds under an engine's name (see meta.h). */
#include "meta.h"

#include "base/log.h"
#include "base/wire_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_MAC_LABEL     "OTE-META-1"
#define META_MAC_LABEL_LEN (sizeof(META_MAC_LABEL) - 1)
#define META_RECORD_HDR    12

/* HMAC over label | name_len | name | desc. */
static ote_status_t record_mac(const ote_auth_t *auth, const char *name, const uint8_t *desc,
                               size_t desc_len, uint8_t *mac)
{
    size_t name_len = strlen(name), len = META_MAC_LABEL_LEN + 2 + name_len + desc_len;
    uint8_t *msg    = malloc(len);
    ote_status_t status;

    if (msg == NULL)
        return OTE_ERR_NO_MEMORY;
    memcpy(msg, META_MAC_LABEL, META_MAC_LABEL_LEN);
    ote_put_u16(msg + META_MAC_LABEL_LEN, (uint16_t)name_len);
    memcpy(msg + META_MAC_LABEL_LEN + 2, name, name_len);
    memcpy(msg + META_MAC_LABEL_LEN + 2 + name_len, desc, desc_len);
    status = ote_auth_hmac(auth, msg, len, mac);
    free(msg);
    return status;
}

ote_status_t ote_meta_record_encode(const ote_auth_t *auth, const char *name, const void *desc,
                                    size_t desc_len, ote_buf_t *out)
{
    bool sign = auth != NULL && auth->enabled;
    uint8_t mac[OTE_AUTH_MAC_LEN];
    ote_status_t status;

    if (strlen(name) > OTE_DESC_NAME_MAX || desc_len > OTE_META_RECORD_MAX)
        return OTE_ERR_INVALID_PARAM;
    ote_buf_put_u32(out, OTE_META_RECORD_MAGIC);
    ote_buf_put_u16(out, OTE_META_RECORD_VERSION);
    ote_buf_put_u16(out, sign ? OTE_META_RECORD_SIGNED : 0);
    ote_buf_put_u32(out, (uint32_t)desc_len);
    ote_buf_put(out, desc, desc_len);
    if (sign) {
        status = record_mac(auth, name, desc, desc_len, mac);
        if (status != OTE_OK)
            return status;
        ote_buf_put(out, mac, sizeof(mac));
    }
    return ote_buf_status(out);
}

ote_status_t ote_meta_record_check(const ote_auth_t *auth, const char *name, const uint8_t *buf,
                                   size_t len, const uint8_t **desc_p, size_t *desc_len_p)
{
    bool keyed = auth != NULL && auth->enabled;
    uint8_t mac[OTE_AUTH_MAC_LEN];
    uint32_t desc_len;
    uint16_t flags;
    ote_status_t status;

    if (buf == NULL || len < META_RECORD_HDR || len > OTE_META_RECORD_MAX + META_RECORD_HDR +
                                                          OTE_AUTH_MAC_LEN ||
        ote_get_u32(buf) != OTE_META_RECORD_MAGIC || ote_get_u16(buf + 4) != OTE_META_RECORD_VERSION)
        return OTE_ERR_PROTOCOL;
    flags    = ote_get_u16(buf + 6);
    desc_len = ote_get_u32(buf + 8);
    if ((flags & ~OTE_META_RECORD_SIGNED) != 0 || desc_len > len - META_RECORD_HDR ||
        len - META_RECORD_HDR - desc_len !=
            ((flags & OTE_META_RECORD_SIGNED) ? OTE_AUTH_MAC_LEN : 0))
        return OTE_ERR_PROTOCOL;
    if (keyed) {
        if (!(flags & OTE_META_RECORD_SIGNED)) {
            ote_error("metadata record '%s' is not signed, and OTE_AUTH_KEY is set: refused",
                      name);
            return OTE_ERR_AUTH;
        }
        status = record_mac(auth, name, buf + META_RECORD_HDR, desc_len, mac);
        if (status != OTE_OK)
            return status;
        if (!ote_auth_mac_equal(mac, buf + META_RECORD_HDR + desc_len)) {
            ote_error("metadata record '%s': its signature does not match OTE_AUTH_KEY "
                      "(altered, or written with another key): refused", name);
            return OTE_ERR_AUTH;
        }
    }
    *desc_p     = buf + META_RECORD_HDR;
    *desc_len_p = desc_len;
    return OTE_OK;
}

ote_status_t ote_meta_record_open(const ote_auth_t *auth, const uint8_t *buf, size_t len,
                                  ote_desc_t **desc_p)
{
    const uint8_t *dbytes;
    size_t dlen;
    ote_desc_t *d = NULL;
    ote_status_t status;

    /* The MAC covers the name, which only the descriptor carries: framing, decode, then MAC. */
    status = ote_meta_record_check(NULL, "", buf, len, &dbytes, &dlen);
    if (status == OTE_OK)
        status = ote_desc_decode(dbytes, dlen, &d);
    if (status == OTE_OK)
        status = ote_meta_record_check(auth, d->name, buf, len, &dbytes, &dlen);
    if (status != OTE_OK) {
        ote_desc_free(d);
        return status;
    }
    *desc_p = d;
    return OTE_OK;
}
