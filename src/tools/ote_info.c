/* ote_info: version, transports and devices, configuration. */
#include "core/engine.h"
#include "base/log.h"

#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ote_engine_print_transports(ote_engine_h e, FILE *f);

static void usage(FILE *f)
{
    fprintf(f, "usage: ote_info [-v] [-c] [-d] [-h]\n"
               "  -v  version\n"
               "  -c  every configuration variable with its value, default and description\n"
               "  -d  transports and devices a default engine would use, with their addresses,\n"
               "      capabilities and selection; RDMA ports and GIDs; for each memory (NUMA\n"
               "      node, GPU), its NICs ranked by topology and those left out\n");
}

int main(int argc, char **argv)
{
    bool cfg = false, dev = false;
    int opt;

    while ((opt = getopt(argc, argv, "vcdh")) != -1) {
        switch (opt) {
        case 'v': break;
        case 'c': cfg = true; break;
        case 'd': dev = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    printf("# OrbitTE version %s\n", ote_version());
    if (cfg) {
        /* Every table: the engine's, then those of proto, mem and the components. */
        if (ote_engine_config_print(stdout) != OTE_OK)
            return 1;
    }
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
        ote_engine_destroy(e);
    }
    return 0;
}
