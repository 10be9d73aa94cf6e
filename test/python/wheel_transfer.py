"""Two processes of one Python environment move bytes with orbitte, and both
check that the orbitte and the libote they loaded are that environment's
own (run by test/python/run_wheel.sh with the venv a wheel was installed
into; nothing else of OrbitTE on any path).

Without arguments: the initiator; it starts itself with "target" as the
peer, WRITEs 4 MiB into the target's memory with a notification, READs
4 MiB of the target's pattern back, and checks every byte on both sides.
"""
import json
import os
import subprocess
import sys

import orbitte

LEN = 4 << 20


def pattern(seed):
    return bytes((i * 7 + seed) & 0xFF for i in range(256)) * (LEN // 256)


def libote_mapped():
    """The paths of every libote this process mapped."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sorted({line.split()[-1] for line in f
                       if "/libote.so" in line.split()[-1]})


def own_files():
    """Where orbitte and libote came from; exits unless from sys.prefix."""
    prefix = os.path.realpath(sys.prefix) + os.sep
    where = {"orbitte": os.path.realpath(orbitte.__file__), "libote": libote_mapped()}
    bad = [p for p in [where["orbitte"]] + where["libote"]
           if not os.path.realpath(p).startswith(prefix)]
    if not where["libote"] or bad:
        sys.exit(f"wheel_transfer: not this environment's own files ({sys.prefix}): {where}")
    return where


def target():
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        dst = bytearray(LEN)
        src = bytearray(pattern(5))
        dmem = e.register(dst)
        smem = e.register(src, access=orbitte.REMOTE_READ)
        print(json.dumps({"name": e.name, "dst": dmem.addr, "src": smem.addr,
                          "files": own_files()}), flush=True)
        for n in e.notifications(timeout=60):
            if n.data == b"written":
                break
        else:
            sys.exit("target: no notification within 60 s")
        want = pattern(3)
        bad = None if dst == want else next(i for i in range(LEN) if dst[i] != want[i])
        print("ok" if bad is None else f"bad byte {bad}", flush=True)
        sys.stdin.readline()  # the initiator's READ is done
        dmem.deregister()
        smem.deregister()


def initiator():
    if os.environ.get("LD_LIBRARY_PATH"):
        sys.exit("wheel_transfer: LD_LIBRARY_PATH is set")
    mine = own_files()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "target"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(p.stdout.readline() or "null")
        if info is None:
            sys.exit("wheel_transfer: the target did not start")
        with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
            out = bytearray(pattern(3))
            back = bytearray(LEN)
            omem = e.register(out, access=0)
            bmem = e.register(back, access=0)
            with e.open(info["name"]) as seg, e.batch() as b:
                b.submit(seg, [(orbitte.WRITE, omem, info["dst"], LEN)], notify=b"written")
                b.submit(seg, [(orbitte.READ, bmem, info["src"], LEN)])
                state = b.wait(timeout=60)
                sts = [b.status(t) for t in range(2)]
            if state != orbitte.COMPLETED:
                sys.exit(f"wheel_transfer: the batch ended {state}: {sts}")
            verdict = p.stdout.readline().strip()
            p.stdin.write("\n")
            p.stdin.flush()
            if verdict != "ok":
                sys.exit(f"wheel_transfer: the target's bytes: {verdict}")
            if back != pattern(5):
                bad = next(i for i in range(LEN) if back[i] != pattern(5)[i])
                sys.exit(f"wheel_transfer: READ back: byte {bad} differs")
        if p.wait(timeout=60) != 0:
            sys.exit(f"wheel_transfer: the target exited {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(f"wheel_transfer: 4 MiB written and 4 MiB read back between two processes, every "
          f"byte checked; orbitte from {mine['orbitte']}, libote from {mine['libote'][0]} "
          f"(target: {info['files']['libote'][0]})")


if __name__ == "__main__":
    if sys.argv[1:] == ["target"]:
        target()
    else:
        initiator()
