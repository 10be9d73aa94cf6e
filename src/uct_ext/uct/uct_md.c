/* uct component: discovery of UCT domains and resources, memory domains. */
#include "uct.h"

#include "base/log.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OTE_UCT_MAX_MDS  64
#define OTE_UCT_MAX_RSCS 256

/*
 * Every UCT domain and resource this process has seen. Entries never move
 * or go away, so resources may point at them; open mds are shared by every resource
 * and every engine that uses the domain, with a reference count.
 */
static pthread_mutex_t    registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ote_uct_md_entry_t registry[OTE_UCT_MAX_MDS];
static size_t             registry_count;
static ote_uct_rsc_t      rsc_registry[OTE_UCT_MAX_RSCS];
static size_t             rsc_count;

/* UCT returns UCT_MEM_HANDLE_NULL for domains without per-region state. */
static char null_memh;

uct_mem_h ote_uct_md_memh(void *memh)
{
    return memh == NULL || memh == &null_memh ? UCT_MEM_HANDLE_NULL : memh;
}

ote_status_t ote_uct_status(ucs_status_t s)
{
    if (s >= UCS_ERR_LAST_ENDPOINT_FAILURE && s <= UCS_ERR_FIRST_ENDPOINT_FAILURE)
        return OTE_ERR_REMOTE_DISCONNECT;
    if (s >= UCS_ERR_LAST_LINK_FAILURE && s <= UCS_ERR_FIRST_LINK_FAILURE)
        return OTE_ERR_REMOTE_DISCONNECT;
    switch (s) {
    case UCS_OK:
        return OTE_OK;
    case UCS_INPROGRESS:
        return OTE_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return OTE_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
    case UCS_ERR_OUT_OF_RANGE:
    case UCS_ERR_EXCEEDS_LIMIT:
        return OTE_ERR_INVALID_PARAM;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED:
        return OTE_ERR_UNSUPPORTED;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NO_DEVICE:
        return OTE_ERR_UNREACHABLE;
    case UCS_ERR_CANCELED:
        return OTE_ERR_CANCELED;
    case UCS_ERR_TIMED_OUT:
        return OTE_ERR_TIMEOUT;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
        return OTE_ERR_REMOTE_DISCONNECT;
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_BUSY:
        return OTE_ERR_BUSY;
    case UCS_ERR_MESSAGE_TRUNCATED:
        return OTE_ERR_PROTOCOL;
    default:
        return OTE_ERR_IO;
    }
}

/* ---- memory domain ops ------------------------------------------------ */

static unsigned mem_types_of(uint64_t ucs_types)
{
    unsigned t = 0;

    if (ucs_types & UCS_BIT(UCS_MEMORY_TYPE_HOST))
        t |= OTE_MEM_TYPE_HOST;
    if (ucs_types & (UCS_BIT(UCS_MEMORY_TYPE_CUDA) | UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED)))
        t |= OTE_MEM_TYPE_CUDA;
    return t;
}

static ote_status_t uct_md_reg(ote_md_t *omd, void *addr, size_t length, unsigned access,
                               void **memh_p)
{
    ote_uct_md_t *md = (ote_uct_md_t *)omd;
    unsigned flags   = UCT_MD_MEM_ACCESS_LOCAL_READ | UCT_MD_MEM_ACCESS_LOCAL_WRITE;
    uct_mem_h memh   = UCT_MEM_HANDLE_NULL;
    ucs_status_t s;

    if (access & OTE_ACCESS_REMOTE_READ)
        flags |= UCT_MD_MEM_ACCESS_REMOTE_GET;
    if (access & OTE_ACCESS_REMOTE_WRITE)
        flags |= UCT_MD_MEM_ACCESS_REMOTE_PUT;
    s = uct_md_mem_reg(md->md, addr, length, flags, &memh);
    if (s != UCS_OK) {
        ote_error("%s: registering %p+%zu: %s", md->name, addr, length, ucs_status_string(s));
        return ote_uct_status(s);
    }
    *memh_p = memh == UCT_MEM_HANDLE_NULL ? (void *)&null_memh : memh;
    return OTE_OK;
}

static void uct_md_dereg(ote_md_t *omd, void *memh)
{
    ote_uct_md_t *md = (ote_uct_md_t *)omd;
    ucs_status_t s;

    if (memh == &null_memh)
        memh = UCT_MEM_HANDLE_NULL;
    s = uct_md_mem_dereg(md->md, memh);
    if (s != UCS_OK)
        ote_warn("%s: deregistration: %s", md->name, ucs_status_string(s));
}

static ote_status_t uct_md_rkey_pack(ote_md_t *omd, void *memh, void *buf, size_t max,
                                     size_t *length_p)
{
    ote_uct_md_t *md = (ote_uct_md_t *)omd;
    size_t len       = md->attr.rkey_packed_size;
    ucs_status_t s;

    if (len > max)
        return OTE_ERR_INVALID_PARAM;
    if (len > 0) {
        if (memh == &null_memh)
            return OTE_ERR_UNSUPPORTED;
        s = uct_md_mkey_pack(md->md, memh, buf);
        if (s != UCS_OK)
            return ote_uct_status(s);
    }
    *length_p = len;
    return OTE_OK;
}

const ote_md_ops_t ote_uct_md_ops = {
    .mem_reg   = uct_md_reg,
    .mem_dereg = uct_md_dereg,
    .rkey_pack = uct_md_rkey_pack,
};

/* ---- registry ------------------------------------------------------------ */

static ote_status_t md_open_raw(uct_component_h comp, const char *name, uct_md_h *md_p)
{
    uct_md_config_t *cfg;
    ucs_status_t s;

    s = uct_md_config_read(comp, NULL, NULL, &cfg);
    if (s != UCS_OK)
        return ote_uct_status(s);
    s = uct_md_open(comp, name, cfg, md_p);
    uct_config_release(cfg);
    return s == UCS_OK ? OTE_OK : ote_uct_status(s);
}

/* Under registry_lock. */
static ote_uct_md_entry_t *registry_find(uct_component_h comp, const char *md_name)
{
    ote_uct_md_entry_t *e;

    for (size_t i = 0; i < registry_count; i++) {
        if (registry[i].component == comp && strcmp(registry[i].md_name, md_name) == 0)
            return &registry[i];
    }
    if (registry_count == OTE_UCT_MAX_MDS)
        return NULL;
    e = &registry[registry_count++];
    e->component = comp;
    snprintf(e->md_name, sizeof(e->md_name), "%s", md_name);
    return e;
}

unsigned ote_uct_md_flags(uint64_t cap_flags)
{
    return (cap_flags & UCT_MD_FLAG_REG) && (cap_flags & UCT_MD_FLAG_NEED_RKEY)
               ? OTE_MD_FLAG_GRANTS_ACCESS
               : 0;
}

ote_status_t ote_uct_md_get(ote_uct_md_entry_t *entry, ote_uct_md_t **md_p)
{
    ote_uct_md_t *md;
    ucs_status_t s;
    ote_status_t status;

    pthread_mutex_lock(&registry_lock);
    if (entry->md != NULL) {
        entry->md->refs++;
        *md_p = entry->md;
        pthread_mutex_unlock(&registry_lock);
        return OTE_OK;
    }
    md = calloc(1, sizeof(*md));
    if (md == NULL) {
        pthread_mutex_unlock(&registry_lock);
        return OTE_ERR_NO_MEMORY;
    }
    status = md_open_raw(entry->component, entry->md_name, &md->md);
    if (status != OTE_OK)
        goto err_free;
    s = uct_md_query(md->md, &md->attr);
    if (s != UCS_OK) {
        status = ote_uct_status(s);
        goto err_close;
    }
    snprintf(md->name, sizeof(md->name), "uct:%s", entry->md_name);
    md->entry           = entry;
    md->component       = entry->component;
    md->refs            = 1;
    md->super.name      = md->name;
    md->super.ops       = &ote_uct_md_ops;
    md->super.priv      = md;
    /* A domain that cannot register user memory gets nothing registered. */
    md->super.mem_types = (md->attr.cap.flags & UCT_MD_FLAG_REG)
                              ? mem_types_of(md->attr.cap.reg_mem_types)
                              : 0;
    /* An rkey that the NIC honours is never kept or shared past its region. */
    md->super.flags = ote_uct_md_flags(md->attr.cap.flags);
    entry->md = md;
    *md_p     = md;
    pthread_mutex_unlock(&registry_lock);
    return OTE_OK;

err_close:
    uct_md_close(md->md);
err_free:
    pthread_mutex_unlock(&registry_lock);
    free(md);
    return status;
}

void ote_uct_md_put(ote_uct_md_t *md)
{
    pthread_mutex_lock(&registry_lock);
    if (--md->refs > 0) {
        pthread_mutex_unlock(&registry_lock);
        return;
    }
    md->entry->md = NULL;
    pthread_mutex_unlock(&registry_lock);
    uct_md_close(md->md);
    free(md);
}

static bool dev_is_loopback(const char *dev)
{
    struct ifaddrs *ifa, *i;
    bool lo = false;

    if (getifaddrs(&ifa) != 0)
        return strcmp(dev, "lo") == 0;
    for (i = ifa; i != NULL; i = i->ifa_next) {
        if (i->ifa_name && strcmp(i->ifa_name, dev) == 0 && (i->ifa_flags & IFF_LOOPBACK))
            lo = true;
    }
    freeifaddrs(ifa);
    return lo;
}

/* Under registry_lock: the persistent record of one resource. */
static ote_uct_rsc_t *rsc_find(ote_uct_md_entry_t *entry, const uct_tl_resource_desc_t *tl)
{
    ote_uct_rsc_t *r;

    for (size_t i = 0; i < rsc_count; i++) {
        r = &rsc_registry[i];
        if (r->md_entry == entry && strcmp(r->tl_name, tl->tl_name) == 0 &&
            strcmp(r->dev_name, tl->dev_name) == 0)
            return r;
    }
    if (rsc_count == OTE_UCT_MAX_RSCS)
        return NULL;
    r = &rsc_registry[rsc_count++];
    r->md_entry = entry;
    snprintf(r->tl_name, sizeof(r->tl_name), "%s", tl->tl_name);
    snprintf(r->dev_name, sizeof(r->dev_name), "%s", tl->dev_name);
    r->dev_type = tl->dev_type;
    r->loopback = tl->dev_type == UCT_DEVICE_TYPE_NET && dev_is_loopback(tl->dev_name);
    return r;
}

/* Resources of one domain, appended to *list_p. Under registry_lock. */
static ote_status_t query_md(ote_uct_md_entry_t *entry, ote_uct_rsc_t ***list_p,
                             size_t *count_p, size_t *cap_p)
{
    uct_tl_resource_desc_t *tls = NULL;
    unsigned ntls               = 0;
    uct_md_h md;
    bool temp = entry->md == NULL;
    ote_status_t status;
    ucs_status_t s;

    if (temp) {
        status = md_open_raw(entry->component, entry->md_name, &md);
        if (status != OTE_OK)
            return status;
    } else {
        md = entry->md->md;
    }
    s      = uct_md_query_tl_resources(md, &tls, &ntls);
    status = ote_uct_status(s);
    for (unsigned i = 0; s == UCS_OK && i < ntls; i++) {
        ote_uct_rsc_t *r = rsc_find(entry, &tls[i]);

        if (r == NULL)
            break;
        if (*count_p == *cap_p) {
            size_t ncap       = *cap_p ? *cap_p * 2 : 16;
            ote_uct_rsc_t **n = realloc(*list_p, ncap * sizeof(*n));

            if (n == NULL) {
                status = OTE_ERR_NO_MEMORY;
                break;
            }
            *list_p = n;
            *cap_p  = ncap;
        }
        (*list_p)[(*count_p)++] = r;
    }
    if (tls != NULL)
        uct_release_tl_resource_list(tls);
    if (temp)
        uct_md_close(md);
    return status;
}

ote_status_t ote_uct_query(ote_uct_rsc_t ***list_p, size_t *count_p)
{
    uct_component_h *comps = NULL;
    unsigned ncomps        = 0;
    ote_uct_rsc_t **rsc    = NULL;
    size_t count = 0, cap = 0;
    ucs_status_t s;

    s = uct_query_components(&comps, &ncomps);
    if (s != UCS_OK) {
        ote_warn("uct: cannot list UCT components: %s", ucs_status_string(s));
        return ote_uct_status(s);
    }
    pthread_mutex_lock(&registry_lock);
    for (unsigned c = 0; c < ncomps; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                   UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        uct_md_resource_desc_t *mds;

        if (uct_component_query(comps[c], &attr) != UCS_OK || attr.md_resource_count == 0)
            continue;
        mds = calloc(attr.md_resource_count, sizeof(*mds));
        if (mds == NULL)
            break;
        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(comps[c], &attr) == UCS_OK) {
            for (unsigned m = 0; m < attr.md_resource_count; m++) {
                ote_uct_md_entry_t *e = registry_find(comps[c], mds[m].md_name);
                ote_status_t status;

                if (e == NULL)
                    break;
                status = query_md(e, &rsc, &count, &cap);
                if (status != OTE_OK)
                    ote_debug("uct: domain %s/%s: %s", attr.name, mds[m].md_name,
                              ote_status_string(status));
            }
        }
        free(mds);
    }
    pthread_mutex_unlock(&registry_lock);
    uct_release_component_list(comps);
    *list_p  = rsc;
    *count_p = count;
    return OTE_OK;
}
