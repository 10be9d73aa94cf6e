"""The examples under examples/python run to their end and verify their data."""
import os
import subprocess
import sys

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
EXAMPLES = os.path.join(TOP, "examples", "python")


@pytest.mark.skipif(not os.path.isdir(EXAMPLES), reason="no examples/python in this tree")
def test_kv_handoff():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "kv_handoff.py"),
                          "--requests", "6", "--layers", "3", "--blocks", "40",
                          "--blocks-per-request", "5", "--block-bytes", "12288"],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"decode: verified 6 requests, {6 * 3 * 5 * 12288} bytes" in out.stdout
    assert "prefill: 6 requests" in out.stdout
