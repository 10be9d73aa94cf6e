/*
 * A process for the Prometheus and dashboard tests: an engine (with the
 * OTE_METRICS_ADDR of its environment) serving 4 MiB of memory; with
 * "PEER ADDR" it also writes then reads known amounts to the peer's region
 * at ADDR, checks the bytes, and says how many it moved. It prints
 *   name <engine name>
 *   region <address>
 *   metrics <host:port>
 *   moved <bytes>            (with PEER: requests that completed)
 * and stays up, its series served, until its stdin closes.
 */
#include "testlib.h"

#include <ote/ote.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN (4u << 20)

int main(int argc, char **argv)
{
    ote_engine_h e;
    ote_mem_h m;
    uint8_t *buf;
    unsigned long long moved = 0;
    char line[64];

    if (ote_engine_create(NULL, &e) != OTE_OK) {
        fprintf(stderr, "metrics_peer: engine creation failed\n");
        return 1;
    }
    if (ote_mem_alloc(e, LEN, NULL, OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE,
                      (void **)&buf, &m) != OTE_OK)
        return 1;
    printf("name %s\nregion %llu\nmetrics %s\n", ote_engine_name(e),
           (unsigned long long)(uintptr_t)buf,
           ote_engine_metrics_addr(e) ? ote_engine_metrics_addr(e) : "none");
    fflush(stdout);
    if (argc == 3) {
        ote_segment_h seg;
        uint64_t raddr = strtoull(argv[2], NULL, 10);
        ote_task_status_t st;

        if (ote_segment_open(e, argv[1], &seg) != OTE_OK) {
            fprintf(stderr, "metrics_peer: cannot open %s\n", argv[1]);
            return 1;
        }
        /* Writes of 1 B .. 2 MiB, then reads back, each checked. */
        for (size_t len = 1, i = 0; len <= (2u << 20); len = len * 3 + 1, i++) {
            ote_test_fill(buf, 0, len, i + 1);
            if (ote_test_xfer(e, seg, OTE_OP_WRITE, buf, raddr, len, 20000, &st) != OTE_OK ||
                st.state != OTE_TASK_COMPLETED)
                return 1;
            memset(buf, 0, len);
            if (ote_test_xfer(e, seg, OTE_OP_READ, buf, raddr, len, 20000, &st) != OTE_OK ||
                st.state != OTE_TASK_COMPLETED || ote_test_check(buf, 0, len, i + 1) != -1) {
                fprintf(stderr, "metrics_peer: read back of %zu bytes wrong\n", len);
                return 1;
            }
            moved += 2 * len;
        }
        printf("moved %llu\n", moved);
        fflush(stdout);
    }
    while (fgets(line, sizeof(line), stdin) != NULL)
        ;
    ote_mem_free(e, m);
    ote_engine_destroy(e);
    return 0;
}
