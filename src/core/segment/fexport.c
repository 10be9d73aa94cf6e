/*
 * Files exported to peers (fexport.h): ote_file_export, ote_file_unexport,
 * the table the descriptor and the control listener read.
 */
#include "fexport.h"

#include "core/engine_facts.h"
#include "core/meta/meta.h"
#include "segment_def.h"

#include "base/dlist.h"
#include "base/log.h"
#include "base/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ote_file_export {
    ote_engine_h         engine;
    char                 name[OTE_FEXPORT_NAME_MAX + 1];
    size_t               num_files;
    ote_fexport_file_t **files;
    struct ote_file_export *next, *prev;
};

void ote_fexport_table_init(ote_fexport_table_t *t)
{
    pthread_mutex_init(&t->lock, NULL);
    t->exports = NULL;
}

static void file_put_locked(ote_fexport_file_t *f)
{
    if (--f->refs == 0) {
        close(f->fd);
        free(f);
    }
}

void ote_fexport_release(ote_fexport_table_t *t, ote_fexport_file_t *f)
{
    pthread_mutex_lock(&t->lock);
    file_put_locked(f);
    pthread_mutex_unlock(&t->lock);
}

static void export_free_locked(struct ote_file_export *x)
{
    for (size_t i = 0; i < x->num_files; i++)
        file_put_locked(x->files[i]);
    free(x->files);
    free(x);
}

void ote_fexport_table_destroy(ote_fexport_table_t *t)
{
    pthread_mutex_lock(&t->lock);
    while (t->exports != NULL) {
        struct ote_file_export *x = t->exports;

        OTE_DLIST_REMOVE(t->exports, x);
        export_free_locked(x);
    }
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_destroy(&t->lock);
}

ote_status_t ote_fexport_desc_fill(ote_fexport_table_t *t, ote_desc_t *d)
{
    size_t n = 0, k = 0;

    pthread_mutex_lock(&t->lock);
    for (struct ote_file_export *x = t->exports; x != NULL; x = x->next)
        n += x->num_files;
    d->exports = calloc(n ? n : 1, sizeof(*d->exports));
    if (d->exports == NULL) {
        pthread_mutex_unlock(&t->lock);
        return OTE_ERR_NO_MEMORY;
    }
    for (struct ote_file_export *x = t->exports; x != NULL; x = x->next) {
        for (size_t i = 0; i < x->num_files; i++, k++) {
            ote_fexport_file_t *f = x->files[i];

            snprintf(d->exports[k].name, sizeof(d->exports[k].name), "%s", f->name);
            d->exports[k].id     = f->id;
            d->exports[k].size   = f->size;
            d->exports[k].access = f->access;
        }
    }
    d->num_exports = n;
    pthread_mutex_unlock(&t->lock);
    return OTE_OK;
}

ote_status_t ote_fexport_desc_encode(ote_fexport_table_t *t, ote_desc_t *d,
                                     ote_mem_table_t *regions, ote_buf_t *out)
{
    ote_status_t status = ote_fexport_desc_fill(t, d);

    if (status == OTE_OK)
        status = ote_desc_encode(d, regions, out);
    free(d->exports);
    free(d->tls);
    free(d->runs);
    free(d);
    return status;
}

ote_status_t ote_fexport_acquire(ote_fexport_table_t *t, uint64_t id, ote_fexport_file_t **f_p)
{
    pthread_mutex_lock(&t->lock);
    for (struct ote_file_export *x = t->exports; x != NULL; x = x->next) {
        for (size_t i = 0; i < x->num_files; i++) {
            if (x->files[i]->id == id) {
                x->files[i]->refs++;
                *f_p = x->files[i];
                pthread_mutex_unlock(&t->lock);
                return OTE_OK;
            }
        }
    }
    pthread_mutex_unlock(&t->lock);
    return OTE_ERR_NOT_FOUND;
}

ote_status_t ote_fexport_check(const ote_fexport_file_t *f, bool write, uint64_t offset,
                               uint32_t length)
{
    if (!(f->access & (write ? OTE_ACCESS_REMOTE_WRITE : OTE_ACCESS_REMOTE_READ)))
        return OTE_ERR_ACCESS;
    if (length == 0 || offset > f->size || length > f->size - offset)
        return OTE_ERR_OUT_OF_BOUNDS;
    return OTE_OK;
}

ote_status_t ote_fexport_io(const ote_fexport_file_t *f, bool write, uint64_t offset,
                            uint32_t length, const uint8_t *data, uint8_t *buf,
                            size_t *done_p)
{
    size_t done = 0;
    struct stat st;

    if (write) {
        /* A file truncated under its export is not grown back by a peer. */
        if (fstat(f->fd, &st) != 0)
            return ote_status_from_io_errno(errno);
        if ((uint64_t)st.st_size < offset + length) {
            *done_p = 0;
            return OTE_ERR_OUT_OF_BOUNDS;
        }
    }
    while (done < length) {
        ssize_t n = write ? pwrite(f->fd, data + done, length - done, (off_t)(offset + done))
                          : pread(f->fd, buf + done, length - done, (off_t)(offset + done));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;

            *done_p = done;
            ote_debug("exported file '%s': %s at %llu: %s", f->name, write ? "pwrite" : "pread",
                      (unsigned long long)(offset + done), strerror(err));
            return ote_status_from_io_errno(err);
        }
        if (n == 0) {
            *done_p = done;
            return write ? OTE_ERR_IO : OTE_ERR_OUT_OF_BOUNDS;
        }
        done += (size_t)n;
    }
    *done_p = done;
    return OTE_OK;
}

/* ---- API ------------------------------------------------------------------ */

static bool export_name_ok(const char *name)
{
    size_t len = strlen(name);

    if (len == 0 || len > OTE_FEXPORT_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!isgraph((unsigned char)name[i]) || name[i] == '@' || name[i] == '/')
            return false;
    }
    return true;
}

static uint64_t file_id_new(void)
{
    uint64_t id;

    do {
        id = ote_random_u64();
    } while (id == 0);
    return id;
}

/* Open one file (at dirfd, or an absolute path with AT_FDCWD) for the export. */
static ote_status_t file_open(int dirfd, const char *path, const char *name, unsigned access,
                              ote_fexport_file_t **f_p)
{
    /*
     * O_NONBLOCK: a FIFO in the way is refused below, not waited on (no
     * effect on files). A directory's entry was a regular file when listed:
     * O_NOFOLLOW, so one replaced by a link since does not export its target.
     */
    int flags = ((access & OTE_ACCESS_REMOTE_WRITE) ? O_RDWR : O_RDONLY) | O_CLOEXEC |
                O_NONBLOCK | (dirfd != AT_FDCWD ? O_NOFOLLOW : 0);
    ote_fexport_file_t *f;
    struct stat st;
    int fd = openat(dirfd, path, flags);

    if (fd < 0) {
        int err = errno;

        ote_error("file export '%s': cannot open '%s'%s: %s", name, path,
                  (access & OTE_ACCESS_REMOTE_WRITE) ? " for writing" : "", strerror(err));
        return err == ENOENT ? OTE_ERR_NOT_FOUND
             : (err == EACCES || err == EPERM || err == EROFS) ? OTE_ERR_ACCESS
             : err == ELOOP ? OTE_ERR_INVALID_PARAM
                            : OTE_ERR_IO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ote_error("file export '%s': '%s' is not a regular file", name, path);
        close(fd);
        return OTE_ERR_INVALID_PARAM;
    }
    f = calloc(1, sizeof(*f));
    if (f == NULL) {
        close(fd);
        return OTE_ERR_NO_MEMORY;
    }
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->id     = file_id_new();
    f->size   = (uint64_t)st.st_size;
    f->access = access;
    f->fd     = fd;
    f->refs   = 1;
    *f_p      = f;
    return OTE_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every regular file of the directory, by name, as "export/file". */
static ote_status_t dir_open(struct ote_file_export *x, int dirfd, unsigned access)
{
    DIR *dir = fdopendir(dirfd);
    char **names = NULL;
    size_t n = 0;
    ote_status_t status = OTE_OK;
    struct dirent *de;

    if (dir == NULL) {
        close(dirfd);
        return OTE_ERR_IO;
    }
    while ((de = readdir(dir)) != NULL && status == OTE_OK) {
        struct stat st;
        char **more;

        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (strchr(de->d_name, '@') != NULL ||
            strlen(x->name) + 1 + strlen(de->d_name) > OTE_DESC_NAME_MAX) {
            ote_warn("file export '%s': '%s' left out (a name with '@', or too long)", x->name,
                     de->d_name);
            continue;
        }
        if (n == OTE_FEXPORT_MAX_FILES) {
            ote_error("file export '%s': more than %d regular files", x->name,
                      OTE_FEXPORT_MAX_FILES);
            status = OTE_ERR_INVALID_PARAM;
            break;
        }
        more = realloc(names, (n + 1) * sizeof(*names));
        if (more == NULL || (more[n] = strdup(de->d_name)) == NULL) {
            names  = more != NULL ? more : names;
            status = OTE_ERR_NO_MEMORY;
            break;
        }
        names = more;
        n++;
    }
    if (status == OTE_OK && n > 0) {
        qsort(names, n, sizeof(*names), name_cmp);
        x->files = calloc(n, sizeof(*x->files));
        if (x->files == NULL)
            status = OTE_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n && status == OTE_OK; i++) {
        char full[OTE_DESC_NAME_MAX + 1];

        snprintf(full, sizeof(full), "%s/%s", x->name, names[i]);
        status = file_open(dirfd, names[i], full, access, &x->files[i]);
        if (status == OTE_OK)
            x->num_files++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dir);
    return status;
}

ote_status_t ote_file_export(ote_engine_h e, const char *name, const char *path,
                             unsigned access, ote_file_export_h *export_p)
{
    ote_fexport_table_t *t;
    struct ote_file_export *x;
    struct stat st;
    ote_status_t status;
    int fd;

    if (e == NULL || name == NULL || path == NULL || export_p == NULL || access == 0 ||
        (access & ~(unsigned)(OTE_ACCESS_REMOTE_READ | OTE_ACCESS_REMOTE_WRITE)))
        return OTE_ERR_INVALID_PARAM;
    if (!export_name_ok(name)) {
        ote_error("file export '%.40s': a name is 1 to %d printable bytes without spaces, '@' "
                  "or '/'", name, OTE_FEXPORT_NAME_MAX);
        return OTE_ERR_INVALID_PARAM;
    }
    if (path[0] != '/') {
        ote_error("file export '%s': '%s' is not an absolute path", name, path);
        return OTE_ERR_INVALID_PARAM;
    }
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return OTE_ERR_NO_MEMORY;
    x->engine = e;
    snprintf(x->name, sizeof(x->name), "%s", name);
    if (stat(path, &st) != 0) {
        ote_error("file export '%s': '%s': %s", name, path, strerror(errno));
        status = errno == ENOENT ? OTE_ERR_NOT_FOUND : OTE_ERR_ACCESS;
        goto err;
    }
    if (S_ISDIR(st.st_mode)) {
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        status = fd < 0 ? OTE_ERR_ACCESS : dir_open(x, fd, access);
    } else {
        x->files = calloc(1, sizeof(*x->files));
        status   = x->files == NULL ? OTE_ERR_NO_MEMORY
                                    : file_open(AT_FDCWD, path, name, access, &x->files[0]);
        if (status == OTE_OK)
            x->num_files = 1;
    }
    if (status != OTE_OK)
        goto err;
    t = &ote_segment_table(e)->fexports;
    pthread_mutex_lock(&t->lock);
    for (struct ote_file_export *y = t->exports; y != NULL; y = y->next) {
        if (strcmp(y->name, name) == 0) {
            pthread_mutex_unlock(&t->lock);
            ote_error("file export '%s': the name is exported already", name);
            status = OTE_ERR_EXISTS;
            goto err;
        }
    }
    OTE_DLIST_PUSH_FRONT(t->exports, x);
    pthread_mutex_unlock(&t->lock);
    ote_meta_changed(ote_engine_facts(e)->meta);
    ote_debug("file export '%s': '%s', %zu file(s)", name, path, x->num_files);
    *export_p = x;
    return OTE_OK;

err:
    for (size_t i = 0; i < x->num_files; i++) {
        close(x->files[i]->fd);
        free(x->files[i]);
    }
    free(x->files);
    free(x);
    return status;
}

ote_status_t ote_file_unexport(ote_file_export_h x)
{
    ote_engine_h e;

    if (x == NULL)
        return OTE_ERR_INVALID_PARAM;
    e = x->engine;
    pthread_mutex_lock(&ote_segment_table(e)->fexports.lock);
    OTE_DLIST_REMOVE(ote_segment_table(e)->fexports.exports, x);
    /* Requests in flight keep their file open until they end; new ones get NOT_FOUND. */
    export_free_locked(x);
    pthread_mutex_unlock(&ote_segment_table(e)->fexports.lock);
    ote_meta_changed(ote_engine_facts(e)->meta);
    return OTE_OK;
}
