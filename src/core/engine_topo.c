/*
 * The engine's topology: how near each of its NICs is to each memory of
 * the machine (base/topo.h), which ranks the rails of each request
 * (ote_proto_rails_rank), and what ote_info -d says of it.
 */
#include "base/cuda_api.h"
#include "base/log.h"
#include "core/engine_int.h"
#include "uct_ext/rdma/rdma.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* This machine's topology, loaded once per process and kept until exit. */
static pthread_once_t machine_once = PTHREAD_ONCE_INIT;
static ote_topo_t    *machine_topo;

static void machine_load(void)
{
    if (ote_topo_open(NULL, &machine_topo) != OTE_OK)
        machine_topo = NULL;
}

/* The engine's NICs: its network transports' devices, then every RDMA port. */
static size_t engine_nics(ote_engine_h e, const char **nics, size_t max)
{
    size_t n = 0;

    for (size_t k = 0; k < e->facts.num_tls && n < max; k++) {
        if (e->facts.tls[k].resource.is_network)
            nics[n++] = e->facts.tls[k].resource.dev_name;
    }
    for (size_t d = 0; e->rdma != NULL && d < e->rdma->num_devs; d++) {
        for (size_t p = 0; p < e->rdma->devs[d].num_ports && n < max; p++)
            nics[n++] = e->rdma->devs[d].ports[p].name;
    }
    return n;
}

/* The PCI address of each CUDA device by ordinal, where CUDA is loaded and tells it. */
static size_t engine_gpus(char (*ids)[OTE_TOPO_PLACE_MAX], const char **gpus, size_t max)
{
    const ote_cuda_api_t *api = ote_cuda_api();
    int n = api != NULL && api->device_get_pci_bus_id != NULL ? ote_cuda_device_count() : 0;
    size_t k;

    for (k = 0; k < (size_t)(n > 0 ? n : 0) && k < max; k++) {
        if (api->device_get_pci_bus_id(ids[k], OTE_TOPO_PLACE_MAX, (int)k) != OTE_CUDA_SUCCESS)
            ids[k][0] = '\0';
        ids[k][OTE_TOPO_PLACE_MAX - 1] = '\0';
        gpus[k] = ids[k];
    }
    return k;
}

void ote_engine_topo_open(ote_engine_h e)
{
    char ids[OTE_TOPO_MAX_PLACES][OTE_TOPO_PLACE_MAX];
    const char *gpus[OTE_TOPO_MAX_PLACES];
    const char *nics[OTE_TOPO_MAX_NICS];
    const char *xml = e->facts.config.hwloc_xml;
    ote_topo_t *topo;
    size_t ngpus;

    if (xml != NULL && xml[0] != '\0') {
        if (ote_topo_open(xml, &e->facts.topo) != OTE_OK) {
            ote_warn("OTE_HWLOC_XML=%s does not load: rails are not ranked by topology", xml);
            return;
        }
        topo = e->facts.topo;
    } else {
        pthread_once(&machine_once, machine_load);
        topo = machine_topo;
    }
    if (topo == NULL) {
        ote_debug("no topology (hwloc): rails are not ranked by topology");
        return;
    }
    ngpus = engine_gpus(ids, gpus, OTE_TOPO_MAX_PLACES);
    if (ote_topo_table_build(topo, nics, engine_nics(e, nics, OTE_TOPO_MAX_NICS), gpus, ngpus,
                             &e->facts.topo_table) != OTE_OK)
        e->facts.topo_table = NULL;
}

void ote_engine_topo_close(ote_engine_h e)
{
    ote_topo_table_free(e->facts.topo_table);
    e->facts.topo_table = NULL;
    ote_topo_close(e->facts.topo); /* the XML one; this machine's stays */
    e->facts.topo = NULL;
}

void ote_engine_topo_print(ote_engine_h e, FILE *f)
{
    const ote_topo_t *topo    = e->facts.topo != NULL ? e->facts.topo : machine_topo;
    const ote_topo_table_t *t = e->facts.topo_table;

    fprintf(f, "#\n# Rails by topology (hwloc: %s)\n", topo != NULL ? ote_topo_source(topo)
                                                                   : "not available");
    if (t == NULL || topo == NULL)
        return;
    if (t->num_nics == 0)
        fprintf(f, "#   no network device\n");
    for (size_t p = 0; p < t->num_places && t->num_nics > 0; p++) {
        double score[OTE_TOPO_MAX_NICS], weight[OTE_TOPO_MAX_NICS];
        size_t order[OTE_TOPO_MAX_NICS];
        double best;

        for (size_t k = 0; k < t->num_nics; k++) {
            score[k] = t->score[p][k];
            order[k] = k;
        }
        best = ote_topo_rank(score, t->num_nics, weight);
        /* Nearest first; those not placed last. */
        for (size_t i = 1; i < t->num_nics; i++) {
            for (size_t j = i; j > 0 && score[order[j]] > score[order[j - 1]]; j--) {
                size_t tmp   = order[j];
                order[j]     = order[j - 1];
                order[j - 1] = tmp;
            }
        }
        if (strncmp(t->where[p], "pci:", 4) == 0)
            fprintf(f, "#   memory %s (GPU at PCI %s)\n", t->place[p], t->where[p] + 4);
        else
            fprintf(f, "#   memory %s\n", t->place[p]);
        for (size_t i = 0; i < t->num_nics; i++) {
            size_t k = order[i];
            char why[OTE_TOPO_WHY_MAX];
            double s;

            if (ote_topo_score(topo, t->where[p], t->nic[k], &s, why, sizeof(why)) != OTE_OK) {
                fprintf(f, "#     %-12s not ranked (%s): kept, weight 1\n", t->nic[k], why);
            } else if (weight[k] == 0) {
                fprintf(f, "#     %-12s score %.3f left out: under a quarter of the best "
                           "(%.3f), carries only when no other rail can (%s)\n", t->nic[k], s,
                        best, why);
            } else {
                fprintf(f, "#     %-12s score %.3f weight %.2f (%s)\n", t->nic[k], s, weight[k],
                        why);
            }
        }
    }
}
