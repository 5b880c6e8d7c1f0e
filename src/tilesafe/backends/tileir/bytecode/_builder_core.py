"""The machinery shared by all operation emitters of a function body.

It owns SSA values and their numbering (parameters, then results in order; block arguments and
block-local results are numbered after the enclosing values and the numbering rolls back when a
block closes; a region-holding op's results are numbered after its regions), value visibility,
the generic op-record writer (opcode, results, flags, attributes, operands, regions), terminator
rules and the per-op source-location references of the Debug section (pre-order). Nothing is
committed to a block until an op record is complete, so an error leaves the builder usable.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Protocol, Sequence

from ._encoding import ByteWriter
from .debuginfo import UNKNOWN_LOCATION, DebugAttributeTable, SourceLocation
from .opcodes import Version, opcode_for
from .types import FunctionType, ScalarType, TileType, Type

__all__ = ["Value", "Block", "ModuleContext", "FunctionCore", "OpRecord", "RegionBody", "flag_bits"]

#: A callback that fills a block: it receives the block arguments and must emit a terminator.
RegionBody = Callable[..., None]

_TERMINATORS = frozenset({"return", "yield", "continue", "break"})


def flag_bits(*bits: bool) -> int:
    """The value of an op's flags varint whose bit ``i`` is ``bits[i]``."""
    return sum(1 << position for position, bit in enumerate(bits) if bit)


class ModuleContext(Protocol):
    """What a function body needs from its module."""

    version: Version
    debug: DebugAttributeTable

    def intern_string(self, text: str) -> int:
        """Index of ``text`` in the String section."""

    def intern_type(self, type_: Type) -> int:
        """Index of ``type_`` in the Type section."""

    def intern_constant(self, raw: bytes) -> int:
        """Index of a dense buffer in the Constant section."""

    def global_type(self, name: str) -> TileType:
        """The value type of the module global ``name``."""


class Block:
    """A block being filled: its encoded ops, their location refs and whether it is terminated."""

    __slots__ = ("kind", "ops", "op_count", "location_refs", "terminated", "yield_types",
                 "break_types")

    def __init__(self, kind: str, yield_types: Sequence[Type] = (),
                 break_types: Sequence[Type] = ()) -> None:
        self.kind = kind
        self.ops = ByteWriter()
        self.op_count = 0
        self.location_refs: list[int] = []
        self.terminated = False
        self.yield_types = tuple(yield_types)
        self.break_types = tuple(break_types)


class Value:
    """An SSA value of one function: a parameter, an operation result or a block argument."""

    __slots__ = ("index", "type", "_block")

    def __init__(self, index: int, type_: Type, block: Block) -> None:
        self.index = index
        self.type = type_
        self._block = block

    def __repr__(self) -> str:
        return f"Value(%{self.index}: {self.type})"


class OpRecord:
    """One operation being encoded; committed to the current block by ``_finish``."""

    __slots__ = ("mnemonic", "writer", "location_refs")

    def __init__(self, mnemonic: str, writer: ByteWriter, location_refs: list[int]) -> None:
        self.mnemonic = mnemonic
        self.writer = writer
        self.location_refs = location_refs


class FunctionCore:
    """State and record-writing helpers of one entry function under construction."""

    def __init__(self, module: ModuleContext, name: str, signature: FunctionType,
                 location: Optional[SourceLocation]) -> None:
        self._module = module
        self.name = name
        self.signature = signature
        self.version: Version = module.version
        self._root = Block("function")
        self._blocks: list[Block] = [self._root]
        self.params: tuple[Value, ...] = tuple(
            Value(index, type_, self._root) for index, type_ in enumerate(signature.inputs))
        self._next_index = len(self.params)
        self._subprogram: Optional[int] = None
        self._function_location_ref = UNKNOWN_LOCATION
        self._location = location
        if location is not None:
            self._subprogram = module.debug.subprogram(name, location)
            self._function_location_ref = module.debug.location(self._subprogram, location)

    # -- public state ------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Whether the body has been closed by ``return_``."""
        return self._root.terminated

    @property
    def body(self) -> bytes:
        """The encoded body (flat op sequence); available once the function is finished."""
        if not self.finished:
            raise ValueError(f"function {self.name!r} has no return yet")
        return self._root.ops.to_bytes()

    @property
    def location_refs(self) -> Optional[list[int]]:
        """Debug refs (function, then ops in pre-order), or ``None`` without debug info."""
        if self._subprogram is None:
            return None
        return [self._function_location_ref, *self._root.location_refs]

    def set_location(self, location: Optional[SourceLocation]) -> None:
        """Source position attached to the operations emitted from now on (``None``: unknown).

        Only recorded when the function was created with a location.
        """
        self._location = location

    # -- helpers for op emitters -------------------------------------------------------------------

    def _type(self, type_: Type) -> int:
        return self._module.intern_type(type_)

    def _use(self, *values: Value) -> None:
        """Check that ``values`` are visible at the current insertion point."""
        for value in values:
            if not isinstance(value, Value):
                raise TypeError(f"expected a Value, got {value!r}")
            if not any(value._block is block for block in self._blocks):
                raise ValueError(f"{value!r} is not visible here (defined in a closed block or "
                                 "another function)")

    def _tile(self, value: Value, what: str) -> TileType:
        if not isinstance(value.type, TileType):
            raise ValueError(f"{what} must be a tile, got {value.type}")
        return value.type

    def _float_tile(self, value: Value, what: str) -> TileType:
        tile = self._tile(value, what)
        if not (isinstance(tile.element, ScalarType) and tile.element.is_float):
            raise ValueError(f"{what} must be a float tile, got {tile}")
        return tile

    def _int_tile(self, value: Value, what: str) -> TileType:
        tile = self._tile(value, what)
        if not (isinstance(tile.element, ScalarType) and not tile.element.is_float):
            raise ValueError(f"{what} must be an integer tile, got {tile}")
        return tile

    def _same_types(self, what: str, *values: Value) -> Type:
        first = values[0].type
        if any(value.type != first for value in values[1:]):
            types = ", ".join(str(value.type) for value in values)
            raise ValueError(f"{what} operands must have the same type, got {types}")
        return first

    def _terminator_target(self, mnemonic: str) -> Block:
        """The block whose contract a terminator fulfils; raises if it is misplaced."""
        current = self._blocks[-1]
        if mnemonic == "return":
            if current is not self._root:
                raise ValueError("'return' is only allowed at the top level of a function body")
            return current
        if mnemonic == "yield":
            if current.kind not in ("if", "reduce", "scan"):
                raise ValueError(f"'yield' cannot terminate a {current.kind} body")
            return current
        loop_kinds = ("for", "loop") if mnemonic == "continue" else ("loop",)
        for block in reversed(self._blocks):
            if block.kind in loop_kinds:
                return block
            if block.kind != "if":
                break
        raise ValueError(f"{mnemonic!r} must be inside a {' or '.join(loop_kinds)} body "
                         "(possibly nested in if)")

    def _begin(self, mnemonic: str) -> OpRecord:
        """Start an op record: check placement, write the opcode, take the location ref."""
        block = self._blocks[-1]
        if block.terminated:
            raise ValueError(f"cannot add {mnemonic!r}: the current block is already terminated")
        if mnemonic in _TERMINATORS:
            self._terminator_target(mnemonic)
        writer = ByteWriter()
        writer.varint(opcode_for(mnemonic, self.version))
        refs = []
        if self._subprogram is not None:
            refs.append(UNKNOWN_LOCATION if self._location is None else
                        self._module.debug.location(self._subprogram, self._location))
        return OpRecord(mnemonic, writer, refs)

    def _finish(self, record: OpRecord, result_types: Sequence[Type]) -> list[Value]:
        """Commit ``record`` to the current block and number its results."""
        block = self._blocks[-1]
        block.ops.raw(record.writer.to_bytes())
        block.op_count += 1
        block.location_refs += record.location_refs
        if record.mnemonic in _TERMINATORS:
            block.terminated = True
        results = [Value(self._next_index + i, type_, block)
                   for i, type_ in enumerate(result_types)]
        self._next_index += len(results)
        return results

    def _write_results(self, record: OpRecord, result_types: Iterable[Type], *,
                       counted: bool) -> None:
        indices = [self._type(type_) for type_ in result_types]
        if counted:
            record.writer.varints(indices)
        else:
            for index in indices:
                record.writer.varint(index)

    def _write_region(self, record: OpRecord, block: Block, arg_types: Sequence[Type],
                      body: RegionBody) -> None:
        """Fill one single-block region by running ``body`` and append it to ``record``."""
        saved_index = self._next_index
        args = [Value(saved_index + i, type_, block) for i, type_ in enumerate(arg_types)]
        self._next_index += len(args)
        self._blocks.append(block)
        try:
            body(*args)
        finally:
            self._blocks.pop()
            self._next_index = saved_index
        if not block.terminated:
            raise ValueError(f"the {block.kind} body must end with a terminator "
                             "(yield, continue, break)")
        writer = record.writer
        writer.varint(1)  # blocks in the region
        writer.varints([self._type(type_) for type_ in arg_types])
        writer.varint(block.op_count)
        writer.raw(block.ops.to_bytes())
        record.location_refs += block.location_refs

    def _simple(self, mnemonic: str, result_type: Type, operands: Sequence[Value], *,
                flags: Optional[int] = None, attributes: Sequence[int] = ()) -> Value:
        """Emit the common layout: one result type, optional flags, varint attributes, operands."""
        self._use(*operands)
        record = self._begin(mnemonic)
        writer = record.writer
        writer.varint(self._type(result_type))
        if flags is not None:
            writer.varint(flags)
        for attribute in attributes:
            writer.varint(attribute)
        for operand in operands:
            writer.varint(operand.index)
        return self._finish(record, [result_type])[0]

    def _terminator(self, mnemonic: str, values: Sequence[Value]) -> None:
        """Emit ``yield``/``continue``/``break``/``return`` after checking the value types."""
        values = list(values)
        self._use(*values)
        target = self._terminator_target(mnemonic)
        expected = target.break_types if mnemonic == "break" else target.yield_types
        got = tuple(value.type for value in values)
        if got != expected:
            raise ValueError(f"{mnemonic!r} in a {target.kind} body must pass values of types "
                             f"({', '.join(map(str, expected))}), got ({', '.join(map(str, got))})")
        record = self._begin(mnemonic)
        record.writer.varint(0)  # counted results: none
        record.writer.varints([value.index for value in values])
        self._finish(record, [])
