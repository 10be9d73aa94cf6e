"""python -m orbitte.mooncake shim DIR (see _shim.py)."""
import sys

from ._shim import _main

sys.exit(_main(sys.argv[1:]))
