/* Topology queries (hwloc). */
#include "topo.h"

#ifdef HAVE_HWLOC
#include <stdio.h>
#include <string.h>

/*
 * The CPUs nearest all the named network devices: the cpuset of the first
 * non-I/O ancestor they share in topo (UCT names such as "mlx5_0:1" are
 * looked up by their OS device part, "mlx5_0"). 1: found and written to
 * out; 0: a device hwloc does not place (loopback, virtual NICs), devices
 * in different places, or a place that is the whole machine.
 */
int ote_topo_nic_cpuset(hwloc_topology_t topo, const char *const *devs, size_t n,
                        hwloc_bitmap_t out)
{
    hwloc_const_bitmap_t set = NULL;

    for (size_t i = 0; i < n; i++) {
        hwloc_obj_t dev = NULL, anc;
        char name[64];

        snprintf(name, sizeof(name), "%s", devs[i]);
        name[strcspn(name, ":")] = '\0';
        while ((dev = hwloc_get_next_osdev(topo, dev)) != NULL) {
            if (dev->name != NULL && strcmp(dev->name, name) == 0)
                break;
        }
        anc = dev != NULL ? hwloc_get_non_io_ancestor_obj(topo, dev) : NULL;
        if (anc == NULL || anc->cpuset == NULL || (set != NULL && !hwloc_bitmap_isequal(set, anc->cpuset)))
            return 0;
        set = anc->cpuset;
    }
    if (set == NULL || hwloc_bitmap_iszero(set) ||
        hwloc_bitmap_isequal(set, hwloc_topology_get_complete_cpuset(topo)))
        return 0;
    return hwloc_bitmap_copy(out, set) == 0 ? 1 : 0;
}
#endif
