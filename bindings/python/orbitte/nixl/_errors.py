"""OrbitTE's statuses as NIXL's exceptions: the class NIXL raises for each
(docs/nixl.md, "Errors"), with the OrbitTE status kept as .ote_status."""

import orbitte

from ._bindings import (
    nixlBackendError,
    nixlCancelledError,
    nixlInvalidParamError,
    nixlNotAllowedError,
    nixlNotFoundError,
    nixlNotSupportedError,
    nixlRemoteDisconnectError,
)

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
