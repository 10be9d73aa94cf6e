/*
 * Open files of file segments. A file is opened once per segment: a
 * buffered fd, and an O_DIRECT one of the same inode where OTE_FILE_DIRECT
 * allows and the file system offers it. The segment's eps find it by a
 * random token kept in a process-wide list, so that an address blob never
 * carries a pointer.
 */
#include "file_int.h"

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_ADDR_MAGIC "OTEF"
#define FILE_ADDR_LEN   12

static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
static ote_file_t     *files;

static ote_status_t open_errno_status(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return OTE_ERR_NOT_FOUND;
    case EACCES:
    case EPERM:
        return OTE_ERR_ACCESS;
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
        return OTE_ERR_INVALID_PARAM;
    case ENOMEM:
        return OTE_ERR_NO_MEMORY;
    default:
        return OTE_ERR_IO;
    }
}

/*
 * O_DIRECT alignment of fd from statx (STATX_DIOALIGN); false when the
 * file system does not offer O_DIRECT for it. Kernels that do not report
 * it get the page size, which every O_DIRECT file system accepts.
 */
static bool dio_align(int fd, size_t *mem_p, size_t *off_p)
{
#ifdef STATX_DIOALIGN
    struct statx stx;

    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN)) {
        if (stx.stx_dio_offset_align == 0)
            return false;
        *mem_p = stx.stx_dio_mem_align;
        *off_p = stx.stx_dio_offset_align;
        return true;
    }
#endif
    *mem_p = *off_p = (size_t)sysconf(_SC_PAGESIZE);
    return true;
}

/* The O_DIRECT fd of f, or why there is none (OK: none wanted or offered). */
static ote_status_t open_direct(ote_file_t *f, const struct stat *st)
{
    struct stat dst;
    int fd;

    f->direct_fd = -1;
    if (f->direct == OTE_TERNARY_NO)
        return OTE_OK;
    fd = open(f->path, (f->writable ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, &dst) != 0 || dst.st_dev != st->st_dev ||
                    dst.st_ino != st->st_ino)) {
        /* Another file took the name meanwhile: never mix two files. */
        close(fd);
        ote_error("file segment '%s': the path names another file now", f->path);
        return OTE_ERR_NOT_FOUND;
    }
    if (fd >= 0 && !dio_align(fd, &f->mem_align, &f->off_align)) {
        close(fd);
        fd    = -1;
        errno = EINVAL;
    }
    if (fd < 0) {
        if (f->direct == OTE_TERNARY_YES) {
            ote_error("file segment '%s': OTE_FILE_DIRECT=y, but O_DIRECT is not available "
                      "here: %s", f->path, strerror(errno));
            return OTE_ERR_UNSUPPORTED;
        }
        ote_info("file segment '%s': no O_DIRECT on this file system (%s): buffered I/O",
                 f->path, strerror(errno));
        return OTE_OK;
    }
    f->direct_fd = fd;
    ote_debug("file segment '%s': O_DIRECT with memory alignment %zu, offset alignment %zu",
              f->path, f->mem_align, f->off_align);
    return OTE_OK;
}

ote_status_t ote_file_open(const char *path, int direct, ote_file_t **file_p)
{
    size_t len = strlen(path);
    ote_file_t *f;
    struct stat st;
    ote_status_t status;

    if (path[0] != '/') {
        ote_error("file segment '%s': the path must be absolute (file:///abs/path)", path);
        return OTE_ERR_INVALID_PARAM;
    }
    f = calloc(1, sizeof(*f) + len + 1);
    if (f == NULL)
        return OTE_ERR_NO_MEMORY;
    memcpy(f->path, path, len + 1);
    f->direct    = direct;
    f->direct_fd = -1;
    f->writable  = true;
    /* O_NONBLOCK until it is known to be a regular file: a FIFO is refused, not waited on. */
    f->fd        = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
    if (f->fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS || errno == ETXTBSY)) {
        f->writable = false;
        f->fd       = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    }
    if (f->fd < 0) {
        status = open_errno_status(errno);
        ote_error("file segment '%s': cannot open: %s", path, strerror(errno));
        goto err_free;
    }
    if (fstat(f->fd, &st) != 0) {
        status = OTE_ERR_IO;
        goto err_close;
    }
    if (!S_ISREG(st.st_mode)) {
        ote_error("file segment '%s': not a regular file", path);
        status = OTE_ERR_INVALID_PARAM;
        goto err_close;
    }
    /* Its I/O blocks as a regular file's does (io_uring would answer EAGAIN). */
    if (fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        status = OTE_ERR_IO;
        goto err_close;
    }
    atomic_init(&f->size, (uint64_t)st.st_size);
    status = open_direct(f, &st);
    if (status != OTE_OK)
        goto err_close;
    atomic_init(&f->refs, 1);
    pthread_mutex_lock(&files_lock);
    do {
        f->token = ote_random_u64();
    } while (f->token == 0);
    f->next = files;
    files   = f;
    pthread_mutex_unlock(&files_lock);
    ote_debug("file segment '%s': opened %s, %llu bytes", path,
              f->writable ? "read-write" : "read-only", (unsigned long long)st.st_size);
    *file_p = f;
    return OTE_OK;

err_close:
    close(f->fd);
err_free:
    free(f);
    return status;
}

void ote_file_put(ote_file_t *f)
{
    ote_file_t **pp;

    if (f == NULL || atomic_fetch_sub(&f->refs, 1) != 1)
        return;
    pthread_mutex_lock(&files_lock);
    for (pp = &files; *pp != NULL && *pp != f; pp = &(*pp)->next)
        ;
    if (*pp == f)
        *pp = f->next;
    pthread_mutex_unlock(&files_lock);
    ote_file_gds_detach(f);
    ote_fd_close(f->direct_fd);
    close(f->fd);
    free(f);
}

ote_file_t *ote_file_lookup(uint64_t token)
{
    ote_file_t *f;

    pthread_mutex_lock(&files_lock);
    for (f = files; f != NULL && f->token != token; f = f->next)
        ;
    if (f != NULL)
        atomic_fetch_add(&f->refs, 1);
    pthread_mutex_unlock(&files_lock);
    return f;
}

ote_status_t ote_file_refresh(ote_file_t *f, uint64_t *size_p, unsigned *access_p)
{
    struct stat st;

    if (fstat(f->fd, &st) != 0)
        return OTE_ERR_IO;
    atomic_store(&f->size, (uint64_t)st.st_size);
    *size_p   = (uint64_t)st.st_size;
    *access_p = OTE_ACCESS_REMOTE_READ | (f->writable ? OTE_ACCESS_REMOTE_WRITE : 0);
    return OTE_OK;
}

ote_status_t ote_file_address(ote_file_t *f, void *buf, size_t max, size_t *len_p)
{
    if (max < FILE_ADDR_LEN)
        return OTE_ERR_INVALID_PARAM;
    memcpy(buf, FILE_ADDR_MAGIC, 4);
    memcpy((uint8_t *)buf + 4, &f->token, 8);
    *len_p = FILE_ADDR_LEN;
    return OTE_OK;
}

ote_file_t *ote_file_from_address(const void *buf, size_t len)
{
    uint64_t token;

    if (buf == NULL || len != FILE_ADDR_LEN || memcmp(buf, FILE_ADDR_MAGIC, 4) != 0)
        return NULL;
    memcpy(&token, (const uint8_t *)buf + 4, 8);
    return ote_file_lookup(token);
}

/* ---- file segments: the component's objects (tl.h) ---- */

static ote_status_t object_open(const char *name, const void *cfg, ote_tl_object_t **obj_p)
{
    const ote_file_config_t *fc = cfg;
    const char *path            = name + strlen(OTE_FILE_SCHEME);

    if (strncmp(name, OTE_FILE_SCHEME, strlen(OTE_FILE_SCHEME)) != 0 || path[0] != '/') {
        ote_error("segment '%.*s': a file segment is named file:///abs/path (an absolute path)",
                  255, name);
        return OTE_ERR_INVALID_PARAM;
    }
    return ote_file_open(path, fc->direct, (ote_file_t **)obj_p);
}

static void object_put(ote_tl_object_t *obj)
{
    ote_file_put((ote_file_t *)obj);
}

static ote_status_t object_describe(ote_tl_object_t *obj, uint64_t *size_p, unsigned *access_p)
{
    return ote_file_refresh((ote_file_t *)obj, size_p, access_p);
}

/* GPU memory direct through cuFile, or staged in front of the file's eps. */
static ote_status_t object_attach(ote_tl_object_t *obj, const void *cfg, unsigned *unreached_p)
{
    bool direct = false;
    ote_status_t status = ote_file_gds_attach((ote_file_t *)obj, cfg, &direct);

    *unreached_p = direct ? 0 : OTE_MEM_TYPE_CUDA;
    return status;
}

static ote_status_t object_address(ote_tl_object_t *obj, void *buf, size_t max, size_t *len_p)
{
    return ote_file_address((ote_file_t *)obj, buf, max, len_p);
}

const ote_tl_object_ops_t ote_file_object_ops = {
    .scheme   = "file:",
    .name_max = sizeof(OTE_FILE_SCHEME) - 1 + PATH_MAX,
    .location = "file",
    .open     = object_open,
    .put      = object_put,
    .describe = object_describe,
    .attach   = object_attach,
    .address  = object_address,
};
