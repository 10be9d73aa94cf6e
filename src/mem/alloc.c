/*
 * Engine-owned host memory: whole pages of a memfd mapped shared, bound to
 * a NUMA node before the first touch so that every page lands there.
 * Binding goes through hwloc where the build has it, else straight to
 * mbind(2). The memfd is sealed against shrinking and growing once sized,
 * so a peer that maps it (shm component) can never fault on a page that
 * went away; the fds are kept in a small list by address.
 */
#include "mem.h"

#include "base/log.h"
#include "base/cuda_api.h"
#include "base/topo.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif

#define MPOL_BIND_ 2

#ifdef HAVE_HWLOC
static int bind_hwloc(void *p, size_t len, int numa)
{
    hwloc_topology_t topo = ote_topo_this_system();
    hwloc_obj_t node;

    if (topo == NULL)
        return -1;
    node = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)numa);
    if (node == NULL)
        return -1;
    return hwloc_set_area_membind(topo, p, len, node->nodeset, HWLOC_MEMBIND_BIND,
                                  HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT);
}
#endif

static int bind_mbind(void *p, size_t len, int numa)
{
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};

    if (numa < 0 || numa >= (int)(sizeof(mask) * 8)) {
        errno = EINVAL;
        return -1;
    }
    mask[numa / (8 * sizeof(long))] |= 1ul << (numa % (8 * sizeof(long)));
    return (int)syscall(SYS_mbind, p, len, MPOL_BIND_, mask, sizeof(mask) * 8, 0);
}

/* The memfds behind engine-owned host memory, by base address. */
typedef struct memfd_ent {
    void             *base;
    size_t            length;
    int               fd;
    struct memfd_ent *next;
} memfd_ent_t;

static pthread_mutex_t memfd_lock = PTHREAD_MUTEX_INITIALIZER;
static memfd_ent_t    *memfd_list;

/*
 * A sealed memfd of len bytes mapped shared (huge pages asked for, where the
 * host's shmem policy allows them), or MAP_FAILED (*fd_p = -1: plain memory).
 * Its file is read-only to everyone (0400; a memfd is created 0777): a
 * peer handed a read-only descriptor (shm) cannot open it again for
 * writing through /proc/<pid>/fd, unless it may override file permissions
 * (root), which could write into this process anyway.
 */
static void *memfd_map(size_t len, int *fd_p)
{
    int fd = (int)syscall(SYS_memfd_create, "orbitte", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *p;

    *fd_p = -1;
    if (fd < 0)
        return MAP_FAILED;
    if (fchmod(fd, S_IRUSR) != 0 || ftruncate(fd, (off_t)len) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        close(fd);
        return MAP_FAILED;
    }
    p = ote_mmap_huge(len, PROT_READ | PROT_WRITE, MAP_SHARED, fd);
    if (p == MAP_FAILED) {
        close(fd);
        return MAP_FAILED;
    }
    *fd_p = fd;
    return p;
}

int ote_mem_host_memfd(const void *base)
{
    int fd = -1;

    pthread_mutex_lock(&memfd_lock);
    for (memfd_ent_t *m = memfd_list; m != NULL; m = m->next) {
        if (m->base == base) {
            fd = m->fd;
            break;
        }
    }
    pthread_mutex_unlock(&memfd_lock);
    return fd;
}

void ote_mem_host_detach(void *base, size_t alloc_len)
{
    /* Fresh private pages in place of the shared ones: nothing a peer still writes lands here. */
    if (mmap(base, alloc_len, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0) == MAP_FAILED)
        ote_error("detaching %zu bytes at %p from their memfd: %s", alloc_len, base,
                  strerror(errno));
}

ote_status_t ote_mem_host_alloc(size_t length, int numa, void **addr_p, size_t *alloc_len_p)
{
    memfd_ent_t *ent;
    int fd;
    long page = sysconf(_SC_PAGESIZE);
    size_t len;
    void *p;
    int rc = -1;

    if (length == 0 || length > SIZE_MAX - (size_t)page)
        return OTE_ERR_INVALID_PARAM;
    if (numa >= 0 && !ote_mem_numa_node_online(numa)) {
        ote_error("allocating %zu bytes on NUMA node %d: no such node", length, numa);
        return OTE_ERR_INVALID_PARAM;
    }
    len = (length + (size_t)page - 1) & ~((size_t)page - 1);
    ent = calloc(1, sizeof(*ent));
    if (ent == NULL)
        return OTE_ERR_NO_MEMORY;
    p = memfd_map(len, &fd);
    if (p == MAP_FAILED) {
        ote_debug("no memfd for %zu bytes (%s): private memory, not shared with peers", len,
                  strerror(errno));
        p = ote_mmap_huge(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    }
    if (p == MAP_FAILED) {
        ote_error("allocating %zu bytes: %s", len, strerror(errno));
        free(ent);
        return OTE_ERR_NO_MEMORY;
    }
    if (numa >= 0) {
#ifdef HAVE_HWLOC
        rc = bind_hwloc(p, len, numa);
#endif
        if (rc != 0)
            rc = bind_mbind(p, len, numa);
        /* With one node every page lands there anyway. */
        if (rc != 0 && ote_mem_numa_nodes() > 1) {
            ote_error("binding %zu bytes to NUMA node %d: %s", len, numa, strerror(errno));
            munmap(p, len);
            ote_fd_close(fd);
            free(ent);
            return OTE_ERR_NO_MEMORY;
        }
    }
    if (fd >= 0) {
        *ent = (memfd_ent_t){.base = p, .length = len, .fd = fd};
        pthread_mutex_lock(&memfd_lock);
        ent->next  = memfd_list;
        memfd_list = ent;
        pthread_mutex_unlock(&memfd_lock);
    } else {
        free(ent);
    }
    *addr_p      = p;
    *alloc_len_p = len;
    return OTE_OK;
}

void ote_mem_host_free(void *addr, size_t alloc_len)
{
    memfd_ent_t **pp, *m = NULL;

    if (addr == NULL)
        return;
    /*
     * Out of the list before the range is unmapped: once it is, another
     * allocation may get the same base and list its own memfd there.
     */
    pthread_mutex_lock(&memfd_lock);
    for (pp = &memfd_list; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->base == addr) {
            m   = *pp;
            *pp = m->next;
            break;
        }
    }
    pthread_mutex_unlock(&memfd_lock);
    munmap(addr, alloc_len);
    if (m != NULL) {
        close(m->fd);
        free(m);
    }
}

ote_status_t ote_mem_owned_alloc(const char *location, size_t length, void **addr_p,
                                 size_t *alloc_len_p, int *kind_p, unsigned *mem_type_p)
{
    unsigned type = OTE_MEM_TYPE_HOST;
    ote_status_t status;
    int numa = -1;

    if (location != NULL && strncmp(location, "cuda_host:", 10) == 0) {
        char dev[OTE_MEM_LOCATION_MAX];

        /* Pinned host memory near GPU N: N must be a device. */
        snprintf(dev, sizeof(dev), "cuda:%s", location + 10);
        status = ote_mem_location_parse(dev, &type);
        if (status != OTE_OK)
            return status;
        status = ote_cuda_host_alloc(atoi(location + 10), length, addr_p);
        if (status != OTE_OK)
            return status;
        *alloc_len_p = length;
        *kind_p      = OTE_MEM_OWNED_CUDA_HOST;
        *mem_type_p  = OTE_MEM_TYPE_HOST;
        return OTE_OK;
    }
    if (location != NULL && strcmp(location, "*") != 0) {
        status = ote_mem_location_parse(location, &type);
        if (status != OTE_OK)
            return status;
        if (type == OTE_MEM_TYPE_CUDA) {
            status = ote_cuda_mem_alloc(atoi(location + 5), length, addr_p);
            if (status != OTE_OK)
                return status;
            *alloc_len_p = length;
            *kind_p      = OTE_MEM_OWNED_CUDA;
            *mem_type_p  = OTE_MEM_TYPE_CUDA;
            return OTE_OK;
        }
        numa = atoi(location + 4);
    }
    status = ote_mem_host_alloc(length, numa, addr_p, alloc_len_p);
    if (status != OTE_OK)
        return status;
    *kind_p     = OTE_MEM_OWNED_HOST;
    *mem_type_p = OTE_MEM_TYPE_HOST;
    return OTE_OK;
}

void ote_mem_owned_free(int kind, void *addr, size_t alloc_len)
{
    switch (kind) {
    case OTE_MEM_OWNED_CUDA:
        ote_cuda_mem_free(addr);
        break;
    case OTE_MEM_OWNED_CUDA_HOST:
        ote_cuda_host_free(addr);
        break;
    default:
        ote_mem_host_free(addr, alloc_len);
        break;
    }
}
