"""Specialization: binding a kernel's parameters to the launch's arguments.

The launch checks describe each argument abstractly (:class:`ArgInfo`: a tensor with its dtype and
shape, a partition with its tile shape, a scalar, a constant, or ``"unbound"``: a ``tc.Const``
the caller left out); :func:`specialize` checks them against the signature (dtype, rank, static
extents, partition tile shape, rank <= 3) and produces the :class:`Specialization` that the
front end compiles and the caches key on.

Names bind from the arguments: a dtype name from the argument's dtype, a whole-shape name
(``"S"``) from a partition's tile shape, an extent name (``(1, "N")``, ``("M", "K")``) from
that extent of a partition's tile shape, a mapped partition's shapes or an input's shape.
Every argument naming a name must agree (the error names both arguments). The bound values
are compile-time constants: they are in the specialization (``bound_names``; a ``tc.Const``
that an extent names is in ``consts``, passed or bound), so each distinct value compiles its
own specialization, and the front end makes them visible in the kernel body like constants.
Dynamic tensor extents (``-1``) are not part of it, so they never cause a new front-end
compilation (a GPU executable is also keyed by coarse alignment classes of the arguments, e.g.
whether an extent is divisible by 16; see ``backends.tileir.facts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..dtypes import DType, as_dtype
from ..errors import (ArgumentError, DTypeMismatchError, PartitionError, PartitionRankError,
                      ExtentMismatchError, RankMismatchError, TileShapeMismatchError)
from .signature import (AtomicSpec, ConstSpec, MappedSpec, Param, PointerSpec, ScalarSpec,
                        TensorSpec)
from .types import (MAX_PARTITION_RANK, AtomicTensorType, MappedPartitionType, PointerType,
                    TensorViewType, TileType, tile_shape_problem)


@dataclass(frozen=True)
class ArgInfo:
    """What the compiler needs to know about one launch argument.

    kind: ``"tensor"``, ``"partition"`` (``value``: the dtype of an indexed partition's
    positions, else None), ``"mapped"`` (``value`` holds the map shape),
    ``"atomic"`` (a tensor lent to atomic updates: ``ts.atomic(t)``),
    ``"const"`` (a Python value, for constants and runtime scalars) or ``"unbound"`` (a
    ``tc.Const`` the caller left out, for :func:`specialize` to bind from the arguments'
    shapes: :data:`UNBOUND`).
    """

    kind: str
    dtype: Optional[DType] = None
    shape: Optional[tuple[int, ...]] = None
    tile_shape: Optional[tuple[int, ...]] = None
    value: Any = None


UNBOUND = ArgInfo("unbound")  # a tc.Const left out of the launch, bound by specialize


@dataclass(frozen=True)
class Specialization:
    """Everything compile-time about one launch: the compilation and cache key."""

    consts: tuple[tuple[str, Any], ...] = field(compare=False)
    types: tuple[tuple[str, Union[TensorViewType, TileType, PointerType]], ...]
    bound_names: tuple[tuple[str, Any], ...]
    grid: Optional[tuple[int, int, int]] = None  # compiled in as a constant (const_grid)
    consts_key: tuple = field(init=False, default=())  # derived from consts

    def __post_init__(self) -> None:
        # Constants are compared by type and exact value: 0.0 and -0.0 differ, NaN equals NaN,
        # True differs from 1.
        key = tuple((n, type(v).__name__, v.hex() if isinstance(v, float) else v)
                    for n, v in self.consts)
        object.__setattr__(self, "consts_key", key)

    def with_grid(self, grid: tuple[int, int, int]) -> "Specialization":
        """This specialization with the launch grid compiled in as a constant."""
        return Specialization(self.consts, self.types, self.bound_names, tuple(grid))

    def const_env(self) -> dict[str, Any]:
        return dict(self.consts)

    def type_of(self, name: str):
        return dict(self.types)[name]

    def describe(self) -> str:
        parts = [f"{n}={v!r}" for n, v in self.consts]
        parts += [f"{n}={_show(v)}" for n, v in self.bound_names]
        parts += [f"{n}: {t}" for n, t in self.types]
        if self.grid is not None:
            parts.append(f"grid={self.grid}")
        return ", ".join(parts)


def _const_ok(spec: ConstSpec, value: Any) -> bool:
    if spec.type is None:
        return isinstance(value, (int, float, bool, str, DType, tuple))
    if spec.type is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.type is int:
        return isinstance(value, int)
    return isinstance(value, spec.type)


class _Names:
    """The names one launch binds: ``tc.Const`` values (``consts``: passed, or bound from the
    arguments' shapes when left out) and the annotations' dtype, shape and extent names
    (``bound``), each with the argument that bound it (``source``), so that a disagreement names
    both arguments."""

    def __init__(self, kernel_name: str, where: Any):
        self.kernel_name, self.where = kernel_name, where
        self.consts: dict[str, Any] = {}
        self.given: set[str] = set()  # the consts the caller passed
        self.left_out: set[str] = set()  # the consts the arguments bind
        self.bound: dict[str, Any] = {}
        self.source: dict[str, str] = {}

    def value(self, name: str) -> Any:
        return self.consts[name] if name in self.consts else self.bound[name]

    def known(self, name: str) -> bool:
        return name in self.consts or name in self.bound

    def bind(self, name: str, value: Any, what: str, error: type) -> None:
        """Bind ``name`` to ``value`` from ``what`` (an argument's description), or check it
        against the argument that bound it first. (A passed ``tc.Const`` is checked by the
        caller against the whole shape, so the error shows both.)"""
        if name in self.given:
            return
        if self.known(name):
            if self.value(name) != value:
                raise error(f"'{name}' is bound to {_show(self.value(name))} by an earlier "
                            f"argument of '{self.kernel_name}', {self.source[name]}, but "
                            f"{what} gives {_show(value)}", self.where,
                            hint=f"arguments sharing the name '{name}' must agree")
            return
        (self.consts if name in self.left_out else self.bound)[name] = value
        self.source[name] = what

    def shape(self, spec_shape, actual: tuple[int, ...], kind: str, param: str, label: str,
              error: type) -> tuple[int, ...]:
        """Bind or check a static shape (a name, or a tuple of ints and names) against
        ``actual``: the ``kind`` (``"partition tile shape"``, ``"map shape"``) of argument
        ``param``."""
        what = f"the {kind} {actual} of '{param}'"
        if isinstance(spec_shape, str):
            self.bind(spec_shape, actual, what, error)
            return actual
        if len(spec_shape) != len(actual):
            raise error(f"{label}: {kind} {actual} has rank {len(actual)}, the kernel's static "
                        f"shape {_spelled(spec_shape)} has rank {len(spec_shape)}", self.where,
                        hint=f"use a {kind} of rank {len(spec_shape)}")
        for d, n in zip(spec_shape, actual):
            if isinstance(d, str):
                self.bind(d, n, what, error)
        static = tuple(self.value(d) if isinstance(d, str) else d for d in spec_shape)
        if static != actual:
            passed = [d for d in spec_shape if isinstance(d, str) and d in self.given]
            fits = dict((d, n) for d, n in zip(spec_shape, actual) if d in passed)
            raise error(f"{label}: {kind} {actual} differs from the kernel's static shape "
                        f"{static}{self.passed_note(passed)}", self.where,
                        hint=f"use {static}" + (
                            ", or pass " + ", ".join(f"{d}={n}" for d, n in fits.items())
                            + f" (or leave {_quoted(passed)} out: the launch binds it from "
                            "the partition)" if passed else ""))
        return static

    def passed_note(self, names: list) -> str:
        if not names:
            return ""
        return " (" + ", ".join(f"{n} = {self.consts[n]!r} was passed as a tc.Const"
                                for n in dict.fromkeys(names)) + ")"


def _show(value: Any) -> str:
    return value.short if isinstance(value, DType) else str(value)


def _spelled(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _quoted(names: list) -> str:
    return ", ".join(f"'{n}'" for n in dict.fromkeys(names))


def specialize(kernel_name: str, params: list[Param], args: list[ArgInfo],
               where: Any = None) -> Specialization:
    """Check the arguments against the signature; raises a LaunchError subclass on mismatch.

    A ``tc.Const`` parameter whose argument is ``ArgInfo("unbound")`` (the caller left it
    out) is bound from the arguments whose shapes name it (see
    ``signature.launch_bound_consts``)."""
    names = _Names(kernel_name, where)
    for p, a in zip(params, args):
        if isinstance(p.spec, ConstSpec):
            if a.kind == "unbound":
                names.left_out.add(p.name)
                continue
            if a.kind != "const" or not _const_ok(p.spec, a.value):
                wanted = p.spec.type.__name__ if p.spec.type else "a constant"
                raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is a compile-time "
                                    f"constant ({wanted}), got {_describe(a)}", where,
                                    hint=f"pass a Python {wanted} value; each distinct value "
                                    "compiles its own specialization")
            names.consts[p.name] = float(a.value) if p.spec.type is float else a.value
            names.given.add(p.name)
            names.source[p.name] = f"the tc.Const argument '{p.name}'"
    types = []
    for p, a in zip(params, args):
        spec = p.spec
        if isinstance(spec, ConstSpec):
            continue
        if a.kind == "unbound":
            raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is missing", where,
                                hint="pass one value per parameter (only a tc.Const that a "
                                "shape names may be left out)")
        if isinstance(spec, ScalarSpec):
            if a.kind != "const" or not _scalar_fits(spec.dtype, a.value):
                raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is a "
                                    f"{spec.dtype.short} scalar, got {_describe(a)}", where,
                                    hint=f"pass a Python number that fits {spec.dtype.short}")
            types.append((p.name, TileType(spec.dtype, ())))
            continue
        if isinstance(spec, PointerSpec):
            if a.kind != "tensor" or a.dtype is not spec.dtype:
                raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is a raw "
                                    f"{spec.dtype.short} pointer, got {_describe(a)}", where,
                                    hint=f"pass a {spec.dtype.short} tensor (its memory is "
                                    "passed as the pointer)")
            types.append((p.name, PointerType(spec.dtype)))
            continue
        if isinstance(spec, MappedSpec):
            types.append((p.name, _mapped_type(kernel_name, p, spec, a, names)))
            continue
        if isinstance(spec, AtomicSpec):
            types.append((p.name, _atomic_type(kernel_name, p, spec, a, names)))
            continue
        types.append((p.name, _tensor_type(kernel_name, p, spec, a, names)))
    unbound = [p.name for p in params if p.name in names.left_out and p.name not in names.consts]
    if unbound:
        raise ArgumentError(f"tc.Const argument(s) {_quoted(unbound)} of '{kernel_name}' were "
                            "left out, and no argument's shape binds them", where,
                            hint="pass a value for each")
    consts = tuple((p.name, names.consts[p.name]) for p in params
                   if isinstance(p.spec, ConstSpec))
    return Specialization(consts, tuple(types), tuple(sorted(names.bound.items(),
                                                             key=lambda kv: kv[0])))


def _describe(a: ArgInfo) -> str:
    if a.kind == "const":
        return repr(a.value)
    if a.kind == "tensor":
        return f"a {a.dtype.short} tensor of shape {a.shape}"
    if a.kind == "unbound":
        return "nothing (it was left out)"
    if a.kind == "atomic":
        return f"ts.atomic(...) of a {a.dtype.short} tensor of shape {a.shape}"
    return f"a {a.kind} partition of a {a.dtype.short} tensor"


def _scalar_fits(dtype: DType, value: Any) -> bool:
    if isinstance(value, bool):
        return dtype.is_bool or dtype.is_int
    if isinstance(value, int):
        return not dtype.is_bool and dtype.fits(value)
    if isinstance(value, float):
        return dtype.is_float
    return False


def _check_dtype(spec_dtype, a: ArgInfo, names: _Names, p: Param, label: str,
                 kernel_name: str, where) -> None:
    if isinstance(spec_dtype, str):
        names.bind(spec_dtype, a.dtype, f"'{p.name}' ({a.dtype.short})", DTypeMismatchError)
    elif a.dtype is not spec_dtype:
        raise DTypeMismatchError(f"{label} must have dtype {spec_dtype.short}, got "
                                 f"{a.dtype.short}",
                            where, hint=f"convert the tensor on the host or change the "
                            f"annotation to {a.dtype.short}")


def _mapped_type(kernel_name: str, p: Param, spec: MappedSpec, a: ArgInfo,
                 names: _Names) -> MappedPartitionType:
    label, where = f"argument '{p.name}' of '{kernel_name}'", names.where
    if a.kind != "mapped":
        raise ArgumentError(f"{label} is a tc.MappedPartitionMut: pass "
                            f"t.partition(tile_shape).map(map_shape, num_tile_blocks), got a "
                            f"{a.kind}", where)
    _check_dtype(spec.dtype, a, names, p, label, kernel_name, where)
    tile = names.shape(spec.tile_shape, tuple(a.tile_shape), "partition tile shape", p.name,
                       label, TileShapeMismatchError)
    mapping = names.shape(spec.map_shape, tuple(a.value), "map shape", p.name, label,
                          TileShapeMismatchError)
    if len(mapping) != len(tile):
        raise PartitionError(f"{label}: map shape {mapping} and tile shape {tile} differ in "
                             "rank", where)
    problem = tile_shape_problem(tile)
    if problem:
        raise PartitionError(f"{label}: {problem}", where, hint="partition with powers of two")
    return MappedPartitionType(a.dtype, tile, mapping, p.name)


def _tensor_type(kernel_name: str, p: Param, spec: TensorSpec, a: ArgInfo,
                 names: _Names) -> TensorViewType:
    label, where = f"argument '{p.name}' of '{kernel_name}'", names.where
    if a.kind == "atomic":
        kind = "tc.MutTensor" if spec.mutable else "shared tc.Tensor"
        raise ArgumentError(f"{label} is a {kind}, got {_describe(a)}: an atomic borrow only "
                            "goes to a tc.AtomicTensor parameter", where,
                            hint="pass the tensor itself" + (
                                " partitioned (t.partition(tile_shape))" if spec.mutable else "")
                            + ", or declare the parameter as tc.AtomicTensor[...]")
    if spec.mutable and a.kind != "partition":
        raise ArgumentError(f"{label} is a tc.MutTensor: pass a partition of a tensor, got a "
                            f"{a.kind}", where, hint="pass t.partition(tile_shape) or "
                            "ts.borrow_mut(t).partition(tile_shape)")
    if not spec.mutable and a.kind != "tensor":
        raise ArgumentError(f"{label} is a shared tc.Tensor, got a {a.kind}", where,
                            hint="pass the tensor itself (partitions are for MutTensor "
                            "outputs); unpartition() gives the tensor back")
    _check_dtype(spec.dtype, a, names, p, label, kernel_name, where)
    if spec.mutable:
        tile = tuple(a.tile_shape)
        if len(tile) > MAX_PARTITION_RANK:
            raise PartitionRankError(f"{label}: a partition of rank {len(tile)} cannot be "
                                     "launched; "
                                 f"the CUDA grid has at most {MAX_PARTITION_RANK} axes", where,
                                 hint="reshape the tensor to rank <= 3 before partitioning")
        names.shape(spec.shape, tile, "partition tile shape", p.name, label,
                    TileShapeMismatchError)
        problem = tile_shape_problem(tile)
        if problem:
            raise PartitionError(f"{label}: {problem}", where,
                                 hint="partition with powers of two (e.g. 1024 or (64, 64)); "
                                 "edge tiles are masked, so extents need not divide")
        return TensorViewType(a.dtype, tile, True, positions=a.value)
    return TensorViewType(a.dtype, _shared_dims(label, p, spec.shape, a, names), False)


def _atomic_type(kernel_name: str, p: Param, spec: AtomicSpec, a: ArgInfo,
                 names: _Names) -> AtomicTensorType:
    label, where = f"argument '{p.name}' of '{kernel_name}'", names.where
    if a.kind != "atomic":
        raise ArgumentError(f"{label} is a tc.AtomicTensor, got {_describe(a)}", where,
                            hint="lend the tensor to the launch's atomic updates: pass "
                            "ts.atomic(t) (the launch hands t back)")
    _check_dtype(spec.dtype, a, names, p, label, kernel_name, where)
    return AtomicTensorType(a.dtype, _shared_dims(label, p, spec.shape, a, names))


def _shared_dims(label: str, p: Param, spec_shape: tuple, a: ArgInfo,
                 names: _Names) -> tuple:
    """A ``tc.Tensor``'s or ``tc.AtomicTensor``'s extents: names bound, static extents
    checked, ``None`` for a dynamic one."""
    where = names.where
    if len(spec_shape) != len(a.shape):
        raise RankMismatchError(f"{label} must have rank {len(spec_shape)}, got shape {a.shape}",
                            where, hint="reshape the tensor on the host (t.reshape)")
    for d, actual in zip(spec_shape, a.shape):
        if isinstance(d, str):
            names.bind(d, actual, f"the shape {a.shape} of '{p.name}'", ExtentMismatchError)
    dims = []
    for d, actual in zip(spec_shape, a.shape):
        want = names.value(d) if isinstance(d, str) else d
        if want is not None and want != actual:
            passed = [d] if isinstance(d, str) and d in names.given else []
            raise ExtentMismatchError(f"{label}: static extent {want} differs from the tensor's "
                                    f"shape {a.shape}{names.passed_note(passed)}", where,
                                    hint="pass a tensor of that extent, or declare the "
                                    "dimension dynamic (-1) in the annotation" +
                                    (f", or pass {d}={actual} (or leave {_quoted(passed)} "
                                     "out: the launch binds it from the tensor)"
                                     if passed else ""))
        dims.append(want)
    return tuple(dims)


def specialize_from_names(kernel_name: str, params: list[Param],
                          bindings: dict[str, Any]) -> Specialization:
    """A specialization without launch arguments: shape names, dtype names and constants come
    from ``bindings``; dynamic extents stay dynamic. Raises ArgumentError naming what is
    missing."""
    def resolve_dtype(d):
        if isinstance(d, str):
            if d not in bindings:
                raise ArgumentError(f"kernel '{kernel_name}': no binding for dtype name '{d}'",
                                    hint=f"add '{d}': ts.float32 (say) to the example")
            return as_dtype(bindings[d])
        return d

    def resolve_shape(shape):
        if isinstance(shape, str):
            if shape not in bindings:
                raise ArgumentError(f"kernel '{kernel_name}': no binding for shape name "
                                    f"'{shape}'", hint=f"add '{shape}': (1024,) (say) to the "
                                    "example")
            value = bindings[shape]
            return tuple(value) if isinstance(value, (tuple, list)) else (value,)
        return tuple(extent(d) if isinstance(d, str) else (1 if d is None else d)
                     for d in shape)

    def extent(name):
        if name not in bindings:
            raise ArgumentError(f"kernel '{kernel_name}': no binding for extent name '{name}'",
                                hint=f"add '{name}': 64 (say) to the example")
        value = bindings[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ArgumentError(f"kernel '{kernel_name}': the example binds extent name "
                                f"'{name}' to {value!r}, not a positive int",
                                hint=f"bind '{name}' to an extent, e.g. '{name}': 64")
        return value

    for p in params:  # first: a shape may name a Const that comes later in the signature
        if isinstance(p.spec, ConstSpec) and p.name not in bindings:
            raise ArgumentError(f"kernel '{kernel_name}': no value for tc.Const parameter "
                                f"'{p.name}'", hint=f"add '{p.name}': ... to the example")
    infos = []
    for p in params:
        spec = p.spec
        if isinstance(spec, (ConstSpec, ScalarSpec)):
            value = bindings.get(p.name, _zero_of(spec))
            infos.append(ArgInfo("const", value=value))
        elif isinstance(spec, PointerSpec):
            infos.append(ArgInfo("tensor", spec.dtype, (1,)))
        elif isinstance(spec, MappedSpec):
            tile = resolve_shape(spec.tile_shape)
            infos.append(ArgInfo("mapped", resolve_dtype(spec.dtype), tile, tile,
                                 resolve_shape(spec.map_shape)))
        elif isinstance(spec, AtomicSpec):
            infos.append(ArgInfo("atomic", resolve_dtype(spec.dtype), resolve_shape(spec.shape)))
        elif spec.mutable:
            tile = resolve_shape(spec.shape)
            infos.append(ArgInfo("partition", resolve_dtype(spec.dtype), tile, tile))
        else:
            infos.append(ArgInfo("tensor", resolve_dtype(spec.dtype), resolve_shape(spec.shape)))
    return specialize(kernel_name, params, infos)


def _zero_of(spec) -> object:
    """A stand-in value for a runtime scalar the example does not bind (its type is what
    matters for the specialization)."""
    if isinstance(spec, ScalarSpec) and spec.dtype.is_bool:
        return False
    return 0.0 if isinstance(spec, ScalarSpec) and spec.dtype.is_float else 0
