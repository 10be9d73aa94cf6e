"""orbitte.mooncake.TransferEngine: setup (initialize), the segments it
keeps open, probes and received notifications; its memory calls and
transfers come from _memory.py and _transfer.py."""

import itertools
import json
import logging
import os
import re
import socket
import threading

from .. import Engine, Error, Status
from ._memory import _MemoryCalls
from ._net import _bind_error, _join_host_port, _net_interfaces, _resolve, _split_host_port
from ._transfer import _TransferCalls
from ._types import TransferOpcode, _decode_notify

log = logging.getLogger("orbitte.mooncake")

P2PHANDSHAKE = "P2PHANDSHAKE"


_env_lock = threading.Lock()



class TransferEngine(_MemoryCalls, _TransferCalls):
    """Mooncake's ``mooncake.engine.TransferEngine`` over an orbitte.Engine.

    Call initialize() (or initialize_ext()) first. Its memory calls are in
    _memory.py, its transfers in _transfer.py. Every call may be made
    from any thread; the ones that wait release the GIL.

    ``transfer_timeout`` (seconds) bounds the sync calls and
    get_batch_transfer_status(): as in Mooncake, MC_TRANSFER_TIMEOUT seconds
    (at least 5, default 30) plus one second per GiB of the call's bytes.
    """

    TransferOpcode = TransferOpcode

    def __init__(self):
        self._engine = None
        self._lock = threading.Lock()
        self._segments = {}
        self._regions = {}  # address -> [orbitte.Memory, ...] (registration order)
        self._managed = {}  # address -> orbitte.Memory from allocate_managed_buffer
        self._batches = {}
        self._batch_ids = itertools.count(1)
        self._host = None
        try:
            t = int(os.environ.get("MC_TRANSFER_TIMEOUT", "30"))
        except ValueError:
            t = 30
        self.transfer_timeout = float(max(5, t))

    # ---- setup ----------------------------------------------------------

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Create the engine. 0 on success, -1 on failure (logged).

        metadata_server: "P2PHANDSHAKE", "etcd://host:port", "redis://..."
        or a bare "host:port" (etcd, as in Mooncake).
        """
        server = metadata_server or ""
        if server == P2PHANDSHAKE:
            return self.initialize_ext(local_hostname, server, protocol, device_name, "")
        if "://" in server:
            scheme, rest = server.split("://", 1)
            return self.initialize_ext(local_hostname, rest, protocol, device_name, scheme)
        return self.initialize_ext(local_hostname, server, protocol, device_name, "etcd")

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        """initialize() with the metadata type apart ("etcd" or "redis", and
        metadata_server its address; or metadata_server "P2PHANDSHAKE").
        Other types (Mooncake's "http") return -1."""
        if self._engine is not None:
            log.error("initialize: this TransferEngine is already initialized")
            return -1
        metadata = None
        if metadata_server != P2PHANDSHAKE:
            conn = metadata_server
            if "://" not in conn:
                conn = f"{metadata_type}://{metadata_server}"
            scheme = conn.split("://", 1)[0]
            if scheme not in ("etcd", "redis"):
                log.error("initialize: metadata server %r: only P2PHANDSHAKE, etcd:// and "
                          "redis:// are supported", conn)
                return -1
            metadata = conn
        try:
            host, port = _split_host_port(local_hostname or "")
            if not host:
                host = socket.gethostname()
            ip = _resolve(host)
        except (OSError, ValueError) as e:
            log.error("initialize: local_hostname %r: %s", local_hostname, e)
            return -1
        tls = self._transports(protocol)
        if tls is None:
            return -1
        devices = self._devices(device_name, tls)
        env = {}
        if "OTE_TLS" not in os.environ:
            env["OTE_TLS"] = tls
        elif os.environ["OTE_TLS"] != tls:
            log.info("initialize: OTE_TLS=%s from the environment used instead of %s",
                     os.environ["OTE_TLS"], tls)
        if devices and "OTE_NET_DEVICES" not in os.environ:
            env["OTE_NET_DEVICES"] = devices
        # P2P: peers open "ip:port" of the listener, so a port given is the
        # one to listen on. With a store the name is the key and the port is
        # any free one.
        if metadata is not None or port is None:
            port = 0
        listen = _join_host_port(ip, port)
        name = None if metadata is None else local_hostname
        with _env_lock:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                engine = Engine(name=name, listen_addr=listen, metadata=metadata)
            except Error as e:
                log.error("initialize(%r, %r, %r, %r): %s", local_hostname, metadata_server,
                          protocol, device_name, e)
                if port and e.status == Status.IO:  # the listener could not bind
                    log.error("initialize: cannot listen on port %d of %s: %s", port, ip,
                              _bind_error(ip, port))
                if tls == "ib" and int(e.status) == -18:  # NO_DEVICE
                    log.error("initialize: protocol rdma needs an RDMA device for UCX's "
                              "InfiniBand/RoCE transports and this host has none usable; "
                              "use protocol tcp, or set MC_FORCE_TCP=1")
                return -1
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        self._engine = engine
        self._host = host
        log.info("initialize: segment %s (transports %s)", engine.name,
                 env.get("OTE_TLS", os.environ.get("OTE_TLS")))
        return 0

    @staticmethod
    def _transports(protocol):
        proto = (protocol or "tcp").lower()
        if proto == "rdma" and os.environ.get("MC_FORCE_TCP"):
            log.info("initialize: MC_FORCE_TCP is set: protocol rdma runs over tcp")
            proto = "tcp"
        if proto == "tcp":
            return "tcp"
        if proto == "rdma":
            return "ib"
        log.error("initialize: protocol %r is not supported (tcp or rdma)", protocol)
        return None

    @staticmethod
    def _devices(device_name, tls):
        names = [d.strip() for d in (device_name or "").split(",") if d.strip()]
        if tls == "tcp":
            here = _net_interfaces()
            kept = [d for d in names if d in here]
            if len(kept) != len(names):
                log.info("initialize: devices %s are not network interfaces; the tcp "
                         "transport ignores them", [d for d in names if d not in here])
            names = kept
        return ",".join(names)

    def _ready(self, what):
        if self._engine is None or self._engine.closed:
            log.error("%s: the TransferEngine is not initialized", what)
            return False
        return True

    def get_rpc_port(self):
        """The port of the segment name ("ip:port") peers open; -1 before
        initialize() and once the engine is closed."""
        if self._engine is None or self._engine.closed:
            return -1
        return int(self._engine.name.rsplit(":", 1)[1])

    def get_engine(self):
        """The underlying orbitte.Engine (None before initialize())."""
        return self._engine

    def get_local_topology(self, device_name=None):
        """JSON of this host's topology in Mooncake's shape: for every NUMA
        node "cpu:N" a pair [preferred devices, other devices] listing the
        RDMA devices (those named in device_name only, a comma list, when
        given) near that node and elsewhere."""
        wanted = {d.strip() for d in (device_name or "").split(",") if d.strip()}
        nodes = []
        try:
            nodes = sorted(int(d[4:]) for d in os.listdir("/sys/devices/system/node")
                           if re.fullmatch(r"node\d+", d))
        except OSError:
            pass
        if not nodes:
            nodes = [0]
        hcas = {}
        try:
            for dev in sorted(os.listdir("/sys/class/infiniband")):
                if wanted and dev not in wanted:
                    continue
                try:
                    with open(f"/sys/class/infiniband/{dev}/device/numa_node") as f:
                        hcas[dev] = max(0, int(f.read().strip()))
                except (OSError, ValueError):
                    hcas[dev] = 0
        except OSError:
            pass
        topo = {}
        for node in nodes:
            near = [d for d, n in hcas.items() if n == node]
            far = [d for d, n in hcas.items() if n != node]
            topo[f"cpu:{node}"] = [near, far]
        return json.dumps(topo)

    # ---- segments -------------------------------------------------------

    def _segment(self, name, what):
        with self._lock:
            seg = self._segments.get(name)
        if seg is not None and not seg.closed:
            return seg
        try:
            seg = self._engine.open(name)
        except Error as e:
            log.error("%s: cannot open segment %s: %s", what, name, e)
            return None
        with self._lock:
            other = self._segments.get(name)
            if other is not None and not other.closed:
                seg.close()
                return other
            self._segments[name] = seg
        return seg

    def _drop_segment(self, name, seg):
        with self._lock:
            if self._segments.get(name) is seg:
                del self._segments[name]
        try:
            seg.close()
        except Error:
            pass

    def send_probe(self, peer_server_name):
        """0 when the peer answers (its descriptor can be fetched), else -1."""
        if not self._ready("send_probe"):
            return -1
        seg = self._segment(peer_server_name, "send_probe")
        if seg is None:
            return -1
        try:
            seg.reopen()
        except Error as e:
            log.warning("send_probe(%s): %s", peer_server_name, e)
            self._drop_segment(peer_server_name, seg)
            return -1
        return 0

    # ---- notifications --------------------------------------------------

    def get_notifies(self):
        """The notifications received since the last call, oldest first: a
        list of TransferNotify."""
        if not self._ready("get_notifies"):
            return []
        out = []
        while True:
            got = self._engine.recv(256)
            if not got:
                return out
            out.extend(_decode_notify(n) for n in got)
