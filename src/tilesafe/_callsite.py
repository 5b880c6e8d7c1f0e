"""Finding the user's source line (the first stack frame outside the tilesafe package), so
host-side errors can say where the offending call was made. Cheap: it runs on every launch
(a dict lookup per frame walked, keyed by file name). When the compiled fast path
(``tilesafe._fastpath``) was built, ``caller_location`` is its C version of the same walk,
sharing these caches; ``TILESAFE_COMPILED_PATH=0`` keeps the Python one."""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Callable, Optional

from . import _compiled
from .errors import Location

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_INTERNAL: dict[str, bool] = {}
_LOCATIONS: dict[tuple[str, int], Location] = {}


def _is_internal(filename: str) -> bool:
    internal = _INTERNAL.get(filename)
    if internal is None:
        internal = _INTERNAL[filename] = os.path.abspath(filename).startswith(_PACKAGE_DIR)
    return internal


def _python_caller_location() -> Location:
    """The file:line of the innermost frame that is not tilesafe's own code."""
    frame = sys._getframe(1)
    internal = _INTERNAL
    while frame is not None:
        filename = frame.f_code.co_filename
        flag = internal.get(filename)
        if flag is None:
            flag = _is_internal(filename)
        if not flag:
            key = (filename, frame.f_lineno)
            location = _LOCATIONS.get(key)
            if location is None:  # Locations are immutable: one per source line
                location = _LOCATIONS[key] = Location(filename, frame.f_lineno)
            return location
        frame = frame.f_back
    return Location("<unknown>", 0)


def share_caches(compiled: ModuleType) -> None:
    """Hand these caches and helpers to the compiled walk (``fastpath/module.c``)."""
    compiled.setup_callsite(_INTERNAL, _LOCATIONS, _is_internal, Location)


def _compiled_caller_location() -> Optional[Callable[[], Location]]:
    compiled = _compiled.FASTPATH
    if compiled is None:
        return None
    share_caches(compiled)
    return compiled.caller_location


caller_location = _compiled_caller_location() or _python_caller_location
"""The file:line of the innermost frame that is not tilesafe's own code."""
