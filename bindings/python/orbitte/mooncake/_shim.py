"""Mooncake's module name "mooncake.engine" served by orbitte.mooncake: at
run time (install()) or by a package written to a folder (write_shim(),
"python -m orbitte.mooncake shim DIR")."""

import os


def install():
    """Make ``import mooncake.engine`` (and ``from mooncake.engine import
    TransferEngine``) resolve to orbitte.mooncake, for code written for
    Mooncake's wheel. Returns the module. Leaves a real ``mooncake`` package
    that is already imported alone, apart from its ``engine``."""
    import sys
    import types

    me = sys.modules["orbitte.mooncake"]
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
    folder first on PYTHONPATH import ``mooncake.engine`` as orbitte.mooncake.
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
