/*
 * Regions mapped by peers (the shm component's exports): the list of a
 * region's exports, and their revocation before the region goes.
 */
#include "mem_int.h"

#include <pthread.h>

/* Export lists of all regions: taken rarely (a peer maps, a deregistration). */
static pthread_mutex_t export_lock = PTHREAD_MUTEX_INITIALIZER;

bool ote_mem_region_export_add(ote_region_t *r, ote_mem_export_t *x)
{
    bool ok;

    pthread_mutex_lock(&export_lock);
    ok = !r->exports_closed && atomic_load(&r->in_table);
    if (ok) {
        x->next     = r->exports;
        r->exports  = x;
        r->exported = true;
    }
    pthread_mutex_unlock(&export_lock);
    return ok;
}

bool ote_mem_region_export_remove(ote_region_t *r, ote_mem_export_t *x)
{
    bool found = false;

    pthread_mutex_lock(&export_lock);
    for (ote_mem_export_t **pp = &r->exports; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp   = x->next;
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&export_lock);
    return found;
}

/*
 * Peers that mapped the region unmap it (or lose their connection) before
 * this returns: all are asked at once, then each is waited for within the
 * bound of its transport. Engine-owned memory that was ever exported is
 * then detached from its memfd, so that even a peer that never answered
 * (stopped, hostile) cannot write into what this process sees.
 */
void ote_mem_region_revoke_exports(ote_region_t *r)
{
    ote_mem_export_t *list, *next;
    bool exported;

    pthread_mutex_lock(&export_lock);
    list              = r->exports;
    r->exports        = NULL;
    r->exports_closed = true;
    exported          = r->exported;
    pthread_mutex_unlock(&export_lock);
    for (ote_mem_export_t *x = list; x != NULL; x = x->next)
        x->ops->revoke(x);
    for (ote_mem_export_t *x = list; x != NULL; x = next) {
        next = x->next;
        x->ops->wait(x); /* may free x */
    }
    if (exported && r->owned && r->memfd >= 0)
        ote_mem_host_detach(r->owned_base, r->owned_length);
}
