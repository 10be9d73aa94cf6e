/*
 * Where a worker thread runs: the CPUs OTE_WORKER_CPUS lists, or else the
 * CPUs near the NICs of its network ifaces (hwloc), or anywhere.
 */
#include "base/log.h"
#include "base/topo.h"
#include "core/engine_facts.h"
#include "worker.h"

#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * OTE_WORKER_CPUS: "0,2,4-7". Worker i gets the (i mod n)-th CPU listed.
 * Returns the number of CPUs, 0 when the list is malformed.
 */
static int parse_cpu_list(const char *p, int *cpus, int max)
{
    int n = 0;

    while (*p != '\0') {
        char *end;
        long a, b;

        errno = 0;
        a = strtol(p, &end, 10);
        if (end == p || errno != 0 || a < 0 || a >= CPU_SETSIZE)
            return 0;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || errno != 0 || b < a || b >= CPU_SETSIZE)
                return 0;
        }
        for (long c = a; c <= b; c++) {
            if (n == max)
                return 0;
            cpus[n++] = (int)c;
        }
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return 0;
        p = end;
    }
    return n;
}

#ifdef HAVE_HWLOC
/*
 * Without OTE_WORKER_CPUS: a worker whose network transports all sit on
 * devices of one locality is bound to the CPUs near them; otherwise it
 * stays unbound, free to run anywhere.
 */
static void worker_bind_near_nic(ote_worker_t *w)
{
    const char *devs[OTE_MAX_IFACES];
    hwloc_topology_t io_topo;
    hwloc_bitmap_t set;
    size_t n = 0;
    char buf[256];

    for (size_t i = 0; i < w->num_ifaces && n < OTE_MAX_IFACES; i++) {
        const ote_tl_resource_t *res = &w->ifaces[i]->resource;

        if (res->is_network && strcmp(res->dev_name, "lo") != 0)
            devs[n++] = res->dev_name;
    }
    if (n == 0)
        return;
    io_topo = ote_topo_this_system();
    if (io_topo == NULL || (set = hwloc_bitmap_alloc()) == NULL)
        return;
    if (ote_topo_nic_cpuset(io_topo, devs, n, set) == 1) {
        hwloc_bitmap_snprintf(buf, sizeof(buf), set);
        if (hwloc_set_thread_cpubind(io_topo, w->thread, set, 0) == 0)
            ote_info("worker %zu bound near its NIC (cpuset %s)", w->index, buf);
        else
            ote_warn("worker %zu: cannot bind to cpuset %s", w->index, buf);
    }
    hwloc_bitmap_free(set);
}
#endif

void ote_worker_bind(ote_worker_t *w)
{
    const char *list = ote_engine_facts(w->engine)->config.worker_cpus;
    cpu_set_t set;
    int n, cpu;

    if (list == NULL || *list == '\0') {
#ifdef HAVE_HWLOC
        worker_bind_near_nic(w);
#endif
        return;
    }
    {
        int mine[CPU_SETSIZE];

        n = parse_cpu_list(list, mine, CPU_SETSIZE);
        if (n == 0) {
            ote_warn("OTE_WORKER_CPUS '%s' is not a CPU list such as 0,2,4-7; workers unbound",
                     list);
            return;
        }
        cpu = mine[w->index % (size_t)n];
    }
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(w->thread, sizeof(set), &set) != 0)
        ote_warn("cannot bind worker %zu to CPU %d", w->index, cpu);
    else
        ote_info("worker %zu bound to CPU %d", w->index, cpu);
}

