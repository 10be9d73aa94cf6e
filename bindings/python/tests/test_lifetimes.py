"""Lifetimes in the extension: what closing, releasing and garbage collection
do while memory is viewed, calls are in flight in other threads, transfers
still use the memory, or a conversion runs Python code; timeouts and
integer arguments out of range; read-only registrations. A scenario that
could crash the interpreter runs in a process of its own (tests/ on its
path), whose exit status and output are checked here."""
import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref

import pytest

import orbitte

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is installed by the test command
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
KIB = 1024


def run_script(code, *args, env=None, timeout=120):
    """code in a fresh interpreter; its CompletedProcess (a crash is its exit status)."""
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in sys.path if p])
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=e,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as x:
        raise AssertionError(f"the scenario did not end in {timeout} s:\n{x.stdout}\n{x.stderr}")


def assert_ok(r):
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK"), (
        f"exit status {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")


# ---- views of engine-owned memory ------------------------------------------------


def test_engine_close_refused_while_alloc_views_are_exported():
    """Engine.close() would free the memory of Engine.alloc() under a memoryview
    of it: it raises BufferError saying how many views are open, and the engine
    stays open (the views stay usable) until they are released."""
    r = run_script("""
        import orbitte
        e = orbitte.Engine(listen_addr="127.0.0.1:0")
        m = e.alloc(4096)
        v = memoryview(m)
        w = memoryview(m)[100:200]
        for _ in range(2):
            try:
                e.close()
            except BufferError as x:
                print("refused:", x)
            else:
                raise AssertionError("closed under two views")
        assert not e.closed and m.registered
        v[0] = 1
        w[0] = 2
        assert bytes(v[:1]) == b"\\x01" and v[100] == 2
        v.release()
        try:
            with e:
                pass
        except BufferError as x:
            print("refused:", x)
        else:
            raise AssertionError("closed under a view")
        w[1] = 3
        w.release()
        e.close()
        assert e.closed and not m.registered
        print("OK")
    """)
    assert_ok(r)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("refused: Engine.close(): 2 views of memory this engine "
                               "allocated (Engine.alloc) are still exported; release them")
    assert lines[2].startswith("refused: Engine.__exit__(): 1 view of memory")


def test_engine_outlives_views_of_its_memory():
    """A view holds its Memory, which holds the engine: the engine is not
    collected (nor closed) while a view of its memory exists."""
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    alive = weakref.ref(e)
    v = memoryview(e.alloc(4096))
    del e
    gc.collect()
    assert alive() is not None and not alive().closed
    v[:4] = b"kept"
    assert bytes(v[:4]) == b"kept"
    v.release()
    gc.collect()
    assert alive() is None


# ---- closing while another thread is inside a call -------------------------------

IN_FLIGHT = """
    import json, os, signal, sys, threading, time
    import orbitte
    from test_orbitte import stop

    info, pid = json.loads(sys.argv[1]), int(sys.argv[2])
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    mem = e.register(bytearray(64 * 1024), access=0)
    seg = e.open(info["name"])
    seg2 = e.open(info["name"])
    bt = e.batch()
    t = e.transfer(orbitte.WRITE, [mem.addr], [info["addr"] + 65536], [4096])
    stop(pid)
    bt.submit(seg, [(orbitte.WRITE, mem, info["addr"], 65536)])
    t.post(seg)
    out = {}
    ready = threading.Barrier(4)

    def call(name, f):
        ready.wait()
        try:
            out[name] = f()
        except orbitte.Error as x:
            out[name] = repr(x)

    threads = [threading.Thread(target=call, args=a) for a in
               (("wait", lambda: bt.wait(30)), ("refresh", seg2.refresh),
                ("twait", lambda: t.wait(30)))]
    for th in threads:
        th.start()
    ready.wait()
    time.sleep(0.5)   # each of them is in the library now, the GIL released
    refused = {}
    for name, f in (("release", bt.release), ("close", seg2.close), ("engine", e.close),
                    ("exit", lambda: e.__exit__(None, None, None))):
        try:
            f()
            refused[name] = None
        except orbitte.BusyError as x:
            refused[name] = str(x)
    print(json.dumps(refused), flush=True)
    assert all(refused.values()), refused
    assert not bt.closed and not seg2.closed and not e.closed
    os.kill(pid, signal.SIGCONT)
    for th in threads:
        th.join(60)
    assert out["wait"] == orbitte.COMPLETED and out["twait"] == orbitte.COMPLETED, out
    bt.release()
    seg2.close()
    t.release()
    e.send(seg, b"quit")
    e.close()
    print("OK")
"""


def test_close_refused_while_a_call_is_in_flight(peer):
    """Batch.release() during another thread's Batch.wait(), Segment.close()
    during its refresh(), Engine.close() during any of them (or a
    Transfer.wait()) would free what the library is using: each raises
    BusyError naming the call in flight and leaves the object open; once the
    calls returned they close."""
    p, info = peer
    r = run_script(IN_FLIGHT, json.dumps(info), str(p.pid))
    assert_ok(r)
    refused = json.loads(r.stdout.splitlines()[0])
    assert refused["release"].startswith("Batch.release(): Batch.wait() is in progress on "
                                         "this batch in another thread; the batch stays open")
    assert refused["close"].startswith("Segment.close(): Segment.refresh() is in progress on "
                                       "this segment in another thread")
    assert refused["engine"].startswith("Engine.close(): ")
    assert "(and 2 more calls)" in refused["engine"], refused["engine"]
    assert "the engine stays open" in refused["engine"]
    assert refused["exit"].startswith("Engine.__exit__(): ")
    for msg in refused.values():
        assert "(status -11)" in msg  # BUSY


# ---- submit converts first, then checks --------------------------------------------

CONVERSIONS = """
    import gc
    import orbitte
    a = orbitte.Engine(listen_addr="127.0.0.1:0")
    b = orbitte.Engine(listen_addr="127.0.0.1:0")
    dst = bytearray(8192)
    dmem = b.register(dst)
    src = bytearray(range(256)) * 32
    smem = a.register(src, access=0)
    seg = a.open(b.name)

    # an __index__ that empties the request list while it is converted
    reqs = []

    class Emptying:
        def __index__(self):
            reqs.clear()
            gc.collect()
            return orbitte.WRITE

    reqs += [(Emptying(), (smem, 0), dmem.addr, 100)]
    reqs += [(orbitte.WRITE, (smem, i), dmem.addr + i, 100) for i in range(100, 1000, 100)]
    with a.batch() as bt:
        assert bt.submit(seg, reqs) == 0
        assert bt.wait(10) == orbitte.COMPLETED
        assert bt.telemetry().requests == 10
    assert dst[:1000] == src[:1000]

    def refused(f, why):
        try:
            f()
        except orbitte.InvalidParamError as x:
            assert why in str(x), x
            print("refused:", x)
        else:
            raise AssertionError(f"not refused: {why}")

    class Doing:
        def __init__(self, f):
            self.f = f

        def __index__(self):
            self.f()
            return orbitte.WRITE

    bt = a.batch()
    refused(lambda: bt.submit(seg, [(Doing(bt.release), smem, dmem.addr, 10)]),
            "the batch is closed")
    bt = a.batch()
    seg2 = a.open(b.name)
    refused(lambda: bt.submit(seg2, [(orbitte.WRITE, smem, dmem.addr, 10),
                                     (Doing(seg2.close), smem, dmem.addr, 10)]),
            "the segment is closed")
    seg3 = a.open(b.name)

    def closing():
        seg3.close()
        yield smem.addr

    refused(lambda: bt.submit_arrays(seg3, orbitte.WRITE, closing(), [dmem.addr], 10),
            "the segment is closed")
    assert bt.telemetry().requests == 0
    refused(lambda: bt.submit(seg, [(Doing(a.close), smem, dmem.addr, 10)]),
            "the engine is closed")
    b.close()
    print("OK")
"""


def test_submit_converts_every_request_before_it_checks_and_posts():
    """A request's op may be any object with __index__, and submit_arrays takes
    generators: Python code that runs while the requests are converted, and
    may empty the request list, release the batch, close the segment or the
    engine. The requests are converted from a copy first; the batch, segment
    and engine are checked after (InvalidParamError, nothing submitted)."""
    r = run_script(CONVERSIONS, env={"PYTHONMALLOC": "debug"})
    assert_ok(r)
    assert r.stdout.count("refused:") == 4


# ---- timeouts ---------------------------------------------------------------------


def test_nan_timeouts_refused_and_long_ones_bounded(pair):
    """A NaN timeout is refused (its conversion to the library's int
    milliseconds is undefined); one beyond that int, infinity included, waits
    at most 2^31-1 ms; a negative one is refused."""
    a, b = pair
    dst, src = bytearray(4096), bytearray(b"t" * 4096)
    dmem, smem = b.register(dst), a.register(src, access=0)
    with a.open(b.name) as seg, a.batch() as bt:
        bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)])
        for bad in (float("nan"), -0.5):
            with pytest.raises(orbitte.InvalidParamError) as ei:
                bt.wait(bad)
            assert "Batch.wait()" in str(ei.value)
        assert "NaN" in str(pytest.raises(orbitte.InvalidParamError, bt.wait, float("nan")).value)
        for long in (float("inf"), 1e300, 2 ** 40):
            assert bt.wait(long) == orbitte.COMPLETED
        t = a.transfer(orbitte.WRITE, [smem.addr], [dmem.addr + 64], [64])
        t.post(seg)
        with pytest.raises(orbitte.InvalidParamError) as ei:
            t.wait(float("nan"))
        assert "Transfer.wait()" in str(ei.value) and "NaN" in str(ei.value)
        with pytest.raises(orbitte.InvalidParamError):
            t.poll(wait=float("nan"), repoll_us=100)
        assert t.wait(float("inf")) == orbitte.COMPLETED
        t.release()
    assert dst[:128] == src[:128]


# ---- integer arguments ------------------------------------------------------------


def test_register_and_alloc_arguments_out_of_range(engine):
    """Addresses, lengths and access flags out of range raise OverflowError
    instead of wrapping around (a negative address became one near 2^64,
    access=-1 every flag)."""
    buf = bytearray(4096)
    for bad in ((-4096, 4096), (4096, -1), (1 << 64, 4096), (4096, 1 << 64),
                (1 << 63, 1 << 63)):
        with pytest.raises(OverflowError):
            engine.register(bad)
    for access in (-1, 1 << 32, -(1 << 70)):
        with pytest.raises(OverflowError):
            engine.register(buf, access=access)
        with pytest.raises(OverflowError):
            engine.register((id(buf), 16), access=access)
        with pytest.raises(OverflowError):
            engine.alloc(4096, access=access)
    m = engine.register(buf, access=orbitte.REMOTE_READ)
    assert m.access == orbitte.REMOTE_READ
    # alloc's length: outside 0 .. 2^64-1 OverflowError, inside the library's answer
    for bad in (-1, 1 << 64):
        with pytest.raises(OverflowError):
            engine.alloc(bad)
    with pytest.raises(orbitte.NoMemoryError):
        engine.alloc(1 << 63)
    with pytest.raises(TypeError):
        engine.alloc("4096")
    if np is not None:  # any integer with __index__
        assert engine.alloc(4096, access=np.uint8(orbitte.REMOTE_WRITE)).access == \
            orbitte.REMOTE_WRITE


def test_request_ranges_checked(pair):
    """A request's range past the end of the address space is OverflowError
    and a zero length InvalidParamError, naming the request, from submit,
    submit_arrays and Engine.transfer alike (before, the library's
    "invalid parameter", and Engine.transfer took them until post)."""
    a, b = pair
    dmem = b.register(bytearray(4096))
    smem = a.register(bytearray(4096), access=0)
    top = (1 << 64) - 16
    with a.open(b.name) as seg, a.batch() as bt:
        for remote, local, n in ((top, smem.addr, 64), (dmem.addr, top, 64)):
            with pytest.raises(OverflowError, match="request 0"):
                bt.submit(seg, [(orbitte.WRITE, local, remote, n)])
            with pytest.raises(OverflowError, match="request 1"):
                bt.submit_arrays(seg, orbitte.WRITE, [smem.addr, local], [dmem.addr, remote], n)
            with pytest.raises(OverflowError, match="request 0"):
                a.transfer(orbitte.WRITE, [local], [remote], [n])
        with pytest.raises(orbitte.InvalidParamError, match="length 0"):
            bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 0)])
        with pytest.raises(orbitte.InvalidParamError, match="length 0"):
            a.transfer(orbitte.WRITE, [smem.addr], [dmem.addr], [0])
        first = bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)])
        bt.wait(10)
        assert bt.status(first).state == orbitte.COMPLETED
        for call in (bt.status, bt.cancel, bt.notify_status):
            with pytest.raises(orbitte.InvalidParamError, match="no such task"):
                call(first + 99)


def test_task_ids_any_integer(pair):
    """status(task), cancel(task) and notify_status(task) take any integer
    with __index__ (numpy's)."""
    np_ = pytest.importorskip("numpy")
    a, b = pair
    dmem = b.register(bytearray(4096))
    smem = a.register(bytearray(4096), access=0)
    with a.open(b.name) as seg, a.batch() as bt:
        first = bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)], notify=b"n")
        bt.wait(10)
        for task in (np_.int64(first), np_.uint32(first), first):
            assert bt.status(task).state == orbitte.COMPLETED
            assert bt.notify_status(task) == orbitte.Status.OK
            bt.cancel(task)
        with pytest.raises(TypeError):
            bt.status(1.0)
        with pytest.raises(orbitte.InvalidParamError):
            bt.status(np_.int64(-1))


# ---- pinned host memory -------------------------------------------------------------


def cuda_double():
    """The CUDA test double of the build tree whose libote this process loaded."""
    import orbitte._ote  # noqa: F401 - maps libote
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "/libote.so" in line}
    for lib in libs:
        build = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
        path = os.path.join(build, "test", "unit", "cuda", ".libs", "libote_cuda_double.so")
        if os.path.exists(path):
            return path
    return None


def test_cuda_host_memory_exports_a_buffer():
    """alloc(location="cuda_host:N") is pinned host memory (src/mem/alloc.c): it
    exports the buffer protocol; "cuda:N" memory does not (run on the CUDA
    test double, OTE_CUDA_LIB)."""
    double = cuda_double()
    if double is None:
        pytest.skip("no CUDA test double in the build tree of this libote")
    r = run_script("""
        import orbitte
        with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
            m = e.alloc(8192, location="cuda_host:0")
            with memoryview(m) as v:
                v[:6] = b"pinned"
                assert bytes(v[:6]) == b"pinned" and len(v) == 8192
            d = e.alloc(8192, location="cuda:0")
            try:
                memoryview(d)
            except BufferError as x:
                print("device:", x)
            else:
                raise AssertionError("device memory exported a buffer")
            m.deregister()
            d.deregister()
        print("OK")
    """, env={"OTE_CUDA_LIB": double})
    assert_ok(r)
    assert "device: device memory has no host buffer" in r.stdout


# ---- read-only registrations ---------------------------------------------------------


def test_read_into_read_only_memory_refused_on_every_path(pair):
    """A local READ range overlapping a read-only registration is refused
    whatever names it: a Memory, an int address, submit_arrays, a Transfer
    (at Engine.transfer and, for registrations made since, at post); the
    immutable bytes stay as they were. WRITEs from it go."""
    a, b = pair
    remote = bytearray(b"R" * 4096)
    rmem = b.register(remote)
    ro = b"0123456789abcdef" * 16
    rom = a.register(ro, access=orbitte.REMOTE_READ)
    other = bytearray(4096)
    omem = a.register(other, access=0)
    with a.open(b.name) as seg, a.batch() as bt:
        for local, n in ((rom, 16), (rom.addr, 16), (rom.addr + 100, 8), ((rom, 250), 6),
                         (rom.addr - 8, 16)):
            with pytest.raises(orbitte.InvalidParamError) as ei:
                bt.submit(seg, [(orbitte.WRITE, omem, rmem.addr, 8),
                                (orbitte.READ, local, rmem.addr, n)])
            assert "request 1 READs into" in str(ei.value)
            assert f"read-only memory registered at [{rom.addr:#x}, " \
                   f"{rom.addr + len(ro):#x})" in str(ei.value)
        with pytest.raises(orbitte.InvalidParamError):
            bt.submit_arrays(seg, orbitte.READ, [omem.addr, rom.addr + 16], [rmem.addr] * 2, 16)
        with pytest.raises(orbitte.InvalidParamError) as ei:
            a.transfer(orbitte.READ, [omem.addr, rom.addr], [rmem.addr, rmem.addr], [8, 8])
        assert "Engine.transfer()" in str(ei.value)
        assert bt.telemetry().requests == 0
        # ranges next to it and WRITEs from it go
        assert bt.submit(seg, [(orbitte.READ, omem, rmem.addr, 64),
                               (orbitte.WRITE, rom, rmem.addr + 64, len(ro))]) == 0
        assert bt.wait(10) == orbitte.COMPLETED
        assert other[:64] == b"R" * 64 and bytes(remote[64:64 + len(ro)]) == ro
    assert ro == b"0123456789abcdef" * 16
    # registered read-only after the Transfer was made: refused at its post
    ro2 = bytes(4096)
    m2 = a.register(ro2, access=0)
    addr = m2.addr
    m2.deregister()
    t = a.transfer(orbitte.READ, [addr + 8], [rmem.addr], [8])
    m2 = a.register(ro2, access=0)
    with a.open(b.name) as seg:
        with pytest.raises(orbitte.InvalidParamError) as ei:
            t.post(seg)
        assert "Transfer.post()" in str(ei.value)
        m2.deregister()   # no longer a registration: the library says NOT_REGISTERED
        with pytest.raises(orbitte.RegionError):
            t.post(seg)
    assert ro2 == bytes(4096)
    t.release()


# ---- garbage collection ---------------------------------------------------------------


def test_cycles_through_an_engine_are_collected():
    """An orbitte.Engine is a Python class with a __dict__: objects kept there
    hold the engine back. The collector breaks such cycles and every object is
    released, the engine last (its threads and port with it)."""
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    alive = weakref.ref(e)
    name = e.name
    buf = bytearray(4096)
    e.buf = e.alloc(4096)
    e.mem = e.register(buf)
    e.seg = e.open(e.name)
    e.bt = e.batch()
    e.bt.submit(e.seg, [(orbitte.WRITE, e.buf, e.mem.addr, 4096)])
    e.t = e.transfer(orbitte.WRITE, [e.buf.addr], [e.mem.addr], [16])
    e.objects = [e.buf, e.mem, e.seg, e.bt, e.t]
    del e
    gc.collect()
    assert alive() is None
    buf.extend(b"x")  # the registration let go of its export
    # the port is free again
    with orbitte.Engine(listen_addr=name) as again:
        assert again.name == name


HELD = """
    import gc, json, os, signal, sys, time, weakref
    import orbitte
    from test_orbitte import stop

    info, pid = json.loads(sys.argv[1]), int(sys.argv[2])
    n = 256 * 1024
    want = bytes(i % 251 for i in range(n))

    class Buf(bytearray):  # can be referenced weakly
        pass

    def resizable(b):
        try:
            b.extend(b"x")
        except BufferError:
            return False
        del b[-1]
        return True

    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    seg = e.open(info["name"])

    # A batch with a READ into a registration nothing else references; its buffer's weakref.
    def orphan_read():
        bt = e.batch()
        buf = Buf(n)
        bt.submit(seg, [(orbitte.READ, e.register(buf, access=0), info["addr"], n)])
        return bt, weakref.ref(buf)

    stop(pid)
    bt, gone = orphan_read()
    gc.collect()
    assert gone() is not None, "the buffer was freed under its READ"
    # one deregistered while the READ runs keeps its buffer exported
    buf2 = bytearray(n)
    m2 = e.register(buf2, access=0)
    bt.submit(seg, [(orbitte.READ, (m2, 0), info["addr"], n)])
    m2.deregister()
    assert not m2.registered and not resizable(buf2)
    # the batch released while its tasks run: the engine keeps what it held
    bt.release()
    gc.collect()
    assert gone() is not None and not resizable(buf2)
    os.kill(pid, signal.SIGCONT)
    end = time.monotonic() + 60
    while gone() is not None:   # an engine call after the READs ended lets go
        assert time.monotonic() < end, "still held"
        e.batch().release()
        gc.collect()
        time.sleep(0.01)
    assert resizable(buf2) and bytes(buf2) == want

    # released with tasks in flight, then the engine closed: let go of at close
    stop(pid)
    bt, gone = orphan_read()
    bt.release()
    gc.collect()
    assert gone() is not None
    e.close()
    gc.collect()
    assert gone() is None

    # and an engine nothing references but such a batch: collected, destroyed
    os.kill(pid, signal.SIGCONT)
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    engine_gone = weakref.ref(e)
    seg = e.open(info["name"])
    stop(pid)
    bt = e.batch()
    buf = Buf(n)
    gone = weakref.ref(buf)
    bt.submit(seg, [(orbitte.READ, e.register(buf, access=0), info["addr"], n)])
    bt.release()
    del e, seg, bt, buf
    gc.collect()
    assert engine_gone() is None and gone() is None
    os.kill(pid, signal.SIGCONT)
    print("OK")
"""


def test_batch_holds_the_memory_its_tasks_use(peer):
    """The engine READs into a registered buffer until the task ends: the
    batch holds each Memory given as a local until it is released and its
    tasks have ended, and a Memory deregistered meanwhile keeps its buffer
    exported until then (the library's registration itself is dropped at
    once). Closing or collecting the engine ends the tasks and lets go."""
    p, info = peer
    r = run_script(HELD, json.dumps(info), str(p.pid))
    assert_ok(r)


def test_what_a_batch_holds_goes_with_it(pair):
    """A submit that raises holds nothing; a batch whose tasks ended lets go
    of its memory at release(): a Memory deregistered meanwhile then lets
    go of its buffer (a bytearray can be resized again)."""
    a, b = pair
    dmem = b.register(bytearray(4096))
    buf1, buf2 = bytearray(4096), bytearray(4096)
    m1, m2 = a.register(buf1, access=0), a.register(buf2, access=0)
    with a.open(b.name) as seg:
        bt = a.batch(1)
        bt.submit(seg, [(orbitte.WRITE, m1, dmem.addr, 8)])
        with pytest.raises(orbitte.BusyError):  # the batch is full: nothing submitted
            bt.submit(seg, [(orbitte.WRITE, (m2, 8), dmem.addr, 8),
                            (orbitte.WRITE, m2, dmem.addr, 8)])
        m2.deregister()
        buf2.extend(b"x")   # not held
        assert bt.wait(10) == orbitte.COMPLETED
        m1.deregister()
        with pytest.raises(BufferError):
            buf1.extend(b"x")   # held until the batch lets go
        bt.release()
        buf1.extend(b"x")


def test_deregister_raises_while_views_are_exported_also_when_void():
    """The releasing calls are idempotent on void objects, but
    Memory.deregister() raises BufferError (nothing done) while a view of the
    memory is exported, void or not (docs/python.md)."""
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    buf = bytearray(4096)
    m = e.register(buf)
    v = memoryview(m)
    e.close()
    assert not m.registered
    for _ in range(2):
        with pytest.raises(BufferError):
            m.deregister()
    v[0] = 7
    assert buf[0] == 7
    v.release()
    assert m.deregister() is None and m.deregister() is None
    buf.extend(b"x")
