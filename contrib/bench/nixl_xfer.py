#!/usr/bin/env python3
"""NIXL reference for contrib/bench/run.sh: two nixl_agent instances with the
UCX backend, in two processes on this host, host memory (DRAM).

    python3 nixl_xfer.py SPEC [SPEC...] [--seconds S]

SPEC is OP:SIZE:COUNT[:scatter], OP write or read: one transfer of COUNT
blocks of SIZE bytes (one descriptor each; with "scatter" the blocks sit at
shuffled slots of pools twice their footprint), posted again and again for
about S seconds after a warm-up. Prints one JSON line per SPEC: GB/s (10^9
bytes per second) and the p50 and p99 time of one transfer in microseconds.
The transports are UCX's choice unless UCX_TLS says otherwise.
"""
import argparse
import json
import random
import subprocess
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config


def parse(spec):
    f = spec.split(":")
    return f[0], int(f[1]), int(f[2]), len(f) > 3 and f[3] == "scatter"


def pool_bytes(specs):
    return max(s * c * (2 if sc else 1) for _, s, c, sc in map(parse, specs))


def slots(count, scatter, seed):
    if not scatter:
        return list(range(count))
    order = list(range(2 * count))
    random.Random(seed).shuffle(order)
    return order[:count]


def target(args):
    agent = nixl_agent("target", nixl_agent_config(backends=["UCX"]))
    buf = np.ones(pool_bytes(args.spec), dtype=np.uint8)
    addr = buf.ctypes.data
    agent.register_memory([(addr, buf.nbytes, 0, "")], "DRAM")
    # NIXL may print to stdout too: the line for the initiator is marked
    print("target " + json.dumps({"addr": addr, "meta": agent.get_agent_metadata().hex()}),
          flush=True)
    agent.add_remote_agent(bytes.fromhex(sys.stdin.readline().strip()))
    sys.stdin.read()  # until the initiator closes it
    return 0


def run_spec(agent, peer, spec, laddr, raddr, seconds):
    op, size, count, scatter = parse(spec)
    local = agent.get_xfer_descs(
        [(laddr + i * size, size, 0) for i in slots(count, scatter, 1)], "DRAM")
    remote = agent.get_xfer_descs(
        [(raddr + i * size, size, 0) for i in slots(count, scatter, 2)], "DRAM")
    handle = agent.initialize_xfer(op.upper(), local, remote, peer)
    times = []
    end = None
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        state = agent.transfer(handle)
        while state not in ("DONE", "ERR"):
            state = agent.check_xfer_state(handle)
        t1 = time.perf_counter()
        if state == "ERR":
            raise RuntimeError(f"{spec}: transfer failed")
        if end is None:
            if t1 - t_start > min(0.2, seconds / 4):  # warm-up done
                end = t1 + seconds
                t_start = t1
            continue
        times.append(t1 - t0)
        if t1 >= end:
            break
    agent.release_xfer_handle(handle)
    times.sort()
    total = size * count * len(times)
    return {"spec": spec, "transfers": len(times),
            "gbps": round(total / (time.perf_counter() - t_start) / 1e9, 4),
            "p50_us": round(times[len(times) // 2] * 1e6, 2),
            "p99_us": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1e6, 2)}


def initiator(args):
    p = subprocess.Popen([sys.executable, __file__, "--role", "target"] + args.spec,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        while line and not line.startswith("target "):
            line = p.stdout.readline()
        if not line:
            raise RuntimeError("the target process ended before it was ready")
        info = json.loads(line[len("target "):])
        agent = nixl_agent("initiator", nixl_agent_config(backends=["UCX"]))
        buf = np.full(pool_bytes(args.spec), 7, dtype=np.uint8)
        laddr = buf.ctypes.data
        agent.register_memory([(laddr, buf.nbytes, 0, "")], "DRAM")
        peer = agent.add_remote_agent(bytes.fromhex(info["meta"]))
        p.stdin.write(agent.get_agent_metadata().hex() + "\n")
        p.stdin.flush()
        for spec in args.spec:
            print(json.dumps(run_spec(agent, peer, spec, laddr, info["addr"], args.seconds)),
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
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
