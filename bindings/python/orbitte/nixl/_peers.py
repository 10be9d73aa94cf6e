"""Peers: this agent's metadata (the signed blob of _md.py) and what it
knows of remote agents (loaded metadata, their segments), the loopback
segment, and the metadata messages of the listener path and the central
metadata server (etcd). A mixin of the agent's state (_core._Core)."""

import threading
import time

import numpy as np

import orbitte

from . import _etcd, _md
from ._agentlog import log
from ._args import _name
from ._bindings import (
    nixl_status_t,
    nixlBackendError,
    nixlInvalidParamError,
    nixlMismatchError,
    nixlNotFoundError,
    nixlNotSupportedError,
    nixlRemoteDisconnectError,
)
from ._descs import _Regions
from ._errors import _S, _wrap

SUCCESS = nixl_status_t.NIXL_SUCCESS


class _Remote:
    """What this agent knows of a peer agent."""

    def __init__(self, name, engine, segment, regions, desc=b""):
        self.name = name
        self.engine = engine
        self.desc = desc                # its engine's descriptor bytes, as loaded
        self.segment = segment
        self.regions = regions          # _Regions
        self.disconnected = None        # why, once the peer removed us


class Peers:
    """Metadata and remote agents (needs _core._Core's state)."""

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
            self.remotes[name] = _Remote(name, engine, seg, _Regions(rows), desc)
        if cur is not None and cur.segment is not seg:
            self._retire_segment(cur.segment)
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
        self._retire_segment(r.segment)
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
        """The loopback segment, opened once; read again after registrations
        changed (only a refresh that succeeded counts them as read)."""
        with self.self_lock:
            with self.lock:
                seg, gen = self.self_seg, self.self_gen
            if seg is None:
                try:
                    seg = self.engine.open(self.engine_name)
                except orbitte.Error as e:
                    raise _wrap(e, "loopback") from None
                with self.lock:
                    self.self_seg = seg
                    self.self_seen = gen
            elif gen != self.self_seen:
                try:
                    seg.refresh()
                except orbitte.Error as e:
                    raise _wrap(e, "loopback") from None
                with self.lock:
                    self.self_seen = gen
            return seg
