#!/usr/bin/env python3
"""The Markdown table of contrib/bench/run.sh, from the figures it recorded.

    table.py RESULTS COMMANDS NOTES START COMMIT CPUS LOAD0 LOAD1 ROUNDS QUICK THP [ONLY]

RESULTS: round, workload, peer, value, p99 (tab-separated, "-" when the
measurement failed); COMMANDS: workload, peer, command; NOTES: peer (or
"peer workload"), text; THP: the host's huge-page policies, as words;
ONLY: "nixl" for run.sh --only nixl (the goals and peers of NIXL's rows).
Prints the table, the goals of the issue as ratios taken round by round,
the notes and the commands.
"""
import statistics
import sys

# peer: the ote_perftest row its ratio is taken against
PEERS = {
    "ote_perftest tcp": "ote_perftest tcp",
    "ote_perftest tcp, depth 1": "ote_perftest tcp",
    "ucx_perftest tcp": "ote_perftest tcp",
    "iperf3": "ote_perftest tcp",
    "tcp ping-pong, no library": "ote_perftest tcp",
    "tcp stream, no library": "ote_perftest tcp",
    "tcp stream, one connection": "ote_perftest tcp",
    "orbitte.mooncake tcp": "ote_perftest tcp",
    "orbitte.mooncake tcp, async depth 2": "ote_perftest tcp",
    "Mooncake wheel tcp": "ote_perftest tcp",
    "NIXL wheel, UCX tcp": "ote_perftest tcp",
    "orbitte.nixl tcp": "ote_perftest tcp",
    "orbitte.nixl tcp, all interfaces": "ote_perftest tcp",
    "ote_perftest cma": "ote_perftest cma",
    "ucx_perftest cma": "ote_perftest cma",
    "ucx_perftest cma, 8 MiB": "ote_perftest cma",
    "ote_perftest shm": "ote_perftest shm",
    "memcpy": "ote_perftest shm",
}
SHAPES = {"4k": "4 KiB x 128", "64k": "64 KiB x 32", "1m": "1 MiB x 8",
          "kv": "KV 2,048 x 16 KiB"}

# What each peer runs for a workload, where it is not ote_perftest's own
EQUIVALENTS = """\
- ote_perftest: `-t write_lat|read_lat -s 8` (p50/p99 of one request,
  request to completion); `-t write_bw|read_bw -s SIZE -b BATCH -T THREADS`;
  KV: `-t kv_write|kv_read --kv 32:64 -s 16k --region 64m` (2,048 blocks of
  16 KiB scattered over pools twice their footprint on both sides, as
  memcpy's, one batch per layer). shm is the single copy through shared
  mappings (`ote_mem_alloc` memory on both sides); memcpy's ratios are
  taken against it. cma runs on memory from malloc registered with
  `ote_mem_register` (`--malloc`: 2 MiB aligned, `MADV_HUGEPAGE` asked for,
  as ucx_perftest asks for its buffers), the path for memory the
  application allocated itself.
- ucx_perftest (UCT unless said): WRITE latency is `am_lat` over tcp and
  `put_lat -D zcopy` over cma, ping-pong, shown as the round trip (twice the
  one-way figure it prints); READ latency is `ucp_get -s 8` with
  `UCX_TLS=tcp,self` (UCT tcp has no get) and `get -D zcopy` over cma, the
  time of one get in a stream. Bandwidth is a stream of single SIZE messages
  (`put_bw -D zcopy`, READ: `ucp_get` over tcp, `get -D zcopy` over cma); it
  has no batches, and KV is a stream of 16 KiB messages, not scattered.
  "ucx_perftest cma, 8 MiB": the 1 MiB x 8 footprint in 8 MiB messages.
  2 threads: two client/server pairs at once, their figures summed.
- tcp ping-pong, no library: `contrib/bench/pingpong.c`, the host's
  own TCP round trip on loopback between two processes that poll their
  sockets, with the message sizes of ote's tcp WRITE (40 bytes out, 32
  back) and READ (32 out, 40 back); its p99 / p50 is this host's tail
  without any library.
- tcp stream, no library: `contrib/bench/sock_blocks.c`, the host's own
  TCP stream on loopback between two processes, moving the blocks of the
  workload between the same layouts as ote_perftest's (KV: shuffled slots
  of pools twice the footprint on both sides) with writev and readv of up
  to 64 blocks a call, over two connections a pool as ote's tcp
  (`OTE_TCP_CONNS=2`), each carrying half the blocks, each with its own
  thread at either end (1 thread: two senders and two receivers); a stream
  has one direction, so WRITE and READ are the same stream, measured
  twice. Its KV / 1 MiB x 8 ratio is what this host's kernel gives for the
  layouts without any library.
- tcp stream, one connection: the same program, 1 MiB x 8 over one
  connection (`sock_blocks 1048576 8 1 0 SECONDS 1`): one sending and one
  receiving thread, as ote_perftest's 1 thread sends from one thread (the
  caller, or the one worker it progresses) on both of its connections.
- iperf3: WRITE only (a stream has no read), `-l SIZE -P THREADS`; KV is
  `-l 16k`.
- memcpy: `contrib/bench/memcpy_blocks.c`, the same blocks copied from one
  pool to another in one process (KV: shuffled slots of pools twice the
  footprint), one pool pair per thread; WRITE and READ are the same copy,
  measured twice.
- ote_perftest tcp, depth 1 (`--only python`): `-D 1`, one batch in flight
  per thread, as a sync call of the Python API has (ote_perftest's default
  keeps two).
- orbitte.mooncake and Mooncake's wheel: `bindings/python/bench/mc_batch_write.py`,
  one `batch_transfer_sync_write|read` call of BATCH blocks at a time, target
  in a second process, tcp, P2PHANDSHAKE; latency is one call of one 8-byte
  block; KV is one call of 2,048 scattered 16 KiB blocks (a whole request);
  2 threads make their calls at the same time on their own blocks.
- orbitte.mooncake, async depth 2 (`--only python`): the same script with
  `--depth 2`: two `batch_transfer_async_write|read` calls in flight, each
  awaited in turn with `get_batch_transfer_status` and followed by the
  next (ote_perftest's default depth; each call one `Batch.submit_arrays`).
- NIXL's wheel: `contrib/bench/nixl_xfer.py`, two `nixl_agent`s with the UCX
  backend in two processes, `UCX_TLS=tcp`, DRAM; ote_perftest's shapes: two
  transfers of BATCH descriptors in flight (two handles, each posted again
  once `check_xfer_state` says DONE; latency one at a time), KV as requests
  of 32 layers of 64 scattered 16 KiB descriptors (one `make_prepped_xfer`
  per layer over lists prepped once, all posted, then polled); 1 thread only.
- orbitte.nixl: the same script through `python -m orbitte.nixl.shim` (NIXL's
  Python API over the orbitte extension), `OTE_TLS=tcp OTE_NET_DEVICES=lo`:
  one tcp interface and one connection between the two processes, as
  ote_perftest --loopback has (both its processes listen on 127.0.0.1).
  "all interfaces": `OTE_TLS=tcp` alone, the agents' engines on 0.0.0.0
  (here lo and eth0), each peer's slices sprayed over both rails: two
  connections to the same host (no goal compares it).
- post 15000 (goals only): `contrib/bench/nixl_post.py --descs 15000 --size
  64`, the time from before one `make_prepped_xfer` of 15,000 scattered
  descriptors (numpy indices) to the return of `transfer()`, p50 of 50 posts
  (the wheel: 5); `contrib/bench/batch_post.c 15000 64 50`, libote's own
  `ote_batch_submit()` of 15,000 requests from C, beside it."""


def fnum(v):
    return float(v) if v not in ("", "-") else None


def fmt(x, lat):
    if x is None:
        return "-"
    return f"{x:.1f}" if lat and x >= 10 else f"{x:.2f}" if lat else f"{x:.3f}" if x < 1 else f"{x:.2f}"


# The goals: (what, numerator (workload, peer, "p50"|"p99"|"v"), denominator
# (the same, or None for an absolute figure), "<=" or ">=", bound)
TCP, CMA, SHM = "ote_perftest tcp", "ote_perftest cma", "ote_perftest shm"
GOALS = [
    ("tcp 8 B WRITE p50 / ucx_perftest am_lat", ("lat write", TCP, "p50"),
     ("lat write", "ucx_perftest tcp", "p50"), "<=", 1.5),
    ("tcp 8 B READ p50 / ucx_perftest am_lat", ("lat read", TCP, "p50"),
     ("lat write", "ucx_perftest tcp", "p50"), "<=", 1.5),
    ("tcp 8 B WRITE p99 / p50", ("lat write", TCP, "p99"), ("lat write", TCP, "p50"), "<=", 3),
    ("tcp 8 B READ p99 / p50", ("lat read", TCP, "p99"), ("lat read", TCP, "p50"), "<=", 3),
] + [
    (f"{tl} 8 B {op.upper()} p99 / p50", (f"lat {op}", peer, "p99"), (f"lat {op}", peer, "p50"),
     "<=", 3)
    for tl, peer in (("cma", CMA), ("shm", SHM)) for op in ("write", "read")
] + [
    ("cma 8 B WRITE p50, µs", ("lat write", CMA, "p50"), None, "<=", 10),
    ("cma 8 B READ p50, µs", ("lat read", CMA, "p50"), None, "<=", 10),
    ("shm 8 B WRITE p50, µs", ("lat write", SHM, "p50"), None, "<=", 10),
    ("shm 8 B READ p50, µs", ("lat read", SHM, "p50"), None, "<=", 10),
] + [
    (f"shm / memcpy, {SHAPES[sh]} {op.upper()}", (f"{sh} {op} T1", SHM, "v"),
     (f"{sh} {op} T1", "memcpy", "v"), ">=", 0.8)
    for sh in ("1m", "kv") for op in ("write", "read")
] + [
    (f"cma / ucx_perftest cma{tail}, 1 MiB x 8 {op.upper()}", (f"1m {op} T1", CMA, "v"),
     (f"1m {op} T1", f"ucx_perftest cma{tail}", "v"), ">=", 1.0)
    for tail in ("", ", 8 MiB") for op in ("write", "read")
] + [
    (f"tcp {SHAPES[sh]} / 1 MiB x 8, {op.upper()}", (f"{sh} {op} T1", TCP, "v"),
     (f"1m {op} T1", TCP, "v"), ">=", 0.8)
    for sh in ("4k", "kv") for op in ("write", "read")
]
# orbitte.nixl (NIXL's API over OrbitTE, contrib/bench/nixl_xfer.py through the
# shim): at least 0.9x ote_perftest on the same workload, ahead of NIXL's wheel,
# and one 15,000-descriptor make_prepped_xfer + transfer posted in under 5 ms
ONIXL, NIXLW = "orbitte.nixl tcp", "NIXL wheel, UCX tcp"
GOALS += [
    (f"orbitte.nixl / ote_perftest tcp, {SHAPES[sh]} {op.upper()}", (f"{sh} {op} T1", ONIXL, "v"),
     (f"{sh} {op} T1", TCP, "v"), ">=", 0.9)
    for sh in ("kv", "4k", "64k", "1m") for op in ("write", "read")
] + [
    (f"orbitte.nixl / NIXL wheel, {SHAPES[sh]} {op.upper()}", (f"{sh} {op} T1", ONIXL, "v"),
     (f"{sh} {op} T1", NIXLW, "v"), ">=", 1.0)
    for sh in ("kv", "4k", "64k", "1m") for op in ("write", "read")
] + [
    ("NIXL wheel 8 B WRITE p50 / orbitte.nixl", ("lat write", NIXLW, "p50"),
     ("lat write", ONIXL, "p50"), ">=", 1.0),
    ("NIXL wheel 8 B READ p50 / orbitte.nixl", ("lat read", NIXLW, "p50"),
     ("lat read", ONIXL, "p50"), ">=", 1.0),
    ("orbitte.nixl 15,000-descriptor make_prepped_xfer + transfer, p50 ms",
     ("post 15000", ONIXL, "v"), None, "<=", 5),
]
# orbitte.mooncake's sync batch calls (mc_batch_write.py): at least 0.9x
# ote_perftest at 64 KiB and 1 MiB; beside them, the same against
# ote_perftest with one batch in flight (-D 1), as a sync call has
OMC, TCP1 = "orbitte.mooncake tcp", "ote_perftest tcp, depth 1"
OMC2 = "orbitte.mooncake tcp, async depth 2"
GOALS += [
    (f"orbitte.mooncake async depth 2 / ote_perftest tcp, {SHAPES[sh]} {op.upper()}",
     (f"{sh} {op} T1", OMC2, "v"), (f"{sh} {op} T1", TCP, "v"), ">=", 0.9)
    for sh in ("64k", "1m") for op in ("write", "read")
] + [
    (f"orbitte.mooncake / ote_perftest tcp, {SHAPES[sh]} {op.upper()}", (f"{sh} {op} T1", OMC, "v"),
     (f"{sh} {op} T1", TCP, "v"), ">=", 0.9)
    for sh in ("64k", "1m") for op in ("write", "read")
] + [
    (f"orbitte.mooncake / ote_perftest tcp depth 1, {SHAPES[sh]} {op.upper()}",
     (f"{sh} {op} T1", OMC, "v"), (f"{sh} {op} T1", TCP1, "v"), "ref", None)
    for sh in ("64k", "1m") for op in ("write", "read")
]
# The small end against the host's own limit, without any library: tcp's
# 8-byte WRITE round trip within 1.2x the bare ping-pong's, 1 MiB x 8 at
# least 0.95x the bare stream (READ's round trip beside it, as a reference)
PING, STREAM = "tcp ping-pong, no library", "tcp stream, no library"
STREAM1 = "tcp stream, one connection"
GOALS += [
    (f"tcp 8 B WRITE p50 / {PING}", ("lat write", TCP, "p50"), ("lat write", PING, "p50"),
     "<=", 1.2),
] + [
    (f"tcp 1 MiB x 8 {op.upper()} / {STREAM}", (f"1m {op} T1", TCP, "v"),
     (f"1m {op} T1", STREAM, "v"), ">=", 0.95)
    for op in ("write", "read")
]
# References beside the goals, without a bound: the same ratios of the
# host's own tcp stream, and ote's rows against it
REFERENCES = [
    (f"tcp 8 B READ p50 / {PING}", ("lat read", TCP, "p50"), ("lat read", PING, "p50"),
     "ref", None),
] + [
    (f"{STREAM}, {SHAPES[sh]} / 1 MiB x 8, {op.upper()}",
     (f"{sh} {op} T1", STREAM, "v"), (f"1m {op} T1", STREAM, "v"), "ref", None)
    for sh in ("4k", "kv") for op in ("write", "read")
] + [
    (f"tcp {SHAPES[sh]} {op.upper()} / {STREAM}", (f"{sh} {op} T1", TCP, "v"),
     (f"{sh} {op} T1", STREAM, "v"), "ref", None)
    for sh in ("kv",) for op in ("write", "read")
] + [
    (f"tcp 1 MiB x 8 {op.upper()} / {STREAM1}", (f"1m {op} T1", TCP, "v"),
     (f"1m {op} T1", STREAM1, "v"), "ref", None)
    for op in ("write", "read")
] + [
    ("ote_batch_submit of 15,000 requests (C, contrib/bench/batch_post.c), p50 ms",
     ("post 15000", "ote_batch_submit tcp", "v"), None, "ref", None),
    ("NIXL wheel 15,000-descriptor make_prepped_xfer + transfer, p50 ms",
     ("post 15000", NIXLW, "v"), None, "ref", None),
    ("orbitte.nixl post / ote_batch_submit, 15,000", ("post 15000", ONIXL, "v"),
     ("post 15000", "ote_batch_submit tcp", "v"), "ref", None),
]


def load(results):
    """RESULTS as {(workload, peer): {round: (value, p99)}}, rounds in file order."""
    by_round = {}
    for line in open(results):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 5:
            by_round.setdefault((f[1], f[2]), {})[f[0]] = (fnum(f[3]), fnum(f[4]))
    return by_round


def median(by_round, key, peer):
    """The median value and p99 of (key, peer) over the rounds that have one (None
    where none has), and the rounds' (value, p99) pairs; the table's and the
    pictures' (plot.py) figures."""
    vals = list(by_round.get((key, peer), {}).values())
    v = [x for x, _ in vals if x is not None]
    p = [y for _, y in vals if y is not None]
    return (statistics.median(v) if v else None, statistics.median(p) if p else None, vals)


# run.sh --only nixl: the peers it runs, and the goals naming NIXL's peers
ONLY_PEERS = {"nixl": {TCP, PING, STREAM, ONIXL,
                        "orbitte.nixl tcp, all interfaces", NIXLW},
              "python": {TCP, TCP1, OMC, OMC2}}
ONLY_GOALS = {"nixl": {ONIXL, NIXLW, "ote_batch_submit tcp", PING, STREAM, STREAM1},
              "python": {OMC, OMC2}}


def goals(by_round, only=""):
    """Each goal's figure in every round (the ratio of two rows of the same round), their median."""
    def fig(ref, r):
        key, peer, what = ref
        if r not in by_round.get((key, peer), {}):
            return None
        v, p99 = by_round[(key, peer)][r]
        return p99 if what == "p99" else v

    print("The goals, each figure taken within a round (rows of the same minutes) "
          "and the median of the rounds; the rows marked reference have no bound:\n")
    print("| goal | rounds | median | bound | met |")
    print("|---|---|---|---|---|")
    for what, num, den, op, bound in GOALS + REFERENCES:
        if only and not ({num[1], den[1] if den else None} & ONLY_GOALS[only]):
            continue
        per = []
        for r in sorted(by_round.get(num[:2], {}), key=int):
            a = fig(num, r)
            b = fig(den, r) if den else 1.0
            per.append(a / b if a is not None and b else None)
        got = [x for x in per if x is not None]
        if not got:
            print(f"| {what} | - | - | {'reference' if op == 'ref' else f'{op} {bound}'} "
                  "| not measured |")
            continue
        med = statistics.median(got)
        shown = ", ".join("-" if x is None else f"{x:.2f}" for x in per)
        if op == "ref":
            print(f"| {what} | {shown} | {med:.2f} | reference | - |")
            continue
        met = med <= bound if op == "<=" else med >= bound
        print(f"| {what} | {shown} | {med:.2f} | {op} {bound} | {'yes' if met else 'no'} |")
    print()


def main():
    (results, commands, notes, start, commit, cpus, load0, load1, rounds,
     quick, thp) = sys.argv[1:12]
    only = sys.argv[12] if len(sys.argv) > 12 else ""
    by_round = load(results)  # (workload, peer) -> {round: (value, p99)}, in round order
    why = dict(line.rstrip("\n").split("\t", 1) for line in open(notes) if "\t" in line)

    keys = ["lat write", "lat read"] + [f"{s} {op} T{t}" for s in SHAPES
                                        for op in ("write", "read") for t in (1, 2)]

    def label(key):
        if key.startswith("lat"):
            return f"8 B latency, {key.split()[1].upper()}, p50 / p99 µs"
        shape, op, t = key.split()
        return f"{SHAPES[shape]}, {op.upper()}, {t[1:]} thr., GB/s"

    print(f"Taken {start}, commit {commit}, {cpus} CPUs, {thp}, load average {load0} at "
          f"the start and {load1} at the end; {rounds} interleaved round(s)"
          f"{' (--quick: short measurements)' if quick == '1' else ''}"
          f"{f'; --only {only}: the rows of its goals alone' if only else ''}. Median over the "
          "rounds; ratio = the peer's median / the median of the ote_perftest row named "
          "in the \"against\" column (above 1: more GB/s, or a longer latency).\n")
    print("| workload | peer | median | ratio | against | rounds |")
    print("|---|---|---|---|---|---|")
    shown = set()
    for key in keys:
        lat = key.startswith("lat")
        for peer, ref in PEERS.items():
            if (key, peer) not in by_round:
                continue
            shown.add(peer)
            v, p99, vals = median(by_round, key, peer)
            rv = median(by_round, key, ref)[0]
            ratio = f"{v / rv:.2f}" if v is not None and rv else "-"
            if lat:
                med = f"{fmt(v, True)} / {fmt(p99, True)}"
                per = ", ".join(fmt(x, True) for x, _ in vals)
            else:
                med = fmt(v, False)
                per = ", ".join(fmt(x, False) for x, _ in vals)
            note = why.get(f"{peer} {key}")
            if v is None and note:
                per += f" ({note})"
            print(f"| {label(key)} | {peer} | {med} | {ratio} | {ref} | {per} |")
    for peer in PEERS:
        if only and peer not in ONLY_PEERS[only]:
            continue
        if peer not in shown:
            print(f"| all | {peer} | - | - | - | not run: {why.get(peer, 'no figures')} |")
    print()
    goals(by_round, only)
    print("Latency ratios compare the p50s; rounds lists the p50 of each round "
          "(latency) or its GB/s. What each peer runs:\n")
    print(EQUIVALENTS)
    for peer, text in why.items():
        if peer in PEERS and peer in shown:
            print(f"- {peer}: {text}")
    print("\n<details><summary>Commands (those of the first round; ote_perftest is "
          "BUILD/src/tools/ote_perftest, PORT a fresh port per measurement, WHEELS the "
          "--wheels directory, ORBITTE the orbitte package with its extension built "
          "against BUILD)</summary>\n")
    print("```")
    for line in open(commands):
        key, peer, cmd = line.rstrip("\n").split("\t", 2)
        print(f"# {key} ({peer})\n{cmd}")
    print("```\n\n</details>")


if __name__ == "__main__":
    main()
