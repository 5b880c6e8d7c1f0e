"""Tile IR types as immutable Python values, their validity rules and their bytecode encoding.

Types are plain frozen dataclasses that compare by value, so they can be built anywhere and
interned by a module. :func:`encode_type` writes the Type-section item of one type; it asks a
callback for the table index of every type it refers to, which lets the module register
dependencies before the type that uses them.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from ._encoding import ByteWriter
from .enums import PaddingValue
from .opcodes import Version, check_version

__all__ = [
    "ScalarType", "PointerType", "TileType", "TensorViewType", "PartitionViewType", "TokenType",
    "FunctionType", "Type", "TileElement", "encode_type", "DYNAMIC",
    "I1", "I4", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "TF32", "F64",
    "F8E4M3FN", "F8E5M2", "F8E8M0FNU", "F4E2M1FN", "TOKEN",
]

#: The stored value of a dynamic tensor-view dimension or stride (INT64_MIN, printed ``?``).
DYNAMIC = -(1 << 63)

MAX_TILE_ELEMENTS = 1 << 24

_TAG_POINTER = 12
_TAG_TILE = 13
_TAG_TENSOR_VIEW = 14
_TAG_PARTITION_VIEW = 15
_TAG_FUNCTION = 16
_TAG_TOKEN = 17


@dataclass(frozen=True)
class ScalarType:
    """An element type: an integer (signless) or a floating-point format.

    Attributes:
        name: the Tile IR spelling, e.g. ``"f32"``.
        tag: the type tag written to bytecode.
        bits: width in bits (tf32: 19).
        is_float: whether it is a floating-point format.
        since: first bytecode version that has the type.
    """

    name: str
    tag: int
    bits: int
    is_float: bool
    since: Version = (13, 1)

    def __str__(self) -> str:
        return self.name

    @property
    def storage_bytes(self) -> int:
        """Bytes one element occupies in a dense constant buffer (bits rounded up to bytes)."""
        return (self.bits + 7) // 8


I1 = ScalarType("i1", 0, 1, False)
I8 = ScalarType("i8", 1, 8, False)
I16 = ScalarType("i16", 2, 16, False)
I32 = ScalarType("i32", 3, 32, False)
I64 = ScalarType("i64", 4, 64, False)
F16 = ScalarType("f16", 5, 16, True)
BF16 = ScalarType("bf16", 6, 16, True)
F32 = ScalarType("f32", 7, 32, True)
TF32 = ScalarType("tf32", 8, 19, True)
F64 = ScalarType("f64", 9, 64, True)
F8E4M3FN = ScalarType("f8E4M3FN", 10, 8, True)
F8E5M2 = ScalarType("f8E5M2", 11, 8, True)
F8E8M0FNU = ScalarType("f8E8M0FNU", 18, 8, True, (13, 2))
F4E2M1FN = ScalarType("f4E2M1FN", 19, 4, True, (13, 3))
I4 = ScalarType("i4", 22, 4, False, (13, 3))


@dataclass(frozen=True)
class PointerType:
    """A global-memory pointer to elements of ``pointee``."""

    pointee: ScalarType

    def __str__(self) -> str:
        return f"ptr<{self.pointee}>"


TileElement = Union[ScalarType, PointerType]


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@dataclass(frozen=True)
class TileType:
    """An immutable tile: a statically shaped array of scalars or pointers (rank 0 = one value)."""

    element: TileElement
    shape: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(dim) for dim in self.shape))
        if not isinstance(self.element, (ScalarType, PointerType)):
            raise TypeError(f"tile element must be a scalar or pointer type, got {self.element!r}")
        for dim in self.shape:
            if not _is_power_of_two(dim):
                raise ValueError(
                    f"tile dimensions must be positive powers of two, got {self.shape}")
        if self.num_elements > MAX_TILE_ELEMENTS:
            raise ValueError(f"tile {self} has more than 2**24 elements")
        if self.element == F4E2M1FN and self.num_elements % 2:
            raise ValueError("f4E2M1FN tiles need an even number of elements")

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def num_elements(self) -> int:
        """Total element count."""
        return math.prod(self.shape)

    def with_element(self, element: TileElement) -> "TileType":
        """The tile of the same shape with another element type."""
        return TileType(element, self.shape)

    def __str__(self) -> str:
        dims = "".join(f"{dim}x" for dim in self.shape)
        return f"tile<{dims}{self.element}>"


def _dims_text(values: tuple[int, ...]) -> list[str]:
    return ["?" if value == DYNAMIC else str(value) for value in values]


@dataclass(frozen=True)
class TensorViewType:
    """A strided view of global memory; shape entries and strides may be dynamic.

    ``shape`` and ``strides`` hold integers, with :data:`DYNAMIC` (or ``None`` when constructing)
    for values supplied at run time by ``make_tensor_view`` operands. Strides count elements.
    """

    element: ScalarType
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def __post_init__(self) -> None:
        shape = tuple(DYNAMIC if dim is None else int(dim) for dim in self.shape)
        strides = tuple(DYNAMIC if step is None else int(step) for step in self.strides)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        if len(shape) != len(strides):
            raise ValueError(f"tensor_view shape {shape} and strides {strides} differ in rank")
        if any(dim != DYNAMIC and dim < 0 for dim in shape):
            raise ValueError(f"tensor_view dimensions must be non-negative, got {shape}")

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __str__(self) -> str:
        dims = "".join(f"{dim}x" for dim in _dims_text(self.shape))
        return f"tensor_view<{dims}{self.element}, strides=[{','.join(_dims_text(self.strides))}]>"


@dataclass(frozen=True)
class PartitionViewType:
    """A tensor view cut into a grid of tiles of ``tile_shape``; indexed by tile coordinates.

    ``dim_map[i]`` names the tensor dimension that tile dimension ``i`` runs along (empty means
    the identity); ``padding`` is the value read for out-of-bounds elements (zero when ``None``).
    """

    tile_shape: tuple[int, ...]
    tensor_view: TensorViewType
    dim_map: tuple[int, ...] = ()
    padding: Optional[PaddingValue] = None

    def __post_init__(self) -> None:
        tile_shape = tuple(int(dim) for dim in self.tile_shape)
        dim_map = tuple(int(dim) for dim in self.dim_map) or tuple(range(len(tile_shape)))
        object.__setattr__(self, "tile_shape", tile_shape)
        object.__setattr__(self, "dim_map", dim_map)
        if self.padding is not None:
            object.__setattr__(self, "padding", PaddingValue(self.padding))
            if self.padding != PaddingValue.ZERO and not self.tensor_view.element.is_float:
                raise ValueError(f"padding {self.padding.name.lower()} needs a float view")
        if len(tile_shape) != self.tensor_view.rank:
            raise ValueError(
                f"partition tile shape {tile_shape} must have the rank of {self.tensor_view}")
        if sorted(dim_map) != list(range(len(tile_shape))):
            raise ValueError(f"dim_map {dim_map} is not a permutation of the view dimensions")
        TileType(self.tensor_view.element, tile_shape)  # raises on an invalid tile shape

    @property
    def tile_type(self) -> TileType:
        """The type of one tile loaded from or stored to this view."""
        return TileType(self.tensor_view.element, self.tile_shape)

    @property
    def index_rank(self) -> int:
        """Number of tile-coordinate indices a load or store takes."""
        return len(self.tile_shape)

    def __str__(self) -> str:
        shape = "x".join(str(dim) for dim in self.tile_shape)
        extras = ""
        if self.dim_map != tuple(range(len(self.tile_shape))):
            extras += f", dim_map=[{', '.join(str(dim) for dim in self.dim_map)}]"
        if self.padding is not None:
            extras += f", padding_value = {self.padding.name.lower()}"
        return f"partition_view<tile=({shape}){extras}, {self.tensor_view}>"


@dataclass(frozen=True)
class TokenType:
    """The memory-ordering token threaded through ``*_tko`` operations."""

    def __str__(self) -> str:
        return "token"


TOKEN = TokenType()


@dataclass(frozen=True)
class FunctionType:
    """A function signature (entry kernels have no results)."""

    inputs: tuple["Type", ...]
    results: tuple["Type", ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "results", tuple(self.results))

    def __str__(self) -> str:
        inputs = ", ".join(str(t) for t in self.inputs)
        results = ", ".join(str(t) for t in self.results)
        return f"({inputs}) -> ({results})"


Type = Union[ScalarType, PointerType, TileType, TensorViewType, PartitionViewType, TokenType,
             FunctionType]


def encode_type(type_: Type, version: Version, type_index: Callable[[Type], int]) -> bytes:
    """The Type-section item of ``type_`` for bytecode ``version``.

    ``type_index`` returns the table index of a referenced type (registering it if needed); it
    is called for every dependency before this type's own bytes are complete.
    """
    writer = ByteWriter()
    if isinstance(type_, ScalarType):
        check_version(version, type_.since, f"type {type_}")
        writer.varint(type_.tag)
    elif isinstance(type_, PointerType):
        writer.varint(_TAG_POINTER)
        if version >= (13, 4):
            writer.varint(0)  # flags: no pointer attribute
        writer.varint(type_index(type_.pointee))
    elif isinstance(type_, TileType):
        writer.varint(_TAG_TILE)
        writer.varint(type_index(type_.element))
        writer.fixed_list(type_.shape, 8)
    elif isinstance(type_, TensorViewType):
        writer.varint(_TAG_TENSOR_VIEW)
        if version >= (13, 4):
            writer.varint(0)  # flags: no pointer attribute
        writer.varint(type_index(type_.element))
        writer.fixed_list(type_.shape, 8)
        writer.fixed_list(type_.strides, 8)
    elif isinstance(type_, PartitionViewType):
        _encode_partition_view(writer, type_, version, type_index)
    elif isinstance(type_, FunctionType):
        writer.varint(_TAG_FUNCTION)
        writer.varints([type_index(t) for t in type_.inputs])
        writer.varints([type_index(t) for t in type_.results])
    elif isinstance(type_, TokenType):
        writer.varint(_TAG_TOKEN)
    else:
        raise TypeError(f"not a Tile IR type: {type_!r}")
    return writer.to_bytes()


def _encode_partition_view(writer: ByteWriter, view: PartitionViewType, version: Version,
                           type_index: Callable[[Type], int]) -> None:
    writer.varint(_TAG_PARTITION_VIEW)
    has_padding = view.padding is not None
    if version >= (13, 3):
        writer.varint(1 if has_padding else 0)
    writer.fixed_list(view.tile_shape, 4)
    writer.varint(type_index(view.tensor_view))
    writer.fixed_list(view.dim_map, 4)
    if version < (13, 3):
        writer.byte(1 if has_padding else 0)
    if view.padding is not None:
        writer.varint(int(view.padding))
