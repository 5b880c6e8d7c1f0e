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
from ..bytecode import I1, I32, I64, ComparisonPredicate, IntegerAttr, Signedness, TileType, Value
from .arith import convert
from .checks import all_of, as_i64, in_range, report_unless
from .context import LoweringContext, TensorArg, lowers, memory_type

_I64_MIN = -(1 << 63)


def _splat(lw: LoweringContext, scalar: Value, shape: Sequence[int]) -> Value:
    if not shape:
        return scalar
    return lw.fn.broadcast(lw.fn.reshape(scalar, (1,) * len(shape)), tuple(shape))


def _i32(lw: LoweringContext, value) -> Value:
    return lw.i32(value) if isinstance(value, int) else value


def _reduce_i64(lw: LoweringContext, tile: Value, largest: bool) -> Value:
    """The maximum (``largest``) or minimum of an i64 tile, as a scalar."""
    fn = lw.fn
    if not tile.type.shape:
        return tile
    size = 1
    for d in tile.type.shape:
        size *= d
    flat = fn.reshape(tile, (size,)) if len(tile.type.shape) != 1 else tile
    identity = IntegerAttr(_I64_MIN if largest else -_I64_MIN - 1, I64)

    def body(e: Value, acc: Value) -> None:
        pick = fn.maxi if largest else fn.mini
        fn.yield_([pick(e, acc, signedness=Signedness.SIGNED)])

    (result,) = fn.reduce([flat], 0, [identity], body)
    return result


@lowers("gather")
def lower_gather(lw: LoweringContext, op: Operation) -> None:
    fn = lw.fn
    x, *indices = lw.operands(op)
    tensor: TensorArg = x
    index_dtypes: list[DType] = [v.type.dtype for v in op.operands[1:]]
    dtype: DType = tensor.dtype
    shape = tuple(op.result.type.shape)
    wide = [as_i64(lw, i, d.is_signed) for i, d in zip(indices, index_dtypes)]
    dims = [_i32(lw, d) for d in tensor.dims]
    flags = [in_range(lw, i, d.is_signed, n) for i, d, n in zip(indices, index_dtypes, dims)]
    mask = all_of(lw, flags) if flags else None
    offset = None
    for i, stride in zip(wide, tensor.strides):
        s = fn.constant(int(stride), TileType(I64)) if isinstance(stride, int) else \
            fn.exti(stride, I64, signedness=Signedness.SIGNED)
        term = fn.muli(i, _splat(lw, s, shape))
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
    if site is not None and mask is not None:
        report_lanes(lw, site, flags, wide, dims)
    lw.set_result(op, convert(lw, tile, dt.int8, dt.bool_) if dtype.is_bool else tile)


def report_lanes(lw: LoweringContext, site: int, flags: Sequence[Value], wide: Sequence[Value],
                 dims: Sequence[Value], live: Optional[Value] = None) -> None:
    """Report a tile access whose lanes failed their check: ``flags`` per axis (i1 tiles:
    the lane's index on that axis is in range), ``wide`` the indices (i64 tiles), ``dims`` the
    extents (i32 scalars), ``live`` the lanes that access memory (all if None). Per axis the
    largest offending index is recorded."""
    fn = lw.fn
    shape = tuple(wide[0].type.shape)
    if not shape:  # scalars: the flags themselves
        ok = all_of(lw, [fn.ori(f, fn.xori(live, fn.constant(True, TileType(I1))))
                         if live is not None else f for f in flags])
        axes = [(fn.xori(f, fn.constant(True, TileType(I1))), i, n)
                for f, i, n in zip(flags, wide, dims)]
        report_unless(lw, site, ok, axes)
        return
    lowest = fn.constant(_I64_MIN, TileType(I64, shape))
    axes, any_bad = [], None
    for flag, i, n in zip(flags, wide, dims):
        bad_lanes = fn.xori(flag, fn.constant(True, TileType(I1, shape)))
        if live is not None:
            bad_lanes = fn.andi(bad_lanes, live)
        worst = _reduce_i64(lw, fn.select(bad_lanes, i, lowest), True)
        bad = fn.cmpi(ComparisonPredicate.NE, worst, fn.constant(_I64_MIN, TileType(I64)),
                      signedness=Signedness.SIGNED)
        axes.append((bad, worst, n))
        any_bad = bad if any_bad is None else fn.ori(any_bad, bad)
    report_unless(lw, site, fn.xori(any_bad, fn.constant(True, TileType(I1))), axes)
