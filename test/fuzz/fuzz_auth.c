/*
 * Authentication handshake messages, target and initiator side, with the
 * framing of both protocols: malformed messages are refused, and no input
 * ever passes as a proof (a forged proof is a finding). The input's first
 * byte picks the side and framing.
 */
#include "fuzz.h"

#include "base/auth.h"
#include "base/config.h"
#include "core/wire/ctl_msg.h"
#include "uct_ext/stream/stream_wire.h"

#include <string.h>

static ote_auth_t *auth;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char key[] = "fuzz-cluster-key-0123456789abcdef";
    ote_auth_params_t cfg;

    (void)argc;
    (void)argv;
    memset(&cfg, 0, sizeof(cfg));
    if (ote_auth_create(&cfg, &auth) != OTE_OK ||
        (ote_auth_supported() && ote_auth_set_key(auth, key, sizeof(key) - 1) != OTE_OK))
        abort();
    return 0;
}

/* Split "header + payload" framing: tcp header decode, then the payload. */
static const uint8_t *tcp_payload(const uint8_t *p, size_t n, uint8_t type, size_t *len_p)
{
    ote_stream_hdr_t h;

    if (ote_stream_hdr_decode(p, n, 0, &h) != OTE_OK || h.type != type ||
        n < OTE_STREAM_HDR_LEN + h.length)
        return NULL;
    *len_p = (size_t)h.length;
    return p + OTE_STREAM_HDR_LEN;
}

static const uint8_t *ctl_payload(const uint8_t *p, size_t n, uint8_t type, size_t *len_p)
{
    ote_ctl_hdr_t h;
    size_t max;

    if (ote_ctl_hdr_decode(p, n, 1u << 20, &h) != OTE_OK || h.type != type ||
        ote_ctl_request_max_len(h.type, 1u << 20, &max) != OTE_OK || h.length > max ||
        n < OTE_CTL_HDR_LEN + h.length)
        return NULL;
    *len_p = h.length;
    return p + OTE_CTL_HDR_LEN;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t out[OTE_AUTH_TPROOF_LEN], iproof[OTE_AUTH_IPROOF_LEN];
    ote_auth_session_t s;
    const uint8_t *m1, *m2;
    size_t l1 = 0, l2 = 0, half;
    int mode;
    bool tcp;

    if (size < 1 || !auth->enabled)
        return 0;
    mode = data[0] & 1;
    tcp  = (data[0] & 2) != 0;
    data++;
    size--;
    half = size / 2;
    ote_auth_session_init(&s, tcp ? OTE_AUTH_CHANNEL_TCP : OTE_AUTH_CHANNEL_CTL);
    if (mode == 0) {
        /* Target: a hello, then a proof. */
        m1 = tcp ? tcp_payload(data, half, OTE_STREAM_AUTH_HELLO, &l1)
                 : ctl_payload(data, half, OTE_CTL_AUTH_HELLO, &l1);
        m2 = tcp ? tcp_payload(data + half, size - half, OTE_STREAM_AUTH_PROOF, &l2)
                 : ctl_payload(data + half, size - half, OTE_CTL_AUTH_PROOF, &l2);
        if (m1 == NULL) {
            m1 = data;
            l1 = half;
        }
        if (m2 == NULL) {
            m2 = data + half;
            l2 = size - half;
        }
        if (ote_auth_target_hello(auth, &s, m1, l1, out) == OTE_OK) {
            FUZZ_CHECK(l1 == OTE_AUTH_HELLO_LEN);
            FUZZ_CHECK(ote_auth_target_proof(auth, &s, m2, l2) != OTE_OK);
        } else {
            FUZZ_CHECK(ote_auth_target_proof(auth, &s, m2, l2) == OTE_ERR_INVALID_PARAM);
        }
        FUZZ_CHECK(s.state != OTE_AUTH_STATE_DONE);
    } else {
        /* Initiator: our hello, then whatever comes back as the target's proof. */
        FUZZ_CHECK(ote_auth_initiator_hello(auth, &s, out) == OTE_OK);
        m1 = tcp ? tcp_payload(data, size, OTE_STREAM_AUTH_PROOF, &l1)
                 : NULL;
        if (m1 == NULL) {
            m1 = data;
            l1 = size;
        }
        FUZZ_CHECK(ote_auth_initiator_proof(auth, &s, m1, l1, iproof) != OTE_OK);
        FUZZ_CHECK(s.state == OTE_AUTH_STATE_FAILED);
    }
    return 0;
}
