"""Tile IR lowering of the atomic read-modify-writes on a ``tc.AtomicTensor``
(``compiler/ops/atomic.py``).

``atomic_rmw`` becomes one ``atomic_rmw_tko`` over a tile of pointers: the tensor's base
pointer advanced (``offset``) by ``sum(index_d * stride_d)`` elements, computed in i64 so that
no element of a large tensor is out of reach. Every lane is masked by the in-bounds mask
(:func:`in_bounds_mask`: ``0 <= index_d < extent_d`` for every dimension) and the user's mask,
so an out-of-range index never touches memory. Memory order ``relaxed``, scope ``device``:
the updates need to be atomic, not to order other accesses.

Modes: ``addf`` for float ``add``, ``add`` for integers; ``max``/``min`` for signed integers,
``umax``/``umin`` for unsigned ones; ``and``, ``or``, ``xor``.

Ordering: one program's atomic updates happen in its program order, as on the interpreter:
updates of different kinds do not commute (a max then an add of one element is not an add then
a max), so each atomic takes the token of the mutable chain and yields the next one. Other
programs' updates interleave with them in any order (that is what atomics are for).

Importing it registers the lowering (``context.lowers``). It imports the ``bytecode`` package,
``context`` and ``tilesafe.compiler``/``dtypes``, never the host layers, ``tilesafe.driver`` or
the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from typing import Sequence, Union

from ....compiler.ir import Operation
from ....compiler.types import AtomicTensorType
from ....dtypes import DType
from ..bytecode import (I64, AtomicMode, ComparisonPredicate, MemoryOrdering, MemoryScope,
                        Signedness, TileType, Value)
from .checks import in_range
from .context import LoweringContext, TensorArg, lowers
from .indexed import report_lanes

__all__ = ["in_bounds_mask", "element_offsets"]

_INT_MODES = {"add": AtomicMode.ADD, "and": AtomicMode.AND, "or": AtomicMode.OR,
              "xor": AtomicMode.XOR}


def atomic_mode(mode: str, dtype: DType) -> AtomicMode:
    """The ``atomic_rmw_tko`` mode of ``atomic_<mode>`` on ``dtype`` elements."""
    if mode == "add":
        return AtomicMode.ADDF if dtype.is_float else AtomicMode.ADD
    if mode in ("max", "min"):
        if dtype.is_signed:
            return AtomicMode.MAX if mode == "max" else AtomicMode.MIN
        return AtomicMode.UMAX if mode == "max" else AtomicMode.UMIN
    return _INT_MODES[mode]


def _as_i64(lw: LoweringContext, value: Union[int, Value], shape: Sequence[int],
            signed: bool = True) -> Value:
    """An i64 tile of ``shape``: a static int as a constant, an integer value widened (sign- or
    zero-extended) and broadcast."""
    fn = lw.fn
    if isinstance(value, int):
        return fn.constant(int(value), TileType(I64, tuple(shape)))
    if value.type.element != I64:
        value = fn.exti(value, I64, signedness=Signedness.SIGNED if signed
                        else Signedness.UNSIGNED)
    if tuple(value.type.shape) != tuple(shape):
        value = fn.broadcast(fn.reshape(value, (1,) * len(shape)), tuple(shape))
    return value


def _indices_i64(lw: LoweringContext, indices: Sequence[Value],
                 dtypes: Sequence[DType]) -> list[Value]:
    return [_as_i64(lw, v, v.type.shape, signed=d.is_signed) for v, d in zip(indices, dtypes)]


def in_bounds_mask(lw: LoweringContext, tensor: TensorArg, indices: Sequence[Value]) -> Value:
    """The lanes whose index tuple lies inside the tensor: ``0 <= index_d < extent_d`` for
    every dimension ``d`` (``indices``: i64 tiles of one shape; an unsigned comparison with
    the extent, which is at least 0, checks both bounds at once). An i1 tile.

    This is where an out-of-range index is kept out of memory on the GPU: its lane is masked
    off. A checked update (``compiler.bounds``) also reports such a lane to the kernel's fault
    record (``lower_atomic_rmw``), so the error names the kernel and the index as the
    interpreter's does."""
    fn = lw.fn
    shape = indices[0].type.shape
    inside = None
    for index, dim in zip(indices, tensor.dims):
        ok = fn.cmpi(ComparisonPredicate.LT, index, _as_i64(lw, dim, shape),
                     signedness=Signedness.UNSIGNED)
        inside = ok if inside is None else fn.andi(inside, ok)
    return inside


def element_offsets(lw: LoweringContext, tensor: TensorArg, indices: Sequence[Value]) -> Value:
    """``sum(index_d * stride_d)``: the element offset of each lane (i64)."""
    fn = lw.fn
    shape = indices[0].type.shape
    total = None
    for index, stride in zip(indices, tensor.strides):
        if isinstance(stride, int) and stride == 1:
            term = index
        else:
            term = fn.muli(index, _as_i64(lw, stride, shape))
        total = term if total is None else fn.addi(total, term)
    return total


@lowers("atomic_rmw")
def lower_atomic_rmw(lw: LoweringContext, op: Operation) -> None:
    """One masked ``atomic_rmw_tko`` over the lanes' element pointers (module docstring)."""
    a_ir, value_ir = op.operands[0], op.operands[1]
    t: AtomicTensorType = a_ir.type
    tensor: TensorArg = lw.get(a_ir)
    value = lw.get(value_ir)
    index_ir = op.operands[2:2 + t.rank]
    indices = _indices_i64(lw, [lw.get(v) for v in index_ir], [v.type.dtype for v in index_ir])
    mask = in_bounds_mask(lw, tensor, indices)
    live = lw.get(op.operands[2 + t.rank]) if op.attrs["masked"] else None
    if live is not None:
        mask = lw.fn.andi(mask, live)
    site = lw.checked_sites.get(id(op))
    if site is not None:  # lanes outside the tensor are masked off above, and reported here
        dims = [lw.i32(d) if isinstance(d, int) else d for d in tensor.dims]
        flags = [in_range(lw, i, True, n) for i, n in zip(indices, dims)]
        report_lanes(lw, site, flags, indices, dims, live)
    shape = tuple(value.type.shape)
    base = tensor.ptr
    if shape:
        base = lw.fn.broadcast(lw.fn.reshape(base, (1,) * len(shape)), shape)
    pointers = lw.fn.offset(base, element_offsets(lw, tensor, indices))
    _, lw.token = lw.fn.atomic_rmw_tko(pointers, value, atomic_mode(op.attrs["mode"], t.dtype),
                                       ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE,
                                       mask=mask, token=lw.token)
