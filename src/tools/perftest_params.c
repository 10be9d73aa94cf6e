/*
 * ote_perftest's parameters: the options, their defaults and checks, the
 * usage text, and the helpers every part uses (clock, fatal errors).
 */
#include "perftest.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char *const test_names[NUM_TESTS] = {"write_bw", "read_bw",  "write_lat",
                                           "read_lat", "kv_write", "kv_read"};

const char tool_name[] = "ote_perftest";

opts_t opt = {
    .test = T_WRITE_BW, .batch = 0, .iters = 0, .threads = 1, .depth = 0,
    .local_mem = "host", .remote_mem = "host", .region = 512ul << 20,
    .kv_layers = 32, .kv_blocks = 64,
};

/* An integer option's value, whole and within [min, max] (what names the option). */
static long parse_count(const char *s, const char *what, long min, long max)
{
    char *end;
    long v;

    errno = 0;
    v     = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < min || v > max)
        die("%s must be a whole number from %ld to %ld, not '%s'", what, min, max, s);
    return v;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    size_t mult = 1;

    if (end == s || v < 0)
        die("bad size '%s'", s);
    switch (*end) {
    case 'k': case 'K': mult = 1ul << 10; end++; break;
    case 'm': case 'M': mult = 1ul << 20; end++; break;
    case 'g': case 'G': mult = 1ul << 30; end++; break;
    case '\0': break;
    default: die("bad size '%s'", s);
    }
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end != '\0')
        die("bad size '%s'", s);
    return (size_t)(v * (double)mult);
}

void mem_check_location(const char *m)
{
    if (strcmp(m, "host") != 0)
        die("memory type '%s' is not available in this build (host only)", m);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ote_perftest [options] [PEER]\n"
            "  without PEER: serve as the target and print the segment name\n"
            "  PEER: segment name (host:port) of a serving ote_perftest\n"
            "  --loopback          start a target process on this host and run against it\n"
            "  -t TEST             write_bw (default), read_bw, write_lat, read_lat,\n"
            "                      kv_write, kv_read (the KV-cache pattern, see --kv)\n"
            "  -s SIZE[,SIZE...]   block sizes, k/m/g suffixes (default 1m; 8 for *_lat)\n"
            "  -b BATCH            requests per batch (default 8; 1 for *_lat)\n"
            "  -n ITERS            batches per size and thread (default: about 2 GiB per\n"
            "                      size shared by the threads, 50 to 200000 batches each;\n"
            "                      20000 rounds for *_lat)\n"
            "  -T THREADS          submitting threads (default 1)\n"
            "  -D DEPTH            batches in flight per thread (default 2; 1 for *_lat)\n"
            "  -m host             local memory type\n"
            "  -M host             remote memory type\n"
            "  -x TLS              transports (sets OTE_TLS)\n"
            "  -l ADDR             control-plane listen address (host:port)\n"
            "  --region SIZE       target region size (default 512m)\n"
            "  --malloc            memory from malloc (huge pages asked for), registered,\n"
            "                      the --loopback target's too (default: ote_mem_alloc,\n"
            "                      whose memory same-host peers can map)\n"
            "  --check             verify every byte\n"
            "  --json FILE         one JSON object a line: \"type\" \"result\" (a size's\n"
            "                      figures), \"kv_result\" or \"rail\" (a rail's counters,\n"
            "                      after the figures), \"schema\" 1; fields in\n"
            "                      docs/performance.md\n"
            "  --kv L:B            kv_*: L layers of B blocks of the -s size (default\n"
            "                      32:64 of 16k) scattered over both sides, one batch\n"
            "                      per layer; -n requests (default 20)\n"
            "  -q                  the figures and the rails' counters, no header\n");
}

void perftest_mem_get(ote_engine_h e, size_t len, unsigned access, void **buf_p, ote_mem_h *mem_p)
{
    ote_status_t st;

    if (!opt.use_malloc) {
        st = ote_mem_alloc(e, len, NULL, access, buf_p, mem_p);
    } else {
        ote_mem_desc_t d = {.length = len, .access = access};

        if (posix_memalign(&d.addr, 2ul << 20, len) != 0)
            die("allocating %zu bytes: out of memory", len);
        /* Huge pages where the system has them, as ucx_perftest asks for its buffers. */
        (void)madvise(d.addr, len, MADV_HUGEPAGE);
        st = ote_mem_register(e, &d, 1, mem_p);
        if (st != OTE_OK)
            free(d.addr);
        *buf_p = d.addr;
    }
    if (st != OTE_OK)
        die("%s %zu bytes: %s", opt.use_malloc ? "registering" : "allocating", len,
            ote_status_string(st));
}

void perftest_mem_put(ote_engine_h e, void *buf, ote_mem_h mem)
{
    if (!opt.use_malloc) {
        ote_mem_free(e, mem);
        return;
    }
    ote_mem_deregister(e, mem);
    free(buf);
}

/* Parse argv into opt: -1 to go on, else the exit code (help, bad usage). */
int perftest_parse(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"loopback", no_argument, NULL, 'L'}, {"check", no_argument, NULL, 'C'},
        {"json", required_argument, NULL, 'J'}, {"region", required_argument, NULL, 'R'},
        {"kv", required_argument, NULL, 'K'}, {"help", no_argument, NULL, 'h'},
        {"malloc", no_argument, NULL, 'A'},
        {NULL, 0, NULL, 0},
    };
    const char *sizes = NULL;
    int c;

    while ((c = getopt_long(argc, argv, "t:s:b:n:T:D:m:M:x:l:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 't': {
            int i;

            for (i = 0; i < NUM_TESTS && strcmp(optarg, test_names[i]) != 0; i++)
                ;
            if (i == NUM_TESTS) {
                char known[128];
                size_t k = 0;

                for (int j = 0; j < NUM_TESTS; j++)
                    k += (size_t)snprintf(known + k, sizeof(known) - k, "%s%s", j ? ", " : "",
                                          test_names[j]);
                die("unknown test '%s' (%s)", optarg, known);
            }
            opt.test = (test_t)i;
            break;
        }
        case 's': sizes = optarg; break;
        case 'b':
            opt.batch = (size_t)parse_count(optarg, "-b (requests per batch)", 1, 1l << 20);
            break;
        case 'n': opt.iters = parse_count(optarg, "-n (batches)", 1, 1l << 40); break;
        case 'T': opt.threads = (int)parse_count(optarg, "-T (threads)", 1, 64); break;
        case 'D': opt.depth = (int)parse_count(optarg, "-D (batches in flight)", 1, 1024); break;
        case 'm': opt.local_mem = optarg; break;
        case 'M': opt.remote_mem = optarg; break;
        case 'x': opt.tls = optarg; break;
        case 'l': opt.listen = optarg; break;
        case 'q': opt.quiet = true; break;
        case 'L': opt.loopback = true; break;
        case 'C': opt.check = true; break;
        case 'A': opt.use_malloc = true; break;
        case 'J': opt.json = optarg; break;
        case 'R': opt.region = parse_size(optarg); break;
        case 'K':
            if (sscanf(optarg, "%zu:%zu%c", &opt.kv_layers, &opt.kv_blocks, &(char){0}) != 2 ||
                opt.kv_layers == 0 || opt.kv_blocks == 0 || opt.kv_layers > 4096 ||
                opt.kv_blocks > 65536)
                die("--kv wants LAYERS:BLOCKS (1..4096 layers, 1..65536 blocks)");
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc)
        opt.peer = argv[optind];
    if (optind + 1 < argc)
        die("one PEER at most ('%s' is one too many)", argv[optind + 1]);
    if (opt.loopback && opt.peer != NULL)
        die("--loopback starts its own target: no PEER with it ('%s')", opt.peer);
    {
        bool lat = opt.test == T_WRITE_LAT || opt.test == T_READ_LAT;
        bool kv  = opt.test == T_KV_WRITE || opt.test == T_KV_READ;
        char buf[512], *save = NULL;

        snprintf(buf, sizeof(buf), "%s", sizes ? sizes : (lat ? "8" : kv ? "16k" : "1m"));
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (opt.num_sizes == MAX_SIZES)
                die("-s: %d sizes at most", MAX_SIZES);
            opt.sizes[opt.num_sizes++] = parse_size(t);
        }
        if (opt.num_sizes == 0)
            die("-s: no size in '%s'", buf);
        if (opt.batch == 0)
            opt.batch = lat ? 1 : 8;
        if (opt.depth <= 0)
            opt.depth = lat ? 1 : 2;
    }
    for (size_t i = 0; i < opt.num_sizes; i++) {
        if (opt.sizes[i] == 0)
            die("block size must be positive");
    }
    return -1;
}
