#!/usr/bin/env python3
"""KV-cache handoff from a prefill process to a decode process with orbitte.

Both processes keep a layer-wise KV pool: an array of shape
(layers, blocks, block_bytes) (a torch tensor where torch is installed, else
numpy), registered once. For each request:

  1. prefill -> decode  {"alloc": req, "n": blocks}       (a notification)
  2. decode  -> prefill {"blocks": req, "ids": [...]}      scattered free blocks
  3. prefill writes the request's blocks layer by layer, one submit_arrays
     call per layer (a real prefill would submit a layer as soon as it is
     computed), from its own scattered blocks to the decode's ones;
  4. prefill -> decode  {"done": req}  once every layer's writes completed;
  5. decode checks every byte of every block of every layer, frees them.

Run without arguments it spawns both roles and exits 0 when the decode
verified everything:

    python3 kv_handoff.py [--requests 8] [--layers 4] [--block-bytes 16384] ...
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

import orbitte

try:
    import torch
except ImportError:
    torch = None


def make_pool(layers, blocks, block_bytes):
    """(object to register, numpy view of it)."""
    if torch is not None:
        t = torch.zeros((layers, blocks, block_bytes), dtype=torch.uint8)
        return t, t.numpy()
    a = np.zeros((layers, blocks, block_bytes), dtype=np.uint8)
    return a, a


def kv_bytes(req, layer, j, block_bytes):
    """What prefill computed for block j of request req at layer."""
    start = (req * 131 + layer * 31 + j * 7) % 256
    return ((np.arange(block_bytes, dtype=np.uint32) + start) % 256).astype(np.uint8)


def send_json(engine, seg, obj):
    engine.send(seg, json.dumps(obj).encode())


def decode(args):
    pool_obj, pool = make_pool(args.layers, args.blocks, args.block_bytes)
    free = list(range(args.blocks))
    random.Random(args.seed).shuffle(free)
    owned = {}
    done = checked = 0
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        mem = e.register(pool_obj)
        print(json.dumps({"name": e.name}), flush=True)
        peers = {}
        for n in e.notifications(timeout=args.timeout):
            msg = json.loads(n.data)
            if n.sender not in peers:
                peers[n.sender] = e.open(n.sender)
            seg = peers[n.sender]
            if "alloc" in msg:
                ids = [free.pop() for _ in range(msg["n"])]
                owned[msg["alloc"]] = ids
                send_json(e, seg, {"blocks": msg["alloc"], "ids": ids, "addr": mem.addr,
                                   "shape": list(pool.shape)})
            elif "done" in msg:
                req = msg["done"]
                ids = owned.pop(req)
                for layer in range(args.layers):
                    for j, b in enumerate(ids):
                        want = kv_bytes(req, layer, j, args.block_bytes)
                        if not np.array_equal(pool[layer, b], want):
                            bad = int(np.flatnonzero(pool[layer, b] != want)[0])
                            print(f"decode: request {req} layer {layer} block {b}: "
                                  f"byte {bad} differs", flush=True)
                            return 1
                        checked += args.block_bytes
                pool[:, ids, :] = 0
                free.extend(ids)
                done += 1
                if done == args.requests:
                    for s in peers.values():
                        s.close()
                    print(f"decode: verified {done} requests, {checked} bytes "
                          f"({args.layers} layers)", flush=True)
                    return 0
    print(f"decode: only {done} of {args.requests} requests arrived", flush=True)
    return 1


def wait_for(engine, key, req, timeout):
    for n in engine.notifications(timeout=timeout):
        msg = json.loads(n.data)
        if msg.get(key) == req:
            return msg
    raise SystemExit(f"prefill: no {key!r} for request {req}")


def prefill(args):
    local_blocks = args.blocks_per_request * 2
    pool_obj, pool = make_pool(args.layers, local_blocks, args.block_bytes)
    rng = random.Random(args.seed + 1)
    sent = 0
    t0 = time.monotonic()
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        mem = e.register(pool_obj, access=0)
        stride_l = pool.strides[0]
        stride_b = pool.strides[1]
        with e.open(args.peer) as seg:
            for req in range(args.requests):
                n = args.blocks_per_request
                src = rng.sample(range(local_blocks), n)  # where prefill computed it
                for layer in range(args.layers):
                    for j, b in enumerate(src):
                        pool[layer, b] = kv_bytes(req, layer, j, args.block_bytes)
                send_json(e, seg, {"alloc": req, "n": n})
                grant = wait_for(e, "blocks", req, args.timeout)
                dst = grant["ids"]
                remote = grant["addr"]
                r_stride_l = grant["shape"][1] * grant["shape"][2]
                r_stride_b = grant["shape"][2]
                with e.batch(capacity=n * args.layers) as batch:
                    for layer in range(args.layers):
                        local_addrs = np.array([mem.addr + layer * stride_l + b * stride_b
                                                for b in src], dtype=np.uint64)
                        remote_addrs = np.array([remote + layer * r_stride_l + b * r_stride_b
                                                 for b in dst], dtype=np.uint64)
                        batch.submit_arrays(seg, orbitte.WRITE, local_addrs, remote_addrs,
                                            args.block_bytes)
                    if batch.wait(timeout=args.timeout) != orbitte.COMPLETED:
                        raise SystemExit(f"prefill: request {req} did not complete")
                sent += n * args.layers * args.block_bytes
                send_json(e, seg, {"done": req})
    dt = time.monotonic() - t0
    print(f"prefill: {args.requests} requests, {sent} bytes in {dt:.3f} s", flush=True)
    return 0


def spawn(args):
    me = os.path.abspath(__file__)
    common = ["--requests", str(args.requests), "--layers", str(args.layers),
              "--blocks", str(args.blocks), "--block-bytes", str(args.block_bytes),
              "--blocks-per-request", str(args.blocks_per_request),
              "--seed", str(args.seed), "--timeout", str(args.timeout)]
    dec = subprocess.Popen([sys.executable, me, "--role", "decode"] + common,
                           stdout=subprocess.PIPE, text=True)
    try:
        name = json.loads(dec.stdout.readline())["name"]
        pre = subprocess.run([sys.executable, me, "--role", "prefill", "--peer", name] + common,
                             timeout=args.timeout * 4)
        out = dec.stdout.read()
        sys.stdout.write(out)
        rc = dec.wait(timeout=args.timeout)
    finally:
        if dec.poll() is None:
            dec.kill()
            dec.wait()
    return pre.returncode or rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["decode", "prefill"])
    p.add_argument("--peer", help="the decode's segment name (role prefill)")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--blocks", type=int, default=64, help="blocks in the decode's pool")
    p.add_argument("--blocks-per-request", type=int, default=6)
    p.add_argument("--block-bytes", type=int, default=16384)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args()
    if args.blocks_per_request > args.blocks:
        p.error("--blocks-per-request exceeds --blocks")
    if args.role == "decode":
        return decode(args)
    if args.role == "prefill":
        if not args.peer:
            p.error("--role prefill needs --peer")
        return prefill(args)
    return spawn(args)


if __name__ == "__main__":
    sys.exit(main())
