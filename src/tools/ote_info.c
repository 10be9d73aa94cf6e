/* ote_info: version, transports and devices, configuration. */
#include "core/engine.h"
#include "base/log.h"
#ifdef HAVE_LIBURING
#include "uct_ext/file/file.h"
#endif

#include <getopt.h>
#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ote_engine_print_transports(ote_engine_h e, FILE *f);
/* ote_info_stats.c */
int  ote_info_stats(const char *addr, bool nonzero, FILE *out);

static void usage(FILE *f)
{
    fprintf(f, "usage: ote_info [-v] [-c] [-d] [-r] [-h] [--stats HOST:PORT [--nonzero]]\n"
               "  -v  version\n"
               "  -c  every configuration variable with its value, default and description\n"
               "  -d  transports and devices a default engine would use, with their addresses,\n"
               "      capabilities and selection; RDMA ports and GIDs; for each memory (NUMA\n"
               "      node, GPU), its NICs ranked by topology and those left out\n"
               "  -r  the counters of a rail (ote_segment_rails, ote_engine_rails, the rail\n"
               "      table of ote_perftest) and what each means\n"
               "  --stats HOST:PORT  the series of the engines whose metrics endpoint\n"
               "      (OTE_METRICS_ADDR) listens there; --nonzero: only samples not 0\n");
}

/* The fields of ote_rail_info_t, as ote_segment_rails() and ote_engine_rails() fill them. */
static void print_rail_counters(FILE *f)
{
    static const char *const rows[][2] = {
        {"transport", "the rail's transport (tcp, cma, shm, uct_tcp, rc_mlx5, ...)"},
        {"device", "the local device it uses (eth1, lo, mlx5_0:1, memory)"},
        {"state", "ACTIVE (carries slices), COOLING (paused after an error, or its port is "
                  "down), PROBING (one slice tests it before it carries again), CLOSED (no "
                  "connection)"},
        {"bytes", "bytes delivered on the rail (per segment since it was opened; per engine "
                  "summed over the open segments)"},
        {"slices", "slices delivered on the rail"},
        {"retries", "slices that failed on the rail and were posted again on another rail "
                    "(OTE_RETRY_COUNT)"},
        {"errors", "slices that failed on the rail"},
        {"inflight_bytes", "bytes bound to the rail and not ended"},
        {"bandwidth", "bytes per second the rail delivered lately (EWMA, seeded from the "
                      "transport's estimate); slices go to the rail with the earliest "
                      "predicted completion"},
        {"cooldown_ms", "while COOLING: time left in the pause (OTE_RAIL_COOLDOWN_MS, doubling "
                        "up to OTE_RAIL_COOLDOWN_MAX_MS); UINT64_MAX while its port is down"},
    };

    fprintf(f, "# Rail counters (ote_rail_info_t: ote_segment_rails, ote_engine_rails; "
               "ote_perftest prints them per rail)\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        fprintf(f, "#   %-15s %s\n", rows[i][0], rows[i][1]);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"stats", required_argument, NULL, 'S'},
        {"nonzero", no_argument, NULL, 'Z'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool cfg = false, dev = false, rails = false, nonzero = false;
    const char *stats = NULL;
    int opt;

    while ((opt = getopt_long(argc, argv, "vcdrh", longopts, NULL)) != -1) {
        switch (opt) {
        case 'S': stats = optarg; break;
        case 'Z': nonzero = true; break;
        case 'v': break;
        case 'c': cfg = true; break;
        case 'd': dev = true; break;
        case 'r': rails = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ote_info: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (nonzero && stats == NULL) {
        fprintf(stderr, "ote_info: --nonzero goes with --stats HOST:PORT\n");
        return 2;
    }
    if (stats != NULL)
        return ote_info_stats(stats, nonzero, stdout);
    printf("# OrbitTE version %s\n", ote_version());
    if (cfg) {
        /* Every table: the engine's, then those of proto, mem and the components. */
        if (ote_engine_config_print(stdout) != OTE_OK)
            return 1;
    }
    if (rails)
        print_rail_counters(stdout);
    if (dev) {
        /* What a default engine uses: listening on every address, so on every interface. */
        ote_engine_params_t p = {.listen_addr = NULL};
        ote_engine_h e;
        ote_status_t st = ote_engine_create(&p, &e);

        if (st != OTE_OK) {
            fprintf(stderr, "ote_info: engine: %s\n", ote_status_string(st));
            /* Still show what exists, so that the selection can be fixed. */
            fprintf(stderr, "ote_info: listing with OTE_TLS=all OTE_NET_DEVICES=all\n");
            setenv("OTE_TLS", "all", 1);
            setenv("OTE_NET_DEVICES", "all", 1);
            if (ote_engine_create(&p, &e) != OTE_OK)
                return 1;
            ote_engine_print_transports(e, stdout);
            ote_engine_destroy(e);
            return 1;
        }
        ote_engine_print_transports(e, stdout);
#ifdef HAVE_LIBURING
        {
            const char *why = "OTE_FILE_* do not parse";
            ote_file_config_t cfg;

            /* The engine read the same table at its creation: this one parses too. */
            if (ote_config_fill(&ote_file_config_table, &cfg) == OTE_OK) {
                (void)ote_file_gds_load(&cfg, &why);
                ote_config_release(&ote_file_config_table, &cfg);
            }
            printf("#\n# GPU memory to and from file segments: %s\n", why);
        }
#endif
        ote_engine_destroy(e);
    }
    return 0;
}
