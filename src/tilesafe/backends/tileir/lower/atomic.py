"""Tile IR lowering of the atomic read-modify-writes on a ``tc.AtomicTensor``
(``compiler/ops/atomic.py``).

``atomic_rmw`` becomes one ``atomic_rmw_tko`` over a tile of pointers: the tensor's base
pointer advanced (``offset``) by ``sum(index_d * stride_d)`` elements, computed in i64 so that
no element of a large tensor is out of reach (``indexed.element_offsets``). Every lane is
masked by ``0 <= index_d < extent_d`` for every dimension (``checks.in_range``) and the user's
mask, so an out-of-range index never touches memory; a checked update reports such a lane
(``indexed.report_lanes``). Memory order ``relaxed``, scope ``device``: the updates need to be
atomic, not to order other accesses.

Modes: ``addf`` for float ``add``, ``add`` for integers; ``max``/``min`` for signed integers,
``umax``/``umin`` for unsigned ones; ``and``, ``or``, ``xor``.

Ordering: one program's atomic updates happen in its program order, as on the interpreter:
updates of different kinds do not commute (a max then an add of one element is not an add then
a max), so each atomic takes the token of the mutable chain and yields the next one. Other
programs' updates interleave with them in any order (that is what atomics are for).

Importing it registers the lowering (``context.lowers``). It imports the ``bytecode`` package,
its sibling lowering modules and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from typing import Sequence

from ....compiler.ir import Operation
from ....compiler.types import AtomicTensorType
from ....dtypes import DType
from ..bytecode import AtomicMode, MemoryOrdering, MemoryScope, Value
from .checks import all_of, as_i64, in_range
from .context import LoweringContext, TensorArg, lowers
from .indexed import element_offsets, report_lanes

__all__ = ["atomic_mode"]

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


def _indices_i64(lw: LoweringContext, indices: Sequence[Value], dtypes: Sequence[DType],
                 shape: Sequence[int]) -> list[Value]:
    """The index tiles widened to i64 (sign- or zero-extended) and broadcast to ``shape``."""
    return [lw.splat(as_i64(lw, v, d.is_signed), shape) for v, d in zip(indices, dtypes)]


@lowers("atomic_rmw")
def lower_atomic_rmw(lw: LoweringContext, op: Operation) -> None:
    """One masked ``atomic_rmw_tko`` over the lanes' element pointers (module docstring)."""
    a_ir, value_ir = op.operands[0], op.operands[1]
    t: AtomicTensorType = a_ir.type
    tensor: TensorArg = lw.get(a_ir)
    value = lw.get(value_ir)
    shape = tuple(value.type.shape)
    index_ir = op.operands[2:2 + t.rank]
    indices = _indices_i64(lw, [lw.get(v) for v in index_ir], [v.type.dtype for v in index_ir],
                           shape)
    # a lane whose index lies outside the tensor is masked off here, so it touches no memory;
    # a checked update also reports it (the error names the kernel and the index)
    dims = [lw.dim(tensor, axis) for axis in range(t.rank)]
    flags = [in_range(lw, i, True, n) for i, n in zip(indices, dims)]
    mask = all_of(lw, flags)
    live = lw.get(op.operands[2 + t.rank]) if op.attrs["masked"] else None
    if live is not None:
        mask = lw.fn.andi(mask, live)
    site = lw.checked_sites.get(id(op))
    if site is not None:
        report_lanes(lw, site, flags, indices, dims, live)
    pointers = lw.fn.offset(lw.splat(tensor.ptr, shape),
                            element_offsets(lw, tensor, indices, shape))
    _, lw.token = lw.fn.atomic_rmw_tko(pointers, value, atomic_mode(op.attrs["mode"], t.dtype),
                                       ordering=MemoryOrdering.RELAXED, scope=MemoryScope.DEVICE,
                                       mask=mask, token=lw.token)
