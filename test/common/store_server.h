/*
 * Metadata store servers for tests: an etcd or a redis-server of its own,
 * on free loopback ports, with its data in a temporary directory, never
 * the system's service. Started, killed, restarted (empty or not) and
 * stopped by the test; it dies with the test process.
 */
#ifndef OTE_TEST_STORE_SERVER_H
#define OTE_TEST_STORE_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    char     kind[8];       /* "etcd" or "redis" */
    pid_t    pid;           /* 0 while not running */
    unsigned port;          /* client port */
    unsigned peer_port;     /* etcd's peer port */
    char     dir[256];      /* temporary directory: data and log */
    char     password[64];  /* redis requirepass, or empty */
    char     uri[512];      /* OTE_METADATA for this server */
} ote_test_store_t;

/*
 * Start a server of kind ("etcd", "redis"; password: redis only, may be
 * NULL) and wait until it serves requests (15 s at most). 0 on success,
 * 77 when its binary is not installed, -1 otherwise (said on stderr).
 */
int  ote_test_store_start(ote_test_store_t *s, const char *kind, const char *password);
/* SIGKILL now and reap. */
void ote_test_store_kill(ote_test_store_t *s);
/* Start it again on the same ports; with wipe, its data is gone first. 0 on success. */
int  ote_test_store_restart(ote_test_store_t *s, bool wipe);
/* Stop it and remove its directory. */
void ote_test_store_stop(ote_test_store_t *s);

#endif
