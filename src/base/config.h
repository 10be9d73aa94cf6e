/*
 * The one configuration table: every OTE_* environment variable with its
 * default, type and description. `ote_info -c` prints it. Nothing else in
 * the library reads getenv() for OTE_ variables.
 */
#ifndef OTE_BASE_CONFIG_H
#define OTE_BASE_CONFIG_H

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    OTE_CFG_STRING,
    OTE_CFG_INT,     /* signed decimal                                */
    OTE_CFG_SIZE,    /* bytes with optional k/m/g/t suffix (binary)    */
    OTE_CFG_BOOL,    /* y/n, yes/no, on/off, 1/0, true/false           */
    OTE_CFG_TERNARY, /* auto, or a bool                                */
    OTE_CFG_LOGLEVEL,
} ote_cfg_type_t;

enum { OTE_TERNARY_NO = 0, OTE_TERNARY_YES = 1, OTE_TERNARY_AUTO = 2 };

typedef struct ote_config {
    int    log_level;
    char  *tls;
    char  *net_devices;
    char  *metadata;
    char  *engine_name;
    char  *metadata_prefix;
    long   metadata_ttl_s;
    long   metadata_timeout_ms;
    long   num_workers;
    size_t slice_size;
    long   retry_count;
    size_t rail_max_bytes;
    long   rail_max_slices;
    long   rail_cooldown_ms;
    long   rail_cooldown_max_ms;
    long   connect_timeout_ms;
    long   xfer_timeout_ms;
    long   poll_grace_us;
    long   poll_spin_max_us;
    bool   progress_thread;
    char  *worker_cpus;
    size_t max_inflight_bytes;
    long   max_inflight_tasks;
    long   submit_timeout_ms;
    size_t max_ctl_msg;
    long   max_notif_backlog;
    long   notify_timeout_ms;
    long   max_conns;
    long   max_conns_per_peer;
    long   handshake_timeout_ms;
    char  *auth_key;
    char  *auth_key_file;
    char  *host_id;
    long   tcp_conns;
    long   shm_unmap_timeout_ms;
    size_t tcp_max_msg;
    size_t tcp_sndbuf;
    size_t tcp_rcvbuf;
    bool   tcp_nodelay;
    char  *uct_connect;
    bool   rcache_enable;
    size_t rcache_max_size;
    long   rcache_max_regions;
    int    gpu_direct;
    size_t stage_chunk_size;
    long   stage_slots;
    long   cuda_ipc_cache_entries;
    char  *cuda_lib;
    long   uring_qd;
    int    file_direct;
    char  *sysfs_root;
} ote_config_t;

typedef struct {
    const char    *name;    /* without the OTE_ prefix */
    const char    *dflt;
    ote_cfg_type_t type;
    size_t         offset;
    const char    *desc;
} ote_cfg_entry_t;

extern const ote_cfg_entry_t ote_config_table[];
extern const size_t          ote_config_table_size;

/*
 * Fill cfg from defaults then from the environment. Unknown OTE_ variables
 * are warned about; a value that does not parse is OTE_ERR_INVALID_PARAM
 * with a log line naming the variable.
 */
ote_status_t ote_config_read(ote_config_t *cfg);
/* Apply one setting by name (no prefix): used by read() and by tests. */
ote_status_t ote_config_set(ote_config_t *cfg, const char *name, const char *value);
void         ote_config_release(ote_config_t *cfg);
/* Print every variable with its current value, default and description. */
void         ote_config_print(const ote_config_t *cfg, FILE *stream);

/* Parsers, exposed for the unit tests. */
ote_status_t ote_cfg_parse_size(const char *s, size_t *out_p);
ote_status_t ote_cfg_parse_int(const char *s, long *out_p);
ote_status_t ote_cfg_parse_bool(const char *s, bool *out_p);
ote_status_t ote_cfg_parse_ternary(const char *s, int *out_p);

#endif
