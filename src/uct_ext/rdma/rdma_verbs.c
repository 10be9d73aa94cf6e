/*
 * What sysfs does not tell about a port, from libibverbs: the active MTU.
 * The library is loaded at run time, so that libote runs where rdma-core is
 * not installed; it is asked only about the real /sys (a fixture tree under
 * OTE_RDMA_SYSFS_ROOT names devices that verbs cannot open).
 */
#include "rdma.h"

#include "base/log.h"

#include <stdio.h>
#include <string.h>

#ifdef HAVE_VERBS
#include <dlfcn.h>
#include <infiniband/verbs.h>

typedef struct {
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    /* The exported symbol: it fills the leading, compatible part of the attributes. */
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
} verbs_api_t;

static bool verbs_load(void *lib, verbs_api_t *api)
{
#define SYM(_f, _n)                                                                          \
    do {                                                                                     \
        *(void **)&api->_f = dlsym(lib, _n);                                                 \
        if (api->_f == NULL)                                                                 \
            return false;                                                                    \
    } while (0)
    SYM(get_device_list, "ibv_get_device_list");
    SYM(free_device_list, "ibv_free_device_list");
    SYM(get_device_name, "ibv_get_device_name");
    SYM(open_device, "ibv_open_device");
    SYM(close_device, "ibv_close_device");
    SYM(query_port, "ibv_query_port");
#undef SYM
    return true;
}

static unsigned mtu_bytes(enum ibv_mtu mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

static size_t dev_query(const verbs_api_t *api, struct ibv_device *vdev, ote_rdma_dev_t *dev)
{
    struct ibv_context *ctx = api->open_device(vdev);
    size_t n = 0;

    if (ctx == NULL) {
        ote_debug("rdma %s: libibverbs cannot open it", dev->name);
        return 0;
    }
    for (size_t p = 0; p < dev->num_ports; p++) {
        struct ibv_port_attr attr;

        memset(&attr, 0, sizeof(attr));
        if (api->query_port(ctx, (uint8_t)dev->ports[p].num, &attr) == 0) {
            dev->ports[p].active_mtu = mtu_bytes(attr.active_mtu);
            n++;
        }
    }
    api->close_device(ctx);
    return n;
}

void ote_rdma_verbs_query(ote_rdma_t *rdma)
{
    struct ibv_device **list;
    verbs_api_t api;
    size_t queried = 0;
    void *lib;
    int num = 0;

    if (strcmp(rdma->root, "/sys") != 0) {
        snprintf(rdma->verbs, sizeof(rdma->verbs),
                 "libibverbs not asked: the sysfs root is not /sys");
        return;
    }
    if (rdma->num_devs == 0)
        return;
    lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        snprintf(rdma->verbs, sizeof(rdma->verbs), "libibverbs not loaded: %.90s", dlerror());
        return;
    }
    if (!verbs_load(lib, &api)) {
        snprintf(rdma->verbs, sizeof(rdma->verbs), "libibverbs lacks an entry point used here");
        dlclose(lib);
        return;
    }
    list = api.get_device_list(&num);
    for (int i = 0; list != NULL && i < num; i++) {
        const char *name = api.get_device_name(list[i]);

        for (size_t d = 0; name != NULL && d < rdma->num_devs; d++) {
            if (strcmp(rdma->devs[d].name, name) == 0)
                queried += dev_query(&api, list[i], &rdma->devs[d]);
        }
    }
    if (list != NULL)
        api.free_device_list(list);
    snprintf(rdma->verbs, sizeof(rdma->verbs), "libibverbs: active MTU of %zu port(s)",
             queried);
    /* The library stays loaded until exit, with the providers it loaded. */
}

#else

void ote_rdma_verbs_query(ote_rdma_t *rdma)
{
    snprintf(rdma->verbs, sizeof(rdma->verbs), "built without libibverbs: sysfs only");
}

#endif
