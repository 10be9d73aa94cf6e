/*
 * Peer admission: who may connect, and how many connections each may hold.
 *
 * Authentication. With OTE_AUTH_KEY (or OTE_AUTH_KEY_FILE) every control
 * and data connection starts with a mutual challenge-response before
 * anything else crosses it:
 *
 *   initiator -> target  HELLO  nonce_i                       (32 bytes)
 *   target -> initiator  PROOF  nonce_t, mac(TARGET)          (64 bytes)
 *   initiator -> target  PROOF  mac(INITIATOR)                (32 bytes)
 *   target -> initiator  DONE   status (OK or AUTH)
 *
 *   mac(role) = HMAC-SHA256(key, "OTE-AUTH-1" | channel | role | nonce_i | nonce_t)
 *
 * Both sides contribute a fresh random nonce, so no proof can be replayed;
 * the role is inside the MAC, so a proof reflected back at its sender
 * fails; the channel (control or tcp data) is inside it too, so a proof from
 * one protocol is useless on the other. Proofs are compared in constant
 * time. HMAC and randomness come from OpenSSL's libcrypto. This proves the
 * peer holds the key when the connection opens; it does not encrypt or
 * protect the bytes that follow (see docs/security.md).
 *
 * Framing is the caller's: the control plane carries these payloads in
 * OTE_CTL_AUTH_* messages, the tcp component in OTE_STREAM_AUTH_* messages.
 */
#ifndef OTE_BASE_AUTH_H
#define OTE_BASE_AUTH_H

#include <ote/ote.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OTE_AUTH_NONCE_LEN 32
#define OTE_AUTH_MAC_LEN   32
#define OTE_AUTH_HELLO_LEN OTE_AUTH_NONCE_LEN                    /* initiator's hello */
#define OTE_AUTH_TPROOF_LEN (OTE_AUTH_NONCE_LEN + OTE_AUTH_MAC_LEN) /* target's proof  */
#define OTE_AUTH_IPROOF_LEN OTE_AUTH_MAC_LEN                     /* initiator's proof */
#define OTE_AUTH_KEY_MAX   4096

/* What an engine's admission state is made of (engine-wide settings). */
typedef struct {
    const char *key;                  /* OTE_AUTH_KEY; NULL or "": none      */
    const char *key_file;             /* OTE_AUTH_KEY_FILE; NULL or "": none */
    long        max_conns;            /* OTE_MAX_CONNS                       */
    long        max_conns_per_peer;   /* OTE_MAX_CONNS_PER_PEER              */
    long        handshake_timeout_ms; /* OTE_HANDSHAKE_TIMEOUT_MS            */
} ote_auth_params_t;

typedef enum {
    OTE_AUTH_CHANNEL_CTL = 1, /* control plane          */
    OTE_AUTH_CHANNEL_TCP = 2, /* native tcp data stream */
} ote_auth_channel_t;

typedef enum {
    OTE_AUTH_ROLE_TARGET    = 1,
    OTE_AUTH_ROLE_INITIATOR = 2,
} ote_auth_role_t;

/* Per-connection handshake state, either side. */
typedef enum {
    OTE_AUTH_STATE_START = 0, /* target: waiting for HELLO; initiator: HELLO not sent */
    OTE_AUTH_STATE_HELLO,     /* target: PROOF sent; initiator: HELLO sent             */
    OTE_AUTH_STATE_DONE,      /* proven                                                */
    OTE_AUTH_STATE_FAILED,
} ote_auth_state_t;

typedef struct {
    ote_auth_channel_t channel;
    ote_auth_state_t   state;
    uint8_t            nonce_i[OTE_AUTH_NONCE_LEN];
    uint8_t            nonce_t[OTE_AUTH_NONCE_LEN];
} ote_auth_session_t;

typedef struct ote_auth_peer ote_auth_peer_t;

/* An engine's admission state: the key, and connection counts by peer address. */
typedef struct ote_auth {
    bool             enabled;
    uint8_t          key[OTE_AUTH_KEY_MAX];
    size_t           key_len;
    long             max_conns;          /* OTE_MAX_CONNS, control and data together */
    long             max_conns_per_peer; /* OTE_MAX_CONNS_PER_PEER                   */
    long             handshake_timeout_ms;
    pthread_mutex_t  lock;
    long             num_conns;
    ote_auth_peer_t *peers;
    size_t           num_peers, cap_peers;
} ote_auth_t;

/*
 * Take the key (OTE_AUTH_KEY, or the first line of OTE_AUTH_KEY_FILE; not
 * both) and the connection limits. A key without
 * libcrypto in this build is OTE_ERR_UNSUPPORTED. Without a key, logs once
 * per process that any peer is accepted.
 */
ote_status_t ote_auth_create(const ote_auth_params_t *params, ote_auth_t **auth_p);
/* The key is wiped. */
void         ote_auth_destroy(ote_auth_t *auth);
/* Whether this build can authenticate (libcrypto present). */
bool         ote_auth_supported(void);
/* Set a key directly (tests, fuzzers); len 0 disables authentication. */
ote_status_t ote_auth_set_key(ote_auth_t *auth, const void *key, size_t len);

/* Start a session. */
void ote_auth_session_init(ote_auth_session_t *s, ote_auth_channel_t channel);

/* Initiator: a fresh nonce into hello (OTE_AUTH_HELLO_LEN bytes). */
ote_status_t ote_auth_initiator_hello(const ote_auth_t *auth, ote_auth_session_t *s,
                                      uint8_t *hello);
/*
 * Initiator: check the target's proof (OTE_AUTH_TPROOF_LEN bytes) and write
 * ours (OTE_AUTH_IPROOF_LEN bytes). OTE_ERR_AUTH if the target does not
 * hold the key, OTE_ERR_PROTOCOL if the message is malformed.
 */
ote_status_t ote_auth_initiator_proof(const ote_auth_t *auth, ote_auth_session_t *s,
                                      const uint8_t *tproof, size_t len, uint8_t *iproof);
/*
 * One round trip of an initiator's handshake on its channel: send msg (the
 * HELLO, or our PROOF when proof), then take the target's answer: its PROOF
 * (OTE_AUTH_TPROOF_LEN bytes into tproof; only after a HELLO) or its DONE,
 * *done_p set and *remote_p the status it sent. Anything else: an error.
 */
typedef ote_status_t (*ote_auth_exchange_t)(void *arg, bool proof, const uint8_t *msg,
                                            size_t len, uint8_t *tproof, bool *done_p,
                                            ote_status_t *remote_p);
/*
 * Initiator: the whole handshake through exchange. OTE_ERR_AUTH when the
 * target does not hold our key or refuses ours (logged, as "who does not
 * hold our ..."), or refuses the handshake before any proof because it has
 * no key (logged with what to do), OTE_ERR_PROTOCOL when it answers out of
 * turn.
 */
ote_status_t ote_auth_initiator_run(const ote_auth_t *auth, ote_auth_channel_t channel,
                                    ote_auth_exchange_t exchange, void *arg, const char *who);
/*
 * Initiator without a key: a peer answered one of its requests with
 * OTE_ERR_AUTH (it has a key and wants the handshake first). Logs, as an
 * error, that who (e.g. "segment 'x'") requires OTE_AUTH_KEY and this
 * engine has none, and what to set.
 */
void         ote_auth_log_key_missing(const char *who);
/* Target: take the HELLO, answer with our proof (OTE_AUTH_TPROOF_LEN bytes). */
ote_status_t ote_auth_target_hello(const ote_auth_t *auth, ote_auth_session_t *s,
                                   const uint8_t *hello, size_t len, uint8_t *tproof);
/* Target: check the initiator's proof. OTE_OK: the peer is authenticated. */
ote_status_t ote_auth_target_proof(const ote_auth_t *auth, ote_auth_session_t *s,
                                   const uint8_t *iproof, size_t len);

/* HMAC-SHA256(key, label | channel | role | nonce_i | nonce_t), exposed for tests. */
ote_status_t ote_auth_mac(const ote_auth_t *auth, ote_auth_channel_t channel,
                          ote_auth_role_t role, const uint8_t *nonce_i, const uint8_t *nonce_t,
                          uint8_t *mac);

/* HMAC-SHA256(key, msg) for other uses of the key (signed metadata records). */
ote_status_t ote_auth_hmac(const ote_auth_t *auth, const void *msg, size_t len, uint8_t *mac);
/* Constant-time comparison of two OTE_AUTH_MAC_LEN-byte MACs. */
bool         ote_auth_mac_equal(const uint8_t *a, const uint8_t *b);

/*
 * Connection admission, shared by the control listener and every tcp
 * listener of the engine: BUSY (and a log line) when OTE_MAX_CONNS or
 * OTE_MAX_CONNS_PER_PEER is reached. ip is the numeric peer address.
 */
ote_status_t ote_auth_conn_admit(ote_auth_t *auth, const char *ip);
void         ote_auth_conn_release(ote_auth_t *auth, const char *ip);

#endif
