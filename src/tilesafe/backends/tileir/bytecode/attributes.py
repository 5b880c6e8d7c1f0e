"""Self-contained (tagged) attributes: scalars, ``assume`` predicates and optimization hints.

A tagged attribute is a varint tag followed by its payload. They appear as ``assume``
predicates, as ``reduce``/``scan`` identities, inside optimization-hint dictionaries and as the
kernel-level ``OptimizationHints`` attribute of an entry. This module also checks hint
dictionaries against the keys and ranges Tile IR accepts.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import IntEnum
from typing import Mapping, Optional, Protocol, Union

from ._encoding import ByteWriter
from .constants import scalar_bits
from .opcodes import Version, check_version
from .types import F64, I1, I32, ScalarType, Type

__all__ = [
    "IntegerAttr", "FloatAttr", "BoolAttr", "DivBy", "SameElements", "Bounded", "Predicate",
    "Attribute", "Hints", "InternContext", "encode_attribute", "encode_hints",
    "validate_entry_hints", "validate_op_hints",
]


class InternContext(Protocol):
    """What attribute encoding needs from a module: string and type table indices."""

    def intern_string(self, text: str) -> int:
        """Index of ``text`` in the String section."""

    def intern_type(self, type_: Type) -> int:
        """Index of ``type_`` in the Type section."""


class _Tag(IntEnum):
    INTEGER = 1
    FLOAT = 2
    BOOL = 3
    STRING = 5
    DIV_BY = 8
    SAME_ELEMENTS = 9
    DICTIONARY = 10
    OPTIMIZATION_HINTS = 11
    BOUNDED = 12


@dataclass(frozen=True)
class IntegerAttr:
    """An integer constant of an integer ``type`` (signed or unsigned range accepted)."""

    value: int
    type: ScalarType = I32

    def __post_init__(self) -> None:
        if self.type.is_float:
            raise ValueError(f"IntegerAttr needs an integer type, got {self.type}")
        bits = self.type.bits
        lowest = 0 if self.type == I1 else -(1 << (bits - 1))
        if not lowest <= int(self.value) < (1 << bits):
            raise ValueError(f"{self.value} does not fit in {self.type}")


@dataclass(frozen=True)
class FloatAttr:
    """A floating-point constant of a float ``type``."""

    value: float
    type: ScalarType

    def __post_init__(self) -> None:
        if not self.type.is_float:
            raise ValueError(f"FloatAttr needs a float type, got {self.type}")


@dataclass(frozen=True)
class BoolAttr:
    """A boolean constant."""

    value: bool


@dataclass(frozen=True)
class DivBy:
    """``assume`` predicate: values (or pointer addresses, in bytes) are multiples of ``divisor``.

    With ``every``/``along``, only the first element of each group of ``every`` elements along
    dimension ``along`` is a multiple; the following ones increase by one step.
    """

    divisor: int
    every: Optional[int] = None
    along: Optional[int] = None

    def __post_init__(self) -> None:
        if self.divisor <= 0 or self.divisor & (self.divisor - 1):
            raise ValueError(f"div_by divisor must be a positive power of two, got {self.divisor}")


@dataclass(frozen=True)
class SameElements:
    """``assume`` predicate: per dimension, groups of ``counts[d]`` consecutive equal elements."""

    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", tuple(int(count) for count in self.counts))


@dataclass(frozen=True)
class Bounded:
    """``assume`` predicate: inclusive signed bounds; either side may be unknown (``None``)."""

    lower: Optional[int] = None
    upper: Optional[int] = None


Predicate = Union[DivBy, SameElements, Bounded]
Attribute = Union[IntegerAttr, FloatAttr, BoolAttr, DivBy, SameElements, Bounded]

#: Hints keyed by architecture (``"sm_90"``, ``"default"``), then by hint name.
Hints = Mapping[str, Mapping[str, Union[int, bool]]]


def _float_payload(attr: FloatAttr) -> int:
    """The signed integer whose zigzag varint carries the float bits (f64 as signed int64)."""
    bits = scalar_bits(attr.value, attr.type)
    if attr.type == F64 and bits >= 1 << 63:
        return bits - (1 << 64)
    return bits


def encode_attribute(attr: Attribute, writer: ByteWriter, context: InternContext) -> None:
    """Write ``attr`` in its self-contained form: tag, then payload."""
    if isinstance(attr, IntegerAttr):
        writer.varint(_Tag.INTEGER)
        writer.varint(context.intern_type(attr.type))
        masked = int(attr.value) & ((1 << attr.type.bits) - 1)
        if attr.type == I1:
            writer.byte(masked)
        else:
            writer.varint(masked)
    elif isinstance(attr, FloatAttr):
        writer.varint(_Tag.FLOAT)
        writer.varint(context.intern_type(attr.type))
        if attr.type.bits <= 8:
            writer.byte(scalar_bits(attr.value, attr.type))
        else:
            writer.signed_varint(_float_payload(attr))
    elif isinstance(attr, BoolAttr):
        writer.varint(_Tag.BOOL)
        writer.byte(1 if attr.value else 0)
    elif isinstance(attr, DivBy):
        writer.varint(_Tag.DIV_BY)
        writer.varint(attr.divisor)
        writer.byte((attr.every is not None) | (attr.along is not None) << 1)
        if attr.every is not None:
            writer.signed_varint(attr.every)
        if attr.along is not None:
            writer.signed_varint(attr.along)
    elif isinstance(attr, SameElements):
        writer.varint(_Tag.SAME_ELEMENTS)
        writer.fixed_list(attr.counts, 8)
    elif isinstance(attr, Bounded):
        writer.varint(_Tag.BOUNDED)
        writer.byte((attr.lower is not None) | (attr.upper is not None) << 1)
        if attr.lower is not None:
            writer.signed_varint(attr.lower)
        if attr.upper is not None:
            writer.signed_varint(attr.upper)
    else:
        raise TypeError(f"not an encodable attribute: {attr!r}")


def _hint_value(value: Union[int, bool]) -> Attribute:
    return BoolAttr(value) if isinstance(value, bool) else IntegerAttr(value, I32)


def encode_hints(hints: Hints, writer: ByteWriter, context: InternContext, *, tagged: bool) -> None:
    """Write an arch-keyed hint dictionary.

    ``tagged=True`` gives the kernel-level ``OptimizationHints`` attribute (Func table);
    ``tagged=False`` the bare dictionary carried inline by load/store operations.
    """
    if tagged:
        writer.varint(_Tag.OPTIMIZATION_HINTS)
    writer.varint(len(hints))
    for arch, entries in hints.items():
        writer.varint(context.intern_string(arch))
        writer.varint(_Tag.DICTIONARY)
        writer.varint(len(entries))
        for key, value in entries.items():
            writer.varint(context.intern_string(key))
            encode_attribute(_hint_value(value), writer, context)


_ARCH_KEY = re.compile(r"sm_[0-9]+[a-z]?")


def _check_arch_keys(hints: Hints, version: Version) -> None:
    for arch in hints:
        if arch == "default":
            check_version(version, (13, 3), "the 'default' hint key")
        elif not _ARCH_KEY.fullmatch(arch):
            raise ValueError(
                f"hint key must be 'default' or an architecture like 'sm_90', got {arch!r}")


def _check_int(key: str, value: object, allowed: range, extra: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ValueError(f"hint {key!r} must be an integer in [{allowed.start}, "
                         f"{allowed.stop - 1}]{extra}, got {value!r}")


def validate_entry_hints(hints: Hints, version: Version) -> None:
    """Check kernel hints: ``num_cta_in_cga`` (power of two <= 16), ``occupancy`` (1-32),
    ``num_worker_warps_per_cta`` (4 or 8, bytecode 13.3+)."""
    _check_arch_keys(hints, version)
    for entries in hints.values():
        for key, value in entries.items():
            if key == "num_cta_in_cga":
                _check_int(key, value, range(1, 17), " and a power of two")
                if value & (value - 1):
                    raise ValueError(f"hint 'num_cta_in_cga' must be a power of two, got {value}")
            elif key == "occupancy":
                _check_int(key, value, range(1, 33))
            elif key == "num_worker_warps_per_cta":
                check_version(version, (13, 3), "the 'num_worker_warps_per_cta' hint")
                if value not in (4, 8) or isinstance(value, bool):
                    raise ValueError(
                        f"hint 'num_worker_warps_per_cta' must be 4 or 8, got {value!r}")
            else:
                raise ValueError(f"unknown kernel hint {key!r}")


def validate_op_hints(hints: Hints, version: Version, *, view_access: bool) -> None:
    """Check load/store hints: ``latency`` (1-10) and, for view accesses only, ``allow_tma``."""
    _check_arch_keys(hints, version)
    for entries in hints.values():
        for key, value in entries.items():
            if key == "latency":
                _check_int(key, value, range(1, 11))
            elif key == "allow_tma" and view_access:
                if not isinstance(value, bool):
                    raise ValueError(f"hint 'allow_tma' must be a bool, got {value!r}")
            else:
                raise ValueError(f"unknown load/store hint {key!r}")
