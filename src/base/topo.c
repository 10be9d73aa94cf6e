/* Topology queries (hwloc): NICs near CPUs, NICs near memories. */
#include "topo.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ote_topo {
#ifdef HAVE_HWLOC
    hwloc_topology_t hw;
#endif
    char source[256];
};

double ote_topo_rank(const double *score, size_t n, double *weight_p)
{
    double best = -1;

    for (size_t i = 0; i < n; i++) {
        if (score[i] > best)
            best = score[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (best <= 0 || score[i] < 0)
            weight_p[i] = 1; /* not placed: nothing known against it */
        else if (score[i] < best * OTE_TOPO_DROP_RATIO)
            weight_p[i] = 0;
        else
            weight_p[i] = score[i] / best;
    }
    return best > 0 ? best : -1;
}

const char *ote_topo_source(const ote_topo_t *topo)
{
    return topo->source;
}

void ote_topo_table_free(ote_topo_table_t *table)
{
    free(table);
}

int ote_topo_table_place(const ote_topo_table_t *table, const char *location)
{
    for (size_t i = 0; table != NULL && location != NULL && i < table->num_places; i++) {
        if (strcmp(table->place[i], location) == 0)
            return (int)i;
    }
    return -1;
}

int ote_topo_table_nic(const ote_topo_table_t *table, const char *nic)
{
    for (size_t i = 0; table != NULL && nic != NULL && i < table->num_nics; i++) {
        if (strcmp(table->nic[i], nic) == 0)
            return (int)i;
    }
    return -1;
}

ote_status_t ote_topo_table_build(const ote_topo_t *topo, const char *const *nics, size_t n,
                                  const char *const *gpus, size_t ngpus,
                                  ote_topo_table_t **table_p)
{
    ote_topo_table_t *t = calloc(1, sizeof(*t));
    char found[OTE_TOPO_MAX_PLACES][OTE_TOPO_PLACE_MAX];
    size_t nfound;

    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    /* NUMA nodes, GPUs at the PCI addresses given, then hwloc's other cudaN. */
    nfound = ote_topo_places(topo, found, OTE_TOPO_MAX_PLACES);
    for (size_t i = 0; i < nfound && strncmp(found[i], "cpu:", 4) == 0; i++) {
        snprintf(t->place[t->num_places], OTE_TOPO_PLACE_MAX, "%s", found[i]);
        snprintf(t->where[t->num_places++], OTE_TOPO_PLACE_MAX, "%s", found[i]);
    }
    for (size_t g = 0; g < ngpus && t->num_places < OTE_TOPO_MAX_PLACES; g++) {
        char where[OTE_TOPO_PLACE_MAX];

        if (gpus[g] == NULL || gpus[g][0] == '\0' || strlen(gpus[g]) + 5 > sizeof(where))
            continue;
        snprintf(where, sizeof(where), "pci:%s", gpus[g]);
        if (!ote_topo_has(topo, where))
            continue;
        snprintf(t->place[t->num_places], OTE_TOPO_PLACE_MAX, "cuda:%zu", g);
        snprintf(t->where[t->num_places++], OTE_TOPO_PLACE_MAX, "%s", where);
    }
    for (size_t i = 0; i < nfound && t->num_places < OTE_TOPO_MAX_PLACES; i++) {
        if (ote_topo_table_place(t, found[i]) >= 0)
            continue;
        snprintf(t->place[t->num_places], OTE_TOPO_PLACE_MAX, "%s", found[i]);
        snprintf(t->where[t->num_places++], OTE_TOPO_PLACE_MAX, "%s", found[i]);
    }
    for (size_t k = 0; k < n && t->num_nics < OTE_TOPO_MAX_NICS; k++) {
        if (strlen(nics[k]) >= OTE_TOPO_NIC_MAX || ote_topo_table_nic(t, nics[k]) >= 0)
            continue;
        snprintf(t->nic[t->num_nics++], OTE_TOPO_NIC_MAX, "%s", nics[k]);
    }
    for (size_t p = 0; p < t->num_places; p++) {
        for (size_t k = 0; k < t->num_nics; k++) {
            double s;
            char why[OTE_TOPO_WHY_MAX];

            t->score[p][k] = ote_topo_score(topo, t->where[p], t->nic[k], &s, why,
                                            sizeof(why)) == OTE_OK ? (float)s : -1.0f;
        }
    }
    *table_p = t;
    return OTE_OK;
}

#ifdef HAVE_HWLOC
static pthread_once_t   sys_topo_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t sys_topo;
static bool             sys_topo_ok;

static void sys_topo_load(void)
{
    if (hwloc_topology_init(&sys_topo) != 0)
        return;
    hwloc_topology_set_io_types_filter(sys_topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(sys_topo) != 0 || !hwloc_topology_is_thissystem(sys_topo)) {
        hwloc_topology_destroy(sys_topo);
        return;
    }
    sys_topo_ok = true;
}

hwloc_topology_t ote_topo_this_system(void)
{
    pthread_once(&sys_topo_once, sys_topo_load);
    return sys_topo_ok ? sys_topo : NULL;
}
#endif

#ifdef HAVE_HWLOC
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

ote_status_t ote_topo_open(const char *xml_path, ote_topo_t **topo_p)
{
    ote_topo_t *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return OTE_ERR_NO_MEMORY;
    if (hwloc_topology_init(&t->hw) != 0) {
        free(t);
        return OTE_ERR_NO_MEMORY;
    }
    snprintf(t->source, sizeof(t->source), "%s",
             xml_path != NULL && xml_path[0] != '\0' ? xml_path : "this machine");
    if (xml_path != NULL && xml_path[0] != '\0' && hwloc_topology_set_xml(t->hw, xml_path) != 0) {
        ote_error("topology: cannot read the hwloc XML file %s", xml_path);
        goto err;
    }
    hwloc_topology_set_io_types_filter(t->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t->hw) != 0) {
        ote_error("topology: hwloc cannot load %s", t->source);
        goto err;
    }
    *topo_p = t;
    return OTE_OK;

err:
    hwloc_topology_destroy(t->hw);
    free(t);
    return OTE_ERR_IO;
}

void ote_topo_close(ote_topo_t *topo)
{
    if (topo == NULL)
        return;
    hwloc_topology_destroy(topo->hw);
    free(topo);
}

/* The OS device called name ("mlx5_0:1" is port 1 of "mlx5_0"), or NULL. */
static hwloc_obj_t osdev_find(hwloc_topology_t hw, const char *name)
{
    char base[OTE_TOPO_NIC_MAX];
    hwloc_obj_t dev = NULL;

    snprintf(base, sizeof(base), "%s", name);
    base[strcspn(base, ":")] = '\0';
    while ((dev = hwloc_get_next_osdev(hw, dev)) != NULL) {
        if (dev->name != NULL && strcmp(dev->name, base) == 0)
            return dev;
    }
    return NULL;
}

/* The PCI device an OS device sits on, else the object itself. */
static hwloc_obj_t pci_of(hwloc_obj_t obj)
{
    for (hwloc_obj_t o = obj; o != NULL; o = o->parent) {
        if (o->type == HWLOC_OBJ_PCI_DEVICE)
            return o;
    }
    return obj;
}

/* The memory a location names: a NUMA node, or the PCI device of a GPU. */
static hwloc_obj_t place_find(hwloc_topology_t hw, const char *location)
{
    char *end;
    long idx;

    if (strncmp(location, "pci:", 4) == 0)
        return hwloc_get_pcidev_by_busidstring(hw, location + 4);
    if (strncmp(location, "cpu:", 4) == 0) {
        idx = strtol(location + 4, &end, 10);
        if (end == location + 4 || *end != '\0' || idx < 0)
            return NULL;
        return hwloc_get_numanode_obj_by_os_index(hw, (unsigned)idx);
    }
    if (strncmp(location, "cuda:", 5) == 0) {
        char name[32];
        hwloc_obj_t dev;

        idx = strtol(location + 5, &end, 10);
        if (end == location + 5 || *end != '\0' || idx < 0)
            return NULL;
        snprintf(name, sizeof(name), "cuda%ld", idx);
        dev = osdev_find(hw, name);
        return dev != NULL ? pci_of(dev) : NULL;
    }
    return NULL;
}

/* The NUMA nodes nearest obj (those of its first non-I/O ancestor). */
static hwloc_const_nodeset_t nodes_of(hwloc_topology_t hw, hwloc_obj_t obj)
{
    hwloc_obj_t anc =
        obj->type == HWLOC_OBJ_NUMANODE ? obj : hwloc_get_non_io_ancestor_obj(hw, obj);

    return anc != NULL ? anc->nodeset : NULL;
}

/*
 * The NUMA ratio between two sets of nodes: the best over their pairs of a
 * node's distance to itself over the distance between them (hwloc's
 * latency matrix); 1/2 when hwloc has none. *d_p: that distance (0: none).
 */
static double numa_ratio(hwloc_topology_t hw, hwloc_const_nodeset_t a, hwloc_const_nodeset_t b,
                         unsigned long *self_p, unsigned long *d_p)
{
    struct hwloc_distances_s *dist = NULL;
    unsigned nr = 1;
    double best = -1;
    int i, j;

    *self_p = *d_p = 0;
    if (hwloc_distances_get_by_type(hw, HWLOC_OBJ_NUMANODE, &nr, &dist,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) != 0 || nr == 0)
        return 0.5;
    hwloc_bitmap_foreach_begin(i, a) {
        hwloc_bitmap_foreach_begin(j, b) {
            hwloc_obj_t na = hwloc_get_numanode_obj_by_os_index(hw, (unsigned)i);
            hwloc_obj_t nb = hwloc_get_numanode_obj_by_os_index(hw, (unsigned)j);
            hwloc_uint64_t self, ab, ba;

            if (na == NULL || nb == NULL ||
                hwloc_distances_obj_pair_values(dist, na, na, &self, &self) != 0 ||
                hwloc_distances_obj_pair_values(dist, na, nb, &ab, &ba) != 0 || ab == 0)
                continue;
            if ((double)self / (double)ab > best) {
                best    = (double)self / (double)ab;
                *self_p = (unsigned long)self;
                *d_p    = (unsigned long)ab;
            }
        }
        hwloc_bitmap_foreach_end();
    }
    hwloc_bitmap_foreach_end();
    hwloc_distances_release(hw, dist);
    return best > 0 ? best : 0.5;
}

/* "NUMA node 1, distance 20 (10 local)" or "NUMA node 1, no distance matrix". */
static void numa_why(char *why, size_t len, const char *what, hwloc_const_nodeset_t nodes,
                     unsigned long self, unsigned long d)
{
    char set[64];

    hwloc_bitmap_list_snprintf(set, sizeof(set), nodes);
    if (d != 0)
        snprintf(why, len, "%s NUMA node %s, distance %lu (%lu local)", what, set, d, self);
    else
        snprintf(why, len, "%s NUMA node %s (no distance matrix: 1/2)", what, set);
}

bool ote_topo_has(const ote_topo_t *topo, const char *location)
{
    return place_find(topo->hw, location) != NULL;
}

ote_status_t ote_topo_score(const ote_topo_t *topo, const char *location, const char *nic,
                            double *score_p, char *why, size_t why_len)
{
    hwloc_topology_t hw = topo->hw;
    hwloc_obj_t mem     = place_find(hw, location);
    hwloc_obj_t dev     = osdev_find(hw, nic);
    hwloc_const_nodeset_t mnodes, dnodes;
    unsigned long self, d;
    double r;

    if (mem == NULL || dev == NULL) {
        snprintf(why, why_len, "%s not in the topology", mem == NULL ? location : nic);
        return OTE_ERR_NOT_FOUND;
    }
    dev    = pci_of(dev);
    mnodes = nodes_of(hw, mem);
    dnodes = nodes_of(hw, dev);
    if (mnodes == NULL || dnodes == NULL) {
        snprintf(why, why_len, "%s has no NUMA node", mnodes == NULL ? location : nic);
        return OTE_ERR_NOT_FOUND;
    }
    if (mem->type == HWLOC_OBJ_NUMANODE) {
        if (hwloc_bitmap_isset(dnodes, mem->os_index)) {
            *score_p = 1;
            snprintf(why, why_len, "on NUMA node %u", mem->os_index);
            return OTE_OK;
        }
        *score_p = numa_ratio(hw, mnodes, dnodes, &self, &d);
        numa_why(why, why_len, "on", dnodes, self, d);
        return OTE_OK;
    }
    /* A GPU: peer-to-peer over PCIe between it and the NIC. */
    {
        hwloc_obj_t anc = hwloc_get_common_ancestor_obj(hw, mem, dev);

        if (anc != NULL && anc->type == HWLOC_OBJ_BRIDGE) {
            bool host = anc->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;

            *score_p = host ? 0.5 : 1;
            snprintf(why, why_len, "%s", host ? "same PCIe host bridge" : "same PCIe switch");
            return OTE_OK;
        }
        if (hwloc_bitmap_intersects(mnodes, dnodes)) {
            *score_p = 0.25;
            snprintf(why, why_len, "same NUMA node, other host bridge (through the CPU)");
            return OTE_OK;
        }
        r        = numa_ratio(hw, mnodes, dnodes, &self, &d);
        *score_p = r / 8;
        numa_why(why, why_len, "across sockets: on", dnodes, self, d);
        return OTE_OK;
    }
}

size_t ote_topo_places(const ote_topo_t *topo, char (*names)[OTE_TOPO_PLACE_MAX], size_t max)
{
    hwloc_obj_t o = NULL;
    size_t n      = 0;

    while (n < max && (o = hwloc_get_next_obj_by_type(topo->hw, HWLOC_OBJ_NUMANODE, o)) != NULL)
        snprintf(names[n++], OTE_TOPO_PLACE_MAX, "cpu:%u", o->os_index);
    o = NULL;
    while (n < max && (o = hwloc_get_next_osdev(topo->hw, o)) != NULL) {
        char *end;
        long idx;

        if (o->name == NULL || strncmp(o->name, "cuda", 4) != 0)
            continue;
        idx = strtol(o->name + 4, &end, 10);
        if (end != o->name + 4 && *end == '\0' && idx >= 0)
            snprintf(names[n++], OTE_TOPO_PLACE_MAX, "cuda:%ld", idx);
    }
    return n;
}
#else
ote_status_t ote_topo_open(const char *xml_path, ote_topo_t **topo_p)
{
    (void)xml_path;
    (void)topo_p;
    return OTE_ERR_UNSUPPORTED;
}

void ote_topo_close(ote_topo_t *topo)
{
    free(topo);
}

ote_status_t ote_topo_score(const ote_topo_t *topo, const char *location, const char *nic,
                            double *score_p, char *why, size_t why_len)
{
    (void)topo;
    (void)location;
    (void)nic;
    (void)score_p;
    snprintf(why, why_len, "built without hwloc");
    return OTE_ERR_NOT_FOUND;
}

bool ote_topo_has(const ote_topo_t *topo, const char *location)
{
    (void)topo;
    (void)location;
    return false;
}

size_t ote_topo_places(const ote_topo_t *topo, char (*names)[OTE_TOPO_PLACE_MAX], size_t max)
{
    (void)topo;
    (void)names;
    (void)max;
    return 0;
}
#endif
