"""Source locations: the debug attributes of the Debug section and the section's layout.

A function with debug info gets a file, a compile unit and a subprogram whose linkage name is
the function's name; the function and each of its operations then refer to a location (line,
column) scoped to that subprogram. Debug-attribute ids are 1-based (0 means "unknown location")
and every attribute only refers to attributes registered before it.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Sequence

from ._encoding import ByteWriter, encode_offset_table

__all__ = ["SourceLocation", "UNKNOWN_LOCATION", "DebugAttributeTable", "encode_debug_section"]

#: The location reference of an operation without a known source position.
UNKNOWN_LOCATION = 0


class _DebugTag(IntEnum):
    COMPILE_UNIT = 1
    FILE = 2
    LOCATION = 4
    SUBPROGRAM = 5


@dataclass(frozen=True)
class SourceLocation:
    """A position in a source file (``line`` and ``column`` are 1-based; 0 = unknown)."""

    file: str
    line: int
    column: int = 0


class DebugAttributeTable:
    """Interns debug attributes of one module and hands out their 1-based ids."""

    def __init__(self, intern_string: Callable[[str], int]) -> None:
        self._intern_string = intern_string
        self._ids: dict[bytes, int] = {}
        self._attributes: list[bytes] = []

    @property
    def attributes(self) -> tuple[bytes, ...]:
        """The encoded attributes, in id order."""
        return tuple(self._attributes)

    def _intern(self, tag: _DebugTag, *fields: int) -> int:
        writer = ByteWriter()
        writer.varint(tag)
        for value in fields:
            writer.varint(value)
        encoded = writer.to_bytes()
        if encoded not in self._ids:
            self._attributes.append(encoded)
            self._ids[encoded] = len(self._attributes)
        return self._ids[encoded]

    def subprogram(self, function_name: str, location: SourceLocation) -> int:
        """The subprogram of a function defined at ``location`` (with its file and compile unit)."""
        directory, basename = os.path.split(location.file)
        file_id = self._intern(_DebugTag.FILE, self._intern_string(basename),
                               self._intern_string(directory))
        unit_id = self._intern(_DebugTag.COMPILE_UNIT, file_id)
        name = self._intern_string(function_name)
        return self._intern(_DebugTag.SUBPROGRAM, file_id, location.line, name, name, unit_id,
                            location.line)

    def location(self, subprogram_id: int, location: SourceLocation) -> int:
        """A source position inside the function described by ``subprogram_id``."""
        return self._intern(_DebugTag.LOCATION, subprogram_id, self._intern_string(location.file),
                            location.line, location.column)


def encode_debug_section(function_refs: Sequence[Sequence[int]],
                         attributes: Sequence[bytes]) -> bytes:
    """The Debug section payload.

    ``function_refs[k]`` holds the location ids of the function with ``loc_index = k + 1``: its
    own location first, then one per operation in pre-order. At least one attribute is required
    by readers.
    """
    if not attributes:
        raise ValueError("a Debug section needs at least one debug attribute")
    writer = ByteWriter()
    writer.varint(len(function_refs))
    writer.pad_to(4)
    start = 0
    for refs in function_refs:
        writer.fixed(start, 4)
        start += len(refs)
    writer.varint(start)
    writer.pad_to(8)
    for refs in function_refs:
        for ref in refs:
            writer.fixed(ref, 8)
    writer.raw(encode_offset_table(attributes, 4))
    return writer.to_bytes()
