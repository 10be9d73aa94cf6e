/*
 * Files this engine exports to its peers (ote_file_export): a table of
 * exports, each one file or the regular files of a directory, every file
 * with an id its peers name in FILE_IO requests (proto/file_io_msg.h). The
 * descriptor lists them; the control listener serves them (FILE_IO's
 * service, proto/file_io_target.c, through the host ctl.c fills).
 */
#ifndef OTE_CORE_FEXPORT_H
#define OTE_CORE_FEXPORT_H

#include "core/wire/desc.h"

#include <ote/ote.h>
#include <pthread.h>
#include <stdint.h>

/* Export names: 1..OTE_FEXPORT_NAME_MAX printable bytes, no space, '@' or '/'. */
#define OTE_FEXPORT_NAME_MAX  127
/* Regular files one directory export may hold. */
#define OTE_FEXPORT_MAX_FILES 1024

/* One exported file, held by its export and by each request using it. */
typedef struct ote_fexport_file {
    char     name[OTE_DESC_NAME_MAX + 1]; /* "export" or "export/file" */
    uint64_t id;
    uint64_t size;   /* the bound of every access: the size when exported */
    unsigned access; /* OTE_ACCESS_REMOTE_* */
    int      fd;
    unsigned refs;   /* under the engine's export lock */
} ote_fexport_file_t;

/* Engine state (segment_def.h's ote_segment_table_t holds one). */
typedef struct {
    pthread_mutex_t          lock;
    struct ote_file_export  *exports;
} ote_fexport_table_t;

void ote_fexport_table_init(ote_fexport_table_t *t);
/* Unexport whatever is left (the engine goes). */
void ote_fexport_table_destroy(ote_fexport_table_t *t);
/* Fill d->exports, d->num_exports with every exported file. */
ote_status_t ote_fexport_desc_fill(ote_fexport_table_t *t, ote_desc_t *d);
/* Encode d (ote_desc_encode) with every exported file; frees d (calloc'd, no exports yet). */
ote_status_t ote_fexport_desc_encode(ote_fexport_table_t *t, ote_desc_t *d,
                                     ote_mem_table_t *regions, ote_buf_t *out);
/* The file with this id, with a reference; NOT_FOUND once unexported. */
ote_status_t ote_fexport_acquire(ote_fexport_table_t *t, uint64_t id, ote_fexport_file_t **f_p);
void         ote_fexport_release(ote_fexport_table_t *t, ote_fexport_file_t *f);
/*
 * Check a request against the file: the range within the exported size
 * (OUT_OF_BOUNDS), the access (ACCESS). OTE_OK: it may be served.
 */
ote_status_t ote_fexport_check(const ote_fexport_file_t *f, bool write, uint64_t offset,
                               uint32_t length);
/*
 * Do it: pwrite data, or pread into buf; *done_p gets the bytes moved. A
 * READ that meets the end of the file (truncated since it was exported)
 * is OUT_OF_BOUNDS with the bytes before it; a WRITE into a range the file
 * no longer has is OUT_OF_BOUNDS and writes nothing; ENOSPC, EIO and the
 * like IO; EACCES, EPERM, EROFS ACCESS. Blocking.
 */
ote_status_t ote_fexport_io(const ote_fexport_file_t *f, bool write, uint64_t offset,
                            uint32_t length, const uint8_t *data, uint8_t *buf,
                            size_t *done_p);

#endif
