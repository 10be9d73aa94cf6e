#!/usr/bin/env python3
"""A nixlbench-like KV workload through NIXL's Python API, for whichever `nixl`
is imported: NIXL's wheel (PYTHONPATH=<wheels>) or orbitte.nixl (the shim of
`python -m orbitte.nixl.shim DIR` first on PYTHONPATH).

    python3 nixl_kv.py SPEC [SPEC...] [--seconds S]

Two agents in two processes on this host, host memory. SPEC is
OP:SIZE:LAYERS:BLOCKS, OP write or read: each layer is a pool of 2 x BLOCKS
slots of SIZE bytes, registered as its own region; the local and remote
sides are prepped once (prep_xfer_dlist over Nx3 arrays of every slot, as
vLLM's connector does), and every request picks BLOCKS shuffled slots per
layer on each side (numpy indices) and makes one make_prepped_xfer per
layer, posts them all, polls them with check_xfer_state until DONE and
releases them. Requests run back to back for about S seconds after a
warm-up. One JSON line per SPEC: GB/s (10^9 bytes/s), the p50 / p99 time of
one request in microseconds, and the p50 time of make_prepped_xfer +
transfer of one layer. "kv" in run.sh terms is write:16384:8:256 (2,048 x 16
KiB scattered). --post N also times one make_prepped_xfer + transfer of N
descriptors of 64 bytes (the median of 20).
"""
import argparse
import json
import subprocess
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config


def parse(spec):
    op, size, layers, blocks = spec.split(":")
    return op.upper(), int(size), int(layers), int(blocks)


def pools(specs):
    """(size of one layer's pool, layers) large enough for every SPEC."""
    return (max(2 * s * b for _, s, _, b in map(parse, specs)),
            max(la for _, _, la, _ in map(parse, specs)))


def alloc(specs, fill, post):
    per, layers = pools(specs)
    bufs = [np.full(per, fill, dtype=np.uint8) for _ in range(layers)]
    if post:
        bufs.append(np.full(64 * post, fill, dtype=np.uint8))
    return bufs


def addr(a):
    return a.__array_interface__["data"][0]


def target(args):
    agent = nixl_agent("kv-target", nixl_agent_config(backends=["UCX"]))
    bufs = alloc(args.spec, 1, args.post)
    agent.register_memory([(addr(b), b.nbytes, 0, "") for b in bufs], "DRAM")
    print("target " + json.dumps({"addrs": [addr(b) for b in bufs],
                                  "meta": agent.get_agent_metadata().hex()}), flush=True)
    agent.add_remote_agent(bytes.fromhex(sys.stdin.readline().strip()))
    sys.stdin.read()
    return 0


def rows(bases, size, slots):
    base = np.array(bases, dtype=np.uint64)
    r = np.zeros((len(bases) * slots, 3), dtype=np.uint64)
    r[:, 0] = (base[:, None] + np.arange(slots, dtype=np.uint64)[None, :] * size).ravel()
    r[:, 1] = size
    return r


def wait_all(agent, handles):
    left = list(handles)
    while left:
        nxt = []
        for h in left:
            st = agent.check_xfer_state(h)
            if st == "ERR":
                raise RuntimeError("transfer failed")
            if st != "DONE":
                nxt.append(h)
        left = nxt


def run_spec(agent, peer, spec, lbases, rbases, seconds):
    op, size, layers, blocks = parse(spec)
    slots = 2 * blocks
    lp = agent.prep_xfer_dlist("NIXL_INIT_AGENT", rows(lbases[:layers], size, slots), "DRAM")
    rp = agent.prep_xfer_dlist(peer, rows(rbases[:layers], size, slots), "DRAM")
    rng = np.random.default_rng(1)
    times, posts = [], []
    t_start = time.perf_counter()
    end = None
    while True:
        idx = []
        for layer in range(layers):
            lo = layer * slots
            idx.append((lo + rng.permutation(slots)[:blocks], lo + rng.permutation(slots)[:blocks]))
        t0 = time.perf_counter()
        handles = []
        for li, ri in idx:
            p0 = time.perf_counter()
            h = agent.make_prepped_xfer(op, lp, li, rp, ri)
            if agent.transfer(h) == "ERR":
                raise RuntimeError(f"{spec}: post failed")
            posts.append(time.perf_counter() - p0)
            handles.append(h)
        wait_all(agent, handles)
        t1 = time.perf_counter()
        for h in handles:
            agent.release_xfer_handle(h)
        if end is None:
            if t1 - t_start > min(0.3, seconds / 4):
                end = t1 + seconds
                t_start = t1
                posts = []
            continue
        times.append(t1 - t0)
        if time.perf_counter() >= end:
            break
    elapsed = time.perf_counter() - t_start
    agent.release_dlist_handle(lp)
    agent.release_dlist_handle(rp)
    times.sort()
    posts.sort()
    total = size * blocks * layers * len(times)
    return {"spec": spec, "requests": len(times), "gbps": round(total / elapsed / 1e9, 4),
            "p50_us": round(times[len(times) // 2] * 1e6, 1),
            "p99_us": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6, 1),
            "post_p50_us": round(posts[len(posts) // 2] * 1e6, 1)}


def post_cost(agent, peer, n, lbase, rbase):
    lp = agent.prep_xfer_dlist("NIXL_INIT_AGENT", rows([lbase], 64, n), "DRAM")
    rp = agent.prep_xfer_dlist(peer, rows([rbase], 64, n), "DRAM")
    rev = np.arange(n)[::-1].copy()          # not contiguous on both sides: no merging
    idx = np.arange(n)
    out = []
    for _ in range(20):
        t0 = time.perf_counter()
        h = agent.make_prepped_xfer("WRITE", lp, idx, rp, rev)
        agent.transfer(h)
        out.append(time.perf_counter() - t0)
        wait_all(agent, [h])
        agent.release_xfer_handle(h)
    out.sort()
    return {"spec": f"post:{n}", "make_transfer_p50_ms": round(out[len(out) // 2] * 1e3, 3)}


def initiator(args):
    cmd = [sys.executable, __file__, "--role", "target", "--post", str(args.post)] + args.spec
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        while line and not line.startswith("target "):
            line = p.stdout.readline()
        if not line:
            raise RuntimeError("the target process ended before it was ready")
        info = json.loads(line[len("target "):])
        agent = nixl_agent("kv-initiator", nixl_agent_config(backends=["UCX"]))
        bufs = alloc(args.spec, 7, args.post)
        agent.register_memory([(addr(b), b.nbytes, 0, "") for b in bufs], "DRAM")
        peer = agent.add_remote_agent(bytes.fromhex(info["meta"]))
        p.stdin.write(agent.get_agent_metadata().hex() + "\n")
        p.stdin.flush()
        lb = [addr(b) for b in bufs]
        for spec in args.spec:
            print(json.dumps(run_spec(agent, peer, spec, lb, info["addrs"], args.seconds)),
                  flush=True)
        if args.post:
            print(json.dumps(post_cost(agent, peer, args.post, lb[-1], info["addrs"][-1])),
                  flush=True)
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="+")
    ap.add_argument("--role", choices=["initiator", "target"], default="initiator")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--post", type=int, default=0)
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
