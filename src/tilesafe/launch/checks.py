"""The launch boundary: ``prepare`` validates a launch before anything runs and lends its
arguments to it; ``kernel_args`` describes them for the backend; ``recover`` hands back the
very objects the caller passed (same type in, same type out; for an atomic borrow,
``ts.atomic(t)``, the tensor ``t``: ``handed_back``).

Checks, in order, each with its own error: argument count and kinds, moved tensors
(MovedError), a mutable argument overlapping any other argument (AliasingError), the signature
(dtype, rank, static extents, partition tile shape and rank: ArgumentError/PartitionError, via
``compiler.specialize``), equal grids for all partitions, and the loans of pending work
(BorrowError). Unsafe kernels outside ``ts.unsafe()`` are rejected when the launch is created.
A successful ``prepare`` lends the arguments to the launch until ``recover``.

This module imports the compiler's signature and specialization, the host values, the driver's
ledger and the backend interface's argument description.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from .. import _compiled
from ..backends.base import KernelArg
from ..compiler.hints import check_dim_factors
from ..compiler.signature import ConstSpec, Param, PointerSpec, ScalarSpec
from ..compiler.specialize import UNBOUND, ArgInfo, Specialization, specialize
from ..driver.device import Device, default_device
from ..driver.ledger import (_EPOCH, LEDGER, ownership_epoch, shared_or_new_loans,
                             take_loans)
from ..driver.platform import platform_of
from ..dtypes import DType
from ..errors import (AliasingError, ArgumentError, DeviceMismatchError, Location,
                      PartitionError)
from ..deviceops.deviceop import DeviceOp
from ..host.atomic import AtomicBorrow
from ..host.lazy import PartitionOp, TensorOp
from ..host.partition import MappedPartition, Partition
from ..host.tensor import Tensor
from .arguments import result_of
from ..shapes import is_injective

_FAST = _compiled.FASTPATH


class LaunchRules(NamedTuple):
    """What a kernel's launches are checked and specialized by (a kernel holds one): its name
    and parameters, the named tuple a launch hands back (``result``), the parameters its
    ``tensor_dim_factor`` hint covers (``dim_factors``), and whether the grid is compiled in
    as a constant (``const_grid``)."""

    name: str
    params: Sequence[Param]
    result: Optional[type] = None
    dim_factors: Optional[dict] = None
    const_grid: bool = False


class _LaunchPlanState:
    """What validating a launch found, reusable while the same argument objects are passed
    again and no ownership changed since (the ownership epoch): specialization, grid, device,
    the byte ranges to borrow, the borrowed partitions a launch spends, the backend's launch
    with its arguments marshalled (``bound``, made at the first run), and the last loans on a
    stream (shared by the next launch on it while they live).

    (The Python definition of ``LaunchPlan``; the compiled fast path has the same type in C.)"""

    __slots__ = ("args", "epoch", "specialization", "grid", "device", "borrows",
                 "borrowed_partitions", "result", "bound", "stream_loans")

    def __init__(self, args: tuple, epoch: int, specialization: Specialization,
                 grid: tuple[int, int, int], device: Device, borrows: list,
                 borrowed_partitions: list, result: tuple):
        self.args, self.epoch, self.specialization, self.grid = args, epoch, specialization, grid
        self.device, self.borrows, self.borrowed_partitions = device, borrows, borrowed_partitions
        self.result = result
        self.bound: Any = None
        self.stream_loans: tuple = (None, ())


class _PreparedLaunchState:
    """A validated launch: its specialization, grid, arguments, loans, the user's line, its
    device and the plan it came from (made on every launch).

    (The Python definition of ``PreparedLaunch``; the compiled fast path has the same type in
    C.)"""

    __slots__ = ("specialization", "grid", "args", "loans", "where", "device", "plan")

    def __init__(self, specialization: Specialization, grid: tuple[int, int, int],
                 args: tuple[Any, ...], loans: list, where: Location, device: Device,
                 plan: Optional[Any] = None):
        self.specialization, self.grid, self.args, self.loans = specialization, grid, args, loans
        self.where, self.device, self.plan = where, device, plan


LaunchPlan = _FAST.LaunchPlan if _FAST is not None else _LaunchPlanState
PreparedLaunch = _FAST.PreparedLaunch if _FAST is not None else _PreparedLaunchState
PLAN_CACHE_SIZE = 8
_HOLDERS: dict[str, str] = {}


def _outputs(args: Sequence[Any]):
    """(index, partition) for every partitioned output argument, mapped ones included."""
    for i, a in enumerate(args):
        if isinstance(a, MappedPartition):
            yield i, a.partition
        elif isinstance(a, Partition):
            yield i, a


def tensor_arguments(params: Sequence[Param], args: Sequence[Any]):
    """``(param, argument, tensor, mutable)`` for every argument that touches memory: a
    partitioned output (a mapped one included; ``argument`` is then its partition) and an
    atomic borrow (``ts.atomic(t)``) are mutable, a tensor input only when the parameter is a
    raw pointer."""
    for p, a in zip(params, args):
        if isinstance(a, MappedPartition):
            yield p, a.partition, a.partition._tensor, True
        elif isinstance(a, Partition):
            yield p, a, a._tensor, True
            if a.positions is not None:  # an indexed partition reads its positions
                yield p, a.positions, a.positions, False
        elif isinstance(a, AtomicBorrow):
            yield p, a, a._tensor, True
        elif isinstance(a, Tensor):
            yield p, a, a, isinstance(p.spec, PointerSpec)


def _named_arguments(params: Sequence[Param], args: Sequence[Any]):
    """:func:`tensor_arguments` with how errors name each: ``'z'``, or ``the positions of 'z'``
    for an indexed partition's positions (they come with their partition's parameter)."""
    given = {p.name: a for p, a in zip(params, args)}
    for p, a, t, mutable in tensor_arguments(params, args):
        positions = not mutable and isinstance(given[p.name], Partition)
        yield p, a, t, mutable, f"the positions of '{p.name}'" if positions else f"'{p.name}'"


def _described_info(param: Param, value: Any, kernel_name: str, where: Location) -> ArgInfo:
    """What a DeviceOp argument will be, from what it says before it runs (a constructor or a
    copy, and their partitions: ``host.lazy``)."""
    if isinstance(value, PartitionOp):
        positions = getattr(value.positions, "dtype", None)
        return ArgInfo("partition", value.dtype, value.shape, value.tile_shape, positions)
    if isinstance(value, TensorOp):
        return ArgInfo("tensor", value.dtype, value.shape)
    raise ArgumentError(f"argument '{param.name}' of '{kernel_name}' is {value.label}, a "
                        "DeviceOp whose result is only known when it runs", where,
                        hint="call .sync() on it first")


def describe(rules: LaunchRules, args: Sequence[Any], grid: Optional[Sequence[int]],
             where: Location) -> PreparedLaunch:
    """The specialization, grid and device of a launch whose arguments may be DeviceOps not
    run yet (constructors, copies and their partitions describe their results), for compiling
    without running: nothing is validated against memory, lent or run. Its ``args`` are
    None: there is no memory to marshal."""
    kernel_name, params = rules.name, rules.params
    infos = [_described_info(p, a, kernel_name, where) if isinstance(a, DeviceOp)
             else _arg_info(p, a, kernel_name, where) for p, a in zip(params, args)]
    spec, g = _specialization(rules, infos, args, grid, where)
    devices = {a.device for a in args if isinstance(a, (DeviceOp, Tensor, Partition,
                                                        MappedPartition, AtomicBorrow))}
    device = devices.pop() if len(devices) == 1 else default_device()
    return PreparedLaunch(spec, g, None, [], where, device, None)


def _specialization(rules: LaunchRules, infos: list, args: Sequence[Any],
                    grid: Optional[Sequence[int]], where: Location) -> tuple:
    """(specialization, grid) of a launch from its arguments' descriptions: the signature,
    the ``tensor_dim_factor`` promise, the grid, and the grid compiled in for ``const_grid``."""
    spec = specialize(rules.name, list(rules.params), infos, where)
    check_dim_factors(rules.name, rules.params, infos, rules.dim_factors or {}, where)
    g = launch_grid(rules.params, args, grid, rules.name, where)
    return (spec.with_grid(g) if rules.const_grid else spec), g


def _arg_info(param: Param, value: Any, kernel_name: str, where: Location) -> ArgInfo:
    if value is UNBOUND:  # a tc.Const left out: the specialization binds it
        return value
    if isinstance(value, MappedPartition):
        value.partition._check_usable("launch with it")
        t = value.partition._tensor
        return ArgInfo("mapped", t.dtype, t.shape, value.partition.tile_shape, value.map_shape)
    if isinstance(value, Partition):
        value._check_usable("launch with it")
        t, positions = value._tensor, value.positions
        if positions is not None:
            positions._check_usable("launch with the positions of an indexed partition")
        return ArgInfo("partition", t.dtype, t.shape, value.tile_shape,
                       positions.dtype if positions is not None else None)
    if isinstance(value, Tensor):
        value._check_usable("launch with it")
        return ArgInfo("tensor", value.dtype, value.shape)
    if isinstance(value, AtomicBorrow):
        value._check_usable("launch with it")
        return ArgInfo("atomic", value.dtype, value.shape)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str, DType, tuple)):
        return ArgInfo("const", value=value)
    if isinstance(value, np.ndarray):
        raise ArgumentError(f"argument '{param.name}' of '{kernel_name}' is a numpy array",
                            where, hint="wrap it: ts.tensor(array) (and .partition(tile) for "
                            "an output)")
    raise ArgumentError(f"argument '{param.name}' of '{kernel_name}' has unsupported type "
                        f"{type(value).__name__}", where,
                        hint="pass tilesafe tensors (ts.tensor(...)), partitions, or Python "
                        "numbers")


def _check_aliasing(params: Sequence[Param], args: Sequence[Any], kernel_name: str,
                    where: Location) -> None:
    """No mutable argument may share a byte with another argument, through whatever path
    reached the memory (views, DLPack imports of one buffer): the check compares device
    addresses."""
    tensors = [(name, t, mutable) for _, _, t, mutable, name in _named_arguments(params, args)]
    for i, (name_a, ta, mut_a) in enumerate(tensors):
        for name_b, tb, mut_b in tensors[i + 1:]:
            if (mut_a or mut_b) and ta._overlaps(tb):
                mutable = name_a if mut_a else name_b
                raise AliasingError(
                    f"arguments {name_a} and {name_b} of '{kernel_name}' overlap in memory "
                    f"and {mutable} is mutable: tile programs could race", where,
                    hint="pass disjoint tensors (copy the input first with .clone()), or "
                    "compute in place by loading the MutTensor itself with z.load()")


_I32 = 1 << 31


def _check_layouts(params: Sequence[Param], args: Sequence[Any], kernel_name: str,
                   where: Location) -> None:
    """Every extent and stride fits the i32 kernel ABI; a mutable argument's memory is
    writable and its layout injective (no two indices at one address)."""
    for p, _, t, mutable in tensor_arguments(params, args):
        if isinstance(p.spec, PointerSpec):
            continue  # a raw pointer (unsafe kernels) passes its address only
        for n in (*t.shape, *t.strides):
            if not -_I32 <= n < _I32:
                raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' has an extent or "
                                    f"stride ({n}) beyond the kernel ABI's 32-bit integers "
                                    f"(shape {t.shape}, strides {t.strides})", where,
                                    hint="launch on views of fewer than 2**31 elements per "
                                    "axis (t[i:j]), in several launches")
        if not mutable:
            continue
        if t._alloc.readonly:
            raise ArgumentError(f"argument '{p.name}' of '{kernel_name}' is written, but its "
                                "memory was imported read-only", where,
                                hint="import a writable array, or write into a copy "
                                "(t.clone()) and read the result from there")
        if not is_injective(t.shape, t.strides):
            raise AliasingError(f"the layout of '{p.name}' of '{kernel_name}' (shape {t.shape}, "
                                f"strides {t.strides}) reaches one address from several "
                                "indices: the programs writing it would race", where,
                                hint="write into a tensor whose elements each have their own "
                                "address (e.g. t.clone()), then copy the result where needed")


def _borrows(params: Sequence[Param], args: Sequence[Any]) -> list:
    """``(loan book, lo, hi, mutable, action)`` for each tensor a launch touches: shared for
    inputs, mutable for outputs and raw pointers."""
    wanted = []
    for p, a, t, mutable, name in _named_arguments(params, args):
        action = (f"launch with {name}" if a is t else
                  f"launch with the atomic tensor '{p.name}'" if isinstance(a, AtomicBorrow)
                  else f"launch with the partition '{p.name}'")
        wanted.append((t._alloc.loans, *t.span(), mutable, action))
    return wanted


def replay_borrows(params: Sequence[Param], args: Sequence[Any]) -> list:
    """What each replay of a recorded launch borrows (``deviceops.graph.GraphNode.borrows``):
    ``(argument, action, loan book, lo, hi, mutable)`` for every argument touching memory."""
    found = []
    for _, a, t, mutable in tensor_arguments(params, args):
        action = "replay a graph that reads it" if a is t else "replay a graph that writes it"
        found.append((a, action, t._alloc.loans, *t.span(), mutable))
    return found


def _holder(kernel_name: str) -> str:
    """How loans name a launch of ``kernel_name`` in borrow errors (one string per kernel)."""
    return _HOLDERS.get(kernel_name) or _HOLDERS.setdefault(
        kernel_name, f"the pending launch of '{kernel_name}'")


def _plan_loans(plan: Any, kernel_name: str, where: Location, stream: Any) -> list:
    """The loans of a repeated launch (see ``driver.ledger.shared_or_new_loans``; the
    ownership epoch is that of the plan's validation)."""
    return shared_or_new_loans(plan, plan.borrows, _holder(kernel_name), where, stream)


def _launch_device(params: Sequence[Param], args: Sequence[Any], kernel_name: str,
                   where: Location) -> Device:
    """The one device every tensor argument lives on (the default device if none)."""
    placed = [(p.name, t.device) for p, _, t, _ in tensor_arguments(params, args)]
    devices = {d for _, d in placed}
    if len(devices) > 1:
        listing = ", ".join(f"'{n}' on {d}" for n, d in placed)
        raise DeviceMismatchError(f"arguments of '{kernel_name}' are on different devices "
                                  f"({listing})",
                            where, hint="move them to one device first: t.to('cuda:0').sync()")
    return devices.pop() if devices else default_device()


def kernel_args(params: Sequence[Param], args: Sequence[Any]) -> list[KernelArg]:
    """The backend's description of a validated launch's arguments, one per non-constant
    parameter (see ``backends.base.KernelArg``)."""
    described = []
    for p, a in zip(params, args):
        if isinstance(p.spec, ConstSpec):
            continue
        if isinstance(p.spec, ScalarSpec):
            described.append(KernelArg(p.name, "scalar", p.spec.dtype, value=a))
            continue
        tile_shape = map_shape = ()
        if isinstance(a, MappedPartition):
            kind, t = "mapped", a.partition._tensor
            tile_shape, map_shape = a.partition.tile_shape, a.map_shape
        elif isinstance(a, Partition):
            kind, t, tile_shape = "partition", a._tensor, a.tile_shape
        elif isinstance(a, AtomicBorrow):
            kind, t = "atomic", a._tensor
        else:
            kind, t = ("pointer" if isinstance(p.spec, PointerSpec) else "tensor"), a
        described.append(KernelArg(p.name, kind, t.dtype, data=t._alloc.data,
                                   platform=platform_of(t.device), offset=t._offset,
                                   shape=t.shape, strides=t.strides, tile_shape=tile_shape,
                                   map_shape=map_shape, positions=_positions_arg(p, a)))
    return described


def _positions_arg(p: Param, a: Any) -> Optional[KernelArg]:
    """The positions of an indexed partition, as an ``(n, rank)`` tensor argument."""
    positions = a.positions if isinstance(a, Partition) else None
    if positions is None:
        return None
    shape, strides = positions.shape, positions.strides
    if len(shape) == 1:
        shape, strides = (shape[0], 1), (strides[0], 1)
    return KernelArg(f"{p.name} positions", "tensor", positions.dtype,
                     data=positions._alloc.data, platform=platform_of(positions.device),
                     offset=positions._offset, shape=shape, strides=strides)


def launch_grid(params: Sequence[Param], args: Sequence[Any], grid: Optional[Sequence[int]],
                kernel_name: str, where: Location) -> tuple[int, int, int]:
    """The grid: given explicitly, or the (common) tile grid of the partitioned outputs."""
    grids = {p.name: a.grid for p, a in zip(params, args)
             if isinstance(a, (Partition, MappedPartition, PartitionOp))}
    if grid is not None:
        g = (grid,) if isinstance(grid, int) else tuple(grid)
        if not 1 <= len(g) <= 3 or any(not isinstance(d, int) or d < 0 for d in g):
            raise ArgumentError(f"grid {grid!r} must be 1 to 3 non-negative ints", where,
                                hint="e.g. grid=(128,) or grid=(8, 8)")
        padded = _three_axes(g)
        for name, pg in grids.items():
            if _three_axes(pg) != padded:
                raise PartitionError(f"explicit grid {g} differs from the grid {pg} of "
                                     f"partition '{name}': a program off its tiles would write "
                                     "tiles other programs own", where,
                                     hint="omit grid= to use the partition's grid; each "
                                     "program owns exactly one tile of it")
        return _within_limits(padded, kernel_name, where)
    if not grids:
        raise ArgumentError(f"kernel '{kernel_name}' has no partitioned output to infer the "
                            f"grid from", where, hint="pass one: kernel.launch(*args, grid=(n,))")
    distinct = {_three_axes(g) for g in grids.values()}
    if len(distinct) > 1:
        listing = ", ".join(f"'{n}': {g}" for n, g in grids.items())
        raise PartitionError(f"partitions of '{kernel_name}' have different grids ({listing})",
                             where, hint="every MutTensor output must have the same number of "
                             "tiles per axis")
    return _within_limits(distinct.pop(), kernel_name, where)


def _three_axes(grid: Sequence[int]) -> tuple[int, int, int]:
    """``grid`` with trailing axes of 1: a grid of fewer axes is that grid ((n,) is (n, 1, 1))."""
    return tuple(grid) + (1,) * (3 - len(grid))


GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)  # a CUDA grid's extent per axis


def _within_limits(grid: tuple[int, int, int], kernel_name: str,
                   where: Location) -> tuple[int, int, int]:
    for axis, (n, limit) in enumerate(zip(grid, GRID_LIMITS)):
        if n > limit:
            raise PartitionError(f"the grid {grid} of '{kernel_name}' has {n} tile programs on "
                                 f"axis {axis}, more than the {limit} a launch can have", where,
                                 hint="use larger tiles, or put the long axis first "
                                 "(t.permute(...)) where 2**31 - 1 programs fit")
    return grid


def prepare(rules: LaunchRules, args: Sequence[Any], grid: Optional[Sequence[int]],
            where: Location, *, lend: bool = True, stream: Any = None,
            plans: Optional[dict] = None) -> PreparedLaunch:
    """Validate a launch of a kernel with these ``rules`` and lend its arguments to it; raises
    before anything runs.

    ``stream`` is the stream the launch will be enqueued on when that is already known (inside
    a running pipeline): earlier work on it does not block the launch. With ``lend=False``
    (compiling without running) the arguments are checked but not borrowed. ``plans`` (a
    kernel's cache) lets a launch with the very same argument objects as an earlier one, and
    no ownership change since, skip re-validation: only the borrows are checked again; a
    plan keeps what the launch hands back, of the named tuple type ``rules.result``."""
    LEDGER.acquire()  # the checks and the loans as one step (see driver.ledger)
    try:
        return _prepare(rules, args, grid, where, lend, stream, plans)
    finally:
        LEDGER.release()


def _prepare(rules: LaunchRules, args: Sequence[Any], grid: Optional[Sequence[int]],
             where: Location, lend: bool, stream: Any,
             plans: Optional[dict]) -> PreparedLaunch:
    kernel_name, params = rules.name, rules.params
    if isinstance(grid, list):
        grid = tuple(grid)
    key = (tuple(map(id, args)), grid) if plans is not None else None
    if key is not None:
        # A plan holds its argument objects, so their ids cannot be reused while it is cached:
        # equal ids are the same objects.
        plan = plans.get(key)
        if plan is not None and plan.epoch == _EPOCH[0]:
            loans = _plan_loans(plan, kernel_name, where, stream) if lend else []
            return PreparedLaunch(plan.specialization, plan.grid, plan.args, loans, where,
                                  plan.device, plan)
    if len(args) != len(params):
        raise ArgumentError(f"kernel '{kernel_name}' takes {len(params)} argument(s) "
                            f"({', '.join(p.name for p in params)}), got {len(args)}", where,
                            hint="pass one value per parameter, in order (tc.Const values "
                            "included)")
    infos = [_arg_info(p, a, kernel_name, where) for p, a in zip(params, args)]
    _check_aliasing(params, args, kernel_name, where)
    _check_layouts(params, args, kernel_name, where)
    spec, g = _specialization(rules, infos, args, grid, where)
    device = _launch_device(params, args, kernel_name, where)
    borrows = _borrows(params, args)
    loans = take_loans(borrows, _holder(kernel_name), where, stream) if lend else []
    plan = None
    if key is not None:
        if len(plans) >= PLAN_CACHE_SIZE:
            plans.clear()
        plan = plans[key] = LaunchPlan(tuple(args), ownership_epoch(), spec, g, device,
                                       borrows, _borrowed_partitions(args),
                                       result_of(rules.result, handed_back(args))
                                       if rules.result else handed_back(args))
    return PreparedLaunch(spec, g, tuple(args), loans, where, device, plan)


def handed_back(args: Sequence[Any]) -> tuple:
    """What a launch hands back for its arguments: each argument itself, except an atomic
    borrow (``ts.atomic(t)``), for which it hands back the tensor ``t``."""
    return tuple(a._tensor if isinstance(a, AtomicBorrow) else a for a in args)


def _borrowed_partitions(args: Sequence[Any]) -> list:
    """The output partitions made by ``borrow_mut`` (a launch spends them)."""
    return [p for _, p in _outputs(args) if p.is_borrowed]


def recover(prepared: PreparedLaunch, stream: Any, *, spend: bool = True,
            fault_record: Any = None) -> tuple[Any, ...]:
    """Hand back the very objects the caller passed (the plan's ``result``: the tensor-like
    ones, by name too). The launch's loans (and, with ``spend``,
    the borrow of borrowed partitions) end when ``stream`` is synchronized, i.e. when the host
    knows the work is complete; later work on the same stream may use the arguments meanwhile.
    A graph replay does not spend borrowed partitions: the recorded launch keeps them.
    ``fault_record`` (the bound launch's, if any) is handed back at that synchronize too, which
    raises what the kernel reported (a plan lists it with its borrowed partitions)."""
    plan = prepared.plan
    if spend:
        borrowed = plan.borrowed_partitions if plan is not None else \
            _borrowed_partitions(prepared.args)
        if fault_record is not None and plan is None:
            borrowed = borrowed + [fault_record]
    else:
        borrowed = [fault_record] if fault_record is not None else []
    for loan in prepared.loans:  # (no lock: a check seeing either stream is still sound)
        loan.stream = stream
    stream.on_complete(prepared.loans, borrowed, prepared.where)
    return prepared.plan.result if prepared.plan is not None else handed_back(prepared.args)


__all__ = ["LaunchRules", "LaunchPlan", "PreparedLaunch", "prepare", "describe", "recover", "launch_grid",
           "kernel_args",
           "tensor_arguments", "replay_borrows"]


if _FAST is not None:
    _FAST.configure(holders=_HOLDERS, holder=_holder)
