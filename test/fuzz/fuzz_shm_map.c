/*
 * The shm initiator's check of a MAP_ACK, the message that carries a file
 * descriptor: input = u8 descriptor kind, u64 want, u64 want_len (the range
 * the MAP asked for), the 32-byte header, then the trailer. Descriptor
 * kinds (made once): a sealed memfd of FUZZ_FD_LEN bytes opened read-write,
 * the same opened read-only, a memfd without seals, a sealed memfd of one
 * page, a pipe. Whatever the check accepts is mapped as granted and its
 * first and last bytes touched: an accepted grant never faults.
 */
#include "fuzz.h"

#include "base/wire_util.h"
#include "uct_ext/shm/shm.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FUZZ_FD_LEN (64 * 1024)
#define FUZZ_KINDS  5

static int fds[FUZZ_KINDS];

static int memfd(size_t len, bool seal)
{
    int fd = (int)syscall(SYS_memfd_create, "fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
        abort();
    if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        abort();
    return fd;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[64];
    int p[2];

    (void)argc;
    (void)argv;
    fds[0] = memfd(FUZZ_FD_LEN, true);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[0]);
    fds[1] = open(path, O_RDONLY | O_CLOEXEC);
    fds[2] = memfd(FUZZ_FD_LEN, false);
    fds[3] = memfd(4096, true);
    if (fds[1] < 0 || pipe(p) != 0)
        abort();
    fds[4] = p[0];
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ote_shm_grant_info_t g;
    ote_stream_hdr_t h;
    uint64_t want, want_len;
    unsigned kind;
    uint8_t *copy;
    size_t tlen;

    if (size < 17 + OTE_STREAM_HDR_LEN)
        return 0;
    kind     = data[0] % FUZZ_KINDS;
    want     = ote_get_u64(data + 1);
    want_len = ote_get_u64(data + 9);
    if (ote_stream_hdr_decode(data + 17, OTE_STREAM_HDR_LEN, 1u << 20, &h) != OTE_OK ||
        h.type != OTE_STREAM_MAP_ACK || h.status != OTE_OK)
        return 0;
    /* An exact-size copy of the trailer, so a read past it is caught by ASan. */
    tlen = size - 17 - OTE_STREAM_HDR_LEN;
    copy = malloc(tlen ? tlen : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 17 + OTE_STREAM_HDR_LEN, tlen);
    if (ote_shm_map_check(&h, copy, tlen, fds[kind], want, want_len, &g) == OTE_OK) {
        volatile uint8_t *m;

        FUZZ_CHECK(kind == 0 || kind == 1 || kind == 3);
        FUZZ_CHECK(tlen == OTE_STREAM_MAP_ACK_TRAILER_LEN && g.grant != 0);
        FUZZ_CHECK(g.length > 0 && g.length <= (kind == 3 ? 4096u : FUZZ_FD_LEN));
        FUZZ_CHECK(want >= g.base && want_len > 0 && want + want_len >= want &&
                   want + want_len <= g.base + g.length);
        FUZZ_CHECK(!g.writable || kind != 1);
        m = mmap(NULL, g.length, PROT_READ | (g.writable ? PROT_WRITE : 0), MAP_SHARED,
                 fds[kind], 0);
        FUZZ_CHECK(m != MAP_FAILED);
        (void)m[0];
        (void)m[g.length - 1];
        if (g.writable)
            m[g.length - 1] = 1;
        munmap((void *)m, g.length);
    }
    free(copy);
    return 0;
}
