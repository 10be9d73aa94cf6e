/*
 * The engine's functions, for the engine's own files (engine*.c, host.c,
 * select.c) and the tools: its settings tables, the device monitor, the
 * topology, devices that join or leave, its descriptor. The rooms of core
 * read the engine through core/engine_facts.h and never include this
 * header; the whole struct ote_engine is in core/engine_int.h.
 */
#ifndef OTE_CORE_ENGINE_H
#define OTE_CORE_ENGINE_H

#include "base/config.h"
#include "engine_facts.h"
#include "select.h"

#include <stdio.h>

extern const ote_config_table_t ote_engine_config_table;

/* Upper bound on the tables ote_engine_config_tables() lists. */
#define OTE_CONFIG_MAX_TABLES 32

/*
 * Every configuration table an engine reads, each once: the engine's, the
 * metadata store's, proto's, mem's, then the transport components'.
 * Returns how many were written to tables (at most max).
 */
size_t       ote_engine_config_tables(const ote_config_table_t **tables, size_t max);
/*
 * Warn about OTE_ variables no table knows, fill cfg from the engine-wide
 * table, and check every other table (a value that does not parse or is
 * out of range fails here with OTE_ERR_INVALID_PARAM).
 */
ote_status_t ote_engine_config_read(ote_engine_config_t *cfg);
void         ote_engine_config_release(ote_engine_config_t *cfg);
/* Every table with the values in effect (ote_info -c). */
ote_status_t ote_engine_config_print(FILE *stream);

/*
 * engine_rdma.c: the RDMA ports against OTE_NET_DEVICES once the transports
 * are open. A selected port that is unusable, or that no transport runs on,
 * is reported to the selection (see ote_select_device_result).
 */
void ote_engine_rdma_select(ote_engine_h e, ote_select_t *sel);
/* ote_info -d: each RDMA port, its GIDs, the one chosen and why not the others. */
void ote_engine_rdma_print(ote_engine_h e, ote_select_t *sel, FILE *f);
/*
 * Re-read the RDMA ports every OTE_RDMA_POLL_MS (a thread of the engine; 0:
 * none): a port that goes down pauses the rails on it, one that comes up
 * resumes them (ote_engine_rdma_port_event); devices and ports that appear
 * or go are logged and shown by ote_info -d. Each round also runs
 * ote_engine_join_round (network interfaces, devices that join or leave).
 */
ote_status_t ote_engine_rdma_monitor_start(ote_engine_h e);
void         ote_engine_rdma_monitor_stop(ote_engine_h e);
/* One round of the monitor, from the calling thread. */
void         ote_engine_rdma_poll(ote_engine_h e);
/*
 * True when dev names an RDMA port the engine last read as not ACTIVE (the
 * rooms ask through ote_engine_rdma_port_down, engine_facts.h).
 */
bool         ote_engine_rdma_port_is_down(ote_engine_h e, const char *dev);
/* The port (device) dev went down or came up: pause or resume every rail on it (ote_segments_link). */
void         ote_engine_rdma_port_event(ote_engine_h e, const char *dev, bool up);

/*
 * engine_topo.c: the topology (OTE_HWLOC_XML, else this machine) and how
 * near each of the engine's NICs is to each memory; without hwloc, or when
 * it does not load, rails are not ranked.
 */
void ote_engine_topo_open(ote_engine_h e);
void ote_engine_topo_close(ote_engine_h e);
/* ote_info -d: for each memory, the NICs ranked, and why one is left out. */
void ote_engine_topo_print(ote_engine_h e, FILE *f);

/*
 * engine_join.c: devices that join or leave while the engine runs, one
 * round per monitor round (OTE_RDMA_POLL_MS). When the network interfaces
 * changed, or with rdma_changed, every component's resources are asked for
 * again (rdma: the RDMA ports as read now): a selected, usable resource
 * the engine does not run is opened on the running workers
 * (ote_worker_iface_add) and enters the descriptor, which is published
 * again; segments gain its rails at their next refresh (ote_wireup_extend).
 * One no longer offered is gone: its rails pause and it leaves the
 * descriptor; when it is offered again it resumes. The monitor's thread
 * (or a caller of ote_engine_rdma_poll) only.
 */
void ote_engine_join_round(ote_engine_h e, const struct ote_rdma *rdma, bool rdma_changed);
/*
 * engine_join.c: md, new to the running engine, joins it: every region
 * registered so far (and what the registration cache keeps) is registered
 * on it, then it is listed in the descriptor with their rkeys. False, with
 * a log line, when it cannot (nothing stays registered on it). The caller
 * keeps md open until the engine is destroyed.
 */
bool ote_engine_md_join(ote_engine_h e, const char *tl_name, const char *dev_name, ote_md_t *md);
/*
 * A selected network device failed to open (not UNSUPPORTED): a later round
 * asks again even when nothing changed, 1 s later, then twice as long each
 * time up to a minute. At creation or from the monitor only.
 */
void ote_engine_join_failed(ote_engine_h e);
/*
 * Open res's iface on every worker (ifaces[w]) and check that it moves
 * bytes one-sided (its capabilities in *caps_p). false: none stays open
 * (md is the caller's), the reason was logged, and a failure to open a
 * network device, or any device joining the running engine (joining), was
 * reported to the device monitor (ote_engine_join_failed), which tries
 * again.
 */
bool ote_engine_ifaces_open(ote_engine_h e, ote_tl_component_t *comp,
                            const ote_tl_resource_t *res, ote_md_t *md,
                            ote_tl_iface_params_t *params, bool joining,
                            ote_tl_iface_t **ifaces, ote_tl_caps_t *caps_p);
/* A hash of the network interfaces up with an address now (what a round compares). */
uint64_t ote_engine_netif_sig(void);
/* engine.c: encode this engine's descriptor. */
ote_status_t ote_engine_desc_encode(ote_engine_h engine, ote_buf_t *out);
/*
 * The same without its regions: everything else the descriptor says (the
 * control listener's cache of encoded descriptors compares it).
 */
ote_status_t ote_engine_desc_skeleton(ote_engine_h engine, ote_buf_t *out);
/* engine_join.c: the i-th transport component an engine opens, NULL past the last. */
ote_tl_component_t *ote_engine_component(size_t i);
/* The engine-wide parameters every iface is opened with (no worker set). */
void ote_engine_iface_params(ote_engine_h e, ote_tl_iface_params_t *params);
/* The engine-wide limits every iface applies to the connections it accepts. */
void ote_engine_iface_limits(ote_engine_h e, ote_tl_iface_params_t *params);

/* host.c */
void ote_host_id(char *buf, size_t len);

#endif
