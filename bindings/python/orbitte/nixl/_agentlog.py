"""The agent's own log: stderr, as NIXL's native log (its CI reads "MD
listener is listening on port N" there), its level from NIXL_LOG_LEVEL."""

import logging
import os
import sys

# The log of the agent itself goes to stderr, as NIXL's native log does
# (its CI reads "MD listener is listening on port N" there); NIXL_LOG_LEVEL
# sets its level (default WARN).
log = logging.getLogger("orbitte.nixl.agent")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of the record."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


if not log.handlers:
    _h = _StderrHandler()
    _h.setFormatter(logging.Formatter("%(asctime)s NIXL %(levelname)-7s orbitte.nixl %(message)s",
                                      "%Y-%m-%d %H:%M:%S"))
    log.addHandler(_h)
    log.propagate = False


def set_log_level():
    """The agent log's level from NIXL_LOG_LEVEL (read at each agent's creation)."""
    lvl = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL}.get(os.environ.get("NIXL_LOG_LEVEL", "").upper())
    log.setLevel(lvl if lvl is not None else logging.WARNING)
