"""Mooncake's Python TransferEngine, over OrbitTE.

``orbitte.mooncake.TransferEngine`` offers the calls and return conventions
of the ``TransferEngine`` class of Mooncake's ``mooncake.engine`` module, so
code written for that class (vLLM's MooncakeConnector, SGLang's
disaggregation/mooncake, LMCache) runs over libote unchanged::

    import orbitte.mooncake
    orbitte.mooncake.install()          # "mooncake.engine" resolves to this module
    from mooncake.engine import TransferEngine

    te = TransferEngine()
    te.initialize("10.0.0.5", "P2PHANDSHAKE", "tcp", "")
    name = "10.0.0.5:%d" % te.get_rpc_port()    # the segment name peers use

Conventions, as in Mooncake: calls return 0 on success and -1 (or another
negative number) on failure, never raise for a failed transfer; addresses
are ints; async calls return a batch id (0 on failure). The reasons for a
failure go to the ``orbitte.mooncake`` logger.

Mapping onto OrbitTE:

- ``metadata_server`` "P2PHANDSHAKE": the engine's control plane listens on
  ``local_hostname`` ("ip" or "ip:port"; a port given is the one it listens
  on, and initialize() returns -1 when it cannot have it; without one, or
  with port 0, a free port is taken) and its segment name is "ip:port" with
  the port get_rpc_port() returns. "etcd://..." and "redis://..." (and
  a bare "host:port", which Mooncake reads as etcd) are passed to the
  engine's metadata parameter; other schemes are refused.
- ``protocol``: "tcp" selects OrbitTE's native tcp transport, "rdma" UCX's
  InfiniBand/RoCE transports (OTE_TLS=ib); MC_FORCE_TCP in the environment
  turns "rdma" into "tcp" as in Mooncake. An OTE_TLS already set in the
  environment wins over both. ``device_name`` (a comma list) becomes
  OTE_NET_DEVICES; with "tcp", names that are not network interfaces of this
  host (HCA names such as "mlx5_0") are left out, since Mooncake's tcp
  transport ignores them too.
- Each segment name is opened once and kept; a segment whose peer went away
  is dropped so that the next call opens it again.
"""

import ctypes
import errno
import itertools
import json
import logging
import os
import re
import socket
import struct
import threading
import time

from . import (
    COMPLETED,
    PENDING,
    READ,
    WRITE,
    Engine,
    Error,
    Status,
    TIMEOUT,
)

log = logging.getLogger("orbitte.mooncake")

P2PHANDSHAKE = "P2PHANDSHAKE"

# Mooncake frames TransferNotify as (name, msg); OrbitTE notifications carry
# bytes and the sender's segment name, so the pair travels in one frame:
# magic, name length (u16 little endian), name, msg.
_NOTIFY_MAGIC = b"\x00MCN"
_NOTIFY_HEAD = struct.Struct("<4sH")
_NOTIFY_MAX = 4096

_env_lock = threading.Lock()


class TransferOpcode(int):
    """READ (0): remote -> local; WRITE (1): local -> remote.

    ``TransferOpcode.Read``/``TransferOpcode.Write`` (and the module-level
    ``Read``/``Write``) as in Mooncake; they compare equal to 0 and 1.
    """

    __slots__ = ()
    _names = {0: "Read", 1: "Write"}

    def __new__(cls, value):
        value = int(value)
        if value not in cls._names:
            raise ValueError(f"TransferOpcode: {value} is neither Read (0) nor Write (1)")
        return super().__new__(cls, value)

    @property
    def name(self):
        return self._names[int(self)]

    @property
    def value(self):
        return int(self)

    def __repr__(self):
        return f"<TransferOpcode.{self.name}: {int(self)}>"

    __str__ = __repr__


TransferOpcode.Read = TransferOpcode(0)
TransferOpcode.Write = TransferOpcode(1)
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` (str), sent after a transfer
    with transfer_sync(..., notify=...) or batch_transfer_sync(..., notify=...)
    and received whole by the peer's get_notifies()."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __eq__(self, other):
        return (isinstance(other, TransferNotify) and self.name == other.name
                and self.msg == other.msg)

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def _as_bytes(s):
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    return str(s).encode("utf-8", "surrogateescape")


def _as_str(b):
    return b.decode("utf-8", "surrogateescape")


def _encode_notify(notify):
    name = _as_bytes(notify.name)
    msg = _as_bytes(notify.msg)
    if len(name) > 0xFFFF:
        raise ValueError("notification name longer than 65535 bytes")
    frame = _NOTIFY_HEAD.pack(_NOTIFY_MAGIC, len(name)) + name + msg
    if len(frame) > _NOTIFY_MAX:
        raise ValueError(f"notification of {len(frame)} bytes framed; at most {_NOTIFY_MAX}")
    return frame


def _decode_notify(n):
    data = n.data
    if len(data) >= _NOTIFY_HEAD.size and data[:4] == _NOTIFY_MAGIC:
        _, nlen = _NOTIFY_HEAD.unpack_from(data)
        if _NOTIFY_HEAD.size + nlen <= len(data):
            start = _NOTIFY_HEAD.size
            return TransferNotify(_as_str(data[start:start + nlen]),
                                  _as_str(data[start + nlen:]))
    # a plain OrbitTE notification: the sender's segment name and the bytes
    return TransferNotify(n.sender, _as_str(data))


def _split_host_port(hostport):
    """("host", port or None) of "host", "host:port", "[v6]" or "[v6]:port"."""
    s = hostport.strip()
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", s)
    if m:
        return m.group(1), int(m.group(2)) if m.group(2) else None
    if s.count(":") == 1:
        host, port = s.split(":")
        return host, int(port) if port.isdigit() else None
    return s, None  # a bare name, IPv4 or unbracketed IPv6 address


def _join_host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _resolve(host):
    """An IP address literal for host (itself when it is one)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
            return host
        except OSError:
            pass
    return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]


def _bind_error(ip, port):
    """Why binding ip:port fails now ("the port is in use", ...), for a
    message that names the port."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            return f"port {port} is in use (another process listens on it)"
        return f"{e.strerror or e}"
    return "it could not be bound when the engine tried"


def _net_interfaces():
    try:
        return set(os.listdir("/sys/class/net"))
    except OSError:
        return set()


class _AsyncBatch:
    __slots__ = ("batch", "tasks", "start", "deadline")

    def __init__(self, batch, tasks, start, deadline):
        self.batch = batch
        self.tasks = tasks
        self.start = start
        self.deadline = deadline


class TransferEngine:
    """Mooncake's ``mooncake.engine.TransferEngine`` over an orbitte.Engine.

    Call initialize() (or initialize_ext()) first. Every call may be made
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
        """initialize() with the metadata type apart ("etcd", "redis", "http"
        and metadata_server its address, or metadata_server "P2PHANDSHAKE")."""
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
        initialize()."""
        if self._engine is None:
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

    # ---- memory ---------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Register [buffer_addr, buffer_addr + capacity) for remote READ and
        WRITE. location "cpu:N", "cuda:N" or "*" (detect). 0 or -1."""
        if not self._ready("register_memory"):
            return -1
        try:
            mem = self._engine.register((int(buffer_addr), int(capacity)),
                                        location=None if location in ("*", "", None)
                                        else location)
        except (Error, ValueError, TypeError, OverflowError) as e:
            log.error("register_memory(0x%x, %d): %s", int(buffer_addr), int(capacity), e)
            return -1
        with self._lock:
            self._regions.setdefault(int(buffer_addr), []).append(mem)
        return 0

    def unregister_memory(self, buffer_addr):
        """Drop the registration that starts at buffer_addr. 0 or -1."""
        with self._lock:
            mems = self._regions.get(int(buffer_addr))
            mem = mems.pop() if mems else None
            if mems == []:
                del self._regions[int(buffer_addr)]
        if mem is None:
            log.error("unregister_memory(0x%x): no registration starts there", int(buffer_addr))
            return -1
        try:
            mem.deregister()
        except Error as e:
            log.error("unregister_memory(0x%x): %s", int(buffer_addr), e)
            return -1
        return 0

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """register_memory() for each pair; all or nothing. 0 or -1."""
        addrs = [int(a) for a in buffer_addresses]
        caps = [int(c) for c in capacities]
        if len(addrs) != len(caps):
            log.error("batch_register_memory: %d addresses and %d capacities",
                      len(addrs), len(caps))
            return -1
        for i, (a, c) in enumerate(zip(addrs, caps)):
            if self.register_memory(a, c, location) != 0:
                for b in reversed(addrs[:i]):
                    self.unregister_memory(b)
                return -1
        return 0

    def batch_unregister_memory(self, buffer_addresses):
        """unregister_memory() for each address. 0, or -1 if any failed."""
        ret = 0
        for a in buffer_addresses:
            if self.unregister_memory(a) != 0:
                ret = -1
        return ret

    def allocate_managed_buffer(self, length):
        """Page-aligned host memory of length bytes, registered for remote
        READ and WRITE: its address, or 0 on failure."""
        if not self._ready("allocate_managed_buffer"):
            return 0
        try:
            mem = self._engine.alloc(int(length))
        except (Error, ValueError, OverflowError) as e:
            log.error("allocate_managed_buffer(%d): %s", int(length), e)
            return 0
        with self._lock:
            self._managed[mem.addr] = mem
            self._regions.setdefault(mem.addr, []).append(mem)
        return mem.addr

    def free_managed_buffer(self, buffer_addr, length):
        """Free what allocate_managed_buffer() returned. 0 or -1."""
        with self._lock:
            mem = self._managed.pop(int(buffer_addr), None)
            if mem is not None:
                mems = self._regions.get(mem.addr, [])
                if mem in mems:
                    mems.remove(mem)
                if not mems:
                    self._regions.pop(mem.addr, None)
        if mem is None:
            log.error("free_managed_buffer(0x%x): not a managed buffer", int(buffer_addr))
            return -1
        if int(length) != mem.length:
            log.warning("free_managed_buffer(0x%x, %d): the buffer has %d bytes",
                        mem.addr, int(length), mem.length)
        try:
            mem.deregister()
        except Error as e:
            log.error("free_managed_buffer(0x%x): %s", mem.addr, e)
            return -1
        return 0

    @staticmethod
    def write_bytes_to_buffer(dest_address, src, length):
        """Copy length bytes of src (bytes, or str as UTF-8) to
        dest_address. 0, or -1 when src is shorter than length."""
        data = _as_bytes(src) if not isinstance(src, bytes) else src
        length = int(length)
        if length < 0 or length > len(data):
            log.error("write_bytes_to_buffer: %d bytes asked, %d given", length, len(data))
            return -1
        ctypes.memmove(int(dest_address), data, length)
        return 0

    @staticmethod
    def read_bytes_from_buffer(source_address, length):
        """The length bytes at source_address, as bytes."""
        return ctypes.string_at(int(source_address), int(length))

    def get_first_buffer_address(self, segment_name):
        """The start of the buffer the segment's engine registered first
        and still has (Mooncake's registration order, not the lowest
        address; this engine's own when segment_name is its own name), or 0
        when there is none or the segment cannot be opened."""
        if not self._ready("get_first_buffer_address"):
            return 0
        if self._is_self(segment_name):
            with self._lock:
                for addr, mems in self._regions.items():
                    if any(m.registered for m in mems):
                        return addr
            return 0
        seg = self._segment(segment_name, "get_first_buffer_address")
        if seg is None:
            return 0
        try:
            seg.refresh()
            regions = seg.regions()
        except Error as e:
            log.error("get_first_buffer_address(%s): %s", segment_name, e)
            self._drop_segment(segment_name, seg)
            return 0
        return regions[0].addr if regions else 0

    def _is_self(self, name):
        own = self._engine.name
        if name == own:
            return True
        try:
            host, port = _split_host_port(name)
        except ValueError:
            return False
        return port == self.get_rpc_port() and host in (self._host, _split_host_port(own)[0])

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

    # ---- transfers --------------------------------------------------------

    def _deadline(self, total):
        return time.monotonic() + self.transfer_timeout + total / float(1 << 30)

    def _submit(self, what, target, op, buffers, peers, lengths, notify=None):
        """(segment, batch, tasks, total bytes) or None (logged)."""
        if not self._ready(what):
            return None
        try:
            bufs = [int(b) for b in buffers]
            peer_addrs = [int(p) for p in peers]
            lens = [int(n) for n in lengths]
        except (TypeError, ValueError) as e:
            log.error("%s: %s", what, e)
            return None
        n = len(bufs)
        if len(peer_addrs) != n or len(lens) != n:
            log.error("%s: buffers, peer_buffer_addresses and lengths have different sizes "
                      "(%d, %d, %d)", what, n, len(peer_addrs), len(lens))
            return None
        frame = None
        if notify is not None:
            try:
                frame = _encode_notify(notify)
            except ValueError as e:
                log.error("%s: %s", what, e)
                return None
        seg = self._segment(target, what)
        if seg is None:
            return None
        if n == 0:
            return seg, None, 0, 0
        batch = self._engine.batch(capacity=n)
        try:
            batch.submit_arrays(seg, op, bufs, peer_addrs, lens, notify=frame)
        except (Error, ValueError, OverflowError) as e:
            batch.release()
            log.error("%s to %s: %s", what, target, e)
            if isinstance(e, ConnectionError):
                self._drop_segment(target, seg)
            return None
        return seg, batch, n, sum(lens)

    def _finish(self, what, target, seg, batch, tasks, deadline, notify):
        """Wait for the batch until deadline; 0 when every task completed (and
        the notification was delivered), else -1. Never returns while a task
        of the batch can still move bytes."""
        try:
            left = deadline - time.monotonic()
            try:
                batch.wait(timeout=max(0.0, left))
            except Error as e:
                if not isinstance(e, TimeoutError):
                    log.error("%s to %s: %s", what, target, e)
                    self._cancel_and_drain(batch, tasks)
                    return -1
                log.error("%s to %s: not done by its deadline (%.1f s): canceling its "
                          "tasks and waiting until none can still land", what, target,
                          self.transfer_timeout)
                self._cancel_and_drain(batch, tasks)
                return -1
            return self._outcome(what, target, seg, batch, tasks, notify)
        finally:
            batch.release()

    @staticmethod
    def _cancel_and_drain(batch, tasks):
        for t in range(tasks):
            try:
                if batch.status(t).state == PENDING:
                    batch.cancel(t)
            except Error:
                pass
        # ends once every posted slice landed, failed or timed out
        # (OTE_XFER_TIMEOUT_MS bounds that)
        batch.wait()

    def _outcome(self, what, target, seg, batch, tasks, notify):
        if batch.status() == COMPLETED:
            if notify:
                st = batch.notify_status(0)
                if st != 0:
                    log.error("%s to %s: the notification was not delivered (status %d)",
                              what, target, st)
                    return -1
            return 0
        for t in range(tasks):
            ts = batch.status(t)
            if ts.state != COMPLETED:
                log.error("%s to %s: task %d of %d ended in state %d: %s", what, target, t,
                          tasks, ts.state, Error(ts.error))
                if ts.error in (-10, -17):  # REMOTE_DISCONNECT, PEER_RESTARTED
                    self._drop_segment(target, seg)
                break
        return -1

    def _sync(self, what, target, op, buffers, peers, lengths, notify=None):
        sub = self._submit(what, target, op, buffers, peers, lengths, notify)
        if sub is None:
            return -1
        seg, batch, tasks, total = sub
        if batch is None:
            if notify is not None:
                return self._send(what, target, seg, notify)
            return 0
        return self._finish(what, target, seg, batch, tasks, self._deadline(total),
                            notify is not None)

    def _send(self, what, target, seg, notify):
        try:
            self._engine.send(seg, _encode_notify(notify))
        except (Error, ValueError) as e:
            log.error("%s to %s: notification: %s", what, target, e)
            return -1
        return 0

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Write length bytes at buffer to peer_buffer_address of the segment
        target_hostname, and wait. 0 or -1."""
        return self._sync("transfer_sync_write", target_hostname, WRITE, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Read length bytes from peer_buffer_address of the segment into
        buffer, and wait. 0 or -1."""
        return self._sync("transfer_sync_read", target_hostname, READ, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One READ or WRITE (opcode), then notify (a TransferNotify, or None)
        to the peer once it completed. 0 when it completed and the
        notification was delivered, else -1."""
        return self._sync("transfer_sync", target_hostname, self._op(opcode), [buffer],
                          [peer_buffer_address], [length], notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Write every (buffer, peer address, length) and wait. 0 or -1.

        Unlike Mooncake, a call that reaches its deadline cancels its tasks
        and returns -1 only once none of them can still move bytes, so the
        buffers are free to reuse when it returns.
        """
        return self._sync("batch_transfer_sync_write", target_hostname, WRITE, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses,
                                 lengths, transport_hint=""):
        """Read every (buffer, peer address, length) and wait. 0 or -1; at
        the deadline as batch_transfer_sync_write()."""
        return self._sync("batch_transfer_sync_read", target_hostname, READ, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """batch_transfer_sync_read/_write by opcode, then notify (a
        TransferNotify, or None) once every transfer completed. 0 or -1; at
        the deadline as batch_transfer_sync_write()."""
        return self._sync("batch_transfer_sync", target_hostname, self._op(opcode), buffers,
                          peer_buffer_addresses, lengths, notify)

    @staticmethod
    def _op(opcode):
        return WRITE if int(opcode) == int(TransferOpcode.Write) else READ

    # ---- async ----------------------------------------------------------

    def _async(self, what, target, op, buffers, peers, lengths):
        sub = self._submit(what, target, op, buffers, peers, lengths)
        if sub is None:
            return 0
        _, batch, tasks, total = sub
        now = time.monotonic()
        rec = _AsyncBatch(batch, tasks, now, self._deadline(total))
        with self._lock:
            bid = next(self._batch_ids)
            self._batches[bid] = rec
        return bid

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, transport_hint=""):
        """Submit the writes; a batch id (> 0) for get_batch_transfer_status()
        or transfer_check_status(), or 0 when nothing was submitted."""
        return self._async("batch_transfer_async_write", target_hostname, WRITE, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Submit the reads; a batch id, or 0 (see batch_transfer_async_write)."""
        return self._async("batch_transfer_async_read", target_hostname, READ, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        """batch_transfer_async_read/_write by opcode."""
        return self._async("batch_transfer_async", target_hostname, self._op(opcode),
                           buffers, peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """Submit one write; a batch id for transfer_check_status(), or 0."""
        return self._async("transfer_submit_write", target_hostname, WRITE, [buffer],
                           [peer_buffer_address], [length])

    def _take(self, batch_id):
        with self._lock:
            return self._batches.pop(int(batch_id), None)

    def transfer_check_status(self, batch_id):
        """Poll a batch id without waiting: 0 still in progress, 1 completed,
        -1 failed (or an unknown id), -2 timed out. The id is released once
        it returns anything but 0."""
        with self._lock:
            rec = self._batches.get(int(batch_id))
        if rec is None:
            log.error("transfer_check_status: no batch %d", int(batch_id))
            return -1
        if rec.batch is None:
            self._take(batch_id)
            return 1
        state = rec.batch.status()
        if state == PENDING:
            return 0
        self._take(batch_id)
        timed_out = any(rec.batch.status(t).state == TIMEOUT for t in range(rec.tasks))
        rec.batch.release()
        if state == COMPLETED:
            return 1
        return -2 if timed_out else -1

    def get_batch_transfer_status(self, batch_ids):
        """Wait for every batch id: 0 when all completed, -1 when one failed
        or passed its deadline (MC_TRANSFER_TIMEOUT plus 1 s per GiB after its
        submission). Every id is released. On -1 the tasks still pending are
        canceled and the call returns once none of them can still move
        bytes."""
        recs = []
        ret = 0
        for bid in batch_ids:
            rec = self._take(bid)
            if rec is None:
                log.error("get_batch_transfer_status: no batch %d", int(bid))
                ret = -1
            else:
                recs.append(rec)
        failed = False
        for rec in recs:
            if rec.batch is None or failed:
                continue
            try:
                rec.batch.wait(timeout=max(0.0, rec.deadline - time.monotonic()))
            except Error:
                log.error("get_batch_transfer_status: a batch of %d tasks passed its deadline",
                          rec.tasks)
                failed = True
                continue
            if rec.batch.status() != COMPLETED:
                log.error("get_batch_transfer_status: a batch of %d tasks failed", rec.tasks)
                failed = True
        for rec in recs:
            if rec.batch is None:
                continue
            if failed:
                self._cancel_and_drain(rec.batch, rec.tasks)
            rec.batch.release()
        return -1 if failed or ret else 0

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


def install():
    """Make ``import mooncake.engine`` (and ``from mooncake.engine import
    TransferEngine``) resolve to this module, for code written for
    Mooncake's wheel. Returns the module. Leaves a real ``mooncake`` package
    that is already imported alone, apart from its ``engine``."""
    import sys
    import types

    me = sys.modules[__name__]
    pkg = sys.modules.get("mooncake")
    if pkg is None:
        pkg = types.ModuleType("mooncake")
        pkg.__path__ = []
        pkg.__doc__ = "Mooncake's module names, served by orbitte.mooncake."
        sys.modules["mooncake"] = pkg
    pkg.engine = me
    sys.modules["mooncake.engine"] = me
    return me


_SHIM_MARK = "written by: python -m orbitte.mooncake shim"
_SHIM_INIT = f'''"""Mooncake's package name, served by OrbitTE ({_SHIM_MARK}).

Only mooncake.engine is here: it is orbitte.mooncake.
"""
'''
_SHIM_ENGINE = f'''"""mooncake.engine: orbitte.mooncake under Mooncake's module name
({_SHIM_MARK})."""
import sys

import orbitte.mooncake

sys.modules[__name__] = orbitte.mooncake
'''


def write_shim(folder):
    """Write a two-file package ``mooncake`` (``__init__.py`` and
    ``engine.py``) into folder, so that programs started unchanged with
    folder first on PYTHONPATH import ``mooncake.engine`` as this module.
    Rewrites a shim written before; refuses a folder whose ``mooncake``
    holds anything else. Returns the package's path."""
    pkg = os.path.join(os.path.abspath(folder), "mooncake")
    files = {"__init__.py": _SHIM_INIT, "engine.py": _SHIM_ENGINE}
    if os.path.isdir(pkg):
        for entry in sorted(os.listdir(pkg)):
            path = os.path.join(pkg, entry)
            if entry == "__pycache__":
                continue
            ours = False
            if entry in files and os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    ours = _SHIM_MARK in f.read()
            if not ours:
                raise FileExistsError(f"{path} was not written by this command: "
                                      "name another folder")
    os.makedirs(pkg, exist_ok=True)
    for entry, text in files.items():
        with open(os.path.join(pkg, entry), "w", encoding="utf-8") as f:
            f.write(text)
    return pkg


def _main(argv):
    import sys

    if len(argv) != 2 or argv[0] != "shim":
        sys.stderr.write("usage: python -m orbitte.mooncake shim FOLDER\n"
                         "  writes FOLDER/mooncake/{__init__,engine}.py: with FOLDER first on\n"
                         "  PYTHONPATH, 'from mooncake.engine import TransferEngine' gets\n"
                         "  orbitte.mooncake's\n")
        return 2
    try:
        pkg = write_shim(argv[1])
    except OSError as e:
        sys.stderr.write(f"orbitte.mooncake shim: {e}\n")
        return 1
    print(f"wrote {pkg}: put {os.path.dirname(pkg)} first on PYTHONPATH")
    return 0


__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode", "Read", "Write",
           "P2PHANDSHAKE", "install", "write_shim"]

if __name__ == "__main__":
    import sys as _sys

    _sys.exit(_main(_sys.argv[1:]))
