/*
 * etcd backend: etcd's v3 API through its JSON gateway (POST /v3/...),
 * with libcurl and json-c. Keys and values travel base64-encoded, 64-bit
 * integers as decimal strings.
 *
 *   claim     lease keepalive (grant where there is none or it is gone),
 *             then a txn: if the key's create_revision is 0 put it with
 *             the lease, else read it (ours if it carries our lease)
 *   keepalive lease keepalive; a reply without a TTL: the lease is gone
 *   update    txn: if the key's lease is ours, put the new value
 *   release   lease revoke (deletes the key)
 *   replace   lease as for claim, then a txn: if the key's mod_revision is
 *             still the one read, put our value with our lease (taking
 *             over a dead holder's key)
 *
 * Endpoints are tried in turn, starting with the one that answered last;
 * every request is bounded by the timeout. The response decoders are
 * separate functions fed by the fuzz target fuzz_meta_etcd.
 */
#include "meta.h"

#include "base/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>

#ifdef HAVE_ETCD
#include <curl/curl.h>
#include <json-c/json.h>
#endif

/* ---- base64 (RFC 4648, padded) -------------------------------------------- */

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *ote_meta_base64_encode(const void *data, size_t len)
{
    const uint8_t *p = data;
    char *out, *o;

    if (len > (SIZE_MAX / 4) * 3 - 3)
        return NULL;
    out = malloc((len + 2) / 3 * 4 + 1);
    if (out == NULL)
        return NULL;
    o = out;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;

        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        *o++ = b64_alphabet[(v >> 18) & 63];
        *o++ = b64_alphabet[(v >> 12) & 63];
        *o++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

ote_status_t ote_meta_base64_decode(const char *s, size_t len, uint8_t **out_p, size_t *len_p)
{
    uint8_t *out;
    size_t n = 0;

    if (len % 4 != 0)
        return OTE_ERR_PROTOCOL;
    out = malloc(len / 4 * 3 + 1);
    if (out == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        bool last = i + 4 == len;

        for (int k = 0; k < 4; k++)
            v[k] = b64_value(s[i + k]);
        if (v[0] < 0 || v[1] < 0 || (v[2] < 0 && !(last && s[i + 2] == '=' && s[i + 3] == '=')) ||
            (v[3] < 0 && !(last && s[i + 3] == '=')))
            goto err;
        out[n++] = (uint8_t)(v[0] << 2 | v[1] >> 4);
        if (v[2] >= 0) {
            out[n++] = (uint8_t)((v[1] & 15) << 4 | v[2] >> 2);
            if (v[3] >= 0)
                out[n++] = (uint8_t)((v[2] & 3) << 6 | v[3]);
        }
    }
    *out_p = out;
    *len_p = n;
    return OTE_OK;
err:
    free(out);
    return OTE_ERR_PROTOCOL;
}

#ifdef HAVE_ETCD

/* ---- response decoders (fuzzed) ------------------------------------------- */

/* A 64-bit field: json string of digits, or a number. 0 when absent. */
static bool json_i64(json_object *o, const char *field, int64_t *v_p)
{
    json_object *f;
    const char *s;
    char *end;
    long long v;

    *v_p = 0;
    if (!json_object_object_get_ex(o, field, &f))
        return true;
    if (json_object_is_type(f, json_type_int)) {
        *v_p = json_object_get_int64(f);
        return true;
    }
    if (!json_object_is_type(f, json_type_string))
        return false;
    s = json_object_get_string(f);
    /* Decimal digits, an optional '-' first, within 64 bits (etcd's int64 as a string). */
    if ((s[0] < '0' || s[0] > '9') && !(s[0] == '-' && s[1] >= '0' && s[1] <= '9'))
        return false;
    if (strlen(s) > 20)
        return false;
    errno = 0;
    v     = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE)
        return false;
    *v_p = v;
    return true;
}

/*
 * Parse a gateway response: an object; an error object ({"error", "code"},
 * or a streaming call's {"error": {"grpc_code", ...}}, as lease keepalive
 * answers when the call fails on the server) maps to a status: gRPC
 * NotFound (5) -> NOT_FOUND, Unauthenticated (16) and PermissionDenied (7)
 * -> AUTH, Unavailable (14) -> STORE_UNAVAILABLE, anything else -> PROTOCOL.
 */
static ote_status_t etcd_parse(const char *body, size_t len, json_object **obj_p)
{
    json_tokener *tok;
    json_object *o, *code, *err = NULL;
    bool is_error;
    int64_t c;

    if (body == NULL || len == 0 || len > (size_t)OTE_META_RECORD_MAX * 2)
        return OTE_ERR_PROTOCOL;
    tok = json_tokener_new_ex(32);
    if (tok == NULL)
        return OTE_ERR_NO_MEMORY;
    o = json_tokener_parse_ex(tok, body, (int)len);
    if (o == NULL || json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != len || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        json_tokener_free(tok);
        return OTE_ERR_PROTOCOL;
    }
    json_tokener_free(tok);
    is_error = json_object_object_get_ex(o, "code", &code);
    if (!is_error && json_object_object_get_ex(o, "error", &err) &&
        json_object_is_type(err, json_type_object)) {
        is_error = true;
        if (!json_object_object_get_ex(err, "grpc_code", &code))
            code = NULL; /* without its code: PROTOCOL */
    }
    if (is_error) {
        json_object *msg;
        ote_status_t status = OTE_ERR_PROTOCOL;

        c = json_object_is_type(code, json_type_int) ? json_object_get_int64(code) : -1;
        if (c == 5)
            status = OTE_ERR_NOT_FOUND;
        else if (c == 16 || c == 7)
            status = OTE_ERR_AUTH;
        else if (c == 14)
            status = OTE_ERR_STORE_UNAVAILABLE;
        else if (json_object_object_get_ex(err != NULL ? err : o, "message", &msg))
            ote_warn("etcd: the store answered gRPC code %lld: %.200s", (long long)c,
                     json_object_get_string(msg));
        json_object_put(o);
        return status;
    }
    *obj_p = o;
    return OTE_OK;
}

/* The value, lease and mod_revision (rev_p may be NULL) of the single kv in kvs (range). */
static ote_status_t kvs_value(json_object *o, uint8_t **val_p, size_t *len_p, int64_t *lease_p,
                              int64_t *rev_p)
{
    json_object *kvs, *kv, *v;
    int64_t rev = 0;
    ote_status_t status;

    if (!json_object_object_get_ex(o, "kvs", &kvs))
        return OTE_ERR_NOT_FOUND;
    if (!json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) != 1)
        return json_object_is_type(kvs, json_type_array) && json_object_array_length(kvs) == 0
                   ? OTE_ERR_NOT_FOUND
                   : OTE_ERR_PROTOCOL;
    kv = json_object_array_get_idx(kvs, 0);
    if (!json_object_is_type(kv, json_type_object) || !json_i64(kv, "lease", lease_p) ||
        !json_i64(kv, "mod_revision", &rev))
        return OTE_ERR_PROTOCOL;
    if (rev_p != NULL) {
        /* A kv always has one: the revision a compare-and-swap compares. */
        if (rev <= 0)
            return OTE_ERR_PROTOCOL;
        *rev_p = rev;
    }
    if (!json_object_object_get_ex(kv, "value", &v)) {
        /* An empty value is left out of the JSON. */
        *val_p = malloc(1);
        *len_p = 0;
        return *val_p ? OTE_OK : OTE_ERR_NO_MEMORY;
    }
    if (!json_object_is_type(v, json_type_string))
        return OTE_ERR_PROTOCOL;
    if ((size_t)json_object_get_string_len(v) > (size_t)OTE_META_RECORD_MAX / 3 * 4 + 4)
        return OTE_ERR_PROTOCOL;
    status = ote_meta_base64_decode(json_object_get_string(v),
                                    (size_t)json_object_get_string_len(v), val_p, len_p);
    return status;
}

ote_status_t ote_meta_etcd_decode_range_rev(const char *body, size_t len, uint8_t **val_p,
                                            size_t *vlen_p, int64_t *lease_p, int64_t *rev_p)
{
    json_object *o;
    ote_status_t status = etcd_parse(body, len, &o);

    if (status != OTE_OK)
        return status;
    status = kvs_value(o, val_p, vlen_p, lease_p, rev_p);
    json_object_put(o);
    return status;
}

ote_status_t ote_meta_etcd_decode_range(const char *body, size_t len, uint8_t **val_p,
                                        size_t *vlen_p, int64_t *lease_p)
{
    return ote_meta_etcd_decode_range_rev(body, len, val_p, vlen_p, lease_p, NULL);
}

ote_status_t ote_meta_etcd_decode_lease(const char *body, size_t len, int64_t *id_p,
                                        int64_t *ttl_p)
{
    json_object *o, *res;
    ote_status_t status = etcd_parse(body, len, &o);

    if (status != OTE_OK)
        return status;
    /* keepalive wraps its answer in "result" */
    res = json_object_object_get_ex(o, "result", &res) ? res : o;
    if (!json_object_is_type(res, json_type_object) || !json_i64(res, "ID", id_p) ||
        !json_i64(res, "TTL", ttl_p))
        status = OTE_ERR_PROTOCOL;
    else if (*ttl_p <= 0)
        status = OTE_ERR_NOT_FOUND;
    json_object_put(o);
    return status;
}

ote_status_t ote_meta_etcd_decode_txn(const char *body, size_t len, bool *succeeded_p,
                                      int64_t *lease_p)
{
    json_object *o, *ok, *resps, *r, *range;
    uint8_t *val = NULL;
    size_t vlen;
    ote_status_t status = etcd_parse(body, len, &o);

    if (status != OTE_OK)
        return status;
    *lease_p     = 0;
    *succeeded_p = json_object_object_get_ex(o, "succeeded", &ok) &&
                   json_object_is_type(ok, json_type_boolean) && json_object_get_boolean(ok);
    if (!*succeeded_p && json_object_object_get_ex(o, "responses", &resps)) {
        /* The failure branch read the key: whose lease holds it. */
        if (!json_object_is_type(resps, json_type_array) ||
            json_object_array_length(resps) != 1) {
            status = OTE_ERR_PROTOCOL;
        } else {
            r = json_object_array_get_idx(resps, 0);
            if (!json_object_is_type(r, json_type_object) ||
                !json_object_object_get_ex(r, "response_range", &range) ||
                !json_object_is_type(range, json_type_object))
                status = OTE_ERR_PROTOCOL;
            else
                status = kvs_value(range, &val, &vlen, lease_p, NULL);
            if (status == OTE_ERR_NOT_FOUND)
                status = OTE_OK; /* gone meanwhile */
            free(val);
        }
    }
    json_object_put(o);
    return status;
}

/* ---- client ------------------------------------------------------------- */

typedef struct {
    CURL    *curl;
    size_t   num_endpoints;
    char     endpoints[OTE_META_MAX_ENDPOINTS][280];
    size_t   current;   /* the endpoint that answered last */
    long     timeout_ms;
    int64_t  lease;     /* 0: none granted */
    char    *body;      /* response */
    size_t   body_len;
    bool     body_over;
} etcd_t;

static size_t etcd_write(char *p, size_t size, size_t n, void *arg)
{
    etcd_t *c  = arg;
    size_t add = size * n;
    char *nb;

    if (c->body_len + add > (size_t)OTE_META_RECORD_MAX * 2) {
        c->body_over = true;
        return 0;
    }
    nb = realloc(c->body, c->body_len + add + 1);
    if (nb == NULL)
        return 0;
    c->body = nb;
    memcpy(c->body + c->body_len, p, add);
    c->body_len += add;
    c->body[c->body_len] = '\0';
    return add;
}

/*
 * POST json to path on the endpoints in turn. OTE_OK with the body in
 * c->body (any HTTP status: the gateway's errors are JSON too);
 * STORE_UNAVAILABLE when no endpoint answered.
 */
static ote_status_t etcd_post(etcd_t *c, const char *path, const char *json)
{
    struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    ote_status_t status     = OTE_ERR_STORE_UNAVAILABLE;

    if (hdrs == NULL)
        return OTE_ERR_NO_MEMORY;
    for (size_t i = 0; i < c->num_endpoints; i++) {
        size_t k = (c->current + i) % c->num_endpoints;
        char url[512];
        CURLcode rc;

        snprintf(url, sizeof(url), "http://%s%s", c->endpoints[k], path);
        free(c->body);
        c->body      = NULL;
        c->body_len  = 0;
        c->body_over = false;
        curl_easy_setopt(c->curl, CURLOPT_URL, url);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(json));
        rc = curl_easy_perform(c->curl);
        if (rc == CURLE_OK) {
            c->current = k;
            status     = OTE_OK;
            break;
        }
        if (c->body_over) {
            ote_warn("metadata: etcd %s answered more than %u bytes: refused", c->endpoints[k],
                     OTE_META_RECORD_MAX * 2);
            status = OTE_ERR_PROTOCOL;
            break;
        }
        ote_debug("metadata: etcd %s: %s", c->endpoints[k], curl_easy_strerror(rc));
    }
    curl_slist_free_all(hdrs);
    return status;
}

/* A lease call (keepalive, revoke) naming our lease. */
static ote_status_t etcd_lease_post(etcd_t *c, const char *path)
{
    char json[64];

    snprintf(json, sizeof(json), "{\"ID\":\"%lld\"}", (long long)c->lease);
    return etcd_post(c, path, json);
}

static void etcd_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void etcd_close(void *ctx)
{
    etcd_t *c = ctx;

    if (c == NULL)
        return;
    if (c->curl != NULL)
        curl_easy_cleanup(c->curl);
    free(c->body);
    free(c);
}

static ote_status_t etcd_open(const ote_meta_uri_t *uri, long timeout_ms, void **ctx_p)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    etcd_t *c = calloc(1, sizeof(*c));
    ote_status_t status;

    if (c == NULL)
        return OTE_ERR_NO_MEMORY;
    pthread_once(&once, etcd_global_init);
    c->curl = curl_easy_init();
    if (c->curl == NULL) {
        free(c);
        return OTE_ERR_NO_MEMORY;
    }
    c->num_endpoints = uri->num_endpoints;
    memcpy(c->endpoints, uri->endpoints, sizeof(c->endpoints));
    c->timeout_ms = timeout_ms;
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, etcd_write);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_PROXY, "");
    curl_easy_setopt(c->curl, CURLOPT_PROTOCOLS_STR, "http");
    /* A request that reaches the store and proves it is an etcd gateway. */
    status = etcd_post(c, "/v3/maintenance/status", "{}");
    if (status == OTE_OK) {
        json_object *o;

        status = etcd_parse(c->body, c->body_len, &o);
        if (status == OTE_OK) {
            json_object *v;

            if (!json_object_object_get_ex(o, "version", &v))
                status = OTE_ERR_PROTOCOL;
            json_object_put(o);
        }
        if (status != OTE_OK)
            ote_error("metadata: %s does not answer as an etcd v3 gateway: %s",
                      c->endpoints[c->current], ote_status_string(status));
    } else if (status == OTE_ERR_STORE_UNAVAILABLE) {
        ote_error("metadata: no etcd endpoint answers within %ld ms (%s%s)", timeout_ms,
                  c->endpoints[0], c->num_endpoints > 1 ? ", ..." : "");
    }
    if (status != OTE_OK) {
        etcd_close(c);
        return status;
    }
    *ctx_p = c;
    return OTE_OK;
}

/* Base64 of key into a JSON string literal's contents. */
static char *key64(const char *key)
{
    return ote_meta_base64_encode(key, strlen(key));
}

static ote_status_t etcd_grant(etcd_t *c, long ttl_s)
{
    char json[64];
    int64_t id = 0, ttl = 0;
    ote_status_t status;

    snprintf(json, sizeof(json), "{\"TTL\":%ld}", ttl_s);
    status = etcd_post(c, "/v3/lease/grant", json);
    if (status == OTE_OK)
        status = ote_meta_etcd_decode_lease(c->body, c->body_len, &id, &ttl);
    if (status == OTE_OK && id == 0)
        status = OTE_ERR_PROTOCOL;
    if (status == OTE_OK)
        c->lease = id;
    return status == OTE_ERR_NOT_FOUND ? OTE_ERR_PROTOCOL : status;
}

/* Our lease (not 0) kept alive; NOT_FOUND (and none kept): the store no longer knows it. */
static ote_status_t etcd_renew(etcd_t *c)
{
    int64_t id = 0, ttl = 0;
    ote_status_t status = etcd_lease_post(c, "/v3/lease/keepalive");

    if (status == OTE_OK)
        status = ote_meta_etcd_decode_lease(c->body, c->body_len, &id, &ttl);
    if (status == OTE_OK && id != c->lease)
        status = OTE_ERR_PROTOCOL; /* an answer about another lease */
    if (status == OTE_ERR_NOT_FOUND)
        c->lease = 0;
    return status;
}

/*
 * Our lease, renewed (keepalive) for a put that attaches a key to it, or a
 * new one where there is none or the store no longer knows it. A lease
 * that is not kept alive runs out: one kept only for keys that were
 * refused (a claim answered EXISTS, keepalive rounds stop while the name is
 * not ours) could otherwise hold a key put a moment before it runs out,
 * and the key would go with it.
 */
static ote_status_t etcd_lease_ready(etcd_t *c, long ttl_s)
{
    ote_status_t status = c->lease != 0 ? etcd_renew(c) : OTE_ERR_NOT_FOUND;

    return status == OTE_ERR_NOT_FOUND ? etcd_grant(c, ttl_s) : status;
}

static ote_status_t etcd_claim(void *ctx, const char *key, const void *value, size_t len,
                               long ttl_s)
{
    etcd_t *c = ctx;
    char *k = key64(key), *v = ote_meta_base64_encode(value, len), *json = NULL;
    ote_status_t status = OTE_ERR_NO_MEMORY;

    json = k && v ? malloc(strlen(k) * 3 + strlen(v) + 512) : NULL;
    /* A second round only when the store no longer knows our lease. */
    for (int round = 0; json != NULL && round < 2; round++) {
        int64_t holder = 0;
        bool ok        = false;

        status = etcd_lease_ready(c, ttl_s);
        if (status != OTE_OK)
            break;
        sprintf(json,
                "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"0\","
                "\"result\":\"EQUAL\"}],\"success\":[{\"request_put\":{\"key\":\"%s\","
                "\"value\":\"%s\",\"lease\":\"%lld\"}}],\"failure\":[{\"request_range\":"
                "{\"key\":\"%s\"}}]}",
                k, k, v, (long long)c->lease, k);
        status = etcd_post(c, "/v3/kv/txn", json);
        if (status == OTE_OK)
            status = ote_meta_etcd_decode_txn(c->body, c->body_len, &ok, &holder);
        if (status == OTE_ERR_NOT_FOUND) {
            c->lease = 0;
            continue;
        }
        if (status == OTE_OK && !ok)
            status = holder == c->lease ? OTE_OK : OTE_ERR_EXISTS;
        break;
    }
    free(json);
    free(k);
    free(v);
    return status;
}

static ote_status_t etcd_range(etcd_t *c, const char *key, uint8_t **value_p, size_t *len_p,
                               int64_t *lease_p, int64_t *rev_p);

/*
 * Our lease renewed, and the key still ours: a key under another lease (an
 * engine took the name over while this one did not answer) or gone (the
 * store lost it) is NOT_FOUND, as is a lease the store no longer knows.
 */
static ote_status_t etcd_keepalive(void *ctx, const char *key, long ttl_s)
{
    etcd_t *c = ctx;
    int64_t lease = 0, rev = 0;
    uint8_t *value = NULL;
    size_t len;
    ote_status_t status;

    (void)ttl_s;
    if (c->lease == 0)
        return OTE_ERR_NOT_FOUND;
    status = etcd_renew(c);
    if (status != OTE_OK)
        return status;
    status = etcd_range(c, key, &value, &len, &lease, &rev);
    free(value);
    if (status == OTE_OK && lease != c->lease)
        status = OTE_ERR_NOT_FOUND;
    return status;
}

/*
 * Put value under key with our lease if the key's compare target (field,
 * e.g. "LEASE" "lease") equals expect: one txn; *ok_p whether it matched.
 * NOT_FOUND: the store does not know our lease.
 */
static ote_status_t etcd_put_if(etcd_t *c, const char *key, const void *value, size_t len,
                                const char *target, const char *field, long long expect,
                                bool *ok_p)
{
    char *k = key64(key), *v = ote_meta_base64_encode(value, len);
    char *json = k && v ? malloc(strlen(k) * 2 + strlen(v) + 512) : NULL;
    int64_t holder = 0;
    ote_status_t status = OTE_ERR_NO_MEMORY;

    if (json != NULL) {
        sprintf(json,
                "{\"compare\":[{\"key\":\"%s\",\"target\":\"%s\",\"%s\":\"%lld\","
                "\"result\":\"EQUAL\"}],\"success\":[{\"request_put\":{\"key\":\"%s\","
                "\"value\":\"%s\",\"lease\":\"%lld\"}}]}",
                k, target, field, expect, k, v, (long long)c->lease);
        status = etcd_post(c, "/v3/kv/txn", json);
        if (status == OTE_OK)
            status = ote_meta_etcd_decode_txn(c->body, c->body_len, ok_p, &holder);
    }
    free(json);
    free(k);
    free(v);
    return status;
}

static ote_status_t etcd_update(void *ctx, const char *key, const void *value, size_t len,
                                long ttl_s)
{
    etcd_t *c = ctx;
    bool ok   = false;
    ote_status_t status;

    (void)ttl_s;
    if (c->lease == 0)
        return OTE_ERR_NOT_FOUND;
    status = etcd_put_if(c, key, value, len, "LEASE", "lease", (long long)c->lease, &ok);
    if (status == OTE_OK && !ok)
        status = OTE_ERR_NOT_FOUND;
    return status;
}

/* The key's value, its lease (0: none) and its mod_revision; NOT_FOUND: no such key. */
static ote_status_t etcd_range(etcd_t *c, const char *key, uint8_t **value_p, size_t *len_p,
                               int64_t *lease_p, int64_t *rev_p)
{
    char *k = key64(key), *json;
    ote_status_t status;

    if (k == NULL)
        return OTE_ERR_NO_MEMORY;
    json = malloc(strlen(k) + 32);
    if (json == NULL) {
        free(k);
        return OTE_ERR_NO_MEMORY;
    }
    sprintf(json, "{\"key\":\"%s\"}", k);
    status = etcd_post(c, "/v3/kv/range", json);
    if (status == OTE_OK)
        status = ote_meta_etcd_decode_range_rev(c->body, c->body_len, value_p, len_p, lease_p,
                                                rev_p);
    free(json);
    free(k);
    return status;
}

static ote_status_t etcd_get_versioned(void *ctx, const char *key, uint8_t **value_p,
                                       size_t *len_p, int64_t *version_p)
{
    int64_t lease, rev = 0;
    ote_status_t status = etcd_range(ctx, key, value_p, len_p, &lease, &rev);

    if (status == OTE_OK)
        *version_p = rev;
    return status;
}

static ote_status_t etcd_get(void *ctx, const char *key, uint8_t **value_p, size_t *len_p)
{
    int64_t rev;

    return etcd_get_versioned(ctx, key, value_p, len_p, &rev);
}

static ote_status_t etcd_replace(void *ctx, const char *key, const void *old, size_t old_len,
                                 int64_t version, const void *value, size_t len, long ttl_s)
{
    etcd_t *c = ctx;
    bool ok   = false;
    ote_status_t status = OTE_OK;

    (void)old;
    (void)old_len;
    if (version <= 0)
        return OTE_ERR_INVALID_PARAM;
    /* Our lease: the key lives as long as we keep it alive, the old holder's lease expires. */
    status = etcd_lease_ready(c, ttl_s);
    if (status != OTE_OK)
        return status;
    status = etcd_put_if(c, key, value, len, "MOD", "mod_revision", (long long)version, &ok);
    /* A lease the store no longer knows: nothing was put; the caller claims again. */
    if (status == OTE_ERR_NOT_FOUND)
        c->lease = 0;
    if ((status == OTE_OK && !ok) || status == OTE_ERR_NOT_FOUND)
        status = OTE_ERR_EXISTS;
    return status;
}

static ote_status_t etcd_release(void *ctx, const char *key)
{
    etcd_t *c = ctx;
    ote_status_t status;

    (void)key;
    if (c->lease == 0)
        return OTE_OK;
    status = etcd_lease_post(c, "/v3/lease/revoke");
    if (status == OTE_OK) {
        json_object *o;

        status = etcd_parse(c->body, c->body_len, &o);
        if (status == OTE_OK)
            json_object_put(o);
        if (status == OTE_ERR_NOT_FOUND)
            status = OTE_OK; /* expired already */
    }
    c->lease = 0;
    return status;
}

const ote_meta_ops_t ote_meta_etcd_ops = OTE_META_OPS(etcd);

#else /* !HAVE_ETCD */

const ote_meta_ops_t ote_meta_etcd_ops = {.name = NULL};

ote_status_t ote_meta_etcd_decode_range(const char *body, size_t len, uint8_t **val_p,
                                        size_t *vlen_p, int64_t *lease_p)
{
    (void)body; (void)len; (void)val_p; (void)vlen_p; (void)lease_p;
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_meta_etcd_decode_lease(const char *body, size_t len, int64_t *id_p,
                                        int64_t *ttl_p)
{
    (void)body; (void)len; (void)id_p; (void)ttl_p;
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_meta_etcd_decode_txn(const char *body, size_t len, bool *succeeded_p,
                                      int64_t *lease_p)
{
    (void)body; (void)len; (void)succeeded_p; (void)lease_p;
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_meta_etcd_decode_range_rev(const char *body, size_t len, uint8_t **val_p,
                                            size_t *vlen_p, int64_t *lease_p, int64_t *rev_p)
{
    (void)body; (void)len; (void)val_p; (void)vlen_p; (void)lease_p; (void)rev_p;
    return OTE_ERR_UNSUPPORTED;
}

#endif
