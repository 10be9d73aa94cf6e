/*
 * The hostile peer test (ote_mp_security_hostile.c): its target fixture and
 * the helpers its groups share. The tests live by port: hostile_ctl.c (the
 * control port, authentication, connection limits), hostile_tcp.c (the tcp
 * data port), hostile_cma.c (a native cma target's data port).
 */
#ifndef OTE_TEST_MP_HOSTILE_H
#define OTE_TEST_MP_HOSTILE_H

#include "security_wire.h"
#include "testlib.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define KEY        "hostile-test-cluster-key-0123456789"
#define GUARD      65536
#define REGION_LEN (1u << 20)
#define HS_TIMEOUT_MS 600
/* The target's OTE_XFER_TIMEOUT_MS: how long its answers may stay unread. */
#define STALL_MS "2000"

typedef struct {
    ote_test_target_t t;
    ote_auth_t       *auth;     /* the cluster key, or none */
    ote_desc_t       *desc;
    struct sockaddr_storage data;
    socklen_t         data_len;
    char              guard0[64], guard1[64];
} fixture_t;

extern fixture_t fx;

/* OTE_AUTH_KEY for the engines this process makes: key, or none. */
void     set_key_env(const char *key);
/* The address of the target's region r. */
uint64_t region_addr(int r);
/* The peer reset or closed the connection; pending data is not read. */
bool     reset_within(int fd, int timeout_ms);
/* A connection to the target's data port; data_open: past its HELLO. */
int      data_connect(void);
int      data_open(void);
/* data_open(), with the OTE_STREAM_CAP_* bits of the target's HELLO_ACK. */
int      data_open_caps(uint64_t *caps_p);
/* A control connection past its handshake, or -1. */
int      ctl_open(void);

void test_ctl_truncated_header(void **state);
void test_ctl_truncated_payload(void **state);
void test_ctl_bad_headers(void **state);
void test_ctl_bad_notify(void **state);
void test_ctl_idle(void **state);
void test_ctl_never_reads(void **state);
void test_ctl_unauthenticated(void **state);
void test_conn_limit(void **state);
void test_accept_no_fd(void **state);
void test_tcp_bad_first_message(void **state);
void test_tcp_truncated(void **state);
void test_tcp_wrong_instance(void **state);
void test_tcp_out_of_bounds(void **state);
void test_tcp_bad_after_hello(void **state);
void test_tcp_writev(void **state);
void test_tcp_readv(void **state);
void test_tcp_bad_vector(void **state);
void test_tcp_never_reads(void **state);
void test_tcp_unauthenticated(void **state);
void test_tcp_payload_pieces(void **state);
void test_tcp_payload_early(void **state);
void test_tcp_discard_pieces(void **state);
void test_cma_burst(void **state);
void test_cma_inline(void **state);

#endif
