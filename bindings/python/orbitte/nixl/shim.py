"""Write an import shim so that ``import nixl`` resolves to orbitte.nixl.

    python -m orbitte.nixl.shim DIR

writes DIR/nixl/ (__init__.py, _api.py, _bindings.py, _utils.py,
logging.py). With DIR first on PYTHONPATH, unchanged programs written for
NIXL (vLLM's NixlConnector, SGLang, Dynamo, NIXL's own tests) import
OrbitTE's implementation: ``nixl._api`` *is* ``orbitte.nixl._api`` and so
on. The shim says what it is: ``nixl.__orbitte__`` is True and importing it
logs one line at INFO on the "nixl" logger.
"""

import argparse
import os
import sys

_SUBMODULES = ("_api", "_bindings", "_utils", "logging")

_INIT = '''"""Import shim written by `python -m orbitte.nixl.shim`: this `nixl` is
OrbitTE's implementation of NIXL's Python API (orbitte.nixl), not NIXL."""
import orbitte.nixl as _impl
from orbitte.nixl import *  # noqa: F401,F403
from orbitte.nixl import __all__  # noqa: F401
from orbitte.nixl.logging import get_logger as _get_logger

__orbitte__ = True

_get_logger("shim").info(
    "nixl is OrbitTE's NIXL API (orbitte.nixl from %s, shim %s), not the NIXL library",
    _impl.__path__[0], __file__)
'''

_SUB = '''"""Import shim: nixl.{name} is orbitte.nixl.{name}."""
import sys

import orbitte.nixl.{name} as _m

sys.modules[__name__] = _m
'''


def write(directory):
    """Write DIR/nixl/; returns the package directory."""
    pkg = os.path.join(os.path.abspath(directory), "nixl")
    os.makedirs(pkg, exist_ok=True)
    files = {"__init__.py": _INIT}
    for name in _SUBMODULES:
        files[f"{name}.py"] = _SUB.format(name=name)
    for fname, text in files.items():
        tmp = os.path.join(pkg, fname + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(pkg, fname))
    return pkg


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m orbitte.nixl.shim",
        description="Write DIR/nixl/, an import shim making `import nixl` resolve to "
                    "orbitte.nixl for programs run with DIR first on PYTHONPATH.")
    p.add_argument("dir", help="directory to put first on PYTHONPATH")
    args = p.parse_args(argv)
    pkg = write(args.dir)
    print(f"wrote {pkg}: run with PYTHONPATH={os.path.abspath(args.dir)}"
          f"{os.pathsep}$PYTHONPATH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
