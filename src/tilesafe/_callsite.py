"""Finding the user's source line (the first stack frame outside the tilesafe package), so
host-side errors can say where the offending call was made. Cheap: it runs on every launch."""

from __future__ import annotations

import functools
import os
import sys

from .errors import Location

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@functools.lru_cache(maxsize=None)
def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR)


def caller_location() -> Location:
    """The file:line of the innermost frame that is not tilesafe's own code."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return Location(filename, frame.f_lineno)
        frame = frame.f_back
    return Location("<unknown>", 0)
