"""orbitte.Transfer (Engine.transfer): one list of requests posted again and
again, each post's data, notification, state and figures its own, across
the batches its posts share."""

import os
import signal

import numpy as np
import pytest

import orbitte
from test_orbitte import stop

DEADLINE_POLLS = 10_000_000  # bound on polls of something that must end (not a figure)


def _addr(a):
    return a.__array_interface__["data"][0]


def _finish(t, **kw):
    for _ in range(DEADLINE_POLLS):
        st = t.poll(**kw)
        if st != orbitte.PENDING:
            return st
    raise AssertionError("the post did not end")


@pytest.fixture
def bufs(pair):
    a, b = pair
    src = np.zeros(4096, dtype=np.uint8)
    dst = np.zeros(4096, dtype=np.uint8)
    ma, mb = a.register(src), b.register(dst)
    seg = a.open(b.name)
    yield a, b, src, dst, seg
    seg.close()
    ma.deregister()
    mb.deregister()


@pytest.mark.parametrize("poll", [dict(progress=True),
                                  dict(progress=True, wait=0.001, repoll_us=1000,
                                       yield_cpu=True)])
def test_reposts_move_their_own_bytes_and_figures(bufs, poll):
    a, b, src, dst, seg = bufs
    # three scattered blocks, out of order on the remote side
    loc = [0, 100, 1000]
    rem = [3000, 50, 2000]
    ln = [16, 32, 8]
    t = a.transfer(orbitte.WRITE, np.array(loc, np.uint64) + _addr(src),
                   np.array(rem, np.uint64) + _addr(dst), np.array(ln, np.uint64))
    assert (t.count, t.bytes, t.state) == (3, 56, -1)
    last_start = 0
    # 150 posts of 3 requests: more than a batch takes (64 posts), so batches
    # are taken again and replaced
    for i in range(150):
        src[:] = (np.arange(src.size) + i) % 256
        st = t.post(seg)
        assert st in (orbitte.PENDING, orbitte.COMPLETED)
        assert _finish(t, **poll) == orbitte.COMPLETED and t.error == 0
        for lo, ro, n in zip(loc, rem, ln):
            assert bytes(dst[ro:ro + n]) == bytes(src[lo:lo + n]), (i, lo)
        tel = t.telemetry()
        # the figures of this post alone, not of the batch's earlier posts
        assert (tel.requests, tel.ended, tel.completed, tel.bytes) == (3, 3, 3, 56), (i, tel)
        assert tel.start_us >= last_start and tel.xfer_ns == t.xfer_ns
        last_start = tel.start_us
    t.release()
    assert t.closed
    with pytest.raises(orbitte.InvalidParamError):
        t.post(seg)
    t.release()   # idempotent


def test_each_post_notifies_once_after_its_data(bufs):
    a, b, src, dst, seg = bufs
    t = a.transfer(orbitte.WRITE, [_addr(src)], [_addr(dst)], [64])
    for i in range(100):
        src[:64] = i
        t.post(seg, notify=b"post %d \x00" % i)
        assert _finish(t, progress=True) == orbitte.COMPLETED
        got = []
        for _ in range(DEADLINE_POLLS):
            got += b.recv()
            if got:
                break
        assert [n.data for n in got] == [b"post %d \x00" % i]
        assert bytes(dst[:64]) == bytes([i]) * 64
    with pytest.raises(orbitte.InvalidParamError):
        t.post(seg, notify=b"x" * (orbitte.NOTIFY_MAX + 1))


def test_failed_post_then_a_good_one(bufs):
    a, b, src, dst, seg = bufs
    src[:8] = 9
    bad = a.transfer(orbitte.WRITE, [_addr(src)], [_addr(dst) + dst.size - 4], [8])
    for _ in range(2):   # failed twice: each post its own
        bad.post(seg)
        assert _finish(bad, progress=True) == orbitte.FAILED
        assert bad.error in (orbitte.Status.OUT_OF_BOUNDS, orbitte.Status.REMOTE_NOT_REGISTERED)
        assert bad.notify_error == 0
    assert bytes(dst[-4:]) == b"\0" * 4
    good = a.transfer(orbitte.READ, [_addr(src)], [_addr(dst) + 8], [8])
    dst[8:16] = 7
    good.post(seg)
    assert _finish(good, progress=True) == orbitte.COMPLETED
    assert bytes(src[:8]) == b"\x07" * 8


def test_arguments_and_closed_engine(pair):
    a, b = pair
    buf = bytearray(64)
    m = a.register(buf)
    with pytest.raises(orbitte.InvalidParamError):
        a.transfer(orbitte.WRITE, [m.addr], [0, 1], [8])
    with pytest.raises(orbitte.InvalidParamError):
        a.transfer(orbitte.WRITE, [], [], [])
    with pytest.raises(orbitte.InvalidParamError):
        a.transfer(7, [m.addr], [0], [8])
    with pytest.raises(TypeError):
        a.transfer(orbitte.WRITE, np.zeros(1, np.float64), [0], [8])
    t = a.transfer(orbitte.WRITE, [m.addr], [0], [8])
    with pytest.raises(orbitte.InvalidParamError):
        t.poll()            # not posted
    with pytest.raises(orbitte.InvalidParamError):
        t.telemetry()
    seg = b.open(a.name)
    with pytest.raises(orbitte.InvalidParamError):
        t.post(seg)         # a segment of another engine
    seg.close()
    a.close()
    assert t.closed
    with pytest.raises(orbitte.InvalidParamError):
        t.poll()


def test_pending_post_refuses_a_repost_and_cancels(peer, engine):
    p, info = peer
    mine = bytearray(64 * 1024)
    mem = engine.register(mine)
    with engine.open(info["name"]) as seg:
        t = engine.transfer(orbitte.READ, [mem.addr], [info["addr"]], [len(mine)])
        stop(p.pid)
        try:
            assert t.post(seg) == orbitte.PENDING
            # polled in a loop: each poll after the first waits in the engine
            for _ in range(3):
                assert t.poll(progress=True, wait=0.001, repoll_us=10_000_000) == orbitte.PENDING
            with pytest.raises(orbitte.InvalidParamError):
                t.post(seg)
            t.cancel()
        finally:
            os.kill(p.pid, signal.SIGCONT)
        st = t.wait(timeout=30)
        assert st in (orbitte.FAILED, orbitte.COMPLETED)
        if st == orbitte.FAILED:
            assert t.error == orbitte.Status.CANCELED
        # a new post after the cancelled one moves the peer's bytes (i % 251)
        assert t.post(seg) in (orbitte.PENDING, orbitte.COMPLETED)
        assert t.wait(timeout=30) == orbitte.COMPLETED
        assert bytes(mine[:300]) == bytes(i % 251 for i in range(300))
        t.release()


def test_gathered_by_indices_and_merged(bufs):
    a, b, src, dst, seg = bufs
    # columns of 8 blocks of 16 bytes on each side; remote block j at 16 * (7 - j)
    la = np.arange(8, dtype=np.uint64) * 16 + _addr(src)
    ra = (7 - np.arange(8, dtype=np.uint64)) * 16 + _addr(dst)
    ln = np.full(8, 16, np.uint64)
    src[:128] = np.arange(128)
    li = [0, 1, 2, 5]
    ri = [1, 2, 3, 6]     # remote blocks at 96, 80, 64, 16
    for index in (li, np.array(li, np.int64), np.array(li, np.uint64), np.array(li, np.int32)):
        t = a.transfer(orbitte.WRITE, la, ra, ln, local_index=index, remote_index=ri,
                       remote_lengths=ln, merge=True)
        # local 0, 1, 2 are contiguous, their remotes run backwards: no merge
        assert (t.count, t.merged, t.bytes) == (4, 0, 64)
        rows = np.frombuffer(t.ranges(), np.uint64).reshape(-1, 3)
        assert rows[:, 0].tolist() == la[li].tolist() and rows[:, 1].tolist() == ra[ri].tolist()
        t.release()
    # forward runs on both sides merge into one request each
    t = a.transfer(orbitte.WRITE, la, ra, ln, local_index=[0, 1, 2, 6], remote_index=[7, 6, 5, 0],
                   remote_lengths=ln, merge=True)
    # remote blocks 7, 6, 5 sit at 0, 16, 32: contiguous forward, as local 0, 1, 2
    assert (t.count, t.merged, t.bytes) == (2, 2, 64)
    rows = np.frombuffer(t.ranges(), np.uint64).reshape(-1, 3)
    assert rows.tolist() == [[int(la[0]), int(ra[7]), 48], [int(la[6]), int(ra[0]), 16]]
    t.post(seg)
    assert _finish(t, progress=True) == orbitte.COMPLETED
    assert bytes(dst[0:48]) == bytes(src[0:48]) and bytes(dst[112:128]) == bytes(src[96:112])
    # without merge: one request each
    t2 = a.transfer(orbitte.WRITE, la, ra, ln, local_index=[0, 1, 2, 6], remote_index=[7, 6, 5, 0],
                    remote_lengths=ln)
    assert (t2.count, t2.merged) == (4, 0)
    with pytest.raises(IndexError):
        a.transfer(orbitte.WRITE, la, ra, ln, local_index=[8], remote_index=[0], remote_lengths=ln)
    with pytest.raises(IndexError):
        a.transfer(orbitte.WRITE, la, ra, ln, local_index=[-1], remote_index=[0], remote_lengths=ln)
    with pytest.raises(orbitte.InvalidParamError):   # lengths differ
        a.transfer(orbitte.WRITE, la, ra, ln, local_index=[0], remote_index=[0],
                   remote_lengths=np.full(8, 8, np.uint64))
    with pytest.raises(orbitte.InvalidParamError):   # counts differ
        a.transfer(orbitte.WRITE, la, ra, ln, local_index=[0, 1], remote_index=[0],
                   remote_lengths=ln)
    with pytest.raises(TypeError):
        a.transfer(orbitte.WRITE, la, ra, ln, local_index=np.zeros(1, np.float64),
                   remote_index=[0], remote_lengths=ln)


def test_first_poll_after_the_post_waits(monkeypatch):
    """The posting thread's first poll of a pending post, right after it, is a
    loop's (as NIXL callers poll: transfer(), then check_xfer_state() until
    DONE): it waits in the engine at once (ote_batch_wait, up to `wait`)
    instead of progressing once and yielding. With no worker thread in the
    initiator (OTE_PROGRESS_THREAD=n) only that wait can complete the post, so
    one poll returns COMPLETED, the bytes in place."""
    with orbitte.Engine(listen_addr="127.0.0.1:0") as b:
        monkeypatch.setenv("OTE_PROGRESS_THREAD", "n")
        with orbitte.Engine(listen_addr="127.0.0.1:0") as a:
            monkeypatch.delenv("OTE_PROGRESS_THREAD")
            src = np.zeros(4096, dtype=np.uint8)
            dst = np.zeros(4096, dtype=np.uint8)
            ma, mb = a.register(src), b.register(dst)
            seg = a.open(b.name)
            t = a.transfer(orbitte.WRITE, [_addr(src)], [_addr(dst) + 8], [64])
            pending = 0
            for i in range(20):
                src[:64] = (np.arange(64) + i) % 256
                if t.post(seg) == orbitte.PENDING:
                    pending += 1
                    # repoll_us: a minute, so that a loaded host cannot make it "late"
                    st = t.poll(progress=True, wait=60.0, repoll_us=60_000_000, yield_cpu=True)
                    assert st == orbitte.COMPLETED, f"post {i}: state {st} after one poll"
                else:
                    assert t.state == orbitte.COMPLETED
                assert bytes(dst[8:72]) == bytes(src[:64]), i
            assert pending > 0       # over tcp the answer takes a round trip
            # a poll of another transfer in between: the first one's next poll does not wait
            t2 = a.transfer(orbitte.WRITE, [_addr(src) + 100], [_addr(dst) + 200], [8])
            assert t.post(seg) in (orbitte.PENDING, orbitte.COMPLETED)
            assert t2.post(seg) in (orbitte.PENDING, orbitte.COMPLETED)
            assert _finish(t, progress=True, wait=60.0, repoll_us=60_000_000) == orbitte.COMPLETED
            assert _finish(t2, progress=True) == orbitte.COMPLETED
            t.release()
            t2.release()
            seg.close()
            ma.deregister()
            mb.deregister()
