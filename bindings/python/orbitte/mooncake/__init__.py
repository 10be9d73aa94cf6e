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

# The package is laid out by idea: _types.py (opcodes, notifications and
# their frame), _net.py (host names, ports, interfaces), _engine.py (the
# TransferEngine: setup, segments, notifications), _memory.py (registration
# and buffers), _transfer.py (sync and async transfers), _shim.py (the
# "mooncake.engine" module name: install() and "python -m orbitte.mooncake
# shim DIR", whose entry point is __main__.py).

from ._engine import P2PHANDSHAKE, TransferEngine
from ._shim import install, write_shim
from ._types import Read, TransferNotify, TransferOpcode, Write

__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode", "Read", "Write",
           "P2PHANDSHAKE", "install", "write_shim"]
