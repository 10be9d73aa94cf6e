#!/usr/bin/env python3
"""NIXL reference for contrib/bench/run.sh: two nixl_agent instances with the
UCX backend, in two processes on this host, host memory (DRAM).

    python3 nixl_xfer.py SPEC [SPEC...] [--seconds S]

SPEC is OP:SIZE:COUNT[:scatter[:LAYERS]], OP write or read: one transfer of
COUNT blocks of SIZE bytes (one descriptor each; with "scatter" the blocks
sit at shuffled slots of pools twice their footprint), posted again and
again for about S seconds after a warm-up. The shapes are ote_perftest's,
so that run.sh compares like with like: a SPEC of more than one block keeps
--depth transfers in flight (default 2, ote_perftest's -D for *_bw: as many
handles over the same descriptors, each posted again as soon as it is DONE,
the oldest awaited first); a single block (the latency rows) one. With
LAYERS (ote_perftest --kv LAYERS:COUNT/LAYERS), each request is LAYERS
transfers of COUNT/LAYERS descriptors, one make_prepped_xfer per layer over
lists prepped once (prep_xfer_dlist), all posted, then polled with
check_xfer_state until DONE and released; requests run one after the other.
Prints one JSON line per SPEC: GB/s (10^9 bytes per second) and the p50
and p99 time of one transfer (or request) in microseconds, from its post to
its DONE. The transports are UCX's choice unless UCX_TLS says otherwise.
"""
import argparse
import json
import mmap
import random
import subprocess
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config


def parse(spec):
    f = spec.split(":")
    return f[0], int(f[1]), int(f[2]), len(f) > 3 and f[3] == "scatter"


def layers_of(spec):
    f = spec.split(":")
    return int(f[4]) if len(f) > 4 else 0


def pool_bytes(specs):
    return max(s * c * (2 if sc else 1) for _, s, c, sc in map(parse, specs))


_maps = []  # the pools' mappings, alive as long as the process


def pool(nbytes, fill):
    """A pool of nbytes set to fill, in anonymous memory with transparent
    huge pages asked for (madvise), as ote_perftest and ucx_perftest ask for
    their buffers: the scattered KV blocks then cost the same TLB misses in
    both processes as in ote_perftest's (numpy's own allocation gets 4 KiB
    pages where THP is "madvise")."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    _maps.append(m)
    buf = np.frombuffer(m, dtype=np.uint8)
    buf[:] = fill
    return buf


def slots(count, scatter, seed):
    if not scatter:
        return list(range(count))
    order = list(range(2 * count))
    random.Random(seed).shuffle(order)
    return order[:count]


def target(args):
    agent = nixl_agent("target", nixl_agent_config(backends=["UCX"]))
    buf = pool(pool_bytes(args.spec), 1)
    addr = buf.ctypes.data
    agent.register_memory([(addr, buf.nbytes, 0, "")], "DRAM")
    # NIXL may print to stdout too: the line for the initiator is marked
    print("target " + json.dumps({"addr": addr, "meta": agent.get_agent_metadata().hex()}),
          flush=True)
    agent.add_remote_agent(bytes.fromhex(sys.stdin.readline().strip()))
    sys.stdin.read()  # until the initiator closes it
    return 0


def wait(agent, handle, spec):
    state = agent.check_xfer_state(handle)
    while state not in ("DONE", "ERR"):
        state = agent.check_xfer_state(handle)
    if state == "ERR":
        raise RuntimeError(f"{spec}: transfer failed")


class Window:
    """The measured window: a warm-up (0.2 s, or a quarter of the run when
    shorter), then `seconds` of timed iterations."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.end = None
        self.start = time.perf_counter()
        self.times = []

    def lap(self, t0, t1):
        """Record the iteration [t0, t1] once warm; True when the window is over."""
        if self.end is None:
            if t1 - self.start > min(0.2, self.seconds / 4):  # warm-up done
                self.end = t1 + self.seconds
                self.start = t1
            return False
        self.times.append(t1 - t0)
        return t1 >= self.end


def run_spec(agent, peer, spec, laddr, raddr, seconds, depth):
    op, size, count, scatter = parse(spec)
    layers = layers_of(spec)
    lrows = [(laddr + i * size, size, 0) for i in slots(count, scatter, 1)]
    rrows = [(raddr + i * size, size, 0) for i in slots(count, scatter, 2)]
    if layers:
        return run_layers(agent, peer, spec, lrows, rrows, seconds, layers)
    depth = depth if count > 1 else 1
    local = agent.get_xfer_descs(lrows, "DRAM")
    remote = agent.get_xfer_descs(rrows, "DRAM")
    handles = [agent.initialize_xfer(op.upper(), local, remote, peer) for _ in range(depth)]
    started = [0.0] * depth
    posted = done = 0
    win = Window(seconds)
    while True:
        while posted - done < depth:          # keep `depth` transfers in flight
            started[posted % depth] = time.perf_counter()
            if agent.transfer(handles[posted % depth]) == "ERR":
                raise RuntimeError(f"{spec}: post failed")
            posted += 1
        wait(agent, handles[done % depth], spec)
        t1 = time.perf_counter()
        t0 = started[done % depth]
        done += 1
        if win.lap(t0, t1):
            break
    while done < posted:                      # what is still in flight, out of the figures
        wait(agent, handles[done % depth], spec)
        done += 1
    elapsed = t1 - win.start
    for h in handles:
        agent.release_xfer_handle(h)
    return figures(spec, size * count, win.times, elapsed)


def run_layers(agent, peer, spec, lrows, rrows, seconds, layers):
    op, size, count, _ = parse(spec)
    per = count // layers
    if per * layers != count:
        raise ValueError(f"{spec}: {count} blocks do not split into {layers} layers")
    lp = agent.prep_xfer_dlist("NIXL_INIT_AGENT", lrows, "DRAM")
    rp = agent.prep_xfer_dlist(peer, rrows, "DRAM")
    idx = [list(range(la * per, (la + 1) * per)) for la in range(layers)]
    win = Window(seconds)
    while True:
        t0 = time.perf_counter()
        handles = []
        for li in idx:                        # one make_prepped_xfer per layer
            h = agent.make_prepped_xfer(op.upper(), lp, li, rp, li)
            if agent.transfer(h) == "ERR":
                raise RuntimeError(f"{spec}: post failed")
            handles.append(h)
        for h in handles:
            wait(agent, h, spec)
        t1 = time.perf_counter()
        for h in handles:
            agent.release_xfer_handle(h)
        if win.lap(t0, t1):
            break
    elapsed = time.perf_counter() - win.start
    agent.release_dlist_handle(lp)
    agent.release_dlist_handle(rp)
    return figures(spec, size * count, win.times, elapsed)


def figures(spec, nbytes, times, elapsed):
    times.sort()
    total = nbytes * len(times)
    return {"spec": spec, "transfers": len(times),
            "gbps": round(total / elapsed / 1e9, 4),
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
        buf = pool(pool_bytes(args.spec), 7)
        laddr = buf.ctypes.data
        agent.register_memory([(laddr, buf.nbytes, 0, "")], "DRAM")
        peer = agent.add_remote_agent(bytes.fromhex(info["meta"]))
        p.stdin.write(agent.get_agent_metadata().hex() + "\n")
        p.stdin.flush()
        for spec in args.spec:
            print(json.dumps(run_spec(agent, peer, spec, laddr, info["addr"], args.seconds,
                                      args.depth)),
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
    ap.add_argument("--depth", type=int, default=2,
                    help="transfers in flight for SPECs of more than one block")
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
