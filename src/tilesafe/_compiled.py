"""The optional C modules (built at install time where a C compiler is present): importing one,
and whether they are wanted at all (``TILESAFE_COMPILED_PATH=0`` in the environment keeps
their Python equivalents from import on)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional


def wanted() -> bool:
    """Whether the compiled modules are to be used (unless ``TILESAFE_COMPILED_PATH=0``)."""
    return os.environ.get("TILESAFE_COMPILED_PATH", "1") != "0"


def built(name: str) -> Optional[ModuleType]:
    """The compiled module ``name`` (``"tilesafe.driver._ledger"``), or None when the install
    did not build it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


FASTPATH: Optional[ModuleType] = built("tilesafe._fastpath") if wanted() else None
"""The compiled fast path (``src/tilesafe/fastpath/*.c``), or None: then the Python
definitions of the objects it owns are used (see ARCHITECTURE.md, "The fast path")."""
