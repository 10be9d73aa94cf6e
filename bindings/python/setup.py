"""Builds the orbitte extension against libote, or libote with it.

libote is found, in this order (docs/python.md, "Installing"):
  - ORBITTE_BUILD_DIR: a configured and built OrbitTE tree (headers from its
    source tree, the library from <build>/src/.libs, which is also the
    run-time path);
  - ORBITTE_PREFIX: an installation prefix (<prefix>/include, <prefix>/lib);
  - pkg-config's "ote" package (an installation; PKG_CONFIG_PATH names a
    prefix that pkg-config does not search by itself);
  - none of these, or ORBITTE_BUNDLE=1: libote is built here from the OrbitTE
    source tree this folder belongs to (ORBITTE_SOURCE_DIR names another),
    with configure and make in a temporary folder, and the package carries
    it (orbitte/libote.so.N, found through the extension's run-time path
    $ORIGIN): a wheel that needs nothing else of OrbitTE.

The build variables start with ORBITTE_, not OTE_: OTE_* is the engine's
run-time configuration, and every engine warns about OTE_ names it does not
know.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

# Build variables of earlier versions, with their names now.
_RENAMED = {"OTE_BUILD_DIR": "ORBITTE_BUILD_DIR", "OTE_PREFIX": "ORBITTE_PREFIX",
            "OTE_SOURCE_DIR": "ORBITTE_SOURCE_DIR"}


def _fail(msg):
    raise SystemExit(f"orbitte: {msg}")


def _from_build_dir(build):
    build = os.path.abspath(build)
    makefile = os.path.join(build, "Makefile")
    if not os.path.isfile(makefile):
        _fail(f"ORBITTE_BUILD_DIR={build}: no Makefile there, so it is no configured "
              "OrbitTE build folder (the README's quick start builds in build-release, "
              "its 'Building by hand' in build)")
    top = os.environ.get("ORBITTE_SOURCE_DIR")
    if not top:
        # the build tree's Makefile names its source tree
        with open(makefile, encoding="utf-8") as f:
            for line in f:
                if line.startswith("abs_top_srcdir ="):
                    top = line.split("=", 1)[1].strip()
                    break
    if not top or not os.path.isfile(os.path.join(top, "include", "ote", "ote.h")):
        _fail(f"ORBITTE_BUILD_DIR={build}: its Makefile names no OrbitTE source tree "
              "(set ORBITTE_SOURCE_DIR)")
    libdir = os.path.join(build, "src", ".libs")
    if not glob.glob(os.path.join(libdir, "libote.so*")):
        _fail(f"ORBITTE_BUILD_DIR={build}: libote is not built there yet (run make in it)")
    return [os.path.join(top, "include")], [libdir], [libdir]


def _from_prefix(prefix):
    prefix = os.path.abspath(prefix)
    inc = os.path.join(prefix, "include")
    libdirs = [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64"))
               if glob.glob(os.path.join(d, "libote.so*"))]
    if not os.path.isfile(os.path.join(inc, "ote", "ote.h")) or not libdirs:
        _fail(f"ORBITTE_PREFIX={prefix}: no include/ote/ote.h and lib/libote.so there "
              "(run make install with --prefix set to it)")
    return [inc], libdirs[:1], libdirs[:1]


def _from_pkg_config():
    """(includes, libdirs, rpath) of pkg-config's "ote", or None."""
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "ote"], text=True,
                                         stderr=subprocess.DEVNULL)
        libs = subprocess.check_output(["pkg-config", "--libs-only-L", "ote"], text=True,
                                       stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        return None
    incs = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    libdirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
    return incs, libdirs, libdirs


def _libote():
    """("bundle", None) or ("link", (includes, libdirs, rpath))."""
    for old, new in _RENAMED.items():
        if old in os.environ and new not in os.environ:
            _fail(f"{old} is no longer read: set {new} instead (OTE_* variables are the "
                  "engine's run-time configuration)")
    if os.environ.get("ORBITTE_BUILD_DIR"):
        return "link", _from_build_dir(os.environ["ORBITTE_BUILD_DIR"])
    if os.environ.get("ORBITTE_PREFIX"):
        return "link", _from_prefix(os.environ["ORBITTE_PREFIX"])
    if os.environ.get("ORBITTE_BUNDLE", "") not in ("", "0"):
        return "bundle", None
    found = _from_pkg_config()
    if found is not None:
        return "link", found
    return "bundle", None


def _source_tree():
    top = os.path.abspath(os.environ.get("ORBITTE_SOURCE_DIR") or
                          os.path.join(HERE, "..", ".."))
    if not (os.path.isfile(os.path.join(top, "configure.ac")) and
            os.path.isfile(os.path.join(top, "include", "ote", "ote.h"))):
        _fail(f"libote not found and no OrbitTE source tree at {top} to build it from: "
              "build from a checkout (pip wheel bindings/python, python -m build --wheel), "
              "or set ORBITTE_BUILD_DIR to a built tree, ORBITTE_PREFIX to an installation, "
              "or PKG_CONFIG_PATH to where its ote.pc is")
    return top


def _run(cmd, cwd, log):
    """Run cmd with its output into log; on failure, the log's end and exit."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}  (in {cwd})\n".encode())
        out.flush()
        rc = subprocess.call(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        with open(log, "rb") as f:
            tail = f.read()[-6000:].decode("utf-8", "replace")
        sys.stderr.write(tail)
        _fail(f"building libote failed: {' '.join(cmd)} (exit {rc}; the log above, in full "
              f"in {log})")


class BuildExt(build_ext):
    """build_ext that first builds libote from the source tree when the
    package is to carry it, and puts the library beside the extension."""

    def run(self):
        mode, found = _libote()
        if mode == "link":
            incs, libdirs, rpath = found
            for ext in self.extensions:
                ext.include_dirs += incs
                ext.library_dirs += libdirs
                ext.runtime_library_dirs += rpath
            # a libote carried by an earlier build of this folder is not this one's
            for d in {os.path.join(self.build_lib, "orbitte"), os.path.join(HERE, "orbitte")}:
                for old in glob.glob(os.path.join(d, "libote.so*")):
                    os.remove(old)
            return super().run()
        top = _source_tree()
        work = tempfile.mkdtemp(prefix="orbitte-libote-")
        try:
            lib = self._build_libote(top, work)
            for ext in self.extensions:
                ext.include_dirs.append(os.path.join(top, "include"))
                ext.library_dirs.append(os.path.dirname(lib))
                ext.runtime_library_dirs.append("$ORIGIN")
            super().run()
            # beside the extension, under the name it is linked by (its soname)
            dests = [os.path.join(self.build_lib, "orbitte")]
            if self.inplace:
                dests = [os.path.join(HERE, "orbitte")]
            for d in dests:
                os.makedirs(d, exist_ok=True)
                shutil.copyfile(lib, os.path.join(d, os.path.basename(lib)))
        finally:
            if not os.environ.get("ORBITTE_KEEP_BUILD"):
                shutil.rmtree(work, ignore_errors=True)

    def _build_libote(self, top, work):
        """Configure and make libote of top in work; the path of libote.so.N."""
        log = os.path.join(work, "build.log")
        print(f"orbitte: building libote from {top} in {work}", flush=True)
        if not os.path.isfile(os.path.join(top, "configure")):
            _run(["sh", "./autogen.sh"], top, log)
        if os.path.isfile(os.path.join(top, "config.status")):
            _fail(f"{top} is configured in place (config.status there): libote is built in "
                  "a folder of its own; run make distclean in it first")
        jobs = os.environ.get("ORBITTE_BUILD_JOBS") or str(os.cpu_count() or 1)
        configure = [os.path.join(top, "configure"), "CFLAGS=" +
                     os.environ.get("ORBITTE_CFLAGS", "-O2")]
        configure += shlex.split(os.environ.get("ORBITTE_CONFIGURE_ARGS", ""))
        _run(configure, work, log)
        _run(["make", f"-j{jobs}", "-C", "src"], work, log)
        dlname = None
        with open(os.path.join(work, "src", "libote.la"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("dlname="):
                    dlname = line.split("=", 1)[1].strip().strip("'")
        if not dlname:
            _fail(f"building libote: {work}/src/libote.la names no shared library")
        return os.path.join(work, "src", ".libs", dlname)


setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "orbitte._ote",
            # one C file per type, as CPython's own modules (_ote/module.h)
            sources=["_ote/module.c", "_ote/engine.c", "_ote/memory.c", "_ote/segment.c",
                     "_ote/batch.c", "_ote/batch_submit.c", "_ote/notify.c",
                     "_ote/stats.c", "_ote/transfer.c", "_ote/transfer_build.c"],
            depends=["_ote/module.h", "_ote/transfer.h"],
            include_dirs=[],
            library_dirs=[],
            runtime_library_dirs=[],
            libraries=["ote"],
            extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Werror",
                                "-Wno-missing-field-initializers",
                                "-Wno-cast-function-type"],
        )
    ],
)
