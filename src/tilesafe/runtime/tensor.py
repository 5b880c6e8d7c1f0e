"""The host :class:`Tensor`: a typed, strided view of an :class:`Allocation`, with ownership.

Views (``view``/``reshape``, slicing, ``permute``/``transpose``) share the allocation; their
byte footprint is what the launch boundary's aliasing check and the loans of pending work see.
A tensor moved into a partition (``t.partition(...)``) cannot be used again, nor can views
taken from it: every access raises :class:`~tilesafe.errors.MovedError` naming the line of the
move. Host reads and writes consult the allocation's loans (rule 8 of DESIGN.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

from ..dtypes import DType
from ..errors import BorrowError, Location, MovedError
from .allocation import LEDGER, Allocation, bump_ownership_epoch
from .._callsite import caller_location
from .device import Device

if TYPE_CHECKING:
    from .partition import Partition


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def normalize_shape(shape: "int | Sequence[int]") -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise ValueError(f"bad tensor shape {shape!r}: extents must be non-negative ints")
    return tuple(int(d) for d in dims)


def _reshape_strides(shape, strides, new_shape) -> Optional[tuple[int, ...]]:
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy, or None."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new_strides = [0] * len(new_shape)
    oi = ni = 0
    while oi < len(old) and ni < len(new_shape):
        if new_shape[ni] == 1:
            ni += 1
            continue
        o_end, n_end = oi + 1, ni + 1
        o_prod, n_prod = old[oi][0], new_shape[ni]
        while o_prod != n_prod:
            if o_prod < n_prod:
                o_prod *= old[o_end][0]
                o_end += 1
            else:
                n_prod *= new_shape[n_end]
                n_end += 1
        for k in range(oi, o_end - 1):  # the old chunk must be one contiguous run
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[o_end - 1][1]
        for k in range(n_end - 1, ni - 1, -1):
            new_strides[k] = stride
            stride *= new_shape[k]
        oi, ni = o_end, n_end
    for k in range(ni, len(new_shape)):
        new_strides[k] = 1
    return tuple(new_strides)


class Tensor:
    """A tensor on a device (host side).

    Attributes:
        shape: extents per dimension.
        strides: element strides per dimension.
        dtype: the :class:`~tilesafe.dtypes.DType` of the elements.
    """

    __slots__ = ("_alloc", "_offset", "shape", "strides", "dtype", "_moved_at", "_parent",
                 "_shared_at", "__weakref__")

    def __init__(self, alloc: Allocation, shape: "int | Sequence[int]", dtype: DType, *,
                 offset: int = 0, strides: Optional[Sequence[int]] = None,
                 parent: "Optional[Tensor]" = None):
        self._alloc = alloc
        self._offset = int(offset)
        self.shape = normalize_shape(shape)
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape)
        self.dtype = dtype
        self._moved_at: Optional[Location] = None
        self._parent = parent
        self._shared_at: Optional[Location] = parent._shared_at if parent is not None else None

    # -- properties -----------------------------------------------------------------------
    @property
    def device(self) -> Device:
        return self._alloc.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        return all(s == c for d, s, c in zip(self.shape, self.strides,
                                             contiguous_strides(self.shape)) if d != 1)

    def footprint(self) -> tuple[int, int]:
        """The half-open byte range ``[lo, hi)`` of the allocation this view can touch."""
        item = self.dtype.itemsize
        if self.size == 0:
            return (self._offset * item, self._offset * item)
        lo = hi = self._offset
        for d, s in zip(self.shape, self.strides):
            if s < 0:
                lo += (d - 1) * s
            else:
                hi += (d - 1) * s
        return (lo * item, (hi + 1) * item)

    # -- ownership ------------------------------------------------------------------------
    def _moved_location(self) -> Optional[Location]:
        t: Optional[Tensor] = self
        while t is not None:
            if t._moved_at is not None:
                return t._moved_at
            t = t._parent
        return None

    def _check_usable(self, action: str) -> None:
        moved = self._moved_location()
        if moved is not None:
            what = "this tensor" if self._moved_at is not None else "the tensor this view is of"
            raise MovedError(f"cannot {action}: {what} was moved at {moved}", caller_location(),
                             hint="use the value the move produced (the partition, or what "
                             "the launch returned); partition.unpartition() gives the tensor "
                             "back, and ts.borrow_mut(t).partition(...) partitions without "
                             "moving")

    def _check_access(self, action: str, *, write: bool, in_pipeline: bool = False) -> None:
        """Refuse ``action`` if pending work holds a conflicting loan. ``in_pipeline``: the
        action only hands out a handle for later launches (moving into a partition, borrowing
        mutably), so inside a running pipeline the loans of work already enqueued on its stream
        do not conflict: anything launched with the handle there runs after that work."""
        self._check_usable(action)
        if write and self._shared_at is not None:
            raise BorrowError(f"cannot {action}: this tensor is the shared, read-only result of "
                              f".shared() (at {self._shared_at})", caller_location(),
                              hint="pass it as a tc.Tensor input; to modify it, copy it first "
                              "with .clone()")
        lo, hi = self.footprint()
        stream = None
        if in_pipeline:
            from ..exec.stream import current_stream
            stream = current_stream()
        self._alloc.check(lo, hi, write=write, action=action, where=caller_location(),
                          stream=stream)

    def _move(self, where: Location, action: str) -> None:
        with LEDGER:
            self._check_access(action, write=True, in_pipeline=True)
            self._moved_at = where
            bump_ownership_epoch()

    # -- data -----------------------------------------------------------------------------
    def _array(self) -> np.ndarray:
        """A writable strided numpy view (storage dtype) of this tensor's elements; ``cpu``
        tensors only (other devices go through ``runtime.memory``)."""
        if self.device.kind != "cpu":
            raise TypeError(f"a {self.device} tensor has no host array; use .numpy()")
        data = self._alloc.data
        item = data.itemsize
        return np.lib.stride_tricks.as_strided(
            data[self._offset:] if self._offset >= 0 else data, shape=self.shape,
            strides=tuple(s * item for s in self.strides), writeable=True)

    def numpy(self) -> np.ndarray:
        """A copy of the elements as a numpy array (bf16 tensors come back as float32).

        Raises BorrowError while pending work holds a mutable loan on this tensor.
        """
        from .memory import read
        with LEDGER:  # no launch may start writing it until the copy is made
            self._check_access("read this tensor", write=False)
            data = read(self)  # a fresh copy
        return self.dtype.to_compute(data)

    def partition(self, tile_shape: "int | Sequence[int]") -> "Partition":
        """Move this tensor into a partition of ``tile_shape`` tiles (one per tile program).

        The tensor (and its views) can no longer be used; ``partition.unpartition()`` gives it
        back. To partition without moving, use ``ts.borrow_mut(t).partition(tile_shape)``.
        """
        from .partition import Partition
        where = caller_location()
        self._move(where, "partition this tensor")
        inner = Tensor(self._alloc, self.shape, self.dtype, offset=self._offset,
                       strides=self.strides)
        return Partition(inner, tile_shape)

    # -- views ----------------------------------------------------------------------------
    def _view(self, shape, strides, offset) -> "Tensor":
        self._check_usable("take a view of this tensor")
        return Tensor(self._alloc, shape, self.dtype, offset=offset, strides=strides,
                      parent=self)

    def view(self, *shape: Any) -> "Tensor":
        """The same elements in a new shape, without copying (``-1`` infers one extent)."""
        return self.reshape(*shape)

    def reshape(self, *shape: Any) -> "Tensor":
        """A view with a new shape; raises ValueError if no view can express it (copy first
        with ``t.clone()``)."""
        dims = list(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        if dims.count(-1) > 1:
            raise ValueError("reshape: at most one extent may be -1")
        if -1 in dims:
            known = 1
            for d in dims:
                if d != -1:
                    known *= d
            if known == 0 or self.size % known:
                raise ValueError(f"reshape: cannot infer -1 for {self.shape} -> {tuple(dims)}")
            dims[dims.index(-1)] = self.size // known
        new_shape = normalize_shape(dims)
        if int(np.prod(new_shape, dtype=np.int64)) != self.size:
            raise ValueError(f"reshape: {self.shape} ({self.size} elements) cannot become "
                             f"{new_shape}")
        strides = _reshape_strides(self.shape, self.strides, new_shape)
        if strides is None:
            raise ValueError(f"reshape: a {self.shape} view with strides {self.strides} cannot "
                             f"be viewed as {new_shape} without a copy; use t.clone() first")
        return self._view(new_shape, strides, self._offset)

    def __getitem__(self, index: Any) -> "Tensor":
        """Basic indexing with ints and slices (positive steps), sharing memory."""
        items = index if isinstance(index, tuple) else (index,)
        if sum(i is Ellipsis for i in items) > 1:
            raise IndexError("only one ellipsis is allowed")
        if Ellipsis in items:
            at = items.index(Ellipsis)
            fill = self.ndim - (len(items) - 1)
            items = items[:at] + (slice(None),) * fill + items[at + 1:]
        if len(items) > self.ndim:
            raise IndexError(f"too many indices ({len(items)}) for a rank-{self.ndim} tensor")
        items = items + (slice(None),) * (self.ndim - len(items))
        offset, shape, strides = self._offset, [], []
        for axis, (item, d, s) in enumerate(zip(items, self.shape, self.strides)):
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                i = int(item) + (d if item < 0 else 0)
                if not 0 <= i < d:
                    raise IndexError(f"index {item} is out of range for axis {axis} of size {d}")
                offset += i * s
            elif isinstance(item, slice):
                start, stop, step = item.indices(d)
                if step < 1:
                    raise IndexError("slices of tensors need a positive step")
                shape.append(max(0, -(-(stop - start) // step)))
                strides.append(s * step)
                offset += start * s if shape[-1] else 0
            else:
                raise IndexError(f"unsupported index {item!r}: use ints and slices")
        return self._view(tuple(shape), tuple(strides), offset)

    def slice(self, *ranges: "slice | range | tuple[int, int]") -> "Tensor":
        """``t.slice(range(1, 3), (2, 6))`` is ``t[1:3, 2:6]``: a view of a sub-block."""
        items = []
        for r in ranges:
            if isinstance(r, range):
                items.append(slice(r.start, r.stop, r.step))
            elif isinstance(r, tuple):
                items.append(slice(*r))
            else:
                items.append(r)
        return self[tuple(items)]

    def permute(self, *dims: Any) -> "Tensor":
        """A view with dimensions reordered (``numpy.transpose(a, dims)``)."""
        perm = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
        perm = tuple(int(p) % max(self.ndim, 1) for p in perm)
        if sorted(perm) != list(range(self.ndim)):
            raise ValueError(f"permute: {dims} is not a permutation of {self.ndim} dimensions")
        return self._view(tuple(self.shape[p] for p in perm),
                          tuple(self.strides[p] for p in perm), self._offset)

    def transpose(self, dim0: int = -2, dim1: int = -1) -> "Tensor":
        """A view with two dimensions swapped (the last two by default)."""
        perm = list(range(self.ndim))
        perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
        return self.permute(perm)

    @property
    def T(self) -> "Tensor":
        """A view with all dimensions reversed."""
        return self.permute(tuple(reversed(range(self.ndim))))

    # -- copies (lazy) --------------------------------------------------------------------
    def clone(self, device: "Device | str | None" = None):
        """A DeviceOp producing a contiguous copy (on ``device``, default: the same one)."""
        from .copies import clone
        return clone(self, device)

    def to(self, device: "Device | str"):
        """A DeviceOp producing a copy on ``device``."""
        return self.clone(device)

    def copy_(self, source: "Tensor"):
        """A DeviceOp that copies ``source`` into this tensor (same shape and dtype)."""
        from .copies import copy_into
        return copy_into(self, source)

    # -- interop --------------------------------------------------------------------------
    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None):
        from .interop import export_dlpack
        return export_dlpack(self, stream=stream, max_version=max_version, copy=copy)

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device.kind != "cuda":
            raise AttributeError("__cuda_array_interface__ exists on cuda tensors only")
        from .interop import cuda_array_interface
        return cuda_array_interface(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        from .interop import dlpack_device
        return dlpack_device(self)

    def __repr__(self) -> str:
        if self._moved_location() is not None:
            return f"Tensor(<moved at {self._moved_location()}>)"
        return f"Tensor(shape={self.shape}, dtype={self.dtype.short}, device={self.device})"

    def __len__(self) -> int:
        self._check_usable("take its length")
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]
