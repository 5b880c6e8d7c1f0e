"""Region-holding operations (``for``, ``loop``, ``if``, ``reduce``, ``scan``), their
terminators (``yield``, ``continue``, ``break``, ``return``) and the side-effecting debugging
operations ``assert`` and ``print_tko``.

Region bodies are callbacks: they receive the block arguments as :class:`Value` s, emit the
body's operations on the same builder and must end with the matching terminator. The results of
the region-holding op are returned once its regions are closed.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from ._builder_core import Block, FunctionCore, RegionBody, Value, flag_bits
from ._encoding import ByteWriter
from .attributes import FloatAttr, IntegerAttr, encode_attribute
from .opcodes import check_version
from .types import I1, TOKEN, ScalarType, TileType, Type

__all__ = ["ControlFlowOps"]

Identity = Union[int, float, bool, IntegerAttr, FloatAttr]


class ControlFlowOps(FunctionCore):
    """Structured control flow, reductions and scans, terminators, ``assert`` and ``print_tko``."""

    # -- loops and conditionals --------------------------------------------------------------------

    def for_(self, lower: Value, upper: Value, step: Value, init: Sequence[Value],
             body: RegionBody, *, unsigned_compare: bool = False) -> list[Value]:
        """Counted loop over ``[lower, upper)`` by ``step`` (rank-0 integer tiles of one type).

        ``body(induction_variable, *carried)`` runs per iteration and must end with
        ``continue_(new_carried)``. Returns the final carried values. ``unsigned_compare`` (13.2+)
        compares the bounds as unsigned.
        """
        bound_type = self._same_types("for bounds", lower, upper, step)
        if self._int_tile(lower, "for bound").rank != 0:
            raise ValueError(f"for bounds must be rank-0 integer tiles, got {bound_type}")
        init = list(init)
        carried = [value.type for value in init]
        self._use(lower, upper, step, *init)
        record = self._begin("for")
        self._write_results(record, carried, counted=True)
        if self.version >= (13, 2):
            record.writer.varint(flag_bits(unsigned_compare))
        elif unsigned_compare:
            check_version(self.version, (13, 2), "an unsigned for loop")
        record.writer.varints([value.index for value in (lower, upper, step, *init)])
        record.writer.varint(1)  # regions
        self._write_region(record, Block("for", yield_types=carried), [bound_type, *carried], body)
        return self._finish(record, carried)

    def loop(self, init: Sequence[Value], body: RegionBody, *,
             result_types: Sequence[Type] = ()) -> list[Value]:
        """Loop until ``break_``: ``body(*carried)`` ends with ``continue_(new_carried)`` or
        ``break_(results)`` (possibly inside ``if_``). Returns the values passed to ``break_``."""
        init = list(init)
        carried = [value.type for value in init]
        results = list(result_types)
        self._use(*init)
        record = self._begin("loop")
        self._write_results(record, results, counted=True)
        record.writer.varints([value.index for value in init])
        record.writer.varint(1)  # regions
        self._write_region(record, Block("loop", yield_types=carried, break_types=results),
                           carried, body)
        return self._finish(record, results)

    def if_(self, condition: Value, then_body: RegionBody,
            else_body: Optional[RegionBody] = None, *,
            result_types: Sequence[Type] = ()) -> list[Value]:
        """Two-way branch on a ``tile<i1>``. Both bodies take no arguments and end with
        ``yield_(values of result_types)`` (or ``continue_``/``break_`` of an enclosing loop).
        Without ``else_body`` (only when there are no results) the else branch just yields."""
        if condition.type != TileType(I1):
            raise ValueError(f"if condition must be tile<i1>, got {condition.type}")
        results = list(result_types)
        if else_body is None:
            if results:
                raise ValueError("an if with results needs an else body")
            else_body = self.yield_
        self._use(condition)
        record = self._begin("if")
        self._write_results(record, results, counted=True)
        record.writer.varint(condition.index)
        record.writer.varint(2)  # regions: then, else
        self._write_region(record, Block("if", yield_types=results), [], then_body)
        self._write_region(record, Block("if", yield_types=results), [], else_body)
        return self._finish(record, results)

    # -- reductions and scans ----------------------------------------------------------------------

    def reduce(self, operands: Sequence[Value], dim: int, identities: Sequence[Identity],
               body: RegionBody) -> list[Value]:
        """Reduce tiles of one shape along ``dim`` (removed from the result shapes).

        ``body(element_0, accumulator_0, element_1, accumulator_1, ...)`` receives rank-0 tiles
        and ends with ``yield_(new accumulators)``; ``identities[i]`` is the identity of operand
        ``i`` (a number, or an :class:`IntegerAttr`/:class:`FloatAttr` of its element type).
        """
        tiles = self._combinable("reduce", operands, dim, identities)
        results = [TileType(t.element, t.shape[:dim] + t.shape[dim + 1:]) for t in tiles]
        return self._combine("reduce", operands, tiles, dim, identities, body, results,
                             reverse=None)

    def scan(self, operands: Sequence[Value], dim: int, identities: Sequence[Identity],
             body: RegionBody, *, reverse: bool = False) -> list[Value]:
        """Inclusive prefix combination along ``dim``; results have the operand types.

        The body is as for :meth:`reduce`; ``reverse`` scans from the last index down.
        """
        tiles = self._combinable("scan", operands, dim, identities)
        return self._combine("scan", operands, tiles, dim, identities, body, list(tiles),
                             reverse=reverse)

    def _combinable(self, mnemonic: str, operands: Sequence[Value], dim: int,
                    identities: Sequence[Identity]) -> list[TileType]:
        tiles = [self._tile(value, f"{mnemonic} operand") for value in operands]
        if any(not isinstance(t.element, ScalarType) for t in tiles):
            raise ValueError(f"{mnemonic} operands must be tiles of scalars")
        if not tiles or len(identities) != len(tiles):
            raise ValueError(f"{mnemonic} needs at least one operand and one identity per operand")
        if any(t.shape != tiles[0].shape for t in tiles) or not 0 <= dim < tiles[0].rank:
            raise ValueError(f"{mnemonic} operands must share a shape with dimension {dim}")
        return tiles

    def _identity(self, identity: Identity, element: ScalarType) -> Union[IntegerAttr, FloatAttr]:
        if isinstance(identity, (IntegerAttr, FloatAttr)):
            if identity.type != element:
                raise ValueError(f"identity of type {identity.type} for {element} elements")
            return identity
        if element.is_float:
            return FloatAttr(identity, element)
        return IntegerAttr(int(identity), element)

    def _combine(self, mnemonic: str, operands: Sequence[Value], tiles: Sequence[TileType],
                 dim: int, identities: Sequence[Identity], body: RegionBody,
                 results: Sequence[Type], reverse: Optional[bool]) -> list[Value]:
        scalars = [t.element for t in tiles if isinstance(t.element, ScalarType)]
        elements: list[Type] = [TileType(scalar) for scalar in scalars]
        identity_bytes = ByteWriter()
        identity_bytes.varint(len(identities))
        for identity, scalar in zip(identities, scalars):
            encode_attribute(self._identity(identity, scalar), identity_bytes, self._module)
        self._use(*operands)
        record = self._begin(mnemonic)
        self._write_results(record, results, counted=True)
        record.writer.varint(dim)
        if reverse is not None:
            record.writer.byte(1 if reverse else 0)
        record.writer.raw(identity_bytes.to_bytes())
        record.writer.varints([value.index for value in operands])
        record.writer.varint(1)  # regions
        arg_types = [t for element in elements for t in (element, element)]
        self._write_region(record, Block(mnemonic, yield_types=elements), arg_types, body)
        return self._finish(record, results)

    # -- terminators -------------------------------------------------------------------------------

    def yield_(self, values: Sequence[Value] = ()) -> None:
        """End an ``if``, ``reduce`` or ``scan`` body, passing ``values`` out."""
        self._terminator("yield", values)

    def continue_(self, values: Sequence[Value] = ()) -> None:
        """End a loop iteration with the next carried values."""
        self._terminator("continue", values)

    def break_(self, values: Sequence[Value] = ()) -> None:
        """Leave the innermost ``loop`` with its results."""
        self._terminator("break", values)

    def return_(self) -> None:
        """End the entry function (entries return nothing)."""
        self._terminator("return", [])

    # -- debugging aids ----------------------------------------------------------------------------

    def assert_(self, condition: Value, message: str) -> None:
        """Abort the kernel with ``message`` where ``condition`` (an ``i1`` tile) is false."""
        tile = self._tile(condition, "assert condition")
        if tile.element != I1:
            raise ValueError(f"assert condition must be an i1 tile, got {tile}")
        self._use(condition)
        record = self._begin("assert")
        record.writer.varint(self._module.intern_string(message))
        record.writer.varint(condition.index)
        self._finish(record, [])

    def print_tko(self, format_: str, args: Sequence[Value] = (), *,
                  token: Optional[Value] = None) -> Optional[Value]:
        """Device printf of tiles. Returns the output token (13.2+), ``None`` for 13.1."""
        args = list(args)
        for arg in args:
            self._tile(arg, "print argument")
        if token is not None and token.type != TOKEN:
            raise ValueError(f"expected a token, got {token.type}")
        if self.version < (13, 2) and token is not None:
            check_version(self.version, (13, 2), "print_tko with an input token")
        self._use(*args, *([token] if token is not None else []))
        record = self._begin("print_tko")
        results = [TOKEN] if self.version >= (13, 2) else []
        self._write_results(record, results, counted=True)
        if self.version >= (13, 2):
            record.writer.varint(flag_bits(token is not None))
        record.writer.varint(self._module.intern_string(format_))
        record.writer.varints([arg.index for arg in args])
        if token is not None:
            record.writer.varint(token.index)
        values = self._finish(record, results)
        return values[0] if values else None
