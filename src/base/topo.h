/*
 * Topology queries (hwloc): worker placement near a NIC, and how near each
 * NIC is to a memory, which ranks the rails of a request.
 */
#ifndef OTE_BASE_TOPO_H
#define OTE_BASE_TOPO_H

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef HAVE_HWLOC
#include <hwloc.h>

/*
 * The CPUs nearest all the network devices devs[0..n) in topo; 1: found
 * (written to out), 0: none single place (a device not placed, devices in
 * different places, or the whole machine).
 */
int ote_topo_nic_cpuset(hwloc_topology_t topo, const char *const *devs, size_t n,
                        hwloc_bitmap_t out);

/*
 * This machine's topology with its network and PCI devices (for binding
 * threads and memory), loaded on first use, once per process (a few
 * milliseconds), kept until exit; NULL where hwloc cannot load it.
 */
hwloc_topology_t ote_topo_this_system(void);
#endif

/*
 * How near a NIC is to a memory: a score in (0, 1], 1 the nearest, from the
 * path between them in the hwloc tree and hwloc's NUMA latency matrix
 * (r = a node's distance to itself / the distance between the two nodes;
 * 1/2 when hwloc has no matrix):
 *   host memory on NUMA node m:  NIC local to m: 1; else r
 *   GPU memory:  GPU and NIC below the same PCIe switch: 1; the same host
 *                bridge: 1/2; the same NUMA node (through the CPU): 1/4;
 *                other NUMA nodes (through the inter-socket link): r/8
 * A rail scoring under a quarter of the best is left out for that memory
 * (ote_topo_rank). Memories are named as regions are: "cpu:N" (NUMA node
 * N), "cuda:N" (hwloc's CUDA device cudaN; the engine's table places CUDA
 * devices by the PCI address CUDA gives, see ote_topo_table_build), or
 * "pci:DDDD:BB:DD.F" (the GPU at that PCI address); NICs by their OS name
 * ("eth0", "mlx5_0", and "mlx5_0:1" for port 1 of mlx5_0).
 */
#define OTE_TOPO_DROP_RATIO 0.25
#define OTE_TOPO_WHY_MAX    128

typedef struct ote_topo ote_topo_t;

/*
 * Load a topology with its I/O devices: from the hwloc XML export at
 * xml_path (tests, diagnostics), else of this machine (NULL or ""; hwloc's
 * own HWLOC_XMLFILE applies). UNSUPPORTED without hwloc; IO_ERROR when it
 * does not load.
 */
ote_status_t ote_topo_open(const char *xml_path, ote_topo_t **topo_p);
void         ote_topo_close(ote_topo_t *topo);
/* "this machine" or the XML file loaded. */
const char  *ote_topo_source(const ote_topo_t *topo);

/*
 * The score of nic for the memory at location. OTE_OK with *score_p and,
 * in why, the path ("same PCIe switch", ...); NOT_FOUND when hwloc does not
 * place one of them (why says which): such a rail is not ranked.
 */
ote_status_t ote_topo_score(const ote_topo_t *topo, const char *location, const char *nic,
                            double *score_p, char *why, size_t why_len);

/* True when hwloc places the memory at location. */
bool         ote_topo_has(const ote_topo_t *topo, const char *location);

/*
 * The memories of topo by their location names: "cpu:N" for each NUMA
 * node, then "cuda:N" for each CUDA device hwloc shows. Returns how many
 * (at most max); names[i] holds up to OTE_TOPO_PLACE_MAX characters.
 */
#define OTE_TOPO_PLACE_MAX 32
size_t ote_topo_places(const ote_topo_t *topo, char (*names)[OTE_TOPO_PLACE_MAX], size_t max);

/*
 * Scores of every place against every NIC, computed once (ote_topo_table_build)
 * and read without locks on the data path. score < 0: not placed.
 */
#define OTE_TOPO_MAX_PLACES 64
#define OTE_TOPO_MAX_NICS   64
#define OTE_TOPO_NIC_MAX    72

typedef struct {
    size_t num_places, num_nics;
    char   place[OTE_TOPO_MAX_PLACES][OTE_TOPO_PLACE_MAX]; /* as regions name it */
    char   where[OTE_TOPO_MAX_PLACES][OTE_TOPO_PLACE_MAX]; /* as scored: "pci:..." for a GPU
                                                             placed by its PCI address */
    char   nic[OTE_TOPO_MAX_NICS][OTE_TOPO_NIC_MAX];
    float  score[OTE_TOPO_MAX_PLACES][OTE_TOPO_MAX_NICS];
} ote_topo_table_t;

/*
 * The table of topo's places against nics[0..n) (duplicates counted once).
 * gpus[0..ngpus): the PCI address of each CUDA device by ordinal ("cuda:i"
 * is placed there), NULL or "" where unknown; hwloc's own CUDA devices
 * (cudaN) place the others.
 */
ote_status_t ote_topo_table_build(const ote_topo_t *topo, const char *const *nics, size_t n,
                                  const char *const *gpus, size_t ngpus,
                                  ote_topo_table_t **table_p);
void         ote_topo_table_free(ote_topo_table_t *table);
/* Index of a memory location ("cpu:N", "cuda:N") or a NIC in table, -1 if absent. */
int          ote_topo_table_place(const ote_topo_table_t *table, const char *location);
int          ote_topo_table_nic(const ote_topo_table_t *table, const char *nic);

/*
 * Rank n scores (score < 0: not placed): weight_p[i] = score / the best
 * score, 0 for a score under OTE_TOPO_DROP_RATIO of the best (left out),
 * 1 for one not placed (nothing known against it). Returns the best (-1:
 * none placed, every weight 1).
 */
double       ote_topo_rank(const double *score, size_t n, double *weight_p);

#endif
