"""orbitte.nixl between two processes, called the way vLLM's NixlConnector
calls NIXL's agent: pull (the decode side READs prefill's blocks, one
make_prepped_xfer per request over prepped Nx3 lists with numpy indices,
check_xfer_state polling, telemetry, notifications keyed by agent name,
heartbeats by send_notif) and push (a writer thread WRITEs blocks with a
~20 KiB notification naming them while another thread polls and releases),
and a peer that dies with a transfer in flight."""

import json
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

import orbitte.nixl._bindings as nixlBind
from orbitte.nixl._api import nixl_agent, nixl_agent_config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from nixl_peer import BLOCK, BLOCKS, LAYERS, addr, kv_cache, pattern  # noqa: E402

# Bound on waiting for a peer's answer or a transfer's end (a liveness bound
# for a hung test, not a performance figure).
DEADLINE = 60.0


class Peer:
    def __init__(self, mode, env=None):
        self.name = f"peer-{uuid.uuid4()}"
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "nixl_peer.py"),
                                   self.name, mode], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, **(env or {})))
        self.events = []
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info = self.next(lambda e: "md" in e)

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("{"):      # the "nixl" logger writes to stdout too
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def next(self, match):
        """The next event (in order) that match() accepts; the others are kept."""
        for i, e in enumerate(self.events):
            if match(e):
                return self.events.pop(i)
        end = time.monotonic() + DEADLINE
        while time.monotonic() < end:
            try:
                e = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            assert e is not None, "the peer process exited"
            if match(e):
                return e
            self.events.append(e)
        raise AssertionError("no answer from the peer process")

    def close(self):
        if self.p.poll() is None:
            try:
                self.send(cmd="exit")
                self.next(lambda e: "bye" in e)
            except (AssertionError, BrokenPipeError, OSError):
                self.p.kill()
        self.p.wait(timeout=30)
        while True:
            e = self.lines.get(timeout=DEADLINE)
            if e is None:
                break
            self.events.append(e)


@pytest.fixture
def tcp_env(monkeypatch):
    monkeypatch.setenv("OTE_TLS", "tcp")
    return {"OTE_TLS": "tcp"}


def _rows(layers):
    """Nx3 uint64 (addr, len, devId) of every block, layer-major, as vLLM builds them."""
    base = np.array([addr(a) for a in layers], dtype=np.uint64)
    rows = np.zeros((len(layers) * BLOCKS, 3), dtype=np.uint64)
    rows[:, 0] = (base[:, None] + np.arange(BLOCKS, dtype=np.uint64)[None, :] * BLOCK).ravel()
    rows[:, 1] = BLOCK
    return rows


def _remote_rows(info):
    return _rows_from(info["layers"])


def _rows_from(bases):
    base = np.array(bases, dtype=np.uint64)
    rows = np.zeros((len(bases) * BLOCKS, 3), dtype=np.uint64)
    rows[:, 0] = (base[:, None] + np.arange(BLOCKS, dtype=np.uint64)[None, :] * BLOCK).ravel()
    rows[:, 1] = BLOCK
    return rows


def _setup(mode, env=None, fill=False):
    peer = Peer(mode, env)
    agent = nixl_agent(f"local-{uuid.uuid4()}", nixl_agent_config(capture_telemetry=True))
    layers = kv_cache(fill)
    agent.register_memory(agent.get_reg_descs([(addr(a), a.nbytes, 0, "") for a in layers],
                                              "DRAM"))
    remote = agent.add_remote_agent(bytes.fromhex(peer.info["md"]))
    assert remote == peer.name.encode()
    peer.send(cmd="add", md=agent.get_agent_metadata().hex())
    assert peer.next(lambda e: "added" in e)["added"] == agent.name
    local_h = agent.prep_xfer_dlist("NIXL_INIT_AGENT", _rows(layers), "DRAM")
    remote_h = agent.prep_xfer_dlist(remote, _remote_rows(peer.info), "DRAM")
    return peer, agent, layers, remote, local_h, remote_h


def _wait_done(agent, handle):
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        st = agent.check_xfer_state(handle)
        assert st in ("DONE", "PROC")
        if st == "DONE":
            return
    raise AssertionError("the transfer did not end")


def _ids(layer_blocks):
    """Descriptor indices of (layer, block) pairs in the layer-major lists."""
    return np.array([lay * BLOCKS + b for lay, b in layer_blocks], dtype=np.int64)


def test_pull_like_vllm():
    peer, agent, layers, remote, local_h, remote_h = _setup("fill")
    try:
        rng = np.random.default_rng(7)
        for req in range(3):
            src = rng.choice(BLOCKS, 12, replace=False)
            dst = rng.choice(BLOCKS, 12, replace=False)
            pairs = [(lay, int(s), int(d)) for lay in range(LAYERS) for s, d in zip(src, dst)]
            lidx = _ids((lay, d) for lay, _, d in pairs)
            ridx = _ids((lay, s) for lay, s, _ in pairs)
            notif = f"req-{req}:1".encode()
            h = agent.make_prepped_xfer("READ", local_h, lidx, remote_h, ridx, notif_msg=notif)
            assert agent.transfer(h) in ("DONE", "PROC")
            _wait_done(agent, h)
            for lay, s, d in pairs:
                assert np.array_equal(layers[lay][d * BLOCK:(d + 1) * BLOCK], pattern(lay, s))
            t = agent.get_xfer_telemetry(h)
            assert isinstance(t, nixlBind.nixlXferTelemetry)
            assert t.totalBytes == len(pairs) * BLOCK
            assert 1 <= t.descCount <= len(pairs)
            assert t.startTime > 0 and t.postDuration > 0
            assert t.xferDuration >= t.postDuration
            agent.release_xfer_handle(h)
            e = peer.next(lambda e: "notif" in e)
            assert e["notif"] == [agent.name, notif.hex()]
        # heartbeats: notifications keyed by the sender's name, in order, each once
        peer.send(cmd="heartbeat", to=agent.name, n=5)
        peer.next(lambda e: "heartbeats" in e)
        got = []
        end = time.monotonic() + DEADLINE
        while len(got) < 5 and time.monotonic() < end:
            n = agent.get_new_notifs()
            assert set(n) <= {peer.name}
            got += n.get(peer.name, [])
        assert got == [b"hb:%d" % i for i in range(5)]
        assert agent.get_new_notifs() == {}
    finally:
        peer.close()
    # every notification arrived exactly once
    assert [e["notif"][1] for e in peer.events if "notif" in e] == []


def test_push_like_vllm():
    peer, agent, layers, remote, local_h, remote_h = _setup("zero", fill=True)
    try:
        # the local blocks hold pattern(layer, block) to be written
        rng = np.random.default_rng(11)
        nreq = 8
        posted = []
        lock = threading.Lock()
        failures = []

        def writer():
            try:
                for req in range(nreq):
                    src = rng.choice(BLOCKS, 6, replace=False)
                    dst = np.arange(req * 8, req * 8 + 6)   # each request its own blocks
                    trip = [(lay, int(s), int(d)) for lay in range(LAYERS)
                            for s, d in zip(src, dst)]
                    body = np.array(trip, dtype="<u4").tobytes()
                    # a msgpack-sized message, 8-bit clean (zeros included)
                    msg = (b"push:" + struct.pack("<II", req, len(trip)) + body
                           + b"\x00\xff" * 10000)
                    h = agent.make_prepped_xfer(
                        "WRITE", local_h, _ids((lay, s) for lay, s, _ in trip),
                        remote_h, _ids((lay, d) for lay, _, d in trip), notif_msg=msg)
                    assert agent.transfer(h) in ("DONE", "PROC")
                    with lock:
                        posted.append(h)
            except Exception as e:  # noqa: BLE001 - reported by the main thread
                failures.append(e)

        t = threading.Thread(target=writer)
        t.start()
        done = 0
        end = time.monotonic() + DEADLINE
        while done < nreq and time.monotonic() < end and not failures:
            with lock:
                hs = list(posted)
            for h in hs:
                if agent.check_xfer_state(h) == "DONE":
                    agent.get_xfer_telemetry(h)
                    agent.release_xfer_handle(h)
                    with lock:
                        posted.remove(h)
                    done += 1
        t.join()
        assert not failures, failures
        assert done == nreq
        oks = {}
        for _ in range(nreq):
            e = peer.next(lambda e: "push" in e)
            assert e["push"] not in oks
            oks[e["push"]] = e["ok"]
        assert oks == {i: True for i in range(nreq)}
    finally:
        peer.close()
    # each notification once, whole (8-bit clean), after its data (checked above)
    notifs = [bytes.fromhex(e["notif"][1]) for e in peer.events if "notif" in e]
    assert len(notifs) == nreq and len(set(notifs)) == nreq
    assert all(e["notif"][0] == agent.name for e in peer.events if "notif" in e)
    assert all(m.endswith(b"\x00\xff" * 10000) for m in notifs)


def test_peer_dies_mid_transfer(tcp_env):
    # over tcp a stopped peer cannot serve a READ: the transfer is in flight
    # when the peer is killed, and it must end in an error, never "DONE"
    peer, agent, layers, remote, local_h, remote_h = _setup("fill", env=tcp_env)
    idx = np.arange(LAYERS * BLOCKS)
    h = agent.make_prepped_xfer("READ", local_h, idx, remote_h, idx, notif_msg=b"never")
    os.kill(peer.p.pid, signal.SIGSTOP)
    try:
        try:
            st = agent.transfer(h)
        except nixlBind.nixlError:
            st = "ERR"
        assert st in ("PROC", "ERR")
        if st == "PROC":   # in flight: posting it again is refused
            with pytest.raises(nixlBind.nixlRepostActiveError):
                agent.transfer(h)
    finally:
        peer.p.kill()
        peer.p.wait(timeout=30)
    outcome = None
    end = time.monotonic() + DEADLINE
    while outcome is None and time.monotonic() < end:
        try:
            st = agent.check_xfer_state(h)
        except nixlBind.nixlError as e:
            outcome = e
            break
        assert st != "DONE"
        if st == "ERR":
            outcome = st
    assert outcome is not None, "the transfer to a dead peer did not end"
    if isinstance(outcome, Exception):
        assert isinstance(outcome, nixlBind.nixlRemoteDisconnectError), outcome
    agent.release_xfer_handle(h)
    # after the peer exited: a request can still be made, posting it and
    # sending a notification raise NIXL's disconnect error
    h2 = agent.make_prepped_xfer("READ", local_h, [0], remote_h, [0])
    with pytest.raises(nixlBind.nixlRemoteDisconnectError):
        agent.transfer(h2)
    with pytest.raises(nixlBind.nixlRemoteDisconnectError):
        agent.send_notif(remote, b"anyone?")
    agent.release_xfer_handle(h2)
