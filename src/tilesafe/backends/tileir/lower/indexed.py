"""Tile IR lowering of ``gather`` (``compiler/ops/indexed.py``): a masked pointer load.

Each lane's address is the tensor's base plus the sum of index times stride over the axes,
computed in 64 bits; a lane whose index lies outside the tensor on any axis is masked off and
reads the padding (``padding=``, else zero), so no memory outside the tensor is read. A checked
gather (``compiler.bounds``) then reports, unless every lane was inside, the largest offending
index per axis to the kernel's fault record (``lower/checks.py``). A gather reads a shared
tensor: it takes the grid-dependency gate as its token, never the chain of mutable accesses.

Imports the ``bytecode`` package and its sibling lowering modules only.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....dtypes import DType
from ..bytecode import I1, I64, ComparisonPredicate, Signedness, TileType, Value
from .arith import convert
from .checks import all_of, all_true, as_i64, in_range, reduce_i64, report_unless
from .context import LoweringContext, TensorArg, lowers, memory_type

_I64_MIN = -(1 << 63)


def _splat(lw: LoweringContext, value: Value, shape: Sequence[int]) -> Value:
    """``value`` (a scalar, or a tile of ``shape``'s rank with extents 1 or equal) broadcast to
    ``shape``."""
    shape = tuple(shape)
    if tuple(value.type.shape) == shape:
        return value
    if not value.type.shape:
        value = lw.fn.reshape(value, (1,) * len(shape)) if shape else value
    return lw.fn.broadcast(value, shape) if shape else value


def _i32(lw: LoweringContext, value) -> Value:
    return lw.i32(value) if isinstance(value, int) else value


@lowers("gather")
def lower_gather(lw: LoweringContext, op: Operation) -> None:
    """Each index keeps its own extents (it broadcasts to the result): it is checked and
    scaled by its stride at those extents, then broadcast, so an ``(n, 1)`` row index costs
    ``n`` compares, not ``n * d``. The failure report's reductions run only on failure."""
    fn = lw.fn
    x, *indices = lw.operands(op)
    tensor: TensorArg = x
    index_dtypes: list[DType] = [v.type.dtype for v in op.operands[1:]]
    dtype: DType = tensor.dtype
    shape = tuple(op.result.type.shape)
    wide = [as_i64(lw, i, d.is_signed) for i, d in zip(indices, index_dtypes)]
    dims = [_i32(lw, d) for d in tensor.dims]
    flags = [in_range(lw, i, d.is_signed, n) for i, d, n in zip(indices, index_dtypes, dims)]
    mask = None
    for flag in flags:
        full = _splat(lw, flag, shape)
        mask = full if mask is None else fn.andi(mask, full)
    offset = None
    for i, stride in zip(wide, tensor.strides):
        if isinstance(stride, int) and stride == 1:
            term = i
        else:
            s = fn.constant(int(stride), TileType(I64)) if isinstance(stride, int) else \
                fn.exti(stride, I64, signedness=Signedness.SIGNED)
            term = fn.muli(i, _splat(lw, s, i.type.shape))
        term = _splat(lw, term, shape)
        offset = term if offset is None else fn.addi(offset, term)
    base = _splat(lw, tensor.ptr, shape)
    pointers = fn.offset(base, offset) if offset is not None else base
    fill = op.attrs.get("padding_value", 0)
    padding = None
    if mask is not None:
        padding = (fn.constant(int(bool(fill)), TileType(memory_type(dtype), shape))
                   if dtype.is_bool else lw.constant(fill, dtype, shape))
    tile, _ = fn.load_ptr_tko(pointers, mask=mask, padding=padding, token=lw.gate)
    site = lw.checked_sites.get(id(op))
    if site is not None and flags:
        report_lanes(lw, site, flags, wide, dims)
    lw.set_result(op, convert(lw, tile, dt.int8, dt.bool_) if dtype.is_bool else tile)


def report_lanes(lw: LoweringContext, site: int, flags: Sequence[Value], wide: Sequence[Value],
                 dims: Sequence[Value], live: Optional[Value] = None) -> None:
    """Report a tile access whose lanes failed their check: ``flags`` per axis (i1 tiles:
    the lane's index on that axis is in range), ``wide`` the indices (i64 tiles, each of its
    flag's shape), ``dims`` the extents (i32 scalars), ``live`` the lanes that access memory
    (all if None; of the shape the indices broadcast to). The test is one reduction per axis;
    the largest offending index per axis is found only when it fails."""
    fn = lw.fn
    true = fn.constant(True, TileType(I1))

    def bad_lanes(flag: Value) -> Value:
        bad = fn.xori(flag, _splat(lw, true, flag.type.shape))
        if live is not None:
            shape = tuple(live.type.shape)
            bad = fn.andi(_splat(lw, bad, shape), live)
        return bad

    passed = []
    for flag in flags:
        bad = bad_lanes(flag)
        passed.append(all_true(lw, fn.xori(bad, _splat(lw, true, bad.type.shape))))
    ok = all_of(lw, passed)

    def axes() -> list:
        out = []
        for flag, i, n in zip(flags, wide, dims):
            bad = bad_lanes(flag)
            shape = tuple(bad.type.shape)
            lowest = fn.constant(_I64_MIN, TileType(I64, shape))
            worst = reduce_i64(lw, fn.select(bad, _splat(lw, i, shape), lowest), True)
            failed = fn.cmpi(ComparisonPredicate.NE, worst,
                             fn.constant(_I64_MIN, TileType(I64)), signedness=Signedness.SIGNED)
            out.append((failed, worst, n))
        return out

    report_unless(lw, site, ok, axes)
