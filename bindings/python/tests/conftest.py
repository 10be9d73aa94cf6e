import json
import os
import signal
import subprocess
import sys

import pytest

import orbitte

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def engine():
    with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
        yield e


@pytest.fixture
def pair():
    with orbitte.Engine(listen_addr="127.0.0.1:0") as a, \
            orbitte.Engine(listen_addr="127.0.0.1:0") as b:
        yield a, b


@pytest.fixture
def peer():
    """A target process (tests/peer.py): yields (process, info dict)."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py")],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line, "the peer process did not start"
        yield p, json.loads(line)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(timeout=30)
