"""Transfers: prepared descriptor lists and transfer requests, each request
one orbitte.Transfer (its requests built once, each post one C call), its
post, state, telemetry and release. Transfers (a mixin of _core._Core)
makes, posts and polls them."""

import threading
import time

import numpy as np

import orbitte

from . import _md
from ._args import _bytes, _indices, _name
from ._bindings import (
    NIXL_INIT_AGENT,
    nixl_status_t,
    nixl_xfer_op_t,
    nixlCancelledError,
    nixlInvalidParamError,
    nixlNotFoundError,
    nixlNotPostedError,
    nixlNotSupportedError,
    nixlNoTelemetryError,
    nixlRepostActiveError,
    nixlXferDList,
    nixlXferTelemetry,
)
from ._descs import _Prepped, merge
from ._errors import _peer_error, _peer_status, _wrap

SUCCESS = nixl_status_t.NIXL_SUCCESS
IN_PROG = nixl_status_t.NIXL_IN_PROG
_OP = {int(nixl_xfer_op_t.NIXL_READ): orbitte.READ, int(nixl_xfer_op_t.NIXL_WRITE): orbitte.WRITE}

# check_xfer_state of a transfer in progress: a thread that polls the same
# transfer again within REPOLL_US of the last "PROC" (of its poll, or of the
# transfer() it posted) is polling it in a loop and waits in the engine
# instead, up to WAIT_S (ote_batch_wait, as ote_perftest waits after its
# submit); any other poll progresses the engine once and yields the CPU.
REPOLL_US = 50
WAIT_S = 0.001
_PENDING = int(orbitte._ote.PENDING)
_COMPLETED = int(orbitte._ote.COMPLETED)


class _Xfer:
    """A transfer request: its orbitte.Transfer (the requests, built once, and
    the batch of its posts), its peer, its state and figures."""

    def __init__(self, engine, op, remote, la, ra, ln, notif, backend, telemetry, t=None):
        self.lock = threading.Lock()
        self.op = op
        self.remote = remote          # agent name
        if t is not None:             # made by the extension (Engine.transfer)
            self.count, self.total = t.count, t.bytes
        else:
            la = np.ascontiguousarray(la, dtype=np.uint64)
            ln = np.ascontiguousarray(ln, dtype=np.uint64)
            self.count = len(la)
            self.total = int(ln.sum()) if self.count else 0
            if self.count:
                t = engine.transfer(op, la, np.ascontiguousarray(ra, dtype=np.uint64), ln)
        self.t = t
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


class Transfers:
    """Prepared lists and transfer requests (needs _core._Core's state)."""

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
        if R.agent != self.name:
            rregions = self._remote(R.agent).regions
        else:
            with self.lock:
                rregions = self.local
        with self.lock:
            loc = self.local
        op, notif = _OP[int(op)], _bytes(notif)
        t = self._gathered(op, L, li, R, ri, not skip_merge)
        if t is not None and t.merged:
            # each merged range still inside one registration on its side
            rows = np.frombuffer(t.ranges(), dtype=np.uint64).reshape(-1, 3)
            if not (bool(loc.covers(rows[:, 0], rows[:, 2]).all()) and
                    bool(rregions.covers(rows[:, 1], rows[:, 2]).all())):
                t.release()
                t = self._gathered(op, L, li, R, ri, False)
        if t is not None:
            x = _Xfer(self.engine, op, R.agent, None, None, None, notif, bk, self.telemetry, t)
            return self._new_handle(x)
        # lists the extension does not take, errors, no descriptors: in numpy, with
        # NIXL's exceptions
        same = ri is li and L.count == R.count   # one list for both sides: converted once
        li = _indices(li, L.count, "local")
        ri = li if same else _indices(ri, R.count, "remote")
        if len(li) != len(ri):
            raise nixlInvalidParamError(f"{len(li)} local and {len(ri)} remote indices")
        ln = L.len[li]
        if not np.array_equal(ln, R.len[ri]):
            raise nixlInvalidParamError("local and remote descriptor lengths differ")
        la, ra = L.addr[li], R.addr[ri]
        if not skip_merge and len(la) > 1:
            la, ra, ln = merge(la, ra, ln, loc, rregions)
        x = self._xfer(op, R.agent, la, ra, ln, notif, bk)
        return self._new_handle(x)

    def _gathered(self, op, L, li, R, ri, merge_runs):
        """The transfer of the indexed descriptors, gathered (and merged) by the
        extension; None when it refuses them (then make() says why)."""
        if isinstance(li, range) or isinstance(ri, range):
            return None
        try:
            return self.engine.transfer(op, L.addr, R.addr, L.len, local_index=li,
                                        remote_index=ri, remote_lengths=R.len,
                                        merge=merge_runs)
        except (orbitte.Error, TypeError, ValueError, IndexError, OverflowError):
            return None

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
            # (or right after posting it) waits in the engine instead
            # (REPOLL_US, WAIT_S), which leaves the CPU to the engine's threads;
            # else the CPU is yielded. The common answers without a frame more.
            try:
                s = x.t.poll(True, WAIT_S, REPOLL_US, True)
            except orbitte.Error:
                s = None
            if s == _PENDING:
                return IN_PROG
            if s == _COMPLETED:
                x._finish(SUCCESS)
                self._cost(x)
                return SUCCESS
            st = x.poll()            # ended otherwise (or raised): its error, as poll says
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
