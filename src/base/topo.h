/*
 * Topology queries for worker placement (hwloc).
 */
#ifndef OTE_BASE_TOPO_H
#define OTE_BASE_TOPO_H

#ifdef HAVE_HWLOC
#include <hwloc.h>
#include <stddef.h>

/*
 * The CPUs nearest all the network devices devs[0..n) in topo; 1: found
 * (written to out), 0: none single place (a device not placed, devices in
 * different places, or the whole machine).
 */
int ote_topo_nic_cpuset(hwloc_topology_t topo, const char *const *devs, size_t n,
                        hwloc_bitmap_t out);
#endif

#endif
