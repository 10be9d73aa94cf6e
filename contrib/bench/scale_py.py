#!/usr/bin/env python3
"""The request-count curve of contrib/bench/scale.sh through Python.

    scale_py.py --scale PATH [--counts 1,16,...] [--sizes 64,4096] [--reps R]

PATH is the built ote_scale, whose `serve` mode is the target (one engine,
one region, on loopback). For every size and count: one batch of that many
WRITEs of that size, through

  orbitte           Batch.submit_arrays with numpy uint64 arrays, then
                    Batch.wait; bytes and completed from Batch.telemetry();
  orbitte.mooncake  batch_transfer_async_write with Python lists, then
                    get_batch_transfer_status; bytes from the engine's
                    ote_transfer_bytes_total before and after.

Prints CSV rows "curve,series,x,metric,value" as ote_scale does (curve
"python"): requests, completed, bytes, submit_ns_per_req,
complete_ns_per_req, req_per_s, peak_bytes_per_req (VmHWM over the batches
less VmRSS before them, per request). Each figure is the median of --reps
batches. Requests beyond 64 MiB wrap around the regions. Needs numpy and
the orbitte package on PYTHONPATH.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("OTE_TLS", "tcp")
os.environ.setdefault("OTE_LOG_LEVEL", "error")
os.environ.setdefault("OTE_MAX_INFLIGHT_TASKS", "4194304")
os.environ.setdefault("OTE_MAX_INFLIGHT_BYTES", "64g")

import numpy as np  # noqa: E402
import orbitte  # noqa: E402
from orbitte.mooncake import TransferEngine  # noqa: E402

CAP = 64 << 20


def row(series, x, metric, value):
    print(f"python,{series},{x},{metric},{value:.12g}", flush=True)


def kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return -1


def peak_reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def written(engine):
    return sum(v for name, labels, v in engine.stats()
               if name == "ote_transfer_bytes_total" and labels.get("op") == "write")


def points(series, count, size, reps, run):
    """run() -> (submit s, complete s, requests, completed, bytes), reps times."""
    run()  # untimed: connections, pools
    peak = peak_reset()
    rss0 = kib("VmRSS:")
    got = [run() for _ in range(reps)]
    hwm = kib("VmHWM:")
    sub = statistics.median(g[0] for g in got)
    comp = statistics.median(g[1] for g in got)
    _, _, requests, completed, nbytes = got[-1]
    row(series, count, "requests", requests)
    row(series, count, "completed", completed)
    row(series, count, "bytes", nbytes)
    row(series, count, "submit_ns_per_req", sub * 1e9 / count)
    row(series, count, "complete_ns_per_req", comp * 1e9 / count)
    row(series, count, "req_per_s", count / comp)
    if peak and rss0 > 0 and hwm > 0:
        row(series, count, "peak_bytes_per_req", max(0, hwm - rss0) * 1024 / count)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", required=True)
    ap.add_argument("--counts", default="1,16,256,4096,65536,1048576")
    ap.add_argument("--sizes", default="64,4096")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    cap = min(CAP, max(counts) * max(sizes))
    cap = max(cap, max(sizes))
    target = subprocess.Popen([args.scale, "serve", "1", "1", str(cap)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        name = addr = None
        for line in target.stdout:
            if line.startswith("engine "):
                _, name, a = line.split()
                addr = int(a)
            elif line.strip() == "ready":
                break
        if name is None:
            sys.exit("scale_py.py: the target did not start")
        eng = orbitte.Engine(listen_addr="127.0.0.1:0")
        mem = eng.alloc(cap)
        seg = eng.open(name)
        te = TransferEngine()
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
            sys.exit("scale_py.py: orbitte.mooncake initialize failed")
        mc_buf = te.allocate_managed_buffer(cap)
        for size in sizes:
            slots = cap // size
            for count in counts:
                offs = (np.arange(count, dtype=np.uint64) % np.uint64(slots)) * np.uint64(size)
                la, ra = offs + np.uint64(mem.addr), offs + np.uint64(addr)
                lens = np.full(count, size, dtype=np.uint64)

                def run_arrays(n=count):
                    t0 = time.perf_counter()
                    b = eng.batch(n)
                    b.submit_arrays(seg, orbitte.WRITE, la, ra, lens)
                    t1 = time.perf_counter()
                    b.wait()
                    t2 = time.perf_counter()
                    tel = b.telemetry()
                    b.release()
                    return t1 - t0, t2 - t0, tel.requests, tel.completed, tel.bytes

                points(f"submit_arrays {size}B", count, size, args.reps, run_arrays)
                srcs = [mc_buf + int(o) for o in offs]
                dsts = [addr + int(o) for o in offs]
                lst = [size] * count
                mc_engine = te.get_engine()

                def run_mooncake(n=count):
                    before = written(mc_engine)
                    t0 = time.perf_counter()
                    bid = te.batch_transfer_async_write(name, srcs, dsts, lst)
                    t1 = time.perf_counter()
                    ok = bid != 0 and te.get_batch_transfer_status([bid]) == 0
                    t2 = time.perf_counter()
                    return t1 - t0, t2 - t0, n if bid else 0, n if ok else 0, \
                        written(mc_engine) - before

                points(f"mooncake async {size}B", count, size, args.reps, run_mooncake)
        seg.close()
        eng.close()
    finally:
        target.stdin.close()
        target.wait(timeout=30)
    if target.returncode != 0:
        sys.exit(f"scale_py.py: the target ended with status {target.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
