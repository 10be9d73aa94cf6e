/*
 * Memory-type detection and location strings: the one place that decides
 * what kind of memory an address is and whether a named device exists.
 */
#include "mem.h"

#include "base/log.h"
#include "base/cuda_api.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPOL_F_NODE_ (1 << 0)
#define MPOL_F_ADDR_ (1 << 1)

#define NUMA_MAX 1024


static pthread_once_t numa_once = PTHREAD_ONCE_INIT;
static unsigned char  numa_online[NUMA_MAX / 8];
static int            numa_count;

static void numa_mark(long node)
{
    if (node >= 0 && node < NUMA_MAX && !(numa_online[node / 8] & (1u << (node % 8)))) {
        numa_online[node / 8] |= (unsigned char)(1u << (node % 8));
        numa_count++;
    }
}

/* Node list such as "0-1,3" (sysfs cpulist format). */
static void numa_parse_list(const char *s)
{
    while (*s != '\0' && *s != '\n') {
        char *end;
        long lo = strtol(s, &end, 10), hi = lo;

        if (end == s)
            return;
        if (*end == '-') {
            s  = end + 1;
            hi = strtol(s, &end, 10);
            if (end == s)
                return;
        }
        for (long n = lo; n <= hi && n < NUMA_MAX; n++)
            numa_mark(n);
        s = end;
        if (*s == ',')
            s++;
    }
}

static void numa_init(void)
{
    char line[4096];

    if (ote_read_attr("/sys/devices/system/node/online", line, sizeof(line)) == 0)
        numa_parse_list(line);
    if (numa_count == 0)
        numa_mark(0); /* no NUMA support in the kernel: one node */
}

int ote_mem_numa_nodes(void)
{
    pthread_once(&numa_once, numa_init);
    return numa_count;
}

bool ote_mem_numa_node_online(int node)
{
    pthread_once(&numa_once, numa_init);
    return node >= 0 && node < NUMA_MAX && (numa_online[node / 8] & (1u << (node % 8)));
}

/*
 * NUMA node of the page holding addr: get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR)
 * answers where the page is, or where it will be placed on first touch.
 */
static ote_status_t host_detect(const void *addr, char *location, size_t location_len)
{
    int node = -1;
    long rc;

    rc = syscall(SYS_get_mempolicy, &node, NULL, 0UL, addr, MPOL_F_NODE_ | MPOL_F_ADDR_);
    if (rc != 0 || !ote_mem_numa_node_online(node)) {
        ote_trace("NUMA node of %p unknown (%s): reporting cpu:0", addr,
                  rc != 0 ? strerror(errno) : "offline node");
        node = 0;
        while (!ote_mem_numa_node_online(node) && node < NUMA_MAX)
            node++;
    }
    snprintf(location, location_len, "cpu:%d", node);
    return OTE_OK;
}

/*
 * CUDA's view of [addr, addr+length): device memory ("cuda:N", the ordinal
 * as CUDA numbers visible devices, so CUDA_VISIBLE_DEVICES applies), pinned
 * host memory, or NOT_FOUND for memory CUDA does not know (or no CUDA). A
 * device range must lie within one allocation.
 */
static ote_status_t cuda_detect(const void *addr, size_t length, unsigned *mem_type_p,
                                bool *pinned_p, char *location, size_t location_len)
{
    uint64_t base;
    size_t size;
    int dev;

    if (ote_cuda_ptr_query(addr, &dev, pinned_p) != OTE_OK)
        return OTE_ERR_NOT_FOUND;
    if (dev < 0)
        return OTE_ERR_NOT_FOUND; /* pinned host memory: the host detector names its node */
    if (ote_cuda_alloc_range(addr, &base, &size) == OTE_OK &&
        (uintptr_t)addr - base + (uint64_t)length > size) {
        ote_error("GPU range %p+%zu crosses the end of its allocation (%#llx+%zu)", addr, length,
                  (unsigned long long)base, size);
        return OTE_ERR_OUT_OF_BOUNDS;
    }
    *mem_type_p = OTE_MEM_TYPE_CUDA;
    snprintf(location, location_len, "cuda:%d", dev);
    return OTE_OK;
}

static ote_status_t detect(const void *addr, size_t length, unsigned *mem_type_p,
                           bool *pinned_p, char *location, size_t location_len)
{
    ote_status_t status;

    *pinned_p = false;
    status = cuda_detect(addr, length, mem_type_p, pinned_p, location, location_len);
    if (status != OTE_ERR_NOT_FOUND)
        return status;
    *mem_type_p = OTE_MEM_TYPE_HOST;
    return host_detect(addr, location, location_len);
}

ote_status_t ote_mem_detect(const void *addr, size_t length, unsigned *mem_type_p,
                            char *location, size_t location_len)
{
    bool pinned;

    return detect(addr, length, mem_type_p, &pinned, location, location_len);
}

bool ote_mem_host_pinned(const void *addr, size_t length)
{
    char location[OTE_MEM_LOCATION_MAX];
    unsigned type;
    bool pinned;

    return detect(addr, length, &type, &pinned, location, sizeof(location)) == OTE_OK &&
           type == OTE_MEM_TYPE_HOST && pinned;
}

static int location_index(const char *s, long *idx_p)
{
    char *end;
    long v;

    if (!isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    v     = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 0 || v >= NUMA_MAX)
        return -1;
    *idx_p = v;
    return 0;
}

ote_status_t ote_mem_location_parse(const char *location, unsigned *mem_type_p)
{
    long idx;

    if (location == NULL || strlen(location) >= OTE_MEM_LOCATION_MAX) {
        ote_error("memory location: missing or longer than %d characters",
                  OTE_MEM_LOCATION_MAX - 1);
        return OTE_ERR_INVALID_PARAM;
    }
    if (strncmp(location, "cpu:", 4) == 0) {
        if (location_index(location + 4, &idx) != 0 || !ote_mem_numa_node_online((int)idx)) {
            ote_error("memory location '%s': no such NUMA node (this host has %d online)",
                      location, ote_mem_numa_nodes());
            return OTE_ERR_INVALID_PARAM;
        }
        *mem_type_p = OTE_MEM_TYPE_HOST;
        return OTE_OK;
    }
    if (strncmp(location, "cuda:", 5) == 0) {
        int n = ote_cuda_device_count();

        if (location_index(location + 5, &idx) != 0 || idx >= n) {
            ote_error("memory location '%s': no such CUDA device (%d visible)", location, n);
            return OTE_ERR_INVALID_PARAM;
        }
        *mem_type_p = OTE_MEM_TYPE_CUDA;
        return OTE_OK;
    }
    ote_error("memory location '%s': expected cpu:N or cuda:N", location);
    return OTE_ERR_INVALID_PARAM;
}
