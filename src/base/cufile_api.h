/*
 * The cuFile (GPUDirect Storage) entry points, loaded at run time as the
 * CUDA ones are (cuda_api.h): dlopen of libcufile where it is installed,
 * or, for tests only, of a library named by OTE_FILE_CUFILE_LIB that exports the
 * same symbols (test/unit/cuda/cufile_double.c). The driver is opened once
 * per process, at the first load, and stays open until exit.
 *
 * The types mirror cufile.h (CUDA 11.4 and later), so this header builds
 * without it.
 */
#ifndef OTE_BASE_CUFILE_API_H
#define OTE_BASE_CUFILE_API_H

#include <ote/ote.h>
#include <stddef.h>
#include <sys/types.h>

/* CUfileError_t: a cuFile code and, for CUDA failures, the CUresult. */
typedef struct {
    int err;    /* CUfileOpError: 0 = CU_FILE_SUCCESS */
    int cu_err; /* CUresult */
} ote_cufile_err_t;

typedef void *ote_cufile_handle_t; /* CUfileHandle_t */

#define OTE_CUFILE_HANDLE_TYPE_OPAQUE_FD 1

/* CUfileDescr_t */
typedef struct {
    int type; /* OTE_CUFILE_HANDLE_TYPE_* */
    union {
        int   fd;
        void *handle;
    } handle;
    const void *fs_ops;
} ote_cufile_descr_t;

typedef struct {
    ote_cufile_err_t (*driver_open)(void);
    ote_cufile_err_t (*handle_register)(ote_cufile_handle_t *fh, ote_cufile_descr_t *descr);
    void (*handle_deregister)(ote_cufile_handle_t fh);
    ote_cufile_err_t (*buf_register)(const void *base, size_t length, int flags);
    ote_cufile_err_t (*buf_deregister)(const void *base);
    /* Bytes moved, or -1 with errno, or a negative CUfileOpError. */
    ssize_t (*read)(ote_cufile_handle_t fh, void *base, size_t size, off_t file_offset,
                    off_t base_offset);
    ssize_t (*write)(ote_cufile_handle_t fh, const void *base, size_t size, off_t file_offset,
                     off_t base_offset);
} ote_cufile_api_t;

/*
 * Load the table and open the driver, once per process. lib_path:
 * OTE_FILE_CUFILE_LIB (a test library exporting the cuFile symbols), NULL or ""
 * for the installed libcufile. Later calls return the first outcome: OTE_OK,
 * or UNSUPPORTED (not found, a symbol missing, cuFileDriverOpen failed).
 */
ote_status_t ote_cufile_api_load(const char *lib_path);

/* The loaded table, or NULL. */
const ote_cufile_api_t *ote_cufile_api(void);

/* What was loaded ("libcufile.so.0"), or why nothing was ("cuFile not found: ..."). */
const char *ote_cufile_api_source(void);

/* A cuFile error as text ("cuFile error 5011", "CUDA error 2"). */
const char *ote_cufile_strerror(ote_cufile_err_t err, char *buf, size_t len);

#endif
