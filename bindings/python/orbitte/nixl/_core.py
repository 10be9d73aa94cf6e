"""_Core: the state of one agent (its engine, backends, registrations,
remote agents, notifications, handles) and its life: creation, the listener
thread, close; backends and memory registration here, the rest in the
mixins it is made of: _peers.Peers (metadata, remote agents, the listener
path), _notif.Notifications, _xfer.Transfers. The agent facade
(_agent.nixlAgent) holds one; the listener thread holds the core, not the
agent, so that an agent no longer referenced is collected and closed."""

import collections
import itertools
import os
import select
import threading
import time

import orbitte

from . import _agentlog, _md
from ._agentlog import log
from ._args import _telemetry_enabled
from ._bindings import (
    nixl_mem_t,
    nixl_status_t,
    nixlInvalidParamError,
    nixlNotFoundError,
    nixlNotSupportedError,
    nixlRegDList,
    _MEM_STR,
)
from ._descs import _Regions
from ._errors import _wrap
from ._notif import Notifications
from ._peers import Peers
from ._xfer import Transfers

SUCCESS = nixl_status_t.NIXL_SUCCESS
PLUGINS = ["UCX"]           # every plugin name served by the OrbitTE engine
_CLOSE_WAIT_S = 60.0        # close(): how long other threads' calls may keep the engine busy
_PLUGIN_MEMS = ["DRAM_SEG", "VRAM_SEG"]


class _Core(Peers, Notifications, Transfers):
    """The state of one agent (the thread of the listener holds this, not the agent)."""

    def __init__(self, name, cfg):
        self.name = name
        self.cfg = cfg
        self.lock = threading.RLock()
        self.recv_lock = threading.Lock()
        self.telemetry = _telemetry_enabled(cfg)
        _agentlog.set_log_level()
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
        self.retired = []                   # Segments to close once no call uses them
        self.self_lock = threading.Lock()   # opening and refreshing the loopback segment
        self.self_seg = None
        self.self_gen = 0                   # registration changes so far
        self.self_seen = 0                  # those the loopback segment has read
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
                # The listener looks at stop every 100 ms; what it calls in between is
                # bounded (an open or a refresh: OTE_CONNECT_TIMEOUT_MS per round
                # trip). The engine is closed only once it ended.
                self.thread.join()
        # Calls of other threads still in the engine (a check_xfer_state's wait, a
        # post) end soon: Engine.close() raises BusyError until they did.
        deadline = time.monotonic() + _CLOSE_WAIT_S
        while True:
            try:
                self.engine.close()
                break
            except orbitte.BusyError as e:
                if time.monotonic() >= deadline:
                    log.warning("agent %s: the engine is left to be closed when it is "
                                "collected: %s", self.name, e)
                    break
                time.sleep(0.001)
            except Exception:  # noqa: BLE001 - closing at teardown
                break
        with self.lock:
            self.retired = []

    def _retire_segment(self, seg):
        """Close a segment this agent dropped. One that another thread still uses
        (a post, a send, a refresh in flight: BusyError) is closed by drain() once
        that call returned."""
        try:
            seg.close()
        except orbitte.BusyError:
            with self.lock:
                self.retired.append(seg)
        except orbitte.Error:
            pass

    def _close_retired(self):
        with self.lock:
            segs, self.retired = self.retired, []
        for seg in segs:
            self._retire_segment(seg)

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
            self.self_gen += 1
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
            self.self_gen += 1
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
