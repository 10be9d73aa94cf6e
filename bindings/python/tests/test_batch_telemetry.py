"""Batch.telemetry(): what a batch moved (ote_batch_telemetry) against known transfers."""
import time

import numpy as np

import orbitte

KIB = 1024


def test_telemetry_counts_what_the_batch_moved(pair):
    a, b = pair
    n, blk = 16, 4 * KIB
    pool = np.zeros(n * blk, dtype=np.uint8)
    src = np.random.default_rng(7).integers(0, 256, n * blk, dtype=np.uint8)
    back = np.zeros(blk, dtype=np.uint8)
    pmem = b.register(pool)
    smem = a.register(src, access=0)
    bmem = a.register(back)
    local = smem.addr + np.arange(n, dtype=np.uint64) * blk
    remote = pmem.addr + np.arange(n, dtype=np.uint64)[::-1].copy() * blk
    with a.open(b.name) as seg, a.batch(n + 1) as bt:
        t = bt.telemetry()
        assert isinstance(t, orbitte.BatchTelemetry)
        assert tuple(t) == (0, 0, 0, 0, 0, 0, 0)
        before_us = time.time_ns() // 1000
        before_ns = time.monotonic_ns()
        bt.submit_arrays(seg, orbitte.WRITE, local, remote, blk)
        after_us = time.time_ns() // 1000
        assert bt.wait(10) == orbitte.COMPLETED
        waited_ns = time.monotonic_ns() - before_ns
        t = bt.telemetry()
        assert (t.bytes, t.requests, t.ended, t.completed) == (n * blk, n, n, n)
        assert before_us <= t.start_us <= after_us
        assert 0 < t.post_ns <= waited_ns and 0 < t.xfer_ns <= waited_ns
        assert bt.telemetry() == t      # final until the next submit
        for i in range(n):
            j = n - 1 - i
            assert np.array_equal(pool[j * blk:(j + 1) * blk], src[i * blk:(i + 1) * blk])
        # a second submit adds up; the start stays the first submit's
        bt.submit(seg, [(orbitte.READ, bmem, pmem.addr + 3 * blk, 1000)])
        assert bt.wait(10) == orbitte.COMPLETED
        u = bt.telemetry()
        assert (u.bytes, u.requests, u.ended, u.completed) == (n * blk + 1000, n + 1, n + 1, n + 1)
        assert u.start_us == t.start_us and u.post_ns >= t.post_ns and u.xfer_ns >= t.xfer_ns
        j = n - 1 - 3
        assert np.array_equal(back[:1000], src[j * blk:j * blk + 1000])


def test_telemetry_of_a_failed_request(pair):
    a, b = pair
    dst = b.register(bytearray(4 * KIB))
    src = a.register(bytearray(b"x" * 8 * KIB), access=0)
    with a.open(b.name) as seg, a.batch(2) as bt:
        # the second one runs past the end of the peer's region
        try:
            bt.submit(seg, [(orbitte.WRITE, src, dst.addr, 4 * KIB)])
            bt.submit(seg, [(orbitte.WRITE, src, dst.addr + 2 * KIB, 4 * KIB)])
        except orbitte.Error:
            pass
        bt.wait(10)
        t = bt.telemetry()
        assert t.completed == 1 and t.bytes == 4 * KIB
        assert t.ended == t.requests


def test_telemetry_of_a_released_batch_raises(pair):
    a, _ = pair
    bt = a.batch(1)
    bt.release()
    try:
        bt.telemetry()
    except orbitte.Error:
        pass
    else:
        raise AssertionError("telemetry() of a released batch did not raise")
