"""Kernel parameter annotations (``tc.Tensor[...]``, ``tc.MutTensor[...]``, ``tc.Const[...]``,
``tc.Ptr[...]``, plain scalars) and the parsing of a kernel's signature into :class:`Param` s.

Forms:

* ``tc.Tensor[dtype, shape]`` — shared, read-only. ``shape`` is a tuple of extents: an int (a
  static check), ``-1`` (dynamic) or a name (``"M"``), bound from the argument's shape as a
  compile-time constant.
* ``tc.MutTensor[dtype, shape]`` — this program's own sub-tensor; the shape is static: a name
  bound from the launch's partition (``"S"``: the whole tile shape), or a tuple of ints and
  names, each name bound from that extent of the partition's tile shape (``(1, "N")``).
* A name in a shape tuple binds one extent: it is usable in the kernel body like a
  ``tc.Const`` (``tc.zeros((BM, D), tc.f32)``), each distinct value compiles its own
  specialization, and every argument naming it must agree. If it is also a ``tc.Const[int]``
  parameter, a value passed for it is checked against the arguments, and the launch may leave
  it out (:func:`launch_bound_consts`).
* ``dtype`` may be a dtype (``tc.f32``) or a name (``"T"``) bound from the argument's dtype.
* ``tc.Const[int]`` (or ``float``, ``bool``, ``tc.DType``) — a compile-time constant; every
  distinct value compiles its own specialization.
* ``int`` / ``float`` / ``bool`` / a dtype — a runtime scalar (int -> i32, float -> f32).
* ``tc.MappedPartitionMut[dtype, tile_shape, map_shape]`` — several owned output tiles per
  program (persistent kernels).
* ``tc.Ptr[dtype]`` — a raw pointer: makes the kernel unsafe.
* ``tc.AtomicTensor[dtype, shape]`` — a tensor every program may update, only by atomic
  read-modify-writes (passed as ``ts.atomic(t)``); ``shape`` as for ``tc.Tensor``.

A name has one role in a signature: a dtype name, a whole-shape name or an extent name.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Optional, Union

from .. import dtypes as dt
from ..dtypes import DType
from .._callsite import caller_location
from ..errors import Location, SignatureError

ShapeEntry = Union[int, str, None]  # int: static extent, str: a bound name, None: dynamic


def _in_memory(dtype: DType, what: str) -> DType:
    """``dtype`` if memory can hold it; tf32 (a tile element type only) is a SignatureError."""
    try:
        return dt.memory_dtype(dtype, what)
    except TypeError as err:
        raise SignatureError(str(err), hint="declare the parameter as tc.f32 and convert the "
                             "loaded tile with .astype(tc.tf32)") from None


def _dtype_entry(value: Any) -> Union[DType, str]:
    if isinstance(value, DType):
        return _in_memory(value, "a tensor parameter")
    if isinstance(value, str):
        try:
            dtype = dt.as_dtype(value)
        except TypeError:
            if not value.isidentifier():
                raise SignatureError(f"dtype name {value!r} is not an identifier",
                                     hint="name a dtype (\"f32\") or a dtype variable "
                                     "(\"T\")") from None
            return value  # a dtype variable bound at launch
        return _in_memory(dtype, "a tensor parameter")
    try:
        dtype = dt.as_dtype(value)
    except TypeError:
        raise SignatureError(f"{value!r} is not a dtype", hint="use tc.f32, tc.i32, ... or a "
                             "name such as \"T\" bound from the argument") from None
    return _in_memory(dtype, "a tensor parameter")


def _shape_entries(shape: Any, mutable: bool) -> Union[tuple[ShapeEntry, ...], str]:
    if isinstance(shape, str):
        if not shape.isidentifier():
            raise SignatureError(f"shape name {shape!r} is not an identifier",
                                 hint="use a name such as \"S\" or a tuple of extents")
        if not mutable:
            raise SignatureError(f"a shared tc.Tensor needs an explicit shape tuple, got "
                                 f"{shape!r}", hint="use (-1,) style dynamic dims, e.g. "
                                 "tc.Tensor[tc.f32, (-1, -1)]")
        return shape
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple) or not shape:
        if mutable and shape == ():
            raise SignatureError("an output's static shape cannot be () (rank 0)",
                                 hint="declare the output with shape (1,) for a single element "
                                 "(a scalar stores into it as it is)")
        raise SignatureError(f"tensor shape must be a non-empty tuple, got {shape!r}",
                             hint="e.g. (-1,) for a 1-D tensor of any length")
    out: list[ShapeEntry] = []
    for d in shape:
        if isinstance(d, str) and d.isidentifier():
            out.append(d)
        elif isinstance(d, int) and not isinstance(d, bool) and (d >= 1 or d == -1):
            if d == -1 and mutable:
                raise SignatureError("a tc.MutTensor's shape is static: -1 is not allowed",
                                     hint="name the shape (\"S\") or its extents ((1, \"N\")) "
                                     "so the partition binds them")
            out.append(None if d == -1 else d)
        else:
            raise SignatureError(f"bad shape entry {d!r}",
                                 hint="use a positive int, -1 (dynamic) or a name (\"N\") "
                                 "bound from the argument")
    return tuple(out)


@dataclass(frozen=True)
class TensorSpec:
    """``tc.Tensor[...]`` (mutable=False) or ``tc.MutTensor[...]`` (mutable=True)."""

    dtype: Union[DType, str]
    shape: Union[tuple[ShapeEntry, ...], str]
    mutable: bool


@dataclass(frozen=True)
class ConstSpec:
    """``tc.Const[T]``: a compile-time constant of Python type ``T`` (None: any)."""

    type: Optional[type]


@dataclass(frozen=True)
class ScalarSpec:
    """A runtime scalar parameter of a fixed dtype; ``weak`` when declared with the Python type
    ``int`` or ``float`` (it adapts to the tile it meets: ``compiler.builder``)."""

    dtype: DType
    weak: bool = False


@dataclass(frozen=True)
class PointerSpec:
    """``tc.Ptr[dtype]``: a raw pointer (unsafe)."""

    dtype: DType


@dataclass(frozen=True)
class MappedSpec:
    """``tc.MappedPartitionMut[dtype, tile_shape, map_shape]``."""

    dtype: Union[DType, str]
    tile_shape: Union[tuple[ShapeEntry, ...], str]
    map_shape: Union[tuple[ShapeEntry, ...], str]


@dataclass(frozen=True)
class AtomicSpec:
    """``tc.AtomicTensor[dtype, shape]``: ``shape`` as a shared ``tc.Tensor``'s (ints, -1 for
    dynamic, names)."""

    dtype: Union[DType, str]
    shape: tuple[ShapeEntry, ...]


ParamSpec = Union[TensorSpec, ConstSpec, ScalarSpec, PointerSpec, MappedSpec, AtomicSpec]


def _at_annotation(build):
    """Run an annotation constructor; a SignatureError gets the line of the annotation (the
    first frame outside tilesafe), since annotations are evaluated where they are written."""
    try:
        return build()
    except SignatureError as err:
        raise err.with_context(location=caller_location()) from None


class _TensorAnnotation:
    _mutable = False

    def __class_getitem__(cls, item):
        def build():
            if not isinstance(item, tuple) or len(item) != 2:
                raise SignatureError(f"{cls.__name__}[...] takes a dtype and a shape",
                                     hint=f"e.g. tc.{cls.__name__}[tc.f32, (-1,)]")
            return TensorSpec(_dtype_entry(item[0]), _shape_entries(item[1], cls._mutable),
                              cls._mutable)
        return _at_annotation(build)


class Tensor(_TensorAnnotation):
    """``tc.Tensor[dtype, shape]``: a shared, read-only tensor parameter.

    Every tile program can read all of it (``load_tile_like``, ``.partition(...).load(...)``);
    none can store to it. ``-1`` marks a dynamic extent, e.g. ``tc.Tensor[tc.f32, (-1, -1)]``;
    a name (``tc.Tensor[tc.f16, ("M", "K")]``) binds that extent of the argument as a
    compile-time constant, usable in the body like a ``tc.Const``.
    """


class MutTensor(_TensorAnnotation):
    """``tc.MutTensor[dtype, shape]``: this tile program's own sub-tensor of a partitioned
    output. It has ``load()`` and ``store(tile)`` and nothing else: no index, so no two
    programs can write the same element. The shape is static: a name bound from the launch's
    partition (``"S"``) or a tuple of ints and names, each bound from that extent of the
    partition's tile shape (``(1, "N")``: ``N`` is then usable in the body like a
    ``tc.Const``)."""

    _mutable = True


class MappedPartitionMut:
    """``tc.MappedPartitionMut[dtype, tile_shape, map_shape]``: a partitioned output of which
    this program owns several tiles, for persistent kernels (host: ``t.partition(tile_shape)
    .map(map_shape, num_tile_blocks)``). Iterate them with ``for idx in z.iter_indices():``
    and store with ``z.store(tile, idx)``: only indices minted by this partition's
    ``iter_indices()`` are accepted, so programs stay disjoint. ``tile_shape`` and
    ``map_shape`` are tuples or names bound from the launch's mapped partition."""

    def __class_getitem__(cls, item):
        def build():
            if not isinstance(item, tuple) or len(item) != 3:
                raise SignatureError("MappedPartitionMut[...] takes a dtype, a tile shape and "
                                     "a map shape",
                                     hint="e.g. tc.MappedPartitionMut[tc.f16, \"S\", \"M\"]")
            return MappedSpec(_dtype_entry(item[0]), _shape_entries(item[1], True),
                              _shape_entries(item[2], True))
        return _at_annotation(build)


class AtomicTensor:
    """``tc.AtomicTensor[dtype, shape]``: a tensor that every tile program may update, by
    atomic read-modify-writes only (safety rule 12). Pass ``ts.atomic(t)``: the launch
    borrows ``t`` exclusively until it completes and hands ``t`` back. In the kernel it has
    ``atomic_add``, ``atomic_max``, ``atomic_min`` and, for integers, ``atomic_and``,
    ``atomic_or`` and ``atomic_xor`` (``a.atomic_add(value, *indices, mask=None)``), and
    ``shape``; no loads, stores, indexing or partitions, so concurrent programs never race.
    ``shape`` is a tuple like a ``tc.Tensor``'s: ints, ``-1`` (dynamic) or names.
    """

    def __class_getitem__(cls, item):
        def build():
            if not isinstance(item, tuple) or len(item) != 2:
                raise SignatureError("AtomicTensor[...] takes a dtype and a shape",
                                     hint="e.g. tc.AtomicTensor[tc.i32, (-1,)]")
            if isinstance(item[1], str):
                raise SignatureError(f"a tc.AtomicTensor needs an explicit shape tuple, got "
                                     f"{item[1]!r}", hint="use (-1,) style dynamic dims or "
                                     "names per extent, e.g. tc.AtomicTensor[tc.i32, (\"B\",)]")
            return AtomicSpec(_dtype_entry(item[0]), _shape_entries(item[1], False))
        return _at_annotation(build)


class Const:
    """``tc.Const[int]`` (or ``float``, ``bool``, ``tc.DType``): a compile-time constant
    parameter. Its value is part of the kernel's specialization."""

    def __class_getitem__(cls, item):
        def build():
            if item not in (int, float, bool, DType, str):
                raise SignatureError(f"tc.Const[{item!r}] is not supported",
                                     hint="use tc.Const[int], tc.Const[float], tc.Const[bool] "
                                     "or tc.Const[tc.DType]")
            return ConstSpec(item)
        return _at_annotation(build)


class Ptr:
    """``tc.Ptr[dtype]``: a raw pointer parameter. Gives ``load_ptr``/``store_ptr`` access
    with no bounds or ownership checks, so it makes the kernel unsafe: launch it only inside
    ``with ts.unsafe():``."""

    def __class_getitem__(cls, item):
        def build():
            try:
                return PointerSpec(dt.memory_dtype(item, "a raw pointer"))
            except TypeError as err:
                raise SignatureError(f"tc.Ptr[{item!r}]: {err}",
                                     hint="use a dtype, e.g. tc.Ptr[tc.f32]") from None
        return _at_annotation(build)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, what it is, and where it is declared."""

    name: str
    spec: ParamSpec
    location: Location


def _spec_of(annotation: Any) -> ParamSpec:
    if isinstance(annotation, (TensorSpec, ConstSpec, ScalarSpec, PointerSpec, MappedSpec,
                               AtomicSpec)):
        return annotation
    if annotation is Const:
        return ConstSpec(None)
    if annotation in (Tensor, MutTensor, AtomicTensor):
        raise SignatureError(f"{annotation.__name__} needs a dtype and a shape",
                             hint=f"e.g. tc.{annotation.__name__}[tc.f32, (-1,)]")
    if annotation in (int, float, bool) or isinstance(annotation, DType):
        return ScalarSpec(_in_memory(dt.as_dtype(annotation), "a scalar parameter"),
                          weak=annotation in (int, float))
    if annotation is inspect.Parameter.empty:
        raise SignatureError("parameter has no annotation",
                             hint="annotate it: tc.Tensor[...], tc.MutTensor[...], "
                             "tc.Const[int], int, float or a dtype")
    raise SignatureError(f"unsupported parameter annotation {annotation!r}",
                         hint="use tc.Tensor[...], tc.MutTensor[...], tc.MappedPartitionMut[...],"
                         " tc.AtomicTensor[...], tc.Const[...], tc.Ptr[...], int, float, bool "
                         "or a dtype")


def _evaluate_annotations(fn: Any, where: Location, kernel: str) -> dict[str, Any]:
    """The annotations as objects. String annotations (``from __future__ import annotations``)
    are evaluated with each parameter name standing for itself, so ``tc.MutTensor[tc.f32,
    (BM, BN)]`` may name ``tc.Const`` parameters without quotes."""
    raw = inspect.get_annotations(fn)
    names = {p: p for p in inspect.signature(fn).parameters}
    out = {}
    for key, value in raw.items():
        if isinstance(value, str):
            try:
                value = eval(value, fn.__globals__, names)  # noqa: S307 (the user's own source)
            except SignatureError as err:
                raise SignatureError(f"parameter '{key}': {err.message}", where, kernel=kernel,
                                     hint=err.hint) from None
            except Exception as err:
                raise SignatureError(f"cannot evaluate the annotation {value!r} of parameter "
                                     f"'{key}': {err}", where, kernel=kernel,
                                     hint="annotations may use names visible where the kernel "
                                     "is defined, and the kernel's own parameter names") from None
        out[key] = value
    return out


def _def_line(fn: Any) -> Location:
    """The location of the ``def`` line (decorators come before it)."""
    code = fn.__code__
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return Location(code.co_filename, code.co_firstlineno)
    for offset, line in enumerate(lines):
        if line.lstrip().startswith(("def ", "async def ")):
            return Location(code.co_filename, start + offset, len(line) - len(line.lstrip()))
    return Location(code.co_filename, start)


def parse_signature(fn: Any) -> list[Param]:
    """The parameters of a kernel function, checked; errors point at the ``def`` line."""
    where = _def_line(fn)
    kernel = fn.__name__
    annotations = _evaluate_annotations(fn, where, kernel)
    params = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            raise SignatureError(f"parameter '{p.name}': *args, **kwargs and keyword-only "
                                 "parameters are not supported in kernels", where,
                                 kernel=kernel, hint="declare each parameter by name with an "
                                 "annotation; pass compile-time options as tc.Const parameters")
        try:
            spec = _spec_of(annotations.get(p.name, inspect.Parameter.empty))
        except SignatureError as err:
            raise SignatureError(f"parameter '{p.name}': {err.message}", where, kernel=kernel,
                                 hint=err.hint) from None
        params.append(Param(p.name, spec, where))
    _check_names(params, where, kernel)
    return params


def annotation_names(spec: ParamSpec):
    """``(role, name)`` for every name a parameter's annotation binds: ``"dtype"`` (a dtype
    name), ``"shape"`` (a whole shape, ``"S"``) or ``"extent"`` (one entry of a shape
    tuple)."""
    if isinstance(getattr(spec, "dtype", None), str):
        yield "dtype", spec.dtype
    shapes = (spec.shape,) if isinstance(spec, (TensorSpec, AtomicSpec)) else \
        (spec.tile_shape, spec.map_shape) if isinstance(spec, MappedSpec) else ()
    for shape in shapes:
        if isinstance(shape, str):
            yield "shape", shape
        else:
            yield from (("extent", d) for d in shape if isinstance(d, str))


def launch_bound_consts(params: list[Param]) -> frozenset:
    """The ``tc.Const`` parameters a launch may leave out: those a shape tuple names (an
    output's tile shape, a mapped partition's shapes, an input's extents), whose value the
    launch's arguments determine. ``compiler.specialize`` binds them from the arguments (an
    argument described as ``ArgInfo("unbound")``) and checks a value that is passed."""
    consts = {p.name for p in params if isinstance(p.spec, ConstSpec)}
    return frozenset(name for p in params for role, name in annotation_names(p.spec)
                     if role == "extent" and name in consts)


_ROLES = {"dtype": "a dtype name", "shape": "a whole-shape name", "extent": "an extent name"}


def _check_names(params: list[Param], where: Location, kernel: str) -> None:
    """Each name has one role; an extent name may be a ``tc.Const[int]`` parameter but no
    other parameter; a whole-shape or dtype name is no parameter."""
    by_name = {p.name: p for p in params}
    seen: dict[str, tuple[str, str]] = {}
    for p in params:
        for role, name in annotation_names(p.spec):
            other = by_name.get(name)
            if role == "extent" and other is not None and not (
                    isinstance(other.spec, ConstSpec) and other.spec.type in (int, None)):
                wrong = "tc.Const parameter" if not isinstance(other.spec, ConstSpec) else \
                    f"tc.Const[int] parameter (it is tc.Const[{other.spec.type.__name__}])"
                raise SignatureError(f"parameter '{p.name}': shape entry {name!r} is not a "
                                     f"{wrong}", where, kernel=kernel,
                                     hint=f"declare '{name}' as tc.Const[int], or give the "
                                     "extent another name (bound from the argument)")
            if role != "extent" and other is not None:
                raise SignatureError(f"parameter '{p.name}': {_ROLES[role]} {name!r} is also a "
                                     "parameter of the kernel", where, kernel=kernel,
                                     hint=f"rename it; a shape tuple (('{name}',)) binds one "
                                     "extent, and may name a tc.Const[int]" if role == "shape"
                                     else "rename it (it is bound from the argument's dtype)")
            first = seen.setdefault(name, (role, p.name))
            if first[0] != role:
                raise SignatureError(f"{name!r} is {_ROLES[first[0]]} in parameter "
                                     f"'{first[1]}' and {_ROLES[role]} in parameter '{p.name}'",
                                     where, kernel=kernel,
                                     hint="give each role its own name")
