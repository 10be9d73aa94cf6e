/*
 * Run-time loading of the CUDA entry points (see cuda_api.h).
 */
#include "cuda_api.h"

#include "log.h"
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

/* The mirrors in cuda_api.h must match the ABI of the headers we build against. */
_Static_assert(sizeof(ote_cuda_ipc_handle_t) == sizeof(cudaIpcMemHandle_t), "ipc handle");
_Static_assert(offsetof(ote_cuda_ptr_attr_t, type) == offsetof(struct cudaPointerAttributes, type),
               "attr.type");
_Static_assert(offsetof(ote_cuda_ptr_attr_t, device) ==
                   offsetof(struct cudaPointerAttributes, device),
               "attr.device");
_Static_assert(offsetof(ote_cuda_ptr_attr_t, device_pointer) ==
                   offsetof(struct cudaPointerAttributes, devicePointer),
               "attr.devicePointer");
_Static_assert(offsetof(ote_cuda_ptr_attr_t, host_pointer) ==
                   offsetof(struct cudaPointerAttributes, hostPointer),
               "attr.hostPointer");
_Static_assert(sizeof(ote_cuda_ptr_attr_t) >= sizeof(struct cudaPointerAttributes), "attr size");
_Static_assert(OTE_CUDA_MEMCPY_DEFAULT == cudaMemcpyDefault, "cudaMemcpyDefault");
_Static_assert((int)OTE_CUDA_ERR_NOT_READY == (int)cudaErrorNotReady, "cudaErrorNotReady");
_Static_assert((int)OTE_CUDA_ERR_ALREADY_MAPPED == (int)cudaErrorAlreadyMapped, "cudaErrorAlreadyMapped");
_Static_assert((int)OTE_CUDA_MEMTYPE_DEVICE == (int)cudaMemoryTypeDevice, "cudaMemoryTypeDevice");
_Static_assert((int)OTE_CUDA_MEMTYPE_HOST == (int)cudaMemoryTypeHost, "cudaMemoryTypeHost");
_Static_assert(OTE_CUDA_STREAM_NON_BLOCKING == cudaStreamNonBlocking, "cudaStreamNonBlocking");
_Static_assert(OTE_CUDA_EVENT_DISABLE_TIMING == cudaEventDisableTiming, "cudaEventDisableTiming");
_Static_assert(OTE_CUDA_IPC_LAZY_PEER_ACCESS == cudaIpcMemLazyEnablePeerAccess, "ipc flags");
_Static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "CUdeviceptr");
#endif

static ote_load_once_t api_once = OTE_LOAD_ONCE_INIT;
static ote_cuda_api_t  api_table;
static int             api_devices;
static char            api_src[256] = "not loaded";

typedef struct {
    const char *sym;
    size_t      offset;
    bool        driver;   /* from libcuda rather than libcudart */
    bool        optional; /* NULL in the table when missing */
} api_sym_t;

#define S(_sym, _field, _drv) {_sym, offsetof(ote_cuda_api_t, _field), _drv, false}
static const api_sym_t api_syms[] = {
    S("cudaGetDeviceCount", get_device_count, false),
    S("cudaSetDevice", set_device, false),
    S("cudaGetDevice", get_device, false),
    S("cudaGetLastError", get_last_error, false),
    S("cudaGetErrorString", get_error_string, false),
    S("cudaPointerGetAttributes", pointer_get_attributes, false),
    S("cudaMalloc", malloc, false),
    S("cudaFree", free, false),
    S("cudaHostAlloc", host_alloc, false),
    S("cudaFreeHost", free_host, false),
    S("cudaHostRegister", host_register, false),
    S("cudaHostUnregister", host_unregister, false),
    S("cudaStreamCreateWithFlags", stream_create, false),
    S("cudaStreamDestroy", stream_destroy, false),
    S("cudaEventCreateWithFlags", event_create, false),
    S("cudaEventDestroy", event_destroy, false),
    S("cudaEventRecord", event_record, false),
    S("cudaEventQuery", event_query, false),
    S("cudaMemcpyAsync", memcpy_async, false),
    S("cudaStreamSynchronize", stream_synchronize, false),
    S("cudaIpcGetMemHandle", ipc_get_mem_handle, false),
    S("cudaIpcOpenMemHandle", ipc_open_mem_handle, false),
    S("cudaIpcCloseMemHandle", ipc_close_mem_handle, false),
    S("cuMemGetAddressRange_v2", mem_get_address_range, true),
    {"cudaDeviceGetPCIBusId", offsetof(ote_cuda_api_t, device_get_pci_bus_id), false, true},
};
#undef S

static void *open_first(const char *const *names, const char **which_p)
{
    for (size_t i = 0; names[i] != NULL; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);

        if (h != NULL) {
            *which_p = names[i];
            return h;
        }
    }
    return NULL;
}

static ote_status_t api_resolve(void *rt, void *drv)
{
    for (size_t i = 0; i < sizeof(api_syms) / sizeof(api_syms[0]); i++) {
        void *f = dlsym(api_syms[i].driver ? drv : rt, api_syms[i].sym);

        if (f == NULL && api_syms[i].optional)
            continue;
        if (f == NULL) {
            snprintf(api_src, sizeof(api_src), "symbol %s missing", api_syms[i].sym);
            return OTE_ERR_UNSUPPORTED;
        }
        memcpy((char *)&api_table + api_syms[i].offset, &f, sizeof(f));
    }
    return OTE_OK;
}

static ote_status_t api_load_locked(const char *lib_path)
{
    static const char *const rt_names[]  = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                            "libcudart.so.11.0", NULL};
    static const char *const drv_names[] = {"libcuda.so.1", "libcuda.so", NULL};
    const char *rt_name = NULL, *drv_name = NULL;
    void *rt = NULL, *drv = NULL;
    ote_status_t status;
    int n = 0, err;

    if (lib_path != NULL && lib_path[0] != '\0') {
        rt = drv = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        if (rt == NULL) {
            snprintf(api_src, sizeof(api_src), "OTE_CUDA_LIB=%s: %s", lib_path, dlerror());
            ote_error("%s", api_src);
            return OTE_ERR_UNSUPPORTED;
        }
        rt_name = drv_name = lib_path;
    } else {
        rt = open_first(rt_names, &rt_name);
        drv = rt != NULL ? open_first(drv_names, &drv_name) : NULL;
        if (rt == NULL || drv == NULL) {
            snprintf(api_src, sizeof(api_src), "%s not found",
                     rt == NULL ? "libcudart" : "libcuda (driver)");
            goto err_close;
        }
    }
    status = api_resolve(rt, drv);
    if (status != OTE_OK)
        goto err_close;
    err = api_table.get_device_count(&n);
    if (err != OTE_CUDA_SUCCESS || n <= 0) {
        snprintf(api_src, sizeof(api_src), "%s: no device (%s)", rt_name,
                 err != OTE_CUDA_SUCCESS ? api_table.get_error_string(err) : "count 0");
        api_table.get_last_error();
        goto err_close;
    }
    api_devices = n;
    snprintf(api_src, sizeof(api_src), "%s%s%s", rt_name, drv != rt ? " + " : "",
             drv != rt ? drv_name : "");
    /* Handles stay open until exit: the table points into them. */
    return OTE_OK;

err_close:
    ote_info("CUDA unavailable: %s", api_src);
    if (drv != NULL && drv != rt)
        dlclose(drv);
    if (rt != NULL)
        dlclose(rt);
    memset(&api_table, 0, sizeof(api_table));
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_cuda_api_load(const char *lib_path)
{
    return ote_load_once(&api_once, api_load_locked, lib_path, &api_table);
}

const ote_cuda_api_t *ote_cuda_api(void)
{
    return ote_load_once_table(&api_once);
}

int ote_cuda_device_count(void)
{
    return ote_cuda_api() != NULL ? api_devices : 0;
}

const char *ote_cuda_api_source(void)
{
    return api_src;
}

const char *ote_cuda_strerror(ote_cuda_err_t err)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    const char *s           = a != NULL ? a->get_error_string(err) : NULL;

    return s != NULL ? s : "unknown CUDA error";
}

ote_status_t ote_cuda_ptr_query(const void *ptr, int *device_p, bool *pinned_p)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    ote_cuda_ptr_attr_t attr;

    if (a == NULL)
        return OTE_ERR_NOT_FOUND;
    memset(&attr, 0, sizeof(attr));
    if (a->pointer_get_attributes(&attr, ptr) != OTE_CUDA_SUCCESS) {
        a->get_last_error(); /* older runtimes fail on unknown host memory */
        return OTE_ERR_NOT_FOUND;
    }
    switch (attr.type) {
    case OTE_CUDA_MEMTYPE_DEVICE:
    case OTE_CUDA_MEMTYPE_MANAGED:
        *device_p = attr.device;
        *pinned_p = false;
        return OTE_OK;
    case OTE_CUDA_MEMTYPE_HOST:
        *device_p = -1;
        *pinned_p = true;
        return OTE_OK;
    default:
        return OTE_ERR_NOT_FOUND;
    }
}

ote_status_t ote_cuda_alloc_range(const void *ptr, uint64_t *base_p, size_t *size_p)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    uint64_t base;
    size_t size;

    ote_cuda_ptr_attr_t attr;
    int prev = -1;
    ote_cuda_err_t err;

    if (a == NULL)
        return OTE_ERR_UNSUPPORTED;
    /*
     * The driver call needs a current context: the calling thread may never
     * have used CUDA (a registration from any thread), so make the owning
     * device's primary context current for the call.
     */
    memset(&attr, 0, sizeof(attr));
    if (a->pointer_get_attributes(&attr, ptr) != OTE_CUDA_SUCCESS) {
        a->get_last_error();
        return OTE_ERR_NOT_FOUND;
    }
    if (attr.type != OTE_CUDA_MEMTYPE_DEVICE && attr.type != OTE_CUDA_MEMTYPE_MANAGED)
        return OTE_ERR_NOT_FOUND;
    if (a->get_device(&prev) != OTE_CUDA_SUCCESS)
        prev = -1;
    if (attr.device >= 0 && attr.device != prev)
        a->set_device(attr.device);
    err = a->mem_get_address_range(&base, &size, (uint64_t)(uintptr_t)ptr);
    if (prev >= 0 && attr.device >= 0 && attr.device != prev)
        a->set_device(prev);
    if (err != OTE_CUDA_SUCCESS)
        return OTE_ERR_NOT_FOUND;
    *base_p = base;
    *size_p = size;
    return OTE_OK;
}

/* Run f on device dev, restoring the calling thread's current device. */
static ote_status_t on_device(int dev, ote_cuda_err_t *err_p,
                              ote_cuda_err_t (*f)(void **, size_t, unsigned), void **ptr_p,
                              size_t length, unsigned flags)
{
    const ote_cuda_api_t *a = ote_cuda_api();
    int prev = -1;
    ote_cuda_err_t err;

    if (a == NULL)
        return OTE_ERR_UNSUPPORTED;
    if (dev < 0 || dev >= api_devices)
        return OTE_ERR_INVALID_PARAM;
    if (a->get_device(&prev) != OTE_CUDA_SUCCESS)
        prev = -1;
    err = a->set_device(dev);
    if (err == OTE_CUDA_SUCCESS)
        err = f(ptr_p, length, flags);
    if (prev >= 0 && prev != dev)
        a->set_device(prev);
    *err_p = err;
    return err == OTE_CUDA_SUCCESS ? OTE_OK : OTE_ERR_NO_MEMORY;
}

static ote_cuda_err_t dev_malloc(void **p, size_t len, unsigned flags)
{
    (void)flags;
    return ote_cuda_api()->malloc(p, len);
}

static ote_cuda_err_t host_malloc(void **p, size_t len, unsigned flags)
{
    return ote_cuda_api()->host_alloc(p, len, flags);
}

ote_status_t ote_cuda_mem_alloc(int dev, size_t length, void **ptr_p)
{
    ote_cuda_err_t err = 0;
    ote_status_t status = on_device(dev, &err, dev_malloc, ptr_p, length, 0);

    if (status == OTE_ERR_NO_MEMORY)
        ote_error("cudaMalloc of %zu bytes on cuda:%d: %s", length, dev, ote_cuda_strerror(err));
    return status;
}

void ote_cuda_mem_free(void *ptr)
{
    const ote_cuda_api_t *a = ote_cuda_api();

    if (a != NULL && ptr != NULL && a->free(ptr) != OTE_CUDA_SUCCESS)
        ote_warn("cudaFree(%p) failed", ptr);
}

ote_status_t ote_cuda_host_alloc(int dev, size_t length, void **ptr_p)
{
    ote_cuda_err_t err = 0;
    ote_status_t status =
        on_device(dev, &err, host_malloc, ptr_p, length, OTE_CUDA_HOST_ALLOC_PORTABLE);

    if (status == OTE_ERR_NO_MEMORY)
        ote_error("cudaHostAlloc of %zu bytes near cuda:%d: %s", length, dev,
                  ote_cuda_strerror(err));
    return status;
}

void ote_cuda_host_free(void *ptr)
{
    const ote_cuda_api_t *a = ote_cuda_api();

    if (a != NULL && ptr != NULL && a->free_host(ptr) != OTE_CUDA_SUCCESS)
        ote_warn("cudaFreeHost(%p) failed", ptr);
}
