"""orbitte.mooncake.TransferEngine: Mooncake's Python API over OrbitTE, between
two processes (tests/mc_target.py is the target), with every byte checked on
the side that did not move it."""
import ctypes
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from orbitte import mooncake
from orbitte.mooncake import TransferEngine, TransferNotify, TransferOpcode

HERE = os.path.dirname(os.path.abspath(__file__))
KIB = 1024
MIB = 1024 * KIB


class Target:
    """tests/mc_target.py in its own process, driven over its stdin."""

    def __init__(self, length=4 * MIB):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "mc_target.py"),
                                      str(length)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line, "the target process did not start"
        info = json.loads(line)
        self.name, self.addr, self.length = info["name"], info["addr"], info["length"]

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def check(self, off, n, seed):
        return self.ask(f"check {off} {n} {seed}")

    def notifies(self, n, seconds=10):
        return json.loads(self.ask(f"notifies {n} {seconds}"))

    def close(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            try:
                self.ask("quit")
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.fixture
def target():
    t = Target()
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def te():
    e = TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    return e


def test_calls_refuse_what_is_no_buffer(te):
    """The byte copies refuse address 0 (what get_first_buffer_address gives
    when there is no buffer) instead of crashing; register_memory of an
    address that is no int returns -1; get_rpc_port is -1 once closed."""
    assert te.get_first_buffer_address(te.get_engine().name) == 0
    assert te.write_bytes_to_buffer(0, b"abc", 3) == -1
    assert te.read_bytes_from_buffer(0, 3) == b""
    buf = te.allocate_managed_buffer(4096)
    assert te.write_bytes_to_buffer(buf, b"abc", 3) == 0
    assert te.read_bytes_from_buffer(buf, 3) == b"abc"
    assert te.register_memory("abc", 10) == -1
    assert te.free_managed_buffer(buf, 4096) == 0
    assert te.get_rpc_port() > 0
    te.get_engine().close()
    assert te.get_rpc_port() == -1


def seeded(seed, n):
    return ((np.arange(n, dtype=np.uint64) + seed) % 256).astype(np.uint8)


def view(addr, n):
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(addr))


def stop(pid):
    """SIGSTOP pid and return once the kernel shows it stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError("the target did not stop")


# ---- setup ---------------------------------------------------------------------


def test_names_ports_and_first_buffer(te, target):
    port = te.get_rpc_port()
    own = f"127.0.0.1:{port}"
    assert 0 < port < 65536 and te.get_engine().name == own
    assert te.get_first_buffer_address(target.name) == target.addr
    assert te.get_first_buffer_address(own) == 0
    addr = te.allocate_managed_buffer(64 * KIB)
    assert addr != 0 and addr % 4096 == 0
    assert te.get_first_buffer_address(own) == addr
    assert te.free_managed_buffer(addr, 64 * KIB) == 0
    assert te.get_first_buffer_address(own) == 0
    topo = json.loads(te.get_local_topology())
    assert "cpu:0" in topo and all(len(v) == 2 for v in topo.values())


def free_port():
    """A loopback port nobody listens on (just closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_initialize_listens_on_the_port_given(caplog):
    """P2PHANDSHAKE with "ip:port": the engine listens there and peers open it
    by that name; a port in use: -1 and a message naming it; port 0 or none:
    a free port."""
    caplog.set_level(logging.ERROR, logger="orbitte.mooncake")
    for _ in range(20):
        port = free_port()
        target = TransferEngine()
        if target.initialize(f"127.0.0.1:{port}", "P2PHANDSHAKE", "tcp", "") == 0:
            break
        caplog.clear()  # taken meanwhile by another process: try another
    assert target.get_rpc_port() == port
    name = f"127.0.0.1:{port}"
    assert target.get_engine().name == name
    dst = target.allocate_managed_buffer(64 * KIB)
    # a peer finds it by the name it was given
    init = TransferEngine()
    assert init.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    src = init.allocate_managed_buffer(64 * KIB)
    data = bytes(seeded(3, 64 * KIB))
    assert init.write_bytes_to_buffer(src, data, len(data)) == 0
    assert init.get_first_buffer_address(name) == dst
    assert init.transfer_sync_write(name, src, dst, len(data)) == 0
    assert target.read_bytes_from_buffer(dst, len(data)) == data
    # the port is taken now
    again = TransferEngine()
    assert again.initialize(name, "P2PHANDSHAKE", "tcp", "") == -1
    assert f"cannot listen on port {port} of 127.0.0.1" in caplog.text
    assert f"port {port} is in use" in caplog.text
    assert again.get_rpc_port() == -1
    # port 0, or none: a free one
    for hostname in ("127.0.0.1:0", "127.0.0.1"):
        e = TransferEngine()
        assert e.initialize(hostname, "P2PHANDSHAKE", "tcp", "") == 0
        assert e.get_rpc_port() not in (0, port, init.get_rpc_port())
        e.get_engine().close()


# A target process that registers a buffer at the higher address first, then
# one below it, then allocates a managed buffer; prints its name and the
# address it registered first, and waits for a line on stdin.
_ORDER_TARGET = """
import json, sys
import numpy as np
from orbitte.mooncake import TransferEngine
te = TransferEngine()
assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
buf = np.zeros(2 * 65536, dtype=np.uint8)
low, high = buf.ctypes.data, buf.ctypes.data + 65536
assert te.register_memory(high, 65536) == 0
assert te.register_memory(low, 65536) == 0
managed = te.allocate_managed_buffer(1 << 20)
assert managed != 0
name = "127.0.0.1:%d" % te.get_rpc_port()
assert te.get_first_buffer_address(name) == high
print(json.dumps({"name": name, "first": high, "low": low, "managed": managed}), flush=True)
sys.stdin.readline()
print(bytes(buf[65536:65536 + 16]).hex(), flush=True)
"""


def test_first_buffer_address_is_the_first_registered(te):
    """get_first_buffer_address(peer) is the buffer the peer registered first
    (Mooncake's order), not the lowest address nor a managed buffer
    allocated after it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, "-c", _ORDER_TARGET], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()
        assert line, "the target process did not start"
        info = json.loads(line)
        assert info["low"] < info["first"]
        assert te.get_first_buffer_address(info["name"]) == info["first"]
        src = te.allocate_managed_buffer(4096)
        assert te.write_bytes_to_buffer(src, b"first-registered", 16) == 0
        assert te.transfer_sync_write(info["name"], src, info["first"], 16) == 0
        p.stdin.write("\n")
        p.stdin.flush()
        assert bytes.fromhex(p.stdout.readline().strip()) == b"first-registered"
    finally:
        p.kill()
        p.wait(timeout=30)
    # this engine's own name: its own registration order
    own = f"127.0.0.1:{te.get_rpc_port()}"
    buf = np.zeros(2 * 4096, dtype=np.uint8)
    assert te.register_memory(buf.ctypes.data + 4096, 4096) == 0
    assert te.register_memory(buf.ctypes.data, 4096) == 0
    assert te.get_first_buffer_address(own) == src
    assert te.free_managed_buffer(src, 4096) == 0
    assert te.get_first_buffer_address(own) == buf.ctypes.data + 4096


def test_shim_command_makes_mooncake_engine_resolve(tmp_path):
    """python -m orbitte.mooncake shim DIR writes a mooncake package that
    serves mooncake.engine from orbitte.mooncake (for programs started
    unchanged with DIR on PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-m", "orbitte.mooncake", "shim", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    code = ("from mooncake.engine import TransferEngine\n"
            "import mooncake.engine, orbitte.mooncake\n"
            "assert mooncake.engine is orbitte.mooncake\n"
            "assert TransferEngine is orbitte.mooncake.TransferEngine\n"
            "print('ok')\n")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + sys.path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
    # again into the same folder: fine; into a folder holding another mooncake: refused
    out = subprocess.run([sys.executable, "-m", "orbitte.mooncake", "shim", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    (tmp_path / "other" / "mooncake").mkdir(parents=True)
    (tmp_path / "other" / "mooncake" / "engine.py").write_text("# Mooncake's own\n")
    out = subprocess.run([sys.executable, "-m", "orbitte.mooncake", "shim",
                          str(tmp_path / "other")], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode != 0 and "not written by" in out.stderr
    assert (tmp_path / "other" / "mooncake" / "engine.py").read_text() == "# Mooncake's own\n"


def test_install_makes_mooncake_engine_resolve(tmp_path):
    code = ("import orbitte.mooncake as m; m.install()\n"
            "from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode\n"
            "import mooncake.engine\n"
            "assert TransferEngine is m.TransferEngine and mooncake.engine is m\n"
            "assert TransferOpcode.Write == 1 and TransferOpcode.Read == 0\n"
            "assert TransferEngine.TransferOpcode.Write == 1\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


# ---- data between two processes ----------------------------------------------------


def test_sync_write_and_read_every_byte(te, target):
    local = te.allocate_managed_buffer(2 * MIB)
    lv = view(local, 2 * MIB)
    off = 0
    for seed, n in enumerate([1, 7, 255, 4 * KIB, 4 * KIB + 1, 65537, MIB, 2 * MIB - 3]):
        off = (off + 4099) % (target.length - n)
        lv[:n] = seeded(seed, n)
        assert te.transfer_sync_write(target.name, local, target.addr + off, n) == 0
        assert target.check(off, n, seed) == "ok"
        lv[:n] = 0
        assert te.transfer_sync_read(target.name, local, target.addr + off, n) == 0
        assert np.array_equal(lv[:n], seeded(seed, n))
        # opcode form, the target's bytes changed by the target itself
        assert target.ask(f"fill {off} {n} {seed + 50}") == "ok"
        assert te.transfer_sync(target.name, local, target.addr + off, n,
                                TransferOpcode.Read) == 0
        assert np.array_equal(lv[:n], seeded(seed + 50, n))


def test_batch_sync_scatter_every_byte(te, target):
    rng = random.Random(5)
    blocks = 240
    lens = [rng.choice([1, 100, 4 * KIB, 9000, 16 * KIB]) for _ in range(blocks)]
    slot = 16 * KIB
    local = te.allocate_managed_buffer(blocks * slot)
    lv = view(local, blocks * slot)
    order = list(range(blocks))
    rng.shuffle(order)  # local block i goes to remote slot order[i]
    srcs = [local + i * slot for i in range(blocks)]
    dsts = [target.addr + order[i] * slot for i in range(blocks)]
    for i, n in enumerate(lens):
        lv[i * slot:i * slot + n] = seeded(i, n)
    assert te.batch_transfer_sync_write(target.name, srcs, dsts, lens) == 0
    for i, n in enumerate(lens):
        assert target.check(order[i] * slot, n, i) == "ok", i
    lv[:] = 0
    assert te.batch_transfer_sync_read(target.name, srcs, dsts, lens) == 0
    for i, n in enumerate(lens):
        assert np.array_equal(lv[i * slot:i * slot + n], seeded(i, n)), i
    # batch_transfer_sync with an opcode, numpy memory registered by address
    arr = np.zeros(blocks * slot, dtype=np.uint8)
    base = arr.ctypes.data
    assert te.batch_register_memory([base], [arr.nbytes]) == 0
    assert te.batch_transfer_sync(target.name, [base + i * slot for i in range(blocks)],
                                  dsts, lens, TransferOpcode.Read) == 0
    for i, n in enumerate(lens):
        assert np.array_equal(arr[i * slot:i * slot + n], seeded(i, n)), i
    assert te.batch_unregister_memory([base]) == 0
    assert te.batch_transfer_sync_read(target.name, [base], [target.addr], [16]) == -1


def test_notifications_arrive_whole_and_in_order(te, target):
    local = te.allocate_managed_buffer(64 * KIB)
    view(local, 64 * KIB)[:] = seeded(3, 64 * KIB)
    assert te.transfer_sync(target.name, local, target.addr, 64 * KIB, TransferOpcode.Write,
                            TransferNotify("req-1", "layer 0 done")) == 0
    n = TransferNotify()
    n.name, n.msg = "req-1", "kv ready: blocks 0..3, \u00e9t\u00e9"
    assert te.batch_transfer_sync(target.name, [local, local + 4 * KIB],
                                  [target.addr + MIB, target.addr + 2 * MIB],
                                  [4 * KIB, 4 * KIB], TransferOpcode.Write, n) == 0
    # a notification without data (empty lists) is sent at once
    assert te.batch_transfer_sync(target.name, [], [], [], TransferOpcode.Write,
                                  TransferNotify("req-2", "")) == 0
    got = target.notifies(3)
    assert got == [["req-1", "layer 0 done"], ["req-1", "kv ready: blocks 0..3, \u00e9t\u00e9"],
                   ["req-2", ""]]
    # the data was there before the notification was
    assert target.check(0, 64 * KIB, 3) == "ok"
    assert target.check(MIB, 4 * KIB, 3) == "ok"
    assert target.check(2 * MIB, 4 * KIB, (3 + 4 * KIB) % 256) == "ok"
    assert te.transfer_sync(target.name, local, target.addr, 16, TransferOpcode.Write,
                            TransferNotify("x", "y" * 5000)) == -1
    assert target.notifies(1, 0.2) == []


def test_async_batch_ids_and_status_polling(te, target):
    slot = 64 * KIB
    local = te.allocate_managed_buffer(8 * slot)
    lv = view(local, 8 * slot)
    ids = []
    for b in range(4):
        lv[b * 2 * slot:(b + 1) * 2 * slot] = seeded(b, 2 * slot)
        srcs = [local + b * 2 * slot, local + b * 2 * slot + slot]
        dsts = [target.addr + b * 2 * slot, target.addr + b * 2 * slot + slot]
        ids.append(te.batch_transfer_async_write(target.name, srcs, dsts, [slot, slot]))
    assert 0 not in ids and len(set(ids)) == 4
    assert te.get_batch_transfer_status(ids) == 0
    for b in range(4):
        assert target.check(b * 2 * slot, 2 * slot, b) == "ok"
    # ids are released: asking again is an error, not a hang
    assert te.get_batch_transfer_status(ids[:1]) == -1
    bid = te.transfer_submit_write(target.name, local, target.addr + MIB, slot)
    assert bid != 0
    deadline = time.monotonic() + 10
    while (r := te.transfer_check_status(bid)) == 0:
        assert time.monotonic() < deadline
    assert r == 1 and te.transfer_check_status(bid) == -1
    assert target.check(MIB, slot, 0) == "ok"
    lv[:] = 0
    rid = te.batch_transfer_async(target.name, [local], [target.addr], [8 * slot],
                                  TransferOpcode.Read)
    assert rid != 0 and te.get_batch_transfer_status([rid]) == 0
    for b in range(4):
        assert np.array_equal(lv[b * 2 * slot:(b + 1) * 2 * slot], seeded(b, 2 * slot))
    # a failed task: the id reports -1
    bad = te.batch_transfer_async_write(target.name, [local], [target.addr + target.length - 8],
                                        [16])
    assert bad != 0
    while (r := te.transfer_check_status(bad)) == 0:
        pass
    assert r == -1


# ---- errors ------------------------------------------------------------------------


def test_error_returns(te, target, caplog):
    caplog.set_level(logging.ERROR, logger="orbitte.mooncake")
    local = te.allocate_managed_buffer(64 * KIB)
    unregistered = np.zeros(4096, dtype=np.uint8)
    name = target.name
    # remote address outside every region, a range crossing the region's end
    assert te.transfer_sync_write(name, local, 4096, 16) == -1
    assert te.transfer_sync_write(name, local, target.addr + target.length - 8, 16) == -1
    assert te.transfer_sync_read(name, local, target.addr + target.length, 1) == -1
    # local memory that was never registered, or no longer is
    assert te.transfer_sync_write(name, unregistered.ctypes.data, target.addr, 16) == -1
    assert te.batch_transfer_sync_write(name, [local, unregistered.ctypes.data],
                                        [target.addr, target.addr + 64], [16, 16]) == -1
    assert te.batch_transfer_async_write(name, [unregistered.ctypes.data], [target.addr],
                                         [16]) == 0
    assert te.transfer_submit_write(name, unregistered.ctypes.data, target.addr, 16) == 0
    # an unknown segment: nothing listens on a port just closed
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    assert te.transfer_sync_write(dead, local, target.addr, 16) == -1
    assert te.batch_transfer_async_read(dead, [local], [target.addr], [16]) == 0
    assert te.get_first_buffer_address(dead) == 0
    assert te.send_probe(dead) == -1 and te.send_probe(name) == 0
    # list lengths that differ
    assert te.batch_transfer_sync_write(name, [local], [target.addr, target.addr], [1]) == -1
    # memory bookkeeping
    assert te.unregister_memory(unregistered.ctypes.data) == -1
    assert te.free_managed_buffer(unregistered.ctypes.data, 4096) == -1
    assert te.write_bytes_to_buffer(local, b"abc", 4) == -1
    assert te.transfer_check_status(987654) == -1
    # nothing landed: every byte of the target is as it started
    assert target.ask("pristine") == "ok"
    # and the engine still works
    assert te.write_bytes_to_buffer(local, bytes(seeded(9, 100)), 100) == 0
    assert te.transfer_sync_write(name, local, target.addr, 100) == 0
    assert target.check(0, 100, 9) == "ok"
    assert "not inside a registered region" in caplog.text


def test_initialize_errors(caplog, monkeypatch):
    caplog.set_level(logging.ERROR, logger="orbitte.mooncake")
    monkeypatch.delenv("OTE_TLS", raising=False)
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    te = TransferEngine()
    assert te.transfer_sync_write("127.0.0.1:1", 0, 0, 1) == -1
    assert te.allocate_managed_buffer(4096) == 0 and te.get_rpc_port() == -1
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "") == -1
    assert "protocol rdma needs an RDMA device" in caplog.text
    assert te.initialize("127.0.0.1", "http://127.0.0.1:8080/metadata", "tcp", "") == -1
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "nvlink", "") == -1
    assert te.initialize_ext("127.0.0.1", "127.0.0.1:8080", "tcp", "", "http") == -1
    assert "not supported" in caplog.text
    assert "OTE_TLS" not in os.environ  # the engine's settings do not leak
    # MC_FORCE_TCP turns rdma into tcp; HCA names are ignored over tcp
    monkeypatch.setenv("MC_FORCE_TCP", "1")
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0,mlx5_1") == 0
    assert te.get_rpc_port() > 0
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == -1  # only once


def test_metadata_servers_reach_the_engine(caplog):
    """etcd:// and redis:// (and a bare host:port, read as etcd) are handed to the
    engine's metadata parameter: 0 where the library has the backend, -1 with
    its reason where it does not."""
    caplog.set_level(logging.ERROR, logger="orbitte.mooncake")
    for server in ("etcd://127.0.0.1:2379", "redis://127.0.0.1:6379", "127.0.0.1:2379"):
        te = TransferEngine()
        ret = te.initialize("127.0.0.1:17777", server, "tcp", "")
        if ret != 0:
            assert "Engine()" in caplog.text
        caplog.clear()


def test_sync_batch_deadline_leaves_no_transfer_behind(target, monkeypatch, caplog):
    """At its deadline a sync batch cancels its tasks and returns -1 only once
    none can still land: the stopped target, resumed, finds its buffer
    untouched; the next call works."""
    caplog.set_level(logging.ERROR, logger="orbitte.mooncake")
    monkeypatch.setenv("OTE_XFER_TIMEOUT_MS", "2500")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    te.transfer_timeout = 0.3
    n = target.length
    local = te.allocate_managed_buffer(n)
    view(local, n)[:] = 0xAB
    # connect first, so that only the transfer meets the stopped target
    assert te.get_first_buffer_address(target.name) == target.addr
    blk = 256 * KIB
    srcs = [local + o for o in range(0, n, blk)]
    dsts = [target.addr + o for o in range(0, n, blk)]
    stop(target.proc.pid)
    try:
        t0 = time.monotonic()
        assert te.batch_transfer_sync_write(target.name, srcs, dsts, [blk] * len(srcs)) == -1
        took = time.monotonic() - t0
        assert "deadline" in caplog.text
        assert took >= 0.3
        bid = te.batch_transfer_async_write(target.name, srcs, dsts, [blk] * len(srcs))
        assert bid != 0
        assert te.get_batch_transfer_status([bid]) == -1
    finally:
        os.kill(target.proc.pid, signal.SIGCONT)
    time.sleep(0.5)
    assert target.ask("pristine") == "ok"
    view(local, 4096)[:] = seeded(1, 4096)
    assert te.transfer_sync_write(target.name, local, target.addr, 4096) == 0
    assert target.check(0, 4096, 1) == "ok"


# ---- a session as Mooncake's own initiator and target tests run one -----------------


def test_initiator_target_session(te, target):
    rng = random.Random(11)
    own = f"127.0.0.1:{te.get_rpc_port()}"
    src = te.get_first_buffer_address(own)
    if src == 0:
        src = te.allocate_managed_buffer(64 * MIB)
    assert src != 0
    dst = te.get_first_buffer_address(target.name)
    assert dst == target.addr
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&()*+,-./"
    sizes = [rng.randint(16, 256) for _ in range(200)] + [KIB, 64 * KIB, MIB, 4 * MIB]
    for i, n in enumerate(sizes):
        data = bytes(rng.choice(alphabet) for _ in range(min(n, 4096))) * (n // 4096 or 1)
        data = data[:n]
        assert te.write_bytes_to_buffer(src, data, len(data)) == 0
        assert te.transfer_sync_write(target.name, src, dst, len(data)) == 0, i
        assert te.write_bytes_to_buffer(src, bytes(len(data)), len(data)) == 0
        assert te.transfer_sync_read(target.name, src, dst, len(data)) == 0, i
        assert te.read_bytes_from_buffer(src, len(data)) == data, i
    for rnd in range(3):
        srcs = [src + j * KIB for j in range(100)]
        dsts = [dst + j * KIB for j in range(100)]
        datas = [bytes(rng.choice(alphabet) for _ in range(rng.randint(32, 128)))
                 for _ in range(100)]
        lens = [len(d) for d in datas]
        for s, d in zip(srcs, datas):
            assert te.write_bytes_to_buffer(s, d, len(d)) == 0
        if rnd % 2 == 0:
            assert te.batch_transfer_sync_write(target.name, srcs, dsts, lens) == 0
        else:
            bid = te.batch_transfer_async_write(target.name, srcs, dsts, lens)
            assert bid != 0 and te.get_batch_transfer_status([bid]) == 0
        for s, n in zip(srcs, lens):
            assert te.write_bytes_to_buffer(s, bytes(n), n) == 0
        if rnd % 2 == 0:
            assert te.batch_transfer_sync_read(target.name, srcs, dsts, lens) == 0
        else:
            bid = te.batch_transfer_async_read(target.name, srcs, dsts, lens)
            assert bid != 0 and te.get_batch_transfer_status([bid]) == 0
        for s, d in zip(srcs, datas):
            assert te.read_bytes_from_buffer(s, len(d)) == d


def test_module_names():
    assert mooncake.Write == TransferOpcode.Write == 1 and mooncake.Read == 0
    assert TransferNotify("a", "b") == TransferNotify("a", "b")
    assert mooncake.P2PHANDSHAKE == "P2PHANDSHAKE"


# ---- argument kinds and polling ----------------------------------------------------


def test_sync_batch_argument_kinds_every_byte(te, target, caplog):
    """Lists of ints go to submit_arrays unconverted; tuples, ranges, numpy
    arrays and lists of numpy scalars are converted: every kind moves
    every byte. An item that is no number is refused with -1, nothing moved."""
    n, blk = 8, 4 * KIB
    local = te.allocate_managed_buffer(n * blk)
    lv = view(local, n * blk)
    kinds = [
        lambda xs: list(xs),
        lambda xs: tuple(xs),
        lambda xs: np.array(xs, dtype=np.uint64),
        lambda xs: [np.uint64(x) for x in xs],
        lambda xs: [np.int64(x) for x in xs],
    ]
    for k, kind in enumerate(kinds):
        lv[:] = seeded(k, n * blk)
        srcs = [local + i * blk for i in range(n)]
        dsts = [target.addr + (n - 1 - i) * blk for i in range(n)]  # reversed slots
        assert te.batch_transfer_sync_write(target.name, kind(srcs), kind(dsts),
                                            kind([blk] * n)) == 0, k
        for i in range(n):
            assert target.check((n - 1 - i) * blk, blk, (k + i * blk) % 256) == "ok", (k, i)
        lv[:] = 0
        assert te.batch_transfer_sync_read(target.name, kind(srcs), kind(dsts),
                                           kind([blk] * n)) == 0, k
        assert np.array_equal(lv, seeded(k, n * blk)), k
    assert te.batch_transfer_sync_write(target.name, range(local, local + 2 * blk, blk),
                                        [target.addr, target.addr + blk], range(blk, blk + 2)) == 0
    assert te.batch_transfer_sync_write(target.name, [local, "x"], [target.addr] * 2,
                                        [8, 8]) == -1
    assert "batch_transfer_sync_write" in caplog.text
    assert te.batch_transfer_sync_write(target.name, [local], [target.addr], [-8]) == -1


def test_check_status_polled_back_to_back_waits_with_the_gil_released(te, target):
    """A pending id polled again at once is waited for in the engine with
    the GIL released: another Python thread runs during a loop of polls
    (the switch interval is raised so that the interpreter alone would not
    let it in), and the id reports 1 with the bytes landed once the peer
    runs again."""
    slot = 64 * KIB
    local = te.allocate_managed_buffer(slot)
    view(local, slot)[:] = seeded(9, slot)
    assert te.transfer_sync_write(target.name, local, target.addr + MIB, 8) == 0  # opened
    stop(target.proc.pid)
    ran = []
    go = threading.Event()
    quit_ = threading.Event()

    def other():
        go.wait()
        while not quit_.is_set():
            ran.append(1)
            time.sleep(0)

    t = threading.Thread(target=other)
    t.start()
    old = sys.getswitchinterval()
    try:
        bid = te.transfer_submit_write(target.name, local, target.addr + MIB, slot)
        assert bid != 0
        sys.setswitchinterval(5.0)
        go.set()
        polls = [te.transfer_check_status(bid) for _ in range(20)]
        sys.setswitchinterval(old)
        assert polls == [0] * 20
        assert ran, "no other thread ran while transfer_check_status was polled"
    finally:
        sys.setswitchinterval(old)
        quit_.set()
        go.set()
        t.join()
        os.kill(target.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while (r := te.transfer_check_status(bid)) == 0:
        assert time.monotonic() < deadline
    assert r == 1
    assert target.check(MIB, slot, 9) == "ok"


def test_one_id_polled_and_waited_for_from_two_threads(te, target):
    """transfer_check_status() on one thread and get_batch_transfer_status() on
    another, for the same id: neither releases the batch while the other
    uses it. The poller is held inside its first status() of the batch while
    the other call takes the id; it then reports what it saw and leaves the
    release to the call that took the id, which reports the completion."""
    slot = 64 * KIB
    local = te.allocate_managed_buffer(slot)
    view(local, slot)[:] = seeded(4, slot)
    bid = te.transfer_submit_write(target.name, local, target.addr, slot)
    assert bid != 0
    poller = []

    class Slow:
        """The id's batch, whose status() keeps the polling thread a while."""

        def __init__(self, batch):
            self.batch = batch

        def status(self, *task):
            if threading.current_thread() in poller:
                time.sleep(0.3)
            return self.batch.status(*task)

        def __getattr__(self, name):
            return getattr(self.batch, name)

    with te._lock:
        rec = te._batches[bid]
        rec.batch = Slow(rec.batch)
    polled = []
    t = threading.Thread(target=lambda: polled.append(te.transfer_check_status(bid)))
    poller.append(t)
    t.start()
    time.sleep(0.1)   # the poller is in status()
    assert te.get_batch_transfer_status([bid]) == 0
    t.join()
    assert polled in ([0], [1])
    assert rec.released and rec.batch.batch.closed
    assert te.transfer_check_status(bid) == -1   # released: unknown now
    assert target.check(0, slot, 4) == "ok"
