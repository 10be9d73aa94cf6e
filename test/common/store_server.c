#include "store_server.h"

#include "core/meta/meta.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static unsigned free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len         = sizeof(sa);
    int fd                = socket(AF_INET, SOCK_STREAM, 0);
    unsigned port         = 0;

    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static const char *server_binary(const char *kind)
{
    return strcmp(kind, "etcd") == 0 ? "etcd" : "redis-server";
}

static bool in_path(const char *bin)
{
    const char *path = getenv("PATH");
    char buf[4096], *save = NULL, *dir;

    snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
    for (dir = strtok_r(buf, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        char full[4400];

        snprintf(full, sizeof(full), "%s/%s", dir, bin);
        if (access(full, X_OK) == 0)
            return true;
    }
    return false;
}

static int spawn(ote_test_store_t *s)
{
    char port[16], peer[16], client_url[64], peer_url[64], cluster[96], data[300], log[300];
    pid_t pid;

    snprintf(port, sizeof(port), "%u", s->port);
    snprintf(peer, sizeof(peer), "%u", s->peer_port);
    snprintf(client_url, sizeof(client_url), "http://127.0.0.1:%u", s->port);
    snprintf(peer_url, sizeof(peer_url), "http://127.0.0.1:%u", s->peer_port);
    snprintf(cluster, sizeof(cluster), "t=%s", peer_url);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(log, sizeof(log), "%s/log", s->dir);
    mkdir(data, 0700);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (strcmp(s->kind, "etcd") == 0) {
            execlp("etcd", "etcd", "--name", "t", "--data-dir", data, "--listen-client-urls",
                   client_url, "--advertise-client-urls", client_url, "--listen-peer-urls",
                   peer_url, "--initial-advertise-peer-urls", peer_url, "--initial-cluster",
                   cluster, "--log-level", "warn", (char *)NULL);
        } else if (s->password[0]) {
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--dir", data, "--save", "", "--appendonly", "no", "--requirepass",
                   s->password, (char *)NULL);
        } else {
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1",
                   "--dir", data, "--save", "", "--appendonly", "no", (char *)NULL);
        }
        _exit(127);
    }
    s->pid = pid;
    return 0;
}

/* Until a read through the library's own client gets an answer (NOT_FOUND). */
static int wait_ready(ote_test_store_t *s)
{
    ote_meta_params_t mp = {.uri = s->uri, .prefix = "orbitte-test/", .ttl_s = 10,
                            .timeout_ms = 1000};
    struct timespec t0, t;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        ote_meta_t *m = NULL;
        ote_desc_t *d = NULL;
        int status;

        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            fprintf(stderr, "store_server: %s exited (see %s/log)\n", s->kind, s->dir);
            s->pid = 0;
            return -1;
        }
        if (ote_meta_create(&mp, &m) == OTE_OK) {
            ote_status_t st = ote_meta_lookup(m, "probe", &d);

            ote_meta_destroy(m);
            if (st == OTE_ERR_NOT_FOUND)
                return 0;
        }
        usleep(100 * 1000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec < 15);
    fprintf(stderr, "store_server: %s on port %u not ready after 15 s (see %s/log)\n", s->kind,
            s->port, s->dir);
    return -1;
}

int ote_test_store_start(ote_test_store_t *s, const char *kind, const char *password)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->kind, sizeof(s->kind), "%s", kind);
    if (!in_path(server_binary(kind))) {
        fprintf(stderr, "store_server: %s is not installed (contrib/install-deps.sh)\n",
                server_binary(kind));
        return 77;
    }
    snprintf(s->dir, sizeof(s->dir), "/tmp/ote-store-XXXXXX");
    if (mkdtemp(s->dir) == NULL)
        return -1;
    s->port      = free_port();
    s->peer_port = free_port();
    if (password != NULL)
        snprintf(s->password, sizeof(s->password), "%s", password);
    if (strcmp(kind, "etcd") == 0)
        snprintf(s->uri, sizeof(s->uri), "etcd://127.0.0.1:%u", s->port);
    else if (s->password[0])
        snprintf(s->uri, sizeof(s->uri), "redis://:%s@127.0.0.1:%u", s->password, s->port);
    else
        snprintf(s->uri, sizeof(s->uri), "redis://127.0.0.1:%u", s->port);
    if (spawn(s) != 0 || wait_ready(s) != 0) {
        ote_test_store_stop(s);
        return -1;
    }
    return 0;
}

void ote_test_store_kill(ote_test_store_t *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
}

int ote_test_store_restart(ote_test_store_t *s, bool wipe)
{
    char cmd[400];

    ote_test_store_kill(s);
    if (wipe) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/data'", s->dir);
        if (system(cmd) != 0)
            return -1;
    }
    if (spawn(s) != 0)
        return -1;
    return wait_ready(s);
}

void ote_test_store_stop(ote_test_store_t *s)
{
    char cmd[400];

    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 50; i++) {
            if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                s->pid = 0;
                break;
            }
            usleep(100 * 1000);
        }
        ote_test_store_kill(s);
    }
    if (s->dir[0]) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "store_server: could not remove %s\n", s->dir);
        s->dir[0] = '\0';
    }
}
