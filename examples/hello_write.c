/* Two engines in one process: one WRITE with a notification, every byte checked. */
#include <ote/ote.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN (1u << 20)

static void fail(const char *what, const char *why)
{
    fprintf(stderr, "hello_write: %s: %s\n", what, why);
    exit(1);
}

static void check(ote_status_t st, const char *what)
{
    if (st != OTE_OK)
        fail(what, ote_status_string(st));
}

int main(void)
{
    /* Both engines listen on loopback; with peer-to-peer metadata (no server)
     * a peer is found by the "host:port" of its listener. */
    ote_engine_params_t params = {.listen_addr = "127.0.0.1:0", .metadata = "p2p"};
    ote_engine_h target, initiator;
    char *src = malloc(LEN), *dst = calloc(1, LEN);

    if (src == NULL || dst == NULL)
        fail("malloc", "out of memory");
    for (size_t i = 0; i < LEN; i++)
        src[i] = (char)(i * 7 + 1);

    /* Target: register memory that peers may write. */
    ote_mem_desc_t dst_desc = {.addr = dst, .length = LEN, .access = OTE_ACCESS_REMOTE_WRITE};
    ote_mem_h dst_mem;
    check(ote_engine_create(&params, &target), "target engine");
    check(ote_mem_register(target, &dst_desc, 1, &dst_mem), "register dst");

    /* Initiator: register the source (local use), open the target by name. */
    ote_mem_desc_t src_desc = {.addr = src, .length = LEN};
    ote_mem_h src_mem;
    ote_segment_h peer;
    ote_region_info_t region;
    size_t nregions;
    check(ote_engine_create(&params, &initiator), "initiator engine");
    check(ote_mem_register(initiator, &src_desc, 1, &src_mem), "register src");
    check(ote_segment_open(initiator, ote_engine_name(target), &peer), "open segment");
    check(ote_segment_regions(peer, &region, 1, &nregions), "regions");
    if (nregions != 1 || region.length < LEN)
        fail("open segment", "the target publishes no region of LEN bytes");

    /* WRITE src into the target's region; the target is told "kv-ready" after. */
    ote_xfer_req_t req = {.op = OTE_OP_WRITE, .local_addr = src, .segment = peer,
                          .remote_addr = region.addr, .length = LEN};
    ote_batch_h batch;
    size_t first;
    ote_task_status_t task;
    ote_status_t notify;
    check(ote_batch_create(initiator, 1, &batch), "batch");
    check(ote_batch_submit_notify(batch, &req, 1, "kv-ready", 8, &first), "submit");
    check(ote_batch_wait(batch, 5000), "wait");
    check(ote_batch_task_status(batch, first, &task), "task status");
    if (task.state != OTE_TASK_COMPLETED)
        fail("write", ote_status_string(task.error));
    check(ote_batch_notify_status(batch, first, &notify), "notify status");
    check(notify, "notification");
    ote_batch_release(batch);

    /* The target holds the bytes, and the notification is queued for it. */
    ote_notif_t notif;
    size_t count;
    check(ote_notify_recv(target, &notif, 1, &count), "receive");
    if (task.transferred != LEN || memcmp(dst, src, LEN) != 0)
        fail("verify", "the destination bytes differ from the source");
    if (count != 1 || notif.length != 8 || memcmp(notif.data, "kv-ready", 8) != 0 ||
        strcmp(notif.from, ote_engine_name(initiator)) != 0)
        fail("receive", "no \"kv-ready\" from the initiator");
    printf("hello_write: %u bytes from %s to %s verified, notification \"%.*s\" received\n",
           LEN, notif.from, ote_engine_name(target), (int)notif.length, notif.data);

    check(ote_segment_close(peer), "close segment");
    check(ote_mem_deregister(initiator, src_mem), "deregister src");
    check(ote_mem_deregister(target, dst_mem), "deregister dst");
    ote_engine_destroy(initiator);
    ote_engine_destroy(target);
    free(src);
    free(dst);
    return 0;
}
