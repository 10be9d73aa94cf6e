"""NIXL's Python API over OrbitTE.

``orbitte.nixl`` mirrors the ``nixl`` package: ``orbitte.nixl._api``
(nixl_agent, nixl_agent_config, ...), ``orbitte.nixl._bindings`` (nixlAgent,
the descriptor lists, nixlXferTelemetry, NIXL's exception classes),
``orbitte.nixl._utils`` and ``orbitte.nixl.logging``. Programs written for
NIXL run on it unchanged once ``import nixl`` resolves here: run
``python -m orbitte.nixl.shim DIR`` and put DIR first on PYTHONPATH
(docs/nixl.md). Both peers must run OrbitTE.
"""

from ._api import (  # noqa: F401
    DEFAULT_COMM_PORT,
    nixl_agent,
    nixl_agent_config,
    nixl_backend_handle,
    nixl_prepped_dlist_handle,
    nixl_thread_sync_t,
    nixl_xfer_handle,
)

__orbitte__ = True

__all__ = [
    "DEFAULT_COMM_PORT",
    "nixl_agent",
    "nixl_agent_config",
    "nixl_backend_handle",
    "nixl_prepped_dlist_handle",
    "nixl_thread_sync_t",
    "nixl_xfer_handle",
]
