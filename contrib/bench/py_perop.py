#!/usr/bin/env python3
"""What one transfer through a Python path costs, in counts that do not
depend on the host's load: system calls, context switches and CPU time per
transfer of each thread of both processes (perf stat --per-thread, attached
around the timed transfers only), and the polls a transfer took.

    python3 py_perop.py MODE [--n N] [--size SIZE] [--count COUNT] [--depth D] [--op OP]

MODE:
  nixl     NIXL's API (import nixl: the shim of `python -m orbitte.nixl.shim`
           or NIXL's wheel): transfer(), then check_xfer_state() until DONE
           (--depth transfers in flight over as many handles)
  status   orbitte: a batch, submit_arrays, then Batch.status() in a loop
           (no wait(), no progress()), after a wait() of another batch each
           time (which leaves the engine's worker thread parked)
  wait     orbitte: a batch, submit_arrays, Batch.wait()
  mcsync   orbitte.mooncake: batch_transfer_sync_write (--op read:
           batch_transfer_sync_read)
  mcasync  orbitte.mooncake: batch_transfer_async_write (read) calls, --depth
           of them in flight, each awaited in turn with
           get_batch_transfer_status([id]) (mc_batch_write.py --depth)
  perftest the reference: ote_perftest --loopback (--perftest PATH) with
           OP_bw (OP_lat for one block), -b COUNT -D DEPTH -n N; perf is
           attached to both its processes once the initiator's engine
           started: its N + 200 batches are counted, connection set-up
           included

WRITEs (nixl, mcsync, mcasync and perftest: --op write or read) of COUNT blocks of SIZE
bytes (default one of 8), target in a second process on loopback, N timed
transfers after 200 untimed ones. Needs perf
(linux-perf) and the rights to attach it; without perf (--no-perf) only the
polls and the time per transfer are printed. Compare with ote_perftest's
threads measured the same way (docs/performance.md, "The per-transfer
cost"). Not a test: a measurement.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

EVENTS = ("task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_futex,"
          "syscalls:sys_enter_sched_yield,syscalls:sys_enter_epoll_wait,"
          "syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendmsg")
WARM = 200


def pool_bytes(args):
    """KV requests scatter their blocks over twice their footprint (nixl_xfer.py)."""
    return max(args.size * args.count * (2 if args.layers else 1), 4096)


def scattered(base, args, seed):
    """COUNT blocks at shuffled slots of a pool of twice as many, so that none merge."""
    order = list(range(2 * args.count))
    random.Random(seed).shuffle(order)
    return [(base + i * args.size, args.size, 0) for i in order[:args.count]]


def target(args):
    pool = pool_bytes(args)
    if args.mode == "nixl":
        import numpy as np
        from nixl._api import nixl_agent, nixl_agent_config
        a = nixl_agent("target", nixl_agent_config(backends=["UCX"]))
        buf = np.ones(pool, dtype=np.uint8)
        a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
        info = {"addr": buf.ctypes.data, "meta": a.get_agent_metadata().hex()}
    elif args.mode in ("mcsync", "mcasync"):
        from orbitte.mooncake import TransferEngine
        te = TransferEngine()
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        info = {"addr": te.allocate_managed_buffer(pool),
                "name": f"127.0.0.1:{te.get_rpc_port()}"}
    else:
        import orbitte
        e = orbitte.Engine(listen_addr="127.0.0.1:0")
        m = e.alloc(pool)
        info = {"addr": m.addr, "name": e.name}
    # NIXL may print to stdout too: the line for the initiator is marked
    print("py_perop " + json.dumps(info), flush=True)
    sys.stdin.read()
    return 0


class Perf:
    """perf stat --per-thread attached to both processes while the transfers run."""

    def __init__(self, pids, enabled):
        self.p = None
        self.out = tempfile.NamedTemporaryFile(suffix=".perf", delete=False).name
        if enabled:
            self.p = subprocess.Popen(["perf", "stat", "--per-thread", "-x,", "-e", EVENTS,
                                       "-p", ",".join(map(str, pids)), "-o", self.out])
            time.sleep(0.5)   # attached before the first timed transfer

    def stop(self, n):
        if self.p is None:
            return {}
        self.p.send_signal(signal.SIGINT)
        self.p.wait()
        rows = {}
        for line in open(self.out):
            f = line.strip().split(",")
            if len(f) < 4:
                continue
            try:
                v = float(f[1])
            except ValueError:
                continue
            ev = f[3].split(":")[-1].replace("sys_enter_", "")
            rows.setdefault(f[0], {})[ev if ev != "sys_enter" else "syscalls"] = v
        os.unlink(self.out)
        # threads that did something per transfer: counts per transfer, CPU in us
        return {th: {k: round(v * (1000 if k == "task-clock" else 1) / n, 3)
                     for k, v in ev.items()}
                for th, ev in rows.items()
                if ev.get("syscalls", 0) >= 0.05 * n or ev.get("task-clock", 0) >= 1}


def children(pid):
    """The child processes of pid (its main thread's)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def run_perftest(args):
    """ote_perftest --loopback, counted as the Python paths are: its initiator
    and the target process it starts."""
    n = args.n + WARM
    kind = f"{args.op}_lat" if args.count == 1 else f"{args.op}_bw"
    cmd = [args.perftest, "--loopback", "-q", "-x", "tcp", "-t", kind, "-s", str(args.size),
           "-n", str(n)]
    if args.layers:
        region = max(64 << 20, 3 * args.count * args.size)
        cmd = [args.perftest, "--loopback", "-q", "-x", "tcp", "-t", f"kv_{args.op}",
               "--kv", f"{args.layers}:{args.count // args.layers}", "-s", str(args.size),
               "--region", str(region), "-T", "1", "-n", str(n)]
    elif args.count > 1:
        cmd += ["-b", str(args.count), "-T", "1", "-D", str(args.depth)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t_end = time.time() + 30
    kids = children(p.pid)
    while not kids and p.poll() is None and time.time() < t_end:
        time.sleep(0.01)
        kids = children(p.pid)
    if not kids:
        p.kill()
        raise SystemExit("py_perop: ote_perftest's target did not start: " + " ".join(cmd))
    # perf follows the threads there are when it attaches: the initiator's
    # engine (its worker thread) first
    while len(os.listdir(f"/proc/{p.pid}/task")) < 2 and p.poll() is None and time.time() < t_end:
        time.sleep(0.001)
    perf = Perf([p.pid] + kids, args.perf)
    _, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"py_perop: {' '.join(cmd)}: exit status {p.returncode}: {err[-300:]}")
    # counted over every batch it ran (n + its warm-up), set-up included
    return {"threads": perf.stop(n), "command": " ".join(cmd)}


def initiator(args):
    if args.mode == "perftest":
        out = run_perftest(args)
        out.update(mode=args.mode, op=args.op, size=args.size, count=args.count,
                   depth=args.depth, layers=args.layers, n=args.n + WARM)
        print(json.dumps(out))
        return 0
    p = subprocess.Popen([sys.executable, __file__, args.mode, "--role", "target",
                          "--size", str(args.size), "--count", str(args.count),
                          "--layers", str(args.layers)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        while not line.startswith("py_perop "):
            if not line:
                raise SystemExit("py_perop: the target did not start")
            line = p.stdout.readline()
        info = json.loads(line.split(" ", 1)[1])
        run = {"nixl": run_nixl, "mcsync": run_mcsync,
               "mcasync": run_mcasync}.get(args.mode, run_orbitte)
        out = run(args, info, [os.getpid(), p.pid])
    finally:
        p.stdin.close()
        p.wait(timeout=30)
    out.update(mode=args.mode, op=args.op, size=args.size, count=args.count,
               depth=args.depth, layers=args.layers, n=args.n)
    print(json.dumps(out))
    return 0


def run_nixl(args, info, pids):
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config
    a = nixl_agent("init", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(pool_bytes(args), dtype=np.uint8)
    a.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    peer = a.add_remote_agent(bytes.fromhex(info["meta"]))
    rows = lambda base: [(base + i * args.size, args.size, 0) for i in range(args.count)]
    if args.layers:
        return run_nixl_layers(args, a, peer, scattered(buf.ctypes.data, args, 1),
                               scattered(info["addr"], args, 2), pids)
    loc = a.get_xfer_descs(rows(buf.ctypes.data), "DRAM")
    rem = a.get_xfer_descs(rows(info["addr"]), "DRAM")
    hs = [a.initialize_xfer(args.op.upper(), loc, rem, peer) for _ in range(args.depth)]
    total = args.n + WARM
    posted = done = inline = polls = 0
    perf = None
    while done < total:
        while posted < total and posted - done < args.depth:
            if posted == WARM:
                while done < posted:      # the untimed ones end first
                    while a.check_xfer_state(hs[done % args.depth]) != "DONE":
                        pass
                    done += 1
                perf, polls, inline, t0 = Perf(pids, args.perf), 0, 0, time.perf_counter()
            s = a.transfer(hs[posted % args.depth])
            posted += 1
            if s == "ERR":
                raise SystemExit("py_perop: transfer() said ERR")
            inline += s == "DONE"
        s = a.check_xfer_state(hs[done % args.depth])
        polls += 1
        while s != "DONE":
            if s == "ERR":
                raise SystemExit("py_perop: check_xfer_state() said ERR")
            s = a.check_xfer_state(hs[done % args.depth])
            polls += 1
        done += 1
    us = (time.perf_counter() - t0) / args.n * 1e6
    return {"threads": perf.stop(args.n), "polls_per_transfer": polls / args.n,
            "done_by_transfer": inline / args.n, "us_per_transfer": round(us, 2)}


def run_nixl_layers(args, a, peer, lrows, rrows, pids):
    """nixl_xfer.py's KV requests: LAYERS handles of COUNT/LAYERS descriptors,
    one make_prepped_xfer each over lists prepped once, all posted, then each
    polled until DONE and released; one request at a time."""
    per = args.count // args.layers
    lp = a.prep_xfer_dlist("NIXL_INIT_AGENT", lrows, "DRAM")
    rp = a.prep_xfer_dlist(peer, rrows, "DRAM")
    idx = [list(range(k * per, (k + 1) * per)) for k in range(args.layers)]
    perf, polls = None, 0
    for i in range(args.n + WARM):
        if i == WARM:
            perf, polls, t0 = Perf(pids, args.perf), 0, time.perf_counter()
        hs = []
        for li in idx:
            h = a.make_prepped_xfer(args.op.upper(), lp, li, rp, li)
            if a.transfer(h) == "ERR":
                raise SystemExit("py_perop: transfer() said ERR")
            hs.append(h)
        for h in hs:
            polls += 1
            s = a.check_xfer_state(h)
            while s != "DONE":
                if s == "ERR":
                    raise SystemExit("py_perop: check_xfer_state() said ERR")
                polls += 1
                s = a.check_xfer_state(h)
        for h in hs:
            a.release_xfer_handle(h)
    us = (time.perf_counter() - t0) / args.n * 1e6
    return {"threads": perf.stop(args.n), "polls_per_request": polls / args.n,
            "us_per_request": round(us, 2)}


def run_orbitte(args, info, pids):
    import orbitte
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    m = e.alloc(max(args.size * args.count, 4096))
    seg = e.open(info["name"])
    la = [m.addr + i * args.size for i in range(args.count)]
    ra = [info["addr"] + i * args.size for i in range(args.count)]
    perf, polls, lat = None, 0, []
    for i in range(args.n + WARM):
        if i == WARM:
            perf, polls, lat = Perf(pids, args.perf), 0, []
        if args.mode == "status":
            with e.batch(capacity=args.count) as b:   # leaves the worker parked
                b.submit_arrays(seg, orbitte.WRITE, la, ra, args.size)
                b.wait()
        t0 = time.perf_counter()
        with e.batch(capacity=args.count) as b:
            b.submit_arrays(seg, orbitte.WRITE, la, ra, args.size)
            if args.mode == "wait":
                b.wait()
            while b.status() == orbitte.PENDING:
                polls += 1
            if b.status() != orbitte.COMPLETED:
                raise SystemExit("py_perop: a transfer failed")
        lat.append(time.perf_counter() - t0)
    lat.sort()
    # in status mode each timed transfer comes with one waited for before it
    return {"threads": perf.stop(args.n), "polls_per_transfer": polls / args.n,
            "p50_us": round(lat[len(lat) // 2] * 1e6, 2),
            "p90_us": round(lat[int(len(lat) * 0.9)] * 1e6, 2)}


def mc_engine(args, info):
    """orbitte.mooncake's engine and the lists of one call: COUNT blocks of
    SIZE bytes, back to back on both sides (as ote_perftest -b COUNT)."""
    from orbitte.mooncake import TransferEngine
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    src = te.allocate_managed_buffer(max(args.size * args.count, 4096))
    srcs = [src + i * args.size for i in range(args.count)]
    dsts = [info["addr"] + i * args.size for i in range(args.count)]
    return te, srcs, dsts, [args.size] * args.count


class PyCalls:
    """Python function calls (cProfile's count) over --pycalls transfers
    after the perf-counted ones: cProfile slows them, so they are apart."""

    def __init__(self, n):
        self.n, self.prof = n, None

    def start(self):
        if self.n:
            import cProfile
            self.prof = cProfile.Profile()
            self.prof.enable()

    def stop(self):
        if self.prof is None:
            return {}
        self.prof.disable()
        import pstats
        st = pstats.Stats(self.prof)
        return {"python_calls_per_transfer": round(st.total_calls / self.n, 2)}


def run_mcsync(args, info, pids):
    te, srcs, dsts, lens = mc_engine(args, info)
    call = te.batch_transfer_sync_read if args.op == "read" else te.batch_transfer_sync_write
    perf = None
    for i in range(args.n + WARM):
        if i == WARM:
            perf, t0 = Perf(pids, args.perf), time.perf_counter()
        if call(info["name"], srcs, dsts, lens) != 0:
            raise SystemExit(f"py_perop: batch_transfer_sync_{args.op} failed")
    us = (time.perf_counter() - t0) / args.n * 1e6
    out = {"threads": perf.stop(args.n), "us_per_transfer": round(us, 2)}
    pc = PyCalls(args.pycalls)
    pc.start()
    for i in range(args.pycalls):
        call(info["name"], srcs, dsts, lens)
    out.update(pc.stop())
    return out


def run_mcasync(args, info, pids):
    """mc_batch_write.py --depth D's loop: D async calls in flight, the
    oldest awaited with get_batch_transfer_status([id]), then the next
    submitted; counted over N calls after 200 untimed ones (drained first)."""
    te, srcs, dsts, lens = mc_engine(args, info)
    submit = te.batch_transfer_async_read if args.op == "read" else te.batch_transfer_async_write
    status = te.get_batch_transfer_status
    name = info["name"]

    def loop(n, on_warm=None):
        ids = []
        posted = done = 0
        while done < n:
            while posted < n and posted - done < args.depth:
                if on_warm is not None and posted == WARM:
                    while done < posted:          # the untimed ones end first
                        if status([ids[done]]) != 0:
                            raise SystemExit("py_perop: get_batch_transfer_status failed")
                        done += 1
                    on_warm()
                bid = submit(name, srcs, dsts, lens)
                if bid == 0:
                    raise SystemExit("py_perop: batch_transfer_async failed")
                ids.append(bid)
                posted += 1
            if status([ids[done]]) != 0:
                raise SystemExit("py_perop: get_batch_transfer_status failed")
            done += 1

    box = {}

    def warm():
        box["perf"], box["t0"] = Perf(pids, args.perf), time.perf_counter()

    loop(args.n + WARM, warm)
    us = (time.perf_counter() - box["t0"]) / args.n * 1e6
    out = {"threads": box["perf"].stop(args.n), "us_per_transfer": round(us, 2)}
    pc = PyCalls(args.pycalls)
    pc.start()
    loop(args.pycalls)
    out.update(pc.stop())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["nixl", "status", "wait", "mcsync", "mcasync", "perftest"])
    ap.add_argument("--role", choices=["initiator", "target"], default="initiator")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--depth", type=int, default=1)
    ap.add_argument("--layers", type=int, default=0,
                    help="nixl and perftest: KV requests of LAYERS transfers of COUNT/LAYERS "
                         "blocks each (nixl_xfer.py's scatter:LAYERS, ote_perftest --kv)")
    ap.add_argument("--op", choices=["write", "read"], default="write",
                    help="nixl, mcsync, mcasync and perftest: the operation")
    ap.add_argument("--pycalls", type=int, default=0,
                    help="mcsync, mcasync: after the counted transfers, count the Python "
                         "function calls of this many more (cProfile)")
    ap.add_argument("--perftest", default="ote_perftest",
                    help="perftest: the ote_perftest to run (a build's src/tools/ote_perftest)")
    ap.add_argument("--no-perf", dest="perf", action="store_false")
    args = ap.parse_args()
    return target(args) if args.role == "target" else initiator(args)


if __name__ == "__main__":
    sys.exit(main())
