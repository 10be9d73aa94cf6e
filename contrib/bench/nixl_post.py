#!/usr/bin/env python3
"""Post time of one large prepped transfer through NIXL's Python API.

    python3 nixl_post.py [--descs N] [--size B] [--reps R] [--op WRITE|READ] [--profile]

Two agents in this process (the target's engine serves the transfers),
host memory: both sides prepped once as N blocks of B bytes at shuffled
slots (nothing merges), then R times: make_prepped_xfer(op, local, idx,
remote, idx) with numpy index arrays, transfer(), timed from before
make_prepped_xfer to the return of transfer() (the post: the data is not
waited for), then the transfer waited for and its handle released. Prints
one JSON line: the median, p10 and p90 post time in milliseconds, and the
make_prepped_xfer and transfer parts' medians. Runs on whatever `nixl`
imports (orbitte.nixl through its shim, or NIXL's wheel). The last
transfer's bytes are checked (exit 1 when wrong). --profile prints
cProfile's top entries of the posts instead.
"""
import argparse
import json
import random
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--descs", type=int, default=15000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--op", default="WRITE", choices=("WRITE", "READ"))
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    n, size = a.descs, a.size
    cfg = nixl_agent_config(backends=["UCX"])
    ini, tgt = nixl_agent("post-initiator", cfg), nixl_agent("post-target", cfg)
    src = np.zeros(2 * n * size, dtype=np.uint8)
    dst = np.zeros(2 * n * size, dtype=np.uint8)
    src[:] = np.arange(src.size, dtype=np.uint64).astype(np.uint8) ^ 0x5A
    ini.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM")
    tgt.register_memory([(dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")
    ini.add_remote_agent(tgt.get_agent_metadata())
    slots = list(range(2 * n))
    random.Random(1).shuffle(slots)
    sl = np.array(slots[:n], dtype=np.uint64)
    sbase, dbase = src.ctypes.data, dst.ctypes.data
    ls = np.stack([sbase + sl * size, np.full(n, size, np.uint64), np.zeros(n, np.uint64)], 1)
    rs = np.stack([dbase + sl * size, np.full(n, size, np.uint64), np.zeros(n, np.uint64)], 1)
    lh = ini.prep_xfer_dlist("NIXL_INIT_AGENT", ls, "DRAM")
    rh = ini.prep_xfer_dlist("post-target", rs, "DRAM")
    idx = np.arange(n, dtype=np.int64)
    if a.op == "READ":
        dst[:] = src[::-1]

    def one():
        t0 = time.perf_counter()
        h = ini.make_prepped_xfer(a.op, lh, idx, rh, idx)
        t1 = time.perf_counter()
        st = ini.transfer(h)
        t2 = time.perf_counter()
        while st != "DONE":
            st = ini.check_xfer_state(h)
            if st == "ERR":
                sys.exit("nixl_post.py: the transfer failed")
        ini.release_xfer_handle(h)
        return t1 - t0, t2 - t1

    for _ in range(3):
        one()
    if a.profile:
        import cProfile
        import pstats
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(a.reps):
            one()
        pr.disable()
        pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
        return
    mk, tr = [], []
    for _ in range(a.reps):
        m, t = one()
        mk.append(m)
        tr.append(t)
    tot = np.array(mk) + np.array(tr)
    want = src if a.op == "WRITE" else dst
    got = dst if a.op == "WRITE" else src
    sel = (sl[:, None] * size + np.arange(size, dtype=np.uint64)[None, :]).ravel()
    ok = bool(np.array_equal(want[sel], got[sel]))
    print(json.dumps({
        "descs": n, "size": size, "op": a.op, "reps": a.reps,
        "post_ms_p50": round(float(np.median(tot)) * 1e3, 3),
        "post_ms_p10": round(float(np.percentile(tot, 10)) * 1e3, 3),
        "post_ms_p90": round(float(np.percentile(tot, 90)) * 1e3, 3),
        "make_ms_p50": round(float(np.median(mk)) * 1e3, 3),
        "transfer_ms_p50": round(float(np.median(tr)) * 1e3, 3),
        "data_ok": ok}))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
