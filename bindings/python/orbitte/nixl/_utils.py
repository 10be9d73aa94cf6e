"""NIXL's test helpers (``nixl._utils``): page-aligned host buffers by address.

malloc_passthru(size) returns the address of a new 4096-aligned buffer,
free_passthru(addr) frees it, ba_buf(addr, size) fills bytes with 0xba and
verify_transfer(a, b, size) asserts that two ranges hold the same bytes.
The ranges must lie inside buffers of malloc_passthru (the buffers are numpy
arrays kept here, so no raw pointer is dereferenced).
"""

import bisect
import threading

import numpy as np

_ALIGN = 4096
_lock = threading.Lock()
_bufs = {}       # start address -> (array, size)
_starts = []     # sorted start addresses


def malloc_passthru(size):
    size = int(size)
    if size < 0:
        raise ValueError("size must be >= 0")
    raw = np.zeros(size + _ALIGN, dtype=np.uint8)
    base = raw.__array_interface__["data"][0]
    off = (-base) % _ALIGN
    view = raw[off:off + size]
    addr = base + off
    with _lock:
        _bufs[addr] = (raw, view, size)
        bisect.insort(_starts, addr)
    return addr


def free_passthru(buf):
    with _lock:
        if _bufs.pop(int(buf), None) is None:
            raise ValueError(f"{int(buf):#x} was not allocated by malloc_passthru")
        _starts.remove(int(buf))


def _view(addr, size):
    addr, size = int(addr), int(size)
    with _lock:
        i = bisect.bisect_right(_starts, addr) - 1
        if i >= 0:
            start = _starts[i]
            _, view, n = _bufs[start]
            if addr + size <= start + n:
                return view[addr - start:addr - start + size]
    raise ValueError(f"{addr:#x}+{size} is not inside a buffer of malloc_passthru")


def ba_buf(addr, size):
    _view(addr, size)[:] = 0xBA


def verify_transfer(addr1, addr2, size):
    assert bytes(_view(addr1, size)) == bytes(_view(addr2, size))
