"""The orbitte package: transfers with every byte checked, notifications, every
error path, the GIL released while waiting, no leaks."""
import asyncio
import gc
import os
import random
import signal
import threading
import time
import tracemalloc

import pytest

import orbitte

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is installed by the test command
    np = None

KIB = 1024
MIB = 1024 * KIB


def pattern(n, seed):
    return bytearray((seed + i) % 256 for i in range(n))


def stop(pid):
    """SIGSTOP pid and return once the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError("the peer did not stop")


def run(engine, seg, reqs, notify=None, timeout=10):
    with engine.batch(len(reqs)) as b:
        first = b.submit(seg, reqs, notify=notify)
        state = b.wait(timeout)
        statuses = [b.status(first + i) for i in range(len(reqs))]
        nstatus = b.notify_status(first) if notify is not None else None
    return state, statuses, nstatus


# ---- data ----------------------------------------------------------------------


def test_write_and_read_between_two_engines(pair):
    a, b = pair
    dst = bytearray(MIB)
    src = pattern(MIB, 7)
    back = bytearray(MIB)
    dmem = b.register(dst)
    smem = a.register(src, access=0)
    bmem = a.register(back, access=0)
    with a.open(b.name) as seg:
        assert [(r.addr, r.length, r.access) for r in seg.regions()] == [
            (dmem.addr, MIB, orbitte.REMOTE_READ | orbitte.REMOTE_WRITE)]
        state, st, _ = run(a, seg, [(orbitte.WRITE, (smem, 0), dmem.addr, MIB // 2),
                                    (orbitte.WRITE, (smem, MIB // 2), dmem.addr + MIB // 2,
                                     MIB // 2)])
        assert state == orbitte.COMPLETED
        assert [s.state for s in st] == [orbitte.COMPLETED] * 2
        assert sum(s.transferred for s in st) == MIB
        assert dst == src
        dst[100:200] = bytes(range(100))
        state, st, _ = run(a, seg, [(orbitte.READ, bmem.addr, dmem.addr, MIB)])
        assert state == orbitte.COMPLETED and back == dst


def test_numpy_arrays_and_submit_arrays(pair):
    a, b = pair
    n, blk = 64, 16 * KIB
    pool = np.zeros(n * blk, dtype=np.uint8)
    src = np.arange(n * blk, dtype=np.uint32).view(np.uint8)[: n * blk].copy()
    pmem = b.register(pool)
    smem = a.register(src, access=0)
    order = np.random.default_rng(1).permutation(n).astype(np.uint64)
    local = smem.addr + np.arange(n, dtype=np.uint64) * blk
    remote = pmem.addr + order * blk
    with a.open(b.name) as seg, a.batch(n) as bt:
        first = bt.submit_arrays(seg, orbitte.WRITE, local, remote, blk)
        assert first == 0
        assert bt.wait(10) == orbitte.COMPLETED
    for i in range(n):
        o = int(order[i])
        assert np.array_equal(pool[o * blk:(o + 1) * blk], src[i * blk:(i + 1) * blk])


def test_submit_arrays_lists_of_ints(pair):
    """Lists of Python ints (addresses: ints of several digits) convert to
    64 bits in C: the bytes land where they say; an item below 0, at 2^64 or
    that is not an int refuses the whole call and posts nothing."""
    a, b = pair
    n, blk = 32, 4 * KIB
    pmem = b.alloc(2 * n * blk)
    src = pattern(n * blk, 5)
    smem = a.alloc(n * blk)  # mapped: an address above 2^30, as buffers have
    with memoryview(smem) as v:
        v[:] = src
    slots = list(range(2 * n))
    random.Random(7).shuffle(slots)
    local = [smem.addr + i * blk for i in range(n)]
    remote = [pmem.addr + slots[i] * blk for i in range(n)]
    assert min(local + remote) >= 1 << 30, (hex(min(local)), hex(min(remote)))  # several digits
    view = memoryview(pmem)
    with a.open(b.name) as seg, a.batch(n + 1) as bt:
        for bad, exc in (([-1], OverflowError), ([1 << 64], OverflowError),
                         ([float(smem.addr)], TypeError), (["1"], TypeError)) + (
                             (([np.uint64(smem.addr)], TypeError),) if np is not None else ()):
            with pytest.raises(exc):
                bt.submit_arrays(seg, orbitte.WRITE, bad * n, remote, blk)
            with pytest.raises(exc):
                bt.submit_arrays(seg, orbitte.WRITE, local, remote[:-1] + bad, blk)
            with pytest.raises(exc):
                bt.submit_arrays(seg, orbitte.WRITE, local, remote, [blk] * (n - 1) + bad)
        assert bt.submit_arrays(seg, orbitte.WRITE, local, remote, [blk] * n) == 0
        assert bt.wait(10) == orbitte.COMPLETED
        # a remote address past 2^63 converts, and fails as an address
        assert bt.submit_arrays(seg, orbitte.WRITE, local[:1], [1 << 63], blk) == n
        assert bt.wait(10) != orbitte.COMPLETED
        assert bt.status(n).state != orbitte.COMPLETED
    for i in range(n):
        o = slots[i] * blk
        assert view[o:o + blk].tobytes() == bytes(src[i * blk:(i + 1) * blk])
    view.release()


def test_alloc_exports_a_buffer(pair):
    a, b = pair
    m = b.alloc(64 * KIB)
    view = memoryview(m)
    assert len(view) == 64 * KIB and m.addr != 0
    src = pattern(64 * KIB, 3)
    smem = a.register(src, access=0)
    with a.open(b.name) as seg:
        state, _, _ = run(a, seg, [(orbitte.WRITE, smem, m.addr, 64 * KIB)])
    assert state == orbitte.COMPLETED and view.tobytes() == bytes(src)
    with pytest.raises(BufferError):
        m.deregister()  # a view is still exported
    view.release()
    m.deregister()
    assert not m.registered


def test_register_address_tuple_and_array_interface(pair):
    a, b = pair
    dst = np.zeros(4 * KIB, dtype=np.uint8)

    class Raw:
        __array_interface__ = dst.__array_interface__

    raw = Raw()
    dmem = b.register(raw)
    assert (dmem.addr, dmem.length) == (dst.ctypes.data, 4 * KIB)
    src = np.full(4 * KIB, 9, dtype=np.uint8)
    smem = a.register((src.ctypes.data, src.nbytes), access=0)
    with a.open(b.name) as seg:
        state, _, _ = run(a, seg, [(orbitte.WRITE, smem.addr, dmem.addr, 4 * KIB)])
    assert state == orbitte.COMPLETED and (dst == 9).all()


def test_torch_tensors(pair):
    torch = pytest.importorskip("torch")
    a, b = pair
    dst = torch.zeros(1024, dtype=torch.float32)
    src = torch.arange(1024, dtype=torch.float32)
    dmem = b.register(dst)
    smem = a.register(src, access=0)
    assert dmem.length == 4096
    with a.open(b.name) as seg:
        state, _, _ = run(a, seg, [(orbitte.WRITE, smem, dmem.addr, 4096)])
    assert state == orbitte.COMPLETED and torch.equal(dst, src)


def test_two_processes(peer, engine):
    p, info = peer
    base, length = info["addr"], info["length"]
    mine = bytearray(length)
    mem = engine.register(mine, access=0)
    with engine.open(info["name"]) as seg:
        # READ the peer's whole buffer: i % 251
        state, _, _ = run(engine, seg, [(orbitte.READ, mem, base, length)])
        assert state == orbitte.COMPLETED
        assert mine == bytearray(i % 251 for i in range(length))
        # WRITE a range; the peer checks it and answers
        off, n, seed = 4096, 200 * KIB, 42
        mine[off:off + n] = pattern(n, seed)
        state, _, ns = run(engine, seg, [(orbitte.WRITE, (mem, off), base + off, n)],
                           notify=f"check {off} {n} {seed}".encode())
        assert state == orbitte.COMPLETED and ns == orbitte.Status.OK
        replies = [x.data for x in engine.notifications(timeout=20)
                   if x.data.startswith((b"ok", b"bad"))][:1]
        assert replies == [b"ok"]
        engine.send(seg, b"quit")
    assert p.wait(timeout=20) == 0


# ---- notifications ----------------------------------------------------------------


def test_notifications_in_order_once(pair):
    a, b = pair
    with a.open(b.name) as seg:
        for i in range(200):
            a.send(seg, b"n%d" % i)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 200 and time.monotonic() < deadline:
        got += [n.data for n in b.recv(max=50)]
    assert got == [b"n%d" % i for i in range(200)]
    assert b.recv() == []
    assert {n.sender for n in []} == set()


def test_notification_sender_and_limits(pair):
    a, b = pair
    with a.open(b.name) as seg:
        a.send(seg, b"x" * orbitte.NOTIFY_MAX)
        with pytest.raises(orbitte.InvalidParamError):
            a.send(seg, b"x" * (orbitte.NOTIFY_MAX + 1))
    (n,) = list(b.notifications(timeout=5))
    assert n.sender == a.name and n.data == b"x" * orbitte.NOTIFY_MAX


def test_notifications_iterator_times_out(engine):
    t0 = time.monotonic()
    assert list(engine.notifications(timeout=0.3)) == []
    assert 0.25 <= time.monotonic() - t0 < 5


def test_event_fd_with_asyncio(pair):
    a, b = pair

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def ready():
            b.clear_event()
            got = b.recv()
            if got and not fut.done():
                fut.set_result(got)

        loop.add_reader(b.fileno(), ready)
        try:
            with a.open(b.name) as seg:
                await loop.run_in_executor(None, a.send, seg, b"async")
            return await asyncio.wait_for(fut, 10)
        finally:
            loop.remove_reader(b.fileno())

    got = asyncio.run(main())
    assert [n.data for n in got] == [b"async"]


# ---- errors ------------------------------------------------------------------------


def test_error_classes():
    for status in orbitte.Status:
        if status <= 0 and status != orbitte.Status.OK:
            cls = orbitte.error_class(status)
            assert issubclass(cls, orbitte.Error)
            e = cls(status)
            assert e.status == status and e.message == orbitte.status_string(status)
            assert str(int(status)) in str(e)
    assert issubclass(orbitte.PeerRestartedError, orbitte.ConnectionError)
    assert issubclass(orbitte.TimeoutError, TimeoutError)
    assert issubclass(orbitte.InvalidParamError, ValueError)


def test_open_errors(engine):
    with pytest.raises(orbitte.NotFoundError) as ei:
        engine.open("127.0.0.1:1")
    assert ei.value.status == orbitte.Status.NOT_FOUND
    assert "Engine.open('127.0.0.1:1')" in str(ei.value)
    with pytest.raises(orbitte.Error) as ei:
        engine.open("not a name")
    assert ei.value.status in (orbitte.Status.NOT_FOUND, orbitte.Status.INVALID_PARAM)


def test_engine_params_refused():
    # Nobody listens on port 1 of loopback: the store does not answer.
    with pytest.raises(orbitte.ConnectionError) as ei:
        orbitte.Engine(listen_addr="127.0.0.1:0", metadata="etcd://127.0.0.1:1")
    assert ei.value.status == orbitte.Status.STORE_UNAVAILABLE
    with pytest.raises(orbitte.InvalidParamError):
        orbitte.Engine(listen_addr="127.0.0.1:0", metadata="etcd:/127.0.0.1:2379")
    with pytest.raises(orbitte.InvalidParamError):
        orbitte.Engine(name="decode-0", listen_addr="127.0.0.1:0")


def test_submit_errors(pair):
    a, b = pair
    dst = bytearray(8 * KIB)
    ro = bytearray(4 * KIB)
    dmem = b.register(dst)
    romem = b.register(ro, access=orbitte.REMOTE_READ)
    src = bytearray(8 * KIB)
    smem = a.register(src, access=0)
    unregistered = bytearray(64)
    with a.open(b.name) as seg:
        with a.batch(1) as bt:
            # local range not registered: nothing submitted
            with pytest.raises(orbitte.RegionError) as ei:
                bt.submit(seg, [(orbitte.WRITE, (id(unregistered) + 4096) & ~4095,
                                 dmem.addr, 64)])
            assert ei.value.status == orbitte.Status.NOT_REGISTERED
            with pytest.raises(orbitte.InvalidParamError):
                bt.submit(seg, [(7, smem, dmem.addr, 64)])
            with pytest.raises(TypeError):
                bt.submit(seg, [(orbitte.WRITE, "x", dmem.addr, 64)])
            with pytest.raises(orbitte.InvalidParamError):
                bt.submit(seg, [])
            bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)])
            with pytest.raises(orbitte.BusyError):  # capacity 1
                bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)])
        # remote errors end the task with the status
        state, st, _ = run(a, seg, [(orbitte.WRITE, smem, dmem.addr + 4 * KIB, 8 * KIB)])
        assert state == orbitte.FAILED and st[0].error == orbitte.Status.OUT_OF_BOUNDS
        state, st, _ = run(a, seg, [(orbitte.WRITE, smem, romem.addr, 64)])
        assert state == orbitte.FAILED and st[0].error == orbitte.Status.ACCESS
        # a failed task's notification is not sent, and says why
        state, st, ns = run(a, seg, [(orbitte.WRITE, smem, romem.addr, 64)], notify=b"no")
        assert state == orbitte.FAILED and ns == orbitte.Status.ACCESS
    assert b.recv() == []
    with pytest.raises(orbitte.InvalidParamError):
        seg.regions()  # closed


def test_register_errors(engine):
    with pytest.raises(orbitte.InvalidParamError):
        engine.register(b"immutable")  # bytes are read-only: no REMOTE_WRITE
    m = engine.register(b"immutable", access=orbitte.REMOTE_READ)
    assert m.length == 9
    with pytest.raises(TypeError):
        engine.register(object())
    with pytest.raises(orbitte.InvalidParamError):
        engine.register((0, 0))


def test_read_into_read_only_memory_refused(pair):
    a, b = pair
    dmem = b.register(bytearray(64))
    rom = a.register(b"0123456789", access=orbitte.REMOTE_READ)
    with a.open(b.name) as seg, a.batch() as bt:
        with pytest.raises(orbitte.InvalidParamError):
            bt.submit(seg, [(orbitte.READ, rom, dmem.addr, 10)])


def test_closed_engine_voids_its_objects():
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    m = e.register(bytearray(4096))
    seg = e.open(e.name)
    bt = e.batch()
    e.close()
    assert e.closed and seg.closed and not m.registered
    for call in (lambda: e.name, lambda: seg.regions(), lambda: bt.wait(1),
                 lambda: e.register(bytearray(1))):
        with pytest.raises(orbitte.InvalidParamError):
            call()
    m.deregister()
    e.close()


def test_releasing_calls_after_engine_close_are_idempotent():
    """After Engine.close(): deregister(), close(), release() and leaving a
    with block do nothing more than let go of what the Python object holds
    (a registered bytearray can be resized again), any number of times;
    every other call, entering a with block included, raises
    InvalidParamError (docs/python.md)."""
    e = orbitte.Engine(listen_addr="127.0.0.1:0")
    buf = bytearray(4096)
    m = e.register(buf)
    seg = e.open(e.name)
    bt = e.batch()
    assert not bt.closed
    e.close()
    assert bt.closed and seg.closed and not m.registered
    for obj in (m, seg, bt):
        with pytest.raises(orbitte.InvalidParamError):
            with obj:
                pass
    for call in (lambda: bt.status(), lambda: bt.cancel(0), lambda: seg.refresh(),
                 lambda: e.open(e.name), lambda: e.batch()):
        with pytest.raises(orbitte.InvalidParamError):
            call()
    with pytest.raises(BufferError):
        buf.extend(b"x")  # still exported to the Memory
    for _ in range(2):
        assert m.deregister() is None
        assert seg.close() is None
        assert bt.release() is None
        assert m.__exit__(None, None, None) is False
        assert seg.__exit__(None, None, None) is False
        assert bt.__exit__(None, None, None) is False
        e.close()
    buf.extend(b"x")  # deregister() let go of it
    assert len(buf) == 4097


def test_released_objects_refuse_use():
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        m = e.register(bytearray(64))
        bt = e.batch()
        bt.release()
        assert bt.closed
        m.deregister()
        for obj in (m, bt):
            with pytest.raises(orbitte.InvalidParamError):
                with obj:
                    pass
        with e.open(e.name) as seg:
            pass
        with pytest.raises(orbitte.InvalidParamError):
            with seg:
                pass


def test_listen_address_in_use_is_io_error():
    """ote_engine_create: a listen address another engine holds is
    OTE_ERR_IO (include/ote/ote.h)."""
    with orbitte.Engine(listen_addr="127.0.0.1:0") as a:
        with pytest.raises(orbitte.IOError) as ei:
            orbitte.Engine(listen_addr=a.name)
        assert ei.value.status == orbitte.Status.IO and isinstance(ei.value, OSError)


def test_wait_times_out_then_peer_resumes(peer, engine):
    p, info = peer
    mine = pattern(64 * KIB, 5)
    mem = engine.register(mine, access=0)
    with engine.open(info["name"]) as seg:
        stop(p.pid)
        try:
            with engine.batch() as bt:
                bt.submit(seg, [(orbitte.WRITE, mem, info["addr"], 64 * KIB)])
                with pytest.raises(orbitte.TimeoutError) as ei:
                    bt.wait(timeout=0.3)
                assert ei.value.status == orbitte.Status.TIMEOUT
                assert bt.status() == orbitte.PENDING
        finally:
            os.kill(p.pid, signal.SIGCONT)


# ---- GIL and leaks -----------------------------------------------------------------


def test_gil_released_while_waiting(peer, engine):
    p, info = peer
    mem = engine.register(bytearray(64 * KIB), access=0)
    counter = [0]
    done = threading.Event()

    def spin():
        while not done.is_set():
            counter[0] += 1

    with engine.open(info["name"]) as seg:
        stop(p.pid)
        t = threading.Thread(target=spin)
        try:
            with engine.batch() as bt:
                bt.submit(seg, [(orbitte.WRITE, mem, info["addr"], 64 * KIB)])
                t.start()
                time.sleep(0.05)
                before = counter[0]
                with pytest.raises(orbitte.TimeoutError):
                    bt.wait(timeout=0.5)
                during = counter[0] - before
        finally:
            done.set()
            os.kill(p.pid, signal.SIGCONT)
            if t.is_alive():
                t.join()
    # a thread that could not run while wait() held the GIL would count ~0
    assert during > 10000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_no_leak_over_many_cycles(engine):
    cycles = int(os.environ.get("ORBITTE_LEAK_CYCLES", "100000"))
    dst = bytearray(4096)
    src = bytearray(b"\x5a" * 4096)
    dmem = engine.register(dst)
    with engine.open(engine.name) as seg:

        def cycle(i):
            m = engine.register(src, access=0)
            with engine.batch(1) as bt:
                bt.submit(seg, [(orbitte.WRITE, m, dmem.addr, 64 + i % 64)])
                if i % 64 == 0:
                    assert bt.wait(10) == orbitte.COMPLETED
            m.deregister()

        for i in range(cycles // 10):  # warm up caches and allocator pools
            cycle(i)
        gc.collect()
        tracemalloc.start()
        rss0 = rss_kib()
        snap0 = tracemalloc.take_snapshot()
        for i in range(cycles):
            cycle(i)
        gc.collect()
        snap1 = tracemalloc.take_snapshot()
        rss1 = rss_kib()
        tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename"))
    assert grown < 256 * KIB, f"Python heap grew {grown} bytes over {cycles} cycles"
    assert rss1 - rss0 < 16 * 1024, f"RSS grew {rss1 - rss0} KiB over {cycles} cycles"
    assert dst[:64] == b"\x5a" * 64


def test_status_polled_alone_completes(monkeypatch):
    """Batch.status() polled in a loop, with no wait() and no progress() call,
    completes the transfer by itself: a poll that finds it PENDING progresses the
    engine once. With no worker thread in the initiator (OTE_PROGRESS_THREAD=n)
    nothing else reads the answer; with workers, one parked by an earlier wait()
    only looked again every OTE_POLL_PARK_US, so such a loop stalled for up to
    that long per transfer."""
    with orbitte.Engine(listen_addr="127.0.0.1:0") as target:
        monkeypatch.setenv("OTE_PROGRESS_THREAD", "n")
        with orbitte.Engine(listen_addr="127.0.0.1:0") as init:
            monkeypatch.delenv("OTE_PROGRESS_THREAD")
            dst = bytearray(4096)
            src = bytearray(os.urandom(4096))
            md, ms = target.register(dst), init.register(src, access=0)
            seg = init.open(target.name)
            for i, (off, n) in enumerate([(0, 8), (64, 1000), (2048, 2048)]):
                src[off:off + n] = bytes((i + k) % 256 for k in range(n))
                with init.batch(capacity=2) as b:
                    b.submit(seg, [(orbitte.WRITE, (ms, off), md.addr + off, n)])
                    polls = 0
                    # bounded: without progress it stays PENDING for ever
                    while b.status() == orbitte.PENDING and polls < 2_000_000:
                        polls += 1
                    assert b.status() == orbitte.COMPLETED, f"PENDING after {polls} polls"
                    ts = b.status(0)
                    assert (ts.state, ts.error, ts.transferred) == (orbitte.COMPLETED, 0, n)
                assert dst[off:off + n] == src[off:off + n]
            # a task's own status polls progress too
            src[:16] = b"polled-by-task.."
            with init.batch() as b:
                task = b.submit(seg, [(orbitte.WRITE, ms, md.addr + 100, 16)])
                polls = 0
                while b.status(task).state == orbitte.PENDING and polls < 2_000_000:
                    polls += 1
                assert b.status(task).state == orbitte.COMPLETED, f"after {polls} polls"
            assert dst[100:116] == b"polled-by-task.."
            seg.close()
