"""Arguments the extension converts: timeouts (NaN refused, long ones
bounded), integers out of range, task ids with __index__, and the memory
locations that export a buffer. A scenario that needs an environment of
its own runs in a process of its own (tests/ on its path), whose exit
status and output are checked here."""
import os
import subprocess
import sys
import textwrap

import pytest

import orbitte

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is installed by the test command
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
KIB = 1024


def run_script(code, *args, env=None, timeout=120):
    """code in a fresh interpreter; its CompletedProcess (a crash is its exit status)."""
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in sys.path if p])
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=e,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as x:
        raise AssertionError(f"the scenario did not end in {timeout} s:\n{x.stdout}\n{x.stderr}")


def assert_ok(r):
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK"), (
        f"exit status {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}")


# ---- timeouts ---------------------------------------------------------------------


def test_nan_timeouts_refused_and_long_ones_bounded(pair):
    """A NaN timeout is refused (its conversion to the library's int
    milliseconds is undefined); one beyond that int, infinity included, waits
    at most 2^31-1 ms; a negative one is refused."""
    a, b = pair
    dst, src = bytearray(4096), bytearray(b"t" * 4096)
    dmem, smem = b.register(dst), a.register(src, access=0)
    with a.open(b.name) as seg, a.batch() as bt:
        bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)])
        for bad in (float("nan"), -0.5):
            with pytest.raises(orbitte.InvalidParamError) as ei:
                bt.wait(bad)
            assert "Batch.wait()" in str(ei.value)
        assert "NaN" in str(pytest.raises(orbitte.InvalidParamError, bt.wait, float("nan")).value)
        for long in (float("inf"), 1e300, 2 ** 40):
            assert bt.wait(long) == orbitte.COMPLETED
        t = a.transfer(orbitte.WRITE, [smem.addr], [dmem.addr + 64], [64])
        t.post(seg)
        with pytest.raises(orbitte.InvalidParamError) as ei:
            t.wait(float("nan"))
        assert "Transfer.wait()" in str(ei.value) and "NaN" in str(ei.value)
        with pytest.raises(orbitte.InvalidParamError):
            t.poll(wait=float("nan"), repoll_us=100)
        assert t.wait(float("inf")) == orbitte.COMPLETED
        t.release()
    assert dst[:128] == src[:128]


# ---- integer arguments ------------------------------------------------------------


def test_register_and_alloc_arguments_out_of_range(engine):
    """Addresses, lengths and access flags out of range raise OverflowError
    instead of wrapping around (a negative address became one near 2^64,
    access=-1 every flag)."""
    buf = bytearray(4096)
    for bad in ((-4096, 4096), (4096, -1), (1 << 64, 4096), (4096, 1 << 64),
                (1 << 63, 1 << 63)):
        with pytest.raises(OverflowError):
            engine.register(bad)
    for access in (-1, 1 << 32, -(1 << 70)):
        with pytest.raises(OverflowError):
            engine.register(buf, access=access)
        with pytest.raises(OverflowError):
            engine.register((id(buf), 16), access=access)
        with pytest.raises(OverflowError):
            engine.alloc(4096, access=access)
    m = engine.register(buf, access=orbitte.REMOTE_READ)
    assert m.access == orbitte.REMOTE_READ
    if np is not None:  # any integer with __index__
        assert engine.alloc(4096, access=np.uint8(orbitte.REMOTE_WRITE)).access == \
            orbitte.REMOTE_WRITE


def test_task_ids_any_integer(pair):
    """status(task), cancel(task) and notify_status(task) take any integer
    with __index__ (numpy's)."""
    np_ = pytest.importorskip("numpy")
    a, b = pair
    dmem = b.register(bytearray(4096))
    smem = a.register(bytearray(4096), access=0)
    with a.open(b.name) as seg, a.batch() as bt:
        first = bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, 64)], notify=b"n")
        bt.wait(10)
        for task in (np_.int64(first), np_.uint32(first), first):
            assert bt.status(task).state == orbitte.COMPLETED
            assert bt.notify_status(task) == orbitte.Status.OK
            bt.cancel(task)
        with pytest.raises(TypeError):
            bt.status(1.0)
        with pytest.raises(orbitte.InvalidParamError):
            bt.status(np_.int64(-1))


# ---- pinned host memory -------------------------------------------------------------


def cuda_double():
    """The CUDA test double of the build tree whose libote this process loaded."""
    import orbitte._ote  # noqa: F401 - maps libote
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if "/libote.so" in line}
    for lib in libs:
        build = os.path.dirname(os.path.dirname(os.path.dirname(lib)))
        path = os.path.join(build, "test", "unit", "cuda", ".libs", "libote_cuda_double.so")
        if os.path.exists(path):
            return path
    return None


def test_cuda_host_memory_exports_a_buffer():
    """alloc(location="cuda_host:N") is pinned host memory (src/mem/alloc.c): it
    exports the buffer protocol; "cuda:N" memory does not (run on the CUDA
    test double, OTE_CUDA_LIB)."""
    double = cuda_double()
    if double is None:
        pytest.skip("no CUDA test double in the build tree of this libote")
    r = run_script("""
        import orbitte
        with orbitte.Engine(listen_addr="127.0.0.1:0") as e:
            m = e.alloc(8192, location="cuda_host:0")
            with memoryview(m) as v:
                v[:6] = b"pinned"
                assert bytes(v[:6]) == b"pinned" and len(v) == 8192
            d = e.alloc(8192, location="cuda:0")
            try:
                memoryview(d)
            except BufferError as x:
                print("device:", x)
            else:
                raise AssertionError("device memory exported a buffer")
            m.deregister()
            d.deregister()
        print("OK")
    """, env={"OTE_CUDA_LIB": double})
    assert_ok(r)
    assert "device: device memory has no host buffer" in r.stdout
