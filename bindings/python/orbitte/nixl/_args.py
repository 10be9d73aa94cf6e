"""Arguments as NIXL's callers pass them: agent names (str or the bytes
add_remote_agent returned), messages (str or bytes), index lists (lists,
ranges or integer numpy arrays), the telemetry switch."""

import os

import numpy as np

from ._bindings import nixlInvalidParamError

_TRUE = ("y", "yes", "1", "true", "on")


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
