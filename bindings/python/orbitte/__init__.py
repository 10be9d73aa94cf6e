"""OrbitTE: one-sided READ/WRITE between registered memory, from Python.

The package is a CPython extension over libote; it follows the C API in
``ote/ote.h`` closely::

    import orbitte

    with orbitte.Engine(listen_addr="127.0.0.1:0") as target, \\
         orbitte.Engine(listen_addr="127.0.0.1:0") as initiator:
        dst = bytearray(4096)
        src = bytearray(b"x" * 4096)
        dst_mem = target.register(dst)                  # published to peers
        src_mem = initiator.register(src, access=0)     # local use only
        seg = initiator.open(target.name)
        with initiator.batch() as b:
            b.submit(seg, [(orbitte.WRITE, src_mem, dst_mem.addr, 4096)], notify=b"done")
            assert b.wait(timeout=10) == orbitte.COMPLETED
        assert dst == src and target.recv()[0].data == b"done"

Engine(name=None, listen_addr=None, metadata=None) reads the OTE_* environment
(OTE_TLS, OTE_NET_DEVICES, ...) as the C library does. Every call that can wait
releases the GIL. Errors raise orbitte.Error subclasses that carry the status
code (``.status``), its message and the call that failed.
"""

import enum as _enum
import os as _os
import select as _select
import time as _time

from . import _ote
from ._ote import (  # noqa: F401
    NOTIFY_MAX,
    REMOTE_READ,
    REMOTE_WRITE,
    Batch,
    BatchTelemetry,
    Memory,
    Notification,
    Region,
    Segment,
    TaskStatus,
    Transfer,
    library_version,
    status_string,
)

__version__ = "0.1.0"

READ = _ote.READ
WRITE = _ote.WRITE


class Op(_enum.IntEnum):
    """Transfer direction: READ is remote -> local, WRITE local -> remote."""

    READ = _ote.READ
    WRITE = _ote.WRITE


class TaskState(_enum.IntEnum):
    """A task's (or a batch's summary) state."""

    PENDING = _ote.PENDING
    COMPLETED = _ote.COMPLETED
    FAILED = _ote.FAILED
    CANCELED = _ote.CANCELED
    TIMEOUT = _ote.TIMEOUT


PENDING = TaskState.PENDING
COMPLETED = TaskState.COMPLETED
FAILED = TaskState.FAILED
CANCELED = TaskState.CANCELED
TIMEOUT = TaskState.TIMEOUT


class Status(_enum.IntEnum):
    """The ote_status_t codes."""

    OK = 0
    INPROGRESS = 1
    INVALID_PARAM = -1
    NO_MEMORY = -2
    NOT_REGISTERED = -3
    OUT_OF_BOUNDS = -4
    ACCESS = -5
    UNREACHABLE = -6
    NOT_FOUND = -7
    TIMEOUT = -8
    CANCELED = -9
    REMOTE_DISCONNECT = -10
    BUSY = -11
    IO = -12
    UNSUPPORTED = -13
    PROTOCOL = -14
    AUTH = -15
    EXISTS = -16
    PEER_RESTARTED = -17
    NO_DEVICE = -18
    STORE_UNAVAILABLE = -19
    REMOTE_NOT_REGISTERED = -20


# ---- errors ------------------------------------------------------------------


class Error(Exception):
    """Base of every OrbitTE error.

    ``status`` is the ote_status_t code (a Status), ``message`` its text and
    ``operation`` the call that failed (or None).
    """

    def __init__(self, status=Status.INVALID_PARAM, message=None, operation=None):
        try:
            status = Status(status)
        except ValueError:
            pass
        if message is None:
            message = status_string(int(status))
        super().__init__(status, message)
        self.status = status
        self.message = message
        self.operation = operation

    def __str__(self):
        code = int(self.status)
        if self.operation:
            return f"{self.operation}: {self.message} (status {code})"
        return f"{self.message} (status {code})"


class InvalidParamError(Error, ValueError):
    """An invalid argument, or a call on something closed (INVALID_PARAM)."""


class NoMemoryError(Error, MemoryError):
    """Out of memory (NO_MEMORY)."""


class RegionError(Error):
    """An address outside every registered region (NOT_REGISTERED; a remote
    address outside every region the peer registered: REMOTE_NOT_REGISTERED), a range
    crossing a region's end (OUT_OF_BOUNDS), or a region without the access
    flag a transfer needs (ACCESS)."""


class NotFoundError(Error, LookupError):
    """No such segment or peer (NOT_FOUND)."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 - also a builtin TimeoutError
    """A deadline passed (TIMEOUT)."""


class CanceledError(Error):
    """The operation was canceled (CANCELED)."""


class ConnectionError(Error, ConnectionError):  # noqa: A001 - also a builtin ConnectionError
    """The peer disconnected (REMOTE_DISCONNECT), no transport reaches it
    (UNREACHABLE), it sent a malformed message (PROTOCOL) or failed
    authentication (AUTH)."""


class PeerRestartedError(ConnectionError):
    """The peer instance a segment was opened on is gone (PEER_RESTARTED);
    Segment.reopen() binds the segment to the instance serving its name now."""


class BusyError(Error):
    """An admission limit, a full batch, the peer's notification backlog, or
    closing (releasing) an object while another thread is inside a call
    that uses it (BUSY)."""


class IOError(Error, OSError):  # noqa: A001 - also a builtin OSError
    """An input/output error (IO)."""


class UnsupportedError(Error, NotImplementedError):
    """Not supported by this build (UNSUPPORTED), or a transport or device
    name that is not here (NO_DEVICE)."""


class ExistsError(Error):
    """Something of that name already exists (EXISTS)."""


_ERRORS = {
    Status.INVALID_PARAM: InvalidParamError,
    Status.NO_MEMORY: NoMemoryError,
    Status.NOT_REGISTERED: RegionError,
    Status.OUT_OF_BOUNDS: RegionError,
    Status.ACCESS: RegionError,
    Status.NOT_FOUND: NotFoundError,
    Status.TIMEOUT: TimeoutError,
    Status.CANCELED: CanceledError,
    Status.REMOTE_DISCONNECT: ConnectionError,
    Status.UNREACHABLE: ConnectionError,
    Status.PROTOCOL: ConnectionError,
    Status.AUTH: ConnectionError,
    Status.STORE_UNAVAILABLE: ConnectionError,
    Status.PEER_RESTARTED: PeerRestartedError,
    Status.BUSY: BusyError,
    Status.IO: IOError,
    Status.UNSUPPORTED: UnsupportedError,
    Status.NO_DEVICE: UnsupportedError,
    Status.EXISTS: ExistsError,
    Status.REMOTE_NOT_REGISTERED: RegionError,
}
_ote._set_errors(Error, {int(k): v for k, v in _ERRORS.items()})


def error_class(status):
    """The exception class raised for a status code."""
    return _ERRORS.get(status, Error)


# ---- engine ------------------------------------------------------------------


def _interface_extent(iface):
    """(address, nbytes, readonly) of an __array_interface__ or
    __cuda_array_interface__ dict describing contiguous memory."""
    ptr, readonly = iface["data"]
    shape = tuple(iface.get("shape", ()))
    typestr = iface["typestr"]
    itemsize = int(typestr[2:])
    n = 1
    for d in shape:
        n *= int(d)
    strides = iface.get("strides")
    if strides is not None:
        expect = itemsize
        for d, s in zip(reversed(shape), reversed(strides)):
            if d > 1 and s != expect:
                raise InvalidParamError(Status.INVALID_PARAM,
                                        "only contiguous arrays can be registered",
                                        "Engine.register()")
            expect *= d
    return int(ptr), n * itemsize, bool(readonly)


class Engine(_ote.Engine):
    """An engine: registers memory, opens peers, runs batches of transfers.

    Engine(name=None, listen_addr=None, metadata=None): the parameters of
    ote_engine_create (None: the default or the OTE_* environment). Use as a
    context manager or call close(); Memory, Segment and Batch objects keep
    their engine alive and become void once it is closed.
    """

    def register(self, obj, location=None, access=REMOTE_READ | REMOTE_WRITE):
        """Register memory and return a Memory.

        obj is an object exporting the buffer protocol (bytearray, numpy
        array, memoryview, mmap), an object with ``__cuda_array_interface__``
        or ``__array_interface__``, a torch tensor (its ``data_ptr()``), or an
        ``(address, nbytes)`` tuple. The registration keeps obj alive until
        deregistered. location: "cpu:N", "cuda:N", or None to detect.
        access: REMOTE_READ | REMOTE_WRITE (default), or 0 for memory used
        only as the local side of transfers. A read-only buffer cannot be
        registered for REMOTE_WRITE.
        """
        if isinstance(obj, tuple) and len(obj) == 2:
            addr, nbytes = obj
            return self._register_ptr(int(addr), int(nbytes), location, access, None, True, False)
        cuda = getattr(obj, "__cuda_array_interface__", None)
        if cuda is not None:
            addr, nbytes, ro = _interface_extent(cuda)
            return self._register_ptr(addr, nbytes, location, access, obj, False, ro)
        if hasattr(obj, "data_ptr") and hasattr(obj, "element_size") and hasattr(obj, "numel"):
            # a torch tensor (CPU tensors have no array interface)
            if not obj.is_contiguous():
                raise InvalidParamError(Status.INVALID_PARAM,
                                        "only contiguous tensors can be registered",
                                        "Engine.register()")
            host = str(obj.device).startswith("cpu")
            return self._register_ptr(obj.data_ptr(), obj.numel() * obj.element_size(),
                                      location, access, obj, host, False)
        try:
            memoryview(obj)
        except TypeError:
            iface = getattr(obj, "__array_interface__", None)
            if iface is None:
                raise TypeError("register: expected a buffer, an array, a tensor or an "
                                "(address, nbytes) tuple") from None
            addr, nbytes, ro = _interface_extent(iface)
            return self._register_ptr(addr, nbytes, location, access, obj, True, ro)
        return self._register_buffer(obj, location, access)

    def notifications(self, timeout=None):
        """Iterate over received notifications as they arrive.

        Stops after timeout seconds without a notification (None: never).
        Waits on the event fd with the GIL released; for asyncio, register
        fileno() with loop.add_reader and call recv() instead.
        """
        deadline = None if timeout is None else _time.monotonic() + timeout
        while True:
            got = self.recv()
            if got:
                yield from got
                if deadline is not None:
                    deadline = _time.monotonic() + timeout
                continue
            left = None if deadline is None else deadline - _time.monotonic()
            if left is not None and left <= 0:
                return
            poller = _select.poll()
            poller.register(self.fileno(), _select.POLLIN)
            poller.poll(None if left is None else max(1, int(left * 1000)))
            self.clear_event()

    def __repr__(self):
        if self.closed:
            return "<orbitte.Engine closed>"
        return f"<orbitte.Engine {self.name!r}>"


def version():
    """The libote version string ("MAJOR.MINOR.PATCH")."""
    return library_version


__all__ = [
    "Engine", "Memory", "Segment", "Batch", "BatchTelemetry", "TaskStatus", "Region", "Notification",
    "Transfer",
    "Op", "READ", "WRITE", "REMOTE_READ", "REMOTE_WRITE", "NOTIFY_MAX",
    "TaskState", "PENDING", "COMPLETED", "FAILED", "CANCELED", "TIMEOUT", "Status",
    "Error", "InvalidParamError", "NoMemoryError", "RegionError", "NotFoundError",
    "TimeoutError", "CanceledError", "ConnectionError", "PeerRestartedError", "BusyError",
    "IOError", "UnsupportedError", "ExistsError", "error_class", "status_string", "version",
]

del _os
