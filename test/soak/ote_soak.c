/*
 * One peer of the soak (contrib/soak.sh, docs/reliability.md): an engine
 * named soak-pID that, until told to stop, sends batches of WRITEs (with a
 * notification), READs (half of them with one) and bursts of standalone
 * notifications to other peers (peers 0 and 1 to every peer, the others to
 * peers 0 and 1 only), and receives theirs. It checks what it
 * can see itself and writes everything else to an append-only log that
 * contrib/soak_check.py reads once the run is over:
 *
 *   - every block carries a header {magic, writer, incarnation, sequence,
 *     checksum of the payload} and a payload generated from those fields;
 *     a READ that COMPLETED is checked here (the peer's read area is never
 *     written after start), a WRITE at the destination when its batch's
 *     notification arrives;
 *   - every notification carries (sender, incarnation, sequence): the
 *     sender logs each one's final status, the receiver each one it took;
 *   - every batch is waited for with a bound; one still pending past it is
 *     a violation;
 *   - RSS and open descriptors are sampled every second.
 *
 * Usage: ote_soak --id I --peers N --inc K --out DIR [--listen ADDR]
 * (OTE_METADATA names the store; OTE_TLS the transports). Signals:
 * SIGUSR1 stop sending (then keep receiving), SIGUSR2 receive slowly for
 * a while (the senders fill the backlog), SIGTERM drain and exit cleanly.
 * Built by make check, never run by it.
 */
#include <ote/ote.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PEERS   8
#define MAGIC       0x4f54455f534f414bull /* "OTE_SOAK" */
#define HDR         32u                   /* magic, writer|inc, seq, csum */
#define INFO_SIZE   4096u                 /* info page: magic, id, incarnation */
#define RBLK        (128u << 10)          /* a block of the read area */
#define RBLKS       8u
#define SLOT        (256u << 10)          /* a WRITE slot */
#define SLOTS       16u                   /* per (writer, incarnation parity) */
#define LOCAL_SIZE  (4u << 20)
#define SLOW_MS     5000

static int          my_id, n_peers, log_fd;
static unsigned     my_inc;
static size_t       region_size;
static uint8_t     *region;    /* published: info, read area, write slots */
static uint8_t     *local;     /* sources of WRITEs, destinations of READs */
static ote_engine_h engine;
static long         bound_ms;  /* a batch must end within this */

static atomic_int stop_send, stop_all, slow_req; /* lock-free: set by signal handlers on any thread */
static atomic_bool           sender_done;

/* ---- log and counters ----------------------------------------------------------------- */

static uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One line, one write(2) on an O_APPEND file: kill -9 loses at most the line being made. */
static void logf_(const char *fmt, ...)
{
    char    line[1024];
    int     n = snprintf(line, sizeof(line), "%" PRIu64 " ", now_us());
    va_list ap;

    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    (void)!write(log_fd, line, (size_t)n);
}

/* Task ends per (op, state, error), standalone sends per status, and the rest. */
static atomic_ulong task_end[2][5][32];
static atomic_ulong submit_err[32], open_err[32], send_st[32], bnotif_st[32];
static atomic_ulong read_ok, read_bad, write_dest_ok, write_dest_bad, recv_n, hung, reopened;
static atomic_ulong max_batch_ms;

static unsigned err_ix(ote_status_t s)
{
    return s <= 0 && s > -32 ? (unsigned)-s : 31u;
}

static void dump_counts(void)
{
    static const char *op[] = {"R", "W"};
    static const char *st[] = {"PENDING", "COMPLETED", "FAILED", "CANCELED", "TIMEOUT"};
    char line[900] = "";
    int  n = 0;

    for (int o = 0; o < 2; o++)
        for (int s = 0; s < 5; s++)
            for (int e = 0; e < 32; e++) {
                unsigned long v = atomic_load(&task_end[o][s][e]);

                if (v != 0 && n < (int)sizeof(line) - 64)
                    n += snprintf(line + n, sizeof(line) - (size_t)n, " task:%s:%s:%d=%lu",
                                  op[o], st[s], -e, v);
            }
    struct {
        const char   *name;
        atomic_ulong *a;
    } arr[] = {{"submit", submit_err}, {"open", open_err}, {"send", send_st},
               {"bnotify", bnotif_st}};
    for (size_t k = 0; k < 4; k++)
        for (int e = 0; e < 32; e++) {
            unsigned long v = atomic_load(&arr[k].a[e]);

            if (v != 0 && n < (int)sizeof(line) - 64)
                n += snprintf(line + n, sizeof(line) - (size_t)n, " %s:%d=%lu", arr[k].name,
                              -e, v);
        }
    logf_("CNT read_ok=%lu read_bad=%lu wdest_ok=%lu wdest_bad=%lu recv=%lu hung=%lu "
          "reopen=%lu max_batch_ms=%lu%s",
          atomic_load(&read_ok), atomic_load(&read_bad), atomic_load(&write_dest_ok),
          atomic_load(&write_dest_bad), atomic_load(&recv_n), atomic_load(&hung),
          atomic_load(&reopened), atomic_load(&max_batch_ms), line);
}

/* Bytes per transport on the engine's rails now (closed segments' no longer count). */
static void sample_rails(void)
{
    ote_rail_info_t r[32];
    size_t          n = 0;
    char            line[900] = "";
    int             m = 0;

    if (ote_engine_rails(engine, r, 32, &n) != OTE_OK)
        return;
    for (size_t i = 0; i < n && i < 32 && m < (int)sizeof(line) - 128; i++)
        m += snprintf(line + m, sizeof(line) - (size_t)m, " %s:%s=%" PRIu64, r[i].transport,
                      r[i].device, r[i].bytes);
    logf_("RAILS%s", line);
}

/* ---- sockets: live connections or closed ones still held -------------------------------- */

#define MAX_INODES 8192

static int cmp_ul(const void *a, const void *b)
{
    unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;

    return x < y ? -1 : x > y;
}

/* Append the inode column (0-based col) of each line but the first of /proc/self/net/name. */
static size_t net_inodes(const char *name, int col, unsigned long *v, size_t n)
{
    char  path[64], line[512];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/self/net/%s", name);
    f = fopen(path, "r");
    if (f == NULL)
        return n;
    if (fgets(line, sizeof(line), f) != NULL) {
        while (n < MAX_INODES && fgets(line, sizeof(line), f) != NULL) {
            char *save = NULL, *w = strtok_r(line, " \t\n", &save);

            for (int i = 0; w != NULL && i < col; i++)
                w = strtok_r(NULL, " \t\n", &save);
            if (w != NULL)
                v[n++] = strtoul(w, NULL, 10);
        }
    }
    fclose(f);
    return n;
}

/*
 * Of this process's descriptors, the sockets, and those of them in no
 * table of the network namespace (TCP, UDP, UNIX, raw, netlink, packet):
 * closed connections whose descriptor is still held, and sockets not
 * connected or bound (yet). A working set of live connections comes and
 * goes with the peers; a count of sockets in no table that keeps growing
 * is descriptors of closed connections never closed: a leak.
 */
static void count_socks(int *socks_p, int *closed_p)
{
    static unsigned long v[MAX_INODES];
    size_t n = 0;
    DIR   *d;

    *socks_p = *closed_p = 0;
    n = net_inodes("tcp", 9, v, n);
    n = net_inodes("tcp6", 9, v, n);
    n = net_inodes("udp", 9, v, n);
    n = net_inodes("udp6", 9, v, n);
    n = net_inodes("raw", 9, v, n);
    n = net_inodes("unix", 6, v, n);
    n = net_inodes("netlink", 9, v, n);
    n = net_inodes("packet", 8, v, n);
    qsort(v, n, sizeof(v[0]), cmp_ul);
    d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[300], link[64];
        unsigned long ino;
        ssize_t len;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        if (sscanf(link, "socket:[%lu]", &ino) != 1)
            continue;
        (*socks_p)++;
        if (bsearch(&ino, v, n, sizeof(v[0]), cmp_ul) == NULL)
            (*closed_p)++;
    }
    closedir(d);
}

static void sample_mem(void)
{
    char  buf[4096];
    long  rss = -1;
    int   fds = 0, socks, closed;
    FILE *f = fopen("/proc/self/status", "r");
    DIR  *d;

    if (f != NULL) {
        while (fgets(buf, sizeof(buf), f) != NULL)
            if (sscanf(buf, "VmRSS: %ld", &rss) == 1)
                break;
        fclose(f);
    }
    d = opendir("/proc/self/fd");
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            fds += e->d_name[0] != '.';
        closedir(d);
        fds--; /* the directory's own */
    }
    count_socks(&socks, &closed);
    logf_("MEM rss_kb=%ld fds=%d socks=%d closed_socks=%d", rss, fds, socks, closed);
}

/* ---- blocks ------------------------------------------------------------------------------ */

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;

    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        p[i] = (uint8_t)(x >> ((i & 7) * 8));
    }
}

static uint64_t seed_of(unsigned writer, unsigned inc, uint64_t seq)
{
    return ((uint64_t)writer << 56) ^ ((uint64_t)inc << 40) ^ seq;
}

static void block_make(uint8_t *p, size_t len, unsigned writer, unsigned inc, uint64_t seq)
{
    uint64_t w[4] = {MAGIC, ((uint64_t)writer << 32) | inc, seq, 0};

    fill(p + HDR, len - HDR, seed_of(writer, inc, seq));
    w[3] = fnv(p + HDR, len - HDR);
    memcpy(p, w, HDR);
}

/* 0: the block is (writer, inc, seq) and its bytes are right; 1: another block's header; -1: bad. */
static int block_check(const uint8_t *p, size_t len, unsigned writer, unsigned inc, uint64_t seq)
{
    uint64_t w[4];
    uint8_t *want;
    int      rc;

    memcpy(w, p, HDR);
    if (w[0] != MAGIC || (w[1] >> 32) != writer)
        return -1;
    if ((uint32_t)w[1] != inc || w[2] != seq)
        return 1;
    if (fnv(p + HDR, len - HDR) != w[3])
        return -1;
    want = malloc(len);
    if (want == NULL)
        return -1;
    fill(want, len - HDR, seed_of(writer, inc, seq));
    rc = memcmp(want, p + HDR, len - HDR) == 0 ? 0 : -1;
    free(want);
    return rc;
}

static size_t read_off(unsigned blk)
{
    return INFO_SIZE + (size_t)blk * RBLK;
}

/* Where writer w (incarnation parity par) writes slot s of a peer. */
static size_t slot_off(unsigned w, unsigned par, unsigned s)
{
    return INFO_SIZE + (size_t)RBLKS * RBLK + (((size_t)w * 2 + par) * SLOTS + s) * SLOT;
}

/* ---- receiving ---------------------------------------------------------------------------- */

/* A message: "K src inc seq t_submit n [slot:len:blockseq]..." (K: W, R or N). */
static void handle_notif(const ote_notif_t *nf)
{
    char     msg[OTE_NOTIFY_MAX + 1], *save = NULL, *tok;
    char     kind;
    unsigned src, inc, n;
    uint64_t seq, tsub;
    int      used;

    memcpy(msg, nf->data, nf->length);
    msg[nf->length] = '\0';
    if (sscanf(msg, "%c %u %u %" SCNu64 " %" SCNu64 " %u %n", &kind, &src, &inc, &seq, &tsub, &n,
               &used) != 6 ||
        src >= MAX_PEERS) {
        logf_("VIOL NOTIF_GARBLED from=%s len=%zu", nf->from, nf->length);
        return;
    }
    atomic_fetch_add(&recv_n, 1);
    logf_("NR %u %u %" SCNu64 " %c", src, inc, seq, kind);
    if (kind != 'W')
        return;
    tok = strtok_r(msg + used, " ", &save);
    for (unsigned i = 0; i < n && tok != NULL; i++, tok = strtok_r(NULL, " ", &save)) {
        unsigned slot;
        size_t   len;
        uint64_t bseq;
        int      rc;

        if (sscanf(tok, "%u:%zu:%" SCNu64, &slot, &len, &bseq) != 3 || slot >= SLOTS ||
            len > SLOT || len < HDR) {
            logf_("VIOL NOTIF_GARBLED from=%s", nf->from);
            return;
        }
        const uint8_t *blk = region + slot_off(src, inc & 1, slot);
        uint64_t       w[4];

        rc = block_check(blk, len, src, inc, bseq);
        memcpy(w, blk, HDR);
        if (rc == 0) {
            atomic_fetch_add(&write_dest_ok, 1);
        } else {
            /* The checker decides: a later WRITE to this slot may have landed (or be landing). */
            atomic_fetch_add(&write_dest_bad, 1);
            logf_("WBAD %u %u %" PRIu64 " %u %" PRIu64 " %d %u %" PRIu64, src, inc, seq, slot,
                  bseq, rc, (unsigned)(uint32_t)w[1], w[2]);
        }
    }
}

static void *receiver(void *arg)
{
    static ote_notif_t nf[64];
    uint64_t           slow_until = 0, last_hb = 0, last_mem = 0, stop_t = 0;
    int                empty_after_stop = 0;

    (void)arg;
    for (;;) {
        uint64_t t0 = now_us();
        size_t   max = 64, n = 0;

        if (slow_req) {
            slow_req = 0;
            slow_until = t0 + SLOW_MS * 1000ull;
            logf_("SLOW %d", SLOW_MS);
        }
        if (t0 < slow_until && !stop_all) {
            max = 1;
            usleep(50000);
            t0 = now_us();
        }
        if (ote_notify_recv(engine, nf, max, &n) != OTE_OK)
            n = 0;
        for (size_t i = 0; i < n; i++)
            handle_notif(&nf[i]);
        /* Everything queued before t0 was taken: the checker's "last drain". */
        if (n < max && (t0 - last_hb > 100000 || stop_all)) {
            logf_("HB %" PRIu64, t0);
            last_hb = t0;
        }
        if (t0 - last_mem > 1000000) {
            sample_mem();
            sample_rails();
            dump_counts();
            last_mem = t0;
        }
        /* Leaving: five empty takes in a row, or 3 s while peers keep sending. */
        if (stop_all && atomic_load(&sender_done)) {
            if (stop_t == 0)
                stop_t = t0;
            empty_after_stop = n == 0 ? empty_after_stop + 1 : 0;
            if (empty_after_stop >= 5 || t0 - stop_t > 3000000)
                break;
        }
        if (n == 0)
            usleep(stop_all ? 20000 : 1000);
    }
    return NULL;
}

/* ---- sending ------------------------------------------------------------------------------- */

typedef struct {
    ote_segment_h seg;
    uint64_t      raddr;     /* the peer's region */
    unsigned      inc;       /* the peer's incarnation (its info page) */
    uint64_t      next_try;  /* no open before this */
    unsigned      next_slot;
} peer_t;

static peer_t   peers[MAX_PEERS];
static uint64_t note_seq, block_seq;
static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void peer_drop(peer_t *p, bool close_it)
{
    if (close_it && p->seg != NULL)
        ote_segment_close(p->seg);
    p->seg = NULL;
    p->raddr = 0;
    p->next_try = now_us() + 200000;
}

/* End a batch within the bound; the statuses of its tasks counted. 0, or -1 if it hung. */
static int batch_end(unsigned j, ote_batch_h b, size_t first, size_t n, const ote_op_t *ops,
                     uint64_t t0, ote_task_status_t *st)
{
    ote_status_t s = ote_batch_wait(b, (int)bound_ms);
    uint64_t     ms = (now_us() - t0) / 1000;

    if (ms > atomic_load(&max_batch_ms))
        atomic_store(&max_batch_ms, ms);
    if (s != OTE_OK) {
        atomic_fetch_add(&hung, 1);
        logf_("VIOL TASK_HUNG batch of %zu to p%u still pending after %ld ms", n, j, bound_ms);
        for (size_t i = 0; i < n; i++)
            ote_batch_cancel(b, first + i);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ote_batch_task_status(b, first + i, &st[i]);
        atomic_fetch_add(&task_end[ops[i]][st[i].state % 5][err_ix(st[i].error)], 1);
        if (st[i].error == OTE_ERR_UNREACHABLE)
            logf_("VIOL UNREACHABLE task %s to p%u (every pair here shares a transport)",
                  ops[i] == OTE_OP_READ ? "READ" : "WRITE", j);
    }
    return 0;
}

/* Open (or reopen) peer j and read its info page: 0 when usable. */
static int peer_ready(unsigned j)
{
    peer_t           *p = &peers[j];
    char              name[32];
    ote_region_info_t r[8];
    size_t            nr = 0;
    ote_batch_h       b;
    size_t            first;
    ote_op_t          op = OTE_OP_READ;
    ote_task_status_t st;
    ote_status_t      s;
    uint64_t          info[3];

    if (p->seg != NULL && p->raddr != 0)
        return 0;
    if (now_us() < p->next_try)
        return -1;
    if (p->seg == NULL) {
        snprintf(name, sizeof(name), "soak-p%u", j);
        s = ote_segment_open(engine, name, &p->seg);
        if (s != OTE_OK) {
            atomic_fetch_add(&open_err[err_ix(s)], 1);
            if (s == OTE_ERR_UNREACHABLE)
                logf_("VIOL UNREACHABLE segment_open p%u (every pair here shares a transport)", j);
            peer_drop(p, false);
            return -1;
        }
    }
    if (ote_segment_regions(p->seg, r, 8, &nr) != OTE_OK)
        nr = 0;
    for (size_t i = 0; i < nr && i < 8; i++)
        if (r[i].length == region_size)
            p->raddr = r[i].addr;
    if (p->raddr == 0 || ote_batch_create(engine, 1, &b) != OTE_OK) {
        peer_drop(p, true);
        return -1;
    }
    ote_xfer_req_t req = {OTE_OP_READ, local, p->seg, p->raddr, INFO_SIZE};
    uint64_t       t0 = now_us();

    s = ote_batch_submit(b, &req, 1, &first);
    if (s == OTE_OK && batch_end(j, b, first, 1, &op, t0, &st) == 0 &&
        st.state == OTE_TASK_COMPLETED) {
        memcpy(info, local, sizeof(info));
        ote_batch_release(b);
        if (info[0] == 0) { /* allocated, not yet filled: not a fault */
            peer_drop(p, true);
            return -1;
        }
        if (info[0] != MAGIC || info[1] != j) {
            logf_("VIOL READ_BAD info page of p%u", j);
            atomic_fetch_add(&read_bad, 1);
            peer_drop(p, true);
            return -1;
        }
        p->inc = (unsigned)info[2];
        logf_("OPEN %u %u", j, p->inc);
        return 0;
    }
    if (s != OTE_OK)
        atomic_fetch_add(&submit_err[err_ix(s)], 1);
    ote_batch_release(b);
    peer_drop(p, true);
    return -1;
}

/* After a failure towards peer j: bind its segment to whoever serves the name now. */
static void peer_failed(unsigned j)
{
    peer_t *p = &peers[j];
    int     restarted = 0;

    atomic_fetch_add(&reopened, 1);
    if (p->seg == NULL || ote_segment_reopen(p->seg, &restarted) != OTE_OK || restarted) {
        peer_drop(p, true);
        return;
    }
}

/*
 * A submit to peer j refused with s: counted (UNREACHABLE a violation), the
 * batch released, the peer failed unless BUSY.
 */
static void submit_refused(unsigned j, ote_batch_h b, ote_status_t s)
{
    atomic_fetch_add(&submit_err[err_ix(s)], 1);
    if (s == OTE_ERR_UNREACHABLE)
        logf_("VIOL UNREACHABLE submit to p%u (every pair here shares a transport)", j);
    ote_batch_release(b);
    if (s != OTE_ERR_BUSY)
        peer_failed(j);
}

static void note_log(unsigned j, uint64_t seq, char kind, uint64_t tsub, ote_status_t s,
                     int tasks_ok, const char *blocks)
{
    logf_("NS %u %u %" PRIu64 " %c %d %d %" PRIu64 " %s", j, peers[j].inc, seq, kind, (int)s,
          tasks_ok, tsub, blocks);
}

static void do_write(unsigned j)
{
    peer_t           *p = &peers[j];
    unsigned          n = 1 + (unsigned)(rnd() % 4);
    ote_xfer_req_t    req[4];
    ote_op_t          ops[4];
    ote_task_status_t st[4];
    char              msg[512], blocks[256] = "";
    int               m, bl = 0;
    uint64_t          seq = ++note_seq, t0 = now_us();
    ote_batch_h       b;
    size_t            first;
    ote_status_t      s, ns = OTE_ERR_CANCELED;
    int               ok = 1;

    for (unsigned i = 0; i < n; i++) {
        size_t   len = rnd() % 2 ? 64 + rnd() % 4032 : HDR + rnd() % (SLOT - HDR + 1);
        unsigned slot = p->next_slot++ % SLOTS;
        uint8_t *src = local + (size_t)i * SLOT;

        if (len < 64)
            len = 64;
        block_make(src, len, (unsigned)my_id, my_inc, ++block_seq);
        req[i] = (ote_xfer_req_t){OTE_OP_WRITE, src, p->seg,
                                  p->raddr + slot_off((unsigned)my_id, my_inc & 1, slot), len};
        ops[i] = OTE_OP_WRITE;
        bl += snprintf(blocks + bl, sizeof(blocks) - (size_t)bl, "%s%u:%zu:%" PRIu64,
                       i ? " " : "", slot, len, block_seq);
    }
    m = snprintf(msg, sizeof(msg), "W %d %u %" PRIu64 " %" PRIu64 " %u %s", my_id, my_inc, seq,
                 t0, n, blocks);
    if (ote_batch_create(engine, n, &b) != OTE_OK)
        return;
    s = ote_batch_submit_notify(b, req, n, msg, (size_t)m + 1, &first);
    if (s != OTE_OK) {
        submit_refused(j, b, s);
        return;
    }
    if (batch_end(j, b, first, n, ops, t0, st) != 0) {
        note_log(j, seq, 'W', t0, OTE_ERR_TIMEOUT, 0, blocks);
        ote_batch_release(b);
        peer_failed(j);
        return;
    }
    for (unsigned i = 0; i < n; i++)
        ok &= st[i].state == OTE_TASK_COMPLETED;
    ote_batch_notify_status(b, first, &ns);
    atomic_fetch_add(&bnotif_st[err_ix(ns)], 1);
    if (ok && ns == OTE_ERR_UNREACHABLE)
        logf_("VIOL UNREACHABLE batch notification to p%u (every pair here shares a transport)", j);
    note_log(j, seq, 'W', t0, ns, ok, blocks);
    ote_batch_release(b);
    if (!ok || (ns != OTE_OK && ns != OTE_ERR_BUSY))
        peer_failed(j);
}

static void do_read(unsigned j)
{
    peer_t           *p = &peers[j];
    unsigned          n = 1 + (unsigned)(rnd() % 3), nblk[3];
    ote_xfer_req_t    req[3];
    ote_op_t          ops[3];
    ote_task_status_t st[3];
    uint64_t          seq = ++note_seq, t0 = now_us();
    bool              notify = rnd() % 2;
    char              msg[128];
    int               m, ok = 1;
    ote_batch_h       b;
    size_t            first, off = 0;
    ote_status_t      s, ns = OTE_ERR_CANCELED;

    for (unsigned i = 0; i < n; i++) {
        unsigned b0 = (unsigned)(rnd() % RBLKS);

        nblk[i] = 1 + (unsigned)(rnd() % (RBLKS - b0));
        if (off + (size_t)nblk[i] * RBLK > LOCAL_SIZE)
            nblk[i] = 1;
        req[i] = (ote_xfer_req_t){OTE_OP_READ, local + off, p->seg, p->raddr + read_off(b0),
                                  (size_t)nblk[i] * RBLK};
        ops[i] = OTE_OP_READ;
        memset(local + off, 0, req[i].length);
        off += req[i].length;
    }
    if (ote_batch_create(engine, n, &b) != OTE_OK)
        return;
    m = snprintf(msg, sizeof(msg), "R %d %u %" PRIu64 " %" PRIu64 " 0", my_id, my_inc, seq, t0);
    s = notify ? ote_batch_submit_notify(b, req, n, msg, (size_t)m + 1, &first)
               : ote_batch_submit(b, req, n, &first);
    if (s != OTE_OK) {
        submit_refused(j, b, s);
        return;
    }
    if (batch_end(j, b, first, n, ops, t0, st) != 0) {
        if (notify)
            note_log(j, seq, 'R', t0, OTE_ERR_TIMEOUT, 0, "-");
        ote_batch_release(b);
        peer_failed(j);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        ok &= st[i].state == OTE_TASK_COMPLETED;
        if (st[i].state != OTE_TASK_COMPLETED)
            continue;
        for (unsigned k = 0; k < nblk[i]; k++) {
            const uint8_t *blk = (const uint8_t *)req[i].local_addr + (size_t)k * RBLK;
            uint64_t       w[4];
            unsigned       want = (unsigned)((req[i].remote_addr - p->raddr - INFO_SIZE) / RBLK) + k;

            memcpy(w, blk, HDR);
            if (block_check(blk, RBLK, j, (uint32_t)w[1], want) == 0 && (uint32_t)w[1] == p->inc) {
                atomic_fetch_add(&read_ok, 1);
            } else {
                atomic_fetch_add(&read_bad, 1);
                size_t zero = 0;

                while (zero < RBLK && blk[zero] == 0)
                    zero++;
                logf_("VIOL READ_BAD p%u block %u of a READ of %u (task COMPLETED, bytes differ: "
                      "header %016" PRIx64 " %016" PRIx64 " %" PRIu64 ", %zu leading zero bytes) "
                      "batch %" PRIu64,
                      j, want, nblk[i], w[0], w[1], w[2], zero, seq);
            }
        }
    }
    if (notify) {
        ote_batch_notify_status(b, first, &ns);
        atomic_fetch_add(&bnotif_st[err_ix(ns)], 1);
        if (ok && ns == OTE_ERR_UNREACHABLE)
            logf_("VIOL UNREACHABLE batch notification to p%u (every pair here shares a "
                  "transport)", j);
        note_log(j, seq, 'R', t0, ns, ok, "-");
    }
    ote_batch_release(b);
    if (!ok || (notify && ns != OTE_OK && ns != OTE_ERR_BUSY))
        peer_failed(j);
}

/* A burst of standalone notifications: more than a slow receiver takes. */
static void do_notify(unsigned j)
{
    unsigned n = 1 + (unsigned)(rnd() % 8);

    for (unsigned i = 0; i < n; i++) {
        uint64_t     seq = ++note_seq, t0 = now_us();
        char         msg[128];
        int          m = snprintf(msg, sizeof(msg), "N %d %u %" PRIu64 " %" PRIu64 " 0", my_id,
                                  my_inc, seq, t0);
        ote_status_t s = ote_notify_send(engine, peers[j].seg, msg, (size_t)m + 1);

        atomic_fetch_add(&send_st[err_ix(s)], 1);
        if (s == OTE_ERR_UNREACHABLE)
            logf_("VIOL UNREACHABLE notify_send to p%u (every pair here shares a transport)", j);
        note_log(j, seq, 'N', t0, s, 1, "-");
        if (s != OTE_OK) {
            if (s != OTE_ERR_BUSY)
                peer_failed(j);
            return;
        }
    }
}

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        stop_send = 1;
    else if (sig == SIGUSR2)
        slow_req = 1;
    else
        stop_send = stop_all = 1;
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);

    return v != NULL && *v != '\0' ? strtol(v, NULL, 10) : dflt;
}

int main(int argc, char **argv)
{
    const char         *out = NULL, *listen = "0.0.0.0:0";
    char                path[512], name[32];
    ote_engine_params_t params = {0};
    ote_mem_h           mh, lh;
    pthread_t           rx;
    ote_status_t        s;
    uint64_t            info[3];
    struct sigaction    sa = {.sa_handler = on_signal};
    unsigned            waits[32] = {0}, waited = 0;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--id") == 0)
            my_id = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--peers") == 0)
            n_peers = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--inc") == 0)
            my_inc = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--out") == 0)
            out = argv[i + 1];
        else if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
    }
    if (out == NULL || n_peers < 2 || n_peers > MAX_PEERS || my_id < 0 || my_id >= n_peers) {
        fprintf(stderr, "usage: ote_soak --id I --peers N(2..%d) --inc K --out DIR "
                        "[--listen ADDR]\n", MAX_PEERS);
        return 2;
    }
    snprintf(path, sizeof(path), "%s/p%d.%u.log", out, my_id, my_inc);
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log_fd < 0) {
        perror(path);
        return 2;
    }
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    bound_ms = env_long("OTE_XFER_TIMEOUT_MS", 30000) + env_long("OTE_NOTIFY_TIMEOUT_MS", 5000) +
               env_long("SOAK_SLACK_MS", 5000);
    rng ^= ((uint64_t)my_id << 32) ^ my_inc ^ now_us();
    logf_("START %d %u %d %s bound_ms=%ld", my_id, my_inc, (int)getpid(),
          getenv("OTE_TLS") ? getenv("OTE_TLS") : "all", bound_ms);

    /* A restart after kill -9 may find the dead instance's name still held. */
    snprintf(name, sizeof(name), "soak-p%d", my_id);
    params.name = name;
    params.listen_addr = listen;
    while ((s = ote_engine_create(&params, &engine)) != OTE_OK) {
        if (stop_all) {
            logf_("END clean (stopped before its engine was created: %s)", ote_status_string(s));
            return 0;
        }
        /* A supervisor's retries: the old name held, the store down, a rail down (its
         * device missing from OTE_NET_DEVICES' view); counted, for a minute at most. */
        if ((s != OTE_ERR_EXISTS && s != OTE_ERR_STORE_UNAVAILABLE && s != OTE_ERR_NO_DEVICE) ||
            waited > 600) {
            logf_("FATAL engine_create %d %s", (int)s, ote_status_string(s));
            return 1;
        }
        waited++;
        waits[err_ix(s)]++;
        usleep(100000);
    }
    logf_("CREATED create:EXISTS=%u create:STORE_UNAVAILABLE=%u create:NO_DEVICE=%u",
          waits[err_ix(OTE_ERR_EXISTS)], waits[err_ix(OTE_ERR_STORE_UNAVAILABLE)],
          waits[err_ix(OTE_ERR_NO_DEVICE)]);

    region_size = slot_off((unsigned)n_peers, 0, 0);
    if (ote_mem_alloc(engine, region_size, "cpu:0",
                      OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE, (void **)&region,
                      &mh) != OTE_OK ||
        ote_mem_alloc(engine, LOCAL_SIZE, "cpu:0", 0, (void **)&local, &lh) != OTE_OK) {
        logf_("FATAL mem_alloc");
        return 1;
    }
    memset(region, 0, region_size);
    for (unsigned k = 0; k < RBLKS; k++)
        block_make(region + read_off(k), RBLK, (unsigned)my_id, my_inc, k);
    /* The info page last: a peer that reads it zero tries again later. */
    info[1] = (uint64_t)my_id;
    info[2] = my_inc;
    memcpy(region + 8, info + 1, 2 * sizeof(info[0]));
    atomic_thread_fence(memory_order_release);
    info[0] = MAGIC;
    memcpy(region, info, sizeof(info[0]));

    pthread_create(&rx, NULL, receiver, NULL);
    while (!stop_send) {
        /* Peers 0 and 1 live through the run and have every transport; the others (the
         * chaos driver's victims, one transport set each) talk to those two only. */
        unsigned j = my_id < 2 ? (unsigned)(rnd() % (unsigned)n_peers) : (unsigned)(rnd() % 2);
        unsigned what = (unsigned)(rnd() % 10);

        if ((int)j == my_id || peer_ready(j) != 0) {
            usleep(2000);
            continue;
        }
        if (what < 4)
            do_write(j);
        else if (what < 7)
            do_read(j);
        else
            do_notify(j);
    }
    dump_counts();
    logf_("QUIESCED");
    atomic_store(&sender_done, true);
    while (!stop_all)
        usleep(20000);
    pthread_join(rx, NULL);
    dump_counts();
    sample_mem();
    for (int j = 0; j < n_peers; j++)
        if (peers[j].seg != NULL)
            ote_segment_close(peers[j].seg);
    ote_engine_destroy(engine);
    logf_("END clean");
    close(log_fd);
    return 0;
}
