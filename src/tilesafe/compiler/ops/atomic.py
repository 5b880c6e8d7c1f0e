"""Atomic read-modify-writes on a ``tc.AtomicTensor`` (safety rule 12), and the order in which
the interpreter applies a program's float additions.

An atomic tensor is lent to every program of a launch at once; what keeps the programs from
racing is that the only access it has is an atomic read-modify-write at data-dependent indices:
``a.atomic_add(value, *indices, mask=None)`` (also ``atomic_max``, ``atomic_min`` and, for
integers, ``atomic_and``, ``atomic_or``, ``atomic_xor``). Atomics do not race in the Tile IR
memory model. Loads, stores, indexing and partitions of an atomic tensor are SafetyErrors, so
no program can observe a half-finished sum. The ops return nothing.

One op, ``atomic_rmw`` (attrs ``mode``, ``masked``, ``tensor``: the parameter's name, for
messages), takes the atomic tensor, the value tile, one integer index tile per dimension and
an optional bool mask, all broadcast together (numpy rules) by the builder. Its semantics:

* every lane with ``mask`` true updates ``a[i0, i1, ...]``; lanes that hit the same element
  all count (``np.add.at``, not fancy-index assignment);
* an index outside ``[0, extent)`` in a live lane is an error naming the kernel, the program,
  the tensor and the index (in the interpreter: ``ctx.fail``; on a GPU the lane is masked off
  and touches no memory);
* integer updates commute (add wraps), so their order is unobservable; float additions round
  after each update, so their order shows in the last bits. A GPU applies them in whatever
  order the hardware serves them. The interpreter applies each atomic op's lanes in an order
  drawn from a seeded generator: :func:`interpreter_atomic_order` (a context manager) picks the
  seed, an int (the default is 0, or the environment variable
  ``TILESAFE_INTERPRETER_ATOMIC_SEED``) or ``None`` for a fresh order every time. With a seed,
  each launch is reproducible; two seeds show two orders.

Element types: 32- and 64-bit integers for every op; floats (f16, bf16, f32, f64) for
``atomic_add`` only. Tile IR (tileiras 13.4 for sm_90) refuses atomics on 8- and 16-bit
integers and bools, and float max/min and bitwise modes; they are DTypeErrors here.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator, Optional

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...errors import CompileError, DTypeError, IndexOutOfRangeError, SafetyError, ShapeError
from ..bounds import out_of_range_message
from ..ir import Value
from ..registry import builtin, op
from ..types import AtomicTensorType, TileType
from .indexed import offending_indices

__all__ = ["MODES", "interpreter_atomic_order", "current_atomic_seed"]

#: mode -> (numpy ufunc for integers, whether floats are allowed)
MODES = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
         "or": np.bitwise_or, "xor": np.bitwise_xor}
#: The float dtypes ``atomic_add`` accepts.
_FLOAT_ADD = (dt.float32, dt.float64, dt.float16, dt.bfloat16)

# -- the interpreter's order of float additions ------------------------------------------------

_ENV_SEED = "TILESAFE_INTERPRETER_ATOMIC_SEED"


def _default_seed() -> Optional[int]:
    raw = os.environ.get(_ENV_SEED)
    if raw is None or raw == "":
        return 0
    if raw.lower() == "none":
        return None
    try:
        seed = int(raw)
    except ValueError:
        raise ValueError(f"{_ENV_SEED}={raw!r} is not an integer (or 'none')") from None
    if seed < 0:
        raise ValueError(f"{_ENV_SEED}={raw!r} must be a non-negative integer")
    return seed


_SEED: contextvars.ContextVar = contextvars.ContextVar("tilesafe_atomic_seed")
_MISSING = object()


def current_atomic_seed() -> Optional[int]:
    """The seed the interpreter orders float atomic additions with here (None: a fresh order
    each time)."""
    seed = _SEED.get(_MISSING)
    return _default_seed() if seed is _MISSING else seed


@contextlib.contextmanager
def interpreter_atomic_order(seed: Optional[int]) -> Iterator[None]:
    """``with ts.interpreter_atomic_order(seed):`` — the order in which the interpreter
    applies float atomic additions inside the block.

    A GPU applies the lanes of ``atomic_add`` on floats in an unspecified order, and float
    addition rounds after each update, so the last bits of a sum may differ from run to run.
    The interpreter makes that visible but reproducible: each atomic op of each tile program
    applies its lanes in an order drawn from a generator seeded by ``seed``, the program's
    coordinates and the op's source line. ``seed`` is a non-negative int (the same seed gives
    the same order; another seed most likely another one) or ``None`` (a fresh order every
    time, like a GPU). Outside any block the seed is 0, or the environment variable
    ``TILESAFE_INTERPRETER_ATOMIC_SEED`` (an int, or ``none``). Integer atomics commute, so
    their results never depend on it. The setting is per thread and per asyncio task (a
    context variable), and applies to launches that run (``.sync()``) inside the block.

    The interpreter still runs the tile programs one after another in grid order, so it
    reorders the updates within each atomic op of a program, not across programs (a GPU
    interleaves both): code that must not depend on the order has to tolerate either.
    """
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool)
                             or seed < 0):
        raise ValueError(f"interpreter_atomic_order: seed must be a non-negative int or None, "
                         f"got {seed!r}")
    token = _SEED.set(None if seed is None else int(seed))
    try:
        yield
    finally:
        _SEED.reset(token)


def _generator(ctx) -> np.random.Generator:
    seed = current_atomic_seed()
    if seed is None:
        return np.random.default_rng()
    where = ctx.location
    line, col = (where.line, where.col) if where is not None else (0, 0)
    return np.random.default_rng([seed, *ctx.program_id, line, col])


# -- type rule and semantics ---------------------------------------------------------------------


def _dtype_problem(mode: str, dtype: DType) -> Optional[tuple[str, str]]:
    """Why ``atomic_<mode>`` cannot update ``dtype`` elements (message, fix), or None."""
    name = f"atomic_{mode}"
    if dtype.is_bool or (dtype.is_int and dtype.bits < 32):
        return (f"{name} on {dtype.short} elements is not supported: the GPU has atomics on "
                "32- and 64-bit elements only",
                "use an i32/u32/i64/u64 (or f32 for atomic_add) atomic tensor and convert on "
                "the host afterwards")
    if dtype.is_float and mode != "add":
        what = "bitwise" if mode in ("and", "or", "xor") else "float max/min"
        return (f"{name} needs an integer atomic tensor, got {dtype.short} ({what} atomics do "
                "not exist for floats)",
                "use atomic_add on floats; for a float max/min, keep the values in an integer "
                "tensor (e.g. an order-preserving bit pattern) or reduce in a second pass"
                if what != "bitwise" else "use an integer atomic tensor")
    if dtype.is_float and dtype not in _FLOAT_ADD:
        return (f"atomic_add on {dtype.short} is not supported", "use f32 or f64")
    return None


def _atomic_rule(types, attrs):
    a, value, *rest = types
    if not isinstance(a, AtomicTensorType):
        raise CompileError(f"atomic_{attrs['mode']} needs a tc.AtomicTensor, got {a}")
    problem = _dtype_problem(attrs["mode"], a.dtype)
    if problem:
        raise DTypeError(problem[0], hint=problem[1])
    indices = rest[:a.rank]
    if len(indices) != a.rank or len(rest) != a.rank + bool(attrs["masked"]):
        raise ShapeError(f"atomic_{attrs['mode']}: {len(rest)} index operand(s) for a rank-"
                         f"{a.rank} atomic tensor")
    if value != TileType(a.dtype, getattr(value, "shape", None)):
        raise DTypeError(f"atomic_{attrs['mode']}: value {value} is not a {a.dtype.short} tile")
    for t in indices:
        if not (isinstance(t, TileType) and t.dtype.is_int and t.shape == value.shape):
            raise DTypeError(f"atomic_{attrs['mode']}: index {t} must be an integer tile of "
                             f"shape {value.shape}")
    if attrs["masked"] and rest[-1] != TileType(dt.bool_, value.shape):
        raise DTypeError(f"atomic_{attrs['mode']}: mask {rest[-1]} must be a bool tile of "
                         f"shape {value.shape}")
    return ()


def _out_of_range(indices, dims, live) -> np.ndarray:
    """The live lanes whose index lies outside ``[0, extent)`` in some dimension."""
    bad = np.zeros(live.shape, dtype=bool)
    for i, n in zip(indices, dims):
        bad |= (i >= n) if i.dtype.kind == "u" else ((i < 0) | (i >= n))
    return bad & live


def _atomic_eval(ctx, attrs, a, value, *rest):
    mode, data, dtype = attrs["mode"], a.data, a.dtype
    rank = data.ndim
    value = np.asarray(value)
    indices = [np.broadcast_to(np.asarray(i), value.shape) for i in rest[:rank]]
    live = (np.broadcast_to(np.asarray(rest[rank], dtype=bool), value.shape)
            if attrs["masked"] else np.ones(value.shape, dtype=bool))
    bad = _out_of_range(indices, data.shape, live)
    if bad.any():
        ctx.fail(out_of_range_message("atomic_rmw", offending_indices(indices, data.shape, live),
                                      data.shape, attrs), IndexOutOfRangeError)
    targets = tuple(i[live].astype(np.int64) for i in indices)
    values = value[live]
    if values.size == 0:
        return None
    if dtype.is_int:
        MODES[mode].at(data, targets, values.astype(data.dtype))
        return None
    _add_floats_in_order(ctx, data, dtype, targets, values)
    return None


def _add_floats_in_order(ctx, data, dtype: DType, targets, values) -> None:
    """Add ``values`` into ``data[targets]`` one lane at a time, in a seeded random order,
    rounding to ``dtype`` after each addition (what a GPU's atomic adds do, in some order).
    Lanes are applied in rounds of distinct elements: round r adds, to every element, the
    r-th of the lanes that hit it, in the drawn order."""
    order = _generator(ctx).permutation(values.size)
    values = values[order].astype(np.float64)
    targets = tuple(t[order] for t in targets)
    flat = np.ravel_multi_index(targets, data.shape) if data.ndim else np.zeros(values.size,
                                                                                dtype=np.int64)
    by_target = np.argsort(flat, kind="stable")
    sorted_flat = flat[by_target]
    first = np.ones(sorted_flat.size, dtype=bool)
    first[1:] = sorted_flat[1:] != sorted_flat[:-1]
    starts = np.flatnonzero(first)
    group_start = starts[np.cumsum(first) - 1]
    turn = np.empty(values.size, dtype=np.int64)
    turn[by_target] = np.arange(values.size) - group_start
    for r in range(int(turn.max()) + 1):
        pick = turn == r
        at = tuple(t[pick] for t in targets)
        current = dtype.to_compute(data[at]).astype(np.float64)
        data[at] = dtype.to_storage(dtype.round(current + values[pick]))


op("atomic_rmw", "Atomically combine a value tile into an atomic tensor at integer index "
   "tiles (``mode``: add, max, min, and, or, xor; optional mask); returns nothing.",
   _atomic_rule, _atomic_eval, effect="write")


# -- the device language -------------------------------------------------------------------------


def _atomic_arg(b, a, name: str) -> Value:
    if isinstance(a, Value) and isinstance(a.type, AtomicTensorType):
        return a
    shown = a.type if isinstance(a, Value) else type(a).__name__
    raise b.error(CompileError, f"{name}: the first argument must be a tc.AtomicTensor "
                  f"parameter, got {shown}", "declare the parameter as tc.AtomicTensor[dtype, "
                  "shape] and pass ts.atomic(t) at launch; outputs owned by one program are "
                  "written with z.store(tile)")


def _index_tile(b, index, axis: int, name: str) -> Value:
    v = b.tile(index, f"{name} index {axis}")
    if not v.type.dtype.is_int:
        raise b.error(DTypeError, f"{name}: index {axis} must be an integer tile, got {v.type}",
                      "convert it: i.astype(tc.i32)")
    return v


def _make_builder(mode: str):
    name = f"atomic_{mode}"

    def build(b, a, value, *indices, mask=None):
        a = _atomic_arg(b, a, name)
        t: AtomicTensorType = a.type
        problem = _dtype_problem(mode, t.dtype)
        if problem:
            raise b.error(DTypeError, *problem)
        if len(indices) == 1 and isinstance(indices[0], tuple):
            indices = indices[0]
        if len(indices) != t.rank:
            raise b.error(ShapeError, f"{name}: {len(indices)} index value(s) for the rank-"
                          f"{t.rank} atomic tensor '{a.name}'",
                          f"give one integer index (tile or scalar) per dimension ({t.rank})")
        v = b.exact_tile(value, t.dtype, name, "value", "the atomic tensor")
        index_tiles = [_index_tile(b, i, axis, name) for axis, i in enumerate(indices)]
        operands = [v, *index_tiles]
        if mask is not None:
            operands.append(b.mask_tile(mask, name, "mask=idx < n"))
        operands = b.broadcast_together(operands, name, "the value, index and mask")
        b.emit("atomic_rmw", (a, *operands), {"mode": mode, "masked": mask is not None,
                                              "tensor": a.name})

    build.__doc__ = f"""{name}(a, value, *indices, mask=None)   (also a.{name}(value, ...))

    Atomically ``{_VERBS[mode]}`` on the atomic tensor ``a``, for every lane of ``value``
    and the index tiles broadcast together (numpy rules): one integer index (tile or scalar)
    per dimension of ``a``. Lanes that hit the same element all count,
    in some order. Where ``mask`` (a bool tile) is False nothing happens. An index outside the
    tensor is an error naming the kernel and the index (out-of-range lanes never touch
    memory). ``value`` has ``a``'s dtype (a Python number is converted). Returns nothing.

    {_DTYPES[mode]}
    """
    return build


_VERBS = {"add": "a[indices] += value", "max": "a[indices] = max(a[indices], value)",
          "min": "a[indices] = min(a[indices], value)", "and": "a[indices] &= value",
          "or": "a[indices] |= value", "xor": "a[indices] ^= value"}
_FLOAT_NOTE = """Element types: i32, u32, i64, u64, f16, bf16, f32, f64. Float additions round
    after each update, in an unspecified order, so the last bits of a float sum may vary
    from run to run (the interpreter's order: ``ts.interpreter_atomic_order``)."""
_DTYPES = {"add": _FLOAT_NOTE,
           **{m: """Element types: i32, u32, i64, u64 (unsigned types compare as unsigned)."""
              for m in ("max", "min")},
           **{m: "Element types: i32, u32, i64, u64." for m in ("and", "or", "xor")}}

for _mode in MODES:
    _build = _make_builder(_mode)
    builtin(f"atomic_{_mode}", _build.__doc__, _build, methods=(("atomic", f"atomic_{_mode}"),))


def _forbid_access(what: str):
    def build(b, a, *args, **kwargs):
        raise b.error(SafetyError, f"the atomic tensor '{a.name}' has no {what}: a "
                      "tc.AtomicTensor is updated by atomic read-modify-writes only, since "
                      "every program may update it concurrently (safety rule 12)",
                      "update it with a.atomic_add(value, *indices) (or atomic_max, atomic_min, "
                      "atomic_and/or/xor); read the result on the host after the launch "
                      "completes, or pass it to a later launch as a tc.Tensor")
    return build


for _method, _what in (("load", "load()"), ("store", "store()"), ("partition", "partition()"),
                       ("__getitem__", "indexing")):
    builtin(f"atomic_tensor_{_method.strip('_')}", f"{_what} is not allowed on an atomic "
            "tensor.", _forbid_access(_what), methods=(("atomic", _method),), public=False)
