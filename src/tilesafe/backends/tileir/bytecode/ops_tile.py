"""Whole-tile operations: constants, shape manipulation, matrix multiply-accumulate, ``assume``
and the tile-grid queries (block id, number of blocks).

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Any, Sequence

from ._builder_core import FunctionCore, Value, flag_bits
from .attributes import Predicate, encode_attribute
from .constants import dense_buffer
from .enums import Signedness
from .types import I32, ScalarType, TileType

__all__ = ["TileOps"]


class TileOps(FunctionCore):
    """Constants, shape operations, ``mmaf``/``mmai``, ``assume`` and grid queries."""

    def constant(self, value: Any, type_: TileType) -> Value:
        """A constant tile: ``value`` is a scalar (splat) or an array-like of ``type_.shape``."""
        index = self._module.intern_constant(dense_buffer(value, type_))
        return self._simple("constant", type_, [], attributes=[index])

    def iota(self, length: int, element: ScalarType = I32) -> Value:
        """The 1-D integer tile ``[0, 1, ..., length - 1]``."""
        if element.is_float:
            raise ValueError(f"iota produces integers, got {element}")
        return self._simple("iota", TileType(element, (length,)), [])

    def broadcast(self, src: Value, shape: Sequence[int]) -> Value:
        """Expand size-1 dimensions of ``src`` to ``shape`` (same rank)."""
        tile = self._tile(src, "broadcast operand")
        shape = tuple(shape)
        if len(shape) != tile.rank or any(
                old not in (1, new) for old, new in zip(tile.shape, shape)):
            raise ValueError(
                f"cannot broadcast {tile} to shape {shape} (same rank, size-1 dims only)")
        return self._simple("broadcast", TileType(tile.element, shape), [src])

    def reshape(self, src: Value, shape: Sequence[int]) -> Value:
        """The same elements, row-major, in a tile of ``shape``."""
        tile = self._tile(src, "reshape operand")
        result = TileType(tile.element, tuple(shape))
        if result.num_elements != tile.num_elements:
            raise ValueError(f"cannot reshape {tile} to {result}: element counts differ")
        return self._simple("reshape", result, [src])

    def permute(self, src: Value, permutation: Sequence[int]) -> Value:
        """Transpose: result dimension ``i`` is source dimension ``permutation[i]``."""
        tile = self._tile(src, "permute operand")
        permutation = tuple(int(dim) for dim in permutation)
        if sorted(permutation) != list(range(tile.rank)):
            raise ValueError(f"{permutation} is not a permutation of the dimensions of {tile}")
        result = TileType(tile.element, tuple(tile.shape[dim] for dim in permutation))
        self._use(src)
        record = self._begin("permute")
        record.writer.varint(self._type(result))
        record.writer.fixed_list(permutation, 4)
        record.writer.varint(src.index)
        return self._finish(record, [result])[0]

    def cat(self, lhs: Value, rhs: Value, dim: int) -> Value:
        """Concatenate two tiles along ``dim`` (equal in all other dimensions)."""
        left, right = self._tile(lhs, "cat lhs"), self._tile(rhs, "cat rhs")
        others_differ = any(a != b for d, (a, b) in enumerate(zip(left.shape, right.shape))
                            if d != dim)
        if (left.element != right.element or left.rank != right.rank or not 0 <= dim < left.rank
                or others_differ):
            raise ValueError(f"cannot concatenate {left} and {right} along dimension {dim}")
        shape = list(left.shape)
        shape[dim] += right.shape[dim]
        return self._simple("cat", TileType(left.element, tuple(shape)), [lhs, rhs],
                            attributes=[dim])

    def extract(self, src: Value, indices: Sequence[Value], shape: Sequence[int]) -> Value:
        """The sub-tile of ``shape`` at slice coordinates ``indices`` (rank-0 ``i32`` tiles).

        ``indices`` count slices of ``shape``, not elements; ``shape`` must divide the source.
        """
        tile = self._tile(src, "extract source")
        result = TileType(tile.element, tuple(shape))
        if result.rank != tile.rank or len(indices) != tile.rank or any(
                whole % part for whole, part in zip(tile.shape, result.shape)):
            raise ValueError(f"cannot extract {result} from {tile} with {len(indices)} indices")
        self._check_scalar_indices("extract", indices)
        return self._counted_single("extract", result, [src, *indices])

    def insert(self, src: Value, dest: Value, indices: Sequence[Value]) -> Value:
        """``dest`` with the sub-tile at slice coordinates ``indices`` set to ``src`` (13.4+)."""
        part, whole = self._tile(src, "insert source"), self._tile(dest, "insert destination")
        if part.element != whole.element or part.rank != whole.rank or len(indices) != whole.rank:
            raise ValueError(f"cannot insert {part} into {whole} with {len(indices)} indices")
        self._check_scalar_indices("insert", indices)
        return self._counted_single("insert", whole, [src, dest, *indices])

    def _check_scalar_indices(self, what: str, indices: Sequence[Value]) -> None:
        for index in indices:
            if self._int_tile(index, f"{what} index").rank != 0:
                raise ValueError(f"{what} indices must be rank-0 integer tiles, got {index.type}")

    def _counted_single(self, mnemonic: str, result: TileType, operands: Sequence[Value]) -> Value:
        """Layout ``[T]=1 (operands...)``: counted results, then total operand count."""
        self._use(*operands)
        record = self._begin(mnemonic)
        self._write_results(record, [result], counted=True)
        record.writer.varints([operand.index for operand in operands])
        return self._finish(record, [result])[0]

    def mmaf(self, lhs: Value, rhs: Value, acc: Value, *, fast_accumulation: bool = False) -> Value:
        """``lhs @ rhs + acc`` on float tiles (M x K, K x N, M x N; optionally batched).

        ``fast_accumulation`` is encoded from 13.3 on.
        """
        result = self._check_mma("mmaf", lhs, rhs, acc)
        if self.version >= (13, 3):
            return self._simple("mmaf", result, [lhs, rhs, acc], flags=flag_bits(fast_accumulation))
        if fast_accumulation:
            raise ValueError("mmaf fast accumulation requires Tile IR bytecode 13.3 or newer")
        return self._simple("mmaf", result, [lhs, rhs, acc])

    def mmai(self, lhs: Value, rhs: Value, acc: Value, *, lhs_signedness: Signedness,
             rhs_signedness: Signedness) -> Value:
        """``lhs @ rhs + acc`` on integer tiles (e.g. i8 x i8 -> i32)."""
        result = self._check_mma("mmai", lhs, rhs, acc)
        return self._simple("mmai", result, [lhs, rhs, acc],
                            attributes=[int(Signedness(lhs_signedness)),
                                        int(Signedness(rhs_signedness))])

    def _check_mma(self, mnemonic: str, lhs: Value, rhs: Value, acc: Value) -> TileType:
        a, b, c = (self._tile(v, f"{mnemonic} operand") for v in (lhs, rhs, acc))
        batch = a.shape[:-2]
        valid = (a.rank == b.rank == c.rank and a.rank in (2, 3) and b.shape[:-2] == batch
                 and c.shape[:-2] == batch and a.shape[-1] == b.shape[-2]
                 and c.shape[-2:] == (a.shape[-2], b.shape[-1]))
        if not valid:
            raise ValueError(f"{mnemonic} shapes do not match: {a} x {b} + {c}")
        return c

    def assume(self, value: Value, predicate: Predicate) -> Value:
        """``value``, with a promise the compiler may exploit; use the result afterwards."""
        self._use(value)
        record = self._begin("assume")
        record.writer.varint(self._type(value.type))
        encode_attribute(predicate, record.writer, self._module)
        record.writer.varint(value.index)
        return self._finish(record, [value.type])[0]

    def get_tile_block_id(self) -> tuple[Value, Value, Value]:
        """This tile block's coordinates (x, y, z) in the grid, as ``tile<i32>``."""
        return self._grid_query("get_tile_block_id")

    def get_num_tile_blocks(self) -> tuple[Value, Value, Value]:
        """The grid size (x, y, z), as ``tile<i32>``."""
        return self._grid_query("get_num_tile_blocks")

    def _grid_query(self, mnemonic: str) -> tuple[Value, Value, Value]:
        scalar = TileType(I32)
        record = self._begin(mnemonic)
        self._write_results(record, [scalar] * 3, counted=False)
        x, y, z = self._finish(record, [scalar] * 3)
        return x, y, z
