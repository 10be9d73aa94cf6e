"""Notifications: messages framed with the sender's agent name (_md.py),
sent as OrbitTE notifications (fragments for long ones), and what the
engine received taken and dispatched: messages to deliver, metadata to
load or send back, peers forgetting this agent. A mixin of the agent's
state (_core._Core)."""

import orbitte

from . import _md
from ._agentlog import log
from ._args import _bytes, _name
from ._bindings import nixl_status_t
from ._errors import _peer_error

SUCCESS = nixl_status_t.NIXL_SUCCESS


class Notifications:
    """Sending, receiving and dispatching notifications (needs _core._Core's state)."""

    def _frames(self, kind, payload):
        return _md.frames(self.name, kind, payload, next(self.msgid))

    def _send_frames(self, seg, kind, payload):
        for f in self._frames(kind, payload):
            self.engine.send(seg, f)

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
        if self.retired:
            self._close_retired()
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
            if r is not None:   # a user thread may be posting to it: closed once it is not
                self._retire_segment(r.segment)
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
