"""Byte-level building blocks of the Tile IR bytecode container.

This module owns the primitive encodings (LEB128 varints, zigzag varints, little-endian fixed
integers, counted lists), the "offset table" layout shared by the string, type and constant
sections, section framing with 0xCB alignment padding measured from the start of the file, and
the file header and end marker. It knows nothing about types or operations.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Sequence

__all__ = [
    "PADDING_BYTE", "MAGIC", "END_OF_BYTECODE", "SectionId", "ByteWriter", "encode_varint",
    "encode_signed_varint", "encode_offset_table", "encode_header", "append_section",
]

PADDING_BYTE = 0xCB
MAGIC = b"\x7fTileIR\x00"
END_OF_BYTECODE = 0x00

_U64_MASK = (1 << 64) - 1
_ALIGNMENT_FLAG = 0x80


class SectionId(IntEnum):
    """Section identifiers (low 7 bits of a section's first byte)."""

    END = 0x00
    STRING = 0x01
    FUNC = 0x02
    DEBUG = 0x03
    CONSTANT = 0x04
    TYPE = 0x05
    GLOBAL = 0x06
    PRODUCER = 0x07


def encode_varint(value: int) -> bytes:
    """Unsigned LEB128: 7 bits per byte, least significant group first, bit 7 = more follows."""
    if value < 0 or value > _U64_MASK:
        raise ValueError(f"varint value {value} is outside the unsigned 64-bit range")
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode_signed_varint(value: int) -> bytes:
    """Zigzag-map a signed 64-bit integer (0, -1, 1, -2 -> 0, 1, 2, 3), then encode as a varint."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"signed varint value {value} is outside the signed 64-bit range")
    return encode_varint(((value << 1) ^ (value >> 63)) & _U64_MASK)


class ByteWriter:
    """An append-only byte buffer with the primitive encodings of the format."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def to_bytes(self) -> bytes:
        """The bytes written so far."""
        return bytes(self._buffer)

    def raw(self, data: bytes) -> None:
        """Append bytes verbatim."""
        self._buffer += data

    def byte(self, value: int) -> None:
        """Append one byte (0..255)."""
        self._buffer.append(value)

    def varint(self, value: int) -> None:
        """Append an unsigned varint."""
        self._buffer += encode_varint(value)

    def signed_varint(self, value: int) -> None:
        """Append a zigzag-encoded signed varint."""
        self._buffer += encode_signed_varint(value)

    def fixed(self, value: int, width: int, *, signed: bool = False) -> None:
        """Append a little-endian integer of ``width`` bytes."""
        self._buffer += value.to_bytes(width, "little", signed=signed)

    def varints(self, values: Sequence[int]) -> None:
        """Append a counted list of varints (count, then each value)."""
        self.varint(len(values))
        for value in values:
            self.varint(value)

    def fixed_list(self, values: Sequence[int], width: int) -> None:
        """Append a counted list of signed little-endian integers of ``width`` bytes each."""
        self.varint(len(values))
        for value in values:
            self.fixed(value, width, signed=True)

    def bool_list(self, values: Sequence[bool]) -> None:
        """Append a counted list of one-byte booleans."""
        self.varint(len(values))
        for value in values:
            self.byte(1 if value else 0)

    def pad_to(self, alignment: int) -> None:
        """Append 0xCB bytes until the buffer length is a multiple of ``alignment``."""
        self._buffer += bytes([PADDING_BYTE]) * (-len(self._buffer) % alignment)


def encode_offset_table(items: Sequence[bytes], offset_width: int) -> bytes:
    """The shared table layout: item count, padding, one offset per item, then the items.

    Offsets are ``offset_width``-byte little-endian positions relative to the start of the item
    blob; the padding aligns the offsets to ``offset_width`` within the section payload (which is
    itself aligned in the file, so the two alignments agree).
    """
    writer = ByteWriter()
    writer.varint(len(items))
    writer.pad_to(offset_width)
    position = 0
    for item in items:
        writer.fixed(position, offset_width)
        position += len(item)
    for item in items:
        writer.raw(item)
    return writer.to_bytes()


def encode_header(version: tuple[int, int]) -> bytes:
    """The 12-byte file header: magic, u8 major, u8 minor, u16 little-endian tag (0: release)."""
    major, minor = version
    return MAGIC + bytes([major, minor, 0, 0])


def append_section(out: bytearray, section_id: SectionId, payload: bytes,
                   alignment: int = 1) -> None:
    """Append one framed section to ``out``, which must hold the file from its first byte.

    With ``alignment > 1`` the id byte carries the alignment flag, the alignment follows the
    length, and 0xCB padding makes the payload start at a file offset that is a multiple of
    ``alignment``.
    """
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"section alignment must be a power of two, got {alignment}")
    aligned = alignment > 1
    out.append(int(section_id) | (_ALIGNMENT_FLAG if aligned else 0))
    out += encode_varint(len(payload))
    if aligned:
        out += encode_varint(alignment)
        out += bytes([PADDING_BYTE]) * (-len(out) % alignment)
    out += payload

