"""The layers of the Tile IR backend, read from the source (``ast``), not by importing it.

``backends/tileir/bytecode`` is a standalone encoder: its modules import only each other (by
relative imports that stay inside the package), the standard library and numpy. The lowering
in ``backends/tileir/lower`` may use the compiler, dtypes, errors and the encoder, but nothing
of the host side (``tilesafe.driver``, ``tilesafe.host``, ``tilesafe.launch``) nor the toolchain
modules of ``backends/tileir`` that build on it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

import tilesafe.backends.tileir as tileir_package

TILEIR = Path(tileir_package.__file__).parent
TILEIR_NAME = "tilesafe.backends.tileir"
DRIVER_MODULES = ("tileiras", "cache", "backend", "executable", "facts")
LOWER_FORBIDDEN = ("tilesafe.driver", "tilesafe.host", "tilesafe.launch", "tilesafe.deviceops",
                   *(f"{TILEIR_NAME}.{name}" for name in DRIVER_MODULES))


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source``, a module of ``package``,
    at any depth (function-local imports included); ``from X import a, b`` yields ``X.a`` and
    ``X.b`` too, since the names may be submodules. A relative import that climbs above the
    top-level package keeps its dots."""
    parts = package.split(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level > len(parts):
                yield node.lineno, "." * node.level + (node.module or "")
                continue
            base = parts[:len(parts) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield node.lineno, module
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{module}.{alias.name}"


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def bytecode_violations(source: str) -> list[tuple[int, str]]:
    """The imports of a ``bytecode`` module that leave the package for the rest of tilesafe."""
    package = f"{TILEIR_NAME}.bytecode"
    return [(line, module) for line, module in imported_modules(source, package)
            if module.startswith(".") or (_inside(module, "tilesafe")
                                          and not _inside(module, package))]


def lower_violations(source: str) -> list[tuple[int, str]]:
    """The imports of a ``lower`` module of the host side or of the toolchain modules."""
    return [(line, module) for line, module in imported_modules(source, f"{TILEIR_NAME}.lower")
            if module.startswith(".") or any(_inside(module, f) for f in LOWER_FORBIDDEN)]


def _violations(folder: str, check) -> dict[str, list[tuple[int, str]]]:
    paths = sorted((TILEIR / folder).glob("*.py"))
    assert paths, f"no modules under {TILEIR / folder}"
    found = {p.name: check(p.read_text()) for p in paths}
    return {name: bad for name, bad in found.items() if bad}


def test_bytecode_imports_nothing_of_tilesafe_outside_itself():
    assert _violations("bytecode", bytecode_violations) == {}


def test_lower_imports_neither_the_host_side_nor_the_toolchain():
    assert _violations("lower", lower_violations) == {}


# Stand-in module sources, one import a line: every line of a FORBIDDEN source must be reported.
ALLOWED = {
    bytecode_violations: """\
from ._encoding import ByteWriter
from . import types
from .builder import *
from tilesafe.backends.tileir.bytecode import types
import numpy as np, os
""",
    lower_violations: """\
from ..bytecode import Value
from ....compiler.ir import Operation
from .context import lowers
from .... import dtypes as dt
from tilesafe.errors import CompileError
""",
}
FORBIDDEN = {
    bytecode_violations: """\
from ...errors import CompileError
from .. import backend
from ..lower import lower_kernel
import tilesafe.dtypes
def f(): from tilesafe import errors
""",
    lower_violations: """\
from ....driver import cuda
from .... import host
from .. import facts
from ..tileiras import assemble
def f(): import tilesafe.deviceops.deviceop
from tilesafe.backends.tileir.backend import TileIRBackend
""",
}


@pytest.mark.parametrize("check", [bytecode_violations, lower_violations])
def test_the_checks_tell_allowed_from_forbidden_imports(check):
    assert check(ALLOWED[check]) == []
    source = FORBIDDEN[check]
    reported = {line for line, _ in check(source)}
    assert reported == set(range(1, source.count("\n") + 1)), check(source)
