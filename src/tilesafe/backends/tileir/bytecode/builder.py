"""Tile IR bytecode writer: the public entry point of the encoder.

A :class:`ModuleBuilder` owns one module's tables (strings, types, constants, globals, debug
attributes) and its entry functions; :meth:`ModuleBuilder.entry` returns a
:class:`FunctionBuilder` whose methods emit operations (one method per Tile IR operation,
named after its mnemonic, with a trailing underscore for Python keywords: ``for_``, ``if_``,
``yield_``, ``continue_``, ``break_``, ``return_``, ``assert_``). :meth:`ModuleBuilder.to_bytes`
assembles the file that ``tileiras`` compiles and ``tileirdisasm`` prints.

Example (vector add through views, one tile of 1024 floats per tile block)::

    module = ModuleBuilder(version=(13, 4))
    ptr, size = TileType(PointerType(F32)), TileType(I32)
    fn = module.entry("vadd", [ptr, ptr, ptr, size])
    a, b, c, n = fn.params
    token = fn.make_token()
    block_x, _, _ = fn.get_tile_block_id()
    tiles = []
    for base in (a, b):
        view = fn.make_partition_view(fn.make_tensor_view(base, [n], [1]), [1024])
        tiles.append(fn.load_view_tko(view, [block_x], token=token)[0])
    out = fn.make_partition_view(fn.make_tensor_view(c, [n], [1]), [1024])
    fn.store_view_tko(fn.addf(*tiles), out, [block_x], token=token)
    fn.return_()
    data = module.to_bytes()

The ``bytecode`` package re-exports this module's public names (``__all__``). Like the
rest of that package it imports only its sibling modules and the standard library,
nothing else of tilesafe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from ._builder_core import Value
from ._encoding import (
    END_OF_BYTECODE, ByteWriter, SectionId, append_section, encode_header, encode_offset_table,
)
from .attributes import (
    Bounded, DivBy, FloatAttr, Hints, IntegerAttr, SameElements, encode_hints, validate_entry_hints,
)
from .constants import dense_buffer
from .debuginfo import DebugAttributeTable, SourceLocation, encode_debug_section
from .enums import (
    AtomicMode, ComparisonOrdering, ComparisonPredicate, IntegerOverflow, MemoryOrdering,
    MemoryScope, PaddingValue, RoundingMode, Signedness, SymbolVisibility,
)
from .opcodes import SUPPORTED_VERSIONS, Version, check_version
from .ops_arith import ArithmeticOps
from .ops_control import ControlFlowOps
from .ops_memory import MemoryOps
from .ops_tile import TileOps
from .types import (
    BF16, DYNAMIC, F4E2M1FN, F8E4M3FN, F8E5M2, F8E8M0FNU, F16, F32, F64, I1, I4, I8, I16, I32, I64,
    TF32, TOKEN, FunctionType, PartitionViewType, PointerType, ScalarType, TensorViewType,
    TileType, TokenType, Type, encode_type,
)

__all__ = [
    "ModuleBuilder", "FunctionBuilder", "Value", "SourceLocation", "Version", "SUPPORTED_VERSIONS",
    # types
    "Type", "ScalarType", "PointerType", "TileType", "TensorViewType", "PartitionViewType",
    "TokenType", "FunctionType", "DYNAMIC", "TOKEN", "I1", "I4", "I8", "I16", "I32", "I64", "F16",
    "BF16", "F32", "TF32", "F64", "F8E4M3FN", "F8E5M2", "F8E8M0FNU", "F4E2M1FN",
    # attributes
    "Hints", "IntegerAttr", "FloatAttr", "DivBy", "Bounded", "SameElements",
    # enums
    "RoundingMode", "IntegerOverflow", "Signedness", "ComparisonPredicate", "ComparisonOrdering",
    "MemoryOrdering", "MemoryScope", "AtomicMode", "PaddingValue", "SymbolVisibility",
]

_FUNCTION_IS_ENTRY = 0x02
_FUNCTION_HAS_HINTS = 0x04


class FunctionBuilder(ArithmeticOps, TileOps, MemoryOps, ControlFlowOps):
    """Emits the body of one entry function; ``params`` are its parameter values.

    Operations are appended in call order to the innermost open block; every method validates
    its operands and returns the result value(s). The body must end with :meth:`return_`.
    """


@dataclass(frozen=True)
class _Global:
    name: int
    value_type: int
    value: int
    alignment: int
    visibility: SymbolVisibility
    constant: bool


@dataclass(frozen=True)
class _Entry:
    builder: FunctionBuilder
    name: int
    signature: int
    hints: Optional[bytes]


class ModuleBuilder:
    """One Tile IR bytecode module: tables, globals and entry functions.

    Args:
        version: bytecode version to write, ``(13, 1)`` to ``(13, 4)``; operations, types and
            fields newer than it are rejected with ``ValueError``.
        producer: optional free-form producer string (13.3+).
    """

    def __init__(self, version: Version = (13, 4), *, producer: Optional[str] = None) -> None:
        version = tuple(version)  # type: ignore[assignment]
        if version not in SUPPORTED_VERSIONS:
            supported = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_VERSIONS)
            raise ValueError(
                f"unsupported Tile IR bytecode version {version}; use one of {supported}")
        self.version: Version = version
        self._strings: list[bytes] = []
        self._string_indices: dict[str, int] = {}
        self._types: list[bytes] = []
        self._type_indices: dict[Type, int] = {}
        self._constants: list[bytes] = []
        self._constant_indices: dict[bytes, int] = {}
        self._globals: dict[str, tuple[TileType, _Global]] = {}
        self._entries: list[_Entry] = []
        self.debug = DebugAttributeTable(self.intern_string)
        self._producer: Optional[int] = None
        if producer is not None:
            check_version(version, (13, 3), "the producer section")
            self._producer = self.intern_string(producer)

    # -- tables ------------------------------------------------------------------------------------

    def intern_string(self, text: str) -> int:
        """Index of ``text`` in the String section (added on first use)."""
        index = self._string_indices.get(text)
        if index is None:
            index = self._string_indices[text] = len(self._strings)
            self._strings.append(text.encode("utf-8"))
        return index

    def intern_type(self, type_: Type) -> int:
        """Index of ``type_`` in the Type section; the types it refers to are added first."""
        index = self._type_indices.get(type_)
        if index is None:
            encoded = encode_type(type_, self.version, self.intern_type)
            index = self._type_indices[type_] = len(self._types)
            self._types.append(encoded)
        return index

    def intern_constant(self, raw: bytes) -> int:
        """Index of a dense element buffer in the Constant section (untyped, deduplicated)."""
        index = self._constant_indices.get(raw)
        if index is None:
            index = self._constant_indices[raw] = len(self._constants)
            writer = ByteWriter()
            writer.varint(len(raw))
            writer.raw(raw)
            self._constants.append(writer.to_bytes())
        return index

    # -- globals -----------------------------------------------------------------------------------

    def add_global(self, name: str, value: Any, type_: TileType, *, alignment: int = 16,
                   visibility: SymbolVisibility = SymbolVisibility.PUBLIC,
                   constant: bool = False) -> None:
        """Declare a module global holding ``value`` as a rank-1 tile of ``type_``.

        ``visibility`` and ``constant`` are encoded from 13.3 on (older versions accept only
        the defaults). Kernels reach it through ``get_global``.
        """
        if name in self._globals:
            raise ValueError(f"global {name!r} is already defined")
        if type_.rank != 1:
            raise ValueError(f"a global must be a rank-1 tile, got {type_}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"global alignment must be a power of two, got {alignment}")
        visibility = SymbolVisibility(visibility)
        if self.version < (13, 3) and (constant or visibility != SymbolVisibility.PUBLIC):
            check_version(self.version, (13, 3), "global visibility and constness")
        record = _Global(self.intern_string(name), self.intern_type(type_),
                         self.intern_constant(dense_buffer(value, type_)), alignment, visibility,
                         constant)
        self._globals[name] = (type_, record)

    def global_type(self, name: str) -> TileType:
        """The value type of global ``name``."""
        try:
            return self._globals[name][0]
        except KeyError:
            raise ValueError(f"unknown global {name!r}") from None

    # -- functions ---------------------------------------------------------------------------------

    def entry(self, name: str, params: Sequence[Type], *, hints: Optional[Hints] = None,
              location: Optional[SourceLocation] = None) -> FunctionBuilder:
        """Start an entry (kernel) function named ``name`` (the cubin symbol).

        Parameters must be rank-0 tiles (scalars or pointers). ``hints`` maps an architecture
        (``"sm_90"``, or ``"default"`` from 13.3) to ``num_cta_in_cga``, ``occupancy`` and
        ``num_worker_warps_per_cta``. With ``location`` the module carries debug info for this
        function: every op gets the location set by ``FunctionBuilder.set_location``.
        """
        if not name:
            raise ValueError("an entry needs a name")
        if any(entry.builder.name == name for entry in self._entries):
            raise ValueError(f"entry {name!r} is already defined")
        for param in params:
            if not (isinstance(param, TileType) and param.rank == 0):
                raise ValueError(f"entry parameters must be rank-0 tiles, got {param}")
        signature = FunctionType(tuple(params), ())
        hint_bytes = None
        if hints is not None:
            validate_entry_hints(hints, self.version)
            writer = ByteWriter()
            encode_hints(hints, writer, self, tagged=True)
            hint_bytes = writer.to_bytes()
        builder = FunctionBuilder(self, name, signature, location)
        self._entries.append(_Entry(builder, self.intern_string(name), self.intern_type(signature),
                                    hint_bytes))
        return builder

    # -- output ------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The complete bytecode file. Every entry must have been closed with ``return_``."""
        unfinished = [entry.builder.name for entry in self._entries if not entry.builder.finished]
        if unfinished:
            raise ValueError(f"entries without return: {', '.join(unfinished)}")
        out = bytearray(encode_header(self.version))
        debug_refs = [entry.builder.location_refs for entry in self._entries]
        append_section(out, SectionId.FUNC, self._function_table(debug_refs), alignment=8)
        if self._globals:
            append_section(out, SectionId.GLOBAL, self._global_table())
        if self._constants:
            append_section(out, SectionId.CONSTANT, encode_offset_table(self._constants, 8),
                           alignment=8)
        with_debug = [refs for refs in debug_refs if refs is not None]
        if with_debug:
            append_section(out, SectionId.DEBUG,
                           encode_debug_section(with_debug, self.debug.attributes), alignment=8)
        if self._types:
            append_section(out, SectionId.TYPE, encode_offset_table(self._types, 4), alignment=4)
        if self._producer is not None:
            producer = ByteWriter()
            producer.varint(self._producer)
            append_section(out, SectionId.PRODUCER, producer.to_bytes())
        append_section(out, SectionId.STRING, encode_offset_table(self._strings, 4), alignment=4)
        out.append(END_OF_BYTECODE)
        return bytes(out)

    def write(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write :meth:`to_bytes` to ``path`` (conventionally ``*.tileirbc``)."""
        with open(path, "wb") as file:
            file.write(self.to_bytes())

    def _function_table(self, debug_refs: Sequence[Optional[list[int]]]) -> bytes:
        writer = ByteWriter()
        writer.varint(len(self._entries))
        next_debug_slot = 1
        for entry, refs in zip(self._entries, debug_refs):
            writer.varint(entry.name)
            writer.varint(entry.signature)
            flags = _FUNCTION_IS_ENTRY | (_FUNCTION_HAS_HINTS if entry.hints is not None else 0)
            writer.byte(flags)
            if refs is None:
                writer.varint(0)
            else:
                writer.varint(next_debug_slot)
                next_debug_slot += 1
            if entry.hints is not None:
                writer.raw(entry.hints)
            body = entry.builder.body
            writer.varint(len(body))
            writer.raw(body)
        return writer.to_bytes()

    def _global_table(self) -> bytes:
        writer = ByteWriter()
        writer.varint(len(self._globals))
        for _, record in self._globals.values():
            writer.varint(record.name)
            writer.varint(record.value_type)
            writer.varint(record.value)
            writer.varint(record.alignment)
            if self.version >= (13, 3):
                writer.varint(int(record.visibility))
                writer.varint(1 if record.constant else 0)
        return writer.to_bytes()
