#include "auth.h"

#include "log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef HAVE_CRYPTO
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

#define AUTH_LABEL     "OTE-AUTH-1"
#define AUTH_LABEL_LEN (sizeof(AUTH_LABEL) - 1)

struct ote_auth_peer {
    char ip[64];
    long count;
};

bool ote_auth_supported(void)
{
#ifdef HAVE_CRYPTO
    return true;
#else
    return false;
#endif
}

static void wipe(void *p, size_t len)
{
#ifdef HAVE_CRYPTO
    OPENSSL_cleanse(p, len);
#else
    volatile uint8_t *v = p;

    while (len--)
        *v++ = 0;
#endif
}

ote_status_t ote_auth_set_key(ote_auth_t *a, const void *key, size_t len)
{
    if (len > OTE_AUTH_KEY_MAX)
        return OTE_ERR_INVALID_PARAM;
    if (len > 0 && !ote_auth_supported()) {
        ote_error("OTE_AUTH_KEY is set but this build has no libcrypto: cannot authenticate");
        return OTE_ERR_UNSUPPORTED;
    }
    wipe(a->key, sizeof(a->key));
    if (len > 0)
        memcpy(a->key, key, len);
    a->key_len = len;
    a->enabled = len > 0;
    return OTE_OK;
}

/* First line of the key file, without its line end. */
static ote_status_t read_key_file(const char *path, uint8_t *key, size_t *len_p)
{
    struct stat st;
    size_t len;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        ote_error("OTE_AUTH_KEY_FILE '%s': %s", path, strerror(errno));
        return OTE_ERR_INVALID_PARAM;
    }
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        ote_warn("OTE_AUTH_KEY_FILE '%s' is readable by other users", path);
    len = fread(key, 1, OTE_AUTH_KEY_MAX, f);
    fclose(f);
    for (size_t i = 0; i < len; i++) {
        if (key[i] == '\n' || key[i] == '\r') {
            len = i;
            break;
        }
    }
    if (len == 0 || len == OTE_AUTH_KEY_MAX) {
        ote_error("OTE_AUTH_KEY_FILE '%s': first line must hold 1..%d bytes", path,
                  OTE_AUTH_KEY_MAX - 1);
        wipe(key, OTE_AUTH_KEY_MAX);
        return OTE_ERR_INVALID_PARAM;
    }
    *len_p = len;
    return OTE_OK;
}

ote_status_t ote_auth_create(const ote_auth_params_t *params, ote_auth_t **auth_p)
{
    static atomic_bool warned;
    const char *key  = params->key && params->key[0] ? params->key : NULL;
    const char *file = params->key_file && params->key_file[0] ? params->key_file : NULL;
    uint8_t buf[OTE_AUTH_KEY_MAX];
    size_t len = 0;
    ote_status_t status;
    ote_auth_t *a;

    if (key && file) {
        ote_error("set OTE_AUTH_KEY or OTE_AUTH_KEY_FILE, not both");
        return OTE_ERR_INVALID_PARAM;
    }
    if ((key || file) && !ote_auth_supported()) {
        ote_error("%s is set but this build has no libcrypto: cannot authenticate",
                  key ? "OTE_AUTH_KEY" : "OTE_AUTH_KEY_FILE");
        return OTE_ERR_UNSUPPORTED;
    }
    if (key) {
        len = strlen(key);
        if (len >= OTE_AUTH_KEY_MAX) {
            ote_error("OTE_AUTH_KEY is longer than %d bytes", OTE_AUTH_KEY_MAX - 1);
            return OTE_ERR_INVALID_PARAM;
        }
        memcpy(buf, key, len);
    } else if (file) {
        status = read_key_file(file, buf, &len);
        if (status != OTE_OK)
            return status;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        wipe(buf, sizeof(buf));
        return OTE_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->max_conns            = params->max_conns;
    a->max_conns_per_peer   = params->max_conns_per_peer;
    a->handshake_timeout_ms = params->handshake_timeout_ms;
    status = ote_auth_set_key(a, buf, len);
    wipe(buf, sizeof(buf));
    if (status != OTE_OK) {
        ote_auth_destroy(a);
        return status;
    }
    if (a->enabled && a->key_len < 16)
        ote_warn("the authentication key is shorter than 16 bytes: easy to guess");
    if (!a->enabled && !atomic_exchange(&warned, true))
        ote_warn("no OTE_AUTH_KEY: this engine accepts any peer that can reach it, and such a "
                 "peer may read and write every region registered for remote access");
    *auth_p = a;
    return OTE_OK;
}

void ote_auth_destroy(ote_auth_t *a)
{
    if (a == NULL)
        return;
    wipe(a->key, sizeof(a->key));
    free(a->peers);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

void ote_auth_session_init(ote_auth_session_t *s, ote_auth_channel_t channel)
{
    memset(s, 0, sizeof(*s));
    s->channel = channel;
    s->state   = OTE_AUTH_STATE_START;
}

ote_status_t ote_auth_mac(const ote_auth_t *a, ote_auth_channel_t channel, ote_auth_role_t role,
                          const uint8_t *nonce_i, const uint8_t *nonce_t, uint8_t *mac)
{
#ifdef HAVE_CRYPTO
    uint8_t msg[AUTH_LABEL_LEN + 2 + 2 * OTE_AUTH_NONCE_LEN];
    unsigned mac_len = 0;

    if (!a->enabled)
        return OTE_ERR_INVALID_PARAM;
    memcpy(msg, AUTH_LABEL, AUTH_LABEL_LEN);
    msg[AUTH_LABEL_LEN]     = (uint8_t)channel;
    msg[AUTH_LABEL_LEN + 1] = (uint8_t)role;
    memcpy(msg + AUTH_LABEL_LEN + 2, nonce_i, OTE_AUTH_NONCE_LEN);
    memcpy(msg + AUTH_LABEL_LEN + 2 + OTE_AUTH_NONCE_LEN, nonce_t, OTE_AUTH_NONCE_LEN);
    if (HMAC(EVP_sha256(), a->key, (int)a->key_len, msg, sizeof(msg), mac, &mac_len) == NULL ||
        mac_len != OTE_AUTH_MAC_LEN)
        return OTE_ERR_IO;
    return OTE_OK;
#else
    (void)a; (void)channel; (void)role; (void)nonce_i; (void)nonce_t; (void)mac;
    return OTE_ERR_UNSUPPORTED;
#endif
}

ote_status_t ote_auth_hmac(const ote_auth_t *a, const void *msg, size_t len, uint8_t *mac)
{
#ifdef HAVE_CRYPTO
    unsigned mac_len = 0;

    if (!a->enabled)
        return OTE_ERR_INVALID_PARAM;
    if (HMAC(EVP_sha256(), a->key, (int)a->key_len, msg, len, mac, &mac_len) == NULL ||
        mac_len != OTE_AUTH_MAC_LEN)
        return OTE_ERR_IO;
    return OTE_OK;
#else
    (void)a; (void)msg; (void)len; (void)mac;
    return OTE_ERR_UNSUPPORTED;
#endif
}

bool ote_auth_mac_equal(const uint8_t *x, const uint8_t *y)
{
#ifdef HAVE_CRYPTO
    return CRYPTO_memcmp(x, y, OTE_AUTH_MAC_LEN) == 0;
#else
    (void)x; (void)y;
    return false;
#endif
}

static ote_status_t random_nonce(uint8_t *nonce)
{
#ifdef HAVE_CRYPTO
    if (RAND_bytes(nonce, OTE_AUTH_NONCE_LEN) != 1) {
        ote_error("authentication: no random bytes from libcrypto");
        return OTE_ERR_IO;
    }
    return OTE_OK;
#else
    (void)nonce;
    return OTE_ERR_UNSUPPORTED;
#endif
}

ote_status_t ote_auth_initiator_hello(const ote_auth_t *a, ote_auth_session_t *s, uint8_t *hello)
{
    ote_status_t status;

    if (!a->enabled || s->state != OTE_AUTH_STATE_START)
        return OTE_ERR_INVALID_PARAM;
    status = random_nonce(s->nonce_i);
    if (status != OTE_OK)
        return status;
    memcpy(hello, s->nonce_i, OTE_AUTH_NONCE_LEN);
    s->state = OTE_AUTH_STATE_HELLO;
    return OTE_OK;
}

/*
 * A message of the handshake, expected in state want: out of turn is
 * INVALID_PARAM; from here the session has failed until the step ends
 * well, and a message that is not msg_len bytes is PROTOCOL.
 */
static ote_status_t step_begin(const ote_auth_t *a, ote_auth_session_t *s,
                               ote_auth_state_t want, const uint8_t *msg, size_t len,
                               size_t msg_len)
{
    if (!a->enabled || s->state != want)
        return OTE_ERR_INVALID_PARAM;
    s->state = OTE_AUTH_STATE_FAILED;
    if (msg == NULL || len != msg_len)
        return OTE_ERR_PROTOCOL;
    return OTE_OK;
}

/* The peer's MAC (as role) over the session's nonces is mac: else AUTH. */
static ote_status_t mac_check(const ote_auth_t *a, const ote_auth_session_t *s,
                              ote_auth_role_t role, const uint8_t *mac)
{
    uint8_t expect[OTE_AUTH_MAC_LEN];
    ote_status_t status = ote_auth_mac(a, s->channel, role, s->nonce_i, s->nonce_t, expect);

    if (status != OTE_OK)
        return status;
    return ote_auth_mac_equal(expect, mac) ? OTE_OK : OTE_ERR_AUTH;
}

ote_status_t ote_auth_initiator_proof(const ote_auth_t *a, ote_auth_session_t *s,
                                      const uint8_t *tproof, size_t len, uint8_t *iproof)
{
    ote_status_t status = step_begin(a, s, OTE_AUTH_STATE_HELLO, tproof, len,
                                     OTE_AUTH_TPROOF_LEN);

    if (status != OTE_OK)
        return status;
    memcpy(s->nonce_t, tproof, OTE_AUTH_NONCE_LEN);
    status = mac_check(a, s, OTE_AUTH_ROLE_TARGET, tproof + OTE_AUTH_NONCE_LEN);
    if (status != OTE_OK)
        return status;
    status = ote_auth_mac(a, s->channel, OTE_AUTH_ROLE_INITIATOR, s->nonce_i, s->nonce_t, iproof);
    if (status != OTE_OK)
        return status;
    s->state = OTE_AUTH_STATE_DONE;
    return OTE_OK;
}

ote_status_t ote_auth_initiator_run(const ote_auth_t *a, ote_auth_channel_t channel,
                                    ote_auth_exchange_t exchange, void *arg, const char *who)
{
    uint8_t hello[OTE_AUTH_HELLO_LEN], tproof[OTE_AUTH_TPROOF_LEN];
    uint8_t iproof[OTE_AUTH_IPROOF_LEN];
    ote_auth_session_t s;
    ote_status_t status, remote = OTE_OK;
    bool done = false;

    ote_auth_session_init(&s, channel);
    status = ote_auth_initiator_hello(a, &s, hello);
    if (status == OTE_OK)
        status = exchange(arg, false, hello, sizeof(hello), tproof, &done, &remote);
    if (status != OTE_OK)
        return status;
    /*
     * Refused before any proof: the target has no key (a target with one
     * answers a HELLO with its proof, and turns away connections it has no
     * room for by closing them).
     */
    if (done) {
        if (remote == OTE_OK)
            return OTE_ERR_PROTOCOL;
        ote_error("%s refused the handshake before any proof: the peer has no OTE_AUTH_KEY "
                  "and this engine has one; set the same key on both sides (or on neither)",
                  who);
        return OTE_ERR_AUTH;
    }
    status = ote_auth_initiator_proof(a, &s, tproof, sizeof(tproof), iproof);
    if (status == OTE_ERR_AUTH)
        ote_error("%s does not hold our OTE_AUTH_KEY", who);
    if (status == OTE_OK)
        status = exchange(arg, true, iproof, sizeof(iproof), NULL, &done, &remote);
    if (status != OTE_OK)
        return status;
    if (!done)
        return OTE_ERR_PROTOCOL;
    if (remote != OTE_OK) {
        ote_error("%s refused our OTE_AUTH_KEY", who);
        return OTE_ERR_AUTH;
    }
    return OTE_OK;
}

void ote_auth_log_key_missing(const char *who)
{
    ote_error("%s: the peer requires OTE_AUTH_KEY and this engine has none; set OTE_AUTH_KEY "
              "(or OTE_AUTH_KEY_FILE) to the peer's key", who);
}

ote_status_t ote_auth_target_hello(const ote_auth_t *a, ote_auth_session_t *s,
                                   const uint8_t *hello, size_t len, uint8_t *tproof)
{
    ote_status_t status = step_begin(a, s, OTE_AUTH_STATE_START, hello, len, OTE_AUTH_HELLO_LEN);

    if (status != OTE_OK)
        return status;
    memcpy(s->nonce_i, hello, OTE_AUTH_NONCE_LEN);
    status = random_nonce(s->nonce_t);
    if (status != OTE_OK)
        return status;
    /*
     * An initiator that echoes our own nonce back is replaying or
     * reflecting; it could not be an honest peer with its own randomness.
     */
    if (memcmp(s->nonce_i, s->nonce_t, OTE_AUTH_NONCE_LEN) == 0)
        return OTE_ERR_AUTH;
    memcpy(tproof, s->nonce_t, OTE_AUTH_NONCE_LEN);
    status = ote_auth_mac(a, s->channel, OTE_AUTH_ROLE_TARGET, s->nonce_i, s->nonce_t,
                          tproof + OTE_AUTH_NONCE_LEN);
    if (status != OTE_OK)
        return status;
    s->state = OTE_AUTH_STATE_HELLO;
    return OTE_OK;
}

ote_status_t ote_auth_target_proof(const ote_auth_t *a, ote_auth_session_t *s,
                                   const uint8_t *iproof, size_t len)
{
    ote_status_t status = step_begin(a, s, OTE_AUTH_STATE_HELLO, iproof, len,
                                     OTE_AUTH_IPROOF_LEN);

    if (status == OTE_OK)
        status = mac_check(a, s, OTE_AUTH_ROLE_INITIATOR, iproof);
    if (status != OTE_OK)
        return status;
    s->state = OTE_AUTH_STATE_DONE;
    return OTE_OK;
}

/* ---- connection admission ------------------------------------------------ */

static ote_auth_peer_t *peer_find(ote_auth_t *a, const char *ip)
{
    for (size_t i = 0; i < a->num_peers; i++) {
        if (strcmp(a->peers[i].ip, ip) == 0)
            return &a->peers[i];
    }
    return NULL;
}

ote_status_t ote_auth_conn_admit(ote_auth_t *a, const char *ip)
{
    ote_status_t status = OTE_OK;
    ote_auth_peer_t *p;

    pthread_mutex_lock(&a->lock);
    p = peer_find(a, ip);
    if (a->max_conns > 0 && a->num_conns >= a->max_conns) {
        ote_warn("connection from %s refused: OTE_MAX_CONNS (%ld) reached", ip, a->max_conns);
        status = OTE_ERR_BUSY;
        goto out;
    }
    if (p != NULL && a->max_conns_per_peer > 0 && p->count >= a->max_conns_per_peer) {
        ote_warn("connection from %s refused: OTE_MAX_CONNS_PER_PEER (%ld) reached", ip,
                 a->max_conns_per_peer);
        status = OTE_ERR_BUSY;
        goto out;
    }
    if (p == NULL) {
        if (a->num_peers == a->cap_peers) {
            size_t ncap = a->cap_peers ? 2 * a->cap_peers : 16;
            ote_auth_peer_t *n = realloc(a->peers, ncap * sizeof(*n));

            if (n == NULL) {
                status = OTE_ERR_NO_MEMORY;
                goto out;
            }
            a->peers     = n;
            a->cap_peers = ncap;
        }
        p = &a->peers[a->num_peers++];
        snprintf(p->ip, sizeof(p->ip), "%s", ip);
        p->count = 0;
    }
    p->count++;
    a->num_conns++;
out:
    pthread_mutex_unlock(&a->lock);
    return status;
}

void ote_auth_conn_release(ote_auth_t *a, const char *ip)
{
    ote_auth_peer_t *p;

    pthread_mutex_lock(&a->lock);
    p = peer_find(a, ip);
    if (p != NULL) {
        a->num_conns--;
        if (--p->count == 0)
            *p = a->peers[--a->num_peers];
    }
    pthread_mutex_unlock(&a->lock);
}
