"""A target process for the two-process tests.

Registers a 1 MiB buffer whose bytes are i % 251, prints one JSON line
{"name", "addr", "length"}, then serves notifications: "check <off> <len>
<seed>" verifies that range holds (seed + i) % 256 and answers "ok" or "bad
<first wrong offset>"; "quit" ends it.
"""
import json
import sys

import orbitte

LEN = 1 << 20


def main():
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        buf = bytearray(i % 251 for i in range(LEN))
        mem = e.register(buf)
        print(json.dumps({"name": e.name, "addr": mem.addr, "length": LEN}), flush=True)
        for n in e.notifications(timeout=60):
            words = n.data.decode().split()
            if words[0] == "quit":
                return 0
            off, length, seed = (int(w) for w in words[1:4])
            want = bytes((seed + i) % 256 for i in range(length))
            got = bytes(buf[off:off + length])
            if got == want:
                reply = b"ok"
            else:
                bad = next(i for i in range(length) if got[i] != want[i])
                reply = f"bad {bad}".encode()
            with e.open(n.sender) as back:
                e.send(back, reply)
    return 1


if __name__ == "__main__":
    sys.exit(main())
