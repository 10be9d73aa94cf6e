"""nixlAgent: NIXL's low-level agent over one orbitte.Engine.

- Memory: each registration descriptor is one OrbitTE registration
  (REMOTE_READ | REMOTE_WRITE).
- Metadata: getLocalMD() is a signed blob (see _md.py) naming the agent, its
  engine (the "host:port" of its control listener), carrying OrbitTE's signed
  descriptor of that engine (Engine.desc_export()) and its regions.
  loadRemoteMD() checks the signature, opens the engine from the descriptor
  (Engine.open_desc(): decoded and, under OTE_AUTH_KEY, its HMAC checked by
  OrbitTE; refused: nixlInvalidParamError) and checks that every region the
  blob names is published by it.
- Transfers: a request is one orbitte.Transfer (local addresses, remote
  addresses, lengths, built once); each post is one Transfer.post() call, its
  notification attached so that the peer queues it only after every
  descriptor landed, and never when one failed.
- Notifications travel as OrbitTE notifications framed with the sender's
  agent name (_md.py); longer ones than one notification holds go as
  fragments, the last one carried by the transfer.
- Listener: with useListenThread the engine listens on listenPort and a
  thread takes metadata sent, requested or invalidated by peers
  (sendLocalMD / fetchRemoteMD / invalidateLocalMD travel to "ip:port").
"""

import collections
import itertools
import logging
import os
import select
import sys
import threading
import time
import weakref

import numpy as np

import orbitte

from . import _etcd, _md
from ._bindings import (
    NIXL_INIT_AGENT,
    nixl_mem_t,
    nixl_status_t,
    nixl_xfer_op_t,
    nixlBackendError,
    nixlCancelledError,
    nixlInvalidParamError,
    nixlMismatchError,
    nixlNotAllowedError,
    nixlNotFoundError,
    nixlNotPostedError,
    nixlNotSupportedError,
    nixlNoTelemetryError,
    nixlRegDList,
    nixlRemoteDisconnectError,
    nixlRepostActiveError,
    nixlXferDList,
    nixlXferTelemetry,
    _MEM_STR,
)

SUCCESS = nixl_status_t.NIXL_SUCCESS
IN_PROG = nixl_status_t.NIXL_IN_PROG

# The log of the agent itself goes to stderr, as NIXL's native log does
# (its CI reads "MD listener is listening on port N" there); NIXL_LOG_LEVEL
# sets its level (default WARN).
log = logging.getLogger("orbitte.nixl.agent")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the record."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


if not log.handlers:
    _h = _StderrHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s NIXL %(levelname)-7s orbitte.nixl %(message)s",
                                      "%Y-%m-%d %H:%M:%S"))
    log.addHandler(_h)
    log.propagate = False


def _set_log_level():
    """The agent log's level from NIXL_LOG_LEVEL (read at each agent's creation)."""
    lvl = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL}.get(os.environ.get("NIXL_LOG_LEVEL", "").upper())
    log.setLevel(lvl if lvl is not None else logging.WARNING)

PLUGINS = ["UCX"]           # every plugin name served by the OrbitTE engine
_PLUGIN_MEMS = ["DRAM_SEG", "VRAM_SEG"]
_OP = {int(nixl_xfer_op_t.NIXL_READ): orbitte.READ, int(nixl_xfer_op_t.NIXL_WRITE): orbitte.WRITE}
_TRUE = ("y", "yes", "1", "true", "on")

# OrbitTE status -> NIXL exception class
_S = orbitte.Status
_MAP = {
    _S.INVALID_PARAM: nixlInvalidParamError, _S.EXISTS: nixlInvalidParamError,
    _S.NOT_REGISTERED: nixlNotFoundError, _S.OUT_OF_BOUNDS: nixlNotFoundError,
    _S.NOT_FOUND: nixlNotFoundError, _S.ACCESS: nixlNotAllowedError,
    _S.AUTH: nixlNotAllowedError, _S.CANCELED: nixlCancelledError,
    _S.REMOTE_DISCONNECT: nixlRemoteDisconnectError, _S.UNREACHABLE: nixlRemoteDisconnectError,
    _S.PEER_RESTARTED: nixlRemoteDisconnectError, _S.UNSUPPORTED: nixlNotSupportedError,
    _S.NO_DEVICE: nixlNotSupportedError,
}


def _from_ote(status, what):
    """The NIXL exception for an OrbitTE status (kept as .ote_status)."""
    try:
        st = _S(int(status))
    except ValueError:
        st = int(status)
    cls = _MAP.get(st, nixlBackendError)
    return cls(f"{what}: {orbitte.status_string(int(status))} (OrbitTE status {int(status)})",
               ote_status=st)


def _wrap(e, what):
    if isinstance(e, orbitte.Error):
        return _from_ote(e.status, what)
    return nixlBackendError(f"{what}: {e}")


_GONE = {_S.REMOTE_DISCONNECT, _S.UNREACHABLE, _S.NOT_FOUND, _S.PEER_RESTARTED}


def _peer_status(status, what):
    """The NIXL exception for an OrbitTE status on a call to a known peer: the
    peer's engine not answering any more (disconnected, unreachable, its
    listener gone, restarted) is nixlRemoteDisconnectError, as in NIXL."""
    if status in _GONE:
        return nixlRemoteDisconnectError(
            f"{what}: {orbitte.status_string(int(status))} (OrbitTE status "
            f"{int(status)})", ote_status=_S(int(status)))
    return _from_ote(status, what)


def _peer_error(e, what):
    if isinstance(e, orbitte.Error):
        return _peer_status(e.status, what)
    return _wrap(e, what)


def _telemetry_enabled(cfg):
    env = os.environ.get("NIXL_TELEMETRY_ENABLE")
    if env is not None and env != "":
        return env.strip().lower() in _TRUE
    return bool(cfg.captureTelemetry)


def _name(n):
    """An agent name given as str or bytes (add_remote_agent returns bytes)."""
    if isinstance(n, (bytes, bytearray)):
        return bytes(n).decode()
    if not isinstance(n, str):
        raise TypeError(f"an agent name is str or bytes, not {type(n).__name__}")
    return n


def _bytes(msg):
    if isinstance(msg, str):
        return msg.encode()
    return bytes(msg)


class _Regions:
    """Address ranges (sorted) answering "is [a, a+n) inside one of them"."""

    __slots__ = ("starts", "maxend", "rows")

    def __init__(self, rows):
        # rows: (addr, len, dev, mem) tuples
        self.rows = list(rows)
        if self.rows:
            arr = np.array([(r[0], r[1]) for r in self.rows], dtype=np.uint64)
            order = np.argsort(arr[:, 0], kind="stable")
            self.starts = arr[order, 0]
            self.maxend = np.maximum.accumulate(arr[order, 0] + arr[order, 1])
        else:
            self.starts = self.maxend = np.zeros(0, dtype=np.uint64)

    def covers(self, addrs, lens):
        """Boolean array: each [addr, addr+len) lies inside one region."""
        if len(addrs) == 0:
            return np.zeros(0, dtype=bool)
        if len(self.starts) == 0:
            return np.zeros(len(addrs), dtype=bool)
        idx = np.searchsorted(self.starts, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        idx[~ok] = 0
        return ok & (self.maxend[idx] >= addrs + lens)


class _Remote:
    """What this agent knows of a peer agent."""

    def __init__(self, name, engine, segment, regions, desc=b""):
        self.name = name
        self.engine = engine
        self.desc = desc                # its engine's descriptor bytes, as loaded
        self.segment = segment
        self.regions = regions          # _Regions
        self.disconnected = None        # why, once the peer removed us


class _Prepped:
    __slots__ = ("agent", "addr", "len", "dev", "mem", "count")

    def __init__(self, agent, rows, mem):
        self.agent = agent            # None: local side; else the agent name
        self.addr = np.ascontiguousarray(rows[:, 0])
        self.len = np.ascontiguousarray(rows[:, 1])
        self.dev = rows[:, 2]
        self.mem = mem
        self.count = len(rows)


# check_xfer_state of a transfer in progress: a thread that polls the same
# transfer again within REPOLL_US of the last "PROC" is polling it in a loop and
# waits in the engine instead, up to WAIT_S (ote_batch_wait, as ote_perftest's
# callers wait); any other poll progresses the engine once and yields the CPU.
REPOLL_US = 50
WAIT_S = 0.001
_PENDING = int(orbitte._ote.PENDING)
_COMPLETED = int(orbitte._ote.COMPLETED)


class _Xfer:
    """A transfer request: its orbitte.Transfer (the requests, built once, and
    the batch of its posts), its peer, its state and figures."""

    def __init__(self, engine, op, remote, la, ra, ln, notif, backend, telemetry):
        self.lock = threading.Lock()
        self.op = op
        self.remote = remote          # agent name
        la = np.ascontiguousarray(la, dtype=np.uint64)
        ln = np.ascontiguousarray(ln, dtype=np.uint64)
        self.count = len(la)
        self.total = int(ln.sum()) if self.count else 0
        self.t = None
        if self.count:
            self.t = engine.transfer(op, la, np.ascontiguousarray(ra, dtype=np.uint64), ln)
        self.notif = notif
        self.frame_of = None          # (message, its one frame): reposts frame it once
        self.backend = backend
        self.telemetry = telemetry    # figures are taken only when telemetry is on, as NIXL
        self.has_notif = False
        self.state = None             # None: never posted; IN_PROG; SUCCESS; or an exception
        self.start_us = 0
        self.post_us = 0
        self.xfer_us = 0
        self.tel_bytes = 0
        self.tel_descs = 0

    def take_telemetry(self, final):
        """The latest post's figures (Transfer.telemetry) in NIXL's fields."""
        t = self.t
        if t is None:
            return
        try:
            tel = t.telemetry()
        except orbitte.Error:
            return
        self.start_us = tel.start_us
        self.post_us = max(1, (tel.post_ns + 999) // 1000)
        self.tel_descs = tel.requests
        # NIXL reports the request's size while it runs, what moved once it ended
        self.tel_bytes = tel.bytes if tel.ended == tel.requests else self.total
        if final:
            self.xfer_us = max(self.post_us, (tel.xfer_ns + 999) // 1000)

    def _finish(self, ok_or_exc):
        self.state = ok_or_exc
        if self.telemetry:
            self.take_telemetry(True)

    def poll(self, progress=False, loop_wait=False):
        """SUCCESS / IN_PROG, or raise the transfer's error. Call under lock."""
        st = self.state
        if st is IN_PROG:
            t = self.t
            try:
                if loop_wait:
                    s = t.poll(True, WAIT_S, REPOLL_US, True)
                else:
                    s = t.poll(progress)
            except orbitte.Error as e:
                self._finish(_peer_status(e.status, "transfer"))
                raise self.state from None
            if s == _PENDING:
                return IN_PROG
            if s == _COMPLETED:
                self._finish(SUCCESS)
                return SUCCESS
            ne = t.notify_error
            self._finish(_peer_status(ne, "notification") if ne else
                         _peer_status(t.error, "transfer"))
            raise self.state
        if st is SUCCESS:
            return SUCCESS
        if st is None:
            raise nixlNotPostedError("the request was not posted")
        raise st

    def active(self):
        return self.state is IN_PROG

    def cancel_and_release(self, timeout):
        t, self.t = self.t, None
        if t is None:
            return
        if self.state is IN_PROG:
            try:
                t.cancel()
                t.wait(timeout=timeout)
            except orbitte.Error:
                pass
            self.state = nixlCancelledError("released while in progress")
        t.release()


class _Core:
    """The state of one agent (the thread of the listener holds this, not the agent)."""

    def __init__(self, name, cfg):
        self.name = name
        self.cfg = cfg
        self.lock = threading.RLock()
        self.recv_lock = threading.Lock()
        self.telemetry = _telemetry_enabled(cfg)
        _set_log_level()
        listen = None
        if cfg.useListenThread:
            listen = f"0.0.0.0:{int(cfg.listenPort)}"
        try:
            self.engine = orbitte.Engine(listen_addr=listen)
        except orbitte.Error as e:
            raise _wrap(e, "agent creation") from None
        self.engine_name = self.engine.name
        self.backends = {}                  # handle -> plugin name
        self._bh = itertools.count(1)
        self.mems = []                      # [(addr, len, dev, mem), Memory]
        self.local = _Regions([])
        self.remotes = {}                   # agent name -> _Remote
        self.segs = {}                      # "ip:port" -> Segment (listener peers)
        self.self_seg = None
        self.self_dirty = False
        self.notifs = {}                    # agent -> [bytes], not yet taken
        self.frags = _md.Reassembly()
        self.msgid = itertools.count(int.from_bytes(os.urandom(4), "little") << 20)
        self.handles = {}                   # int -> _Xfer / _Prepped
        self._hid = itertools.count(0x1000)
        self.closed = False
        self.costs = collections.deque(maxlen=64)   # (bytes, us) of recent completed transfers
        self.thread = None
        if cfg.useListenThread:
            port = int(self.engine_name.rsplit(":", 1)[1])
            log.info("MD listener is listening on port %d", port)
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._listen, name=f"nixl-listen-{name}",
                                           daemon=True)
            self.thread.start()

    # ---- life ----------------------------------------------------------------------------

    def close(self):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        if self.thread is not None:
            self.stop.set()
            if self.thread is not threading.current_thread():
                self.thread.join(timeout=2)
        try:
            self.engine.close()
        except Exception:  # noqa: BLE001 - closing at teardown
            pass

    def _check(self):
        if self.closed:
            raise nixlInvalidParamError("the agent is closed")

    def _listen(self):
        fd = self.engine.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while not self.stop.is_set():
            try:
                if poller.poll(100):
                    self.engine.clear_event()
                self.drain()
            except Exception as e:  # noqa: BLE001 - the thread reports and goes on
                if self.closed:
                    return
                log.warning("listener: %s", e)

    # ---- backends ------------------------------------------------------------------------

    def create_backend(self, kind, params):
        self._check()
        if kind not in PLUGINS:
            raise nixlNotFoundError(f"no plugin {kind!r} (OrbitTE serves {PLUGINS})")
        with self.lock:
            for h, k in self.backends.items():
                if k == kind:
                    return h
            h = next(self._bh) << 4
            self.backends[h] = kind
            return h

    def _need_backend(self, backends):
        for b in backends or ():
            if int(b) not in self.backends:
                raise nixlNotFoundError(f"no backend handle {b!r}")
        if not self.backends:
            raise nixlNotFoundError("no backend was created on this agent")
        return int(backends[0]) if backends else next(iter(self.backends))

    # ---- memory --------------------------------------------------------------------------

    def register(self, descs, backends):
        self._check()
        if not isinstance(descs, nixlRegDList):
            raise TypeError("registerMem takes a nixlRegDList")
        self._need_backend(backends)
        mem = int(descs.getType())
        if mem not in (nixl_mem_t.DRAM_SEG, nixl_mem_t.VRAM_SEG):
            raise nixlNotSupportedError(f"{_MEM_STR[mem]} memory is not served by OrbitTE")
        rows = descs._rows()
        done = []
        try:
            for a, n, d in rows.tolist():
                loc = f"cuda:{d}" if mem == nixl_mem_t.VRAM_SEG else None
                m = self.engine.register((a, n), location=loc)
                done.append(((a, n, d, mem), m))
        except orbitte.Error as e:
            for _, m in done:
                m.deregister()
            raise _wrap(e, "registerMem") from None
        with self.lock:
            self.mems.extend(done)
            self.local = _Regions(k for k, _ in self.mems)
            self.self_dirty = True
        return SUCCESS

    def deregister(self, descs, backends):
        self._check()
        mem = int(descs.getType())
        with self.lock:
            todo = []
            taken = set()
            for a, n, d in descs._rows().tolist():
                key = (a, n, d, mem)
                for i, (k, m) in enumerate(self.mems):
                    if k == key and i not in taken:
                        taken.add(i)
                        todo.append(m)
                        break
                else:
                    raise nixlNotFoundError(f"{a:#x}+{n} was not registered")
            self.mems = [e for i, e in enumerate(self.mems) if i not in taken]
            self.local = _Regions(k for k, _ in self.mems)
            self.self_dirty = True
        for m in todo:
            m.deregister()
        return SUCCESS

    def query(self, descs):
        out = []
        mem = int(descs.getType())
        if mem == nixl_mem_t.FILE_SEG:
            for meta in descs._meta:
                try:
                    st = os.stat(meta.decode(errors="surrogateescape"))
                except OSError:
                    out.append(None)
                    continue
                out.append({"size": str(st.st_size), "mode": str(st.st_mode)})
            return out
        rows = descs._rows()
        ok = self.local.covers(rows[:, 0], rows[:, 1]) if len(rows) else []
        for i in range(len(rows)):
            out.append({"registered": "1", "mem_type": _MEM_STR[mem]} if ok[i] else None)
        return out

    # ---- metadata ------------------------------------------------------------------------

    def local_md(self, descs=None, conn=True):
        with self.lock:
            if descs is None:
                rows = [k for k, _ in self.mems]
                partial = False
            else:
                r = descs._rows()
                mem = int(descs.getType())
                cov = self.local.covers(r[:, 0], r[:, 1])
                if not bool(cov.all()):
                    raise nixlNotFoundError("partial metadata of memory that is not registered")
                rows = [(a, n, d, mem) for a, n, d in r.tolist()]
                partial = True
        desc = b""
        if conn:   # after the rows: the descriptor publishes at least them
            try:
                desc = self.engine.desc_export()
            except orbitte.Error as e:
                raise _wrap(e, "getLocalMD: the engine's descriptor") from None
        return _md.encode_md(self.name, self.engine_name if conn else "", rows, partial, desc)

    def load_md(self, blob):
        self._check()
        try:
            name, engine, desc, rows, partial = _md.decode_md_desc(bytes(blob))
        except _md.MDError as e:
            raise nixlInvalidParamError(f"loadRemoteMD: {e}") from None
        if name == self.name:
            raise nixlInvalidParamError("loadRemoteMD: metadata of this agent itself")
        with self.lock:
            old = self.remotes.get(name)
        if not engine:
            if old is None:
                raise nixlNotFoundError(f"partial metadata without connection info for "
                                        f"unknown agent {name!r}")
            engine, desc = old.engine, old.desc
        if old is not None and old.engine == engine and old.disconnected is None:
            # A known peer keeps its segment (transfers in flight on it go on). New
            # descriptor bytes are checked by OrbitTE first (the bytes loaded before
            # already were); then the segment in use reads the descriptor again.
            if desc != old.desc:
                self._open_desc(name, engine, desc).close()
            seg = old.segment
            try:
                seg.refresh()
            except orbitte.Error as e:
                raise _wrap(e, f"loadRemoteMD({name})") from None
        else:
            seg = self._open_desc(name, engine, desc)
        published = _Regions((r.addr, r.length, 0, 0) for r in seg.regions())
        if rows:
            arr = np.array([(r[0], r[1]) for r in rows], dtype=np.uint64)
            if not bool(published.covers(arr[:, 0], arr[:, 1]).all()):
                raise nixlMismatchError(f"loadRemoteMD({name}): the metadata names memory "
                                        f"that engine {engine} does not publish")
        if partial and old is not None and old.engine == engine:
            rows = old.regions.rows + [r for r in rows if r not in old.regions.rows]
        with self.lock:
            cur = self.remotes.get(name)
            if cur is not None and cur.segment is not seg:
                try:
                    cur.segment.close()
                except orbitte.Error:
                    pass
            self.remotes[name] = _Remote(name, engine, seg, _Regions(rows), desc)
        return name.encode()

    def _open_desc(self, name, engine, desc):
        """The peer's segment from OrbitTE's descriptor carried in its metadata:
        decoded and, under OTE_AUTH_KEY, its HMAC checked before any connection."""
        try:
            return self.engine.open_desc(desc, engine)
        except orbitte.Error as e:
            if e.status in (_S.AUTH, _S.PROTOCOL):
                why = ("its signature does not match OTE_AUTH_KEY (altered, unsigned or "
                       "signed with another key)" if e.status == _S.AUTH else "it is malformed")
                raise nixlInvalidParamError(
                    f"loadRemoteMD({name}): OrbitTE's descriptor of engine {engine} in the "
                    f"metadata is refused: {why} (OrbitTE status {int(e.status)})",
                    ote_status=_S(int(e.status))) from None
            raise _wrap(e, f"loadRemoteMD({name}): opening {engine}") from None

    def check_md(self, name, descs):
        name = _name(name)
        self.drain()
        with self.lock:
            r = self.remotes.get(name)
        if r is None or r.disconnected is not None:
            return nixl_status_t.NIXL_ERR_NOT_FOUND
        if descs is not None and descs.descCount():
            rows = descs._rows()
            if not bool(r.regions.covers(rows[:, 0], rows[:, 1]).all()):
                return nixl_status_t.NIXL_ERR_NOT_FOUND
        return SUCCESS

    def invalidate_remote(self, name):
        self._check()
        name = _name(name)
        with self.lock:
            r = self.remotes.pop(name, None)
        if r is None:
            raise nixlNotFoundError(f"no remote agent {name!r}")
        if r.disconnected is None:
            try:   # the peer sees the disconnect at once
                self._send_frames(r.segment, _md.KIND_GONE, b"")
            except Exception:  # noqa: BLE001 - best effort, the peer may be gone
                pass
        try:
            r.segment.close()
        except orbitte.Error:
            pass
        return SUCCESS

    def _peer_seg(self, ip, port):
        if not ip:
            raise nixlNotSupportedError("a central metadata server (etcd) is not supported "
                                        "by orbitte.nixl: pass ip_addr and port")
        addr = f"{ip}:{int(port)}"
        with self.lock:
            seg = self.segs.get(addr)
        if seg is None:
            try:
                seg = self.engine.open(addr)
            except orbitte.Error as e:
                raise _wrap(e, f"connecting to the listener at {addr}") from None
            with self.lock:
                self.segs[addr] = seg
        return seg

    def _to_listener(self, ip, port, kind, payload):
        """Send to a peer's listener. As NIXL's listener thread does, a peer that
        cannot be reached is logged (at WARN), not raised."""
        try:
            seg = self._peer_seg(ip, port)
            self._send_frames(seg, kind, payload)
        except (orbitte.Error, nixlRemoteDisconnectError, nixlNotFoundError,
                nixlBackendError) as e:
            with self.lock:
                self.segs.pop(f"{ip}:{int(port)}", None)
            log.warning("metadata message %r to the listener at %s:%s not sent: %s",
                        chr(kind), ip, port, e)

    def _etcd(self, what):
        if not _etcd.endpoints():
            raise nixlNotSupportedError(f"{what} without ip_addr needs a central metadata "
                                        f"server: NIXL_ETCD_ENDPOINTS is not set")

    def send_md(self, ip, port, descs=None, conn=True, label=""):
        self._check()
        blob = self.local_md(descs, conn)
        if ip:
            self._to_listener(ip, port, _md.KIND_MD, blob)
            return
        self._etcd("sending metadata")
        try:
            _etcd.put(_etcd.key(self.name, label), blob)
        except _etcd.EtcdError as e:
            raise nixlBackendError(f"metadata server: {e}") from None

    def fetch_md(self, remote, ip, port, label=""):
        self._check()
        if ip:
            self._to_listener(ip, port, _md.KIND_FETCH, self.engine_name.encode())
            return
        self._etcd("fetching metadata")
        remote = _name(remote)
        wait_s = max(0.1, int(getattr(self.cfg, "etcdWatchTimeout", 5000000)) / 1e6)
        threading.Thread(target=self._fetch_etcd, args=(remote, label, wait_s),
                         name=f"nixl-fetch-{remote}", daemon=True).start()

    def _fetch_etcd(self, remote, label, wait_s):
        """Read the remote's metadata from etcd until it is there (or wait_s passed)
        and load it, as NIXL's fetch does in the background."""
        k = _etcd.key(remote, label)
        end = time.monotonic() + wait_s
        while not self.closed:
            try:
                blob = _etcd.get(k)
            except _etcd.EtcdError as e:
                blob = None
                err = e
            else:
                err = None
            if blob is not None:
                try:
                    self.load_md(blob)
                except Exception as e:  # noqa: BLE001 - logged as NIXL's fetch does
                    log.warning("metadata of %s from the metadata server refused: %s",
                                remote, e)
                return
            if time.monotonic() >= end:
                log.warning("metadata of %s not found under %s%s", remote, k,
                            f" ({err})" if err else "")
                return
            time.sleep(0.05)

    def invalidate_local(self, ip, port):
        self._check()
        if ip:
            self._to_listener(ip, port, _md.KIND_INVALIDATE, b"")
            return
        self._etcd("invalidating metadata")
        try:
            _etcd.delete_prefix(f"{_etcd.namespace()}{self.name}/")
        except _etcd.EtcdError as e:
            raise nixlBackendError(f"metadata server: {e}") from None

    # ---- notifications -----------------------------------------------------------------

    def _frames(self, kind, payload):
        return _md.frames(self.name, kind, payload, next(self.msgid))

    def _send_frames(self, seg, kind, payload):
        for f in self._frames(kind, payload):
            self.engine.send(seg, f)

    def _remote(self, name):
        with self.lock:
            r = self.remotes.get(name)
        if r is None:
            if name == self.name:
                return None
            raise nixlNotFoundError(f"no metadata of remote agent {name!r}")
        if r.disconnected is not None:
            raise nixlRemoteDisconnectError(f"agent {name!r}: {r.disconnected}")
        return r

    def _self_segment(self):
        with self.lock:
            seg = self.self_seg
            dirty = self.self_dirty
            self.self_dirty = False
        if seg is None:
            try:
                seg = self.engine.open(self.engine_name)
            except orbitte.Error as e:
                raise _wrap(e, "loopback") from None
            with self.lock:
                self.self_seg = seg
        elif dirty:
            try:
                seg.refresh()
            except orbitte.Error as e:
                raise _wrap(e, "loopback") from None
        return seg

    def gen_notif(self, remote, msg):
        self._check()
        remote = _name(remote)
        self.drain()
        if remote == self.name:
            seg = self._self_segment()
        else:
            seg = self._remote(remote).segment
        try:
            self._send_frames(seg, _md.KIND_NOTIF, _bytes(msg))
        except orbitte.Error as e:
            raise _peer_error(e, f"genNotif({remote})") from None
        return SUCCESS

    def drain(self):
        """Take what the engine received and dispatch it (in the order sent)."""
        if self.closed:
            return
        with self.recv_lock:
            while True:
                try:
                    got = self.engine.recv(256)
                except orbitte.Error:
                    return
                if not got:
                    return
                for n in got:
                    self._dispatch(n.sender, n.data)

    def _dispatch(self, sender_engine, data):
        msg = _md.parse_frame(data)
        if msg is None:                       # a plain OrbitTE notification
            self._deliver(sender_engine, data)
            return
        agent, kind, payload = msg
        if kind == _md.KIND_FRAG:
            done = self.frags.add(agent, payload)
            if done is None:
                return
            kind, payload = done
        if kind == _md.KIND_NOTIF:
            self._deliver(agent, payload)
        elif kind == _md.KIND_MD:
            try:
                self.load_md(payload)
            except Exception as e:  # noqa: BLE001 - a peer's bad metadata is logged, not fatal
                log.warning("metadata from %s (%s) refused: %s", agent, sender_engine, e)
        elif kind == _md.KIND_FETCH:
            try:
                seg = self.engine.open(payload.decode())
                try:
                    self._send_frames(seg, _md.KIND_MD, self.local_md())
                finally:
                    seg.close()
            except Exception as e:  # noqa: BLE001
                log.warning("metadata request from %s (%s) not answered: %s", agent,
                            sender_engine, e)
        elif kind == _md.KIND_INVALIDATE:
            with self.lock:
                r = self.remotes.pop(agent, None)
            if r is not None:
                try:
                    r.segment.close()
                except orbitte.Error:
                    pass
        elif kind == _md.KIND_GONE:
            with self.lock:
                r = self.remotes.get(agent)
                if r is not None:
                    r.disconnected = "the remote agent removed this agent"

    def _deliver(self, agent, payload):
        with self.lock:
            self.notifs.setdefault(agent, []).append(payload)

    def take_notifs(self):
        self.drain()
        with self.lock:
            got, self.notifs = self.notifs, {}
        return got

    # ---- transfers -----------------------------------------------------------------------

    def _new_handle(self, obj):
        with self.lock:
            h = next(self._hid) << 4
            self.handles[h] = obj
        return h

    def _get(self, h, cls):
        with self.lock:
            o = self.handles.get(int(h))
        if not isinstance(o, cls):
            raise nixlInvalidParamError(f"not a valid handle: {h!r}")
        return o

    def _check_local(self, addrs, lens, what):
        with self.lock:
            loc = self.local
        ok = loc.covers(addrs, lens)
        if not bool(ok.all()):
            i = int(np.argmin(ok))
            raise nixlNotFoundError(f"{what}: local descriptor {i} ({int(addrs[i]):#x}+"
                                    f"{int(lens[i])}) is not in registered memory")

    def _check_remote(self, agent, addrs, lens, what):
        if agent == self.name:
            self._check_local(addrs, lens, what)
            return
        r = self._remote(agent)
        ok = r.regions.covers(addrs, lens)
        if not bool(ok.all()):
            i = int(np.argmin(ok))
            raise nixlNotFoundError(f"{what}: descriptor {i} ({int(addrs[i]):#x}+"
                                    f"{int(lens[i])}) is not in the memory agent {agent!r} "
                                    f"published")

    def prep(self, agent, descs, backends):
        self._check()
        agent = _name(agent)
        if not isinstance(descs, nixlXferDList):
            raise TypeError("prepXferDlist takes a nixlXferDList")
        self._need_backend(backends)
        rows = descs._rows()
        mem = int(descs.getType())
        if agent == NIXL_INIT_AGENT:
            self._check_local(rows[:, 0], rows[:, 1], "prepXferDlist")
            return self._new_handle(_Prepped(None, rows, mem))
        self._check_remote(agent, rows[:, 0], rows[:, 1], "prepXferDlist")
        return self._new_handle(_Prepped(agent, rows, mem))

    def release_prepped(self, h):
        with self.lock:
            o = self.handles.get(int(h))
            if not isinstance(o, _Prepped):
                raise nixlInvalidParamError(f"not a prepared list handle: {h!r}")
            del self.handles[int(h)]
        return SUCCESS

    def make(self, op, lh, li, rh, ri, notif, backends, skip_merge=False):
        self._check()
        if int(op) not in _OP:
            raise nixlInvalidParamError(f"operation {op!r}")
        bk = self._need_backend(backends)
        L = self._get(lh, _Prepped)
        R = self._get(rh, _Prepped)
        if L.agent is not None:
            raise nixlInvalidParamError("the local side is a list prepared for a remote agent")
        if R.agent is None:
            raise nixlInvalidParamError("the remote side is a list prepared as local")
        same = ri is li and L.count == R.count   # one list for both sides: converted once
        li = _indices(li, L.count, "local")
        ri = li if same else _indices(ri, R.count, "remote")
        if len(li) != len(ri):
            raise nixlInvalidParamError(f"{len(li)} local and {len(ri)} remote indices")
        ln = L.len[li]
        if not np.array_equal(ln, R.len[ri]):
            raise nixlInvalidParamError("local and remote descriptor lengths differ")
        la, ra = L.addr[li], R.addr[ri]
        if R.agent != self.name:
            rregions = self._remote(R.agent).regions
        else:
            with self.lock:
                rregions = self.local
        if not skip_merge and len(la) > 1:
            la, ra, ln = self._merge(la, ra, ln, rregions)
        x = self._xfer(_OP[int(op)], R.agent, la, ra, ln, _bytes(notif), bk)
        return self._new_handle(x)

    def _merge(self, la, ra, ln, rregions):
        """Runs of descriptors contiguous on both sides as one descriptor each
        (each merged range still inside one registration on its side)."""
        brk = (la[1:] != la[:-1] + ln[:-1]) | (ra[1:] != ra[:-1] + ln[:-1])
        if bool(brk.all()):
            return la, ra, ln
        starts = np.concatenate([[0], np.nonzero(brk)[0] + 1])
        mla, mra = la[starts], ra[starts]
        mln = np.add.reduceat(ln, starts).astype(np.uint64)
        with self.lock:
            loc = self.local
        if bool(loc.covers(mla, mln).all()) and bool(rregions.covers(mra, mln).all()):
            return mla, mra, mln
        return la, ra, ln

    def create(self, op, ldescs, rdescs, agent, notif, backends):
        self._check()
        agent = _name(agent)
        if int(op) not in _OP:
            raise nixlInvalidParamError(f"operation {op!r}")
        if not isinstance(ldescs, nixlXferDList) or not isinstance(rdescs, nixlXferDList):
            raise TypeError("createXferReq takes two nixlXferDList")
        bk = self._need_backend(backends)
        lr = ldescs._rows()
        rr = rdescs._rows()
        if len(lr) != len(rr):
            raise nixlInvalidParamError(f"{len(lr)} local and {len(rr)} remote descriptors")
        if not np.array_equal(lr[:, 1], rr[:, 1]):
            raise nixlInvalidParamError("local and remote descriptor lengths differ")
        self._check_local(lr[:, 0], lr[:, 1], "createXferReq")
        self._check_remote(agent, rr[:, 0], rr[:, 1], "createXferReq")
        x = self._xfer(_OP[int(op)], agent, lr[:, 0], rr[:, 0], lr[:, 1], _bytes(notif), bk)
        return self._new_handle(x)

    def _xfer(self, op, remote, la, ra, ln, notif, backend):
        try:
            return _Xfer(self.engine, op, remote, la, ra, ln, notif, backend, self.telemetry)
        except orbitte.Error as e:
            raise _wrap(e, "creating the transfer request") from None

    def _xfer_of(self, h):
        # no lock: a dict lookup is atomic, and a handle is never reused
        try:
            o = self.handles.get(h) if type(h) is int else self.handles.get(int(h))
        except (TypeError, ValueError):
            o = None
        if type(o) is not _Xfer:
            raise nixlInvalidParamError(f"not a valid handle: {h!r}")
        return o

    def _post_frames(self, x):
        """The notification frames of a post; a message of one frame is framed once."""
        msg = x.notif
        if not msg:
            return None
        fo = x.frame_of
        if fo is not None and fo[0] is msg:
            return fo[1]
        frames = self._frames(_md.KIND_NOTIF, msg)
        if len(frames) == 1:
            x.frame_of = (msg, frames)
        return frames

    def post(self, h, notif):
        if self.closed:
            raise nixlInvalidParamError("the agent is closed")
        x = self._xfer_of(h)
        if notif:
            notif = _bytes(notif)
        self.drain()
        with x.lock:
            if x.state is IN_PROG:
                try:
                    x.poll()
                except Exception:  # noqa: BLE001 - a failed one may be posted again
                    pass
                if x.state is IN_PROG:
                    raise nixlRepostActiveError("the request is still in progress")
            if notif:
                x.notif = notif
            if x.remote == self.name:
                seg = self._self_segment()
            else:
                seg = self._remote(x.remote).segment
            frames = self._post_frames(x)
            x.xfer_us = 0
            try:
                if frames is not None and len(frames) > 1:
                    for f in frames[:-1]:
                        self.engine.send(seg, f)
                if x.count == 0:
                    # nothing for a batch to move: no batch, no durations to report
                    if frames:
                        self.engine.send(seg, frames[-1])
                    x.start_us = time.time_ns() // 1000
                    x.post_us = x.xfer_us = x.tel_bytes = x.tel_descs = 0
                    x.state = SUCCESS
                    return SUCCESS
                s = x.t.post(seg, frames[-1] if frames else None)
            except orbitte.Error as e:
                x.state = _peer_error(e, f"postXferReq to {x.remote}")
                raise x.state from None
            x.has_notif = frames is not None
            x.state = IN_PROG
            if s == _PENDING:
                if x.telemetry:
                    x.take_telemetry(False)
                return IN_PROG
            st = x.poll()
            if st is SUCCESS:
                x.xfer_us = x.post_us   # done within transfer(): NIXL's post-and-finish
                self._cost(x)
            return st

    def status(self, h):
        x = self._xfer_of(h)
        with x.lock:
            if x.state is not IN_PROG:
                return x.poll()
            # In progress: as NIXL's UCX backend progresses its worker here, one
            # non-blocking pass of the engine from this thread (GIL released)
            # completes what arrived; a caller polling this transfer in a loop
            # waits in the engine instead (REPOLL_US, WAIT_S), which leaves the
            # CPU to the engine's threads; else the CPU is yielded.
            st = x.poll(loop_wait=True)
            if st is SUCCESS:
                self._cost(x)
        return st

    def _cost(self, x):
        t = x.t
        us = x.xfer_us if x.telemetry or t is None else (t.xfer_ns + 999) // 1000
        self.costs.append((x.total, us))     # a deque: appending is atomic

    def estimate(self, h):
        x = self._get(h, _Xfer)
        with self.lock:
            hist = list(self.costs)
        if not hist:
            raise nixlNotSupportedError("no completed transfer of this agent to estimate from")
        byts = sum(b for b, _ in hist)
        us = sum(u for _, u in hist)
        per_byte = us / max(1, byts)
        base = min(u for _, u in hist)
        est = int(base + per_byte * x.total)
        return est, est // 2, 0

    def telemetry_of(self, h):
        x = self._get(h, _Xfer)
        if not self.telemetry:
            raise nixlNoTelemetryError("telemetry is off (NIXL_TELEMETRY_ENABLE, "
                                       "capture_telemetry)")
        with x.lock:
            if x.state is None:
                raise nixlNotPostedError("the request was not posted")
            if x.state is IN_PROG:
                x.take_telemetry(False)
            return nixlXferTelemetry(x.start_us, x.post_us, x.xfer_us, x.tel_bytes,
                                     x.tel_descs)

    def backend_of(self, h):
        return self._get(h, _Xfer).backend

    def release_xfer(self, h):
        x = self._get(h, _Xfer)
        with x.lock:
            x.cancel_and_release(timeout=10.0)
        with self.lock:
            self.handles.pop(int(h), None)
        return SUCCESS


def _indices(idx, n, what):
    if isinstance(idx, range):
        a = np.arange(idx.start, idx.stop, idx.step, dtype=np.int64)
    elif isinstance(idx, np.ndarray):
        if idx.ndim != 1:
            raise nixlInvalidParamError(f"{what} indices: a 1-D array")
        if idx.dtype.kind not in "iu":
            raise nixlInvalidParamError(f"{what} indices: an integer array")
        a = idx.astype(np.int64, copy=False)
    else:
        try:
            a = np.fromiter(idx, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise nixlInvalidParamError(f"{what} indices: a list of ints") from None
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
        raise nixlInvalidParamError(f"{what} index out of range (list of {n})")
    return a


class nixlAgent:
    """nixlAgent(name, nixlAgentConfig): NIXL's agent over one orbitte.Engine."""

    def __init__(self, name, cfg=None):
        if not isinstance(name, str):
            raise TypeError("the agent name is a str")
        if name == "":
            raise ValueError("the agent name must not be empty")
        if cfg is None:
            from ._bindings import nixlAgentConfig
            cfg = nixlAgentConfig()
        self._core = _Core(name, cfg)
        self._fin = weakref.finalize(self, _Core.close, self._core)

    name = property(lambda s: s._core.name)

    def close(self):
        self._fin()

    def getAvailPlugins(self):
        return list(PLUGINS)

    def getPluginParams(self, kind):
        if kind not in PLUGINS:
            raise nixlNotFoundError(f"no plugin {kind!r}")
        return {}, list(_PLUGIN_MEMS)

    def getBackendParams(self, backend):
        if int(backend) not in self._core.backends:
            raise nixlNotFoundError(f"no backend handle {backend!r}")
        return {}, list(_PLUGIN_MEMS)

    def createBackend(self, kind, initParams=None):
        return self._core.create_backend(kind, dict(initParams or {}))

    def registerMem(self, descs, backends=()):
        return self._core.register(descs, list(backends))

    def deregisterMem(self, descs, backends=()):
        return self._core.deregister(descs, list(backends))

    def queryMem(self, descs, backend):
        if int(backend) not in self._core.backends:
            raise nixlNotFoundError(f"no backend handle {backend!r}")
        return self._core.query(descs)

    def makeConnection(self, remote_agent, backends=()):
        self._core._remote(_name(remote_agent))
        return SUCCESS

    def prepXferDlist(self, *args, **kw):
        """prepXferDlist(agent_name, descs, backends=[]) for a remote (or this
        agent's own name: loopback), prepXferDlist(descs, backends=[]) for the
        local side."""
        backends = kw.pop("backend", kw.pop("backends", None))
        agent = kw.pop("agent_name", None)
        descs = kw.pop("descs", None)
        args = list(args)
        if agent is None and args and isinstance(args[0], (str, bytes)):
            agent = args.pop(0)
        if descs is None and args:
            descs = args.pop(0)
        if backends is None and args:
            backends = args.pop(0)
        if args or kw:
            raise TypeError("prepXferDlist: unexpected arguments")
        return self._core.prep(NIXL_INIT_AGENT if agent is None else agent, descs,
                               list(backends or ()))

    def releasedDlistH(self, handle):
        return self._core.release_prepped(handle)

    def makeXferReq(self, operation, local_side, local_indices, remote_side, remote_indices,
                    notif_msg=b"", backend=(), skip_desc_merg=False):
        return self._core.make(operation, local_side, local_indices, remote_side,
                               remote_indices, notif_msg, list(backend), bool(skip_desc_merg))

    def createXferReq(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"",
                      backend=()):
        return self._core.create(operation, local_descs, remote_descs, remote_agent,
                                 notif_msg, list(backend))

    def estimateXferCost(self, req_handle):
        return self._core.estimate(req_handle)

    def postXferReq(self, reqh, notif_msg=b""):
        return self._core.post(reqh, notif_msg)

    def getXferStatus(self, reqh):
        return self._core.status(reqh)

    def getXferTelemetry(self, reqh):
        return self._core.telemetry_of(reqh)

    def queryXferBackend(self, reqh):
        return self._core.backend_of(reqh)

    def releaseXferReq(self, reqh):
        return self._core.release_xfer(reqh)

    def getNotifs(self, notif_map=None, backends=()):
        out = {k: list(v) for k, v in (notif_map or {}).items()}
        for k, v in self._core.take_notifs().items():
            out.setdefault(k, []).extend(v)
        return out

    def genNotif(self, remote_agent, msg, backends=()):
        return self._core.gen_notif(remote_agent, msg)

    def getLocalMD(self):
        self._core._check()
        return self._core.local_md()

    def getLocalPartialMD(self, descs, inc_conn_info=False, backends=()):
        self._core._check()
        return self._core.local_md(descs, conn=bool(inc_conn_info))

    def loadRemoteMD(self, remote_metadata):
        return self._core.load_md(remote_metadata)

    def invalidateRemoteMD(self, remote_agent):
        return self._core.invalidate_remote(remote_agent)

    def sendLocalMD(self, ip_addr="", port=0):
        self._core.send_md(ip_addr, port)

    def sendLocalPartialMD(self, descs, inc_conn_info=False, backends=(), ip_addr="", port=0,
                           label=""):
        self._core.send_md(ip_addr, port, descs, bool(inc_conn_info), label)

    def fetchRemoteMD(self, remote_agent, ip_addr="", port=0, label=""):
        self._core.fetch_md(remote_agent, ip_addr, port, label)

    def invalidateLocalMD(self, ip_addr="", port=0):
        self._core.invalidate_local(ip_addr, port)

    def checkRemoteMD(self, remote_agent, descs=None):
        return self._core.check_md(remote_agent, descs)

    def prepMemView(self, dlist, backends=()):
        raise nixlNotSupportedError("memory views need UCX's GPU device API")

    def releaseMemView(self, mvh):
        raise nixlNotSupportedError("memory views need UCX's GPU device API")

    def __repr__(self):
        return f"<orbitte.nixl nixlAgent {self._core.name!r} on {self._core.engine_name}>"
