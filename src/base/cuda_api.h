/*
 * The CUDA entry points the library uses, behind one table of function
 * pointers. The table is filled at run time: by dlopen of the CUDA runtime
 * (libcudart) and driver (libcuda) where they are installed, or, for tests
 * only, by dlopen of one library named by OTE_CUDA_LIB that exports the same
 * symbols (test/unit/cuda/cuda_double.c simulates devices in host memory).
 * So one libote.so runs on machines with and without GPUs: without them
 * the table is absent and the cuda components report themselves
 * unavailable.
 *
 * The types below mirror the CUDA ABI (checked against the CUDA headers at
 * build time when they are present), so this header builds without them.
 */
#ifndef OTE_BASE_CUDA_API_H
#define OTE_BASE_CUDA_API_H

#include <ote/ote.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int   ote_cuda_err_t;    /* cudaError_t / CUresult */
typedef void *ote_cuda_stream_t; /* cudaStream_t           */
typedef void *ote_cuda_event_t;  /* cudaEvent_t            */

#define OTE_CUDA_IPC_HANDLE_SIZE 64
typedef struct {
    char reserved[OTE_CUDA_IPC_HANDLE_SIZE];
} ote_cuda_ipc_handle_t; /* cudaIpcMemHandle_t */

/* struct cudaPointerAttributes (CUDA 11 and later; reserved as in CUDA 13). */
typedef struct {
    int   type;
    int   device;
    void *device_pointer;
    void *host_pointer;
    long  reserved[8];
} ote_cuda_ptr_attr_t;

enum {
    OTE_CUDA_SUCCESS             = 0,
    OTE_CUDA_ERR_INVALID_VALUE   = 1,
    OTE_CUDA_ERR_NO_MEMORY       = 2,
    OTE_CUDA_ERR_NO_DEVICE       = 100,
    OTE_CUDA_ERR_INVALID_DEVICE  = 101,
    OTE_CUDA_ERR_ALREADY_MAPPED  = 208,
    OTE_CUDA_ERR_INVALID_HANDLE  = 400,
    OTE_CUDA_ERR_NOT_READY       = 600,
    OTE_CUDA_ERR_HOST_REGISTERED = 712,
    OTE_CUDA_ERR_HOST_NOT_REGISTERED = 713,
};

enum {
    OTE_CUDA_MEMTYPE_UNREGISTERED = 0,
    OTE_CUDA_MEMTYPE_HOST         = 1, /* pinned (page-locked) host memory */
    OTE_CUDA_MEMTYPE_DEVICE       = 2,
    OTE_CUDA_MEMTYPE_MANAGED      = 3,
};

#define OTE_CUDA_MEMCPY_DEFAULT        4    /* direction from the pointers (UVA) */
#define OTE_CUDA_STREAM_NON_BLOCKING   0x01
#define OTE_CUDA_EVENT_DISABLE_TIMING  0x02
#define OTE_CUDA_HOST_REGISTER_PORTABLE 0x01
#define OTE_CUDA_HOST_ALLOC_PORTABLE   0x01
#define OTE_CUDA_IPC_LAZY_PEER_ACCESS  0x01

typedef struct {
    /* runtime API (libcudart) */
    ote_cuda_err_t (*get_device_count)(int *count);
    ote_cuda_err_t (*set_device)(int device);
    ote_cuda_err_t (*get_device)(int *device);
    ote_cuda_err_t (*get_last_error)(void);
    const char    *(*get_error_string)(ote_cuda_err_t err);
    ote_cuda_err_t (*pointer_get_attributes)(ote_cuda_ptr_attr_t *attr, const void *ptr);
    ote_cuda_err_t (*malloc)(void **ptr, size_t size);
    ote_cuda_err_t (*free)(void *ptr);
    ote_cuda_err_t (*host_alloc)(void **ptr, size_t size, unsigned flags);
    ote_cuda_err_t (*free_host)(void *ptr);
    ote_cuda_err_t (*host_register)(void *ptr, size_t size, unsigned flags);
    ote_cuda_err_t (*host_unregister)(void *ptr);
    ote_cuda_err_t (*stream_create)(ote_cuda_stream_t *stream, unsigned flags);
    ote_cuda_err_t (*stream_destroy)(ote_cuda_stream_t stream);
    ote_cuda_err_t (*event_create)(ote_cuda_event_t *event, unsigned flags);
    ote_cuda_err_t (*event_destroy)(ote_cuda_event_t event);
    ote_cuda_err_t (*event_record)(ote_cuda_event_t event, ote_cuda_stream_t stream);
    ote_cuda_err_t (*event_query)(ote_cuda_event_t event);
    ote_cuda_err_t (*memcpy_async)(void *dst, const void *src, size_t n, int kind,
                                   ote_cuda_stream_t stream);
    /* Tools and tests only: the library never blocks a worker on a stream. */
    ote_cuda_err_t (*stream_synchronize)(ote_cuda_stream_t stream);
    ote_cuda_err_t (*ipc_get_mem_handle)(ote_cuda_ipc_handle_t *handle, void *ptr);
    ote_cuda_err_t (*ipc_open_mem_handle)(void **ptr, ote_cuda_ipc_handle_t handle,
                                          unsigned flags);
    ote_cuda_err_t (*ipc_close_mem_handle)(void *ptr);
    /* Optional (NULL when the library lacks it): "DDDD:BB:DD.F" of a device. */
    ote_cuda_err_t (*device_get_pci_bus_id)(char *bus_id, int len, int device);
    /* driver API (libcuda): the allocation a device pointer lies in */
    ote_cuda_err_t (*mem_get_address_range)(uint64_t *base, size_t *size, uint64_t ptr);
} ote_cuda_api_t;

/*
 * Load the table once per process. lib_path: OTE_CUDA_LIB (test-only
 * library exporting the CUDA symbols), NULL or "" for the installed CUDA
 * libraries. Later calls return the first outcome. OTE_OK when at least one
 * device is visible; UNSUPPORTED otherwise (logged once, at info level).
 */
ote_status_t ote_cuda_api_load(const char *lib_path);

/* The loaded table, or NULL when CUDA is not available (or not loaded yet). */
const ote_cuda_api_t *ote_cuda_api(void);

/* Visible devices (CUDA_VISIBLE_DEVICES applies); 0 without CUDA. */
int ote_cuda_device_count(void);

/* Where the table came from ("libcudart.so.13", a test library path), or why not. */
const char *ote_cuda_api_source(void);

/* Message for a CUDA error code. */
const char *ote_cuda_strerror(ote_cuda_err_t err);

/*
 * What CUDA says of ptr: OTE_OK with *device_p >= 0 for device memory of
 * that ordinal, *device_p == -1 and *pinned_p for page-locked host memory;
 * NOT_FOUND for memory CUDA does not know (or no CUDA).
 */
ote_status_t ote_cuda_ptr_query(const void *ptr, int *device_p, bool *pinned_p);

/*
 * The allocation holding device pointer ptr: its base and size (so that a
 * range can be checked against it, and IPC handles cover it whole).
 */
ote_status_t ote_cuda_alloc_range(const void *ptr, uint64_t *base_p, size_t *size_p);

/* Device memory / pinned host memory on device ordinal dev. */
ote_status_t ote_cuda_mem_alloc(int dev, size_t length, void **ptr_p);
void         ote_cuda_mem_free(void *ptr);
ote_status_t ote_cuda_host_alloc(int dev, size_t length, void **ptr_p);
void         ote_cuda_host_free(void *ptr);

#endif
