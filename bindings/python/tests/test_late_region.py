"""Regions a peer registers after the segment was opened, from Python, over
tcp, cma and shm: WRITEs of 4 KiB, 64 MiB and 65 MiB + 4 KiB into one land
with every byte checked by the peer, and an address the peer never
registered fails with REMOTE_NOT_REGISTERED (a RegionError), not the local
NOT_REGISTERED.

Run as a script (``--peer``) it is the target process: it prints its name,
then serves notifications: "late <len>" registers a new buffer of len bytes
and answers "region <addr>"; "check <off> <len> <seed>" answers "ok" or
"bad <offset>"; "quit" ends it.
"""
import os
import subprocess
import sys

import pytest

import orbitte

KIB = 1024
MIB = 1024 * KIB
LATE = 66 * MIB
BIG = 65 * MIB + 4 * KIB
_BLOCK = bytes(range(256)) * (LATE // 256 + 2)


def pattern(n, seed):
    """n bytes of (seed + i) % 256."""
    return _BLOCK[seed % 256:seed % 256 + n]


def peer_main():
    late = []
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        e.register(bytearray(4096))
        print(e.name, flush=True)
        for n in e.notifications(timeout=120):
            words = n.data.decode().split()
            if words[0] == "quit":
                return 0
            if words[0] == "late":
                buf = bytearray(int(words[1]))
                mem = e.register(buf)
                late.append((buf, mem))
                reply = f"region {mem.addr}".encode()
            else:
                off, length, seed = (int(w) for w in words[1:4])
                buf = late[-1][0]
                got = bytes(buf[off:off + length])
                if got == pattern(length, seed):
                    reply = b"ok"
                else:
                    want = pattern(length, seed)
                    reply = f"bad {next(i for i in range(length) if got[i] != want[i])}".encode()
            with e.open(n.sender) as back:
                e.send(back, reply)
    return 1


def ask(engine, seg, msg, timeout=60):
    engine.send(seg, msg.encode())
    for n in engine.notifications(timeout=timeout):
        return n.data.decode()
    raise AssertionError(f"no answer to {msg!r}")


def write(engine, seg, src_mem, remote, length):
    with engine.batch(1) as b:
        first = b.submit(seg, [(orbitte.WRITE, src_mem, remote, length)])
        b.wait(60)
        return b.status(first)


@pytest.mark.parametrize("tls", ["tcp", "cma", "\\shm"])
def test_late_region_every_size(tls, monkeypatch):
    monkeypatch.setenv("OTE_TLS", tls)
    peer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--peer"],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        name = peer.stdout.readline().strip()
        assert name, "the peer process did not start"
        with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
            src = bytearray(BIG)
            src_mem = e.register(src, access=0)
            with e.open(name) as seg:
                reply = ask(e, seg, f"late {LATE}")
                assert reply.startswith("region "), reply
                addr = int(reply.split()[1])
                assert addr not in [r.addr for r in seg.regions()]
                # The largest first: it found nothing before.
                for off, length, seed in ((0, BIG, 3), (4 * KIB, 64 * MIB, 4), (0, 4 * KIB, 5)):
                    src[:length] = pattern(length, seed + off)
                    st = write(e, seg, src_mem, addr + off, length)
                    assert st.state == orbitte.COMPLETED, orbitte.status_string(st.error)
                    assert st.transferred == length
                    assert ask(e, seg, f"check {off} {length} {seed + off}") == "ok"
                # Never registered: the peer's status, at every size.
                for length in (4 * KIB, BIG):
                    st = write(e, seg, src_mem, 0x1000, length)
                    assert st.state == orbitte.FAILED
                    assert st.error == orbitte.Status.REMOTE_NOT_REGISTERED
                    assert st.transferred == 0
                    assert orbitte.error_class(st.error) is orbitte.RegionError
                assert "remote" in orbitte.status_string(orbitte.Status.REMOTE_NOT_REGISTERED)
                e.send(seg, b"quit")
        assert peer.wait(timeout=30) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait(timeout=30)


if __name__ == "__main__" and "--peer" in sys.argv:
    sys.exit(peer_main())
