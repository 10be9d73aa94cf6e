/*
 * Reading one sample of an engine's series through ote_engine_stats(), for
 * tests that compare them with what they did.
 */
#ifndef OTE_MP_STATS_H
#define OTE_MP_STATS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <ote/ote.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    const char *name, *labels;
    double      value;
    int         found;
} mp_stat_find_t;

static int mp_stat_cb(void *arg, const ote_stat_t *s)
{
    mp_stat_find_t *f = arg;

    if (strcmp(s->name, f->name) == 0 && strcmp(s->labels, f->labels) == 0) {
        f->value = s->value;
        f->found++;
    }
    return 0;
}

/* The value of name{labels} (labels as the exposition writes them, without engine); -1 absent. */
static inline double mp_stat(ote_engine_h e, const char *name, const char *labels)
{
    mp_stat_find_t f = {.name = name, .labels = labels};

    if (ote_engine_stats(e, mp_stat_cb, &f) != OTE_OK || f.found != 1)
        return -1;
    return f.value;
}

static int mp_stat_sum_cb(void *arg, const ote_stat_t *s)
{
    mp_stat_find_t *f = arg;

    if (strcmp(s->name, f->name) == 0) {
        f->value += s->value;
        f->found++;
    }
    return 0;
}

/* The sum of every sample of name, whatever its labels; -1 when there is none. */
static inline double mp_stat_sum(ote_engine_h e, const char *name)
{
    mp_stat_find_t f = {.name = name};

    if (ote_engine_stats(e, mp_stat_sum_cb, &f) != OTE_OK || f.found == 0)
        return -1;
    return f.value;
}

/* The label a status has in the failure series (independent of the library's table). */
static inline const char *mp_status_label(ote_status_t s)
{
    static const char *const names[] = {
        "ok",           "invalid_param", "no_memory",      "not_registered",
        "out_of_bounds", "access",       "unreachable",    "not_found",
        "timeout",      "canceled",      "remote_disconnect", "busy",
        "io",           "unsupported",   "protocol",       "auth",
        "exists",       "peer_restarted", "no_device",     "store_unavailable",
        "remote_not_registered",
    };
    int i = -(int)s;

    return (i > 0 && i < (int)(sizeof(names) / sizeof(names[0]))) ? names[i] : "other";
}

/*
 * GET path from addr ("ip:port") over HTTP/1.0: the body (malloc'd), NULL
 * on any failure. With code NULL only a 200 answer's body is returned;
 * else *code is the answer's status and its body is returned whatever it is.
 */
static inline char *mp_http_get(const char *addr, const char *path, int *code_p)
{
    char host[64], req[256], *buf = NULL, *body = NULL;
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sin = {.sin_family = AF_INET};
    size_t len = 0, cap = 0;
    int fd, code = 0;

    if (colon == NULL)
        return NULL;
    snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        return NULL;
    sin.sin_port = htons((uint16_t)atoi(colon + 1));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        send(fd, req, strlen(req), 0) != (ssize_t)strlen(req)) {
        close(fd);
        return NULL;
    }
    for (;;) {
        ssize_t n;

        if (len + 4096 + 1 > cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 65536);

            if (nb == NULL)
                break;
            buf = nb;
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    if (buf != NULL) {
        buf[len] = '\0';
        if (sscanf(buf, "HTTP/1.%*d %d", &code) == 1 && (code == 200 || code_p != NULL) &&
            strstr(buf, "\r\n\r\n") != NULL)
            body = strdup(strstr(buf, "\r\n\r\n") + 4);
        if (code_p != NULL)
            *code_p = code;
    }
    free(buf);
    return body;
}

/* The value of the sample "name{labels}" in an exposition text; -1 when absent. */
static inline double mp_scraped(const char *text, const char *fmt, ...)
{
    char series[512];
    size_t n;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(series, sizeof(series), fmt, ap);
    va_end(ap);
    n = strlen(series);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return -1;
}

#define MP_NSTATUS 21 /* OTE_OK .. OTE_ERR_REMOTE_NOT_REGISTERED */

#endif
