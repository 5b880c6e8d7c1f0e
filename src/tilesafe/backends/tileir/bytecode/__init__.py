"""The Tile IR bytecode format: a standalone encoder of the files ``tileiras`` compiles.

This package owns everything about the bytes: the encoding primitives and section framing
(``_encoding``), types (``types``), numeric constant payloads (``constants``), tagged attributes
and optimization hints (``attributes``), the enumerations written into ops (``enums``), the
opcode table and version gates (``opcodes``), source locations of the Debug section
(``debuginfo``), the per-op encoders (``ops_arith``, ``ops_tile``, ``ops_memory``,
``ops_control`` on the shared machinery of ``_builder_core``) and the module/function builders
(``builder``: :class:`ModuleBuilder`, :class:`FunctionBuilder`).

It knows nothing about tilesafe kernels: its modules import only each other, the standard
library and numpy, never the rest of tilesafe (the lowering in ``backends.tileir.lower`` builds
on it, not the other way round; ``tests/tileir/test_tileir_layers.py`` checks this).
"""

from .builder import *  # noqa: F401,F403 (the public names of the builder)
from .builder import __all__
