/*
 * src/core/meta/: metadata stores, where engines find each other's descriptors by name
 * when the metadata is not peer-to-peer.
 *
 * meta.c parses the URI, picks a backend (one ops table per store:
 * meta_etcd.c, meta_redis.c), owns the engine's key and the thread that
 * keeps it alive, and wraps descriptors in a record (meta_record.c) that
 * carries an HMAC under the cluster key when there is one. A store is a
 * place anybody with access may write: every byte read from it is checked
 * (record framing, version, lengths, MAC, then the descriptor decoder).
 *
 * May call: wire/ (the descriptor codec), base. Nothing else of core: the
 * engine hands the store what it publishes through callbacks
 * (ote_meta_params_t).
 */
#ifndef OTE_CORE_META_H
#define OTE_CORE_META_H

#include "base/auth.h"
#include "base/config.h"
#include "core/wire/desc.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_META_MAX_ENDPOINTS 16
#define OTE_META_KEY_MAX       1024
#define OTE_META_RECORD_MAX    (64u << 20) /* largest record accepted from a store */

/* A parsed metadata URI. */
typedef struct {
    char     scheme[8];                             /* "etcd" or "redis"            */
    size_t   num_endpoints;
    char     endpoints[OTE_META_MAX_ENDPOINTS][280]; /* host:port each              */
    char     password[256];                          /* redis://:password@...       */
    long     db;                                     /* redis://.../db, 0 by default */
} ote_meta_uri_t;

/*
 * Parse "etcd://h:p[,h:p...]", "redis://h:p", "redis://:password@h:p/db".
 * OTE_ERR_INVALID_PARAM with a log line saying what is wrong.
 */
ote_status_t ote_meta_uri_parse(const char *uri, ote_meta_uri_t *out);

/* One store client. Every call is bounded by the timeout given at open. */
typedef struct {
    const char *name; /* "etcd", "redis" */
    /* Connect and check access (password). STORE_UNAVAILABLE, AUTH. */
    ote_status_t (*open)(const ote_meta_uri_t *uri, long timeout_ms, void **ctx_p);
    void (*close)(void *ctx);
    /*
     * Put value under key if no key of that name exists, bound to this
     * client's lease (etcd; renewed by the claim) or with a TTL of ttl_s
     * (Redis): the key lives ttl_s from the claim on either way. EXISTS
     * when another value holds the key.
     */
    ote_status_t (*claim)(void *ctx, const char *key, const void *value, size_t len, long ttl_s);
    /*
     * Keep the claimed key alive for another ttl_s. NOT_FOUND when the key
     * or its lease is gone (expired, deleted, the store lost its data):
     * claim it again.
     */
    ote_status_t (*keepalive)(void *ctx, const char *key, long ttl_s);
    /* Replace the value of the key claimed before; NOT_FOUND if it is no longer ours. */
    ote_status_t (*update)(void *ctx, const char *key, const void *value, size_t len,
                           long ttl_s);
    /* Read a key. NOT_FOUND when absent. *value_p is malloc'ed. */
    ote_status_t (*get)(void *ctx, const char *key, uint8_t **value_p, size_t *len_p);
    /* Delete the key claimed before (only if still ours). */
    ote_status_t (*release)(void *ctx, const char *key);
    /*
     * Read a key with what tells this value from any later one: etcd's
     * mod_revision in *version_p; Redis has none (0), its value itself is
     * compared. NOT_FOUND when absent. *value_p is malloc'ed.
     */
    ote_status_t (*get_versioned)(void *ctx, const char *key, uint8_t **value_p,
                                  size_t *len_p, int64_t *version_p);
    /*
     * Take over a key another client holds: put value under it, bound to
     * this client's lease (etcd) or with a TTL of ttl_s (Redis), only if it
     * still holds exactly what get_versioned read (old, old_len, version),
     * in one atomic step (etcd: a txn comparing the key's mod_revision;
     * Redis: WATCH, GET, MULTI/SET/EXEC). EXISTS when the key changed or
     * went meanwhile: nothing was written. The key is this client's after OK.
     */
    ote_status_t (*replace)(void *ctx, const char *key, const void *old, size_t old_len,
                            int64_t version, const void *value, size_t len, long ttl_s);
} ote_meta_ops_t;

extern const ote_meta_ops_t ote_meta_etcd_ops;  /* NULL name where not built */
extern const ote_meta_ops_t ote_meta_redis_ops;

/* A store's ops table from its functions, each named <_store>_<op>. */
#define OTE_META_OPS(_store)                                                                   \
    {                                                                                          \
        .name = #_store, .open = _store##_open, .close = _store##_close,                       \
        .claim = _store##_claim, .keepalive = _store##_keepalive, .update = _store##_update,   \
        .get = _store##_get, .release = _store##_release,                                      \
        .get_versioned = _store##_get_versioned, .replace = _store##_replace,                  \
    }

/* ---- etcd gateway responses and base64 (meta_etcd.c; fuzzed) ------------ */

char        *ote_meta_base64_encode(const void *data, size_t len);
ote_status_t ote_meta_base64_decode(const char *s, size_t len, uint8_t **out_p, size_t *len_p);
/* range: the single kv's value and lease; NOT_FOUND when no kv. */
ote_status_t ote_meta_etcd_decode_range(const char *body, size_t len, uint8_t **val_p,
                                        size_t *vlen_p, int64_t *lease_p);
/* The same, and the kv's mod_revision (> 0). */
ote_status_t ote_meta_etcd_decode_range_rev(const char *body, size_t len, uint8_t **val_p,
                                            size_t *vlen_p, int64_t *lease_p, int64_t *rev_p);
/* lease grant / keepalive: ID and TTL; NOT_FOUND when the lease is gone. */
ote_status_t ote_meta_etcd_decode_lease(const char *body, size_t len, int64_t *id_p,
                                        int64_t *ttl_p);
/* txn: succeeded, and on failure the lease of the key the failure branch read. */
ote_status_t ote_meta_etcd_decode_txn(const char *body, size_t len, bool *succeeded_p,
                                      int64_t *lease_p);

/* ---- record: what the store holds under a name (meta_record.c) ---------- */

#define OTE_META_RECORD_MAGIC   0x4d45544fu /* "OTEM" */
#define OTE_META_RECORD_VERSION 1
#define OTE_META_RECORD_SIGNED  0x1u

/*
 * magic u32 | version u16 | flags u16 | desc_len u32 | desc bytes
 * | (flags & SIGNED) mac[32] = HMAC-SHA256(key, "OTE-META-1" | name_len u16
 *                                          | name | desc bytes)
 * The name is inside the MAC: a descriptor copied under another name fails.
 */
ote_status_t ote_meta_record_encode(const ote_auth_t *auth, const char *name, const void *desc,
                                    size_t desc_len, ote_buf_t *out);
/*
 * Check a record read under name: framing, version, lengths; with a key
 * in auth the MAC must be there and right (AUTH otherwise). *desc_p and
 * *desc_len_p point into buf. PROTOCOL for malformed bytes.
 */
ote_status_t ote_meta_record_check(const ote_auth_t *auth, const char *name, const uint8_t *buf,
                                   size_t len, const uint8_t **desc_p, size_t *desc_len_p);
/*
 * A record handed over as bytes (ote_engine_desc_export, not read under a
 * known name): framing checked, its descriptor decoded, then the MAC
 * checked under the name that descriptor carries (with a key in auth: AUTH
 * when unsigned or wrong). PROTOCOL for malformed bytes. On success
 * *desc_p is the caller's (ote_desc_free).
 */
ote_status_t ote_meta_record_open(const ote_auth_t *auth, const uint8_t *buf, size_t len,
                                  ote_desc_t **desc_p);

/* ---- the engine's view (meta.c) ----------------------------------------- */

typedef struct ote_meta ote_meta_t;

/* Encodes the engine's current descriptor (called from the keepalive thread too). */
typedef ote_status_t (*ote_meta_desc_cb_t)(void *arg, ote_buf_t *out);

/*
 * Whether the engine holder (the descriptor under the name this engine
 * claims) still serves the name, asked at its control address within
 * probe_ms: OTE_OK when it answered as that instance of that name;
 * OTE_ERR_NOT_FOUND only when it provably does not (the connection was
 * refused, nothing answered within probe_ms, or another instance or name
 * answered there); any other status when it cannot tell (authentication,
 * a malformed answer, an address that does not resolve).
 */
typedef ote_status_t (*ote_meta_holder_cb_t)(void *arg, const ote_desc_t *holder,
                                             long probe_ms);

typedef struct {
    const char         *uri;
    const char         *name;        /* the engine's name: the key is prefix + name */
    const char         *prefix;      /* OTE_METADATA_PREFIX */
    long                ttl_s;       /* OTE_METADATA_TTL_S */
    long                timeout_ms;  /* OTE_METADATA_TIMEOUT_MS */
    const ote_auth_t   *auth;        /* signs and checks records (key may be unset) */
    ote_meta_desc_cb_t  desc_cb;     /* NULL: a client that only reads */
    void               *desc_arg;
    /* NULL: a name held by another instance is EXISTS until its key expires. */
    ote_meta_holder_cb_t holder_cb;  /* called with desc_arg */
    long                probe_ms;    /* OTE_METADATA_PROBE_MS */
} ote_meta_params_t;

/*
 * The store's settings (OTE_METADATA_*): the key prefix, the lease, the
 * bound on a request, the bound on probing a name's holder.
 */
typedef struct {
    char *prefix;
    long  ttl_s;
    long  timeout_ms;
    long  probe_ms;
} ote_meta_config_t;

extern const ote_config_table_t ote_meta_config_table;

/*
 * Connect to the store; with desc_cb, claim the name and start the thread
 * that keeps the key alive and puts it again after the store lost it. A
 * name another instance holds is taken over at once when holder_cb proves
 * that instance no longer serves it (NOT_FOUND), with a compare-and-swap
 * on the record read (ops->replace): EXISTS while the holder answers, when
 * it cannot be told (its record unreadable, its answer unchecked), or when
 * another engine changed the record first.
 */
ote_status_t ote_meta_create(const ote_meta_params_t *params, ote_meta_t **meta_p);
/* Stop the thread, delete the key (bounded by the timeout), disconnect. */
void         ote_meta_destroy(ote_meta_t *meta);
/*
 * The descriptor changed (regions registered or removed): put it now if
 * the store answers, else the thread puts it when it does.
 */
void         ote_meta_changed(ote_meta_t *meta);
/* How many descriptors were sent to the store so far (claims and updates). */
unsigned long ote_meta_puts(ote_meta_t *meta);
/* Read and check the record under name, and decode its descriptor. */
ote_status_t ote_meta_lookup(ote_meta_t *meta, const char *name, ote_desc_t **desc_p);
/* Whether a name is acceptable as a key: 1..255 printable bytes, no space. */
ote_status_t ote_meta_name_check(const char *name);

#endif
