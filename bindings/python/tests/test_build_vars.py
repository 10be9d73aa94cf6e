"""setup.py's build variables: ORBITTE_* (not the engine's OTE_* run-time
names), and a clear message, not a traceback, for a folder that is no built
tree or installation."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)


def setup_py(tmp_path, **env):
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("ORBITTE_", "OTE_")) or k == "ORBITTE_TEST_BUILDDIR"}
    clean.update(env)
    out = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib",
                          str(tmp_path / "lib"), "--build-temp", str(tmp_path / "tmp")],
                         cwd=PKG, env=clean, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr
    return out.stderr


def test_build_dir_without_makefile(tmp_path):
    (tmp_path / "build").mkdir()
    err = setup_py(tmp_path, ORBITTE_BUILD_DIR=str(tmp_path / "build"))
    assert f"ORBITTE_BUILD_DIR={tmp_path / 'build'}: no Makefile there" in err
    assert "build-release" in err


def test_build_dir_not_built(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    (build / "Makefile").write_text(f"abs_top_srcdir = {os.path.dirname(os.path.dirname(PKG))}\n")
    err = setup_py(tmp_path, ORBITTE_BUILD_DIR=str(build))
    assert "libote is not built there yet" in err


def test_prefix_without_installation(tmp_path):
    err = setup_py(tmp_path, ORBITTE_PREFIX=str(tmp_path))
    assert f"ORBITTE_PREFIX={tmp_path}: no include/ote/ote.h" in err


def test_old_names_are_refused_with_the_new_ones(tmp_path):
    for old, new in (("OTE_BUILD_DIR", "ORBITTE_BUILD_DIR"), ("OTE_PREFIX", "ORBITTE_PREFIX"),
                     ("OTE_SOURCE_DIR", "ORBITTE_SOURCE_DIR")):
        err = setup_py(tmp_path, **{old: str(tmp_path)})
        assert f"{old} is no longer read: set {new} instead" in err


def test_no_source_tree_to_build_from(tmp_path):
    err = setup_py(tmp_path, ORBITTE_BUNDLE="1", ORBITTE_SOURCE_DIR=str(tmp_path))
    assert f"no OrbitTE source tree at {tmp_path}" in err
