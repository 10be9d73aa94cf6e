/* Memory-type detection, location strings, engine-owned host memory. */
#include "mem.h"

#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_F_NODE_   (1 << 0)
#define MPOL_F_ADDR_   (1 << 1)
#define MPOL_BIND_     2
#define MPOL_MF_MOVE_  (1 << 1)

static ote_mem_detect_fn_t device_detector;

void ote_mem_set_device_detector(ote_mem_detect_fn_t fn)
{
    device_detector = fn;
}

int ote_mem_numa_nodes(void)
{
    static int nodes;
    char path[64];
    struct stat st;
    int n = 0;

    if (nodes > 0)
        return nodes;
    for (;; n++) {
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", n);
        if (stat(path, &st) != 0)
            break;
    }
    nodes = n > 0 ? n : 1;
    return nodes;
}

static ote_status_t host_detect(const void *addr, char *location, size_t location_len)
{
    int node = -1;
    long rc;

    /* get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR): node of the page holding addr. */
    rc = syscall(SYS_get_mempolicy, &node, NULL, 0UL, addr, MPOL_F_NODE_ | MPOL_F_ADDR_);
    if (rc != 0 || node < 0 || node >= ote_mem_numa_nodes())
        node = 0;
    snprintf(location, location_len, "cpu:%d", node);
    return OTE_OK;
}

ote_status_t ote_mem_detect(const void *addr, size_t length, unsigned *mem_type_p,
                            char *location, size_t location_len)
{
    if (device_detector != NULL) {
        ote_status_t status = device_detector(addr, length, mem_type_p, location, location_len);

        if (status != OTE_ERR_NOT_FOUND)
            return status;
    }
    *mem_type_p = OTE_MEM_TYPE_HOST;
    return host_detect(addr, location, location_len);
}

static int parse_index(const char *s, long *idx_p)
{
    char *end;
    long v;

    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > 4096)
        return -1;
    *idx_p = v;
    return 0;
}

static int (*cuda_device_count_fn)(void);

/* Set by the cuda components once they know how many devices exist. */
void ote_mem_set_cuda_device_count(int (*fn)(void));
void ote_mem_set_cuda_device_count(int (*fn)(void))
{
    cuda_device_count_fn = fn;
}

ote_status_t ote_mem_location_parse(const char *location, unsigned *mem_type_p)
{
    long idx;

    if (location == NULL || strlen(location) >= OTE_MEM_LOCATION_MAX)
        return OTE_ERR_INVALID_PARAM;
    if (strncmp(location, "cpu:", 4) == 0) {
        if (parse_index(location + 4, &idx) != 0 || idx >= ote_mem_numa_nodes()) {
            ote_error("memory location '%s': no such NUMA node (this host has %d)", location,
                      ote_mem_numa_nodes());
            return OTE_ERR_INVALID_PARAM;
        }
        *mem_type_p = OTE_MEM_TYPE_HOST;
        return OTE_OK;
    }
    if (strncmp(location, "cuda:", 5) == 0) {
        int n = cuda_device_count_fn ? cuda_device_count_fn() : 0;

        if (parse_index(location + 5, &idx) != 0 || idx >= n) {
            ote_error("memory location '%s': no such CUDA device (%d visible)", location, n);
            return OTE_ERR_INVALID_PARAM;
        }
        *mem_type_p = OTE_MEM_TYPE_CUDA;
        return OTE_OK;
    }
    ote_error("memory location '%s': expected cpu:N or cuda:N", location);
    return OTE_ERR_INVALID_PARAM;
}

ote_status_t ote_mem_host_alloc(size_t length, int numa, void **addr_p, size_t *alloc_len_p)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t len;
    void *p;

    if (length == 0 || length > SIZE_MAX - (size_t)page)
        return OTE_ERR_INVALID_PARAM;
    len = (length + (size_t)page - 1) & ~((size_t)page - 1);
    p   = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return OTE_ERR_NO_MEMORY;
    if (numa >= 0) {
        unsigned long mask[16] = {0};

        if (numa >= (int)(sizeof(mask) * 8)) {
            munmap(p, len);
            return OTE_ERR_INVALID_PARAM;
        }
        mask[numa / (8 * sizeof(long))] |= 1ul << (numa % (8 * sizeof(long)));
        /* mbind before first touch places every page on that node. */
        if (syscall(SYS_mbind, p, len, MPOL_BIND_, mask, sizeof(mask) * 8, 0) != 0)
            ote_debug("mbind to NUMA node %d failed: %s", numa, strerror(errno));
    }
    *addr_p      = p;
    *alloc_len_p = len;
    return OTE_OK;
}

void ote_mem_host_free(void *addr, size_t alloc_len)
{
    if (addr != NULL)
        munmap(addr, alloc_len);
}
