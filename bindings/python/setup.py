"""Builds the orbitte extension against libote.

libote is found, in this order:
  - OTE_BUILD_DIR: a configured and built OrbitTE tree (headers from its source
    tree, the library from <build>/src/.libs, which is also the run-time path);
  - OTE_PREFIX: an installation prefix (<prefix>/include, <prefix>/lib);
  - pkg-config's "ote" package.
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup


def _libote():
    build = os.environ.get("OTE_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
        top = os.environ.get("OTE_SOURCE_DIR")
        if not top:
            # the build tree's Makefile names its source tree
            with open(os.path.join(build, "Makefile"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("abs_top_srcdir ="):
                        top = line.split("=", 1)[1].strip()
                        break
        libdir = os.path.join(build, "src", ".libs")
        return [os.path.join(top, "include")], [libdir], [libdir], []
    prefix = os.environ.get("OTE_PREFIX")
    if prefix:
        libdir = os.path.join(prefix, "lib")
        return [os.path.join(prefix, "include")], [libdir], [libdir], []
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "ote"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs-only-L", "ote"], text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(
            "orbitte: libote not found: set OTE_BUILD_DIR to a built OrbitTE tree, "
            "OTE_PREFIX to its installation prefix, or install it where pkg-config "
            f"finds 'ote' ({e})") from None
    incs = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    libdirs = [f[2:] for f in shlex.split(libs) if f.startswith("-L")]
    return incs, libdirs, libdirs, []


incs, libdirs, rpath, extra = _libote()

setup(
    ext_modules=[
        Extension(
            "orbitte._ote",
            sources=["orbitte/_ote.c"],
            include_dirs=incs,
            library_dirs=libdirs,
            runtime_library_dirs=rpath,
            libraries=["ote"],
            extra_compile_args=["-std=gnu11", "-Wall", "-Wextra", "-Werror",
                                "-Wno-missing-field-initializers",
                                "-Wno-cast-function-type"] + extra,
        )
    ],
)
