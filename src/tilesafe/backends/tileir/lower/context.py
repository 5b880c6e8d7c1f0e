"""The state of one kernel's lowering to Tile IR, shared by the per-op lowering functions.

:class:`LoweringContext` maps typed-IR values to what they became in the bytecode (a Tile IR
value, a tensor argument, a partition view, a tuple of tile coordinates), carries the current
memory token of the mutable-access chain (which orders prints too), and offers the small numeric helpers the op lowerings
share (constants, dtype -> Tile IR type, computing 16-bit floats in f32). It also holds the
:func:`lowers` decorator that registers a lowering on the op's registry declaration.

Nothing here knows about any particular op; the op lowerings live in the sibling modules
``arith``, ``tile``, ``memory`` and ``control``. It builds on the ``bytecode`` package,
``tilesafe.compiler``, ``tilesafe.dtypes`` and ``tilesafe.errors`` only: never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from .... import dtypes as dt
from ....compiler import ops as _ops  # noqa: F401 (every op declared: lowerings attach to them)
from ....compiler import registry
from ....compiler.ir import Block, KernelIR, Operation
from ....compiler.ir import Value as IRValue
from ....compiler.types import (AtomicTensorType, MappedPartitionType,
                               PointerType as IRPointerType, TensorViewType,
                               TileType as IRTileType)
from ....dtypes import DType
from ....errors import CompileError
from ..bytecode import (BF16, F8E4M3FN, F8E5M2, F16, F32, F64, I1, I8, I16, I32, I64, TF32,
                        FunctionBuilder, ModuleBuilder, PaddingValue, ScalarType, Signedness,
                        SourceLocation, TileType, Value)

__all__ = ["LoweringContext", "TensorArg", "PartitionArg", "lowers", "scalar_type",
           "memory_type", "tile_type", "LowerFn"]

LowerFn = Callable[["LoweringContext", Operation], None]


_SCALARS: dict[DType, ScalarType] = {
    dt.bool_: I1, dt.int8: I8, dt.uint8: I8, dt.int16: I16, dt.uint16: I16, dt.int32: I32,
    dt.uint32: I32, dt.int64: I64, dt.uint64: I64, dt.float16: F16, dt.bfloat16: BF16,
    dt.float32: F32, dt.float64: F64, dt.float8_e4m3fn: F8E4M3FN, dt.float8_e5m2: F8E5M2,
    dt.tfloat32: TF32,
}

PADDING = {"zero": PaddingValue.ZERO, "neg_zero": PaddingValue.NEG_ZERO, "nan": PaddingValue.NAN,
           "pos_inf": PaddingValue.POS_INF, "neg_inf": PaddingValue.NEG_INF}

#: 16-bit float formats: their math (and multi-step arithmetic) is computed in f32.
HALF_FLOATS = (dt.float16, dt.bfloat16)


def scalar_type(dtype: DType) -> ScalarType:
    """The Tile IR element type of a tile of ``dtype`` (bool -> i1; signedness is dropped)."""
    return _SCALARS[dtype]


def signedness(dtype: DType) -> Signedness:
    """How integer ops treat values of ``dtype`` (Tile IR integers are signless)."""
    return Signedness.SIGNED if dtype.is_signed else Signedness.UNSIGNED


def memory_type(dtype: DType) -> ScalarType:
    """The Tile IR element type of ``dtype`` in global memory (bool is one byte, i8; the
    tile-only tf32 never is in memory)."""
    if dtype.tile_only:
        raise CompileError(f"internal error: {dtype.short} has no memory type")
    return I8 if dtype.is_bool else _SCALARS[dtype]


def tile_type(t: IRTileType) -> TileType:
    return TileType(scalar_type(t.dtype), t.shape)


def lowers(*names: str) -> Callable[[LowerFn], LowerFn]:
    """Register the decorated function as the Tile IR lowering of the ops ``names``."""
    def register(fn: LowerFn) -> LowerFn:
        for name in names:
            registry.OPS[name].lowerings["tileir"] = fn
        return fn
    return register


@dataclass
class TensorArg:
    """A tensor-like kernel parameter: its pointer, dims and strides (Tile IR values, or ints
    when static) and the tensor view built from them at entry."""

    name: str
    dtype: DType
    ptr: Value
    dims: list[Union[int, Value]]
    strides: list[Union[int, Value]]
    view: Optional[Value] = None
    partitions: dict[tuple, Value] = field(default_factory=dict)
    #: an indexed partition's positions (entry values), and once validated at entry the
    #: tile coordinates this program owns (``lower/positions.py``)
    positions: Optional["Positions"] = None
    own_index: Optional[list] = None


@dataclass
class Positions:
    """The positions tensor of an indexed partition: its address, row count and strides (rank-0
    i32 values) and its integer dtype."""

    ptr: Value
    count: Value
    stride0: Value
    stride1: Value
    dtype: DType


@dataclass(frozen=True)
class PartitionArg:
    """A partition view (made at entry) of a tensor argument."""

    tensor: TensorArg
    view: Value
    tile_shape: tuple[int, ...]


class LoweringContext:
    """Everything one kernel's lowering needs; op lowerings read and extend it."""

    def __init__(self, kernel: KernelIR, module: ModuleBuilder, fn: FunctionBuilder, *,
                 inbounds: bool, debug: bool):
        self.kernel = kernel
        self.fn = fn
        self.inbounds = inbounds
        self.debug = debug
        self.token: Optional[Value] = None
        self.gate: Optional[Value] = None
        self.block_ids: Optional[tuple[Value, Value, Value]] = None
        #: the i1 verdict "the positions of some indexed partition failed" (the union over
        #: the validations, ``lower/positions.py``): where it is true nothing is written
        self.positions_verdict: Optional[Value] = None
        self.num_blocks: Optional[tuple[Value, Value, Value]] = None
        self._values: dict[int, Any] = {}
        self._terminators: list[Callable[[list[Value]], None]] = []
        self._loop_exits: list[dict[str, Callable[[list[Value]], None]]] = []
        self._touches: dict[int, bool] = {}
        #: the fault record's address (a rank-0 ``ptr<i64>``), when the kernel has checked
        #: accesses, and each checked access's site number (``lower/checks.py``), by op id
        self.fault_record: Optional[Value] = None
        #: the verdict word's address (a rank-0 ``ptr<i32>``) of a kernel whose positions a
        #: launch before it validates (``lower/positions.py``)
        self.verdict: Optional[Value] = None
        self.checked_sites: dict[int, int] = {}

    # -- values ----------------------------------------------------------------------------------

    def get(self, value: IRValue) -> Any:
        try:
            return self._values[value.id]
        except KeyError:
            raise CompileError(f"internal error: value {value!r} used before it was lowered",
                               kernel=self.kernel.name) from None

    def set(self, value: IRValue, lowered: Any) -> None:
        self._values[value.id] = lowered

    def operands(self, op: Operation) -> list[Any]:
        return [self.get(v) for v in op.operands]

    def set_result(self, op: Operation, lowered: Any) -> None:
        self.set(op.result, lowered)

    # -- blocks, terminators, locations ----------------------------------------------------------

    def lower_block(self, block: Block) -> None:
        for op in block.ops:
            self.lower_op(op)

    def lower_op(self, op: Operation) -> None:
        definition = registry.OPS.get(op.name)
        lower = definition.lowerings.get("tileir") if definition is not None else None
        if lower is None:
            raise CompileError(f"op '{op.name}' has no Tile IR lowering, so this kernel cannot "
                               "run on a GPU yet", op.location, kernel=self.kernel.name,
                               hint="run it on the interpreter (device 'cpu'), or add a "
                               "'tileir' lowering next to the op's declaration")
        if self.debug:
            self.fn.set_location(source_location(op.location))
        try:
            lower(self, op)
        except CompileError as err:
            raise err.with_context(location=op.location, kernel=self.kernel.name)
        except (ValueError, TypeError) as err:
            raise CompileError(f"internal error lowering '{op.name}' to Tile IR: {err}",
                               op.location, kernel=self.kernel.name,
                               hint="this is a tilesafe bug; please report it with the kernel "
                               "source") from err

    def push_terminator(self, emit: Callable[[list[Value]], None]) -> None:
        self._terminators.append(emit)

    def pop_terminator(self) -> None:
        self._terminators.pop()

    def terminate(self, values: list[Value]) -> None:
        if not self._terminators:
            raise CompileError("internal error: yield outside a region", kernel=self.kernel.name)
        self._terminators[-1](values)

    def push_loop(self, exits: dict[str, Callable[[list[Value]], None]]) -> None:
        """Enter a loop body: ``exits["continue"]``/``exits["break"]`` emit the innermost
        loop's exits (from its body or any ``if`` region nested in it)."""
        self._loop_exits.append(exits)

    def pop_loop(self) -> None:
        self._loop_exits.pop()

    def leave_loop(self, kind: str, values: list[Value]) -> None:
        if not self._loop_exits or kind not in self._loop_exits[-1]:
            raise CompileError(f"internal error: {kind} outside a loop", kernel=self.kernel.name)
        self._loop_exits[-1][kind](values)

    # -- the memory token chain ------------------------------------------------------------------

    @staticmethod
    def needs_token(op: Operation) -> bool:
        """Whether ``op`` accesses memory through a mutable view (MutTensor, mapped partition,
        raw pointer, atomic tensor) or prints: such ops are ordered by the token chain, so one
        program's updates happen in its program order (an atomic max and a later add of one
        element give the interpreter's result); shared reads are not."""
        definition = registry.OPS.get(op.name)
        if definition is not None and definition.effect == "io":
            return True
        if definition is None or definition.effect not in ("read", "write") or not op.operands:
            return False
        t = op.operands[0].type
        return (isinstance(t, (MappedPartitionType, IRPointerType, AtomicTensorType))
                or (isinstance(t, TensorViewType) and t.mutable))

    @staticmethod
    def accesses_memory(op: Operation) -> bool:
        """Whether ``op`` reads or writes global memory (through any view or pointer)."""
        definition = registry.OPS.get(op.name)
        return definition is not None and definition.effect in ("read", "write")

    def touches_memory(self, block: Block) -> bool:
        """Whether ``block`` (nested regions included) needs the token chain."""
        key = id(block)
        if key not in self._touches:
            self._touches[key] = any(
                self.needs_token(op) or any(self.touches_memory(r) for r in op.regions)
                for op in block.ops)
        return self._touches[key]

    # -- constants and types ---------------------------------------------------------------------

    def constant(self, value: Any, dtype: DType, shape: Sequence[int] = ()) -> Value:
        """A constant tile of ``dtype`` (value rounded exactly as the interpreter rounds it)."""
        shape = tuple(shape)
        if dtype.is_bool:
            data: Any = np.asarray(value).astype(bool)
        elif dtype.is_float:
            wide = np.asarray(dt.constant_source(value, dtype), dtype=np.float64)
            data = np.asarray(dtype.round(wide)).reshape(wide.shape)
        else:
            data = np.asarray(value)
            if data.dtype.kind == "b":
                data = data.astype(np.int64)
        return self.fn.constant(data, TileType(scalar_type(dtype), shape))

    def i32(self, value: int) -> Value:
        return self.fn.constant(int(value), TileType(I32))

    def dim(self, tensor: "TensorArg", axis: int) -> Value:
        """A tensor parameter's extent along ``axis`` as an i32 value (static ones constant)."""
        dim = tensor.dims[axis]
        return self.i32(dim) if isinstance(dim, int) else dim

    def splat(self, value: Value, shape: Sequence[int]) -> Value:
        """``value`` (a scalar, or a tile whose extents are 1 or ``shape``'s) broadcast to
        ``shape`` by numpy's rules; as is when it has that shape."""
        shape = tuple(shape)
        if tuple(value.type.shape) == shape:
            return value
        if len(value.type.shape) != len(shape):
            value = self.fn.reshape(value, (1,) * (len(shape) - len(value.type.shape))
                                    + tuple(value.type.shape))
        return self.fn.broadcast(value, shape)

    def like(self, value: Any, dtype: DType, ref: Value) -> Value:
        """A splat constant of ``dtype`` with the shape of ``ref``."""
        return self.constant(value, dtype, ref.type.shape)

    def to_f32(self, value: Value) -> Value:
        return self.fn.ftof(value, F32)

    def from_f32(self, value: Value, dtype: DType) -> Value:
        return self.fn.ftof(value, scalar_type(dtype))

    def in_f32(self, dtype: DType, operands: Sequence[Value],
               compute: Callable[..., Value]) -> Value:
        """``compute(*operands)``, evaluated in f32 and rounded once for f16/bf16 tiles (the
        interpreter evaluates these in float32 and rounds the result to the dtype)."""
        if dtype not in HALF_FLOATS:
            return compute(*operands)
        return self.from_f32(compute(*(self.to_f32(v) for v in operands)), dtype)

    def index_i32(self, value: Value, dtype: DType) -> Value:
        """A rank-0 integer index as i32 (narrow ints extended, 64-bit ints truncated)."""
        element = scalar_type(dtype)
        if element == I32:
            return value
        if element.bits < 32:
            return self.fn.exti(value, I32, signedness=signedness(dtype))
        return self.fn.trunci(value, I32)


def source_location(location) -> Optional[SourceLocation]:
    if location is None:
        return None
    return SourceLocation(location.file, location.line, location.col + 1)
