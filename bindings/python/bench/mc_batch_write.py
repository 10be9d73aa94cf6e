#!/usr/bin/env python3
"""batch_transfer_sync_write of COUNT blocks of SIZE bytes through a Mooncake-style
TransferEngine, target in a second process on loopback (tcp, P2PHANDSHAKE).

    python3 mc_batch_write.py --impl orbitte|mooncake [--count 2048] [--size 16384]
        [--iters 20] [--warmup 3]

--impl orbitte uses orbitte.mooncake; --impl mooncake imports mooncake.engine
(Mooncake's wheel, wherever PYTHONPATH finds it). Prints one JSON line: the
median, min and max GB/s (10^9 bytes per second) over the timed calls.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def engine_class(impl):
    if impl == "orbitte":
        from orbitte.mooncake import TransferEngine
    else:
        from mooncake.engine import TransferEngine
    return TransferEngine


def target(args):
    te = engine_class(args.impl)()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        return 1
    addr = te.allocate_managed_buffer(args.count * args.size)
    print(json.dumps({"name": f"127.0.0.1:{te.get_rpc_port()}", "addr": addr}), flush=True)
    sys.stdin.read()  # until the initiator closes it
    return 0


def initiator(args):
    p = subprocess.Popen([sys.executable, __file__, "--role", "target", "--impl", args.impl,
                          "--count", str(args.count), "--size", str(args.size)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(p.stdout.readline())
        te = engine_class(args.impl)()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        total = args.count * args.size
        src = te.allocate_managed_buffer(total)
        te.write_bytes_to_buffer(src, bytes(range(256)) * (total // 256), total // 256 * 256)
        srcs = [src + i * args.size for i in range(args.count)]
        dsts = [info["addr"] + i * args.size for i in range(args.count)]
        lens = [args.size] * args.count
        rates = []
        for i in range(args.warmup + args.iters):
            t0 = time.perf_counter()
            ret = te.batch_transfer_sync_write(info["name"], srcs, dsts, lens)
            dt = time.perf_counter() - t0
            assert ret == 0, "batch_transfer_sync_write failed"
            if i >= args.warmup:
                rates.append(total / dt / 1e9)
        print(json.dumps({"impl": args.impl, "count": args.count, "size": args.size,
                          "median_GBps": round(statistics.median(rates), 3),
                          "min_GBps": round(min(rates), 3), "max_GBps": round(max(rates), 3)}),
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
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
