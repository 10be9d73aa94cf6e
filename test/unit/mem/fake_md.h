/*
 * A memory domain for tests: counts registrations, checks every handle it
 * is given back is one of its live ones, and fails the Nth mem_reg call
 * (counted across every fake md sharing one counter) on request.
 */
#ifndef OTE_TEST_FAKE_MD_H
#define OTE_TEST_FAKE_MD_H

#include "mem/mem_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MEMH_MAGIC 0x6d656d68u

typedef struct fake_md fake_md_t;

typedef struct fake_memh {
    unsigned          magic;
    fake_md_t        *md;
    uint64_t          addr;
    size_t            length;
    unsigned          access;
    struct fake_memh *next;
} fake_memh_t;

struct fake_md {
    ote_md_t     md;
    char         name[32];
    long         regs;    /* successful mem_reg calls                */
    long         deregs;
    long        *counter; /* mem_reg calls, shared across fake mds   */
    long         fail_at; /* fail the call with this counter value   */
    fake_memh_t *live;
    pthread_mutex_t lock; /* data-path threads may release registrations */
};

static inline long fake_md_live(fake_md_t *f)
{
    long n;

    pthread_mutex_lock(&f->lock);
    n = f->regs - f->deregs;
    pthread_mutex_unlock(&f->lock);
    return n;
}

/* Is there a live handle of exactly this range? */
static inline bool fake_md_has(fake_md_t *f, uint64_t addr, size_t length)
{
    bool found = false;

    pthread_mutex_lock(&f->lock);
    for (const fake_memh_t *h = f->live; h != NULL && !found; h = h->next)
        found = h->addr == addr && h->length == length;
    pthread_mutex_unlock(&f->lock);
    return found;
}

static ote_status_t fake_mem_reg(ote_md_t *md, void *addr, size_t length, unsigned access,
                                 void **memh_p)
{
    fake_md_t *f = md->priv;
    fake_memh_t *h;

    pthread_mutex_lock(&f->lock);
    if (++*f->counter == f->fail_at) {
        pthread_mutex_unlock(&f->lock);
        return OTE_ERR_IO;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        pthread_mutex_unlock(&f->lock);
        return OTE_ERR_NO_MEMORY;
    }
    h->magic  = FAKE_MEMH_MAGIC;
    h->md     = f;
    h->addr   = (uintptr_t)addr;
    h->length = length;
    h->access = access;
    h->next   = f->live;
    f->live   = h;
    f->regs++;
    pthread_mutex_unlock(&f->lock);
    *memh_p = h;
    return OTE_OK;
}

static void fake_mem_dereg(ote_md_t *md, void *memh)
{
    fake_md_t *f   = md->priv;
    fake_memh_t *h = memh, **pp;

    /* May run on any thread: a wrong handle aborts the test program. */
    if (h == NULL || h->magic != FAKE_MEMH_MAGIC || h->md != f)
        abort();
    pthread_mutex_lock(&f->lock);
    for (pp = &f->live; *pp != NULL && *pp != h; pp = &(*pp)->next)
        ;
    if (*pp == NULL)
        abort(); /* not a handle this md gave out and has not taken back */
    *pp      = h->next;
    h->magic = 0;
    free(h);
    f->deregs++;
    pthread_mutex_unlock(&f->lock);
}

static ote_status_t fake_rkey_pack(ote_md_t *md, void *memh, void *buf, size_t max,
                                   size_t *length_p)
{
    fake_memh_t *h = memh;

    if (max < 16)
        return OTE_ERR_NO_MEMORY;
    memcpy(buf, &h->addr, 8);
    memcpy((char *)buf + 8, &h->length, 8);
    *length_p = 16;
    return OTE_OK;
}

static const ote_md_ops_t fake_md_ops = {
    .mem_reg   = fake_mem_reg,
    .mem_dereg = fake_mem_dereg,
    .rkey_pack = fake_rkey_pack,
};

static inline void fake_md_init(fake_md_t *f, const char *name, unsigned flags, long *counter)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->md.name      = f->name;
    f->md.ops       = &fake_md_ops;
    f->md.mem_types = OTE_MEM_TYPE_HOST;
    f->md.flags     = flags;
    f->md.priv      = f;
    f->counter      = counter;
    pthread_mutex_init(&f->lock, NULL);
}

/* Synthetic addresses: the table never touches the memory it indexes. */
#define FAKE_BASE 0x100000000000ull

static inline ote_mem_desc_t fake_desc(uint64_t addr, size_t length, unsigned access)
{
    return (ote_mem_desc_t){.addr = (void *)(uintptr_t)addr, .length = length,
                            .location = "cpu:0", .access = access};
}

#endif
