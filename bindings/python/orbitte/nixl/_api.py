"""NIXL's Python agent API (``nixl._api``) over OrbitTE.

nixl_agent_config and nixl_agent keep NIXL's names, positional order,
keywords, return values ("DONE" / "PROC" / "ERR", bytes, dicts of lists of
bytes) and exception classes (orbitte.nixl._bindings); the work is done by
the low-level nixlAgent of _bindings, as in NIXL.
"""

from __future__ import annotations

import pickle
import sys
from enum import Enum
from typing import Optional

import numpy as np

from . import _bindings as nixlBind
from .logging import get_logger

logger = get_logger(__name__)

DEFAULT_COMM_PORT = nixlBind.DEFAULT_COMM_PORT


def _is_tensor(obj) -> bool:
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    return torch is not None and isinstance(obj, torch.Tensor)


class _agent_handle:
    """A handle the agent made; release() hands it back (also done when collected)."""

    __slots__ = ("_handle", "_agent", "_released")
    _release_method = ""  # the agent's method that frees this kind of handle

    def __init__(self, agent, value: int):
        self._handle = int(value)
        self._agent = agent
        self._released = False

    def __repr__(self):
        return f"{type(self).__name__}(0x{self._handle:x}, released={self._released})"

    def release(self):
        if not self._released:
            getattr(self._agent, self._release_method)(self._handle)
            self._released = True

    def __del__(self):
        if not getattr(self, "_released", True):
            try:
                getattr(self._agent, self._release_method)(self._handle)
            except Exception:  # noqa: BLE001 - finalizer
                pass


class nixl_prepped_dlist_handle(_agent_handle):
    """A prepared descriptor list; release() frees it (also done when collected)."""

    __slots__ = ()
    _release_method = "releasedDlistH"


class nixl_xfer_handle(_agent_handle):
    """A transfer request; release() frees it, cancelling a transfer in progress."""

    __slots__ = ()
    _release_method = "releaseXferReq"


nixl_backend_handle = int


class nixl_thread_sync_t(Enum):
    """Thread synchronization modes (every mode is thread safe here)."""

    NIXL_THREAD_SYNC_NONE = nixlBind.NIXL_THREAD_SYNC_NONE
    NIXL_THREAD_SYNC_STRICT = nixlBind.NIXL_THREAD_SYNC_STRICT
    NIXL_THREAD_SYNC_RW = nixlBind.NIXL_THREAD_SYNC_RW
    NIXL_THREAD_SYNC_DEFAULT = nixlBind.NIXL_THREAD_SYNC_DEFAULT


class nixl_agent_config:
    """nixl_agent_config(enable_prog_thread=True, enable_listen_thread=False,
    listen_port=DEFAULT_COMM_PORT, capture_telemetry=False, num_threads=0,
    backends=["UCX"], sync_mode=None)."""

    def __init__(self, enable_prog_thread: bool = True, enable_listen_thread: bool = False,
                 listen_port: int = DEFAULT_COMM_PORT, capture_telemetry: bool = False,
                 num_threads: int = 0, backends: Optional[list] = None,
                 sync_mode: Optional[nixl_thread_sync_t] = None):
        if sync_mode is not None and not isinstance(sync_mode, nixl_thread_sync_t):
            raise TypeError(
                f"sync_mode must be a nixl_thread_sync_t (got {type(sync_mode).__name__!r})")
        self.backends = ["UCX"] if backends is None else backends
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.capture_telemetry = capture_telemetry
        self.num_threads = num_threads
        self.sync_mode = sync_mode


_MEMS = {
    "DRAM": nixlBind.DRAM_SEG, "VRAM": nixlBind.VRAM_SEG, "FILE": nixlBind.FILE_SEG,
    "BLOCK": nixlBind.BLK_SEG, "OBJ": nixlBind.OBJ_SEG,
    "cpu": nixlBind.DRAM_SEG, "cuda": nixlBind.VRAM_SEG,   # deprecated names
}
_OPS = {"WRITE": nixlBind.NIXL_WRITE, "READ": nixlBind.NIXL_READ}
_STATE = {nixlBind.NIXL_SUCCESS: "DONE", nixlBind.NIXL_IN_PROG: "PROC"}


def _tensor_rows(tensors):
    """(mem type name, Nx3 uint64 rows) of contiguous tensors on one device, or None."""
    dev = tensors[0].device
    rows = np.zeros((len(tensors), 3), dtype=np.uint64)
    for i, t in enumerate(tensors):
        if t.device != dev:
            logger.error("Please use tensors of one device")
            return None
        if not t.is_contiguous():
            logger.error("Please use a list of contiguous Tensors")
            return None
        gpu = t.get_device()
        rows[i] = (t.data_ptr(), t.numel() * t.element_size(), 0 if gpu == -1 else gpu)
    return ("DRAM" if tensors[0].get_device() == -1 else "VRAM"), rows


class nixl_agent:
    """A NIXL agent: nixl_agent(agent_name, nixl_conf=None, instantiate_all=False)."""

    def __init__(self, agent_name: str, nixl_conf: Optional[nixl_agent_config] = None,
                 instantiate_all: bool = False):
        if nixl_conf and instantiate_all:
            instantiate_all = False
            logger.warning("Ignoring instantiate_all based on the provided config in agent "
                           "creation.")
        if not nixl_conf:
            nixl_conf = nixl_agent_config()
        sync = nixl_conf.sync_mode or (nixl_thread_sync_t.NIXL_THREAD_SYNC_STRICT
                                       if nixl_conf.enable_listen
                                       else nixl_thread_sync_t.NIXL_THREAD_SYNC_NONE)
        cfg = nixlBind.nixlAgentConfig()
        cfg.useProgThread = nixl_conf.enable_pthread
        cfg.useListenThread = nixl_conf.enable_listen
        cfg.listenPort = nixl_conf.port
        cfg.syncMode = sync.value
        cfg.pthrDelay = 0
        cfg.lthrDelay = 100000
        cfg.captureTelemetry = nixl_conf.capture_telemetry
        self.agent = nixlBind.nixlAgent(agent_name, cfg)
        # transfer() and check_xfer_state() call the agent's core directly: one
        # Python frame less on the path of every transfer
        core = self.agent._core
        self._post, self._status = core.post, core.status

        self.name = agent_name
        self.notifs: dict = {}
        self.backends: dict = {}
        self.backend_mems: dict = {}
        self.backend_options: dict = {}
        self.plugin_list = self.agent.getAvailPlugins()
        self.plugin_b_options: dict = {}
        self.plugin_mem_types: dict = {}
        wanted = self.plugin_list if instantiate_all else nixl_conf.backends
        for b in wanted:
            if b not in self.plugin_list:
                logger.warning("Skipping backend registration %s due to the missing plugin.", b)
                continue
            init = {}
            if nixl_conf.num_threads > 0:
                init["num_threads"] = str(nixl_conf.num_threads)
            self.create_backend(b, init)
        self.nixl_mems = dict(_MEMS)
        self.nixl_ops = dict(_OPS)
        logger.info("Initialized NIXL agent: %s", agent_name)

    # ---- plugins and backends -------------------------------------------------------------

    def _load_plugin_params(self, plugin):
        if plugin not in self.plugin_list:
            return
        try:
            opts, mems = self.agent.getPluginParams(plugin)
        except Exception:  # noqa: BLE001 - as NIXL: a warning, and nothing recorded
            logger.warning("Failed to load params for plugin %s", plugin, exc_info=True)
            return
        self.plugin_b_options[plugin] = opts
        self.plugin_mem_types[plugin] = mems

    def get_plugin_list(self) -> list:
        return self.plugin_list

    def get_plugin_mem_types(self, backend: str) -> list:
        if backend not in self.plugin_mem_types:
            self._load_plugin_params(backend)
        if backend not in self.plugin_mem_types:
            logger.warning("Plugin %s is not available to get its supported mem types.", backend)
            return []
        return self.plugin_mem_types[backend]

    def get_plugin_params(self, backend: str) -> dict:
        if backend not in self.plugin_b_options:
            self._load_plugin_params(backend)
        if backend not in self.plugin_b_options:
            logger.warning("Plugin %s is not available to get its parameters.", backend)
            return {}
        return self.plugin_b_options[backend]

    def get_backend_mem_types(self, backend: str) -> list:
        if backend in self.backend_mems:
            return self.backend_mems[backend]
        logger.warning("Backend %s not instantiated to get its supported mem types.", backend)
        return []

    def get_backend_params(self, backend: str) -> dict:
        if backend in self.backend_options:
            return self.backend_options[backend]
        logger.warning("Backend %s not instantiated to get its parameters.", backend)
        return {}

    def create_backend(self, backend: str, initParams: Optional[dict] = None):
        self.backends[backend] = self.agent.createBackend(backend, dict(initParams or {}))
        opts, mems = self.agent.getBackendParams(self.backends[backend])
        self.backend_mems[backend] = mems
        self.backend_options[backend] = opts
        logger.info("Backend %s was instantiated", backend)

    def _handles(self, backends):
        return [self.backends[b] for b in (backends or [])]

    # ---- memory ----------------------------------------------------------------------------

    def register_memory(self, reg_list, mem_type: Optional[str] = None,
                        backends: Optional[list] = None):
        descs = self.get_reg_descs(reg_list, mem_type)
        self.agent.registerMem(descs, self._handles(backends))
        return descs

    def deregister_memory(self, dereg_list, backends: Optional[list] = None):
        self.agent.deregisterMem(dereg_list, self._handles(backends))

    def query_memory(self, reg_list, backend: str, mem_type: Optional[str] = None) -> list:
        descs = self.get_reg_descs(reg_list, mem_type)
        if backend not in self.backends:
            raise ValueError(f"Backend '{backend}' not found. Available backends: "
                             f"{list(self.backends.keys())}")
        return self.agent.queryMem(descs, self.backends[backend])

    def make_connection(self, remote_agent: str, backends: Optional[list] = None):
        self.agent.makeConnection(remote_agent, self._handles(backends))

    # ---- transfers -------------------------------------------------------------------------

    def prep_xfer_dlist(self, agent_name: str, xfer_list, mem_type: Optional[str] = None,
                        backends: Optional[list] = None) -> nixl_prepped_dlist_handle:
        descs = self.get_xfer_descs(xfer_list, mem_type)
        handles = self._handles(backends)
        if agent_name in ("NIXL_INIT_AGENT", "", b"NIXL_INIT_AGENT", b""):
            h = self.agent.prepXferDlist(descs, handles)
        else:
            h = self.agent.prepXferDlist(agent_name, descs, handles)
        return nixl_prepped_dlist_handle(self.agent, h)

    def estimate_xfer_cost(self, req_handle: nixl_xfer_handle):
        duration, margin, method = self.agent.estimateXferCost(req_handle._handle)
        method = ("ANALYTICAL_BACKEND" if method == nixlBind.NIXL_COST_ANALYTICAL_BACKEND
                  else "UNKNOWN")
        return duration, margin, method

    def make_prepped_xfer(self, operation: str, local_xfer_side: nixl_prepped_dlist_handle,
                          local_indices, remote_xfer_side: nixl_prepped_dlist_handle,
                          remote_indices, notif_msg: bytes = b"",
                          backends: Optional[list] = None,
                          skip_desc_merge: bool = False) -> nixl_xfer_handle:
        op = self.nixl_ops[operation]
        h = self.agent.makeXferReq(op, local_xfer_side._handle, local_indices,
                                   remote_xfer_side._handle, remote_indices, notif_msg,
                                   self._handles(backends), skip_desc_merge)
        return nixl_xfer_handle(self.agent, h)

    def initialize_xfer(self, operation: str, local_descs, remote_descs, remote_agent: str,
                        notif_msg: bytes = b"",
                        backends: Optional[list] = None) -> nixl_xfer_handle:
        op = self.nixl_ops[operation]
        h = self.agent.createXferReq(op, local_descs, remote_descs, remote_agent, notif_msg,
                                     self._handles(backends))
        return nixl_xfer_handle(self.agent, h)

    def transfer(self, handle: nixl_xfer_handle, notif_msg: bytes = b"") -> str:
        return _STATE.get(self._post(handle._handle, notif_msg), "ERR")

    def check_xfer_state(self, handle: nixl_xfer_handle) -> str:
        return _STATE.get(self._status(handle._handle), "ERR")

    def get_xfer_telemetry(self, handle: nixl_xfer_handle):
        return self.agent.getXferTelemetry(handle._handle)

    def query_xfer_backend(self, handle: nixl_xfer_handle) -> str:
        bh = self.agent.queryXferBackend(handle._handle)
        return next(name for name, h in self.backends.items() if h == bh)

    def release_xfer_handle(self, handle: nixl_xfer_handle):
        handle.release()

    def release_dlist_handle(self, handle: nixl_prepped_dlist_handle):
        handle.release()

    def prep_mem_view(self, dlist, *, backends: Optional[list] = None) -> int:
        return self.agent.prepMemView(dlist, self._handles(backends))

    def release_mem_view(self, mvh: int) -> None:
        self.agent.releaseMemView(mvh)

    # ---- notifications ---------------------------------------------------------------------

    def get_new_notifs(self, backends: Optional[list] = None) -> dict:
        return self.agent.getNotifs({}, self._handles(backends))

    def update_notifs(self, backends: Optional[list] = None) -> dict:
        self.notifs = self.agent.getNotifs(self.notifs, self._handles(backends))
        return self.notifs

    def check_remote_xfer_done(self, remote_agent_name: str, lookup_tag: bytes,
                               backends: Optional[list] = None, tag_is_prefix=True) -> bool:
        self.notifs = self.agent.getNotifs(self.notifs, self._handles(backends))
        if isinstance(remote_agent_name, bytes):
            remote_agent_name = remote_agent_name.decode()
        msgs = self.notifs.get(remote_agent_name)
        if not msgs:
            return False
        for i, msg in enumerate(msgs):
            if (msg.startswith(lookup_tag) if tag_is_prefix else lookup_tag in msg):
                del msgs[i]
                return True
        return False

    def send_notif(self, remote_agent_name: str, notif_msg: bytes,
                   backend: Optional[str] = None):
        if backend is None:
            self.agent.genNotif(remote_agent_name, notif_msg)
        else:
            self.agent.genNotif(remote_agent_name, notif_msg, [self.backends[backend]])

    # ---- metadata --------------------------------------------------------------------------

    def get_agent_metadata(self) -> bytes:
        return self.agent.getLocalMD()

    def get_partial_agent_metadata(self, descs, inc_conn_info: bool = False,
                                   backends: Optional[list] = None) -> bytes:
        return self.agent.getLocalPartialMD(descs, inc_conn_info, self._handles(backends))

    def add_remote_agent(self, metadata: bytes) -> bytes:
        return self.agent.loadRemoteMD(metadata)

    def remove_remote_agent(self, agent: str):
        self.agent.invalidateRemoteMD(agent)

    def send_local_metadata(self, ip_addr: str = "", port: int = DEFAULT_COMM_PORT):
        self.agent.sendLocalMD(ip_addr, port)

    def send_partial_agent_metadata(self, descs, inc_conn_info: bool = False,
                                    backends: Optional[list] = None, ip_addr: str = "",
                                    port: int = DEFAULT_COMM_PORT, label: str = ""):
        self.agent.sendLocalPartialMD(descs, inc_conn_info, self._handles(backends), ip_addr,
                                      port, label)

    def fetch_remote_metadata(self, remote_agent: str, ip_addr: str = "",
                              port: int = DEFAULT_COMM_PORT, label: str = ""):
        self.agent.fetchRemoteMD(remote_agent, ip_addr, port, label)

    def invalidate_local_metadata(self, ip_addr: str = "", port: int = DEFAULT_COMM_PORT):
        self.agent.invalidateLocalMD(ip_addr, port)

    def check_remote_metadata(self, agent: str, descs=None) -> bool:
        if descs is None:
            descs = nixlBind.nixlXferDList(nixlBind.DRAM_SEG)
        return self.agent.checkRemoteMD(agent, descs) == nixlBind.NIXL_SUCCESS

    # ---- descriptor lists ------------------------------------------------------------------

    @staticmethod
    def _tensor_mem_type(tensor) -> str:
        return "DRAM" if tensor.get_device() == -1 else "VRAM"

    def _dlist(self, cls, descs, mem_type, width, what):
        if isinstance(descs, cls):
            return descs
        other = nixlBind.nixlRegDList if cls is nixlBind.nixlXferDList else nixlBind.nixlXferDList
        if isinstance(descs, other):
            logger.error("%s type detected for %s", type(descs).__name__, what)
            return None
        if isinstance(descs, np.ndarray):
            if mem_type is None:
                logger.error("Please specify a mem type if not using Tensors")
                return None
            if descs.ndim != 2 or descs.shape[1] != 3:
                logger.error("Nx3 shape required for descriptor list from numpy array")
                return None
            try:
                return cls(self.nixl_mems[mem_type], descs)
            except (ValueError, TypeError) as e:  # dtype or layout
                logger.error("%s", e)
                return None
        if _is_tensor(descs):
            if not descs.is_contiguous():
                logger.error("Please use a list of contiguous Tensors")
                return None
            got = _tensor_rows([descs])
        elif isinstance(descs, (list, tuple)) and len(descs) and _is_tensor(descs[0]):
            got = _tensor_rows(list(descs))
        elif isinstance(descs, (list, tuple)) and len(descs) and isinstance(descs[0], tuple):
            if mem_type is None:
                logger.error("Please specify a mem type if not using Tensors")
                return None
            if len(descs[0]) != width:
                logger.error("%d-tuple list needed for %s", width, what)
                return None
            return cls(self.nixl_mems[mem_type], list(descs))
        else:
            return None
        if got is None:
            return None
        mem, rows = got
        if cls is nixlBind.nixlRegDList:
            return cls(self.nixl_mems[mem], [(int(a), int(n), int(d), "") for a, n, d in rows])
        return cls(self.nixl_mems[mem], rows)

    def get_xfer_descs(self, descs, mem_type: Optional[str] = None):
        """A nixlXferDList from (addr, len, devId) tuples with mem_type, an Nx3 numpy
        array (uint64 or int64) with mem_type, a contiguous tensor, a list of them, or a
        nixlXferDList (returned as is); None when the input does not fit."""
        return self._dlist(nixlBind.nixlXferDList, descs, mem_type, 3, "transfer")

    def get_remote_descs(self, descs, mem_type: Optional[str] = None):
        if isinstance(descs, nixlBind.nixlRemoteDList):
            return descs
        if isinstance(descs, list) and descs and isinstance(descs[0], tuple):
            if mem_type is None:
                logger.error("Please specify a mem type")
                return None
            if len(descs[0]) != 4:
                logger.error("4-tuple list (addr, len, dev_id, agent_name) needed for remote "
                             "descriptors")
                return None
            return nixlBind.nixlRemoteDList(self.nixl_mems[mem_type], descs)
        return None

    def get_reg_descs(self, descs, mem_type: Optional[str] = None):
        """A nixlRegDList from (addr, len, devId, metaInfo) tuples with mem_type, an Nx3
        numpy array with mem_type, a contiguous tensor, a list of them, or a nixlRegDList
        (returned as is); None when the input does not fit."""
        return self._dlist(nixlBind.nixlRegDList, descs, mem_type, 4, "registration")

    def get_serialized_descs(self, descs) -> bytes:
        return pickle.dumps(descs)

    def deserialize_descs(self, serialized_descs: bytes):
        return pickle.loads(serialized_descs)


__all__ = ["DEFAULT_COMM_PORT", "nixl_agent", "nixl_agent_config", "nixl_backend_handle",
           "nixl_prepped_dlist_handle", "nixl_thread_sync_t", "nixl_xfer_handle", "nixlBind"]
