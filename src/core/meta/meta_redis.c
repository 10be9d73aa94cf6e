/*
 * Redis backend (hiredis). The key holds the record with a TTL:
 *
 *   claim     SET key record NX PX ttl (ours already if it holds our record)
 *   keepalive PEXPIRE, only while the key still holds the record we put
 *   update    SET with a new record, only while it holds ours
 *   release   DEL, only while it holds ours
 *   replace   WATCH key, GET (still the record read?), MULTI, SET record PX
 *             ttl, EXEC: taking over a dead holder's key, never another's
 *             that changed meanwhile (EXEC aborts when the key was touched)
 *
 * "Only while" is a short Lua script (EVAL), so that an engine that lost
 * its key never extends, overwrites or deletes another engine's. A
 * connection that failed is made again at the next call; every call is
 * bounded by the timeout.
 */
#include "meta.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_REDIS
#include <hiredis/hiredis.h>

static const char script_keepalive[] =
    "if redis.call('GET',KEYS[1])==ARGV[1] then "
    "return redis.call('PEXPIRE',KEYS[1],ARGV[2]) else return 0 end";
static const char script_update[] =
    "if redis.call('GET',KEYS[1])==ARGV[1] then "
    "redis.call('SET',KEYS[1],ARGV[2],'PX',ARGV[3]) return 1 else return 0 end";
static const char script_release[] =
    "if redis.call('GET',KEYS[1])==ARGV[1] then return redis.call('DEL',KEYS[1]) "
    "else return 0 end";

typedef struct {
    redisContext *rc;
    char          host[280];
    int           port;
    char          password[256];
    long          db;
    long          timeout_ms;
    uint8_t      *mine;     /* the record we put last */
    size_t        mine_len;
    /*
     * An update whose answer did not come (the store stopped past the
     * timeout): it may have run all the same, and the key then holds this
     * record, ours too. NULL: none.
     */
    uint8_t      *maybe;
    size_t        maybe_len;
} redis_t;

/* A reply's status: transport failures, refusals, wrong types. */
static ote_status_t reply_error(redis_t *c, redisReply *r)
{
    if (r == NULL) {
        ote_debug("metadata: redis %s:%d: %s", c->host, c->port,
                  c->rc != NULL && c->rc->err ? c->rc->errstr : "no reply");
        if (c->rc != NULL)
            redisFree(c->rc);
        c->rc = NULL;
        return OTE_ERR_STORE_UNAVAILABLE;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        ote_status_t status = OTE_ERR_PROTOCOL;

        if (strncmp(r->str, "WRONGPASS", 9) == 0 || strncmp(r->str, "NOAUTH", 6) == 0 ||
            strncmp(r->str, "NOPERM", 6) == 0)
            status = OTE_ERR_AUTH;
        else if (strncmp(r->str, "LOADING", 7) == 0 || strncmp(r->str, "BUSY", 4) == 0)
            status = OTE_ERR_STORE_UNAVAILABLE;
        ote_debug("metadata: redis %s:%d: %.200s", c->host, c->port, r->str);
        return status;
    }
    return OTE_OK;
}

/*
 * Largest reply read from the store: a record and the reply's framing. A
 * store that sends more (any reply, to any command) loses the connection
 * before it is read, and the command fails PROTOCOL.
 */
#define REDIS_REPLY_MAX ((size_t)OTE_META_RECORD_MAX * 2 + 4096)

/*
 * One command (argv form, binary safe) and its reply, read no further than
 * REDIS_REPLY_MAX bytes (hiredis's own call reads a reply whole, however
 * long the store says it is). The reply in *reply_p where OTE_OK.
 */
static ote_status_t redis_call(redis_t *c, int argc, const char **argv, const size_t *lens,
                               redisReply **reply_p)
{
    redisContext *rc = c->rc;
    void *reply      = NULL;
    ote_status_t status;
    int done = 0;

    if (redisAppendCommandArgv(rc, argc, argv, lens) != REDIS_OK)
        return reply_error(c, NULL);
    do {
        if (redisBufferWrite(rc, &done) != REDIS_OK)
            return reply_error(c, NULL);
    } while (!done);
    for (;;) {
        if (redisReaderGetReply(rc->reader, &reply) != REDIS_OK) {
            ote_debug("metadata: redis %s:%d: %s", c->host, c->port, rc->reader->errstr);
            return reply_error(c, NULL);
        }
        if (reply != NULL)
            break;
        if (rc->reader->len - rc->reader->pos > REDIS_REPLY_MAX) {
            ote_error("metadata: redis %s:%d: a reply of more than %zu bytes; closing the "
                      "connection", c->host, c->port, REDIS_REPLY_MAX);
            redisFree(rc);
            c->rc = NULL;
            return OTE_ERR_PROTOCOL;
        }
        if (redisBufferRead(rc) != REDIS_OK)
            return reply_error(c, NULL);
    }
    status = reply_error(c, reply);
    if (status != OTE_OK) {
        freeReplyObject(reply);
        return status;
    }
    *reply_p = reply;
    return OTE_OK;
}

static ote_status_t redis_connect(redis_t *c)
{
    struct timeval tv = {.tv_sec = c->timeout_ms / 1000, .tv_usec = (c->timeout_ms % 1000) * 1000};
    redisReply *r;
    ote_status_t status;

    if (c->rc != NULL)
        return OTE_OK;
    c->rc = redisConnectWithTimeout(c->host, c->port, tv);
    if (c->rc == NULL || c->rc->err) {
        ote_debug("metadata: redis %s:%d: %s", c->host, c->port,
                  c->rc != NULL ? c->rc->errstr : "no memory");
        if (c->rc != NULL)
            redisFree(c->rc);
        c->rc = NULL;
        return OTE_ERR_STORE_UNAVAILABLE;
    }
    redisSetTimeout(c->rc, tv);
    if (c->password[0] != '\0') {
        const char *argv[] = {"AUTH", c->password};
        size_t lens[]      = {4, strlen(c->password)};

        status = redis_call(c, 2, argv, lens, &r);
        if (status != OTE_OK)
            goto err;
        freeReplyObject(r);
    }
    if (c->db != 0) {
        char db[24];
        const char *argv[] = {"SELECT", db};
        size_t lens[]      = {6, 0};

        lens[1] = (size_t)snprintf(db, sizeof(db), "%ld", c->db);
        status  = redis_call(c, 2, argv, lens, &r);
        if (status != OTE_OK)
            goto err;
        freeReplyObject(r);
    }
    /* Proves the password (or that none is needed) before the engine relies on it. */
    status = redis_call(c, 1, (const char *[]){"PING"}, (const size_t[]){4}, &r);
    if (status != OTE_OK)
        goto err;
    if (r->type != REDIS_REPLY_STATUS)
        status = OTE_ERR_PROTOCOL;
    freeReplyObject(r);
    if (status != OTE_OK)
        goto err;
    return OTE_OK;

err:
    if (c->rc != NULL)
        redisFree(c->rc);
    c->rc = NULL;
    return status;
}

/* One command (argv form, binary safe); a failed connection is made again first. */
static ote_status_t redis_cmd(redis_t *c, int argc, const char **argv, const size_t *lens,
                              redisReply **reply_p)
{
    ote_status_t status = redis_connect(c);

    if (status != OTE_OK)
        return status;
    return redis_call(c, argc, argv, lens, reply_p);
}

static void redis_close(void *ctx)
{
    redis_t *c = ctx;

    if (c == NULL)
        return;
    if (c->rc != NULL)
        redisFree(c->rc);
    memset(c->password, 0, sizeof(c->password));
    free(c->mine);
    free(c->maybe);
    free(c);
}

static ote_status_t redis_open(const ote_meta_uri_t *uri, long timeout_ms, void **ctx_p)
{
    redis_t *c = calloc(1, sizeof(*c));
    const char *ep = uri->endpoints[0], *colon = strrchr(ep, ':');
    ote_status_t status;

    if (c == NULL)
        return OTE_ERR_NO_MEMORY;
    if (ep[0] == '[')
        snprintf(c->host, sizeof(c->host), "%.*s", (int)(colon - ep - 2), ep + 1);
    else
        snprintf(c->host, sizeof(c->host), "%.*s", (int)(colon - ep), ep);
    c->port       = atoi(colon + 1);
    c->db         = uri->db;
    c->timeout_ms = timeout_ms;
    snprintf(c->password, sizeof(c->password), "%s", uri->password);
    status = redis_connect(c);
    if (status == OTE_ERR_STORE_UNAVAILABLE)
        ote_error("metadata: redis %s does not answer within %ld ms", ep, timeout_ms);
    else if (status == OTE_ERR_AUTH)
        ote_error("metadata: redis %s refused the password%s", ep,
                  uri->password[0] ? "" : " (none given: redis://:password@host:port)");
    else if (status != OTE_OK)
        ote_error("metadata: redis %s: cannot use it (database %ld): %s", ep, uri->db,
                  ote_status_string(status));
    if (status != OTE_OK) {
        redis_close(c);
        return status;
    }
    *ctx_p = c;
    return OTE_OK;
}

/* Keep a copy of value in *rec_p (freeing what it held); NULL value: none. */
static ote_status_t keep(uint8_t **rec_p, size_t *len_p, const void *value, size_t len)
{
    uint8_t *m = NULL;

    if (value != NULL) {
        m = malloc(len ? len : 1);
        if (m == NULL)
            return OTE_ERR_NO_MEMORY;
        memcpy(m, value, len);
    }
    free(*rec_p);
    *rec_p = m;
    *len_p = value != NULL ? len : 0;
    return OTE_OK;
}

/* value is in the store as ours: no update of ours is in doubt any more. */
static ote_status_t remember(redis_t *c, const void *value, size_t len)
{
    keep(&c->maybe, &c->maybe_len, NULL, 0);
    return keep(&c->mine, &c->mine_len, value, len);
}

static ote_status_t redis_get_raw(redis_t *c, const char *key, redisReply **reply_p)
{
    const char *argv[] = {"GET", key};
    size_t lens[]      = {3, strlen(key)};
    redisReply *r;
    ote_status_t status = redis_cmd(c, 2, argv, lens, &r);

    if (status != OTE_OK)
        return status;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return OTE_ERR_NOT_FOUND;
    }
    if (r->type != REDIS_REPLY_STRING || r->len > (size_t)OTE_META_RECORD_MAX * 2) {
        freeReplyObject(r);
        return OTE_ERR_PROTOCOL;
    }
    *reply_p = r;
    return OTE_OK;
}

static ote_status_t redis_claim(void *ctx, const char *key, const void *value, size_t len,
                                long ttl_s)
{
    redis_t *c = ctx;
    char ms[32];
    const char *argv[] = {"SET", key, value, "NX", "PX", ms};
    size_t lens[6];
    redisReply *r;
    ote_status_t status;

    snprintf(ms, sizeof(ms), "%ld", ttl_s * 1000);
    lens[0] = 3, lens[1] = strlen(key), lens[2] = len, lens[3] = 2, lens[4] = 2,
    lens[5] = strlen(ms);
    status = redis_cmd(c, 6, argv, lens, &r);
    if (status != OTE_OK)
        return status;
    if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        /* Held: by us already (the same record), or by another engine. */
        status = redis_get_raw(c, key, &r);
        if (status == OTE_ERR_NOT_FOUND)
            return OTE_ERR_EXISTS; /* expired meanwhile: the next round claims it */
        if (status != OTE_OK)
            return status;
        status = r->len == len && memcmp(r->str, value, len) == 0 ? OTE_OK : OTE_ERR_EXISTS;
    } else if (r->type != REDIS_REPLY_STATUS) {
        status = OTE_ERR_PROTOCOL;
    }
    freeReplyObject(r);
    if (status == OTE_OK)
        status = remember(c, value, len);
    return status;
}

/* EVAL script 1 key args...: the integer it returns. */
static ote_status_t redis_eval(redis_t *c, const char *script, const char *key, int nargs,
                               const char **args, const size_t *arg_lens, long long *result_p)
{
    const char *argv[8] = {"EVAL", script, "1", key};
    size_t lens[8]      = {4, strlen(script), 1, strlen(key)};
    redisReply *r;
    ote_status_t status;

    for (int i = 0; i < nargs; i++) {
        argv[4 + i] = args[i];
        lens[4 + i] = arg_lens[i];
    }
    status = redis_cmd(c, 4 + nargs, argv, lens, &r);
    if (status != OTE_OK)
        return status;
    if (r->type != REDIS_REPLY_INTEGER)
        status = OTE_ERR_PROTOCOL;
    else
        *result_p = r->integer;
    freeReplyObject(r);
    return status;
}

/*
 * Run a script on our own key: its arguments are our claim, value if not
 * NULL, then the TTL in milliseconds. NOT_FOUND when the key is no longer ours.
 */
static ote_status_t redis_eval_mine(redis_t *c, const char *script, const char *key,
                                    const void *value, size_t len, long ttl_s)
{
    char ms[32];
    const char *args[3];
    size_t lens[3];
    int nargs = 0;
    long long n = 0;
    ote_status_t status;

    if (c->mine == NULL)
        return OTE_ERR_NOT_FOUND;
    snprintf(ms, sizeof(ms), "%ld", ttl_s * 1000);
    args[nargs] = (const char *)c->mine, lens[nargs++] = c->mine_len;
    if (value != NULL)
        args[nargs] = value, lens[nargs++] = len;
    args[nargs] = ms, lens[nargs++] = strlen(ms);
    status = redis_eval(c, script, key, nargs, args, lens, &n);
    if (status == OTE_OK && n != 1 && c->maybe != NULL) {
        /* Not the record we know: the one of an update whose answer was lost, then? */
        args[0] = (const char *)c->maybe, lens[0] = c->maybe_len;
        status  = redis_eval(c, script, key, nargs, args, lens, &n);
        if (status == OTE_OK && n == 1 && value == NULL) {
            /* It ran: that record is ours now. */
            free(c->mine);
            c->mine      = c->maybe;
            c->mine_len  = c->maybe_len;
            c->maybe     = NULL;
            c->maybe_len = 0;
        }
    }
    return status == OTE_OK && n != 1 ? OTE_ERR_NOT_FOUND : status;
}

static ote_status_t redis_keepalive(void *ctx, const char *key, long ttl_s)
{
    return redis_eval_mine(ctx, script_keepalive, key, NULL, 0, ttl_s);
}

static ote_status_t redis_update(void *ctx, const char *key, const void *value, size_t len,
                                 long ttl_s)
{
    redis_t *c          = ctx;
    ote_status_t status = redis_eval_mine(c, script_update, key, value, len, ttl_s);

    if (status == OTE_OK)
        status = remember(c, value, len);
    else if (status == OTE_ERR_STORE_UNAVAILABLE)
        keep(&c->maybe, &c->maybe_len, value, len); /* it may have run: ours too */
    return status;
}

static ote_status_t redis_get(void *ctx, const char *key, uint8_t **value_p, size_t *len_p)
{
    redis_t *c = ctx;
    redisReply *r;
    ote_status_t status = redis_get_raw(c, key, &r);

    if (status != OTE_OK)
        return status;
    *value_p = malloc(r->len ? r->len : 1);
    if (*value_p == NULL) {
        freeReplyObject(r);
        return OTE_ERR_NO_MEMORY;
    }
    memcpy(*value_p, r->str, r->len);
    *len_p = r->len;
    freeReplyObject(r);
    return OTE_OK;
}

static ote_status_t redis_release(void *ctx, const char *key)
{
    redis_t *c = ctx;
    const char *args[1];
    size_t lens[1];
    long long n = 0;

    ote_status_t status;

    if (c->mine == NULL)
        return OTE_OK;
    args[0] = (const char *)c->mine, lens[0] = c->mine_len;
    status  = redis_eval(c, script_release, key, 1, args, lens, &n);
    if (status == OTE_OK && n == 0 && c->maybe != NULL) {
        args[0] = (const char *)c->maybe, lens[0] = c->maybe_len;
        status  = redis_eval(c, script_release, key, 1, args, lens, &n);
    }
    return status;
}

static ote_status_t redis_get_versioned(void *ctx, const char *key, uint8_t **value_p,
                                        size_t *len_p, int64_t *version_p)
{
    ote_status_t status = redis_get(ctx, key, value_p, len_p);

    if (status == OTE_OK)
        *version_p = 0; /* none: the value itself is compared */
    return status;
}

/* One command whose reply must be a status or an integer; its reply is dropped. */
static ote_status_t redis_simple(redis_t *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r;
    ote_status_t status = redis_cmd(c, argc, argv, lens, &r);

    if (status != OTE_OK)
        return status;
    if (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_INTEGER)
        status = OTE_ERR_PROTOCOL;
    freeReplyObject(r);
    return status;
}

static ote_status_t redis_replace(void *ctx, const char *key, const void *old, size_t old_len,
                                  int64_t version, const void *value, size_t len, long ttl_s)
{
    redis_t *c = ctx;
    char ms[32];
    const char *watch[] = {"WATCH", key}, *unwatch[] = {"UNWATCH"}, *multi[] = {"MULTI"};
    const char *exec[] = {"EXEC"}, *discard[] = {"DISCARD"};
    const char *set[]  = {"SET", key, value, "PX", ms};
    size_t watch_lens[] = {5, strlen(key)}, one_len[] = {7}, set_lens[5];
    redisReply *r = NULL;
    bool same;
    ote_status_t status;

    (void)version;
    snprintf(ms, sizeof(ms), "%ld", ttl_s * 1000);
    set_lens[0] = 3, set_lens[1] = strlen(key), set_lens[2] = len, set_lens[3] = 2,
    set_lens[4] = strlen(ms);
    status = redis_simple(c, 2, watch, watch_lens);
    if (status != OTE_OK)
        return status;
    /* Watched from here: any write to the key before EXEC makes EXEC do nothing. */
    status = redis_get_raw(c, key, &r);
    if (status == OTE_OK) {
        same = r->len == old_len && memcmp(r->str, old, old_len) == 0;
        freeReplyObject(r);
        r = NULL;
        status = same ? OTE_OK : OTE_ERR_EXISTS;
    } else if (status == OTE_ERR_NOT_FOUND) {
        status = OTE_ERR_EXISTS; /* gone: claimed, not replaced */
    }
    if (status != OTE_OK) {
        if (c->rc != NULL) {
            one_len[0] = 7;
            (void)redis_simple(c, 1, unwatch, one_len);
        }
        return status;
    }
    one_len[0] = 5;
    status     = redis_simple(c, 1, multi, one_len);
    if (status == OTE_OK) {
        /* Queued: the reply is QUEUED, the command runs at EXEC. */
        status = redis_simple(c, 5, set, set_lens);
        if (status != OTE_OK && c->rc != NULL) {
            one_len[0] = 7;
            (void)redis_simple(c, 1, discard, one_len);
        }
    }
    if (status == OTE_OK) {
        one_len[0] = 4;
        status     = redis_cmd(c, 1, exec, one_len, &r);
    }
    if (status == OTE_OK) {
        /* Aborted (the key was written meanwhile): a null reply; done: [OK]. */
        if (r->type == REDIS_REPLY_NIL)
            status = OTE_ERR_EXISTS;
        else if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 ||
                 r->element[0]->type != REDIS_REPLY_STATUS)
            status = OTE_ERR_PROTOCOL;
        freeReplyObject(r);
    } else if (c->rc != NULL) {
        one_len[0] = 7;
        (void)redis_simple(c, 1, unwatch, one_len);
    }
    if (status == OTE_OK)
        status = remember(c, value, len);
    return status;
}

const ote_meta_ops_t ote_meta_redis_ops = OTE_META_OPS(redis);

#else /* !HAVE_REDIS */

const ote_meta_ops_t ote_meta_redis_ops = {.name = NULL};

#endif
