"""The exception hierarchy of tilesafe, in one place.

Every error says *what* went wrong, *where* (the file:line of the kernel source or of the host
call that launched it) and *how to fix it*. Errors raised before anything executes leave every
tensor unchanged and usable.

    TilesafeError
    ├── CompileError                 kernel source rejected by the front end
    │   ├── UnsupportedSyntaxError   Python syntax outside the tile language
    │   ├── KernelNameError          a name that is not defined in the kernel's scope
    │   ├── DTypeError               element-type mismatch, conversion needed
    │   ├── ShapeError               shape mismatch (elementwise, mma, reshape, ...)
    │   │   ├── BroadcastError       shapes that numpy broadcasting cannot combine
    │   │   └── TileShapeError       tile shape not static / not powers of two / too large
    │   ├── SafetyError              a device-side safety rule (see README, "Safety")
    │   ├── SignatureError           a kernel parameter annotation that is not valid
    │   └── TileirasNotFound         no usable Tile IR assembler (tileiras) to build a cubin
    ├── LaunchError                  host-side launch checks, before anything is enqueued
    │   ├── ArgumentError            wrong number/kind of arguments
    │   │   ├── DTypeMismatchError   an argument's dtype differs from the signature's
    │   │   ├── RankMismatchError    an argument's rank differs
    │   │   ├── ExtentMismatchError  a static (or name-bound) extent of an argument differs
    │   │   └── DeviceMismatchError  arguments on different devices
    │   ├── PartitionError           partition does not fit the launch (grid, map)
    │   │   ├── PositionsError       an indexed partition's positions repeat or leave the grid
    │   │   ├── PartitionRankError   a partition of rank > 3 (the CUDA grid's limit)
    │   │   └── TileShapeMismatchError  partition tile shape differs from the kernel's
    │   ├── OwnershipError           ownership discipline violated
    │   │   ├── MovedError           a tensor used after it was moved into a partition
    │   │   ├── AliasingError        a mutable argument overlaps another argument
    │   │   └── BorrowError          host access conflicting with a borrow in flight
    │   └── UnsafeError              unsafe kernel launched outside ``with ts.unsafe():``
    ├── DeviceOpError                a DeviceOp driven twice or misused
    ├── KernelRuntimeError           a tile program failed while running (e.g. index out of bounds)
    │   ├── IndexOutOfRangeError     a data-dependent index outside its tensor (every device)
    │   └── DeviceAssertionError     a tc.assert_ that failed (interpreter)
    ├── CudaError                    a CUDA driver call failed
    ├── DeviceError                  a device name that is unknown or not usable here
    └── TuningError                  every autotune config failed for a call (ts.autotune)
"""

from __future__ import annotations

import linecache


class Location:
    """A position in a source file (1-based line, 0-based column); treat it as immutable
    (it is hashed). Built on every launch, hence a slotted class, not a frozen dataclass."""

    __slots__ = ("file", "line", "col")

    def __init__(self, file: str, line: int, col: int = 0):
        self.file, self.line, self.col = file, line, col

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and \
            (self.file, self.line, self.col) == (other.file, other.line, other.col)

    def __hash__(self) -> int:
        return hash((self.file, self.line, self.col))

    def __repr__(self) -> str:
        return f"Location(file={self.file!r}, line={self.line}, col={self.col})"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).rstrip("\n")


class TilesafeError(Exception):
    """Base class of every error tilesafe raises on purpose.

    Attributes:
        arguments: for an error of a launch (refused, or failed while it ran), the arguments
            the launch was given, handed back: a partition made inline
            (``k(t.partition(4), x)``) is not lost, ``err.arguments[0].unpartition()`` gives
            the tensor back. Empty for other errors.
    """

    arguments: tuple = ()


class CompileError(TilesafeError):
    """A kernel's source was rejected; ``location`` points at the offending line.

    Attributes:
        message: what is wrong.
        location: the :class:`Location` in the kernel source (may be None).
        kernel: name of the kernel being compiled (may be None).
        hint: how to fix it (may be empty).
    """

    def __init__(self, message: str, location: Location | None = None, *,
                 kernel: str | None = None, hint: str = ""):
        self.message = message
        self.location = location
        self.kernel = kernel
        self.hint = hint
        super().__init__(self._format())

    def with_context(self, *, location: Location | None = None,
                     kernel: str | None = None) -> "CompileError":
        """Fill in location/kernel if not already known (used as errors bubble up)."""
        if (location is None or self.location is not None) and (kernel is None or self.kernel):
            return self
        self.location = self.location or location
        self.kernel = self.kernel or kernel
        self.args = (self._format(),)
        return self

    def _format(self) -> str:
        where = f"{self.location}: " if self.location else ""
        who = f"in kernel '{self.kernel}': " if self.kernel else ""
        text = f"{where}{who}{self.message}"
        if self.location is not None:
            src = self.location.source_line()
            if src.strip():
                indent = len(src) - len(src.lstrip())
                text += f"\n    {src.strip()}\n    {' ' * max(0, self.location.col - indent)}^"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.args[0] if self.args else self._format()


class UnsupportedSyntaxError(CompileError):
    """Python syntax that the tile language does not support."""


class KernelNameError(CompileError):
    """A name used in a kernel is not defined, or not usable on the device."""


class DTypeError(CompileError):
    """Element types do not match, or an operation does not accept this element type."""


class ShapeError(CompileError):
    """Tile shapes do not fit the operation (elementwise, mma, reshape, store, ...)."""


class BroadcastError(ShapeError):
    """Two shapes cannot be combined under numpy broadcasting rules."""


class TileShapeError(ShapeError):
    """A tile shape is not a compile-time constant, has a dimension that is not a power of
    two, or has more than 2**24 elements (Tile IR's rules, enforced on every device)."""


class SafetyError(CompileError):
    """A device-side safety rule was broken (store to a shared tensor, indexed store, ...)."""


class SignatureError(CompileError):
    """A kernel parameter annotation is not one of the supported forms."""


class LaunchError(TilesafeError):
    """A launch was rejected on the host before anything was enqueued.

    The message names the launch site (``file:line``) and the fix; no argument was changed.
    """

    def __init__(self, message: str, location: Location | str | None = None, *, hint: str = ""):
        self.message = message
        self.location = location
        self.hint = hint
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.location}: " if self.location else ""
        text = f"{where}{self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text

    def with_context(self, *, location: Location | str | None = None) -> "LaunchError":
        """Fill in the location if not already known (an error found as the launch ran names
        the launch), as ``CompileError.with_context`` does."""
        if location is not None and not self.location:
            self.location = location
            self.args = (self._format(),)
        return self


class ArgumentError(LaunchError):
    """Wrong number or kind of launch arguments, or a dtype/rank that does not match."""


class DTypeMismatchError(ArgumentError):
    """An argument's dtype differs from the kernel signature's."""


class RankMismatchError(ArgumentError):
    """An argument's rank differs from the kernel signature's."""


class ExtentMismatchError(ArgumentError):
    """An argument has the signature's rank but a static extent (or one bound by a name)
    differs."""


class DeviceMismatchError(ArgumentError):
    """The arguments of one launch live on different devices."""


class PartitionError(LaunchError):
    """A partition does not fit the kernel (rank, tile shape, grid)."""


class PositionsError(PartitionError):
    """The positions of an indexed partition (``partition(tile, at=positions)``) name a tile
    outside the tile grid, or one tile twice: the launch writes nothing. Found before any
    program writes: on the host for positions in host memory, by the kernel itself on a GPU
    (raised when the launch's stream is synchronized). The message names the position."""


class PartitionRankError(PartitionError):
    """A partition of rank greater than 3 was launched (the CUDA grid has 3 axes)."""


class TileShapeMismatchError(PartitionError):
    """A partition's tile shape differs from the kernel's static MutTensor shape."""


class OwnershipError(LaunchError):
    """The ownership discipline was violated on the host."""


class MovedError(OwnershipError):
    """A tensor was used after being moved (e.g. into ``t.partition(...)``)."""


class AliasingError(OwnershipError):
    """A mutable launch argument overlaps another argument of the same launch."""


class BorrowError(OwnershipError):
    """A host access conflicts with a borrow held by work still in flight."""


class UnsafeError(LaunchError):
    """An unsafe kernel (``unchecked_accesses=True`` or raw pointers) was launched outside
    ``with ts.unsafe():``."""


class DeviceOpError(TilesafeError):
    """A DeviceOp was misused (for example driven twice)."""


class KernelRuntimeError(TilesafeError):
    """A tile program failed while executing (interpreter), e.g. a partition index outside
    the partition. Names the kernel, the program id and the offending values."""


class IndexOutOfRangeError(KernelRuntimeError, IndexError):
    """A data-dependent index (a partition's ``load(index)``, ``tc.gather``) was outside the
    tensor or its tile grid. The interpreter raises it at the access; a GPU kernel reads padding
    there instead, records the first such access, and the error is raised when the stream the
    launch ran on is next synchronized. It names the kernel, the access's file:line, the tile
    program and the index."""


class DeviceAssertionError(KernelRuntimeError):
    """A device assertion (``tc.assert_``) failed in the interpreter. Names the kernel, the tile
    program, the line, the assertion's message and the failing elements. (On a GPU a failed
    assertion traps instead: a CUDA error that leaves the context unusable.)"""


class TileirasNotFound(CompileError):
    """No usable ``tileiras`` (CUDA 13.3+) was found; the hint says how to install one."""


class CudaError(TilesafeError):
    """A CUDA driver call failed; the message names the call and the user's line."""


class DeviceError(TilesafeError, ValueError):
    """A device name that is unknown or not usable on this machine (``TILESAFE_DEVICE``,
    ``device=...``); the message says why and what is available."""


class TuningError(TilesafeError):
    """Tuning found no usable config: every config failed to compile or launch for the call's
    arguments (the message lists each config's failure)."""
