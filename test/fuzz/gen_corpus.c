/*
 * Writes the seed corpora under DIR/<target>/ (default test/fuzz/corpus):
 * valid messages of every kind, built with the library's own encoders, plus
 * a few sequences for the tcp connection target. Run from the source tree
 * after a wire format changes:
 *   build/test/fuzz/fuzz_gen_corpus test/fuzz/corpus
 */
#include "base/auth.h"
#include "core/wire/ctl_msg.h"
#include "base/config.h"
#include "core/wire/desc.h"
#include "base/wire_util.h"
#include "core/meta/meta.h"
#include "uct_ext/stream/stream_wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FUZZ_BASE     0x500000000000ull /* as in fuzz_tcp_conn.c */
#define FUZZ_RW       (FUZZ_BASE + 4096)
#define FUZZ_RO       (FUZZ_BASE + 4096 + 16384 + 4096)
#define FUZZ_INSTANCE 0x1122334455667788ull

static const char *root;

static void put(const char *target, const char *name, const void *p, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(p, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void tcp_hdr(ote_buf_t *b, uint8_t type, int32_t status, uint64_t id, uint64_t addr,
                    uint64_t length)
{
    uint8_t h[OTE_STREAM_HDR_LEN];
    ote_stream_hdr_t x = {.type = type, .status = status, .id = id, .addr = addr, .length = length};

    ote_stream_hdr_encode(&x, h);
    ote_buf_put(b, h, sizeof(h));
}

static void ctl_hdr(ote_buf_t *b, uint8_t type, uint32_t length, uint32_t seq)
{
    uint8_t h[OTE_CTL_HDR_LEN];
    ote_ctl_hdr_t x = {.type = type, .length = length, .seq = seq};

    ote_ctl_hdr_encode(&x, h);
    ote_buf_put(b, h, sizeof(h));
}

static void flush(const char *target, const char *name, ote_buf_t *b)
{
    put(target, name, b->data, b->len);
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* The first byte of the input of a target with two decoders: 0 request, 1 answer. */
static ote_buf_t *pick(ote_buf_t *b, uint8_t decoder)
{
    ote_buf_put_u8(b, decoder);
    return b;
}

/* flush() what an encoder wrote, which must have succeeded. */
static void flush_encoded(const char *target, const char *name, ote_buf_t *b, ote_status_t encoded)
{
    if (encoded != OTE_OK)
        exit(1);
    flush(target, name, b);
}

/* The statuses of a failed WRITEV_ACK or READV_RESP: n entries, entry bad failed. */
static void put_statuses(ote_buf_t *b, size_t n, size_t bad, ote_status_t status)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t st[OTE_STREAM_WRITEV_STATUS_LEN];

        ote_put_u32(st, (uint32_t)(i == bad ? status : OTE_OK));
        ote_buf_put(b, st, sizeof(st));
    }
}

static void gen_tcp_hdr(void)
{
    ote_buf_t b = {0};

    tcp_hdr(&b, OTE_STREAM_HELLO, 0, 1, FUZZ_INSTANCE, 0);      flush("tcp_hdr", "hello", &b);
    tcp_hdr(&b, OTE_STREAM_HELLO_ACK, OTE_ERR_NOT_FOUND, 1, 0, 0); flush("tcp_hdr", "hello_ack", &b);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 2, FUZZ_RW, 4096);         flush("tcp_hdr", "write", &b);
    tcp_hdr(&b, OTE_STREAM_WRITE_ACK, 0, 2, 0, 4096);            flush("tcp_hdr", "write_ack", &b);
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 3, FUZZ_RW, 65536);      flush("tcp_hdr", "read_req", &b);
    tcp_hdr(&b, OTE_STREAM_READ_RESP, 0, 3, 0, 65536);           flush("tcp_hdr", "read_resp", &b);
    tcp_hdr(&b, OTE_STREAM_READ_RESP, OTE_ERR_OUT_OF_BOUNDS, 3, 0, 0);
    flush("tcp_hdr", "read_resp_err", &b);
    tcp_hdr(&b, OTE_STREAM_AUTH_HELLO, 0, 4, 0, 32);             flush("tcp_hdr", "auth_hello", &b);
    tcp_hdr(&b, OTE_STREAM_WRITEV, 0, 5, 3, 96);                 flush("tcp_hdr", "writev", &b);
    tcp_hdr(&b, OTE_STREAM_WRITEV_ACK, 0, 5, 3, 96);             flush("tcp_hdr", "writev_ack", &b);
    tcp_hdr(&b, OTE_STREAM_WRITEV_ACK, OTE_ERR_ACCESS, 5, 3, 0);
    put_statuses(&b, 3, 1, OTE_ERR_ACCESS);
    flush("tcp_hdr", "writev_ack_statuses", &b);
    tcp_hdr(&b, OTE_STREAM_READV_REQ, 0, 6, 2, 8192);            flush("tcp_hdr", "readv_req", &b);
    tcp_hdr(&b, OTE_STREAM_READV_RESP, 0, 6, 2, 8192);           flush("tcp_hdr", "readv_resp", &b);
    tcp_hdr(&b, OTE_STREAM_READV_RESP, OTE_ERR_OUT_OF_BOUNDS, 6, 2, 4096);
    put_statuses(&b, 2, 0, OTE_ERR_OUT_OF_BOUNDS);
    flush("tcp_hdr", "readv_resp_statuses", &b);
    tcp_hdr(&b, OTE_STREAM_AUTH_PROOF, 0, 4, 0, 64);             flush("tcp_hdr", "auth_tproof", &b);
    tcp_hdr(&b, OTE_STREAM_AUTH_PROOF, 0, 5, 0, 32);             flush("tcp_hdr", "auth_iproof", &b);
    tcp_hdr(&b, OTE_STREAM_AUTH_DONE, OTE_ERR_AUTH, 5, 0, 0);    flush("tcp_hdr", "auth_done", &b);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 6, FUZZ_RW, 4096);        flush("tcp_hdr", "put_ref", &b);
    tcp_hdr(&b, OTE_STREAM_GET_REF, 0, 7, FUZZ_RW, 65536);       flush("tcp_hdr", "get_ref", &b);
    tcp_hdr(&b, OTE_STREAM_REF_ACK, 0, 7, 0, 65536);             flush("tcp_hdr", "ref_ack", &b);
    tcp_hdr(&b, OTE_STREAM_REF_ACK, OTE_ERR_ACCESS, 8, 0, 0);    flush("tcp_hdr", "ref_ack_err", &b);
    tcp_hdr(&b, OTE_STREAM_PROBE, 0, 9, 0, 16);                  flush("tcp_hdr", "probe", &b);
    tcp_hdr(&b, OTE_STREAM_PROBE_ACK, 0, 9, 0x1234, 0);          flush("tcp_hdr", "probe_ack", &b);
}

static void gen_ctl_hdr(void)
{
    ote_buf_t b = {0};

    ctl_hdr(&b, OTE_CTL_GET_DESC, 0, 1);                      flush("ctl_hdr", "get_desc", &b);
    ctl_hdr(&b, OTE_CTL_DESC, 4, 1);
    ote_buf_put_u32(&b, (uint32_t)OTE_ERR_AUTH);              flush("ctl_hdr", "desc_auth", &b);
    ctl_hdr(&b, OTE_CTL_NOTIFY, 30, 2);                       flush("ctl_hdr", "notify", &b);
    ctl_hdr(&b, OTE_CTL_NOTIFY_ACK, 4, 2);
    ote_buf_put_u32(&b, (uint32_t)OTE_ERR_BUSY);              flush("ctl_hdr", "notify_ack", &b);
    ctl_hdr(&b, OTE_CTL_AUTH_HELLO, 32, 3);                   flush("ctl_hdr", "auth_hello", &b);
    ctl_hdr(&b, OTE_CTL_AUTH_PROOF, 64, 3);                   flush("ctl_hdr", "auth_proof", &b);
    ctl_hdr(&b, OTE_CTL_AUTH_DONE, 4, 4);
    ote_buf_put_u32(&b, 0);                                   flush("ctl_hdr", "auth_done", &b);
    ctl_hdr(&b, OTE_CTL_STAGE, 19, 5);                        flush("ctl_hdr", "stage", &b);
}

static void gen_ctl_notify(void)
{
    static uint8_t big[OTE_NOTIFY_MAX];
    const struct { const char *name, *from; size_t len; } n[] = {
        {"empty", "127.0.0.1:1234", 0},
        {"small", "10.1.2.3:40000", 17},
        {"max", "a-very-long-segment-name-that-is-still-fine:65535", OTE_NOTIFY_MAX},
    };

    memset(big, 'x', sizeof(big));
    for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
        ote_ctl_notify_t m = {.sender_key = 0x1234 + i, .target_instance = 0x5678 + i,
                              .seq = i + 1, .length = n[i].len, .data = big};
        ote_buf_t b = {0};

        snprintf(m.from, sizeof(m.from), "%s", n[i].from);
        flush_encoded("ctl_notify", n[i].name, &b, ote_ctl_notify_encode(&m, &b));
    }
    /* NOTIFY_BATCH frames: one, several, the most notifications, the most bytes. */
    {
        static ote_ctl_notify_batch_t m;
        const struct { const char *name; size_t count, len; } f[] = {
            {"batch_one", 1, 5},
            {"batch_three", 3, 17},
            {"batch_max_count", OTE_CTL_NOTIFY_BATCH_MAX, 0},
            {"batch_max_bytes", 15, OTE_NOTIFY_MAX},
        };

        for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
            ote_buf_t b = {0};

            m = (ote_ctl_notify_batch_t){.sender_key = 0xabc + i, .target_instance = 0xdef,
                                         .count = f[i].count};
            snprintf(m.from, sizeof(m.from), "10.0.0.%zu:7000", i + 1);
            for (size_t k = 0; k < f[i].count; k++)
                m.items[k] = (ote_ctl_notify_item_t){.seq = 100 + 3 * k, .length = f[i].len,
                                                     .data = big};
            flush_encoded("ctl_notify", f[i].name, &b, ote_ctl_notify_batch_encode(&m, &b));
        }
    }
}

/* PUTBACK requests and answers; the first byte picks the decoder (0 request, 1 answer). */
static void gen_ctl_putback(void)
{
    ote_ctl_putback_t m = {.initiator = 0x1234, .target = FUZZ_INSTANCE, .id = 7,
                           .remote = FUZZ_RW + 100, .local = 0x7f0000001000ull,
                           .length = 4096, .name = "127.0.0.1:40000"};
    ote_buf_t b = {0};

    flush_encoded("ctl_putback", "read", &b, ote_ctl_putback_encode(&m, pick(&b, 0)));
    m.length = OTE_CTL_PUTBACK_MAX_BYTES;
    flush_encoded("ctl_putback", "read_max", &b, ote_ctl_putback_encode(&m, pick(&b, 0)));
    flush_encoded("ctl_putback", "ack_ok", &b, ote_ctl_putback_ack_encode(OTE_OK, 7, pick(&b, 1)));
    flush_encoded("ctl_putback", "ack_bounds", &b,
                  ote_ctl_putback_ack_encode(OTE_ERR_OUT_OF_BOUNDS, 7, pick(&b, 1)));
}

/* FILE_IO requests and answers; the first byte picks the decoder (0 request, 1 answer). */
static void gen_ctl_file_io(void)
{
    static uint8_t data[4096];
    ote_ctl_file_io_t m = {.op = OTE_CTL_FILE_IO_READ, .initiator = 0x1234,
                           .target = FUZZ_INSTANCE, .file_id = 0x1000, .offset = 1u << 20,
                           .length = 4096};
    ote_buf_t b = {0};

    memset(data, 0x5a, sizeof(data));
    flush_encoded("ctl_file_io", "read", &b, ote_ctl_file_io_encode(&m, pick(&b, 0)));
    m.op   = OTE_CTL_FILE_IO_WRITE;
    m.data = data;
    flush_encoded("ctl_file_io", "write", &b, ote_ctl_file_io_encode(&m, pick(&b, 0)));
    m.rails = true;
    m.data  = NULL;
    m.local = 0x7f0000001003ull;
    snprintf(m.name, sizeof(m.name), "127.0.0.1:45678");
    flush_encoded("ctl_file_io", "write_rails", &b, ote_ctl_file_io_encode(&m, pick(&b, 0)));
    m.op = OTE_CTL_FILE_IO_READ;
    flush_encoded("ctl_file_io", "read_rails", &b, ote_ctl_file_io_encode(&m, pick(&b, 0)));
    flush_encoded("ctl_file_io", "ack_rails_short", &b,
                  ote_ctl_file_io_rails_ack_encode(OTE_ERR_OUT_OF_BOUNDS, 100, pick(&b, 1)));
    flush_encoded("ctl_file_io", "ack_read", &b,
                  ote_ctl_file_io_ack_encode(OTE_OK, data, sizeof(data), pick(&b, 1)));
    flush_encoded("ctl_file_io", "ack_short", &b,
                  ote_ctl_file_io_ack_encode(OTE_ERR_OUT_OF_BOUNDS, data, 100, pick(&b, 1)));
    flush_encoded("ctl_file_io", "ack_access", &b,
                  ote_ctl_file_io_ack_encode(OTE_ERR_ACCESS, NULL, 0, pick(&b, 1)));
}

/* STAGE requests and answers; the first byte picks the decoder (0 request, 1 answer). */
static void gen_ctl_stage(void)
{
    const uint64_t chunks[3] = {FUZZ_RW, FUZZ_RW + 4096, FUZZ_RW + 8192};
    ote_ctl_stage_t m = {.initiator = 0x1234, .target = FUZZ_INSTANCE};
    ote_buf_t b = {0};

    m.op    = OTE_CTL_STAGE_PIN;
    m.count = 3;
    flush_encoded("ctl_stage", "pin", &b, ote_ctl_stage_encode(&m, pick(&b, 0)));
    m.op  = OTE_CTL_STAGE_DELEGATE;
    m.dir = OTE_CTL_STAGE_TO_GPU;
    for (size_t i = 0; i < 3; i++) {
        m.e[i].chunk  = chunks[i];
        m.e[i].gpu    = FUZZ_BASE + 0x100000 + i * 4096;
        m.e[i].length = 4096;
    }
    flush_encoded("ctl_stage", "delegate_to_gpu", &b, ote_ctl_stage_encode(&m, pick(&b, 0)));
    m.dir   = OTE_CTL_STAGE_FROM_GPU;
    m.count = 1;
    flush_encoded("ctl_stage", "delegate_from_gpu", &b, ote_ctl_stage_encode(&m, pick(&b, 0)));
    m.op    = OTE_CTL_STAGE_UNPIN;
    m.count = 3;
    flush_encoded("ctl_stage", "unpin", &b, ote_ctl_stage_encode(&m, pick(&b, 0)));
    flush_encoded("ctl_stage", "ack_pin", &b,
                  ote_ctl_stage_ack_encode(OTE_OK, 4096, chunks, 3, pick(&b, 1)));
    flush_encoded("ctl_stage", "ack_busy", &b,
                  ote_ctl_stage_ack_encode(OTE_ERR_BUSY, 0, NULL, 0, pick(&b, 1)));
    flush_encoded("ctl_stage", "ack_access", &b,
                  ote_ctl_stage_ack_encode(OTE_ERR_ACCESS, 0, NULL, 0, pick(&b, 1)));
}

/* A descriptor by hand, with transports, memory domains and rkeys. */
static void gen_desc(void)
{
    ote_buf_t b = {0};
    uint8_t addr[7] = {4, 0x1f, 0x90, 127, 0, 0, 1};
    /* A tcp iface on eth0 listening on every address: IPv4 and IPv6 entries. */
    uint8_t addrs[7 + 19] = {4, 0x1f, 0x91, 192, 0, 2, 2, 6, 0x1f, 0x91, 0xfd, 0, 0, 0, 0, 0,
                             0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

    /* Variant 3: an engine whose network links are all down: no device, two transports run. */
    for (int variant = 0; variant < 4; variant++) {
        uint32_t regions = variant == 0 || variant == 3 ? 0 : variant == 1 ? 2 : 5;
        static const char *const runs[] = {"tcp", "uct_rc_mlx5", "cma"};

        ote_buf_put_u32(&b, OTE_DESC_MAGIC);
        ote_buf_put_u16(&b, OTE_DESC_VERSION);
        ote_buf_put_u16(&b, 0);
        ote_buf_put_u64(&b, FUZZ_INSTANCE + (uint64_t)variant);
        ote_buf_put_str8(&b, "127.0.0.1:4000");
        ote_buf_put_str8(&b, "host-a");
        ote_buf_put_str8(&b, "127.0.0.1:4000");
        ote_buf_put_u16(&b, variant == 3 ? 0 : variant == 0 ? 1 : 2);
        if (variant == 2) {
            ote_buf_put_str8(&b, "tcp");
            ote_buf_put_str8(&b, "eth0");
            ote_buf_put_u16(&b, sizeof(addrs));
            ote_buf_put(&b, addrs, sizeof(addrs));
        } else if (variant != 3) {
            ote_buf_put_str8(&b, "tcp");
            ote_buf_put_str8(&b, "lo");
            ote_buf_put_u16(&b, sizeof(addr));
            ote_buf_put(&b, addr, sizeof(addr));
        }
        if (variant == 1 || variant == 2) {
            ote_buf_put_str8(&b, "uct_rc_mlx5");
            ote_buf_put_str8(&b, "mlx5_0:1");
            ote_buf_put_u16(&b, 16);
            ote_buf_put(&b, "0123456789abcdef", 16);
        }
        ote_buf_put_u16(&b, variant == 0 ? 0 : 2);
        if (variant != 0) {
            ote_buf_put_str8(&b, "ib/mlx5_0");
            ote_buf_put_str8(&b, "cuda_ipc");
        }
        ote_buf_put_u32(&b, regions);
        for (uint32_t r = 0; r < regions; r++) {
            ote_buf_put_u64(&b, FUZZ_RW + r * 0x10000ull);
            ote_buf_put_u64(&b, r == 3 ? 0x40000 : 0x8000);
            ote_buf_put_u32(&b, r % 4);
            ote_buf_put_str8(&b, r % 2 ? "cuda:0" : "cpu:0");
            ote_buf_put_u8(&b, r % 3);
            for (uint32_t k = 0; k < r % 3; k++) {
                ote_buf_put_u8(&b, (uint8_t)k);
                ote_buf_put_u16(&b, 8);
                ote_buf_put_u64(&b, 0xabcdef0000ull + k);
            }
        }
        /* Exported files: none, one, a directory's two. */
        ote_buf_put_u32(&b, (uint32_t)(variant % 3));
        for (int x = 0; x < variant % 3; x++) {
            ote_buf_put_str8(&b, variant == 1 ? "kv" : x == 0 ? "dir/f1" : "dir/f2");
            ote_buf_put_u64(&b, 0x1000 + (uint64_t)x);
            ote_buf_put_u64(&b, (1ull << 30) + (uint64_t)x);
            ote_buf_put_u8(&b, (uint8_t)(1 + x));
        }
        /* The transports it runs: 1, 2, 3, and 2 with no device listed. */
        ote_buf_put_u16(&b, (uint16_t)(variant == 3 ? 2 : variant + 1));
        for (int t = 0; t < (variant == 3 ? 2 : variant + 1); t++)
            ote_buf_put_str8(&b, runs[t]);
        {
            char name[16];

            snprintf(name, sizeof(name), "desc%d", variant);
            flush("desc", name, &b);
        }
    }
}

static void gen_auth(void)
{
    uint8_t nonce[64];
    ote_buf_t b = {0};

    memset(nonce, 0x5a, sizeof(nonce));
    /* target, control framing: AUTH_HELLO | AUTH_PROOF, in two equal halves */
    ote_buf_put_u8(&b, 0);
    ctl_hdr(&b, OTE_CTL_AUTH_HELLO, 32, 1);
    ote_buf_put(&b, nonce, 32);
    ctl_hdr(&b, OTE_CTL_AUTH_PROOF, 32, 2);
    ote_buf_put(&b, nonce, 32);
    flush("auth", "target_ctl", &b);
    /* target, tcp framing */
    ote_buf_put_u8(&b, 2);
    tcp_hdr(&b, OTE_STREAM_AUTH_HELLO, 0, 1, 0, 32);
    ote_buf_put(&b, nonce, 32);
    tcp_hdr(&b, OTE_STREAM_AUTH_PROOF, 0, 2, 0, 32);
    ote_buf_put(&b, nonce, 32);
    flush("auth", "target_tcp", &b);
    /* initiator: a target's proof */
    ote_buf_put_u8(&b, 1);
    ote_buf_put(&b, nonce, 64);
    flush("auth", "initiator_raw", &b);
    ote_buf_put_u8(&b, 3);
    tcp_hdr(&b, OTE_STREAM_AUTH_PROOF, 0, 1, 0, 64);
    ote_buf_put(&b, nonce, 64);
    flush("auth", "initiator_tcp", &b);
}

/* A WRITEV or READV_REQ header (id) and its table of n (addr, length) entries. */
static void vector(ote_buf_t *b, uint8_t type, uint64_t id, const uint64_t (*e)[2], size_t n)
{
    uint8_t t[OTE_STREAM_WRITEV_ENTRY_LEN];
    uint64_t total = 0;

    for (size_t i = 0; i < n; i++)
        total += e[i][1];
    tcp_hdr(b, type, 0, id, n, total);
    for (size_t i = 0; i < n; i++) {
        ote_stream_vec_entry_t x = {.addr = e[i][0], .length = e[i][1]};

        ote_stream_vec_entry_encode(&x, t);
        ote_buf_put(b, t, sizeof(t));
    }
}

/* A WRITEV without its payload. */
static void writev(ote_buf_t *b, uint64_t id, const uint64_t (*e)[2], size_t n)
{
    vector(b, OTE_STREAM_WRITEV, id, e, n);
}

static void readv_req(ote_buf_t *b, uint64_t id, const uint64_t (*e)[2], size_t n)
{
    vector(b, OTE_STREAM_READV_REQ, id, e, n);
}

/* A tcp_conn input: the iface (bit 0: keyed, bit 1: cma), then HELLO as request 1. */
static void open_hello(ote_buf_t *b, uint8_t iface)
{
    ote_buf_put_u8(b, iface);
    tcp_hdr(b, OTE_STREAM_HELLO, 0, 1, FUZZ_INSTANCE, 0);
}

/* A keyed handshake with a proof that is not the key's, then HELLO (requests 1 to 3). */
static void keyed_hello(ote_buf_t *b, const uint8_t *payload)
{
    tcp_hdr(b, OTE_STREAM_AUTH_HELLO, 0, 1, 0, 32);
    ote_buf_put(b, payload, 32);
    tcp_hdr(b, OTE_STREAM_AUTH_PROOF, 0, 2, 0, 32);
    ote_buf_put(b, payload, 32);
    tcp_hdr(b, OTE_STREAM_HELLO, 0, 3, FUZZ_INSTANCE, 0);
}

static void gen_tcp_conn(void)
{
    static uint8_t payload[4096];
    ote_buf_t b = {0};

    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7);
    /* Without a key: HELLO, WRITE, READ, refused accesses, then more traffic. */
    open_hello(&b, 0);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 2, FUZZ_RW, 256);
    ote_buf_put(&b, payload, 256);
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 3, FUZZ_RW, 512);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 4, FUZZ_RO, 64);               /* read-only      */
    ote_buf_put(&b, payload, 64);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 5, FUZZ_RW + 16384 - 32, 64);  /* crosses the end */
    ote_buf_put(&b, payload, 64);
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 6, FUZZ_RW - 64, 64);       /* before          */
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 7, FUZZ_RO, 4096);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 8, FUZZ_RW + 4096, 4096);
    ote_buf_put(&b, payload, 4096);
    flush("tcp_conn", "open_session", &b);

    /* WRITEVs: three entries, one of them refused, one with a truncated payload. */
    open_hello(&b, 0);
    writev(&b, 2, (const uint64_t[][2]){{FUZZ_RW, 100}, {FUZZ_RW + 8192, 4096}, {FUZZ_RW + 200, 1}},
           3);
    ote_buf_put(&b, payload, 4096);
    ote_buf_put(&b, payload, 101);
    writev(&b, 3, (const uint64_t[][2]){{FUZZ_RW, 64}, {FUZZ_RO, 64}}, 2);
    ote_buf_put(&b, payload, 128);
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 4, FUZZ_RW, 512);
    writev(&b, 5, (const uint64_t[][2]){{FUZZ_RW + 4096, 2048}, {FUZZ_RW, 2048}}, 2);
    ote_buf_put(&b, payload, 3000);
    flush("tcp_conn", "open_writev", &b);

    /* READV_REQs: allowed, one refused entry, one over the limits. */
    open_hello(&b, 0);
    readv_req(&b, 2, (const uint64_t[][2]){{FUZZ_RW, 100}, {FUZZ_RO + 8, 64}, {FUZZ_RW + 8192, 4096}},
              3);
    readv_req(&b, 3, (const uint64_t[][2]){{FUZZ_RW, 64}, {FUZZ_RW + 16384 - 8, 64}}, 2);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 4, FUZZ_RW, 64);
    ote_buf_put(&b, payload, 64);
    readv_req(&b, 5, (const uint64_t[][2]){{FUZZ_RW, 65536}, {FUZZ_RW, 1}}, 2);
    flush("tcp_conn", "open_readv", &b);

    ote_buf_put_u8(&b, 0);
    tcp_hdr(&b, OTE_STREAM_HELLO, 0, 1, FUZZ_INSTANCE ^ 1, 0);      /* stale instance */
    flush("tcp_conn", "open_wrong_instance", &b);

    open_hello(&b, 0);
    for (int i = 0; i < 64; i++)
        tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 10 + (uint64_t)i, FUZZ_RW + 64 * (uint64_t)i, 64);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 99, FUZZ_RW, 1000);            /* truncated payload */
    ote_buf_put(&b, payload, 100);
    flush("tcp_conn", "open_pipelined", &b);

    ote_buf_put_u8(&b, 0);
    tcp_hdr(&b, OTE_STREAM_AUTH_HELLO, 0, 1, 0, 32);                /* key vs no key */
    ote_buf_put(&b, payload, 32);
    flush("tcp_conn", "open_auth_hello", &b);

    /* With a key: the handshake, a bad proof; and a HELLO without it. */
    ote_buf_put_u8(&b, 1);
    keyed_hello(&b, payload);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 4, FUZZ_RW, 64);
    ote_buf_put(&b, payload, 64);
    flush("tcp_conn", "keyed_bad_proof", &b);

    open_hello(&b, 1);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 2, FUZZ_RW, 64);
    ote_buf_put(&b, payload, 64);
    flush("tcp_conn", "keyed_no_auth", &b);

    /*
     * The cma iface (first byte bit 1): by-reference requests whose trailer
     * names the initiator's buffer (the fuzzer's forked copy of itself).
     */
    open_hello(&b, 2);
    tcp_hdr(&b, OTE_STREAM_PROBE, 0, 2, 0, 16);
    ote_buf_put_u64(&b, FUZZ_RO);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 3, FUZZ_RW, 256);
    ote_buf_put_u64(&b, FUZZ_RO);
    tcp_hdr(&b, OTE_STREAM_GET_REF, 0, 4, FUZZ_RW, 512);
    ote_buf_put_u64(&b, FUZZ_RW);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 5, FUZZ_RO, 64);               /* read-only      */
    ote_buf_put_u64(&b, FUZZ_RW);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 6, FUZZ_RW + 16384 - 32, 64);  /* crosses the end */
    ote_buf_put_u64(&b, FUZZ_RW);
    tcp_hdr(&b, OTE_STREAM_GET_REF, 0, 7, FUZZ_RW - 64, 64);          /* before          */
    ote_buf_put_u64(&b, FUZZ_RW);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 8, FUZZ_RW, 64);               /* unmapped source */
    ote_buf_put_u64(&b, 0x10);
    tcp_hdr(&b, OTE_STREAM_GET_REF, 0, 9, FUZZ_RO, 4096);
    ote_buf_put_u64(&b, FUZZ_RW);
    flush("tcp_conn", "cma_session", &b);

    /* Small WRITEs and READs by value among by-reference requests; a larger one closes. */
    open_hello(&b, 2);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 2, FUZZ_RW, 64);                 /* by value        */
    ote_buf_put(&b, payload, 64);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 3, FUZZ_RW, 256);
    ote_buf_put_u64(&b, FUZZ_RO);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 4, FUZZ_RW + 8, 8);              /* after the copy  */
    ote_buf_put(&b, payload, 8);
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 5, FUZZ_RO, 8);                  /* read-only       */
    ote_buf_put(&b, payload, 8);
    tcp_hdr(&b, OTE_STREAM_READ_REQ, 0, 6, FUZZ_RO, 16);              /* read by value   */
    tcp_hdr(&b, OTE_STREAM_WRITE, 0, 7, FUZZ_RW, OTE_STREAM_INLINE_MAX + 1); /* too large   */
    flush("tcp_conn", "cma_stream_write", &b);

    ote_buf_put_u8(&b, 2);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 1, FUZZ_RW, 64);               /* before HELLO    */
    ote_buf_put_u64(&b, FUZZ_RW);
    flush("tcp_conn", "cma_before_hello", &b);

    ote_buf_put_u8(&b, 3);
    keyed_hello(&b, payload);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 4, FUZZ_RW, 64);
    ote_buf_put_u64(&b, FUZZ_RW);
    flush("tcp_conn", "cma_keyed_bad_proof", &b);

    open_hello(&b, 0);
    tcp_hdr(&b, OTE_STREAM_PUT_REF, 0, 2, FUZZ_RW, 64);               /* tcp: refused    */
    ote_buf_put_u64(&b, FUZZ_RW);
    flush("tcp_conn", "open_ref_on_tcp", &b);
}

/* Store bytes for fuzz_meta: the first byte picks the decoder. */
/* shm_map: u8 fd kind, u64 want, u64 want_len, MAP_ACK header, trailer. */
static void shm_map_seed(const char *name, uint8_t kind, uint64_t want, uint64_t want_len,
                         int32_t status, uint64_t addr, uint64_t length, uint64_t grant,
                         uint64_t flags, size_t trailer_len)
{
    ote_buf_t b = {0};
    uint8_t w[17], t[16];

    w[0] = kind;
    ote_put_u64(w + 1, want);
    ote_put_u64(w + 9, want_len);
    ote_buf_put(&b, w, sizeof(w));
    tcp_hdr(&b, OTE_STREAM_MAP_ACK, status, 1, addr, length);
    ote_put_u64(t, grant);
    ote_put_u64(t + 8, flags);
    ote_buf_put(&b, t, trailer_len);
    flush("shm_map", name, &b);
}

static void gen_shm_map(void)
{
    const uint64_t base = 0x7f0000000000ull;

    shm_map_seed("rw_whole", 0, base, 65536, OTE_OK, base, 65536, 1, 1, 16);
    shm_map_seed("rw_inside", 0, base + 100, 50, OTE_OK, base, 4096, 7, 1, 16);
    shm_map_seed("ro_grant", 1, base, 4096, OTE_OK, base, 65536, 2, 0, 16);
    shm_map_seed("ro_fd_claims_writable", 1, base, 4096, OTE_OK, base, 65536, 2, 1, 16);
    shm_map_seed("unsealed", 2, base, 4096, OTE_OK, base, 65536, 3, 0, 16);
    shm_map_seed("longer_than_file", 3, base, 4096, OTE_OK, base, 65536, 4, 0, 16);
    shm_map_seed("pipe", 4, base, 8, OTE_OK, base, 4096, 5, 0, 16);
    shm_map_seed("outside_region", 0, base + 65536, 8, OTE_OK, base, 65536, 6, 1, 16);
    shm_map_seed("wrapping_want", 0, UINT64_MAX - 4, 8, OTE_OK, base, 65536, 6, 1, 16);
    shm_map_seed("grant_zero", 0, base, 8, OTE_OK, base, 65536, 0, 1, 16);
    shm_map_seed("unknown_flags", 0, base, 8, OTE_OK, base, 65536, 9, 3, 16);
    shm_map_seed("short_trailer", 0, base, 8, OTE_OK, base, 65536, 9, 1, 8);
}

static void meta_put(const char *name, uint8_t kind, const void *p, size_t len)
{
    ote_buf_t b = {0};

    ote_buf_put_u8(&b, kind);
    ote_buf_put(&b, p, len);
    flush("meta", name, &b);
}

static void gen_meta(void)
{
    static const char *const etcd[][3] = {
        {"\x02", "range", "{\"header\":{\"revision\":\"2\"},\"kvs\":[{\"key\":\"azE=\","
                          "\"create_revision\":\"2\",\"value\":\"djE=\","
                          "\"lease\":\"5007618237595673351\"}],\"count\":\"1\"}"},
        {"\x02", "range_none", "{\"header\":{\"revision\":\"2\"}}"},
        {"\x02", "range_rev", "{\"header\":{\"revision\":\"9\"},\"kvs\":[{\"key\":\"azE=\","
                              "\"create_revision\":\"2\",\"mod_revision\":\"9\","
                              "\"version\":\"3\",\"value\":\"djE=\",\"lease\":\"7\"}],"
                              "\"count\":\"1\"}"},
        {"\x03", "grant", "{\"header\":{},\"ID\":\"5007618237595673349\",\"TTL\":\"5\"}"},
        {"\x03", "keepalive", "{\"result\":{\"header\":{},\"ID\":\"12\",\"TTL\":\"9\"}}"},
        {"\x03", "keepalive_gone", "{\"result\":{\"header\":{},\"ID\":\"12345\"}}"},
        {"\x03", "error", "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}"},
        {"\x04", "txn_ok", "{\"header\":{},\"succeeded\":true,\"responses\":[{\"response_put\":"
                          "{\"header\":{\"revision\":\"2\"}}}]}"},
        {"\x04", "txn_held", "{\"header\":{},\"responses\":[{\"response_range\":{\"kvs\":"
                            "[{\"key\":\"azE=\",\"value\":\"djE=\",\"lease\":\"7\"}],"
                            "\"count\":\"1\"}}]}"},
        {"\x05", "base64", "b3JiaXR0ZQ=="},
    };
    ote_desc_t *d = calloc(1, sizeof(*d));
    ote_buf_t desc = {0}, rec = {0};
    ote_auth_params_t cfg = {0};
    ote_auth_t *auth;

    for (size_t i = 0; i < sizeof(etcd) / sizeof(etcd[0]); i++)
        meta_put(etcd[i][1], (uint8_t)etcd[i][0][0], etcd[i][2], strlen(etcd[i][2]));
    d->instance_id = 0x1122334455667788ull;
    snprintf(d->name, sizeof(d->name), "decode-0");
    snprintf(d->host_id, sizeof(d->host_id), "host-a");
    snprintf(d->ctl_addr, sizeof(d->ctl_addr), "127.0.0.1:40123");
    ote_desc_encode(d, NULL, &desc);
    ote_meta_record_encode(NULL, "decode-0", desc.data, desc.len, &rec);
    meta_put("record", 1, rec.data, rec.len);
    meta_put("record_unsigned_keyed", 0, rec.data, rec.len);
    free(rec.data);
    memset(&rec, 0, sizeof(rec));
    if (ote_auth_create(&cfg, &auth) == OTE_OK) {
        if (ote_auth_supported() && ote_auth_set_key(auth, "fuzz-key", 8) == OTE_OK &&
            ote_meta_record_encode(auth, "decode-0", desc.data, desc.len, &rec) == OTE_OK) {
            meta_put("record_signed", 0, rec.data, rec.len);
            meta_put("record_signed_unkeyed", 1, rec.data, rec.len);
        }
        ote_auth_destroy(auth);
    }
    free(rec.data);
    free(desc.data);
    free(d);
}

int main(int argc, char **argv)
{
    root = argc > 1 ? argv[1] : "test/fuzz/corpus";
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    gen_tcp_hdr();
    gen_ctl_hdr();
    gen_ctl_notify();
    gen_ctl_stage();
    gen_ctl_putback();
    gen_ctl_file_io();
    gen_desc();
    gen_auth();
    gen_tcp_conn();
    gen_meta();
    gen_shm_map();
    return 0;
}
