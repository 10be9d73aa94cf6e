/*
 * Run-time loading of the cuFile entry points (see cufile_api.h).
 */
#include "cufile_api.h"

#include "log.h"
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static ote_load_once_t  cf_once = OTE_LOAD_ONCE_INIT;
static ote_cufile_api_t cf_table;
static char            cf_src[320] = "cuFile not loaded";

typedef struct {
    const char *sym;
    size_t      offset;
} cf_sym_t;

#define S(_sym, _field) {_sym, offsetof(ote_cufile_api_t, _field)}
static const cf_sym_t cf_syms[] = {
    S("cuFileDriverOpen", driver_open),
    S("cuFileHandleRegister", handle_register),
    S("cuFileHandleDeregister", handle_deregister),
    S("cuFileBufRegister", buf_register),
    S("cuFileBufDeregister", buf_deregister),
    S("cuFileRead", read),
    S("cuFileWrite", write),
};
#undef S

const char *ote_cufile_strerror(ote_cufile_err_t err, char *buf, size_t len)
{
    if (err.err == 0)
        snprintf(buf, len, "success");
    else if (err.cu_err != 0)
        snprintf(buf, len, "cuFile error %d (CUDA error %d)", err.err, err.cu_err);
    else
        snprintf(buf, len, "cuFile error %d", err.err);
    return buf;
}

static ote_status_t cf_load_locked(const char *lib_path)
{
    static const char *const names[] = {"libcufile.so.0", "libcufile.so", NULL};
    const char *name = NULL;
    void *h          = NULL;
    ote_cufile_err_t err;
    char msg[64];

    if (lib_path != NULL && lib_path[0] != '\0') {
        name = lib_path;
        h    = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            snprintf(cf_src, sizeof(cf_src), "cuFile not found (OTE_FILE_CUFILE_LIB=%s: %s)",
                     lib_path, dlerror());
            goto err;
        }
    } else {
        for (size_t i = 0; names[i] != NULL && h == NULL; i++) {
            name = names[i];
            h    = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        }
        if (h == NULL) {
            snprintf(cf_src, sizeof(cf_src), "cuFile not found (no libcufile.so.0)");
            goto err;
        }
    }
    for (size_t i = 0; i < sizeof(cf_syms) / sizeof(cf_syms[0]); i++) {
        void *f = dlsym(h, cf_syms[i].sym);

        if (f == NULL) {
            snprintf(cf_src, sizeof(cf_src), "cuFile not usable (%s: symbol %s missing)", name,
                     cf_syms[i].sym);
            goto err_close;
        }
        memcpy((char *)&cf_table + cf_syms[i].offset, &f, sizeof(f));
    }
    err = cf_table.driver_open();
    if (err.err != 0) {
        snprintf(cf_src, sizeof(cf_src), "cuFile driver open failed (%s: cuFileDriverOpen: %s)",
                 name, ote_cufile_strerror(err, msg, sizeof(msg)));
        goto err_close;
    }
    snprintf(cf_src, sizeof(cf_src), "%s", name);
    return OTE_OK;

err_close:
    dlclose(h);
err:
    memset(&cf_table, 0, sizeof(cf_table));
    ote_info("GPUDirect Storage unavailable: %s", cf_src);
    return OTE_ERR_UNSUPPORTED;
}

ote_status_t ote_cufile_api_load(const char *lib_path)
{
    return ote_load_once(&cf_once, cf_load_locked, lib_path, &cf_table);
}

const ote_cufile_api_t *ote_cufile_api(void)
{
    return ote_load_once_table(&cf_once);
}

const char *ote_cufile_api_source(void)
{
    return cf_src;
}
