/*
 * The metrics endpoint: GET /metrics (Prometheus text exposition 0.0.4)
 * and GET /health, served by libmicrohttpd on a thread of its own. One
 * endpoint per address in the process: engines that ask for the same
 * address (as written, or the address an endpoint bound) share it, each
 * engine's series carrying its engine label. The registry lock below is
 * the only lock a scrape holds for its whole length, and no data path
 * takes it; engines leave under it, so a scrape never sees a destroyed one.
 */
#include "obs_int.h"
#include "base/log.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef HAVE_MHD
#include <microhttpd.h>
#endif

const char *ote_engine_metrics_addr(ote_engine_h e)
{
    if (e == NULL || ote_engine_facts(e)->obs == NULL ||
        ote_engine_facts(e)->obs->endpoint_addr[0] == '\0')
        return NULL;
    return ote_engine_facts(e)->obs->endpoint_addr;
}

#ifdef HAVE_MHD

/* "port" -> "127.0.0.1:port"; anything else as given. INVALID_PARAM when empty or too long. */
static ote_status_t addr_normalize(const char *in, char *out, size_t len)
{
    size_t i = 0;

    while (in[i] != '\0' && isdigit((unsigned char)in[i]))
        i++;
    if (in[0] != '\0' && in[i] == '\0')
        return (size_t)snprintf(out, len, "127.0.0.1:%s", in) < len ? OTE_OK
                                                                   : OTE_ERR_INVALID_PARAM;
    if (in[0] == '\0' || (size_t)snprintf(out, len, "%s", in) >= len)
        return OTE_ERR_INVALID_PARAM;
    return OTE_OK;
}

typedef struct obs_endpoint {
    char                 asked[96];  /* normalized OTE_METRICS_ADDR that created it */
    char                 bound[96];  /* where it listens */
    struct MHD_Daemon   *daemon;
    int                  fd;
    ote_engine_h        *engines;
    size_t               num_engines, cap_engines;
    struct obs_endpoint *next;
} obs_endpoint_t;

/*
 * Connections an endpoint serves at once; more wait in the listen backlog
 * (or are refused), so clients of the endpoint cannot take the file
 * descriptors the engine's own connections need.
 */
#define OBS_HTTP_CONNS_MAX 32

static pthread_mutex_t  registry_lock = PTHREAD_MUTEX_INITIALIZER;
static obs_endpoint_t  *endpoints;

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned code, const char *type,
                               char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    enum MHD_Result ret;

    if (r == NULL) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, "Allow", "GET, HEAD");
    ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* The exposition of every engine of ep (registry lock held). */
static char *scrape(obs_endpoint_t *ep, size_t *len_p)
{
    ote_obs_snap_t *snaps = calloc(ep->num_engines ? ep->num_engines : 1, sizeof(*snaps));
    const ote_obs_snap_t **ptrs = calloc(ep->num_engines ? ep->num_engines : 1, sizeof(*ptrs));
    char *text = NULL;

    if (snaps != NULL && ptrs != NULL) {
        for (size_t i = 0; i < ep->num_engines; i++) {
            ote_obs_snapshot(ep->engines[i], &snaps[i]);
            ptrs[i] = &snaps[i];
        }
        text = ote_obs_expose(ptrs, ep->num_engines, len_p);
    }
    free(ptrs);
    free(snaps);
    return text;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **con_cls)
{
    obs_endpoint_t *ep = cls;
    static char not_found[] = "not found: GET /metrics or /health\n";
    static char not_allowed[] = "method not allowed\n";
    static char no_memory[] = "out of memory\n";
    char *body;
    size_t len = 0;

    (void)version;
    (void)upload;
    (void)con_cls;
    if (*upload_len != 0) {
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return respond(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
                       strlen(not_allowed), MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") == 0) {
        pthread_mutex_lock(&registry_lock);
        body = scrape(ep, &len);
        pthread_mutex_unlock(&registry_lock);
        if (body == NULL)
            return respond(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", no_memory,
                           strlen(no_memory), MHD_RESPMEM_PERSISTENT);
        return respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
                       MHD_RESPMEM_MUST_FREE);
    }
    if (strcmp(url, "/health") == 0) {
        char buf[64];
        size_t n;

        pthread_mutex_lock(&registry_lock);
        n = ep->num_engines;
        pthread_mutex_unlock(&registry_lock);
        snprintf(buf, sizeof(buf), "ok %zu engine%s\n", n, n == 1 ? "" : "s");
        return respond(conn, MHD_HTTP_OK, "text/plain", buf, strlen(buf),
                       MHD_RESPMEM_MUST_COPY);
    }
    return respond(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found, strlen(not_found),
                   MHD_RESPMEM_PERSISTENT);
}

static ote_status_t endpoint_start(const char *asked, obs_endpoint_t **ep_p)
{
    struct sockaddr_storage ss;
    socklen_t len;
    obs_endpoint_t *ep;
    ote_status_t status;

    status = ote_sockaddr_parse(asked, &ss, &len);
    if (status != OTE_OK) {
        ote_error("OTE_METRICS_ADDR='%s': expected port, host:port or [v6]:port", asked);
        return OTE_ERR_INVALID_PARAM;
    }
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return OTE_ERR_NO_MEMORY;
    snprintf(ep->asked, sizeof(ep->asked), "%s", asked);
    status = ote_socket_listen(&ss, len, &ep->fd);
    if (status != OTE_OK) {
        ote_error("OTE_METRICS_ADDR='%s': cannot listen there (%s)", asked, strerror(errno));
        free(ep);
        return OTE_ERR_IO;
    }
    len = sizeof(ss);
    getsockname(ep->fd, (struct sockaddr *)&ss, &len);
    ote_sockaddr_format((struct sockaddr *)&ss, ep->bound, sizeof(ep->bound));
    ep->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
                                      (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                                  0, NULL, NULL, handle, ep, MHD_OPTION_LISTEN_SOCKET, ep->fd,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                                  MHD_OPTION_CONNECTION_LIMIT, (unsigned)OBS_HTTP_CONNS_MAX,
                                  MHD_OPTION_END);
    if (ep->daemon == NULL) {
        ote_error("metrics endpoint on %s: libmicrohttpd did not start", ep->bound);
        close(ep->fd);
        free(ep);
        return OTE_ERR_IO;
    }
    ote_info("metrics endpoint listening on http://%s/metrics", ep->bound);
    *ep_p = ep;
    return OTE_OK;
}

static void endpoint_stop(obs_endpoint_t *ep)
{
    MHD_stop_daemon(ep->daemon); /* closes the listening socket it was given */
    free(ep->engines);
    free(ep);
}

ote_status_t ote_obs_endpoint_attach(ote_engine_h e)
{
    char asked[96];
    obs_endpoint_t *ep;
    ote_status_t status;

    if (ote_engine_facts(e)->config.metrics_addr == NULL ||
        ote_engine_facts(e)->config.metrics_addr[0] == '\0')
        return OTE_OK;
    if (addr_normalize(ote_engine_facts(e)->config.metrics_addr, asked, sizeof(asked)) != OTE_OK) {
        ote_error("OTE_METRICS_ADDR='%s': expected port, host:port or [v6]:port",
                  ote_engine_facts(e)->config.metrics_addr);
        return OTE_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&registry_lock);
    for (ep = endpoints; ep != NULL; ep = ep->next) {
        if (strcmp(ep->asked, asked) == 0 || strcmp(ep->bound, asked) == 0)
            break;
    }
    if (ep == NULL) {
        status = endpoint_start(asked, &ep);
        if (status != OTE_OK) {
            pthread_mutex_unlock(&registry_lock);
            return status;
        }
        ep->next  = endpoints;
        endpoints = ep;
    }
    if (ep->num_engines == ep->cap_engines) {
        size_t cap = ep->cap_engines ? 2 * ep->cap_engines : 4;
        ote_engine_h *g = realloc(ep->engines, cap * sizeof(*g));

        if (g == NULL) {
            obs_endpoint_t **pp;

            if (ep->num_engines > 0) { /* ep stays for the engines it serves */
                pthread_mutex_unlock(&registry_lock);
                return OTE_ERR_NO_MEMORY;
            }
            /* Started for this engine alone: it goes, its port with it. */
            for (pp = &endpoints; *pp != ep; pp = &(*pp)->next)
                ;
            *pp = ep->next;
            pthread_mutex_unlock(&registry_lock);
            endpoint_stop(ep);
            return OTE_ERR_NO_MEMORY;
        }
        ep->engines     = g;
        ep->cap_engines = cap;
    }
    ep->engines[ep->num_engines++] = e;
    snprintf(ote_engine_facts(e)->obs->endpoint_addr,
             sizeof(ote_engine_facts(e)->obs->endpoint_addr), "%s", ep->bound);
    pthread_mutex_unlock(&registry_lock);
    ote_info("engine %s: metrics on http://%s/metrics", ote_engine_facts(e)->name, ep->bound);
    return OTE_OK;
}

void ote_obs_endpoint_detach(ote_engine_h e)
{
    obs_endpoint_t *ep, **pp, *stop = NULL;

    if (ote_engine_facts(e)->obs == NULL || ote_engine_facts(e)->obs->endpoint_addr[0] == '\0')
        return;
    pthread_mutex_lock(&registry_lock);
    for (pp = &endpoints; (ep = *pp) != NULL; pp = &ep->next) {
        size_t i = 0;

        while (i < ep->num_engines && ep->engines[i] != e)
            i++;
        if (i == ep->num_engines)
            continue;
        ep->engines[i] = ep->engines[--ep->num_engines];
        if (ep->num_engines == 0) {
            *pp  = ep->next;
            stop = ep;
        }
        break;
    }
    ote_engine_facts(e)->obs->endpoint_addr[0] = '\0';
    pthread_mutex_unlock(&registry_lock);
    /* Outside the lock: a scrape in flight waits on it, and stopping joins its thread. */
    if (stop != NULL)
        endpoint_stop(stop);
}

#else /* !HAVE_MHD */

ote_status_t ote_obs_endpoint_attach(ote_engine_h e)
{
    if (ote_engine_facts(e)->config.metrics_addr == NULL ||
        ote_engine_facts(e)->config.metrics_addr[0] == '\0')
        return OTE_OK;
    ote_error("OTE_METRICS_ADDR='%s': this build has no metrics endpoint (configure found no "
              "libmicrohttpd; install libmicrohttpd-dev and configure again)",
              ote_engine_facts(e)->config.metrics_addr);
    return OTE_ERR_UNSUPPORTED;
}

void ote_obs_endpoint_detach(ote_engine_h e)
{
    (void)e;
}

#endif
