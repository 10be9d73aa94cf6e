/*
 * Metadata stores, the engine's side: URI parsing, the backend's ops
 * table, the engine's key and the thread that keeps it alive.
 *
 * The thread wakes every ttl/3 (every 500 ms at most while the store does
 * not answer) and keeps the key alive; when the store lost it (the lease
 * expired during an outage, the store restarted empty) it claims the name
 * again with the current descriptor. One log line when the store goes
 * away, one when the key is back.
 */
#include "meta.h"

#include "base/log.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ote_meta {
    const ote_meta_ops_t *ops;
    void                 *ctx;
    ote_meta_params_t     params;
    char                  uri[512];
    char                  name[OTE_DESC_NAME_MAX + 1];
    char                  prefix[OTE_META_KEY_MAX];
    char                  key[OTE_META_KEY_MAX + OTE_DESC_NAME_MAX + 1];
    /*
     * Lookups' own client where the engine keeps a key (else ctx): a store
     * that stopped answering holds a keepalive request up to the timeout,
     * and an open must not wait for it on top of its own.
     */
    void                 *read_ctx;
    pthread_mutex_t       read_lock; /* read_ctx, or ctx where that is NULL */
    pthread_mutex_t       lock;      /* ctx (the key's client), and the fields below */
    pthread_cond_t        cond;      /* CLOCK_MONOTONIC */
    pthread_t             thread;
    bool                  started;
    bool                  stop;
    bool                  claimed;   /* our key is in the store, as far as we know */
    /* ote_meta_changed reads healthy and sets dirty without the lock. */
    atomic_bool           healthy;   /* the last store call answered */
    atomic_bool           dirty;     /* the descriptor changed since it was put */
    bool                  taken;     /* another engine took the name (said once) */
    bool                  said_held; /* why the name is not ours was logged */
    bool                  wake;      /* the thread has work before its period ends */
    ote_status_t          refused;   /* the store's last refusal of our descriptor (said once) */
    unsigned long         puts;      /* descriptors sent to the store (claim or update) */
};

ote_status_t ote_meta_name_check(const char *name)
{
    size_t len = strlen(name);

    if (len == 0 || len > OTE_DESC_NAME_MAX) {
        ote_error("engine name '%.40s%s' must be 1 to %d bytes", name, len > 40 ? "..." : "",
                  OTE_DESC_NAME_MAX);
        return OTE_ERR_INVALID_PARAM;
    }
    for (size_t i = 0; i < len; i++) {
        if (!isgraph((unsigned char)name[i])) {
            ote_error("engine name '%s': byte %zu is a space or not printable; names in a "
                      "metadata store are printable characters without spaces", name, i);
            return OTE_ERR_INVALID_PARAM;
        }
    }
    return OTE_OK;
}

/* host:port with a port 1..65535, IPv6 in brackets. */
static bool endpoint_ok(const char *ep)
{
    const char *colon = strrchr(ep, ':');
    char *end;
    long port;

    if (colon == NULL || colon == ep)
        return false;
    if (ep[0] == '[' && colon[-1] != ']')
        return false;
    for (const char *p = ep; p < colon; p++) {
        if (!isgraph((unsigned char)*p) || *p == '/' || *p == '@' || *p == ',')
            return false;
    }
    errno = 0;
    port  = strtol(colon + 1, &end, 10);
    return errno == 0 && end != colon + 1 && *end == '\0' && port > 0 && port < 65536;
}

ote_status_t ote_meta_uri_parse(const char *uri, ote_meta_uri_t *out)
{
    const char *rest, *at, *slash;
    char hosts[OTE_META_MAX_ENDPOINTS * 280];
    char *save = NULL, *tok;

    memset(out, 0, sizeof(*out));
    if (strncmp(uri, "etcd://", 7) == 0) {
        snprintf(out->scheme, sizeof(out->scheme), "etcd");
        rest = uri + 7;
    } else if (strncmp(uri, "redis://", 8) == 0) {
        snprintf(out->scheme, sizeof(out->scheme), "redis");
        rest = uri + 8;
    } else {
        ote_error("metadata '%s': not p2p, etcd://host:port[,host:port...] or "
                  "redis://[:password@]host:port[/db]", uri);
        return OTE_ERR_INVALID_PARAM;
    }
    at = strrchr(rest, '@');
    if (at != NULL) {
        if (strcmp(out->scheme, "redis") != 0 || rest[0] != ':' || at == rest + 1 ||
            (size_t)(at - rest - 1) >= sizeof(out->password)) {
            ote_error("metadata '%s': a password is written redis://:password@host:port "
                      "(etcd:// takes none)", uri);
            return OTE_ERR_INVALID_PARAM;
        }
        memcpy(out->password, rest + 1, (size_t)(at - rest - 1));
        rest = at + 1;
    }
    slash = strchr(rest, '/');
    if (slash != NULL) {
        char *end;

        errno   = 0;
        out->db = strtol(slash + 1, &end, 10);
        if (strcmp(out->scheme, "redis") != 0 || errno != 0 || end == slash + 1 ||
            *end != '\0' || out->db < 0 || out->db > 65535) {
            ote_error("metadata '%s': only redis:// takes a database, as /N", uri);
            return OTE_ERR_INVALID_PARAM;
        }
    }
    if ((slash ? (size_t)(slash - rest) : strlen(rest)) >= sizeof(hosts)) {
        ote_error("metadata '%s': too long", uri);
        return OTE_ERR_INVALID_PARAM;
    }
    snprintf(hosts, sizeof(hosts), "%.*s", (int)(slash ? (size_t)(slash - rest) : strlen(rest)),
             rest);
    for (tok = strtok_r(hosts, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (out->num_endpoints == OTE_META_MAX_ENDPOINTS || strlen(tok) >= 280 ||
            !endpoint_ok(tok)) {
            ote_error("metadata '%s': '%s' is not host:port (or more than %d endpoints)", uri,
                      tok, OTE_META_MAX_ENDPOINTS);
            return OTE_ERR_INVALID_PARAM;
        }
        snprintf(out->endpoints[out->num_endpoints++], 280, "%s", tok);
    }
    if (out->num_endpoints == 0 ||
        (strcmp(out->scheme, "redis") == 0 && out->num_endpoints != 1)) {
        ote_error("metadata '%s': %s", uri,
                  out->num_endpoints == 0 ? "no host:port" : "redis:// takes one host:port");
        return OTE_ERR_INVALID_PARAM;
    }
    return OTE_OK;
}

/*
 * The descriptor in a record read under name: record checked (framing,
 * MAC), descriptor decoded, naming name, with a control address.
 */
static ote_status_t meta_record_desc(ote_meta_t *m, const char *name, const uint8_t *val,
                                     size_t len, ote_desc_t **desc_p)
{
    const uint8_t *dbytes;
    size_t dlen;
    ote_desc_t *d;
    ote_status_t status;

    status = ote_meta_record_check(m->params.auth, name, val, len, &dbytes, &dlen);
    if (status == OTE_OK)
        status = ote_desc_decode(dbytes, dlen, &d);
    if (status == OTE_ERR_PROTOCOL) {
        ote_error("metadata: the record under '%s' in %s is malformed: refused", name, m->uri);
    } else if (status == OTE_OK) {
        if (strcmp(d->name, name) != 0) {
            ote_error("metadata: the descriptor under '%s' names '%s': refused", name, d->name);
            ote_desc_free(d);
            status = OTE_ERR_PROTOCOL;
        } else if (d->ctl_addr[0] == '\0') {
            ote_error("metadata: the descriptor under '%s' has no control address: refused",
                      name);
            ote_desc_free(d);
            status = OTE_ERR_PROTOCOL;
        }
    }
    if (status == OTE_OK)
        *desc_p = d;
    return status;
}

/* Under m->lock: put the current descriptor (claim, or update when ours). */
static ote_status_t meta_put(ote_meta_t *m, bool claim)
{
    ote_buf_t desc = {0}, rec = {0};
    ote_status_t status;

    /* Cleared before the read: a change after it marks the descriptor again. */
    m->dirty = false;
    status   = m->params.desc_cb(m->params.desc_arg, &desc);
    if (status == OTE_OK)
        status = ote_meta_record_encode(m->params.auth, m->name, desc.data, desc.len, &rec);
    if (status != OTE_OK)
        m->dirty = true;
    if (status == OTE_OK) {
        m->puts++;
        status   = claim ? m->ops->claim(m->ctx, m->key, rec.data, rec.len, m->params.ttl_s)
                         : m->ops->update(m->ctx, m->key, rec.data, rec.len, m->params.ttl_s);
        if (status != OTE_OK)
            m->dirty = true;
    }
    if (status == OTE_OK || status == OTE_ERR_STORE_UNAVAILABLE || status == OTE_ERR_NOT_FOUND ||
        status == OTE_ERR_EXISTS) {
        m->refused = OTE_OK; /* put, or a state the callers say themselves */
    } else if (status != m->refused) {
        m->refused = status;
        ote_error("metadata: the descriptor of '%s' (%zu bytes) could not be put in the %s "
                  "store: %s; peers that look '%s' up get the one the store holds until a "
                  "later try (each keepalive round) succeeds",
                  m->name, rec.len, m->ops->name, ote_status_string(status), m->name);
    }
    free(desc.data);
    free(rec.data);
    return status;
}

/* Under m->lock: one round of the keepalive thread. */
static void meta_tick(ote_meta_t *m)
{
    ote_status_t status = OTE_OK;
    bool was_healthy    = m->healthy;

    if (m->claimed) {
        status = m->ops->keepalive(m->ctx, m->key, m->params.ttl_s);
        if (status == OTE_OK && m->dirty)
            status = meta_put(m, false);
        if (status == OTE_ERR_NOT_FOUND) {
            ote_warn("metadata: the key of '%s' is gone from the store (expired or the store "
                     "lost its data); putting it again", m->name);
            m->claimed = false;
        }
    }
    if (!m->claimed) {
        status = meta_put(m, true);
        if (status == OTE_OK) {
            m->claimed = true;
            m->taken   = false;
            ote_info("metadata: '%s' is in the store again", m->name);
        } else if (status == OTE_ERR_EXISTS && !m->taken) {
            m->taken = true;
            ote_error("metadata: the name '%s' was taken by another engine while this one "
                      "could not keep it; peers that open it now reach the other one", m->name);
        }
    }
    m->healthy = status != OTE_ERR_STORE_UNAVAILABLE;
    if (was_healthy && !m->healthy)
        ote_warn("metadata: the %s store (%s) does not answer; transfers between open "
                 "segments go on, opens of new names fail until it is back",
                 m->ops->name, m->uri);
    else if (!was_healthy && m->healthy)
        ote_info("metadata: the %s store answers again", m->ops->name);
}

static void *meta_thread(void *arg)
{
    ote_meta_t *m = arg;

    pthread_mutex_lock(&m->lock);
    while (!m->stop) {
        long period_ms = m->params.ttl_s * 1000 / 3;
        struct timespec ts;

        if (!m->healthy && period_ms > 500)
            period_ms = 500;
        if (period_ms < 100)
            period_ms = 100;
        ts = ote_clock_after(CLOCK_MONOTONIC, (uint64_t)period_ms * 1000000ull);
        while (!m->stop && !m->wake &&
               pthread_cond_timedwait(&m->cond, &m->lock, &ts) != ETIMEDOUT)
            ;
        m->wake = false;
        if (!m->stop)
            meta_tick(m);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

static void meta_free(ote_meta_t *m)
{
    if (m->ctx != NULL)
        m->ops->close(m->ctx);
    if (m->read_ctx != NULL)
        m->ops->close(m->read_ctx);
    pthread_mutex_destroy(&m->lock);
    pthread_mutex_destroy(&m->read_lock);
    pthread_cond_destroy(&m->cond);
    free(m);
}

#define META_F(_f) offsetof(ote_meta_config_t, _f)

static const ote_cfg_entry_t meta_config_fields[] = {
    {"PREFIX", "orbitte/segments/", OTE_CFG_STRING, META_F(prefix),
     "Prefix of the keys engines put their descriptors under in an etcd or Redis store."},
    {"TTL_S", "10", OTE_CFG_INT, META_F(ttl_s),
     "Lease (etcd) or TTL (Redis) of an engine's key, kept alive every third of it: a "
     "killed engine's name is free again and its opens fail NOT_FOUND within this time "
     "(an engine restarted under the name takes it over at once, see OTE_METADATA_PROBE_MS).",
     .min = 2, .max = 86400},
    {"TIMEOUT_MS", "2000", OTE_CFG_INT, META_F(timeout_ms),
     "Bound on one request to an etcd endpoint or to Redis; past it the call fails "
     "STORE_UNAVAILABLE (etcd: after every endpoint was tried).",
     .min = 1, .max = OTE_CFG_TIME_MAX},
    {"PROBE_MS", "1000", OTE_CFG_INT, META_F(probe_ms),
     "An engine whose name is held in the store asks the holder's control address for its "
     "descriptor, for at most this long: refused, no answer in time or another instance "
     "answering, the name is taken over at once; the holder answering, or no route to its "
     "address from here, EXISTS.",
     .min = 1, .max = 600000},
};

OTE_CONFIG_TABLE_DEFINE(ote_meta_config_table, "METADATA_", "metadata", meta_config_fields,
                        ote_meta_config_t, NULL);

/*
 * Under m->lock, at create, the name held by another client: read the
 * record, ask its holder at its control address, and when the holder
 * provably no longer serves the name, replace the record with ours if it
 * is still the one read. OK: the name is ours. EXISTS: a live holder, one
 * that cannot be told, or a record that changed under us (the caller's
 * next round claims or asks again: *changed_p).
 */
static ote_status_t meta_take_over(ote_meta_t *m, bool *changed_p)
{
    ote_buf_t desc = {0}, rec = {0};
    uint8_t *val   = NULL;
    size_t len     = 0;
    int64_t version = 0;
    ote_desc_t *holder = NULL;
    ote_status_t status, probe;

    status = m->ops->get_versioned(m->ctx, m->key, &val, &len, &version);
    if (status == OTE_ERR_NOT_FOUND) {
        *changed_p = true; /* gone meanwhile: the next claim takes it */
        return OTE_ERR_EXISTS;
    }
    if (status != OTE_OK)
        return status;
    if (meta_record_desc(m, m->name, val, len, &holder) != OTE_OK) {
        ote_error("metadata: the name '%s' is held by a record this engine cannot read or "
                  "check; it is not taken over (it is free when the key expires)", m->name);
        status       = OTE_ERR_EXISTS;
        m->said_held = true;
        goto out;
    }
    /* Without the store's lock: the probe may take up to probe_ms. */
    pthread_mutex_unlock(&m->lock);
    probe = m->params.holder_cb(m->params.desc_arg, holder, m->params.probe_ms);
    pthread_mutex_lock(&m->lock);
    if (probe == OTE_OK) {
        ote_error("metadata: the name '%s' is held by another live engine (instance %016llx, "
                  "control address %s answers; key '%s' in %s)",
                  m->name, (unsigned long long)holder->instance_id, holder->ctl_addr, m->key,
                  m->uri);
        status       = OTE_ERR_EXISTS;
        m->said_held = true;
        goto out;
    }
    if (probe != OTE_ERR_NOT_FOUND) {
        ote_error("metadata: the name '%s' is held by instance %016llx, which could not be "
                  "told alive or gone at %s (%s); it is not taken over (it is free when the "
                  "key expires)",
                  m->name, (unsigned long long)holder->instance_id, holder->ctl_addr,
                  ote_status_string(probe));
        status       = OTE_ERR_EXISTS;
        m->said_held = true;
        goto out;
    }
    status = m->params.desc_cb(m->params.desc_arg, &desc);
    if (status == OTE_OK)
        status = ote_meta_record_encode(m->params.auth, m->name, desc.data, desc.len, &rec);
    if (status == OTE_OK)
        status = m->ops->replace(m->ctx, m->key, val, len, version, rec.data, rec.len,
                                 m->params.ttl_s);
    if (status == OTE_OK) {
        m->dirty = false;
        ote_info("metadata: took over the name '%s' from instance %016llx, which no longer "
                 "serves it (nothing answers as it at %s)",
                 m->name, (unsigned long long)holder->instance_id, holder->ctl_addr);
    } else if (status == OTE_ERR_EXISTS) {
        *changed_p = true;
        ote_debug("metadata: the record of '%s' changed while its holder was asked", m->name);
    }
out:
    ote_desc_free(holder);
    free(val);
    free(desc.data);
    free(rec.data);
    return status;
}

ote_status_t ote_meta_create(const ote_meta_params_t *p, ote_meta_t **meta_p)
{
    ote_meta_uri_t uri;
    ote_meta_t *m;
    ote_status_t status;

    status = ote_meta_uri_parse(p->uri, &uri);
    if (status != OTE_OK)
        return status;
    if (p->ttl_s < 2 || p->ttl_s > 86400 || p->timeout_ms < 1 ||
        strlen(p->prefix) >= OTE_META_KEY_MAX) {
        ote_error("OTE_METADATA_TTL_S must be 2..86400, OTE_METADATA_TIMEOUT_MS positive and "
                  "OTE_METADATA_PREFIX shorter than %d bytes", OTE_META_KEY_MAX);
        return OTE_ERR_INVALID_PARAM;
    }
    if (p->name != NULL && ote_meta_name_check(p->name) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return OTE_ERR_NO_MEMORY;
    m->ops = strcmp(uri.scheme, "etcd") == 0 ? &ote_meta_etcd_ops : &ote_meta_redis_ops;
    if (m->ops->name == NULL) {
        ote_error("metadata '%s': this build has no %s client (configure found no %s)", p->uri,
                  uri.scheme, strcmp(uri.scheme, "etcd") == 0 ? "libcurl or json-c" : "hiredis");
        free(m);
        return OTE_ERR_UNSUPPORTED;
    }
    m->params = *p;
    snprintf(m->uri, sizeof(m->uri), "%s", p->uri);
    if (strchr(m->uri, '@') != NULL) /* never log the password */
        snprintf(m->uri, sizeof(m->uri), "redis://%s", strrchr(p->uri, '@') + 1);
    snprintf(m->prefix, sizeof(m->prefix), "%s", p->prefix);
    snprintf(m->name, sizeof(m->name), "%s", p->name ? p->name : "");
    snprintf(m->key, sizeof(m->key), "%s%s", m->prefix, m->name);
    m->params.uri    = NULL;
    m->params.name   = NULL;
    m->params.prefix = NULL;
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->read_lock, NULL);
    ote_cond_init_monotonic(&m->cond);

    status = m->ops->open(&uri, p->timeout_ms, &m->ctx);
    if (status != OTE_OK)
        m->ctx = NULL;
    else if (p->desc_cb != NULL && (status = m->ops->open(&uri, p->timeout_ms, &m->read_ctx)) !=
                                       OTE_OK)
        m->read_ctx = NULL;
    memset(&uri, 0, sizeof(uri)); /* the password */
    if (status != OTE_OK)
        goto err;
    m->healthy = true;
    if (p->desc_cb != NULL) {
        pthread_mutex_lock(&m->lock);
        status = meta_put(m, true);
        /*
         * Held: a holder proven gone is replaced. Rounds: the record may
         * change under us (a holder that just started, a key that expired).
         */
        for (int round = 0; round < 3 && status == OTE_ERR_EXISTS && p->holder_cb != NULL;
             round++) {
            bool changed = false;

            status = meta_take_over(m, &changed);
            if (status != OTE_ERR_EXISTS || !changed)
                break;
            status = meta_put(m, true);
        }
        pthread_mutex_unlock(&m->lock);
        if (status == OTE_ERR_EXISTS) {
            if (!m->said_held)
                ote_error("metadata: the name '%s' is held by another live engine (key '%s' "
                          "in %s)", m->name, m->key, m->uri);
            goto err;
        }
        if (status != OTE_OK) {
            ote_error("metadata: cannot put the descriptor of '%s' into %s: %s", m->name,
                      m->uri, ote_status_string(status));
            goto err;
        }
        m->claimed = true;
        if (pthread_create(&m->thread, NULL, meta_thread, m) != 0) {
            m->ops->release(m->ctx, m->key);
            status = OTE_ERR_NO_MEMORY;
            goto err;
        }
        m->started = true;
    }
    *meta_p = m;
    return OTE_OK;

err:
    meta_free(m);
    return status;
}

void ote_meta_destroy(ote_meta_t *m)
{
    if (m == NULL)
        return;
    if (m->started) {
        pthread_mutex_lock(&m->lock);
        m->stop = true;
        pthread_cond_signal(&m->cond);
        pthread_mutex_unlock(&m->lock);
        pthread_join(m->thread, NULL);
        /* Bounded by the store client's timeout; a store away lets the key expire. */
        if (m->claimed && m->ops->release(m->ctx, m->key) != OTE_OK)
            ote_info("metadata: could not delete the key of '%s'; it expires within %ld s",
                     m->name, m->params.ttl_s);
    }
    meta_free(m);
}

void ote_meta_changed(ote_meta_t *m)
{
    if (m == NULL || !m->started)
        return;
    m->dirty = true;
    /*
     * A store that does not answer: the keepalive thread, which tries
     * every round, puts it when it does; the caller (a registration) does
     * not wait for that thread's request in flight.
     */
    if (!m->healthy)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->healthy && m->claimed) {
        ote_status_t status = meta_put(m, false);

        if (status == OTE_ERR_STORE_UNAVAILABLE) {
            m->healthy = false;
            ote_warn("metadata: the %s store (%s) does not answer; the new descriptor of "
                     "'%s' goes in when it does", m->ops->name, m->uri, m->name);
        } else if (status == OTE_ERR_NOT_FOUND) {
            m->claimed = false;
            m->wake    = true; /* put it again now, not at the next period */
            pthread_cond_signal(&m->cond);
        }
    }
    pthread_mutex_unlock(&m->lock);
}

unsigned long ote_meta_puts(ote_meta_t *m)
{
    unsigned long n;

    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->lock);
    n = m->puts;
    pthread_mutex_unlock(&m->lock);
    return n;
}

ote_status_t ote_meta_lookup(ote_meta_t *m, const char *name, ote_desc_t **desc_p)
{
    char key[sizeof(m->key)];
    uint8_t *val = NULL;
    size_t len = 0;
    ote_status_t status;

    if (ote_meta_name_check(name) != OTE_OK)
        return OTE_ERR_INVALID_PARAM;
    snprintf(key, sizeof(key), "%s%s", m->prefix, name);
    pthread_mutex_lock(&m->read_lock);
    status = m->ops->get(m->read_ctx != NULL ? m->read_ctx : m->ctx, key, &val, &len);
    pthread_mutex_unlock(&m->read_lock);
    if (status == OTE_ERR_NOT_FOUND) {
        ote_debug("metadata: no engine '%s' in %s", name, m->uri);
        return status;
    }
    if (status != OTE_OK) {
        ote_error("metadata: cannot read '%s' from %s: %s", name, m->uri,
                  ote_status_string(status));
        return status;
    }
    status = meta_record_desc(m, name, val, len, desc_p);
    free(val);
    return status;
}
