"""A target process for the orbitte.mooncake tests, written against the
Mooncake-style API only.

Initializes a TransferEngine (P2PHANDSHAKE, tcp, on 127.0.0.1), allocates a
managed buffer of argv[1] bytes (default 4 MiB) whose byte i is i % 251,
prints one JSON line {"name", "addr", "length"} and answers one line per
command read from stdin:

  check <off> <len> <seed>  "ok" if the range holds (seed + i) % 256, else "bad <i>"
  fill <off> <len> <seed>   writes that pattern, "ok"
  pristine                  "ok" if the whole buffer still holds i % 251, else "bad <i>"
  notifies <n> <seconds>    JSON [[name, msg], ...] once n arrived or the time passed
  quit
"""
import ctypes
import json
import sys
import time

import numpy as np

from orbitte.mooncake import TransferEngine


def view(addr, length):
    return np.ctypeslib.as_array((ctypes.c_uint8 * length).from_address(addr))


def first_bad(got, want):
    diff = np.flatnonzero(got != want)
    return None if diff.size == 0 else int(diff[0])


def seeded(seed, length):
    return ((np.arange(length, dtype=np.uint64) + seed) % 256).astype(np.uint8)


def original(length):
    return (np.arange(length, dtype=np.uint64) % 251).astype(np.uint8)


def main():
    length = int(sys.argv[1]) if len(sys.argv) > 1 else 4 << 20
    te = TransferEngine()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") != 0:
        return 1
    addr = te.allocate_managed_buffer(length)
    if addr == 0:
        return 1
    buf = view(addr, length)
    buf[:] = original(length)
    name = f"127.0.0.1:{te.get_rpc_port()}"
    print(json.dumps({"name": name, "addr": addr, "length": length}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            return 0
        if words[0] in ("check", "fill"):
            off, n, seed = (int(w) for w in words[1:4])
            if words[0] == "fill":
                buf[off:off + n] = seeded(seed, n)
                reply = "ok"
            else:
                bad = first_bad(buf[off:off + n], seeded(seed, n))
                reply = "ok" if bad is None else f"bad {bad}"
        elif words[0] == "pristine":
            bad = first_bad(buf, original(length))
            reply = "ok" if bad is None else f"bad {bad}"
        elif words[0] == "notifies":
            want, seconds = int(words[1]), float(words[2])
            got = []
            deadline = time.monotonic() + seconds
            while len(got) < want and time.monotonic() < deadline:
                got.extend([n.name, n.msg] for n in te.get_notifies())
                time.sleep(0.002)
            reply = json.dumps(got)
        else:
            reply = f"unknown {words[0]}"
        print(reply, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
