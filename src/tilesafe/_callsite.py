"""Finding the user's source line (the first stack frame outside the tilesafe package and
outside the array libraries that call into it: ``torch.from_dlpack(t)`` runs tilesafe's
``__dlpack__`` from torch's own code, and an error there is the user's call of
``torch.from_dlpack``), so host-side errors can say where the offending call was made.
Cheap: it runs on every launch (a dict lookup per frame walked, keyed by file name). When
the compiled fast path (``tilesafe._fastpath``) was built, ``caller_location`` is its C
version of the same walk, sharing these caches; ``TILESAFE_COMPILED_PATH=0`` keeps the Python
one."""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Callable, Optional

from . import _compiled
from .errors import Location

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
#: the libraries whose code calls tilesafe's protocol methods (``__dlpack__``,
#: ``__array__``, ``__cuda_array_interface__``) and its torch ops on the user's behalf: their
#: frames are passed over like tilesafe's own
CALLING_LIBRARIES = ("torch", "numpy", "cupy", "jax", "jaxlib", "cuda", "ml_dtypes")
_INTERNAL: dict[str, bool] = {}
_LOCATIONS: dict[tuple[str, int], Location] = {}


def _library_dirs() -> list[str]:
    """The directories of the :data:`CALLING_LIBRARIES` imported so far (a frame of one that
    is not imported cannot be on the stack)."""
    dirs = []
    for name in CALLING_LIBRARIES:
        module = sys.modules.get(name)
        if module is None:
            continue
        paths = list(getattr(module, "__path__", None) or ())  # (namespace packages: cuda)
        if not paths and getattr(module, "__file__", None):
            paths = [os.path.dirname(module.__file__)]
        dirs += [os.path.abspath(p) + os.sep for p in paths]
    return dirs


def _is_internal(filename: str) -> bool:
    """Whether ``filename`` is tilesafe's or a calling library's (cached per file name)."""
    internal = _INTERNAL.get(filename)
    if internal is None:
        path = os.path.abspath(filename)
        internal = _INTERNAL[filename] = path.startswith(_PACKAGE_DIR) or any(
            path.startswith(d) for d in _library_dirs())
    return internal


def _python_caller_location() -> Location:
    """The file:line of the innermost frame that is neither tilesafe's own code nor a calling
    library's."""
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
"""The file:line of the innermost frame that is neither tilesafe's own code nor a calling
library's (module docstring)."""
