/* The file transport's configuration table. */
#include "file.h"

#include <stddef.h>

#define FILE_F(_f) offsetof(ote_file_config_t, _f)

static const ote_cfg_entry_t file_config_fields[] = {
    {"URING_QD", "64", OTE_CFG_INT, FILE_F(uring_qd),
     "File segments: reads and writes in flight per worker's io_uring ring (1..4096).", 1, 4096,
     .alias = "URING_QD"},
    {"DIRECT", "auto", OTE_CFG_TERNARY, FILE_F(direct),
     "File segments: O_DIRECT. auto = for aligned requests where the file system offers it, "
     "unaligned ones through aligned bounce buffers or the page cache; y = always, an "
     "unaligned request fails OTE_ERR_INVALID_PARAM and a file system without O_DIRECT "
     "fails the segment open OTE_ERR_UNSUPPORTED; n = never."},
    {"GDS", "auto", OTE_CFG_TERNARY, FILE_F(gds),
     "File segments: GPU memory to and from files through cuFile (GPUDirect Storage). auto = "
     "where libcufile loads, its driver opens and the file takes O_DIRECT, else staged through "
     "pinned host chunks; y = always, a segment open fails OTE_ERR_UNSUPPORTED where cuFile "
     "cannot serve the file (never staged); n = always staged."},
    {"CUFILE_LIB", "", OTE_CFG_STRING, FILE_F(cufile_lib),
     "Test only: a library exporting the cuFile entry points (test double) loaded instead of "
     "libcufile.",
     .alias = "CUFILE_LIB"},
};

OTE_CONFIG_TABLE_DEFINE(ote_file_config_table, "FILE_", "file", file_config_fields, ote_file_config_t,
                        NULL);
