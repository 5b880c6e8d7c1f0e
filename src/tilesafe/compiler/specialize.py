"""Specialization: binding a kernel's parameters to the launch's arguments.

The launch checks describe each argument abstractly (:class:`ArgInfo`: a tensor with its dtype and
shape, a partition with its tile shape, a scalar, a constant); :func:`specialize` checks them
against the signature (dtype, rank, static extents, partition tile shape, rank <= 3) and
produces the :class:`Specialization` that the front end compiles and the caches key on.
Dynamic tensor extents are not part of it, so they never cause a new front-end compilation (a
GPU executable is also keyed by coarse alignment classes of the arguments, e.g. whether an
extent is divisible by 16; see ``backends.tileir.facts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..dtypes import DType, as_dtype
from ..errors import (ArgumentError, DTypeMismatchError, PartitionError, PartitionRankError,
                      RankMismatchError, TileShapeMismatchError)
from .signature import ConstSpec, MappedSpec, Param, PointerSpec, ScalarSpec, TensorSpec
from .types import (MAX_PARTITION_RANK, MappedPartitionType, PointerType, TensorViewType,
                    TileType, tile_shape_problem)


@dataclass(frozen=True)
class ArgInfo:
    """What the compiler needs to know about one launch argument.

    kind: ``"tensor"``, ``"partition"``, ``"mapped"`` (``value`` holds the map shape) or
    ``"const"`` (a Python value, for constants and runtime scalars).
    """

    kind: str
    dtype: Optional[DType] = None
    shape: Optional[tuple[int, ...]] = None
    tile_shape: Optional[tuple[int, ...]] = None
    value: Any = None


@dataclass(frozen=True)
class Specialization:
    """Everything compile-time about one launch: the compilation and cache key."""

    consts: tuple[tuple[str, Any], ...] = field(compare=False)
    types: tuple[tuple[str, Union[TensorViewType, TileType, PointerType]], ...]
    bound_names: tuple[tuple[str, Any], ...]
    consts_key: tuple = field(init=False, default=())  # derived from consts

    def __post_init__(self) -> None:
        # Constants are compared by type and exact value: 0.0 and -0.0 differ, NaN equals NaN,
        # True differs from 1.
        key = tuple((n, type(v).__name__, v.hex() if isinstance(v, float) else v)
                    for n, v in self.consts)
        object.__setattr__(self, "consts_key", key)

    def const_env(self) -> dict[str, Any]:
        return dict(self.consts)

    def type_of(self, name: str):
        return dict(self.types)[name]

    def describe(self) -> str:
        parts = [f"{n}={v!r}" for n, v in self.consts]
        parts += [f"{n}: {t}" for n, t in self.types]
        return ", ".join(parts)


def _const_ok(spec: ConstSpec, value: Any) -> bool:
    if spec.type is None:
        return isinstance(value, (int, float, bool, str, DType, tuple))
    if spec.type is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if spec.type is int:
        return isinstance(value, int)
    return isinstance(value, spec.type)


def specialize(kernel_name: str, params: list[Param], args: list[ArgInfo],
               where: Any = None) -> Specialization:
    """Check the arguments against the signature; raises a LaunchError subclass on mismatch."""
    consts: dict[str, Any] = {}
    for p, a in zip(params, args):
        if isinstance(p.spec, ConstSpec):
            if a.kind != "const" or not _const_ok(p.spec, a.value):
                wanted = p.spec.type.__name__ if p.spec.type else "a constant"
                raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is a compile-time "
                                    f"constant ({wanted}), got {_describe(a)}", where,
                                    hint=f"pass a Python {wanted} value; each distinct value "
                                    "compiles its own specialization")
            consts[p.name] = float(a.value) if p.spec.type is float else a.value
    bound: dict[str, Any] = {}
    types = []
    for p, a in zip(params, args):
        spec = p.spec
        if isinstance(spec, ConstSpec):
            continue
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
            types.append((p.name, _mapped_type(kernel_name, p, spec, a, consts, bound, where)))
            continue
        types.append((p.name, _tensor_type(kernel_name, p, spec, a, consts, bound, where)))
    return Specialization(tuple(consts.items()), tuple(types), tuple(sorted(
        bound.items(), key=lambda kv: kv[0])))


def _describe(a: ArgInfo) -> str:
    if a.kind == "const":
        return repr(a.value)
    if a.kind == "tensor":
        return f"a {a.dtype.short} tensor of shape {a.shape}"
    return f"a {a.kind} partition of a {a.dtype.short} tensor"


def _scalar_fits(dtype: DType, value: Any) -> bool:
    if isinstance(value, bool):
        return dtype.is_bool or dtype.is_int
    if isinstance(value, int):
        return not dtype.is_bool and dtype.fits(value)
    if isinstance(value, float):
        return dtype.is_float
    return False


def _bind(name: str, value: Any, bound: dict, what: str, kernel_name: str, where,
          error: type = ArgumentError) -> None:
    if name in bound and bound[name] != value:
        raise error(f"'{name}' is bound to {bound[name]} by an earlier argument of "
                            f"'{kernel_name}' but {what} gives {value}", where,
                            hint=f"arguments sharing the name '{name}' must agree")
    bound[name] = value


def _static_shape(spec_shape, actual: tuple[int, ...], consts: dict, bound: dict, what: str,
                  label: str, kernel_name: str, where) -> tuple[int, ...]:
    """Bind or check a static shape (a name or a tuple of ints and Const names)."""
    if isinstance(spec_shape, str):
        _bind(spec_shape, actual, bound, what, kernel_name, where, TileShapeMismatchError)
        return actual
    static = tuple(consts[d] if isinstance(d, str) else d for d in spec_shape)
    if static != actual:
        raise TileShapeMismatchError(f"{label}: {what} {actual} differs from the kernel's static "
                             f"shape {static}", where, hint=f"use {static}")
    return static


def _check_dtype(spec_dtype, a: ArgInfo, bound: dict, p: Param, label: str,
                 kernel_name: str, where) -> None:
    if isinstance(spec_dtype, str):
        _bind(spec_dtype, a.dtype, bound, f"'{p.name}' ({a.dtype.short})", kernel_name, where,
              DTypeMismatchError)
    elif a.dtype is not spec_dtype:
        raise DTypeMismatchError(f"{label} must have dtype {spec_dtype.short}, got "
                                 f"{a.dtype.short}",
                            where, hint=f"convert the tensor on the host or change the "
                            f"annotation to {a.dtype.short}")


def _mapped_type(kernel_name: str, p: Param, spec: MappedSpec, a: ArgInfo, consts: dict,
                 bound: dict, where) -> MappedPartitionType:
    label = f"argument '{p.name}' of '{kernel_name}'"
    if a.kind != "mapped":
        raise ArgumentError(f"{label} is a tc.MappedPartitionMut: pass "
                            f"t.partition(tile_shape).map(map_shape, num_tile_blocks), got a "
                            f"{a.kind}", where)
    _check_dtype(spec.dtype, a, bound, p, label, kernel_name, where)
    tile = _static_shape(spec.tile_shape, tuple(a.tile_shape), consts, bound,
                         "partition tile shape", label, kernel_name, where)
    mapping = _static_shape(spec.map_shape, tuple(a.value), consts, bound, "map shape", label,
                            kernel_name, where)
    if len(mapping) != len(tile):
        raise PartitionError(f"{label}: map shape {mapping} and tile shape {tile} differ in "
                             "rank", where)
    problem = tile_shape_problem(tile)
    if problem:
        raise PartitionError(f"{label}: {problem}", where, hint="partition with powers of two")
    return MappedPartitionType(a.dtype, tile, mapping, p.name)


def _tensor_type(kernel_name: str, p: Param, spec: TensorSpec, a: ArgInfo, consts: dict,
                 bound: dict, where) -> TensorViewType:
    label = f"argument '{p.name}' of '{kernel_name}'"
    if spec.mutable and a.kind != "partition":
        raise ArgumentError(f"{label} is a tc.MutTensor: pass a partition of a tensor, got a "
                            f"{a.kind}", where, hint="pass t.partition(tile_shape) or "
                            "ts.borrow_mut(t).partition(tile_shape)")
    if not spec.mutable and a.kind != "tensor":
        raise ArgumentError(f"{label} is a shared tc.Tensor, got a {a.kind}", where,
                            hint="pass the tensor itself (partitions are for MutTensor "
                            "outputs); unpartition() gives the tensor back")
    _check_dtype(spec.dtype, a, bound, p, label, kernel_name, where)
    if spec.mutable:
        tile = tuple(a.tile_shape)
        if len(tile) > MAX_PARTITION_RANK:
            raise PartitionRankError(f"{label}: a partition of rank {len(tile)} cannot be "
                                     "launched; "
                                 f"the CUDA grid has at most {MAX_PARTITION_RANK} axes", where,
                                 hint="reshape the tensor to rank <= 3 before partitioning")
        _static_shape(spec.shape, tile, consts, bound, "partition tile shape", label,
                      kernel_name, where)
        problem = tile_shape_problem(tile)
        if problem:
            raise PartitionError(f"{label}: {problem}", where,
                                 hint="partition with powers of two (e.g. 1024 or (64, 64)); "
                                 "edge tiles are masked, so extents need not divide")
        return TensorViewType(a.dtype, tile, True)
    if len(spec.shape) != len(a.shape):
        raise RankMismatchError(f"{label} must have rank {len(spec.shape)}, got shape {a.shape}",
                            where, hint="reshape the tensor on the host (t.reshape)")
    dims = []
    for d, actual in zip(spec.shape, a.shape):
        want = consts[d] if isinstance(d, str) else d
        if want is not None and want != actual:
            raise RankMismatchError(f"{label}: static extent {want} differs from the tensor's "
                                f"shape {a.shape}", where,
                                hint="pass a tensor of that extent, or declare the dimension "
                                "dynamic (-1) in the annotation")
        dims.append(want)
    return TensorViewType(a.dtype, tuple(dims), False)


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
        return tuple(bindings[d] if isinstance(d, str) else (1 if d is None else d)
                     for d in shape)

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
