#!/usr/bin/env python3
"""batch_transfer_sync_write of COUNT blocks of SIZE bytes through a Mooncake-style
TransferEngine, target in a second process on loopback (tcp, P2PHANDSHAKE).

    python3 mc_batch_write.py --impl orbitte|mooncake [--count 2048] [--size 16384]
        [--iters 20] [--warmup 3] [--op write|read] [--scatter] [--threads T] [--depth D]

--impl orbitte uses orbitte.mooncake; --impl mooncake imports mooncake.engine
(Mooncake's wheel, wherever PYTHONPATH finds it). --op read calls
batch_transfer_sync_read instead; --scatter puts the blocks at shuffled
slots of buffers twice their footprint on both sides (the KV-cache pattern);
--threads T runs T threads, each with its own blocks, making the same calls
at the same time. --depth D (D > 1) keeps D calls in flight per thread, as
ote_perftest's -D: batch_transfer_async_write/read calls, each awaited in
turn with get_batch_transfer_status([id]) and followed by the next call
(the time of a call: from its submission to the return of its status).
Prints one JSON line: the median, min and max GB/s (10^9
bytes per second) over the timed calls of one thread, the aggregate GB/s of
all threads over the timed calls, and the p50 and p99 time of one call.
"""
import argparse
import json
import random
import statistics
import subprocess
import sys
import threading
import time


def engine_class(impl):
    if impl == "orbitte":
        from orbitte.mooncake import TransferEngine
    else:
        from mooncake.engine import TransferEngine
    return TransferEngine


def footprint(args):
    """Bytes of one side's buffer: a pool per thread, twice the blocks' bytes
    when they are scattered."""
    return args.count * args.size * (2 if args.scatter else 1) * args.threads


def block_offsets(args, thread, seed):
    pool = args.count * args.size * (2 if args.scatter else 1)
    slots = list(range(pool // args.size))
    if args.scatter:
        random.Random(seed * 1000 + thread).shuffle(slots)
    return [thread * pool + s * args.size for s in slots[:args.count]]


def target(args):
    te = engine_class(args.impl)()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        return 1
    addr = te.allocate_managed_buffer(footprint(args))
    print(json.dumps({"name": f"127.0.0.1:{te.get_rpc_port()}", "addr": addr}), flush=True)
    sys.stdin.read()  # until the initiator closes it
    return 0


def initiator(args):
    p = subprocess.Popen([sys.executable, __file__, "--role", "target", "--impl", args.impl,
                          "--count", str(args.count), "--size", str(args.size),
                          "--threads", str(args.threads)] + (["--scatter"] if args.scatter else []),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(p.stdout.readline())
        te = engine_class(args.impl)()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        total = args.count * args.size
        src = te.allocate_managed_buffer(footprint(args))
        te.write_bytes_to_buffer(src, bytes(range(256)) * (total // 256), total // 256 * 256)
        call = te.batch_transfer_sync_read if args.op == "read" else te.batch_transfer_sync_write
        rates = [[] for _ in range(args.threads)]
        times = [[] for _ in range(args.threads)]
        spans = [0.0] * args.threads
        failed = []
        ready = threading.Barrier(args.threads)

        def loop(t):
            srcs = [src + o for o in block_offsets(args, t, 1)]
            dsts = [info["addr"] + o for o in block_offsets(args, t, 2)]
            lens = [args.size] * args.count
            if args.depth > 1:
                start = async_loop(t, srcs, dsts, lens)
                if start is None:
                    return
                spans[t] = time.perf_counter() - start
                return
            for i in range(args.warmup + args.iters):
                if i == args.warmup:
                    ready.wait()
                    start = time.perf_counter()
                t0 = time.perf_counter()
                ret = call(info["name"], srcs, dsts, lens)
                dt = time.perf_counter() - t0
                if ret != 0:
                    failed.append(ret)
                    return
                if i >= args.warmup:
                    rates[t].append(total / dt / 1e9)
                    times[t].append(dt)
            spans[t] = time.perf_counter() - start

        def async_loop(t, srcs, dsts, lens):
            """--depth: args.depth async calls in flight; the start of the timed ones."""
            submit = te.batch_transfer_async_read if args.op == "read" else \
                te.batch_transfer_async_write
            n = args.warmup + args.iters
            ids, started = [], []
            posted = done = 0
            start = None
            while done < n:
                while posted < n and posted - done < args.depth:
                    if posted == args.warmup and start is None:
                        # the warm-up calls drain first, so that the timed ones start together
                        while done < posted:
                            if te.get_batch_transfer_status([ids[done]]) != 0:
                                failed.append(-1)
                                return None
                            done += 1
                        ready.wait()
                        start = time.perf_counter()
                    started.append(time.perf_counter())
                    bid = submit(info["name"], srcs, dsts, lens)
                    if bid == 0:
                        failed.append(0)
                        return None
                    ids.append(bid)
                    posted += 1
                if te.get_batch_transfer_status([ids[done]]) != 0:
                    failed.append(-1)
                    return None
                dt = time.perf_counter() - started[done]
                if done >= args.warmup:
                    rates[t].append(total / dt / 1e9)
                    times[t].append(dt)
                done += 1
            return start

        workers = [threading.Thread(target=loop, args=(t,)) for t in range(args.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not failed, f"batch_transfer_sync_{args.op} failed"
        per_call = sorted(dt for ts in times for dt in ts)
        aggregate = sum(total * args.iters / span for span in spans) / 1e9
        print(json.dumps({"impl": args.impl, "op": args.op, "count": args.count,
                          "size": args.size, "scatter": args.scatter, "threads": args.threads, "depth": args.depth,
                          "median_GBps": round(statistics.median(rates[0]), 3),
                          "min_GBps": round(min(rates[0]), 3),
                          "max_GBps": round(max(rates[0]), 3),
                          "aggregate_GBps": round(aggregate, 3),
                          "p50_us": round(per_call[len(per_call) // 2] * 1e6, 2),
                          "p99_us": round(per_call[int(len(per_call) * 0.99)] * 1e6, 2)}),
              flush=True)
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=["orbitte", "mooncake"], default="orbitte")
    ap.add_argument("--role", choices=["initiator", "target"], default="initiator")
    ap.add_argument("--count", type=int, default=2048)
    ap.add_argument("--size", type=int, default=16384)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--op", choices=["write", "read"], default="write")
    ap.add_argument("--scatter", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--depth", type=int, default=1)
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
