"""The IR builder: emits type-checked operations into the current block.

It also owns the coercion rules every builtin shares, so they are written once:

* *Weakly typed* operands adapt to the strongly typed values they meet. They are Python
  numbers, and *weak runtime scalars*: a kernel parameter declared with the Python type
  ``float`` (an f32 at run time) or ``int`` (an i32), and the scalar result of an elementwise
  op whose operands are all weak (``1.0 / scale``, ``-eps``, ``n * 2``). A scalar declared
  with a dtype (``tc.f32``, ``tc.i32``) is strong, like every tile.
* Meeting a strong value of dtype D, a weak operand becomes a D: a number must fit (an ``int``
  meets any number dtype, a ``float`` only float dtypes, a ``bool`` bool or int dtypes); a weak
  runtime scalar obeys the same kinds (``float`` -> float dtypes only; ``int`` -> any int or
  float dtype, never bool) and is converted with ``astype``'s semantics: floats round to
  nearest even (a ``float`` with an f16 tile is rounded to f16; with an f64 tile it widens
  exactly), ints wrap (an ``int`` with a u8 tile keeps its low 8 bits) and ints convert to
  floats rounding to nearest even. A weak float meeting an int tile is a DTypeError, as a float
  literal is. Weakness only relaxes the dtype: shapes broadcast as usual.
* Weak operands alone: a runtime float wins over ints (a weak ``int`` beside a weak ``float``
  or a float literal is converted to f32), else the runtime value's dtype; numbers alone
  default to i32 / f32 / bool.
* Two strong values must have the same dtype; there is no implicit promotion (use
  ``.astype``). ``astype`` of a weak scalar is strong; loop-carried and if-merged values are
  strong (a weak value assigned to a carried variable takes the variable's dtype, as a number
  does).
* Shapes broadcast by numpy's rules; the builder inserts explicit ``reshape``/``broadcast`` ops
  so that every elementwise IR op sees operands of one shape.

The conversions are ordinary ``convert`` ops in the IR, so every backend computes them exactly
as the interpreter does.
"""

from __future__ import annotations

import contextlib
import numbers
from typing import Any, Iterator, Optional, Sequence

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import (BroadcastError, CompileError, DTypeError, Location, ShapeError,
                      TileShapeError)
from .ir import Block, Operation, Value
from .registry import get_op
from .types import TileType, broadcast_shapes, tile_shape_problem

PyScalar = (bool, int, float)


def is_py_scalar(x: Any) -> bool:
    return isinstance(x, PyScalar) and not isinstance(x, DType)


def is_weak(x: Any) -> bool:
    """Whether ``x`` is weakly typed: a Python number or a weak runtime scalar."""
    return is_py_scalar(x) or (isinstance(x, Value) and x.weak)


def weak_kind_fits(source: DType, target: DType) -> bool:
    """Whether a weak runtime scalar of ``source`` may become a ``target`` (module docstring)."""
    if source.is_float:
        return target.is_float
    return source.is_int and not target.is_bool


def default_dtype(x: Any) -> DType:
    if isinstance(x, bool):
        return dt.bool_
    if isinstance(x, int):
        return dt.int32
    return dt.float32


def describe(x: Any) -> str:
    """A short human description of a frontend value, for error messages."""
    if isinstance(x, Value):
        return str(x.type)
    if isinstance(x, bool):
        return f"bool constant {x}"
    if isinstance(x, numbers.Number):
        return f"{type(x).__name__} constant {x!r}"
    if isinstance(x, tuple):
        return f"tuple of {len(x)}"
    return type(x).__name__


class IRBuilder:
    """Appends operations to a stack of blocks; ``location`` is the source line being built."""

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name
        self.location: Optional[Location] = None
        self._blocks: list[Block] = []

    # -- blocks ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def inside(self, block: Block) -> Iterator[Block]:
        self._blocks.append(block)
        try:
            yield block
        finally:
            self._blocks.pop()

    @property
    def block(self) -> Block:
        return self._blocks[-1]

    @contextlib.contextmanager
    def at(self, location: Optional[Location]) -> Iterator[None]:
        saved = self.location
        if location is not None:
            self.location = location
        try:
            yield
        finally:
            self.location = saved

    # -- emission -------------------------------------------------------------------------
    def emit(self, name: str, operands: Sequence[Value], attrs: Optional[dict] = None,
             regions: Sequence[Block] = ()) -> tuple[Value, ...]:
        definition = get_op(name)
        attrs = dict(attrs or {})
        try:
            result_types = definition.infer(tuple(v.type for v in operands), attrs)
        except CompileError as err:
            raise err.with_context(location=self.location, kernel=self.kernel_name)
        for rt in result_types:
            if isinstance(rt, TileType):
                self.check_tile_shape(rt.shape)
        results = tuple(Value(t) for t in result_types)
        self.block.ops.append(Operation(name, tuple(operands), results, attrs, self.location,
                                        tuple(regions)))
        return results

    def emit1(self, name: str, operands: Sequence[Value], attrs: Optional[dict] = None) -> Value:
        (result,) = self.emit(name, operands, attrs)
        return result

    def error(self, cls: type[CompileError], message: str, hint: str = "") -> CompileError:
        """An error of ``cls`` at the current location (raise it)."""
        return cls(message, self.location, kernel=self.kernel_name, hint=hint)

    def check_tile_shape(self, shape: tuple[int, ...]) -> None:
        problem = tile_shape_problem(shape)
        if problem:
            raise self.error(TileShapeError, problem,
                             "tile dimensions must be compile-time powers of two (1, 2, 4, ...) "
                             "with at most 2**24 elements; edge tiles are padded and masked, so "
                             "round the tile size up to a power of two")

    # -- values ---------------------------------------------------------------------------
    def constant(self, value: Any, dtype: DType, shape: tuple[int, ...] = ()) -> Value:
        if not dtype.fits(value):
            raise self.error(DTypeError, f"constant {value!r} does not fit in {dtype.short}",
                             f"use a value in range for {dtype.short} or convert the tile with "
                             f".astype(...) first")
        return self.emit1("constant", (), {"value": value, "dtype": dtype, "shape": tuple(shape)})

    def tile(self, x: Any, what: str = "operand") -> Value:
        """``x`` as a tile value; Python scalars become constants of their default dtype."""
        if isinstance(x, Value) and isinstance(x.type, TileType):
            return x
        if is_py_scalar(x):
            return self.constant(x, default_dtype(x))
        if isinstance(x, Value):
            raise self.error(CompileError, f"{what} is a {x.type}, not a tile",
                             "load a tile from a tensor first: tc.load_tile_like(x, z), z.load() "
                             "or x.partition(shape).load(index)")
        raise self.error(CompileError, f"{what} must be a tile or a scalar, got {describe(x)}")

    def exact_tile(self, x: Any, dtype: DType, op: str, what: str, owner: str) -> Value:
        """``x`` as a ``dtype`` tile for an operand that converts nothing typed (an atomic's
        value): a tile of another dtype (not a weak scalar) is a DTypeError saying it differs
        from ``owner``'s (``"the pointer"``); a Python number becomes a constant, refused if it
        is a bool, a float for an integer dtype, or out of ``dtype``'s range."""
        if isinstance(x, Value) and isinstance(x.type, TileType) and not x.weak \
                and x.type.dtype is not dtype:
            raise self.error(DTypeError, f"{op}: {what} dtype {x.type.dtype.short} differs from "
                             f"{owner}'s {dtype.short}",
                             f"convert first: {what}.astype(tc.{dtype.short})")
        if is_py_scalar(x):
            if isinstance(x, bool) or (isinstance(x, float) and not dtype.is_float) \
                    or not dtype.fits(x):
                raise self.error(DTypeError, f"{op}: {what} {x!r} is not a {dtype.short} value",
                                 f"pass a {'float' if dtype.is_float else 'integer'} that "
                                 f"{dtype.short} can hold")
            return self.constant(x, dtype)
        (v,) = self.coerce([x], op, dtype=dtype)
        return v

    def mask_tile(self, mask: Any, op: str, example: str) -> Value:
        """A bool tile for ``op``'s ``mask=`` (DTypeError otherwise, the fix naming
        ``example``, e.g. ``"mask=idx < n"``)."""
        m = self.tile(mask, f"{op} mask")
        if not m.type.dtype.is_bool:
            raise self.error(DTypeError, f"{op}: mask must be a bool tile, got {m.type}",
                             f"compare to make one, e.g. {example}")
        return m

    def broadcast_together(self, operands: Sequence[Value], op: str,
                           names: str) -> list[Value]:
        """Tiles of any dtypes broadcast to one shape by numpy rules (ShapeError naming
        ``names``, e.g. ``"the value, index and mask"``, when they cannot be)."""
        shape: tuple = ()
        for x in operands:
            new = broadcast_shapes(shape, x.type.shape)
            if new is None:
                shapes = ", ".join(str(v.type.shape) for v in operands)
                raise self.error(ShapeError, f"{op}: {names} shapes ({shapes}) cannot be "
                                 "broadcast together", "numpy rules apply: align shapes from "
                                 "the right; each dimension must be equal or 1")
            shape = new
        return [self.broadcast_to(x, shape) for x in operands]

    def scalar_int(self, x: Any, what: str = "index") -> Value:
        """A rank-0 integer value (i32 for Python ints)."""
        v = self.tile(x, what)
        if not (v.type.is_scalar and v.type.dtype.is_int):
            raise self.error(DTypeError, f"{what} must be an integer scalar, got {v.type}")
        return v

    def dtype_arg(self, x: Any, what: str) -> DType:
        """A compile-time dtype argument (``tc.f32``, ``"f32"``, ``float``...)."""
        if isinstance(x, Value) or x is None:
            raise self.error(DTypeError, f"{what}: expected a dtype such as tc.f32, got "
                             f"{describe(x)}")
        try:
            return dt.as_dtype(x)
        except TypeError as err:
            raise self.error(DTypeError, f"{what}: {err}") from None

    def shape_arg(self, x: Any, what: str) -> tuple[int, ...]:
        """A compile-time shape: an int or a tuple of ints (Const parameters are ints)."""
        items = x if isinstance(x, tuple) else (x,)
        for d in items:
            if isinstance(d, Value) or not isinstance(d, int) or isinstance(d, bool):
                raise self.error(TileShapeError,
                                 f"{what}: shape {describe(x) if not isinstance(x, tuple) else x}"
                                 f" is not a compile-time constant",
                                 "tile shapes must be known when the kernel is compiled: use "
                                 "integer literals or tc.Const[int] parameters")
        return tuple(items)

    def int_arg(self, x: Any, what: str) -> int:
        """A compile-time integer argument (an axis, a size)."""
        if isinstance(x, Value) or not isinstance(x, int) or isinstance(x, bool):
            raise self.error(CompileError, f"{what} must be a compile-time integer, got "
                             f"{describe(x)}", "use a literal or a tc.Const[int] parameter")
        return x

    def axis_arg(self, x: Any, rank: int, what: str) -> int:
        """A compile-time axis in [-rank, rank), normalized to [0, rank)."""
        axis = self.int_arg(x, f"{what} axis")
        if not -rank <= axis < rank:
            raise self.error(ShapeError, f"{what}: axis {axis} is out of range for rank {rank}",
                             f"use an axis in [{-rank}, {rank - 1}]")
        return axis % rank

    def common_dtype(self, xs: Sequence[Any], what: str) -> DType:
        """The dtype ``xs`` meet in (the rules of the module docstring); raises DTypeError."""
        strong = [x for x in xs if isinstance(x, Value) and not x.weak]
        weak = [x for x in xs if isinstance(x, Value) and x.weak]
        if strong:
            target = strong[0].type.dtype
            for t in strong[1:]:
                if t.type.dtype is not target:
                    raise self.error(
                        DTypeError,
                        f"{what}: element types differ ({target.short} and "
                        f"{t.type.dtype.short})",
                        f"convert one side explicitly, e.g. x.astype(tc.{target.short}); "
                        f"tilesafe never promotes element types implicitly")
        elif weak:
            floats = [v.type.dtype for v in weak if v.type.dtype.is_float]
            if floats:
                target = floats[0]
            elif any(isinstance(x, float) for x in xs):
                target = dt.float32
            else:
                target = weak[0].type.dtype
        else:
            kinds = [default_dtype(x) for x in xs]
            if any(d.is_float for d in kinds):
                return dt.float32
            if any(d.is_int for d in kinds):
                return dt.int32
            return dt.bool_
        for x in xs:
            if is_py_scalar(x) and not self._weak_fits(x, target):
                raise self.error(
                    DTypeError,
                    f"{what}: {describe(x)} cannot be combined with a {target.short} tile",
                    self._weak_hint(x, target))
            if isinstance(x, Value) and x.weak:
                self.check_weak(x, target, what)
        return target

    def check_weak(self, v: Value, target: DType, what: str) -> None:
        """Raise the DTypeError of a weak scalar that cannot become a ``target``."""
        if weak_kind_fits(v.type.dtype, target):
            return
        kind = "float" if v.type.dtype.is_float else "int"
        name = f"'{v.name}'" if v.name else "scalar"
        tc_target = "bool_" if target.is_bool else target.short
        raise self.error(
            DTypeError,
            f"{what}: the runtime {kind} {name} ({v.type.dtype.short}) cannot be combined with "
            f"a {target.short} tile",
            f"a runtime {kind} adapts to {'float' if kind == 'float' else 'int and float'} "
            f"tiles only: convert explicitly, e.g. {v.name or 's'}.astype(tc.{tc_target}) "
            f"or t.astype(tc.{v.type.dtype.short})")

    def adapt(self, x: Any, dtype: DType, what: str) -> Any:
        """``x`` as a tile of ``dtype`` when it is weakly typed (a Python number becomes a
        constant, a weak runtime scalar is converted); anything else is returned unchanged,
        for the op's own type rule to check."""
        if is_py_scalar(x):
            return self.constant(x, dtype)
        if isinstance(x, Value) and x.weak and isinstance(x.type, TileType) \
                and x.type.dtype is not dtype:
            self.check_weak(x, dtype, what)
            return self.emit1("convert", (x,), {"dtype": dtype})
        return x

    def weak_result(self, result: Value, operands: Sequence[Any]) -> Value:
        """Mark ``result`` (an elementwise op's, of its operands' dtype) weak when it is a
        scalar computed from weakly typed operands only, at least one a runtime value."""
        if result.type.is_scalar and all(is_weak(x) for x in operands) \
                and any(isinstance(x, Value) for x in operands):
            result.weak = True
        return result

    @staticmethod
    def _weak_fits(x: Any, dtype: DType) -> bool:
        if isinstance(x, bool):
            return dtype.is_bool or dtype.is_int
        if isinstance(x, int):
            return not dtype.is_bool and dtype.fits(x)
        return dtype.is_float

    @staticmethod
    def _weak_hint(x: Any, dtype: DType) -> str:
        if isinstance(x, float):
            return "use an integer literal, or convert the tile: t.astype(tc.f32)"
        if isinstance(x, int) and dtype.is_int:
            return f"the literal is out of range for {dtype.short}; use a wider dtype"
        return f"convert the tile with .astype(...) to a dtype that can hold {x!r}"

    def coerce(self, xs: Sequence[Any], what: str,
               dtype: Optional[DType] = None) -> list[Value]:
        """Make tiles of one dtype and one (broadcast) shape out of ``xs``."""
        for x in xs:
            if x is None:
                raise self.error(CompileError, f"{what}: operand is None, not a tile",
                                 "atomic updates, stores and device functions without a "
                                 "return give no value; use the value you computed")
            if not (is_py_scalar(x) or isinstance(x, Value)):
                raise self.error(CompileError, f"{what}: operand is a {describe(x)}, not a tile")
            if isinstance(x, Value) and not isinstance(x.type, TileType):
                self.tile(x, what)  # raises the explanatory error
        target = dtype or self.common_dtype(xs, what)
        shape: tuple[int, ...] = ()
        for x in xs:
            if isinstance(x, Value):
                new = broadcast_shapes(shape, x.type.shape)
                if new is None:
                    shapes = " and ".join(str(v.type.shape) for v in xs if isinstance(v, Value))
                    raise self.error(BroadcastError,
                                     f"{what}: shapes {shapes} cannot be broadcast together",
                                     "numpy rules apply: align shapes from the right; each "
                                     "dimension must be equal or 1. Use tc.reshape/tc.broadcast "
                                     "or reduce with keepdims=True")
                shape = new
        return [self.broadcast_to(self.adapt(x, target, what), shape) for x in xs]

    def broadcast_to(self, v: Value, shape: tuple[int, ...]) -> Value:
        """Broadcast ``v`` to ``shape`` by numpy rules (reshape to the rank, then expand)."""
        src = v.type.shape
        if src == tuple(shape):
            return v
        if broadcast_shapes(src, shape) != tuple(shape):
            raise self.error(BroadcastError, f"cannot broadcast shape {src} to {tuple(shape)}",
                             "each dimension must be equal to the target or 1")
        if len(src) < len(shape):
            v = self.emit1("reshape", (v,), {"shape": (1,) * (len(shape) - len(src)) + src})
        if v.type.shape != tuple(shape):
            v = self.emit1("broadcast", (v,), {"shape": tuple(shape)})
        return v
