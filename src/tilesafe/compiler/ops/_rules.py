"""Small type-rule helpers shared by the op declarations (operand checks, attr access)."""

from __future__ import annotations

from typing import Sequence

from ...errors import CompileError, DTypeError, ShapeError
from ..types import IRType, TileType


def tiles(op: str, types: Sequence[IRType], count: int) -> tuple[TileType, ...]:
    """Check that there are ``count`` operands and that each is a tile."""
    if len(types) != count:
        raise CompileError(f"{op} takes {count} operand(s), got {len(types)}")
    for t in types:
        if not isinstance(t, TileType):
            raise CompileError(f"{op} expects tiles, got {t}")
    return tuple(types)  # type: ignore[return-value]


def arithmetic(op: str, t: TileType) -> None:
    """Refuse arithmetic on the storage-and-mma types (f8e4m3fn, f8e5m2, tf32): Tile IR has
    no arithmetic, comparison or reduction on them."""
    if not t.dtype.arithmetic:
        short = t.dtype.short
        raise DTypeError(f"{op} does not accept {short} tiles: {short} is a storage and mma "
                         "type, with no arithmetic, comparison or reduction",
                         hint="convert to f32 first, e.g. x.astype(tc.f32); use mma for "
                         f"products of {short} tiles")


def same_type(op: str, types: Sequence[TileType]) -> TileType:
    """All operands have one tile type (the builder has already broadcast them)."""
    first = types[0]
    for t in types[1:]:
        if t.dtype is not first.dtype:
            raise DTypeError(f"{op}: element types differ ({first.dtype.short} and "
                             f"{t.dtype.short})", hint="convert one operand with .astype(...)")
        if t.shape != first.shape:
            raise ShapeError(f"{op}: shapes differ ({first.shape} and {t.shape})")
    return first


def normalize_axis(op: str, axis: int, rank: int) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise CompileError(f"{op}: axis must be a compile-time integer, got {axis!r}")
    if not -rank <= axis < rank:
        raise ShapeError(f"{op}: axis {axis} is out of range for a rank-{rank} tile",
                         hint=f"use an axis in [{-rank}, {rank - 1}]")
    return axis % rank
