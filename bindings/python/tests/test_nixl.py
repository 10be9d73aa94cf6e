"""orbitte.nixl in one process: NIXL's names, return values, exceptions and
notification semantics, the metadata blob, the listener path, threads, and
the import shim."""

import json
import os
import pickle
import re
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

import orbitte
import orbitte.nixl
import orbitte.nixl._bindings as nixlBind
import orbitte.nixl._utils as nixl_utils
from orbitte.nixl import _md
from orbitte.nixl._api import nixl_agent, nixl_agent_config

DEADLINE = 60.0  # bound on waiting for something that must happen (not a figure)


def _agent(**kw):
    return nixl_agent(f"a-{uuid.uuid4()}", nixl_agent_config(**kw))


def _addr(a):
    return a.__array_interface__["data"][0]


def _wait(cond, what):
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
    raise AssertionError(f"{what} did not happen")


def _done(agent, h):
    return _wait(lambda: agent.check_xfer_state(h) == "DONE", "the transfer")


@pytest.fixture
def pair():
    a, b = _agent(capture_telemetry=True), _agent(capture_telemetry=True)
    src = np.arange(1 << 16, dtype=np.uint32).view(np.uint8).copy()
    dst = np.zeros(src.nbytes, dtype=np.uint8)
    a.register_memory([(_addr(src), src.nbytes, 0, "")], "DRAM")
    b.register_memory([(_addr(dst), dst.nbytes, 0, "")], "DRAM")
    assert a.add_remote_agent(b.get_agent_metadata()) == b.name.encode()
    yield a, b, src, dst


# ---- descriptor lists ------------------------------------------------------------------


def test_descriptor_lists():
    descs = [(1000, 105, 0), (2000, 30, 0), (1010, 20, 0)]
    xl = nixlBind.nixlXferDList(nixlBind.DRAM_SEG, descs)
    assert xl.descCount() == 3 and xl[1] == (2000, 30, 0) and xl.getType() == nixlBind.DRAM_SEG
    assert pickle.loads(pickle.dumps(xl)) == xl
    assert xl.index((1010, 20, 0)) == 2
    with pytest.raises(nixlBind.nixlNotFoundError):
        xl.index((1, 2, 3))
    xl.remDesc(0)
    assert xl.descCount() == 2 and xl[0] == (2000, 30, 0)
    xl.addDesc((5, 6, 7))
    assert xl[2] == (5, 6, 7)
    with pytest.raises(IndexError):
        xl[3]
    xl.clear()
    assert xl.isEmpty()
    for dt in (np.uint64, np.int64):
        arr = np.array([[1, 2, 0], [3, 4, 1]], dtype=dt)
        assert nixlBind.nixlXferDList(nixlBind.VRAM_SEG, arr)[1] == (3, 4, 1)
    with pytest.raises(ValueError):
        nixlBind.nixlXferDList(nixlBind.DRAM_SEG, np.zeros((2, 4), dtype=np.uint64))
    with pytest.raises(ValueError):
        nixlBind.nixlXferDList(nixlBind.DRAM_SEG, np.zeros((2, 3), dtype=np.int32))
    with pytest.raises(TypeError):
        nixlBind.nixlXferDList(nixlBind.DRAM_SEG, [[1, 2, 3]])
    with pytest.raises(ValueError):
        nixlBind.nixlXferDList(nixlBind.DRAM_SEG, [(1, 2)])
    rl = nixlBind.nixlRegDList(nixlBind.DRAM_SEG, [(10, 20, 0, "meta"), (40, 8, 0, b"x\0y")])
    assert rl[0] == (10, 20, 0, b"meta") and rl[1][3] == b"x\0y"
    assert pickle.loads(pickle.dumps(rl)) == rl
    t = rl.trim()
    assert isinstance(t, nixlBind.nixlXferDList) and t.descCount() == 2 and t[1] == (40, 8, 0)
    assert nixlBind.nixlXferDList(nixlBind.DRAM_SEG, 4).descCount() == 4
    rd = nixlBind.nixlRemoteDList(nixlBind.DRAM_SEG, [(1, 2, 0, "peer")])
    assert rd[0] == (1, 2, 0, "peer")


def test_get_descs_inputs():
    a = _agent(backends=[])
    assert a.get_xfer_descs([(1, 2, 3, 4)]) is None
    assert a.get_xfer_descs([(1, 2, 3)], mem_type=None) is None
    with pytest.raises(KeyError):
        a.get_xfer_descs([(1, 2, 3)], mem_type="V-RAM")
    assert a.get_xfer_descs(nixlBind.nixlRegDList(nixlBind.DRAM_SEG)) is None
    assert a.get_reg_descs([(1, 2, 3)], "DRAM") is None
    assert a.get_reg_descs(nixlBind.nixlXferDList(nixlBind.DRAM_SEG)) is None
    # the deprecated names
    assert a.get_xfer_descs([(1, 2, 0)], "cpu").getType() == nixlBind.DRAM_SEG
    assert a.get_xfer_descs([(1, 2, 0)], "cuda").getType() == nixlBind.VRAM_SEG
    arr = np.array([[8, 16, 0]], dtype=np.uint64)
    xl = a.get_xfer_descs(arr, "DRAM")
    assert a.get_xfer_descs(xl) is xl
    assert a.deserialize_descs(a.get_serialized_descs(xl)) == xl
    rl = a.get_reg_descs(arr, "DRAM")
    assert rl[0] == (8, 16, 0, b"")
    # arrays of another layout or dtype, and rows without an agent: None, as documented
    assert a.get_xfer_descs(np.asfortranarray(np.array([[1, 2, 0], [3, 4, 0]],
                                                       dtype=np.uint64)), "DRAM") is None
    assert a.get_xfer_descs(np.array([[1, 2, 0]], dtype=np.float64), "DRAM") is None
    assert a.get_remote_descs(arr, "DRAM") is None


def test_config_and_backends():
    c = nixl_agent_config(True, True, 0)
    assert (c.enable_pthread, c.enable_listen, c.port, c.backends) == (True, True, 0, ["UCX"])
    with pytest.raises(TypeError):
        nixl_agent_config(sync_mode=1)
    with pytest.raises(ValueError):
        nixl_agent("")
    a = _agent()
    assert a.get_plugin_list() == ["UCX"] and list(a.backends) == ["UCX"]
    assert "DRAM_SEG" in a.get_backend_mem_types("UCX")
    with pytest.raises(nixlBind.nixlNotFoundError):
        a.create_backend("UVX")
    assert a.get_plugin_mem_types("UVX") == [] and a.get_plugin_params("UVX") == {}
    empty = _agent(backends=[])
    buf = np.zeros(64, np.uint8)
    with pytest.raises(nixlBind.nixlNotFoundError):
        empty.register_memory([(_addr(buf), 64, 0, "")], "DRAM")
    with pytest.raises(nixlBind.nixlNotSupportedError):
        a.register_memory([(0, 0, 0, "/tmp/x")], "FILE")


def test_utils():
    p = nixl_utils.malloc_passthru(1000)
    q = nixl_utils.malloc_passthru(1000)
    assert p % 4096 == 0 and q % 4096 == 0
    nixl_utils.ba_buf(p, 1000)
    with pytest.raises(AssertionError):
        nixl_utils.verify_transfer(p, q, 1000)
    nixl_utils.ba_buf(q + 10, 20)
    nixl_utils.verify_transfer(p + 10, q + 10, 20)
    with pytest.raises(ValueError):
        nixl_utils.ba_buf(p + 990, 20)
    nixl_utils.free_passthru(p)
    nixl_utils.free_passthru(q)
    with pytest.raises(ValueError):
        nixl_utils.free_passthru(p)


# ---- metadata ---------------------------------------------------------------------------


def test_metadata_signed(pair, monkeypatch):
    a, b, src, dst = pair
    md = b.get_agent_metadata()
    assert isinstance(md, bytes)
    assert a.add_remote_agent(md) == b.name.encode()     # loading again updates
    for off in (3, 10, len(md) // 2, len(md) - 1):
        bad = bytearray(md)
        bad[off] ^= 0x40
        with pytest.raises(nixlBind.nixlInvalidParamError):
            a.add_remote_agent(bytes(bad))
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.add_remote_agent(md[:-5])
    # a well-formed blob naming memory the engine does not publish
    name, engine, rows, _ = _md.decode_md(md)
    desc = _md.decode_md_desc(md)[2]
    forged = _md.encode_md(name, engine, rows + [(rows[0][0] + (1 << 40), 64, 0, 0)], False,
                           desc)
    with pytest.raises(nixlBind.nixlMismatchError):
        a.add_remote_agent(forged)
    # under a cluster key, a blob signed with another key is refused
    monkeypatch.setenv("OTE_AUTH_KEY", "key-one")
    signed = b.get_agent_metadata()
    assert a.add_remote_agent(signed) == b.name.encode()
    monkeypatch.setenv("OTE_AUTH_KEY", "key-two")
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.add_remote_agent(signed)
    monkeypatch.delenv("OTE_AUTH_KEY")
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.add_remote_agent(signed)


def test_metadata_carries_signed_descriptor(monkeypatch):
    """The blob carries OrbitTE's descriptor, checked by the engine under its own key:
    altered inside a blob whose own tag is valid, from an engine with another key, or
    of the old format, it is refused with nixlInvalidParamError; intact, it moves data."""
    monkeypatch.setenv("OTE_AUTH_KEY", "cluster-key-of-the-test")
    a, b = _agent(), _agent()
    src = np.arange(1 << 14, dtype=np.uint32).view(np.uint8).copy()
    dst = np.zeros(src.nbytes, dtype=np.uint8)
    a.register_memory([(_addr(src), src.nbytes, 0, "")], "DRAM")
    b.register_memory([(_addr(dst), dst.nbytes, 0, "")], "DRAM")
    md = b.get_agent_metadata()
    name, engine, desc, rows, partial = _md.decode_md_desc(md)
    assert engine and desc[:4] == b"OTEM" and len(desc) > 48
    refused = set()
    for off in (13, 20, len(desc) // 2, len(desc) - 40, len(desc) - 1):
        bad = bytearray(desc)
        bad[off] ^= 0x01
        forged = _md.encode_md(name, engine, rows, partial, bytes(bad))   # blob tag valid
        with pytest.raises(nixlBind.nixlInvalidParamError, match="descriptor") as ei:
            a.add_remote_agent(forged)
        refused.add(ei.value.ote_status)
    assert refused <= {orbitte.Status.AUTH, orbitte.Status.PROTOCOL}
    assert orbitte.Status.AUTH in refused
    with pytest.raises(nixlBind.nixlInvalidParamError, match="malformed"):   # truncated
        a.add_remote_agent(_md.encode_md(name, engine, rows, partial, desc[:-1]))
    # an engine under another key: its descriptor does not verify here
    monkeypatch.setenv("OTE_AUTH_KEY", "another-key-of-the-test")
    c = _agent()
    cmd = _md.decode_md_desc(c.get_agent_metadata())
    monkeypatch.setenv("OTE_AUTH_KEY", "cluster-key-of-the-test")
    with pytest.raises(nixlBind.nixlInvalidParamError, match="signature does not match"):
        a.add_remote_agent(_md.encode_md(cmd[0], cmd[1], cmd[3], cmd[4], cmd[2]))
    # the format that named the engine only (version 1) is refused
    old = bytearray(md[:-32])
    old[6:8] = (1).to_bytes(2, "little")
    with pytest.raises(nixlBind.nixlInvalidParamError, match="version 1"):
        a.add_remote_agent(bytes(old) + _md._tag(bytes(old)))
    with pytest.raises(nixlBind.nixlNotFoundError):
        a.initialize_xfer("WRITE", a.get_xfer_descs([(_addr(src), 64, 0)], "DRAM"),
                          a.get_xfer_descs([(_addr(dst), 64, 0)], "DRAM"), b.name)
    # intact: loaded, and the bytes move
    assert a.add_remote_agent(md) == b.name.encode()
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(_addr(src), src.nbytes, 0)], "DRAM"),
                          a.get_xfer_descs([(_addr(dst), dst.nbytes, 0)], "DRAM"), b.name)
    a.transfer(h)
    _done(a, h)
    assert np.array_equal(src, dst)
    # known now: new descriptor bytes are checked before the segment in use is refreshed
    bad = bytearray(desc)
    bad[len(desc) // 2] ^= 0x01
    with pytest.raises(nixlBind.nixlInvalidParamError, match="descriptor"):
        a.add_remote_agent(_md.encode_md(name, engine, rows, partial, bytes(bad)))
    more = np.zeros(4096, dtype=np.uint8)
    b.register_memory([(_addr(more), more.nbytes, 0, "")], "DRAM")
    md2 = b.get_agent_metadata()
    assert _md.decode_md_desc(md2)[2] != desc
    assert a.add_remote_agent(md2) == b.name.encode()
    dst[:] = 0
    more[:] = 0
    a.transfer(h)
    _done(a, h)
    assert np.array_equal(src, dst)
    a.release_xfer_handle(h)
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(_addr(src), 4096, 0)], "DRAM"),
                          a.get_xfer_descs([(_addr(more), 4096, 0)], "DRAM"), b.name)
    a.transfer(h)
    _done(a, h)
    assert np.array_equal(src[:4096], more)
    a.release_xfer_handle(h)


def test_partial_metadata():
    a, b = _agent(), _agent()
    m1 = np.zeros(4096, np.uint8)
    m2 = np.zeros(4096, np.uint8)
    reg = b.register_memory([(_addr(m1), 4096, 0, ""), (_addr(m2), 4096, 0, "")], "DRAM")
    part = b.get_reg_descs([(_addr(m1), 4096, 0, "")], "DRAM")
    with pytest.raises(nixlBind.nixlNotFoundError):     # no connection info, unknown agent
        a.add_remote_agent(b.get_partial_agent_metadata(part, inc_conn_info=False))
    a.add_remote_agent(b.get_partial_agent_metadata(part, inc_conn_info=True))
    x1 = a.get_xfer_descs([(_addr(m1), 4096, 0)], "DRAM")
    x2 = a.get_xfer_descs([(_addr(m2), 4096, 0)], "DRAM")
    assert a.check_remote_metadata(b.name, x1)
    assert not a.check_remote_metadata(b.name, x2)
    a.add_remote_agent(b.get_partial_agent_metadata(
        b.get_reg_descs([(_addr(m2), 4096, 0, "")], "DRAM"), inc_conn_info=False))
    assert a.check_remote_metadata(b.name, x1) and a.check_remote_metadata(b.name, x2)
    b.deregister_memory(reg)
    with pytest.raises(nixlBind.nixlNotFoundError):
        b.deregister_memory(reg)


# ---- transfers and notifications -----------------------------------------------------


@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_transfer_notification_once(pair, op):
    a, b, src, dst = pair
    n = 64
    half = 512
    if op == "READ":   # READ: b's memory is the remote source
        dst[:] = np.arange(dst.nbytes, dtype=np.uint32).astype(np.uint8)
        src[:] = 0
    local = [(_addr(src) + i * half, half, 0) for i in range(n)]
    remote = [(_addr(dst) + (n - 1 - i) * half, half, 0) for i in range(n)]
    msg = bytes(range(256)) * 80 + b"\x00tail"            # 20 KiB, 8-bit clean
    h = a.initialize_xfer(op, a.get_xfer_descs(local, "DRAM"),
                          a.get_xfer_descs(remote, "DRAM"), b.name, msg)
    with pytest.raises(nixlBind.nixlNotPostedError):
        a.check_xfer_state(h)
    assert a.transfer(h) in ("DONE", "PROC")
    _done(a, h)
    for i in range(n):
        lo = src[i * half:(i + 1) * half]
        re_ = dst[(n - 1 - i) * half:(n - i) * half]
        assert np.array_equal(lo, re_)
    # the notification: after the data, once, keyed by the sender's name
    got = _wait(b.get_new_notifs, "the notification")
    assert got == {a.name: [msg]}
    assert b.get_new_notifs() == {}
    t = a.get_xfer_telemetry(h)
    assert (t.totalBytes, t.descCount) == (n * half, n)
    assert t.startTime > 0 and 0 < t.postDuration <= t.xferDuration
    assert a.query_xfer_backend(h) == "UCX"
    # repost with a new notification: the telemetry is the new post's, not a sum
    h_notif = b"second"
    before_us = time.time_ns() // 1000
    assert a.transfer(h, h_notif) in ("DONE", "PROC")
    after_us = time.time_ns() // 1000
    _done(a, h)
    t2 = a.get_xfer_telemetry(h)
    assert (t2.totalBytes, t2.descCount) == (n * half, n)
    assert before_us <= t2.startTime <= after_us and t2.startTime >= t.startTime
    assert 0 < t2.postDuration <= t2.xferDuration
    _wait(lambda: b.check_remote_xfer_done(a.name, b"sec"), "the second notification")
    assert not b.check_remote_xfer_done(a.name, b"sec")
    a.release_xfer_handle(h)
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.check_xfer_state(h)


@pytest.mark.parametrize("telemetry", [True, False])
def test_repost_many_times(pair, telemetry):
    """A handle posted 200 times (its posts share batches, 64 at most each):
    every post moves its own bytes, delivers its own notification once, and
    reports its own telemetry; estimate_xfer_cost works with telemetry off."""
    a, b, src, dst = pair
    if not telemetry:
        a = _agent()
        a._src = src
        a.register_memory([(_addr(src), src.nbytes, 0, "")], "DRAM")
        assert a.add_remote_agent(b.get_agent_metadata()) == b.name.encode()
    local = a.get_xfer_descs([(_addr(src), 24, 0), (_addr(src) + 100, 40, 0)], "DRAM")
    remote = a.get_xfer_descs([(_addr(dst) + 1000, 24, 0), (_addr(dst) + 60, 40, 0)], "DRAM")
    h = a.initialize_xfer("WRITE", local, remote, b.name, b"first")
    for i in range(200):
        src[:200] = (np.arange(200) + i) % 256
        assert a.transfer(h, b"n%03d" % i if i else b"") in ("DONE", "PROC")
        _done(a, h)
        assert bytes(dst[1000:1024]) == bytes(src[:24]) and bytes(dst[60:100]) == bytes(src[100:140])
        want = b"first" if i == 0 else b"n%03d" % i
        assert _wait(b.get_new_notifs, "the notification") == {a.name: [want]}
        if telemetry:
            t = a.get_xfer_telemetry(h)
            assert (t.totalBytes, t.descCount) == (64, 2), (i, t)
            assert 0 < t.postDuration <= t.xferDuration
        else:
            with pytest.raises(nixlBind.nixlNoTelemetryError):
                a.get_xfer_telemetry(h)
    assert a.estimate_xfer_cost(h)[0] >= 0
    assert b.get_new_notifs() == {}
    a.release_xfer_handle(h)


def test_send_notif_order_and_tags(pair):
    a, b, _, _ = pair
    for i in range(200):
        a.send_notif(b.name, b"m%03d" % i)
    got = []
    _wait(lambda: got.extend(b.get_new_notifs().get(a.name, [])) or len(got) >= 200,
          "200 notifications")
    assert got == [b"m%03d" % i for i in range(200)]
    a.send_notif(b.name, "text is sent as bytes")
    a.send_notif(b.name, b"abc-tag-xyz")
    _wait(lambda: len(b.update_notifs().get(a.name, [])) >= 2, "two notifications")
    assert b.check_remote_xfer_done(a.name, b"tag", tag_is_prefix=False)
    assert not b.check_remote_xfer_done(a.name, b"tag")
    assert b.check_remote_xfer_done(a.name.encode(), b"text")
    assert b.notifs[a.name] == []
    with pytest.raises(nixlBind.nixlNotFoundError):
        a.send_notif("nobody", b"x")


def test_prepped_loopback_indices_and_merge():
    a = _agent(capture_telemetry=True)
    buf = np.zeros(1 << 16, np.uint8)
    buf[:1 << 15] = np.arange(1 << 15, dtype=np.uint32).astype(np.uint8)
    a.register_memory([(_addr(buf), buf.nbytes, 0, "")], "DRAM")
    n, bs = 32, 1024
    lo = np.array([[_addr(buf) + (1 << 15) + i * bs, bs, 0] for i in range(n)], np.uint64)
    hi = np.array([[_addr(buf) + i * bs, bs, 0] for i in range(n)], np.uint64)
    local = a.prep_xfer_dlist("NIXL_INIT_AGENT", lo, "DRAM")
    remote = a.prep_xfer_dlist(a.name, hi, "DRAM")               # own name: loopback
    for idx in (list(range(n)), np.arange(n, dtype=np.int32), np.arange(n, dtype=np.uint32),
                np.arange(n)):
        buf[1 << 15:] = 0
        h = a.make_prepped_xfer("READ", local, idx, remote, idx)
        assert a.transfer(h) in ("DONE", "PROC")
        _done(a, h)
        assert np.array_equal(buf[1 << 15:], buf[:1 << 15])
        # contiguous on both sides: merged into one descriptor
        assert a.get_xfer_telemetry(h).descCount == 1
        a.release_xfer_handle(h)
    h = a.make_prepped_xfer("READ", local, np.arange(n), remote, np.arange(n),
                            skip_desc_merge=True)
    a.transfer(h)
    _done(a, h)
    assert a.get_xfer_telemetry(h).descCount == n
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.make_prepped_xfer("READ", local, [0, 1], remote, [0])
    with pytest.raises(nixlBind.nixlInvalidParamError):
        a.make_prepped_xfer("READ", local, [n], remote, [0])
    with pytest.raises(KeyError):
        a.make_prepped_xfer("RD", local, [0], remote, [0])
    with pytest.raises(nixlBind.nixlNotFoundError):   # not registered
        a.prep_xfer_dlist("", [(_addr(buf) + buf.nbytes, 8, 0)], "DRAM")
    with pytest.raises(nixlBind.nixlNotFoundError):   # no such remote agent
        a.prep_xfer_dlist("nobody", hi, "DRAM")
    a.release_dlist_handle(local)
    a.release_dlist_handle(remote)


@pytest.mark.parametrize("tls", ["tcp", None])
def test_check_xfer_state_progresses(monkeypatch, tls):
    """check_xfer_state() progresses the engine from the calling thread, as NIXL's UCX
    backend progresses its worker: with no worker thread (OTE_PROGRESS_THREAD=n) a
    caller that polls it alone still sees its transfers complete, bytes in place."""
    monkeypatch.setenv("OTE_PROGRESS_THREAD", "n")
    if tls:
        monkeypatch.setenv("OTE_TLS", tls)
    a = _agent()
    eng = a.agent._core.engine
    stop = threading.Event()

    def helper():                 # only while the loopback segment is opened
        while not stop.is_set():
            eng.progress()
    t = threading.Thread(target=helper)
    t.start()
    try:
        buf = np.zeros(1 << 16, np.uint8)
        half = buf[:1 << 15]
        half[:] = np.arange(1 << 15, dtype=np.uint32).astype(np.uint8)
        a.register_memory([(_addr(buf), buf.nbytes, 0, "")], "DRAM")
        n, bs = 32, 1024
        lo = np.array([[_addr(buf) + (1 << 15) + i * bs, bs, 0] for i in range(n)], np.uint64)
        hi = np.array([[_addr(buf) + i * bs, bs, 0] for i in range(n)], np.uint64)
        local = a.prep_xfer_dlist("NIXL_INIT_AGENT", lo, "DRAM")
        remote = a.prep_xfer_dlist(a.name, hi, "DRAM")
        h = a.make_prepped_xfer("READ", local, [0], remote, [0])
        a.transfer(h)
        _done(a, h)
        a.release_xfer_handle(h)
    finally:
        stop.set()
        t.join()
    rev = np.arange(n)[::-1].copy()
    for op in ("READ", "WRITE"):
        if op == "READ":
            buf[1 << 15:] = 0           # the local half, read into
        else:
            half[:] = 0                 # the remote half, written back from the local one
        h = a.make_prepped_xfer(op, local, rev, remote, np.arange(n))
        st, polls = a.transfer(h), 0
        while st != "DONE" and polls < 200000:       # bounded: PROC for ever without progress
            st, polls = a.check_xfer_state(h), polls + 1
        assert st == "DONE", f"{op}: {st} after {polls} polls of check_xfer_state"
        lo_blocks = buf[1 << 15:].reshape(n, bs)
        hi_blocks = buf[:1 << 15].reshape(n, bs)
        assert np.array_equal(lo_blocks[::-1], hi_blocks)   # local block n-1-i <-> remote i
        assert np.array_equal(half, np.arange(1 << 15, dtype=np.uint32).astype(np.uint8))
        a.release_xfer_handle(h)
    a.release_dlist_handle(local)
    a.release_dlist_handle(remote)
    assert eng.progress() in (True, False)


@pytest.mark.parametrize("op", ["WRITE", "READ"])
def test_prepped_15000_descriptors(op):
    """One make_prepped_xfer + transfer of 15,000 scattered descriptors (numpy
    indices, lists, one list for both sides, ranges) moves exactly those blocks and
    nothing else."""
    n, size = 15000, 64
    a, b = _agent(), _agent()
    src = (np.arange(2 * n * size, dtype=np.uint64) * 2654435761 >> 7).astype(np.uint8)
    dst = np.zeros(2 * n * size, dtype=np.uint8)
    a.register_memory([(_addr(src if op == "WRITE" else dst), src.nbytes, 0, "")], "DRAM")
    b.register_memory([(_addr(dst if op == "WRITE" else src), src.nbytes, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    here, there = (src, dst) if op == "WRITE" else (dst, src)
    rng = np.random.default_rng(34)
    lslot = rng.permutation(2 * n)[:n].astype(np.uint64)    # no two adjacent on both sides
    rslot = rng.permutation(2 * n)[:n].astype(np.uint64)
    col = np.full(n, size, np.uint64), np.zeros(n, np.uint64)
    lp = a.prep_xfer_dlist("NIXL_INIT_AGENT",
                           np.stack([_addr(here) + lslot * size, *col], 1), "DRAM")
    rp = a.prep_xfer_dlist(b.name, np.stack([_addr(there) + rslot * size, *col], 1), "DRAM")
    order = rng.permutation(n)
    shared = order.tolist()
    for li, ri in ((order, order.copy()), (order.tolist(), order.tolist()), (shared, shared),
                   (range(n), range(n))):
        dst[:] = 0
        h = a.make_prepped_xfer(op, lp, li, rp, ri)
        assert a.transfer(h) in ("DONE", "PROC")
        _done(a, h)
        s_slot, d_slot = (lslot, rslot) if op == "WRITE" else (rslot, lslot)
        got = dst.reshape(2 * n, size)
        assert np.array_equal(got[d_slot.astype(np.int64)],
                              src.reshape(2 * n, size)[s_slot.astype(np.int64)])
        untouched = np.ones(2 * n, bool)
        untouched[d_slot.astype(np.int64)] = False
        assert not got[untouched].any()
        a.release_xfer_handle(h)


def test_failed_transfer_sends_no_notification(pair):
    a, b, src, dst = pair
    # the remote range is checked against the peer's metadata before posting
    with pytest.raises(nixlBind.nixlNotFoundError):
        a.initialize_xfer("WRITE", a.get_xfer_descs([(_addr(src), 64, 0)], "DRAM"),
                          a.get_xfer_descs([(_addr(dst) + dst.nbytes, 64, 0)], "DRAM"),
                          b.name, b"never")
    # memory the peer deregistered after publishing it: the transfer fails
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(_addr(src), 4096, 0)], "DRAM"),
                          a.get_xfer_descs([(_addr(dst), 4096, 0)], "DRAM"), b.name,
                          b"failed-transfer")
    b.deregister_memory(b.get_reg_descs([(_addr(dst), dst.nbytes, 0, "")], "DRAM"))
    failed = False
    try:
        a.transfer(h)
        _wait(lambda: a.check_xfer_state(h) == "ERR", "the transfer")
    except nixlBind.nixlError as e:
        failed = True
        assert not isinstance(e, nixlBind.nixlRepostActiveError)
    assert failed
    assert not dst.any()
    # notifications of one sender arrive in order: once the marker is here,
    # the failed transfer's notification would have been too
    a.send_notif(b.name, b"marker")
    got = _wait(b.get_new_notifs, "the marker")
    assert got == {a.name: [b"marker"]}


def test_release_active_and_telemetry_switch(monkeypatch):
    monkeypatch.delenv("NIXL_TELEMETRY_ENABLE", raising=False)
    off = _agent()
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "no")
    off_env = _agent(capture_telemetry=True)
    monkeypatch.setenv("NIXL_TELEMETRY_ENABLE", "y")
    on_env = _agent()
    for ag in (off, off_env, on_env):
        buf = np.zeros(1 << 20, np.uint8)
        ag._buf = buf
        ag.register_memory([(_addr(buf), buf.nbytes, 0, "")], "DRAM")
        lo = ag.get_xfer_descs([(_addr(buf), 1 << 19, 0)], "DRAM")
        hi = ag.get_xfer_descs([(_addr(buf) + (1 << 19), 1 << 19, 0)], "DRAM")
        h = ag.initialize_xfer("WRITE", lo, hi, ag.name)
        ag.transfer(h)
        if ag is on_env:
            _done(ag, h)
            assert ag.get_xfer_telemetry(h).totalBytes == 1 << 19
        else:
            with pytest.raises(nixlBind.nixlNoTelemetryError):
                ag.get_xfer_telemetry(h)
        ag.release_xfer_handle(h)           # cancels the transfer if still active


def test_threads(pair):
    a, b, src, dst = pair
    nthreads, per = 4, 25
    chunk = src.nbytes // (nthreads * per)
    errors = []

    def work(t):
        try:
            for i in range(per):
                off = (t * per + i) * chunk
                h = a.initialize_xfer(
                    "WRITE", a.get_xfer_descs([(_addr(src) + off, chunk, 0)], "DRAM"),
                    a.get_xfer_descs([(_addr(dst) + off, chunk, 0)], "DRAM"), b.name,
                    b"t%d-%d" % (t, i))
                a.transfer(h)
                _done(a, h)
                a.release_xfer_handle(h)
                a.send_notif(b.name, b"hb%d-%d" % (t, i))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(nthreads)]
    got = []
    for t in ts:
        t.start()
    end = time.monotonic() + DEADLINE
    while ((any(t.is_alive() for t in ts) or len(got) < 2 * nthreads * per)
           and time.monotonic() < end):
        got += b.get_new_notifs().get(a.name, [])
        if not any(t.is_alive() for t in ts) and errors:
            break
    for t in ts:
        t.join()
    assert not errors, errors
    assert sorted(got) == sorted([b"t%d-%d" % (t, i) for t in range(nthreads)
                                  for i in range(per)]
                                 + [b"hb%d-%d" % (t, i) for t in range(nthreads)
                                    for i in range(per)])
    for t in range(nthreads):   # each thread's messages in its order
        mine = [m for m in got if m.startswith(b"t%d-" % t) or m.startswith(b"hb%d-" % t)]
        assert mine == [m for i in range(per) for m in (b"t%d-%d" % (t, i), b"hb%d-%d" % (t, i))]
    assert np.array_equal(src[:nthreads * per * chunk], dst[:nthreads * per * chunk])


def test_remove_remote_agent_seen_by_peer(pair):
    a, b, _, _ = pair
    b.add_remote_agent(a.get_agent_metadata())
    b.send_notif(a.name, b"before")
    _wait(lambda: a.check_remote_xfer_done(b.name, b"before"), "a notification")
    a.remove_remote_agent(b.name)
    with pytest.raises(nixlBind.nixlNotFoundError):
        a.send_notif(b.name, b"x")
    with pytest.raises(nixlBind.nixlRemoteDisconnectError):
        b.send_notif(a.name, b"after")
    assert not b.check_remote_metadata(a.name)


# ---- threads, segments in use and closing ---------------------------------------------


def test_loopback_segment_opened_once_and_refreshed_until_it_succeeds():
    """Two threads that want the loopback segment at once get the same one,
    opened once (the loser's own used to be closed by its dealloc under a
    transfer the other had posted); a refresh that fails leaves the
    registration change to read at the next call."""
    a = _agent()
    core = a.agent._core
    real_open, opened = core.engine.open, []

    def slow_open(name):
        opened.append(name)
        time.sleep(0.3)
        return real_open(name)

    core.engine.open = slow_open
    got = []
    ts = [threading.Thread(target=lambda: got.append(core._self_segment())) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    del core.engine.open
    assert len(opened) == 1 and len(got) == 2 and got[0] is got[1]
    assert not got[0].closed

    class Flaky:
        """A segment whose first refresh fails."""
        refreshed = 0
        closed = False

        def refresh(self):
            Flaky.refreshed += 1
            if Flaky.refreshed == 1:
                raise orbitte.TimeoutError(orbitte.Status.TIMEOUT)

    core.self_seg = Flaky()
    buf = np.zeros(4096, np.uint8)
    a.register_memory([(_addr(buf), 4096, 0, "")], "DRAM")
    with pytest.raises(nixlBind.nixlBackendError):
        core._self_segment()
    assert isinstance(core._self_segment(), Flaky) and Flaky.refreshed == 2
    core._self_segment()
    assert Flaky.refreshed == 2   # read: no refresh more
    core.self_seg = got[0]


LISTENER_IN_OPEN = """
    import json, sys, time
    import orbitte
    import orbitte.nixl._bindings as nixlBind
    from orbitte.nixl import _md
    from test_orbitte import stop

    info, pid = json.loads(sys.argv[1]), int(sys.argv[2])
    agent = nixlBind.nixlAgent("closing", nixlBind.nixlAgentConfig(True, True, 0))
    core = agent._core
    stop(pid)
    # a metadata request naming the stopped peer: the listener opens it, which
    # waits for it up to OTE_CONNECT_TIMEOUT_MS
    with orbitte.Engine(listen_addr="127.0.0.1:0") as asker:
        with asker.open(core.engine_name) as seg:
            for f in _md.frames("asker", _md.KIND_FETCH, info["name"].encode(), 1):
                asker.send(seg, f)
    time.sleep(1.0)
    t0 = time.monotonic()
    agent.close()
    took = time.monotonic() - t0
    assert not core.thread.is_alive(), "close() returned with the listener running"
    assert core.engine.closed, "the engine was left open"
    print(json.dumps({"took": took}))
    print("OK")
"""


def test_close_waits_until_the_listener_ended(peer):
    """close() closes the engine only once the listener thread ended: it may be
    inside engine.open() for longer than the 2 s it was given (a metadata
    request naming a peer that does not answer)."""
    from test_lifetimes import assert_ok, run_script
    p, info = peer
    r = run_script(LISTENER_IN_OPEN, json.dumps(info), str(p.pid),
                   env={"OTE_CONNECT_TIMEOUT_MS": "4000"})
    assert_ok(r)
    assert json.loads(r.stdout.splitlines()[0])["took"] > 1.5   # it waited for the open


INVALIDATED_IN_USE = """
    import json, os, signal, sys, threading, time
    import orbitte
    import orbitte.nixl._bindings as nixlBind
    from orbitte.nixl import _md
    from orbitte.nixl._descs import _Regions
    from orbitte.nixl._peers import _Remote
    from test_orbitte import stop

    info, pid = json.loads(sys.argv[1]), int(sys.argv[2])
    agent = nixlBind.nixlAgent("user", nixlBind.nixlAgentConfig(True, False, 0))
    core = agent._core
    seg = core.engine.open(info["name"])
    core.remotes["peer"] = _Remote("peer", info["name"], seg, _Regions([]))
    stop(pid)
    done = []
    user = threading.Thread(target=lambda: done.append(seg.refresh()))
    user.start()   # a call using the segment, the GIL released: the peer does not answer
    time.sleep(0.5)
    core._dispatch("x", _md.frames("peer", _md.KIND_INVALIDATE, b"", 1)[0])
    assert "peer" not in core.remotes
    assert not seg.closed and core.retired == [seg], "closed under the call"
    os.kill(pid, signal.SIGCONT)
    user.join(30)
    core.drain()
    assert seg.closed and core.retired == []
    agent.close()
    print("OK")
"""


def test_invalidate_closes_a_segment_once_no_call_uses_it(peer):
    """A peer's INVALIDATE (handled on the listener thread) closes its segment;
    one that a user thread is using at that moment is closed by the next
    drain once that call returned, not under it."""
    from test_lifetimes import assert_ok, run_script
    p, info = peer
    assert_ok(run_script(INVALIDATED_IN_USE, json.dumps(info), str(p.pid)))


# ---- the low-level agent ----------------------------------------------------------------


def test_low_level_agent():
    cfg = nixlBind.nixlAgentConfig(False, False, 0)
    a1 = nixlBind.nixlAgent("low-1-" + uuid.uuid4().hex, cfg)
    a2 = nixlBind.nixlAgent("low-2-" + uuid.uuid4().hex, cfg)
    b1 = a1.createBackend("UCX", {})
    b2 = a2.createBackend("UCX", {})
    p1, p2 = nixl_utils.malloc_passthru(256), nixl_utils.malloc_passthru(256)
    nixl_utils.ba_buf(p1, 256)
    r1 = nixlBind.nixlRegDList(nixlBind.DRAM_SEG)
    r1.addDesc((p1, 256, 0, "m"))
    r2 = nixlBind.nixlRegDList(nixlBind.DRAM_SEG, [(p2, 256, 0, "m")])
    assert a1.registerMem(r1, [b1]) == nixlBind.NIXL_SUCCESS
    assert a2.registerMem(r2, [b2]) == nixlBind.NIXL_SUCCESS
    assert a1.loadRemoteMD(a2.getLocalMD()) == a2.name.encode()
    s = nixlBind.nixlXferDList(nixlBind.DRAM_SEG, [(p1 + 8, 8, 0)])
    d = nixlBind.nixlXferDList(nixlBind.DRAM_SEG, [(p2 + 8, 8, 0)])
    h = a1.createXferReq(nixlBind.NIXL_WRITE, s, d, a2.name, "n\0te")
    assert a1.queryXferBackend(h) == b1
    st = a1.postXferReq(h)
    notifs = {}
    while st != nixlBind.NIXL_SUCCESS or not notifs:
        if st != nixlBind.NIXL_SUCCESS:
            st = a1.getXferStatus(h)
        if not notifs:
            notifs = a2.getNotifs(notifs)
    nixl_utils.verify_transfer(p1 + 8, p2 + 8, 8)
    assert notifs == {a1.name: [b"n\0te"]}
    with pytest.raises(nixlBind.nixlNoTelemetryError):
        a1.getXferTelemetry(h)
    assert a1.releaseXferReq(h) == nixlBind.NIXL_SUCCESS
    assert a1.deregisterMem(r1, [b1]) == nixlBind.NIXL_SUCCESS
    assert a1.invalidateRemoteMD(a2.name) == nixlBind.NIXL_SUCCESS
    with pytest.raises(nixlBind.nixlNotFoundError):
        a1.invalidateRemoteMD(a2.name)
    nixl_utils.free_passthru(p1)
    nixl_utils.free_passthru(p2)


# ---- listener path and the shim ---------------------------------------------------------


def test_listener_path(capfd, monkeypatch):
    monkeypatch.setenv("NIXL_LOG_LEVEL", "INFO")
    monkeypatch.delenv("NIXL_ETCD_ENDPOINTS", raising=False)
    target = nixl_agent("target-" + uuid.uuid4().hex, nixl_agent_config(True, True, 0))
    err = capfd.readouterr().err
    ports = re.findall(r"MD listener is listening on port (\d+)$", err, re.M)
    assert len(ports) == 1
    port = int(ports[0])
    assert target.agent._core.engine_name.endswith(f":{port}")
    init = nixl_agent("init-" + uuid.uuid4().hex, nixl_agent_config(True, True, 0))
    buf = np.zeros(4096, np.uint8)
    treg = target.register_memory([(_addr(buf), 4096, 0, "")], "DRAM")
    init.fetch_remote_metadata(target.name, "127.0.0.1", port)
    init.send_local_metadata("127.0.0.1", port)
    _wait(lambda: init.check_remote_metadata(target.name), "the fetched metadata")
    _wait(lambda: target.check_remote_metadata(init.name), "the sent metadata")
    xl = init.get_xfer_descs([(_addr(buf), 4096, 0)], "DRAM")
    assert init.check_remote_metadata(target.name, xl)
    target.send_notif(init.name, b"over the listener")
    assert _wait(init.get_new_notifs, "a notification") == {target.name: [b"over the listener"]}
    init.invalidate_local_metadata("127.0.0.1", port)
    _wait(lambda: not target.check_remote_metadata(init.name), "the invalidation")
    with pytest.raises(nixlBind.nixlNotSupportedError):   # no central metadata server
        init.send_local_metadata()
    target.deregister_memory(treg)


def test_shim(tmp_path):
    lib = os.path.dirname(os.path.dirname(os.path.abspath(orbitte.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), lib]))
    r = subprocess.run([sys.executable, "-m", "orbitte.nixl.shim", str(tmp_path)], env=env,
                       capture_output=True, text=True, check=True)
    assert str(tmp_path / "nixl") in r.stdout
    prog = (
        "import nixl, nixl._api, nixl._bindings, nixl._utils, nixl.logging\n"
        "import orbitte.nixl._api as api, orbitte.nixl._bindings as b\n"
        "from nixl._api import nixl_agent, nixl_agent_config, nixlBind\n"
        "from nixl._bindings import nixlXferTelemetry, nixlBackendError, "
        "nixlCancelledError, nixlRemoteDisconnectError, nixlAgent\n"
        "assert nixl.__orbitte__ is True\n"
        "assert nixl._api is api and nixl._bindings is b and nixlBind is b\n"
        "assert nixl.nixl_agent is api.nixl_agent\n"
        "print('shim ok')\n")
    r = subprocess.run([sys.executable, "-c", prog], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "shim ok" in r.stdout
    assert "nixl is OrbitTE's NIXL API" in r.stdout
    assert orbitte.nixl.__orbitte__ is True


# ---- the decoders take untrusted bytes -------------------------------------------------


def test_decoders_on_damaged_and_random_bytes():
    rng = np.random.default_rng(5)
    rows = [(0x10000 * i, 4096, 0, 0) for i in range(1, 6)]
    good = _md.encode_md("agent", "127.0.0.1:1234", rows, False, b"OTEM descriptor bytes")
    assert _md.decode_md(good) == ("agent", "127.0.0.1:1234", rows, False)
    assert _md.decode_md_desc(good)[2] == b"OTEM descriptor bytes"
    for _ in range(3000):
        blob = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            blob[int(rng.integers(0, len(blob)))] = int(rng.integers(0, 256))
        blob = bytes(blob[:int(rng.integers(0, len(blob) + 1))])
        if blob == good:
            continue
        with pytest.raises(_md.MDError):
            _md.decode_md(blob)
        # a body that is garbage behind a valid tag (as a key holder could forge)
        body = blob[:-32] if len(blob) > 32 else blob
        body = _md.MD_MAGIC + body[len(_md.MD_MAGIC):]
        try:
            name, engine, got, partial = _md.decode_md(body + _md._tag(body))
        except _md.MDError:
            continue
        assert isinstance(name, str) and name and isinstance(got, list)
    # frames and fragments
    frames = _md.frames("agent", _md.KIND_NOTIF, bytes(range(256)) * 100, 77)
    assert len(frames) > 1 and all(len(f) <= orbitte.NOTIFY_MAX for f in frames)
    r = _md.Reassembly()
    for f in frames[:-1]:
        agent, kind, payload = _md.parse_frame(f)
        assert r.add(agent, payload) is None
    agent, kind, payload = _md.parse_frame(frames[-1])
    assert r.add(agent, payload) == (_md.KIND_NOTIF, bytes(range(256)) * 100)
    assert r.held == 0 and not r.parts
    for _ in range(3000):
        f = bytearray(frames[int(rng.integers(0, len(frames)))])
        for _ in range(int(rng.integers(1, 4))):
            f[int(rng.integers(0, len(f)))] = int(rng.integers(0, 256))
        got = _md.parse_frame(bytes(f[:int(rng.integers(0, len(f) + 1))]))
        if got is not None:
            a, k, p = got
            if k == _md.KIND_FRAG:
                out = r.add(a, p)
                assert out is None or isinstance(out[1], bytes)
        assert len(r.parts) <= _md.MAX_PARTIAL and r.held <= _md.MAX_PENDING
    assert _md.parse_frame(b"plain notification") is None


# ---- the central metadata server (etcd) ----------------------------------------------------


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd_server(tmp_path, monkeypatch):
    import shutil
    import urllib.request
    exe = shutil.which("etcd")
    if exe is None:
        pytest.skip("etcd is not installed (contrib/install-deps.sh installs it)")
    c, p = _free_port(), _free_port()
    proc = subprocess.Popen(
        [exe, "--name", "t", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{c}",
         "--advertise-client-urls", f"http://127.0.0.1:{c}",
         "--listen-peer-urls", f"http://127.0.0.1:{p}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
         "--initial-cluster", f"t=http://127.0.0.1:{p}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def up():
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{c}/v3/maintenance/status",
                                             data=b"{}")
                with urllib.request.urlopen(req, timeout=1):
                    return True
            except OSError:
                return proc.poll() is not None
        _wait(up, "etcd's start")
        assert proc.poll() is None, "etcd exited"
        monkeypatch.setenv("NIXL_ETCD_ENDPOINTS", f"http://127.0.0.1:{c}")
        monkeypatch.setenv("NIXL_ETCD_NAMESPACE", f"/orbitte-test-{uuid.uuid4().hex}/")
        yield
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_metadata_through_etcd(etcd_server):
    from orbitte.nixl import _etcd
    a, b, c = _agent(), _agent(), _agent()
    m1, m2 = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    a.register_memory([(_addr(m1), 4096, 0, ""), (_addr(m2), 4096, 0, "")], "DRAM")
    a.send_local_metadata()
    b.fetch_remote_metadata(a.name)
    _wait(lambda: b.check_remote_metadata(a.name), "metadata from etcd")
    b.send_notif(a.name, b"via etcd")
    assert _wait(a.get_new_notifs, "a notification") == {b.name: [b"via etcd"]}
    # partial metadata under a label
    part = a.get_reg_descs([(_addr(m1), 4096, 0, "")], "DRAM")
    a.send_partial_agent_metadata(part, True, label="part")
    c.fetch_remote_metadata(a.name, label="part")
    _wait(lambda: c.check_remote_metadata(a.name), "partial metadata from etcd")
    assert c.check_remote_metadata(a.name, c.get_xfer_descs([(_addr(m1), 4096, 0)], "DRAM"))
    assert not c.check_remote_metadata(a.name,
                                       c.get_xfer_descs([(_addr(m2), 4096, 0)], "DRAM"))
    # a value altered in the store is refused
    blob = bytearray(_etcd.get(_etcd.key(a.name)))
    blob[12] ^= 1
    _etcd.put(_etcd.key(a.name, "bad"), bytes(blob))
    with pytest.raises(nixlBind.nixlInvalidParamError):
        c.add_remote_agent(_etcd.get(_etcd.key(a.name, "bad")))
    a.invalidate_local_metadata()
    assert _etcd.get(_etcd.key(a.name)) is None and _etcd.get(_etcd.key(a.name, "part")) is None
