"""Memory operations: tensor and partition views, view and pointer loads/stores with optional
tokens and per-op hints, atomics, pointer arithmetic, tokens and module globals.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from ._builder_core import FunctionCore, OpRecord, Value, flag_bits
from .attributes import Hints, encode_hints, validate_op_hints
from .enums import AtomicMode, MemoryOrdering, MemoryScope, PaddingValue
from .types import (
    DYNAMIC, I1, I32, PartitionViewType, PointerType, ScalarType, TensorViewType, TileType, TOKEN,
    Type,
)

__all__ = ["MemoryOps"]

_LOAD_ORDERINGS = (MemoryOrdering.WEAK, MemoryOrdering.RELAXED, MemoryOrdering.ACQUIRE)
_STORE_ORDERINGS = (MemoryOrdering.WEAK, MemoryOrdering.RELAXED, MemoryOrdering.RELEASE)


class MemoryOps(FunctionCore):
    """Views, loads, stores, atomics, pointer offsets, tokens and globals."""

    # -- views -------------------------------------------------------------------------------------

    def make_tensor_view(self, base: Value, shape: Sequence[Union[int, Value]],
                         strides: Sequence[Union[int, Value]]) -> Value:
        """A tensor view of the memory at ``base`` (a ``tile<ptr<T>>``).

        Each entry of ``shape`` and ``strides`` (strides in elements) is either a static integer
        or a rank-0 integer tile supplied at run time; all run-time entries share one type.
        """
        pointer = self._tile(base, "tensor view base")
        if pointer.rank != 0 or not isinstance(pointer.element, PointerType):
            raise ValueError(f"tensor view base must be a rank-0 pointer tile, got {pointer}")
        dynamic_shape = [dim for dim in shape if isinstance(dim, Value)]
        dynamic_strides = [step for step in strides if isinstance(step, Value)]
        dynamic = dynamic_shape + dynamic_strides
        for value in dynamic:
            if self._int_tile(value, "dynamic view size").rank != 0:
                raise ValueError(
                    f"dynamic view sizes must be rank-0 integer tiles, got {value.type}")
        if dynamic:
            self._same_types("make_tensor_view sizes", *dynamic)
        view = TensorViewType(
            pointer.element.pointee,
            tuple(DYNAMIC if isinstance(dim, Value) else dim for dim in shape),
            tuple(DYNAMIC if isinstance(step, Value) else step for step in strides))
        self._use(base, *dynamic)
        record = self._begin("make_tensor_view")
        self._write_results(record, [view], counted=True)
        record.writer.varint(base.index)
        record.writer.varints([value.index for value in dynamic_shape])
        record.writer.varints([value.index for value in dynamic_strides])
        return self._finish(record, [view])[0]

    def make_partition_view(self, tensor_view: Value, tile_shape: Sequence[int], *,
                            dim_map: Optional[Sequence[int]] = None,
                            padding: Optional[PaddingValue] = None) -> Value:
        """Cut ``tensor_view`` into a grid of ``tile_shape`` tiles (:class:`PartitionViewType`)."""
        if not isinstance(tensor_view.type, TensorViewType):
            raise ValueError(f"make_partition_view needs a tensor view, got {tensor_view.type}")
        view = PartitionViewType(tuple(tile_shape), tensor_view.type,
                                 () if dim_map is None else tuple(dim_map), padding)
        return self._simple("make_partition_view", view, [tensor_view])

    def get_tensor_shape(self, tensor_view: Value, index_type: ScalarType = I32) -> list[Value]:
        """The dimensions of a tensor view, one rank-0 ``index_type`` tile each."""
        if not isinstance(tensor_view.type, TensorViewType):
            raise ValueError(f"get_tensor_shape needs a tensor view, got {tensor_view.type}")
        return self._shape_query("get_tensor_shape", tensor_view, tensor_view.type.rank, index_type)

    def get_index_space_shape(self, view: Value, index_type: ScalarType = I32) -> list[Value]:
        """The tile-grid size of a partition view, one rank-0 ``index_type`` tile per dimension."""
        if not isinstance(view.type, PartitionViewType):
            raise ValueError(f"get_index_space_shape needs a partition view, got {view.type}")
        return self._shape_query("get_index_space_shape", view, view.type.index_rank, index_type)

    def _shape_query(self, mnemonic: str, view: Value, rank: int,
                     index_type: ScalarType) -> list[Value]:
        if index_type.is_float:
            raise ValueError(f"{mnemonic} returns integers, got {index_type}")
        results = [TileType(index_type)] * rank
        self._use(view)
        record = self._begin(mnemonic)
        self._write_results(record, results, counted=True)
        record.writer.varint(view.index)
        return self._finish(record, results)

    # -- shared pieces of load/store records -------------------------------------------------------

    def _check_token(self, token: Optional[Value]) -> None:
        if token is not None and token.type != TOKEN:
            raise ValueError(f"expected a token, got {token.type}")

    def _check_ordering(self, what: str, ordering: MemoryOrdering,
                        allowed: Sequence[MemoryOrdering]) -> None:
        ordering = MemoryOrdering(ordering)
        if ordering not in allowed:
            names = ", ".join(mode.name.lower() for mode in allowed)
            raise ValueError(
                f"{what} supports memory orderings {names}; got {ordering.name.lower()}")

    def _write_memory_attributes(self, record: OpRecord, ordering: MemoryOrdering,
                                 scope: Optional[MemoryScope], hints: Optional[Hints]) -> None:
        record.writer.varint(int(MemoryOrdering(ordering)))
        if scope is not None:
            record.writer.varint(int(MemoryScope(scope)))
        if hints is not None:
            encode_hints(hints, record.writer, self._module, tagged=False)

    def _view_access(self, what: str, view: Value, indices: Sequence[Value],
                     inbounds: Optional[Sequence[bool]]) -> tuple[PartitionViewType, list[bool]]:
        if not isinstance(view.type, PartitionViewType):
            raise ValueError(f"{what} needs a partition view, got {view.type}")
        if len(indices) != view.type.index_rank:
            raise ValueError(f"{what} on {view.type} needs {view.type.index_rank} indices, "
                             f"got {len(indices)}")
        for index in indices:
            if self._int_tile(index, f"{what} index").rank != 0:
                raise ValueError(f"{what} indices must be rank-0 integer tiles, got {index.type}")
        flags = [False] * len(indices) if inbounds is None else [bool(b) for b in inbounds]
        if len(flags) != len(indices):
            raise ValueError(f"{what} inbounds needs one entry per index, got {len(flags)}")
        if any(flags) and self.version < (13, 4):
            raise ValueError("inbounds promises require Tile IR bytecode 13.4 or newer")
        return view.type, flags

    # -- view loads and stores ---------------------------------------------------------------------

    def load_view_tko(self, view: Value, indices: Sequence[Value], *, token: Optional[Value] = None,
                      ordering: MemoryOrdering = MemoryOrdering.WEAK,
                      scope: Optional[MemoryScope] = None, hints: Optional[Hints] = None,
                      inbounds: Optional[Sequence[bool]] = None) -> tuple[Value, Value]:
        """Load the tile at tile coordinates ``indices`` of a partition view.

        ``inbounds[i]`` promises index ``i`` is in bounds (13.4+; default: bounds-checked).
        ``hints`` maps an architecture to ``latency`` (1-10) and ``allow_tma`` (bool).
        Returns ``(tile, token)``.
        """
        partition, inbounds_flags = self._view_access("load_view_tko", view, indices, inbounds)
        self._check_token(token)
        self._check_ordering("load_view_tko", ordering, _LOAD_ORDERINGS)
        if hints is not None:
            validate_op_hints(hints, self.version, view_access=True)
        self._use(view, *indices, *([token] if token is not None else []))
        results: list[Type] = [partition.tile_type, TOKEN]
        record = self._begin("load_view_tko")
        self._write_results(record, results, counted=True)
        record.writer.varint(flag_bits(scope is not None, hints is not None, token is not None))
        self._write_memory_attributes(record, ordering, scope, hints)
        if self.version >= (13, 4):
            record.writer.bool_list(inbounds_flags)
        record.writer.varint(view.index)
        record.writer.varints([index.index for index in indices])
        if token is not None:
            record.writer.varint(token.index)
        tile, result_token = self._finish(record, results)
        return tile, result_token

    def store_view_tko(self, tile: Value, view: Value, indices: Sequence[Value], *,
                       token: Optional[Value] = None,
                       ordering: MemoryOrdering = MemoryOrdering.WEAK,
                       scope: Optional[MemoryScope] = None, hints: Optional[Hints] = None,
                       inbounds: Optional[Sequence[bool]] = None) -> Value:
        """Store ``tile`` at tile coordinates ``indices`` of a partition view; returns a token."""
        partition, inbounds_flags = self._view_access("store_view_tko", view, indices, inbounds)
        if tile.type != partition.tile_type:
            raise ValueError(f"store_view_tko stores {partition.tile_type}, got {tile.type}")
        self._check_token(token)
        self._check_ordering("store_view_tko", ordering, _STORE_ORDERINGS)
        if hints is not None:
            validate_op_hints(hints, self.version, view_access=True)
        self._use(tile, view, *indices, *([token] if token is not None else []))
        record = self._begin("store_view_tko")
        self._write_results(record, [TOKEN], counted=True)
        record.writer.varint(flag_bits(scope is not None, hints is not None, token is not None))
        self._write_memory_attributes(record, ordering, scope, hints)
        if self.version >= (13, 4):
            record.writer.bool_list(inbounds_flags)
        record.writer.varint(tile.index)
        record.writer.varint(view.index)
        record.writer.varints([index.index for index in indices])
        if token is not None:
            record.writer.varint(token.index)
        return self._finish(record, [TOKEN])[0]

    # -- pointer loads and stores ------------------------------------------------------------------

    def _pointee_tile(self, what: str, pointers: Value) -> TileType:
        """The type of the values ``pointers`` (a tile of pointers) point to."""
        tile = self._tile(pointers, what)
        if not isinstance(tile.element, PointerType):
            raise ValueError(f"{what} must be a tile of pointers, got {tile}")
        return tile.with_element(tile.element.pointee)

    def _check_mask(self, mask: Optional[Value], values: TileType) -> None:
        if mask is not None and mask.type != values.with_element(I1):
            raise ValueError(f"mask must be {values.with_element(I1)}, got {mask.type}")

    def load_ptr_tko(self, pointers: Value, *, mask: Optional[Value] = None,
                     padding: Optional[Value] = None, token: Optional[Value] = None,
                     ordering: MemoryOrdering = MemoryOrdering.WEAK,
                     scope: Optional[MemoryScope] = None,
                     hints: Optional[Hints] = None) -> tuple[Value, Value]:
        """Gather one element per pointer; masked-off lanes read ``padding`` (a value tile).

        Returns ``(tile, token)``.
        """
        result = self._pointee_tile("load_ptr_tko pointers", pointers)
        self._check_mask(mask, result)
        if padding is not None and padding.type != result:
            raise ValueError(f"load_ptr_tko padding must be {result}, got {padding.type}")
        self._check_token(token)
        self._check_ordering("load_ptr_tko", ordering, _LOAD_ORDERINGS)
        if hints is not None:
            validate_op_hints(hints, self.version, view_access=False)
        optional = [value for value in (mask, padding, token) if value is not None]
        self._use(pointers, *optional)
        results: list[Type] = [result, TOKEN]
        record = self._begin("load_ptr_tko")
        self._write_results(record, results, counted=False)
        record.writer.varint(flag_bits(scope is not None, hints is not None, mask is not None,
                                       padding is not None, token is not None))
        self._write_memory_attributes(record, ordering, scope, hints)
        for operand in (pointers, *optional):
            record.writer.varint(operand.index)
        tile, result_token = self._finish(record, results)
        return tile, result_token

    def store_ptr_tko(self, pointers: Value, value: Value, *, mask: Optional[Value] = None,
                      token: Optional[Value] = None,
                      ordering: MemoryOrdering = MemoryOrdering.WEAK,
                      scope: Optional[MemoryScope] = None, hints: Optional[Hints] = None) -> Value:
        """Scatter ``value`` through ``pointers`` (masked-off lanes skipped); returns a token."""
        values = self._pointee_tile("store_ptr_tko pointers", pointers)
        if value.type != values:
            raise ValueError(
                f"store_ptr_tko stores {values} through {pointers.type}, got {value.type}")
        self._check_mask(mask, values)
        self._check_token(token)
        self._check_ordering("store_ptr_tko", ordering, _STORE_ORDERINGS)
        if hints is not None:
            validate_op_hints(hints, self.version, view_access=False)
        optional = [operand for operand in (mask, token) if operand is not None]
        self._use(pointers, value, *optional)
        record = self._begin("store_ptr_tko")
        self._write_results(record, [TOKEN], counted=False)
        record.writer.varint(flag_bits(scope is not None, hints is not None, mask is not None,
                                       token is not None))
        self._write_memory_attributes(record, ordering, scope, hints)
        for operand in (pointers, value, *optional):
            record.writer.varint(operand.index)
        return self._finish(record, [TOKEN])[0]

    # -- atomics -----------------------------------------------------------------------------------

    def atomic_rmw_tko(self, pointers: Value, argument: Value, mode: AtomicMode, *,
                       ordering: MemoryOrdering, scope: MemoryScope,
                       mask: Optional[Value] = None,
                       token: Optional[Value] = None) -> tuple[Value, Value]:
        """Atomically combine ``argument`` into each pointee; returns ``(old values, token)``."""
        return self._atomic("atomic_rmw_tko", pointers, [argument], [int(AtomicMode(mode))],
                            ordering, scope, mask, token)

    def atomic_cas_tko(self, pointers: Value, compare: Value, value: Value, *,
                       ordering: MemoryOrdering, scope: MemoryScope,
                       mask: Optional[Value] = None,
                       token: Optional[Value] = None) -> tuple[Value, Value]:
        """Atomic compare-and-swap per pointer; returns ``(old values, token)``."""
        return self._atomic("atomic_cas_tko", pointers, [compare, value], [], ordering, scope,
                            mask, token)

    def _atomic(self, mnemonic: str, pointers: Value, operands: Sequence[Value],
                extra_attributes: Sequence[int], ordering: MemoryOrdering, scope: MemoryScope,
                mask: Optional[Value], token: Optional[Value]) -> tuple[Value, Value]:
        result = self._pointee_tile(f"{mnemonic} pointers", pointers)
        for operand in operands:
            if operand.type != result:
                raise ValueError(f"{mnemonic} operands must be {result}, got {operand.type}")
        self._check_mask(mask, result)
        self._check_token(token)
        optional = [operand for operand in (mask, token) if operand is not None]
        self._use(pointers, *operands, *optional)
        results: list[Type] = [result, TOKEN]
        record = self._begin(mnemonic)
        self._write_results(record, results, counted=False)
        record.writer.varint(flag_bits(mask is not None, token is not None))
        record.writer.varint(int(MemoryOrdering(ordering)))
        record.writer.varint(int(MemoryScope(scope)))
        for attribute in extra_attributes:
            record.writer.varint(attribute)
        for operand in (pointers, *operands, *optional):
            record.writer.varint(operand.index)
        old, result_token = self._finish(record, results)
        return old, result_token

    # -- pointers, tokens, globals -----------------------------------------------------------------

    def offset(self, pointers: Value, offsets: Value) -> Value:
        """Advance each pointer by an element count (signed integers, same shape)."""
        pointee = self._pointee_tile("offset base", pointers)
        offsets_tile = self._int_tile(offsets, "offset amounts")
        if offsets_tile.shape != pointee.shape:
            raise ValueError(
                f"offset amounts {offsets_tile} must have the shape of {pointers.type}")
        return self._simple("offset", pointers.type, [pointers, offsets])

    def make_token(self) -> Value:
        """A fresh token with no dependencies."""
        return self._simple("make_token", TOKEN, [])

    def join_tokens(self, tokens: Sequence[Value]) -> Value:
        """A token that depends on all ``tokens``."""
        for token in tokens:
            self._check_token(token)
        self._use(*tokens)
        record = self._begin("join_tokens")
        self._write_results(record, [TOKEN], counted=True)
        record.writer.varints([token.index for token in tokens])
        return self._finish(record, [TOKEN])[0]

    def gdc_wait(self, token: Optional[Value] = None) -> Value:
        """Wait until the grid this launch programmatically depends on has completed and its
        writes are visible (``griddepcontrol.wait``; immediate for an ordinary launch). Returns
        a token that memory accesses after the wait must depend on."""
        return self._grid_dependency("gdc_wait_tko", token)

    def gdc_launch_dependents(self, token: Optional[Value] = None) -> Value:
        """Let a launch that programmatically depends on this grid start scheduling; it still
        waits (in its own ``gdc_wait``) for this grid to complete. Returns a token."""
        return self._grid_dependency("gdc_launch_dependents_tko", token)

    def _grid_dependency(self, mnemonic: str, token: Optional[Value]) -> Value:
        self._check_token(token)
        operands = [token] if token is not None else []
        self._use(*operands)
        record = self._begin(mnemonic)
        record.writer.varint(self._type(TOKEN))
        record.writer.varints([operand.index for operand in operands])
        return self._finish(record, [TOKEN])[0]

    def get_global(self, name: str) -> Value:
        """A rank-0 pointer tile to the module global ``name``."""
        element = self._module.global_type(name).element
        if not isinstance(element, ScalarType):
            raise ValueError(f"global {name!r} does not hold scalars")
        return self._simple("get_global", TileType(PointerType(element)), [],
                            attributes=[self._module.intern_string(name)])
