"""``with ts.unsafe():``: the one permission that lets an unsafe kernel (``unchecked_accesses``
or raw pointers) be launched, and only from inside the block.

The permission belongs to the block, not to whatever ran while it was open: it holds for code
running in the frame that opened the block and in the functions that frame calls, while the
block is open. A generator suspended inside the block does not lend it to its caller, an
asyncio task or a thread started inside the block does not carry it away, and it ends with
the block. (The context variable only finds the open blocks; the frame walk decides.)
"""

from __future__ import annotations

import contextvars
import sys
from types import FrameType
from typing import Optional

_PERMITS: contextvars.ContextVar[tuple] = contextvars.ContextVar("tilesafe_unsafe",
                                                                  default=())


class _Permit:
    __slots__ = ("frame", "open")

    def __init__(self, frame: FrameType):
        self.frame, self.open = frame, True


class unsafe:  # noqa: N801 (used as ``with ts.unsafe():``, like a function)
    """Allow launching unsafe kernels (``unchecked_accesses=True`` or raw pointers) inside.

    Launches are checked when they are created, so create the launch inside the block::

        with ts.unsafe():
            op = fast_kernel(z, x)
        op.sync()

    The permission holds in the code of the block and what it calls, not in generators
    suspended inside it, tasks or threads it started, or after it closes.
    """

    __slots__ = ("_permit", "_token")

    def __enter__(self) -> None:
        self._permit = _Permit(sys._getframe(1))
        self._token = _PERMITS.set(_PERMITS.get() + (self._permit,))

    def __exit__(self, *exc: object) -> None:
        self._permit.open = False
        self._permit.frame = None
        try:
            _PERMITS.reset(self._token)
        except ValueError:  # reset from another context (a generator closed elsewhere)
            pass


def unsafe_permitted() -> bool:
    """Whether the calling code runs inside an open ``with ts.unsafe():`` block."""
    permits = [p for p in _PERMITS.get() if p.open]
    if not permits:
        return False
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None:
        if any(p.frame is frame for p in permits):
            return True
        frame = frame.f_back
    return False
