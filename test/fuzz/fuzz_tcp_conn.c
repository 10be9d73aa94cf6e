/*
 * The tcp target's receive state machine, end to end: the input is the
 * byte stream a peer sends on an accepted data connection (through a
 * socketpair into a real iface), with the iface's replies drained. The
 * first input byte picks an iface: bit 0 with a key or without, bit 1 the
 * cma component (the same state machine in by-reference mode) or tcp. Two
 * regions are registered at fixed addresses (read-write, then read-only)
 * so that seeds can address them; the memory around them is checked after
 * every input: nothing outside the read-write region may change. The cma
 * iface copies to and from a forked copy of this process (its "initiator"),
 * so addresses an input names on the initiator's side land there.
 */
#include "fuzz.h"

#include "base/auth.h"
#include "base/config.h"
#include "base/log.h"
#include "uct_ext/tcp/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * Also the seeds' target addresses (gen_corpus.c). Not in ASan's allocator
 * space (0x600000000000 to 0x640000000000 on x86_64), which the fuzz build
 * reserves before this runs: a mapping there fails and the regions would
 * land where no seed addresses them.
 */
#define FUZZ_BASE    0x500000000000ull
#define FUZZ_PAGE    4096
#define FUZZ_RW_OFF  FUZZ_PAGE             /* read-write region: 16 KiB     */
#define FUZZ_RW_LEN  (16 * 1024)
#define FUZZ_RO_OFF  (FUZZ_RW_OFF + FUZZ_RW_LEN + FUZZ_PAGE) /* read-only: 4 KiB */
#define FUZZ_RO_LEN  FUZZ_PAGE
#define FUZZ_MAP_LEN (FUZZ_RO_OFF + FUZZ_RO_LEN + FUZZ_PAGE)
#define FUZZ_INSTANCE 0x1122334455667788ull

extern ote_tl_component_t ote_tcp_component;
extern ote_tl_component_t ote_cma_component;

static ote_mem_table_t *table;
static ote_auth_t      *auth_off, *auth_on;
static ote_tl_iface_t  *iface_off, *iface_on, *cma_off, *cma_on;
static pid_t            initiator; /* the cma ifaces' peer process */
static uint8_t         *base;
static uint8_t         *pristine; /* the mapping as it must stay outside the rw region */

static ote_tl_iface_t *open_iface(ote_tl_component_t *comp, ote_auth_t *auth)
{
    /* The engine's default limits (OTE_MAX_CONNS, ...). */
    ote_tl_iface_params_t p = {.regions = table, .instance_id = FUZZ_INSTANCE,
                               .bind_ip = "127.0.0.1", .advertise_ip = "127.0.0.1",
                               .auth = auth, .max_conns = 4096, .max_conns_per_peer = 256,
                               .handshake_timeout_ms = 10000};
    ote_tl_resource_t *res = NULL;
    ote_tl_iface_t *iface  = NULL;
    size_t n               = 0;

    if (comp->ops->query_resources(comp, &p, &res, &n) != OTE_OK || n < 1 ||
        comp->ops->iface_open(&res[0], NULL, &p, &iface) != OTE_OK)
        abort();
    free(res);
    return iface;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char key[] = "fuzz-cluster-key-0123456789abcdef";
    /* The engine's default limits (OTE_MAX_CONNS, ...), no key. */
    static const ote_auth_params_t limits = {
        .max_conns = 4096, .max_conns_per_peer = 256, .handshake_timeout_ms = 10000};
    ote_mem_table_params_t mp = {0};
    ote_mem_desc_t d[2];
    ote_region_t *r[2];

    (void)argc;
    (void)argv;
    setenv("OTE_LOG_LEVEL", "none", 1);
    /* Read by the tcp and cma ifaces from tcp's table when they open. */
    setenv("OTE_TCP_MAX_MSG", "1m", 1);
    ote_log_set_level(OTE_LOG_NONE);
    base = mmap((void *)(uintptr_t)FUZZ_BASE, FUZZ_MAP_LEN, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (base == MAP_FAILED)
        base = mmap(NULL, FUZZ_MAP_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                    0);
    if (base == MAP_FAILED)
        abort();
    for (size_t i = 0; i < FUZZ_MAP_LEN; i++)
        base[i] = (uint8_t)(i * 131 + 7);
    pristine = malloc(FUZZ_MAP_LEN);
    if (pristine == NULL)
        abort();
    memcpy(pristine, base, FUZZ_MAP_LEN);
    if (ote_mem_table_create(&mp, &table) != OTE_OK)
        abort();
    d[0] = (ote_mem_desc_t){.addr = base + FUZZ_RW_OFF, .length = FUZZ_RW_LEN, .location = "cpu:0",
                            .access = OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE};
    d[1] = (ote_mem_desc_t){.addr = base + FUZZ_RO_OFF, .length = FUZZ_RO_LEN, .location = "cpu:0",
                            .access = OTE_ACCESS_REMOTE_READ};
    if (ote_mem_table_register(table, d, 2, r) != OTE_OK)
        abort();
    if (ote_auth_create(&limits, &auth_off) != OTE_OK ||
        ote_auth_create(&limits, &auth_on) != OTE_OK)
        abort();
    if (ote_auth_supported() && ote_auth_set_key(auth_on, key, sizeof(key) - 1) != OTE_OK)
        abort();
    iface_off = open_iface(&ote_tcp_component, auth_off);
    iface_on  = open_iface(&ote_tcp_component, auth_on);
    cma_off   = open_iface(&ote_cma_component, auth_off);
    cma_on    = open_iface(&ote_cma_component, auth_on);
    /* A copy of this process whose memory the cma target may read and write. */
    initiator = fork();
    if (initiator < 0)
        abort();
    if (initiator == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            pause();
    }
    return 0;
}

static void drain(int fd)
{
    uint8_t sink[65536];

    while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ote_tl_iface_t *tl;
    ote_stream_iface_t *iface;
    struct sockaddr_in peer = {.sin_family = AF_INET, .sin_port = htons(9)};
    struct sockaddr_storage ss;
    bool cma;
    size_t off = 0;
    int sv[2];

    if (size < 1)
        return 0;
    cma   = (data[0] & 2) != 0;
    tl    = cma ? ((data[0] & 1) ? cma_on : cma_off) : ((data[0] & 1) ? iface_on : iface_off);
    iface = (ote_stream_iface_t *)tl;
    data++;
    size--;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        abort();
    memset(&ss, 0, sizeof(ss));
    if (cma) {
        ss.ss_family = AF_UNIX;
    } else {
        peer.sin_addr.s_addr = htonl(0x7f000001);
        memcpy(&ss, &peer, sizeof(peer));
    }
    FUZZ_CHECK(ote_stream_iface_conn_accept(iface, sv[0], &ss) == OTE_OK);
    FUZZ_CHECK(iface->num_accepted == 1);
    if (cma) {
        /* SO_PEERCRED named this process: the copies go to the forked one. */
        FUZZ_CHECK(iface->conns != NULL && iface->conns->peer_pid == getpid());
        iface->conns->peer_pid = initiator;
    }
    /* Feed the stream, draining replies so neither side stalls. */
    for (int rounds = 0; rounds < 100000 && iface->num_accepted > 0; rounds++) {
        if (off < size) {
            ssize_t n = send(sv[1], data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);

            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
                off = size;
            if (off == size)
                shutdown(sv[1], SHUT_WR);
        }
        tl->ops->progress(tl);
        drain(sv[1]);
        if (off == size && size == 0)
            shutdown(sv[1], SHUT_WR);
    }
    /* Whatever state it is in, the connection must have ended with the stream. */
    FUZZ_CHECK(iface->num_accepted == 0);
    close(sv[1]);
    tl->ops->progress(tl);
    FUZZ_CHECK(memcmp(base, pristine, FUZZ_RW_OFF) == 0);
    FUZZ_CHECK(memcmp(base + FUZZ_RW_OFF + FUZZ_RW_LEN, pristine + FUZZ_RW_OFF + FUZZ_RW_LEN,
                      FUZZ_MAP_LEN - FUZZ_RW_OFF - FUZZ_RW_LEN) == 0);
    return 0;
}
