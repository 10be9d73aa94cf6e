/*
 * File component: local files as segments, moved with io_uring.
 *
 * What core uses to open a segment named "file:///abs/path": the file is
 * opened once (ote_file_open), and the rails of the segment are eps of the
 * "file" ifaces (one ring per worker) created from the file's address blob
 * (ote_file_address). The blob is a token valid in this process only: the
 * file ifaces never publish an address, so no peer can name a file.
 */
#ifndef OTE_UCT_EXT_FILE_H
#define OTE_UCT_EXT_FILE_H

#include "base/config.h"

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The component's transport name, as OTE_TLS names it. */
#define OTE_FILE_TL_NAME "file"
/* Segment names of files start with this, followed by an absolute path. */
#define OTE_FILE_SCHEME  "file://"

typedef struct ote_file ote_file_t;

/* OTE_FILE_URING_QD, OTE_FILE_DIRECT, OTE_FILE_GDS: the file transport's settings. */
typedef struct {
    long  uring_qd;   /* io_uring depth per worker, 1..4096             */
    int   direct;     /* OTE_TERNARY_*: O_DIRECT for file segments       */
    int   gds;        /* OTE_TERNARY_*: GPU memory through cuFile        */
    char *cufile_lib; /* test only: a library standing in for libcufile  */
} ote_file_config_t;

/* Compiled in every build, so that the variables are known without io_uring too. */
extern const ote_config_table_t ote_file_config_table;

/*
 * Open the file at path (absolute, a regular file): read-write where the
 * caller may write it, else read-only. direct: OTE_FILE_DIRECT
 * (OTE_TERNARY_*); with yes, a file system without O_DIRECT fails the open.
 * INVALID_PARAM: a relative path, not a regular file; NOT_FOUND: no such
 * file; ACCESS: not even readable; UNSUPPORTED: O_DIRECT asked for and not
 * offered; IO: anything else. One reference goes to the caller.
 */
ote_status_t ote_file_open(const char *path, int direct, ote_file_t **file_p);
/* Drop a reference; the file is closed with the last one. */
void         ote_file_put(ote_file_t *file);
/*
 * Size now (fstat) and the access the open allowed (OTE_ACCESS_*). The size
 * becomes the bound of WRITEs from here on.
 */
ote_status_t ote_file_refresh(ote_file_t *file, uint64_t *size_p, unsigned *access_p);
/*
 * GPUDirect Storage, process-wide: whether cuFile moves GPU memory to and
 * from files here (OTE_OK), loading it on the first call (OTE_FILE_GDS,
 * OTE_FILE_CUFILE_LIB of cfg; later calls get the first outcome). *why_p says
 * which path a GPU<->file transfer takes and why ("cuFile from
 * libcufile.so.0", "cuFile not found ...", "cuFile driver open failed
 * ...", "OTE_FILE_GDS=n", "no CUDA").
 */
ote_status_t ote_file_gds_load(const ote_file_config_t *cfg, const char **why_p);
/*
 * How GPU memory moves to and from this file: directly with cuFile (a
 * handle registered on its O_DIRECT fd) where cuFile is loaded and the file
 * allows it, else staged through pinned host chunks (*direct_p false).
 * gds: OTE_FILE_GDS; with yes, a file cuFile cannot serve fails
 * UNSUPPORTED, with the reason logged.
 */
ote_status_t ote_file_gds_attach(ote_file_t *file, const ote_file_config_t *cfg,
                                 bool *direct_p);

/* The address blob an ep of a file iface is created from. */
ote_status_t ote_file_address(ote_file_t *file, void *buf, size_t max, size_t *len_p);

#endif
