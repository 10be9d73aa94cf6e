"""nixlAgent: NIXL's low-level agent over one orbitte.Engine, the facade of
the agent's state (_core._Core). Where the work is done:

- _core.py: the state, its life (creation, the listener thread, close),
  backends, and memory: each registration descriptor is one OrbitTE
  registration (REMOTE_READ | REMOTE_WRITE).
- _peers.py: metadata. getLocalMD() is a signed blob (_md.py) naming the
  agent, its engine (the "host:port" of its control listener), carrying
  OrbitTE's signed descriptor of that engine (Engine.desc_export()) and its
  regions. loadRemoteMD() checks the signature, opens the engine from the
  descriptor (Engine.open_desc(): decoded and, under OTE_AUTH_KEY, its HMAC
  checked by OrbitTE; refused: nixlInvalidParamError) and checks that every
  region the blob names is published by it. With useListenThread the engine
  listens on listenPort and a thread takes metadata sent, requested or
  invalidated by peers (sendLocalMD / fetchRemoteMD / invalidateLocalMD
  travel to "ip:port"), or through etcd (_etcd.py).
- _xfer.py: transfers. A request is one orbitte.Transfer (local addresses,
  remote addresses, lengths, built once); each post is one Transfer.post()
  call, its notification attached so that the peer queues it only after
  every descriptor landed, and never when one failed.
- _notif.py: notifications travel as OrbitTE notifications framed with the
  sender's agent name (_md.py); longer ones than one notification holds go
  as fragments, the last one carried by the transfer.
- _descs.py (descriptor ranges, prepared lists, merging), _args.py
  (arguments as NIXL's callers pass them), _errors.py (OrbitTE statuses as
  NIXL's exceptions), _agentlog.py (the agent's log).
"""

import weakref

from ._args import _name
from ._bindings import NIXL_INIT_AGENT, nixl_status_t, nixlNotFoundError, nixlNotSupportedError
from ._core import _PLUGIN_MEMS, PLUGINS, _Core

SUCCESS = nixl_status_t.NIXL_SUCCESS


class nixlAgent:
    """nixlAgent(name, nixlAgentConfig): NIXL's agent over one orbitte.Engine."""

    def __init__(self, name, cfg=None):
        if not isinstance(name, str):
            raise TypeError("the agent name is a str")
        if name == "":
            raise ValueError("the agent name must not be empty")
        if cfg is None:
            from ._bindings import nixlAgentConfig
            cfg = nixlAgentConfig()
        self._core = _Core(name, cfg)
        self._fin = weakref.finalize(self, _Core.close, self._core)

    name = property(lambda s: s._core.name)

    def close(self):
        self._fin()

    def getAvailPlugins(self):
        return list(PLUGINS)

    def getPluginParams(self, kind):
        if kind not in PLUGINS:
            raise nixlNotFoundError(f"no plugin {kind!r}")
        return {}, list(_PLUGIN_MEMS)

    def getBackendParams(self, backend):
        if int(backend) not in self._core.backends:
            raise nixlNotFoundError(f"no backend handle {backend!r}")
        return {}, list(_PLUGIN_MEMS)

    def createBackend(self, kind, initParams=None):
        return self._core.create_backend(kind, dict(initParams or {}))

    def registerMem(self, descs, backends=()):
        return self._core.register(descs, list(backends))

    def deregisterMem(self, descs, backends=()):
        return self._core.deregister(descs, list(backends))

    def queryMem(self, descs, backend):
        if int(backend) not in self._core.backends:
            raise nixlNotFoundError(f"no backend handle {backend!r}")
        return self._core.query(descs)

    def makeConnection(self, remote_agent, backends=()):
        self._core._remote(_name(remote_agent))
        return SUCCESS

    def prepXferDlist(self, *args, **kw):
        """prepXferDlist(agent_name, descs, backends=[]) for a remote (or this
        agent's own name: loopback), prepXferDlist(descs, backends=[]) for the
        local side."""
        backends = kw.pop("backend", kw.pop("backends", None))
        agent = kw.pop("agent_name", None)
        descs = kw.pop("descs", None)
        args = list(args)
        if agent is None and args and isinstance(args[0], (str, bytes)):
            agent = args.pop(0)
        if descs is None and args:
            descs = args.pop(0)
        if backends is None and args:
            backends = args.pop(0)
        if args or kw:
            raise TypeError("prepXferDlist: unexpected arguments")
        return self._core.prep(NIXL_INIT_AGENT if agent is None else agent, descs,
                               list(backends or ()))

    def releasedDlistH(self, handle):
        return self._core.release_prepped(handle)

    def makeXferReq(self, operation, local_side, local_indices, remote_side, remote_indices,
                    notif_msg=b"", backend=(), skip_desc_merg=False):
        return self._core.make(operation, local_side, local_indices, remote_side,
                               remote_indices, notif_msg, list(backend), bool(skip_desc_merg))

    def createXferReq(self, operation, local_descs, remote_descs, remote_agent, notif_msg=b"",
                      backend=()):
        return self._core.create(operation, local_descs, remote_descs, remote_agent,
                                 notif_msg, list(backend))

    def estimateXferCost(self, req_handle):
        return self._core.estimate(req_handle)

    def postXferReq(self, reqh, notif_msg=b""):
        return self._core.post(reqh, notif_msg)

    def getXferStatus(self, reqh):
        return self._core.status(reqh)

    def getXferTelemetry(self, reqh):
        return self._core.telemetry_of(reqh)

    def queryXferBackend(self, reqh):
        return self._core.backend_of(reqh)

    def releaseXferReq(self, reqh):
        return self._core.release_xfer(reqh)

    def getNotifs(self, notif_map=None, backends=()):
        out = {k: list(v) for k, v in (notif_map or {}).items()}
        for k, v in self._core.take_notifs().items():
            out.setdefault(k, []).extend(v)
        return out

    def genNotif(self, remote_agent, msg, backends=()):
        return self._core.gen_notif(remote_agent, msg)

    def getLocalMD(self):
        self._core._check()
        return self._core.local_md()

    def getLocalPartialMD(self, descs, inc_conn_info=False, backends=()):
        self._core._check()
        return self._core.local_md(descs, conn=bool(inc_conn_info))

    def loadRemoteMD(self, remote_metadata):
        return self._core.load_md(remote_metadata)

    def invalidateRemoteMD(self, remote_agent):
        return self._core.invalidate_remote(remote_agent)

    def sendLocalMD(self, ip_addr="", port=0):
        self._core.send_md(ip_addr, port)

    def sendLocalPartialMD(self, descs, inc_conn_info=False, backends=(), ip_addr="", port=0,
                           label=""):
        self._core.send_md(ip_addr, port, descs, bool(inc_conn_info), label)

    def fetchRemoteMD(self, remote_agent, ip_addr="", port=0, label=""):
        self._core.fetch_md(remote_agent, ip_addr, port, label)

    def invalidateLocalMD(self, ip_addr="", port=0):
        self._core.invalidate_local(ip_addr, port)

    def checkRemoteMD(self, remote_agent, descs=None):
        return self._core.check_md(remote_agent, descs)

    def prepMemView(self, dlist, backends=()):
        raise nixlNotSupportedError("memory views need UCX's GPU device API")

    def releaseMemView(self, mvh):
        raise nixlNotSupportedError("memory views need UCX's GPU device API")

    def __repr__(self):
        return f"<orbitte.nixl nixlAgent {self._core.name!r} on {self._core.engine_name}>"
