"""NIXL's low-level binding module (``nixl._bindings``) over OrbitTE.

Names, argument orders, return values and exceptions follow NIXL's pybind11
module: descriptor lists (nixlXferDList, nixlRegDList, nixlRemoteDList),
nixlAgentConfig, nixlAgent (createBackend, registerMem, getLocalMD,
loadRemoteMD, createXferReq, prepXferDlist, makeXferReq, postXferReq,
getXferStatus, getNotifs, genNotif, ...), nixlXferTelemetry, the status and
memory-type constants and NIXL's exception classes. Handles are ints, as in
NIXL. Each agent runs one orbitte.Engine; the agent module is _agent.py.
"""

import enum as _enum

import numpy as _np

# ---- constants -----------------------------------------------------------------

NIXL_INIT_AGENT = ""
DEFAULT_COMM_PORT = 8888
# OrbitTE has no UCX GPU device API: prepMemView raises nixlNotSupportedError.
HAVE_UCX_GPU_DEVICE_API = False


class nixl_thread_sync_t(_enum.IntEnum):
    NIXL_THREAD_SYNC_NONE = 0
    NIXL_THREAD_SYNC_STRICT = 1
    NIXL_THREAD_SYNC_RW = 2
    NIXL_THREAD_SYNC_DEFAULT = 3


class nixl_mem_t(_enum.IntEnum):
    DRAM_SEG = 0
    VRAM_SEG = 1
    BLK_SEG = 2
    OBJ_SEG = 3
    FILE_SEG = 4


class nixl_xfer_op_t(_enum.IntEnum):
    NIXL_READ = 0
    NIXL_WRITE = 1


class nixl_cost_t(_enum.IntEnum):
    NIXL_COST_ANALYTICAL_BACKEND = 0


class nixl_status_t(_enum.IntEnum):
    NIXL_IN_PROG = 1
    NIXL_SUCCESS = 0
    NIXL_ERR_NOT_POSTED = -1
    NIXL_ERR_INVALID_PARAM = -2
    NIXL_ERR_BACKEND = -3
    NIXL_ERR_NOT_FOUND = -4
    NIXL_ERR_MISMATCH = -5
    NIXL_ERR_NOT_ALLOWED = -6
    NIXL_ERR_REPOST_ACTIVE = -7
    NIXL_ERR_UNKNOWN = -8
    NIXL_ERR_NOT_SUPPORTED = -9
    NIXL_ERR_REMOTE_DISCONNECT = -10
    NIXL_ERR_CANCELED = -11
    NIXL_ERR_NO_TELEMETRY = -12


for _e in (nixl_thread_sync_t, nixl_mem_t, nixl_xfer_op_t, nixl_cost_t, nixl_status_t):
    globals().update(_e.__members__)
del _e

_MEM_STR = {0: "DRAM_SEG", 1: "VRAM_SEG", 2: "BLK_SEG", 3: "OBJ_SEG", 4: "FILE_SEG"}
_STATUS_STR = {
    1: "NIXL_IN_PROG", 0: "NIXL_SUCCESS", -1: "NIXL_ERR_NOT_POSTED",
    -2: "NIXL_ERR_INVALID_PARAM", -3: "NIXL_ERR_BACKEND", -4: "NIXL_ERR_NOT_FOUND",
    -5: "NIXL_ERR_MISMATCH", -6: "NIXL_ERR_NOT_ALLOWED", -7: "NIXL_ERR_REPOST_ACTIVE",
    -8: "NIXL_ERR_UNKNOWN", -9: "NIXL_ERR_NOT_SUPPORTED", -10: "NIXL_ERR_REMOTE_DISCONNECT",
    -11: "NIXL_ERR_CANCELED", -12: "NIXL_ERR_NO_TELEMETRY",
}

# ---- exceptions ----------------------------------------------------------------


class nixlError(Exception):
    """Base of the NIXL exception classes here (NIXL's derive from Exception).

    str(e) starts with NIXL's status name. ``status`` is the NIXL status code,
    ``ote_status`` the OrbitTE status it was mapped from (None when the error
    was found by this layer), ``detail`` what happened.
    """

    status = nixl_status_t.NIXL_ERR_UNKNOWN

    def __init__(self, detail="", ote_status=None):
        name = _STATUS_STR[int(self.status)]
        super().__init__(f"{name}: {detail}" if detail else name)
        self.detail = detail
        self.ote_status = ote_status


def _exc(name, status):
    cls = type(name, (nixlError,), {"status": status, "__module__": __name__})
    globals()[name] = cls
    return cls


nixlNotPostedError = _exc("nixlNotPostedError", nixl_status_t.NIXL_ERR_NOT_POSTED)
nixlInvalidParamError = _exc("nixlInvalidParamError", nixl_status_t.NIXL_ERR_INVALID_PARAM)
nixlBackendError = _exc("nixlBackendError", nixl_status_t.NIXL_ERR_BACKEND)
nixlNotFoundError = _exc("nixlNotFoundError", nixl_status_t.NIXL_ERR_NOT_FOUND)
nixlMismatchError = _exc("nixlMismatchError", nixl_status_t.NIXL_ERR_MISMATCH)
nixlNotAllowedError = _exc("nixlNotAllowedError", nixl_status_t.NIXL_ERR_NOT_ALLOWED)
nixlRepostActiveError = _exc("nixlRepostActiveError", nixl_status_t.NIXL_ERR_REPOST_ACTIVE)
nixlUnknownError = _exc("nixlUnknownError", nixl_status_t.NIXL_ERR_UNKNOWN)
nixlNotSupportedError = _exc("nixlNotSupportedError", nixl_status_t.NIXL_ERR_NOT_SUPPORTED)
nixlRemoteDisconnectError = _exc("nixlRemoteDisconnectError",
                                 nixl_status_t.NIXL_ERR_REMOTE_DISCONNECT)
nixlCancelledError = _exc("nixlCancelledError", nixl_status_t.NIXL_ERR_CANCELED)
nixlNoTelemetryError = _exc("nixlNoTelemetryError", nixl_status_t.NIXL_ERR_NO_TELEMETRY)

_BY_STATUS = {int(c.status): c for c in (
    nixlNotPostedError, nixlInvalidParamError, nixlBackendError, nixlNotFoundError,
    nixlMismatchError, nixlNotAllowedError, nixlRepostActiveError, nixlUnknownError,
    nixlNotSupportedError, nixlRemoteDisconnectError, nixlCancelledError,
    nixlNoTelemetryError)}


def _raise_status(status, detail=""):
    """Raise the exception of a NIXL status (nothing for SUCCESS / IN_PROG)."""
    if status in (0, 1):
        return
    raise _BY_STATUS.get(int(status), nixlUnknownError)(detail)


# ---- telemetry -------------------------------------------------------------------


class nixlXferTelemetry:
    """A transfer's telemetry: startTime (microseconds since the epoch),
    postDuration and xferDuration (microseconds), totalBytes, descCount."""

    __slots__ = ("_start", "_post", "_xfer", "_bytes", "_count")

    def __init__(self, startTime=0, postDuration=0, xferDuration=0, totalBytes=0, descCount=0):
        self._start = int(startTime)
        self._post = int(postDuration)
        self._xfer = int(xferDuration)
        self._bytes = int(totalBytes)
        self._count = int(descCount)

    startTime = property(lambda s: s._start)
    postDuration = property(lambda s: s._post)
    xferDuration = property(lambda s: s._xfer)
    totalBytes = property(lambda s: s._bytes)
    descCount = property(lambda s: s._count)

    def __repr__(self):
        return (f"nixlXferTelemetry(startTime={self._start}, postDuration={self._post}, "
                f"xferDuration={self._xfer}, totalBytes={self._bytes}, "
                f"descCount={self._count})")


# ---- descriptor lists ------------------------------------------------------------

_EMPTY = _np.zeros((0, 3), dtype=_np.uint64)


def _mem(t):
    try:
        return nixl_mem_t(int(t))
    except (ValueError, TypeError):
        raise TypeError(f"not a nixl_mem_t: {t!r}") from None


def _desc3(d):
    if not isinstance(d, tuple):
        raise TypeError("a descriptor is a tuple")
    if len(d) < 3:
        raise ValueError("a descriptor needs (addr, len, devId)")
    a, n, dev = int(d[0]), int(d[1]), int(d[2])
    if a < 0 or n < 0 or dev < 0:
        raise TypeError("descriptor fields are unsigned integers")
    return a, n, dev


def _rows_from_array(descs):
    if not isinstance(descs, _np.ndarray) or descs.ndim != 2 or descs.shape[1] != 3:
        raise ValueError("descs must be a Nx3 numpy array")
    if descs.dtype not in (_np.uint64, _np.int64):
        raise ValueError("descs must be a Nx3 numpy array of uint64 or int64")
    if not descs.flags.c_contiguous:
        raise ValueError("descs must be a C-contiguous numpy array")
    return descs.astype(_np.uint64, copy=True)


def _rows_from_tuples(descs, width):
    if not all(type(d) is tuple for d in descs):
        if not all(isinstance(d, tuple) for d in descs):
            raise TypeError("Each descriptor must be a tuple when provided as a list")
    if any(len(d) != width for d in descs):
        raise ValueError(f"Each descriptor tuple must have exactly {width} elements")
    if not descs:
        return _EMPTY.copy()
    try:
        src = descs if width == 3 else [d[:3] for d in descs]
        return _np.array(src, dtype=_np.uint64).reshape(len(descs), 3)
    except (OverflowError, ValueError, TypeError):
        pass
    return _np.array([_desc3(d) for d in descs], dtype=_np.uint64).reshape(len(descs), 3)


class _DList:
    """Common part of the descriptor lists: an Nx3 uint64 array (addr, len,
    devId) of one memory type, built lazily from appended tuples."""

    _width = 3

    def __init__(self, type, descs=None, init_size=0):  # noqa: A002 - NIXL's keyword
        self._type = _mem(type)
        if isinstance(descs, int) and not isinstance(descs, bool):
            init_size, descs = descs, None
        self._extra_init()
        if descs is None:
            self._arr = _np.zeros((int(init_size), 3), dtype=_np.uint64)
            self._init_extra_rows(int(init_size))
        elif isinstance(descs, _np.ndarray):
            if isinstance(self, nixlRemoteDList):
                raise TypeError("this list takes (addr, len, devId, name) tuples")
            self._arr = _rows_from_array(descs)
            self._init_extra_rows(len(self._arr))
        elif isinstance(descs, list):
            self._arr = _rows_from_tuples(descs, self._width)
            self._set_extra_from(descs)
        else:
            raise TypeError("descs: a list of tuples or an Nx3 numpy array")
        self._pending = []

    # subclasses: extra per-descriptor data (meta info, agent names)
    def _extra_init(self):
        pass

    def _init_extra_rows(self, n):
        pass

    def _set_extra_from(self, descs):
        pass

    def _extra_row(self, d):
        pass

    def _rows(self):
        if self._pending:
            add = _np.array(self._pending, dtype=_np.uint64).reshape(len(self._pending), 3)
            self._arr = _np.concatenate([self._arr, add]) if len(self._arr) else add
            self._pending = []
        return self._arr

    def getType(self):
        return self._type

    def descCount(self):
        return len(self._arr) + len(self._pending)

    def isEmpty(self):
        return self.descCount() == 0

    def _index(self, i):
        n = self.descCount()
        i = int(i)
        if i < 0 or i >= n:
            raise IndexError("descriptor index out of range")
        return i

    def __getitem__(self, i):
        i = self._index(i)
        a, n, d = (int(x) for x in self._rows()[i])
        return (a, n, d)

    def __setitem__(self, i, desc):
        i = self._index(i)
        self._rows()[i] = _desc3(desc)
        self._extra_set(i, desc)

    def _extra_set(self, i, desc):
        pass

    def addDesc(self, desc):
        if len(desc) != self._width and self._width != 3:
            raise ValueError(f"a descriptor of {self._width} elements")
        self._pending.append(_desc3(desc))
        self._extra_row(desc)

    append = addDesc

    def remDesc(self, index):
        i = self._index(index)
        self._arr = _np.delete(self._rows(), i, axis=0)
        self._extra_del(i)

    def _extra_del(self, i):
        pass

    def clear(self):
        self._arr = _EMPTY.copy()
        self._pending = []
        self._extra_init()

    def _extra_eq(self, other):
        return True

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return (self._type == other._type and self.descCount() == other.descCount()
                and bool(_np.array_equal(self._rows(), other._rows()))
                and self._extra_eq(other))

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None

    def _describe(self, i):
        a, n, d = self[i]
        return f"addr={a:#x} len={n} devId={d}"

    def print(self):
        print(f"DescList of mem type {_MEM_STR[int(self._type)]}")
        for i in range(self.descCount()):
            print("    " + self._describe(i))

    def __repr__(self):
        return (f"<{type(self).__name__} {_MEM_STR[int(self._type)]} "
                f"{self.descCount()} descriptors>")

    # pickling: the mem type, the raw rows, the extra column
    def _extra_state(self):
        return None

    def _set_extra_state(self, state):
        pass

    def __reduce__(self):
        return (_rebuild, (type(self).__name__, int(self._type), self._rows().tobytes(),
                           self._extra_state()))


def _rebuild(cls_name, mem, raw, extra):
    cls = {"nixlXferDList": nixlXferDList, "nixlRegDList": nixlRegDList,
           "nixlRemoteDList": nixlRemoteDList}[cls_name]
    obj = cls.__new__(cls)
    obj._type = _mem(mem)
    obj._arr = _np.frombuffer(raw, dtype=_np.uint64).reshape(-1, 3).copy()
    obj._pending = []
    obj._extra_init()
    obj._init_extra_rows(len(obj._arr))
    obj._set_extra_state(extra)
    return obj


class nixlXferDList(_DList):
    """Transfer descriptors (addr, len, devId) of one memory type."""

    def index(self, desc):
        a, n, d = _desc3(desc)
        rows = self._rows()
        hit = _np.nonzero((rows[:, 0] == a) & (rows[:, 1] == n) & (rows[:, 2] == d))[0]
        if len(hit) == 0:
            raise nixlNotFoundError("descriptor not in the list")
        return int(hit[0])


class nixlRegDList(_DList):
    """Registration descriptors (addr, len, devId, metaInfo) of one memory type;
    metaInfo is bytes (a file name for FILE_SEG)."""

    _width = 4

    def _extra_init(self):
        self._meta = []

    def _init_extra_rows(self, n):
        self._meta = [b""] * n

    def _set_extra_from(self, descs):
        self._meta = [_meta_bytes(d[3]) for d in descs]

    def _extra_row(self, d):
        self._meta.append(_meta_bytes(d[3]) if len(d) > 3 else b"")

    def _extra_set(self, i, desc):
        self._meta[i] = _meta_bytes(desc[3]) if len(desc) > 3 else b""

    def _extra_del(self, i):
        del self._meta[i]

    def _extra_eq(self, other):
        return self._meta == other._meta

    def _extra_state(self):
        return list(self._meta)

    def _set_extra_state(self, state):
        if state is not None:
            self._meta = list(state)

    def __getitem__(self, i):
        a, n, d = _DList.__getitem__(self, i)
        return (a, n, d, self._meta[int(i)])

    def addDesc(self, desc):
        if not isinstance(desc, tuple) or len(desc) != 4:
            raise ValueError("a registration descriptor is (addr, len, devId, metaInfo)")
        _DList.addDesc(self, desc)

    append = addDesc

    def index(self, desc):
        a, n, d = _desc3(desc)
        m = _meta_bytes(desc[3]) if len(desc) > 3 else b""
        rows = self._rows()
        for i in _np.nonzero((rows[:, 0] == a) & (rows[:, 1] == n) & (rows[:, 2] == d))[0]:
            if self._meta[int(i)] == m:
                return int(i)
        raise nixlNotFoundError("descriptor not in the list")

    def trim(self):
        """The same descriptors as a nixlXferDList (metaInfo dropped)."""
        out = nixlXferDList(self._type)
        out._arr = self._rows().copy()
        return out

    def _describe(self, i):
        return _DList._describe(self, i) + f" metaInfo={self._meta[i]!r}"


class nixlRemoteDList(_DList):
    """Remote descriptors (addr, len, devId, agent name)."""

    _width = 4

    def _extra_init(self):
        self._agents = []

    def _init_extra_rows(self, n):
        self._agents = [""] * n

    def _set_extra_from(self, descs):
        self._agents = [str(d[3]) for d in descs]

    def _extra_row(self, d):
        self._agents.append(str(d[3]))

    def _extra_set(self, i, desc):
        self._agents[i] = str(desc[3])

    def _extra_del(self, i):
        del self._agents[i]

    def _extra_eq(self, other):
        return self._agents == other._agents

    def _extra_state(self):
        return list(self._agents)

    def _set_extra_state(self, state):
        if state is not None:
            self._agents = list(state)

    def __getitem__(self, i):
        a, n, d = _DList.__getitem__(self, i)
        return (a, n, d, self._agents[int(i)])

    def addDesc(self, desc):
        if not isinstance(desc, tuple) or len(desc) != 4:
            raise ValueError("Each descriptor must be (addr, len, dev_id, agent_name)")
        _DList.addDesc(self, desc)

    append = addDesc


def _meta_bytes(m):
    if isinstance(m, bytes):
        return m
    if isinstance(m, (bytearray, memoryview)):
        return bytes(m)
    return str(m).encode()


# ---- agent configuration ---------------------------------------------------------------


class nixlAgentConfig:
    """nixlAgentConfig(useProgThread=True, useListenThread=False,
    listenPort=DEFAULT_COMM_PORT, syncMode=NIXL_THREAD_SYNC_DEFAULT, num_workers=1,
    pthrDelay=0, lthrDelay=100000, captureTelemetry=False), positional as NIXL's."""

    def __init__(self, useProgThread=True, useListenThread=False, listenPort=DEFAULT_COMM_PORT,
                 syncMode=nixl_thread_sync_t.NIXL_THREAD_SYNC_DEFAULT, num_workers=1,
                 pthrDelay=0, lthrDelay=100000, captureTelemetry=False):
        self.useProgThread = bool(useProgThread)
        self.useListenThread = bool(useListenThread)
        self.listenPort = int(listenPort)
        self.syncMode = syncMode
        self.num_workers = int(num_workers)
        self.pthrDelay = int(pthrDelay)
        self.lthrDelay = int(lthrDelay)
        self.captureTelemetry = bool(captureTelemetry)
        self.etcdWatchTimeout = 5000000

    def __repr__(self):
        return (f"nixlAgentConfig(useProgThread={self.useProgThread}, "
                f"useListenThread={self.useListenThread}, listenPort={self.listenPort}, "
                f"captureTelemetry={self.captureTelemetry})")


from ._agent import nixlAgent  # noqa: E402,F401
