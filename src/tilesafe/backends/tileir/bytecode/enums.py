"""Enumerations whose numeric values appear in Tile IR bytecode (op attributes and view types).

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "RoundingMode", "IntegerOverflow", "Signedness", "ComparisonPredicate", "ComparisonOrdering",
    "MemoryOrdering", "MemoryScope", "AtomicMode", "PaddingValue", "SymbolVisibility",
]


class RoundingMode(IntEnum):
    """Rounding of float arithmetic and conversions (``NEAREST_AWAY`` needs bytecode 13.4)."""

    NEAREST_EVEN = 0
    ZERO = 1
    NEGATIVE_INF = 2
    POSITIVE_INF = 3
    APPROX = 4
    FULL = 5
    NEAREST_INT_TO_ZERO = 6
    NEAREST_AWAY = 7


class IntegerOverflow(IntEnum):
    """Overflow promises of integer arithmetic (no signed / no unsigned wrap)."""

    NONE = 0
    NSW = 1
    NUW = 2
    NW = 3


class Signedness(IntEnum):
    """How integer operands are interpreted; Tile IR integer types carry no sign."""

    UNSIGNED = 0
    SIGNED = 1


class ComparisonPredicate(IntEnum):
    """The relation tested by ``cmpi``/``cmpf``."""

    EQ = 0
    NE = 1
    LT = 2
    LE = 3
    GT = 4
    GE = 5


class ComparisonOrdering(IntEnum):
    """Whether a float comparison involving NaN is false (ordered) or true (unordered)."""

    UNORDERED = 0
    ORDERED = 1


class MemoryOrdering(IntEnum):
    """Memory ordering semantics of loads, stores and atomics."""

    WEAK = 0
    RELAXED = 1
    ACQUIRE = 2
    RELEASE = 3
    ACQ_REL = 4


class MemoryScope(IntEnum):
    """The set of threads a memory ordering is established with."""

    TILE_BLOCK = 0
    DEVICE = 1
    SYSTEM = 2


class AtomicMode(IntEnum):
    """The read-modify-write operation of ``atomic_rmw_tko``."""

    AND = 0
    OR = 1
    XOR = 2
    ADD = 3
    ADDF = 4
    MAX = 5
    MIN = 6
    UMAX = 7
    UMIN = 8
    XCHG = 9


class PaddingValue(IntEnum):
    """Value read from out-of-bounds elements of a view (non-zero values only for floats)."""

    ZERO = 0
    NEG_ZERO = 1
    NAN = 2
    POS_INF = 3
    NEG_INF = 4


class SymbolVisibility(IntEnum):
    """Visibility of a module-level global."""

    PUBLIC = 0
    PRIVATE = 1
