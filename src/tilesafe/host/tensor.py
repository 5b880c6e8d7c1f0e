"""The host :class:`Tensor`: a typed, strided view of an :class:`Allocation`, with ownership.

Views (``view``/``reshape``, slicing, ``permute``/``transpose``) share the allocation; their
byte footprint is what the launch boundary's aliasing check and the loans of pending work see.
A tensor moved into a partition (``t.partition(...)``) cannot be used again, nor can views
taken from it: every access raises :class:`~tilesafe.errors.MovedError` naming the line of the
move. Host reads and writes consult the allocation's loans: reading bytes that pending work
borrows mutably, or writing bytes that pending work borrows at all, raises BorrowError.

Element data moves through the device's platform (``driver.platform``). The modules this one
builds on know tensors only by duck typing: ``host.partition`` (partitions and borrows),
``host.copies`` (lazy copies) and ``host.export`` (DLPack export); tensors are made from
host values in ``host.factory`` and from foreign memory in ``host.interop``.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .. import _compiled
from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..driver.device import Device
from ..driver.ledger import (LEDGER, Allocation, bump_ownership_epoch, is_read_only,
                             make_read_only)
from ..driver.platform import platform_of
from ..driver.stream import current_stream, next_stream
from ..dtypes import DType
from ..errors import BorrowError, Location, MovedError
from ..shapes import (contiguous_strides, footprint, is_contiguous, normalize_shape,
                      reshape_strides)
from . import copies, export
from .lazy import not_run_yet
from .partition import BorrowMut, Partition


class Tensor:
    """A tensor on a device (host side).

    Attributes (read-only: a different shape or dtype is a new view, ``t.reshape(...)``):
        shape: extents per dimension.
        strides: element strides per dimension.
        dtype: the :class:`~tilesafe.dtypes.DType` of the elements.
    """

    __slots__ = ("_alloc", "_offset", "_shape", "_strides", "_dtype", "_moved_at", "_parent",
                 "_shared_at", "__weakref__")

    def __init__(self, alloc: Allocation, shape: "int | Sequence[int]", dtype: DType, *,
                 offset: int = 0, strides: Optional[Sequence[int]] = None,
                 parent: "Optional[Tensor]" = None):
        self._alloc = alloc
        self._offset = int(offset)
        self._shape = normalize_shape(shape)
        self._strides = tuple(int(s) for s in strides) if strides is not None else \
            contiguous_strides(self._shape)
        if len(self._strides) != len(self._shape):
            raise ValueError(f"{len(self._strides)} strides for a rank-{len(self._shape)} shape")
        self._dtype = dtype
        self._moved_at: Optional[Location] = None
        self._parent = parent
        self._shared_at: Optional[Location] = parent._shared_at if parent is not None else None

    # -- properties -----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Extents per dimension."""
        return self._shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides per dimension."""
        return self._strides

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self._dtype

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
        return is_contiguous(self.shape, self.strides)

    def footprint(self) -> tuple[int, int]:
        """The half-open byte range ``[lo, hi)`` of the allocation this view can touch."""
        return footprint(self.shape, self.strides, self._offset, self.dtype.itemsize)

    def span(self) -> tuple[int, int]:
        """The device addresses ``[lo, hi)`` this view can touch (what loans are keyed by)."""
        lo, hi = self.footprint()
        base = self._alloc.base
        return (base + lo, base + hi)

    def _overlaps(self, other: "Tensor") -> bool:
        """Whether this view and ``other`` may touch one byte, through whatever path reached
        the memory (views, DLPack imports of one buffer, on whichever device it was imported
        for: addresses are one space, ``driver.ledger._MAP``): intersecting address spans (the
        conservative footprints loans are keyed by)."""
        (lo, hi), (other_lo, other_hi) = self.span(), other.span()
        return lo < other_hi and other_lo < hi

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

    def _check_access(self, action: str, *, write: bool, in_pipeline: bool = False,
                      stream: Any = None) -> None:
        """Refuse ``action`` if pending work holds a conflicting loan. ``in_pipeline``: the
        action only hands out a handle for later launches (moving into a partition, borrowing
        mutably), so inside a running pipeline the loans of work already enqueued on its stream
        do not conflict: anything launched with the handle there runs after that work.
        ``stream``: the action is itself work in ``stream``'s order, after the work already
        enqueued there (a copy node of a graph replay), whose loans then do not conflict."""
        self._check_usable(action)
        if write and self._alloc.readonly:
            raise BorrowError(f"cannot {action}: its memory was imported read-only",
                              caller_location(), hint="import a writable array, or write into "
                              "a copy (t.clone()) and read the result from there")
        if write and self._shared_at is not None:
            raise BorrowError(f"cannot {action}: this tensor is the shared, read-only result of "
                              f".shared() (at {self._shared_at})", caller_location(),
                              hint="pass it as a tc.Tensor input; to modify it, copy it first "
                              "with .clone()")
        lo, hi = self.span()
        self._alloc.check(lo, hi, write=write, action=action, where=caller_location(),
                          stream=stream if stream is not None else
                          current_stream() if in_pipeline else None)

    def _move(self, where: Location, action: str) -> None:
        with LEDGER:
            self._check_access(action, write=True, in_pipeline=True)
            self._moved_at = where
            bump_ownership_epoch()

    def _mark_shared(self, where: Location, stream: Any) -> None:
        """Make this tensor the read-only result of a ``.shared()`` op run on ``stream``, and
        its memory read-only through every other tensor over it too (called with the ledger
        held). Refused while pending work not ordered before ``stream`` (another stream's
        launch, a collective) may still write it: it would write "read-only" memory."""
        lo, hi = self.span()
        self._alloc.check(lo, hi, write=False, action="make it the shared, read-only result "
                          "of .shared()", where=where, stream=stream)
        self._shared_at = where
        make_read_only(self._alloc.loans, lo, hi, where)

    @property
    def is_read_only(self) -> bool:
        """Whether this tensor's memory may not be written: a ``.shared()`` result (through any
        tensor over its bytes) or memory imported read-only."""
        return self._shared_at is not None or self._alloc.readonly or \
            is_read_only(self._alloc.loans, *self.span())

    # -- data -----------------------------------------------------------------------------
    @classmethod
    def from_storage(cls, storage: np.ndarray, dtype: DType, device: Device) -> "Tensor":
        """A new contiguous tensor on ``device`` holding ``storage`` (already in the storage
        dtype of ``dtype``)."""
        storage = np.asarray(storage)
        platform = platform_of(device)
        data = platform.allocate(device, storage, next_stream(device))
        base, nbytes = platform.span(data)
        return cls(Allocation(data, device, base=base, nbytes=nbytes), storage.shape, dtype)

    @classmethod
    def filled(cls, shape: Sequence[int], value: Any, dtype: DType, device: Device) -> "Tensor":
        """A new contiguous tensor on ``device`` of ``shape`` elements equal to ``value``
        (rounded to ``dtype`` as :meth:`from_values` rounds; filled on the device)."""
        storage = _fill_storage(dtype, value)
        platform = platform_of(device)
        data = platform.allocate_filled(device, shape, np.asarray(storage), next_stream(device))
        base, nbytes = platform.span(data)
        return cls(Allocation(data, device, base=base, nbytes=nbytes), tuple(shape), dtype)

    @classmethod
    def from_values(cls, values: np.ndarray, dtype: DType, device: Device) -> "Tensor":
        """A new contiguous tensor on ``device`` holding ``values`` rounded to ``dtype``
        (values already in the dtype's storage type are stored as they are)."""
        if isinstance(values, np.ndarray) and values.dtype == dtype.storage:
            return cls.from_storage(values, dtype, device)
        return cls.from_storage(dtype.to_storage(dtype.round(values)), dtype, device)

    def _array(self) -> np.ndarray:
        """A writable strided numpy view (storage dtype) of this tensor's elements, where the
        host can address the memory (``cpu``; TypeError elsewhere: use ``numpy()``)."""
        return platform_of(self.device).host_array(self._alloc.data, self._offset, self.shape,
                                                   self.strides)

    def _address(self) -> int:
        """The address of element 0 of this view."""
        return platform_of(self.device).address(self._alloc.data,
                                                self._offset * self.dtype.itemsize)

    def _read_storage(self) -> np.ndarray:
        """A host copy of the elements in their storage dtype (no borrow check: callers hold
        the ledger and checked)."""
        return platform_of(self.device).read(self._alloc.data, self._offset, self.shape,
                                             self.strides, self.dtype.storage,
                                             self.footprint(), next_stream(self.device))

    def _write_storage(self, values: np.ndarray) -> None:
        """Overwrite the elements with ``values`` (storage dtype; no borrow check, as above)."""
        platform_of(self.device).write(self._alloc.data, self._offset, self.shape, self.strides,
                                       self.dtype.storage, values, next_stream(self.device))

    def numpy(self) -> np.ndarray:
        """A copy of the elements as a numpy array of the tensor's storage dtype (bf16 and the
        8-bit floats come back as ``ml_dtypes`` arrays: ``ml_dtypes.bfloat16``,
        ``float8_e4m3fn``, ``float8_e5m2``; ``.astype(np.float32)`` is exact for all three).

        Raises BorrowError while pending work holds a mutable loan on this tensor.
        """
        with LEDGER:  # no launch may start writing it until the copy is made
            self._check_access("read this tensor", write=False)
            data = self._read_storage()  # a fresh copy
        return data

    def partition(self, tile_shape: "int | Sequence[int]", *,
                  at: "Optional[Tensor]" = None) -> "Partition":
        """Move this tensor into a partition of ``tile_shape`` tiles (one per tile program).

        The tensor (and its views) can no longer be used; ``partition.unpartition()`` gives it
        back. To partition without moving, use ``ts.borrow_mut(t).partition(tile_shape)``.

        With ``at`` (an integer tensor of tile coordinates, shape ``(n, rank)`` or ``(n,)``
        for rank 1) the partition is *indexed*: the launch has ``n`` programs and program
        ``i`` owns the tile at ``at[i]`` (a KV-cache row, a token's expert slot). Every launch
        proves the positions distinct and inside the tile grid before any program writes (on
        the host for host memory, in the kernel on a GPU); otherwise it writes nothing and
        raises ``PositionsError``. The kernel's ``tc.MutTensor`` is an ordinary one.
        """
        where = caller_location()
        partition = Partition(self._alias(), tile_shape, positions=at)  # (refused: no move)
        self._move(where, "partition this tensor")
        return partition

    def _alias(self) -> "Tensor":
        """A new tensor over the same elements, with its own ownership state (what a partition
        or a borrow holds)."""
        return Tensor(self._alloc, self.shape, self.dtype, offset=self._offset,
                      strides=self.strides)

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
        strides = reshape_strides(self.shape, self.strides, new_shape)
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
    def clone(self, device: "Device | str | None" = None) -> DeviceOp["Tensor"]:
        """A DeviceOp producing a contiguous copy (on ``device``, default: the same one)."""
        return copies.clone(self, device)

    def to(self, device: "Device | str") -> DeviceOp["Tensor"]:
        """A DeviceOp producing a copy on ``device``."""
        return self.clone(device)

    def copy_(self, source: "Tensor") -> DeviceOp["Tensor"]:
        """A DeviceOp that copies ``source`` into this tensor (same shape and dtype)."""
        return copies.copy_into(self, source)

    # -- interop --------------------------------------------------------------------------
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> np.ndarray:
        """``np.asarray(t)``, ``np.array(t)``: a copy of the values, as :meth:`numpy` gives
        them (checked as any host read). A view is never given: a numpy array over the
        tensor's memory would write it past every loan, so ``copy=False`` is refused."""
        if copy is False:
            raise ValueError(f"{caller_location()}: a tilesafe tensor cannot be viewed as a "
                             "numpy array without a copy (numpy would write its memory "
                             "unchecked)\n  fix: np.asarray(t) or t.numpy() (both copy)")
        values = self.numpy()
        return values if dtype is None else values.astype(dtype, copy=False)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Optional[bool] = None):
        return export.export_dlpack(self, stream=stream, max_version=max_version, copy=copy)

    @property
    def __cuda_array_interface__(self) -> dict:
        return export.cuda_array_interface(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return export.dlpack_device(self)

    def __repr__(self) -> str:
        if self._moved_location() is not None:
            return f"Tensor(<moved at {self._moved_location()}>)"
        return f"Tensor(shape={self.shape}, dtype={self.dtype.short}, device={self.device})"

    def __len__(self) -> int:
        self._check_usable("take its length")
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]


def borrow_mut(tensor: Tensor) -> BorrowMut:
    """Borrow ``tensor`` exclusively: ``ts.borrow_mut(t).partition(tile_shape)`` gives a
    partition that writes ``t`` in place; ``t`` is usable again once that launch completes."""
    if isinstance(tensor, DeviceOp):
        raise not_run_yet("borrow_mut takes a tensor", tensor, caller_location(),
                          ": ts.borrow_mut(op.sync())")
    if not isinstance(tensor, Tensor):
        raise TypeError(f"borrow_mut takes a tilesafe Tensor, got {type(tensor).__name__}")
    tensor._check_usable("borrow it")
    return BorrowMut(tensor)


if _compiled.FASTPATH is not None:  # launches of tensors and partitions need no other check
    _compiled.FASTPATH.configure(Tensor=Tensor, Partition=Partition)


#: the storage scalar of each (dtype, Python scalar) a tensor was filled with: rounding one
#: value exactly (``DType.round``) takes tens of microseconds, and every ``empty``/``zeros``
#: fills with one of a few values
_FILL_STORAGE: dict = {}


def _fill_storage(dtype: DType, value: Any) -> Any:
    """``value`` rounded to ``dtype`` as its storage scalar (remembered for Python scalars,
    keyed by ``repr`` so that 0.0 and -0.0, or NaN, each keep their own bits)."""
    key = (dtype.name, type(value), repr(value)) if type(value) in (bool, int, float) else None
    found = _FILL_STORAGE.get(key) if key is not None else None
    if found is None:
        found = dtype.to_storage(dtype.round(np.asarray([value])))[0]
        if key is not None and len(_FILL_STORAGE) < 1024:
            _FILL_STORAGE[key] = found
    return found

