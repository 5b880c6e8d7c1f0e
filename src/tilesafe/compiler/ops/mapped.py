"""Mapped partitions: one tile program owns several output tiles.

A ``tc.MappedPartitionMut`` is iterated with ``for idx in z.iter_indices():``, which lowers to a
``for`` loop over *tile ids* ``block_id.x, block_id.x + num_blocks.x, ...`` below the tile count;
each id is mapped to tile coordinates by the partition's schedule (``mapped_index``), a bijection
of ``[0, count)`` onto the tile grid, so programs own disjoint tile sets. ``map_shape`` groups
the grid: ``(1, 1)`` is row-major; ``(GM, 1)`` walks bands of GM tile rows column by column
(the classic grouped GEMM order); ``(GM, GN)`` walks GM x GN blocks inside each band. A rank-3
grid decomposes its leading axis row-major and groups the trailing two.

Indices are *branded*: their type names the partition that minted them, and ``z.store(tile,
idx)`` accepts only ``z``'s own indices — not block ids, arithmetic, or another partition's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes as dt
from ...errors import CompileError, DTypeError, SafetyError, ShapeError
from ..builder import describe
from ..ir import Value
from ..registry import builtin, op
from ..types import MappedPartitionType, PartitionIndexType, TileType
from .memory import access_hints, load_tile, store_tile, stored_tile


def mapped_coords(tile_id: int, grid: tuple[int, ...], map_shape: tuple[int, ...]):
    """The tile coordinates of ``tile_id`` under the grouped schedule (pure integer math, the
    same formula every backend emits)."""
    if len(grid) == 1:
        return (tile_id,)
    n_m, n_n = grid[-2], grid[-1]
    per_plane = n_m * n_n
    lead, t = divmod(tile_id, per_plane)
    gm, gn = map_shape[-2], map_shape[-1]
    band = gm * n_n
    group = t // band
    first_m = group * gm
    rows = min(n_m - first_m, gm)
    in_band = t - group * band
    cap = rows * gn
    n = (in_band // cap) * gn + (in_band % cap) // rows
    m = first_m + (in_band % cap) % rows
    if len(grid) == 2:
        return (m, n)
    return (lead, m, n)


def _mapped(types, what):
    z = types[0]
    if not isinstance(z, MappedPartitionType):
        raise CompileError(f"{what} needs a tc.MappedPartitionMut, got {z}")
    return z


def _check_index(z: MappedPartitionType, idx, what: str) -> None:
    if not isinstance(idx, PartitionIndexType):
        raise SafetyError(f"{what} requires an index produced by this partition's "
                          f"iter_indices(), got {idx} (safety rule 3)",
                          hint=f"write 'for idx in {z.brand}.iter_indices():' and pass idx")
    if idx.brand != z.brand:
        raise SafetyError(f"{what}: the index was produced by the mapped partition "
                          f"'{idx.brand}', not by '{z.brand}' (safety rule 3)",
                          hint=f"iterate {z.brand}.iter_indices() to get its own indices")


op("mapped_count", "The number of tiles of a mapped partition (product of its tile grid).",
   lambda types, attrs: (_mapped(types, "mapped_count") and TileType(dt.int32, ()),),
   lambda ctx, attrs, z: np.int32(int(np.prod(z.grid()))))


def _index_rule(types, attrs):
    z = _mapped(types, "iter_indices")
    tile_id = types[1]
    if not (isinstance(tile_id, TileType) and tile_id.is_scalar and tile_id.dtype.is_int):
        raise DTypeError(f"a tile id must be an integer scalar, got {tile_id}")
    return (PartitionIndexType(z.rank, z.brand),)


op("mapped_index", "Map a tile id to tile coordinates by the partition's schedule.",
   _index_rule, lambda ctx, attrs, z, t: mapped_coords(int(t), z.grid(), z.map_shape))


def _coord_rule(types, attrs):
    (idx,) = types
    if not isinstance(idx, PartitionIndexType):
        raise CompileError(f"coords() needs a partition index, got {idx}")
    if not 0 <= attrs["axis"] < idx.rank:
        raise ShapeError(f"partition index axis {attrs['axis']} out of range")
    return (TileType(dt.int32, ()),)


op("index_coord", "One tile coordinate (i32) of a partition index.", _coord_rule,
   lambda ctx, attrs, idx: np.int32(idx[attrs["axis"]]))


def _store_rule(types, attrs):
    z = _mapped(types, "store")
    tile, idx = types[1], types[2]
    _check_index(z, idx, "store")
    if tile != z.tile_type:
        raise ShapeError(f"store: tile {tile} does not match the partition's {z.tile_type}")
    return ()


op("mapped_store", "Store a tile at an owned index of a mapped partition (masked at the edge).",
   _store_rule, lambda ctx, attrs, z, tile, idx: store_tile(ctx, z, idx, z.tile_shape, tile),
   effect="write")


def _load_rule(types, attrs):
    z = _mapped(types, "load")
    _check_index(z, types[1], "load")
    return (z.tile_type,)


op("mapped_load", "Load the tile at an owned index of a mapped partition (padded at the edge).",
   _load_rule, lambda ctx, attrs, z, idx: load_tile(ctx, z, idx, z.tile_shape, what="mapped"),
   effect="read")


@dataclass(frozen=True)
class IndexStream:
    """What ``z.iter_indices()`` evaluates to in the front end: only a for loop may use it."""

    partition: Value

    def loop(self, b) -> tuple:
        """The schedule as a loop: ``(lower, upper, step, bind)``, where ``bind`` maps the
        induction variable to a partition index. Tile ids run from this block's id, strided by
        the number of blocks, up to the number of owned-tile slots; ``mapped_index`` turns an
        id into the coordinates of a tile this program owns."""
        first = b.emit1("tile_block_id", (), {"axis": 0})
        stride = b.emit1("num_tile_blocks", (), {"axis": 0})
        count = b.emit1("mapped_count", (self.partition,))
        return first, count, stride, lambda iv: b.emit1("mapped_index", (self.partition, iv))


def _index_arg(b, z, idx) -> Value:
    if not isinstance(idx, Value):
        raise b.error(SafetyError, f"a mapped partition needs an index produced by its "
                      f"iter_indices(), got {describe(idx)} (safety rule 3)",
                      f"write 'for idx in {z.type.brand}.iter_indices():' and pass idx")
    return idx


def _build_iter_indices(b, z):
    """z.iter_indices() -> iterable of partition indices

    The output tiles this program owns, in schedule order. Use it only as a for-loop iterable:
    ``for idx in z.iter_indices(): ... z.store(tile, idx)``.
    """
    return IndexStream(z)


def _build_store(b, z, tile, idx=None, *, latency=None, allow_tma=None):
    """z.store(tile, idx, *, latency=None, allow_tma=None)

    Store ``tile`` at the owned index ``idx`` (from ``z.iter_indices()``; anything else is a
    SafetyError). The tile's dtype must equal the partition's; edge tiles are masked.
    """
    if idx is None:
        raise b.error(SafetyError, "a mapped partition stores at an index from its "
                      "iter_indices(): z.store(tile, idx)", "iterate z.iter_indices()")
    v = stored_tile(b, tile, z.type.dtype, z.type.tile_shape)
    b.emit("mapped_store", (z, v, _index_arg(b, z, idx)), access_hints(b, latency, allow_tma))


def _build_load(b, z, idx, *, latency=None, allow_tma=None):
    """z.load(idx, *, latency=None, allow_tma=None) -> tile

    Load the tile at the owned index ``idx`` (from ``z.iter_indices()``).
    """
    return b.emit1("mapped_load", (z, _index_arg(b, z, idx)), access_hints(b, latency, allow_tma))


def _build_coords(b, idx):
    """idx.coords() -> tuple of i32

    The tile coordinates of a partition index, e.g. ``m, n = idx.coords()``; use them to load
    the matching input tiles.
    """
    return tuple(b.emit1("index_coord", (idx,), {"axis": a}) for a in range(idx.type.rank))


builtin("mapped_iter_indices", _build_iter_indices.__doc__, _build_iter_indices,
        methods=(("mapped", "iter_indices"),), public=False)
builtin("mapped_partition_store", _build_store.__doc__, _build_store,
        methods=(("mapped", "store"),), public=False)
builtin("mapped_partition_load", _build_load.__doc__, _build_load,
        methods=(("mapped", "load"),), public=False)
builtin("partition_index_coords", _build_coords.__doc__, _build_coords,
        methods=(("index", "coords"),), public=False)
