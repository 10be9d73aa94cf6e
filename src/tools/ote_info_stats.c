/*
 * ote_info --stats HOST:PORT: fetch /metrics from an engine's metrics
 * endpoint (OTE_METRICS_ADDR) and print the samples, or only those that
 * are not zero. A plain HTTP/1.0 GET; the answer must be 200.
 */
#include "base/util.h"

#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define STATS_MAX (64u << 20) /* a larger answer is not an endpoint's */

int ote_info_stats(const char *addr, bool nonzero, FILE *out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char req[512], *buf = NULL, *body, *line, *save = NULL;
    size_t got = 0, cap = 0;
    int fd = -1, code = 0, rc = 1;
    uint64_t deadline;

    if (ote_sockaddr_parse(addr, &ss, &len) != OTE_OK || ote_sockaddr_port((struct sockaddr *)&ss) == 0) {
        fprintf(stderr, "ote_info: --stats %s: expected HOST:PORT of a metrics endpoint\n", addr);
        return 2;
    }
    if (ote_socket_connect(&ss, len, 5000, &fd) != OTE_OK) {
        fprintf(stderr, "ote_info: --stats: cannot connect to %s\n", addr);
        return 1;
    }
    snprintf(req, sizeof(req), "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
    /* The whole answer within 10 s: each recv waits at most 1 s, then the deadline is looked at. */
    deadline = ote_time_ns() + 10000000000ull;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){.tv_sec = 1}, sizeof(struct timeval));
    if (ote_socket_send_all(fd, req, strlen(req), ote_time_ns() + 5000000000ull) != OTE_OK)
        goto out;
    for (;;) {
        ssize_t n;

        if (got + 1 >= cap) {
            char *b;

            if (cap >= STATS_MAX) {
                fprintf(stderr, "ote_info: --stats: answer over %u bytes\n", STATS_MAX);
                goto out;
            }
            cap = cap ? 2 * cap : 65536;
            b   = realloc(buf, cap);
            if (b == NULL)
                goto out;
            buf = b;
        }
        if (ote_time_ns() > deadline) {
            fprintf(stderr, "ote_info: --stats: %s did not answer within 10 s\n", addr);
            goto out;
        }
        n = recv(fd, buf + got, cap - got - 1, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n < 0) {
            fprintf(stderr, "ote_info: --stats: connection to %s failed\n", addr);
            goto out;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    body = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1 || body == NULL || code != 200) {
        fprintf(stderr, "ote_info: --stats: %s answered %d, not a metrics page\n", addr, code);
        goto out;
    }
    for (line = strtok_r(body + 4, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        const char *sp = strrchr(line, ' ');

        if (nonzero && (line[0] == '#' || (sp != NULL && strtod(sp + 1, NULL) == 0)))
            continue;
        fprintf(out, "%s\n", line);
    }
    rc = 0;
out:
    ote_fd_close(fd);
    free(buf);
    return rc;
}
