"""Lowering of a verified :class:`~tilesafe.compiler.ir.KernelIR` to a Tile IR bytecode module.

:func:`lower_kernel` writes one module with one entry function named after the kernel (the
cubin symbol). Each IR op is lowered by the function registered on its registry declaration
(``registry.OPS[name].lowerings["tileir"]``, filled by the sibling modules ``arith``,
``tile``, ``memory`` and ``control``); an op without one is a CompileError naming the op and
its source line. This module owns the kernel ABI, the entry prelude (parameters, ``assume``
facts, views, the token) and the public API; it must not lower individual ops, and like the
rest of the ``lower`` package it must not import the host layers (``tilesafe.driver`` ...) or the toolchain
modules of ``backends.tileir``.

Kernel ABI (what the launcher packs, in this order; :func:`abi_signature` lists it)
------------------------------------------------------------------------------------
Every entry parameter is a rank-0 value; kernel parameters are flattened in their order:

=============== ==========================================================================
IR param kind   entry parameters
=============== ==========================================================================
``tensor``      ``ptr`` (address of element 0), ``dim0..dimN-1`` (i32), ``stride0..`` (i32,
                in elements) of the shared tensor
``mut_tensor``  ``ptr``, dims, strides of the WHOLE partitioned tensor (not of one tile); the
                kernel views it in tiles of the IR's static tile shape and program ``(x, y,
                z)`` owns tile ``(x, y, z)[:rank]``
``mapped``      ``ptr``, dims, strides of the whole tensor of a mapped partition
``atomic``      ``ptr``, dims, strides of the whole atomic tensor (``tc.AtomicTensor``)
``scalar``      ``value``: the scalar itself in its dtype (bool: one byte, 0 or 1)
``pointer``     ``ptr``: the address of the tensor's element 0 (raw, unsafe)
=============== ==========================================================================

A kernel with bounds-checked accesses (``compiler.bounds.checked_accesses``) takes one more
parameter after them all: the address of its fault record (``lower/checks.py``). A kernel whose
indexed partitions' positions a separate launch validates first (the fact
``validated_first``, below) takes one more after that: the address of that launch's verdict, an
i32 word of device memory.

``ptr`` is an 8-byte device address; i32 dims/strides must fit in a signed 32-bit integer
(the launcher checks). Bool tensors are bytes (0/1) in memory. The grid is the partition's
tile-block count, the block (1, 1, 1) and dynamic shared memory 0: the launcher
(``tilesafe.driver.cuda``) launches every kernel with that configuration. A kernel compiled
with its grid (``KernelIR.grid``: ``const_grid``) reads the grid size as constants and knows
the bounds of its block ids (``assume bounded<0, n-1>``); the launch checks guarantee it only
runs with that grid.

Token scheme
------------
Accesses through mutable views (MutTensor load/store, mapped partition load/store, raw pointer
load/store) form ONE chain: it starts at entry (from ``make_token``, or from the grid-dependency
wait described below), and each access takes the current token
and yields the next, so every such access is ordered after the previous one. Through ``for``
the token is the last loop-carried value, through ``if`` the last result (only where the
region accesses mutable memory). Loads from shared inputs (``load_tile_like``, partitions of a
``tc.Tensor``) take no token: they are free to reorder (shared reads versus exclusive
writes, like Rust's ``&`` and ``&mut`` references).

Grid dependency (programmatic dependent launch)
-----------------------------------------------
From bytecode 13.4 on, every kernel starts with ``gdc_wait`` (wait until the
kernel it programmatically depends on has completed and its writes are visible; immediate for
an ordinary launch), then ``gdc_launch_dependents`` (the next kernel of the stream may start
scheduling). Every memory access depends on the wait's token: the mutable chain starts from
it and shared loads take it as their only token, so they stay free to reorder among
themselves. Such a kernel can therefore be launched as a programmatic dependent
(:func:`waits_for_predecessor`): its launch overlaps the previous kernel's tail, and it still
reads nothing before that kernel has finished. A kernel that touches no memory waits too:
the wait of the kernel launched after it covers only its direct predecessor, so one that
completed without waiting would let its successor read before the writer before it finished.

Facts (``facts=``): what the launcher knows about the arguments, as ``assume`` ops
----------------------------------------------------------------------------------
A mapping ``{param name: {key: value}}``; every key is optional:

* tensor-like params (``tensor``, ``mut_tensor``, ``mapped``, ``atomic``):
  ``ptr_align`` (int, power of two: the address is divisible by this many bytes),
  ``dims_div`` / ``strides_div`` (tuple, one entry per dim: a power of two dividing the dim /
  stride, or None), ``strides`` (tuple: the exact stride in elements, or None; a known stride,
  typically the innermost ``1``, becomes static in the tensor view and the passed value is
  ignored).
* ``pointer`` params: ``ptr_align``.
* integer ``scalar`` params: ``div_by`` (power of two), ``bounds`` (``(lo, hi)``, inclusive,
  either None).

* indexed partitions (``mut_tensor`` with ``at=positions``): ``validated_first`` (True: the
  positions are validated by a launch of one program before the kernel, on the same stream,
  which writes the verdict word the kernel reads; see ``lower/positions.py``). It applies to
  the whole kernel: given for any indexed partition, every one of them is validated first.

Dims are always assumed ``>= 0``. :func:`normalize_facts` turns facts into a canonical tuple
of tuples (hashable, order-independent) for the specialization/cache key; ``lower_kernel``
accepts either form.

Hints (``hints=``): the kernel's checked hints (``compiler.hints``). The per-architecture
entries become the entry's optimization hints, all of them: tileiras uses the one for the
target's architecture, else ``default``. The kernel-wide ``tensor_dim_factor`` (a promise the
launch checks, ``compiler.hints.check_dim_factors``) joins the facts: every dynamic dim of a
tensor-like parameter it covers is assumed divisible by its factor (with a launch fact on the
same dim, by the larger of the two powers of two). Static dims (ints, names bound at launch)
are constants in the view and need no assumption.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

from ....compiler.bounds import fault_sites, indexed_params
from ....compiler.hints import arch_hints, factors_by_name, programmatic_launch
from ....compiler.ir import KernelIR, KernelParam
from ....compiler.types import AtomicTensorType, MappedPartitionType, TensorViewType
from ....dtypes import DType
from ....errors import CompileError
from ..bytecode import (I8, I32, I64, Bounded, ComparisonPredicate, DivBy, ModuleBuilder, PointerType,
                        Signedness, TileType, Value)
from .context import PADDING, LoweringContext, Positions, TensorArg, memory_type, scalar_type
from .checks import negate
from .positions import own_positions, positions_from_verdict
from .context import source_location
from .memory import view_requests

__all__ = ["lower_kernel", "waits_for_predecessor", "abi_signature", "AbiArg", "normalize_facts",
           "Facts", "FAULT_RECORD", "POSITIONS_VERDICT", "validates_first"]

#: the ops that write memory other than through a partition's own tile (``mut_store``): a
#: kernel with an indexed partition and one of these runs its body only where the positions
#: passed (``lower/positions.py``)
_OTHER_WRITES = frozenset({"mapped_store", "atomic_rmw", "ptr_store", "ptr_cas",
                           "ptr_exchange"})

#: Canonical facts: ``((param, ((key, value), ...)), ...)``, sorted.
Facts = tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

_TENSOR_KINDS = ("tensor", "mut_tensor", "mapped", "atomic")
_FACT_KEYS = {"tensor": ("ptr_align", "dims_div", "strides_div", "strides", "positions_of",
                         "validated_first"),
              "pointer": ("ptr_align",), "scalar": ("div_by", "bounds")}
#: facts about an indexed partition's positions, refused on any other parameter
_POSITIONS_FACTS = ("positions_of", "validated_first")


class AbiArg(NamedTuple):
    """One flattened entry parameter: kernel parameter ``param``, ``component`` (``"ptr"``,
    ``"dim<i>"``, ``"stride<i>"`` or ``"value"``) and ``dtype`` (``"ptr"`` for an 8-byte
    device address, else a tilesafe dtype short name such as ``"i32"`` or ``"bool"``)."""

    param: str
    component: str
    dtype: str


def _rank(p: KernelParam) -> int:
    t = p.value.type
    if isinstance(t, MappedPartitionType):
        return len(t.tile_shape)
    return len(t.shape)


def abi_signature(kernel: KernelIR, validated_first: bool = False) -> list[AbiArg]:
    """The flattened entry-parameter list of ``kernel`` (see the module docstring);
    ``validated_first``: its positions validated by a launch before it (the verdict's address
    last)."""
    out: list[AbiArg] = []
    for p in kernel.params:
        if p.kind in _TENSOR_KINDS:
            rank = _rank(p)
            out.append(AbiArg(p.name, "ptr", "ptr"))
            out += [AbiArg(p.name, f"dim{i}", "i32") for i in range(rank)]
            out += [AbiArg(p.name, f"stride{i}", "i32") for i in range(rank)]
            if getattr(p.value.type, "positions", None) is not None:
                out += [AbiArg(p.name, "positions", "ptr"), AbiArg(p.name, "positions_n", "i32"),
                        AbiArg(p.name, "positions_stride0", "i32"),
                        AbiArg(p.name, "positions_stride1", "i32")]
        elif p.kind == "pointer":
            out.append(AbiArg(p.name, "ptr", "ptr"))
        elif p.kind == "scalar":
            out.append(AbiArg(p.name, "value", p.value.type.dtype.short))
        else:
            raise CompileError(f"parameter '{p.name}' has an unknown kind {p.kind!r}",
                               kernel.location, kernel=kernel.name)
    if fault_sites(kernel):
        out.append(AbiArg(FAULT_RECORD, "ptr", "ptr"))
    if validated_first:
        out.append(AbiArg(POSITIONS_VERDICT, "ptr", "ptr"))
    return out


#: the name of the trailing entry parameter of a kernel with checked accesses: its fault
#: record's address (``lower/checks.py``)
FAULT_RECORD = "<fault record>"
#: the name of the entry parameter after the fault record of a kernel whose positions a launch
#: before it validates (``validated_first``): the address of that launch's verdict word
POSITIONS_VERDICT = "<positions verdict>"


def validates_first(facts: Union[None, Mapping[str, Mapping[str, Any]], Facts]) -> bool:
    """Whether ``facts`` say the kernel's positions are validated by a launch before it."""
    return any(dict(entries).get("validated_first")
               for _, entries in normalize_facts(facts))


# ---------------------------------------------------------------------------------------------
# facts


def _fact_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(None if v is None else int(v) for v in value)
    return None if value is None else int(value)


def normalize_facts(facts: Union[None, Mapping[str, Mapping[str, Any]], Facts]) -> Facts:
    """Canonical, hashable form of ``facts`` (a mapping or an already normalized tuple)."""
    if not facts:
        return ()
    items = facts.items() if isinstance(facts, Mapping) else facts
    out = []
    for name, entries in items:
        pairs = entries.items() if isinstance(entries, Mapping) else entries
        out.append((str(name), tuple(sorted((str(k), _fact_value(v)) for k, v in pairs))))
    return tuple(sorted(out))


def _check_facts(kernel: KernelIR, facts: Facts) -> dict[str, dict[str, Any]]:
    params = {p.name: p for p in kernel.params}
    indexed = {p.name for p in indexed_params(kernel)}
    checked: dict[str, dict[str, Any]] = {}
    for name, entries in facts:
        p = params.get(name)
        if p is None:
            raise CompileError(f"facts name '{name}', which is not a runtime parameter of the "
                               "kernel", kernel.location, kernel=kernel.name)
        family = "tensor" if p.kind in _TENSOR_KINDS else p.kind
        allowed = _FACT_KEYS.get(family, ())
        for key, value in entries:
            if key not in allowed:
                raise CompileError(f"fact '{key}' does not apply to the {p.kind} parameter "
                                   f"'{name}' (allowed: {', '.join(allowed) or 'none'})",
                                   kernel.location, kernel=kernel.name)
            if key in _POSITIONS_FACTS and name not in indexed:
                raise CompileError(f"fact '{key}' applies only to an indexed partition (a "
                                   f"mutable tensor partitioned with at=positions); '{name}' "
                                   "is not one", kernel.location, kernel=kernel.name)
            if key in ("dims_div", "strides_div", "strides") and len(value) != _rank(p):
                raise CompileError(f"fact '{key}' of '{name}' needs {_rank(p)} entries, got "
                                   f"{len(value)}", kernel.location, kernel=kernel.name)
        checked[name] = dict(entries)
    return checked


def _with_dim_factors(kernel: KernelIR, facts: dict[str, dict[str, Any]],
                      hints: Optional[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``facts`` with the hints' ``tensor_dim_factor`` joined to the ``dims_div`` of every
    tensor-like parameter it covers (the larger power of two of the two, per dim)."""
    tensors = [p for p in kernel.params if p.kind in _TENSOR_KINDS]
    try:
        factors = factors_by_name(hints, [p.name for p in tensors])
    except CompileError as err:  # (a SignatureError: a bad name or factor)
        raise err.with_context(location=kernel.location, kernel=kernel.name) from None
    out = {name: dict(entries) for name, entries in facts.items()}
    for p in tensors:
        factor = factors.get(p.name)
        if not factor or factor <= 1:
            continue
        entry = out.setdefault(p.name, {})
        known = entry.get("dims_div") or (None,) * _rank(p)
        entry["dims_div"] = tuple(max(d or 1, factor) for d in known)
    return out


def _div_by(lw: LoweringContext, value: Value, divisor: Optional[int]) -> Value:
    if divisor is None or divisor <= 1:
        return value
    return lw.fn.assume(value, DivBy(int(divisor)))


def _block_ids(lw: LoweringContext, grid: Optional[tuple[int, int, int]]) -> tuple:
    """The program's block ids; with the grid compiled in (``const_grid``), each is known to
    lie in ``[0, grid[axis])``, and an axis of one program is the constant 0."""
    ids = lw.fn.get_tile_block_id()
    if grid is None:
        return ids
    return tuple(lw.fn.constant(0, TileType(I32)) if g <= 1 else
                 lw.fn.assume(v, Bounded(0, g - 1)) for v, g in zip(ids, grid))


# ---------------------------------------------------------------------------------------------
# the entry prelude


def _param_types(kernel: KernelIR, validated_first: bool) -> list[TileType]:
    types = []
    dtypes = {p.name: p.value.type.dtype for p in kernel.params}
    for arg in abi_signature(kernel, validated_first):
        if arg.param == FAULT_RECORD:
            types.append(TileType(PointerType(I64)))
            continue
        if arg.param == POSITIONS_VERDICT:
            types.append(TileType(PointerType(I32)))
            continue
        dtype: DType = dtypes[arg.param]
        if arg.component == "positions":
            types.append(TileType(PointerType(scalar_type(
                next(p for p in kernel.params if p.name == arg.param).value.type.positions))))
            continue
        if arg.dtype == "ptr":
            types.append(TileType(PointerType(memory_type(dtype))))
        elif arg.component == "value":
            types.append(TileType(I8 if dtype.is_bool else scalar_type(dtype)))
        else:
            types.append(TileType(I32))
    return types


def _bind_params(lw: LoweringContext, facts: dict[str, dict[str, Any]],
                 validated_first: bool) -> None:
    fn = lw.fn
    entry_values = iter(fn.params)
    for p in lw.kernel.params:
        fact = facts.get(p.name, {})
        t = p.value.type
        if p.kind == "scalar":
            value = next(entry_values)
            if t.dtype.is_bool:
                value = fn.cmpi(ComparisonPredicate.NE, value, fn.constant(0, TileType(I8)),
                                signedness=Signedness.UNSIGNED)
            elif t.dtype.is_int:
                value = _div_by(lw, value, fact.get("div_by"))
                lo, hi = fact.get("bounds") or (None, None)
                if lo is not None or hi is not None:
                    value = fn.assume(value, Bounded(lo, hi))
            lw.set(p.value, value)
            continue
        ptr = _div_by(lw, next(entry_values), fact.get("ptr_align"))
        if p.kind == "pointer":
            lw.set(p.value, ptr)
            continue
        rank = _rank(p)
        raw_dims = [next(entry_values) for _ in range(rank)]
        raw_strides = [next(entry_values) for _ in range(rank)]
        static = (t.shape if isinstance(t, AtomicTensorType) or
                  isinstance(t, TensorViewType) and not t.mutable else (None,) * rank)
        dims_div = fact.get("dims_div") or (None,) * rank
        dims: list[Union[int, Value]] = []
        for dim, known, div in zip(raw_dims, static, dims_div):
            if known is not None:
                dims.append(int(known))
            else:
                dims.append(_div_by(lw, fn.assume(dim, Bounded(0, None)), div))
        exact = fact.get("strides") or (None,) * rank
        strides_div = fact.get("strides_div") or (None,) * rank
        strides: list[Union[int, Value]] = [
            int(known) if known is not None else _div_by(lw, stride, div)
            for stride, known, div in zip(raw_strides, exact, strides_div)]
        arg = TensorArg(p.name, t.dtype, ptr, dims, strides)
        if getattr(t, "positions", None) is not None:
            arg.positions = Positions(next(entry_values), next(entry_values),
                                      next(entry_values), next(entry_values), t.positions)
        lw.set(p.value, arg)
    if lw.checked_sites:
        lw.fault_record = next(entry_values)
    if validated_first:
        lw.verdict = next(entry_values)


def _make_views(lw: LoweringContext) -> None:
    """The tensor and partition views every op needs, made once at entry."""
    for op in lw.kernel.walk():
        for value, tile_shape, padding in view_requests(op):
            tensor: TensorArg = lw.get(value)
            key = (tuple(tile_shape), padding)
            if key in tensor.partitions:
                continue
            if tensor.view is None:
                tensor.view = lw.fn.make_tensor_view(tensor.ptr, tensor.dims, tensor.strides)
            tensor.partitions[key] = lw.fn.make_partition_view(tensor.view, tile_shape,
                                                               padding=PADDING[padding])


#: The first bytecode version whose kernels start with the grid-dependency wait.
GRID_DEPENDENCY_SINCE = (13, 4)


def waits_for_predecessor(version: Sequence[int],
                          hints: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether kernels lowered to bytecode ``version`` with ``hints`` wait for the kernel they
    programmatically depend on before any memory access, so launching them as programmatic
    dependents is safe (the hint ``programmatic_launch: False`` leaves the wait out). The
    lowering and the launch both ask this, so the two always agree."""
    return tuple(version) >= GRID_DEPENDENCY_SINCE and programmatic_launch(hints)


def lower_kernel(kernel: KernelIR, *, version: Sequence[int] = (13, 4),
                 hints: Optional[Mapping[str, Mapping[str, int]]] = None,
                 facts: Union[None, Mapping[str, Mapping[str, Any]], Facts] = None,
                 debug: bool = True, inbounds: Optional[bool] = None,
                 positions_only: bool = False) -> bytes:
    """The Tile IR bytecode of ``kernel``.

    Args:
        version: bytecode version, ``(13, 3)`` or ``(13, 4)`` (13.4 carries ``inbounds``).
        hints: kernel hints: keyed by architecture (``{"sm_90": {"num_cta_in_cga": 2}}``, see
            ``tilesafe.compiler.hints.KNOWN_HINTS``), written as the entry's optimization
            hints, and ``tensor_dim_factor``, written as ``assume div_by`` on the dims it
            covers (module docstring).
        facts: argument facts turned into ``assume`` ops (module docstring).
        debug: attach each op's source location (file, line, column) so tileiras errors and
            ``--lineinfo`` point at the kernel's source.
        inbounds: promise that view accesses are in bounds (no edge masking/padding). Default
            False for every kernel, unchecked ones included: edge tiles stay masked.
        positions_only: with the fact ``validated_first``, the launch before the kernel: the
            same entry parameters, launched as one program, which validates the positions,
            reports a failure to the fault record and writes the verdict word (0: passed, 1:
            failed), and runs nothing of the body (``lower/positions.py``).
    """
    version = tuple(version)
    if inbounds is None:
        # Edge tiles stay masked even in unchecked kernels (tileiras 13.4 rejected the
        # promise on partial edge tiles), so both flavours compute the same thing.
        inbounds = False
    checked_facts = _with_dim_factors(kernel, _check_facts(kernel, normalize_facts(facts)),
                                      hints)
    # (the validating launch is one program: a cluster or occupancy hint made for the
    # kernel's grid would not fit it, and a cluster larger than its grid cannot launch)
    entry_hints = {} if positions_only else arch_hints(hints)
    first = any(entries.get("validated_first") for entries in checked_facts.values())
    if positions_only and not first:
        raise CompileError("internal error: a positions-only lowering needs the fact "
                           "validated_first", kernel.location, kernel=kernel.name)
    module = ModuleBuilder(version, producer="tilesafe" if version >= (13, 3) else None)
    location = source_location(kernel.location) if debug else None
    try:
        fn = module.entry(kernel.name, _param_types(kernel, first), hints=entry_hints or None,
                          location=location)
    except ValueError as err:
        raise CompileError(f"cannot compile for the GPU: {err}", kernel.location,
                           kernel=kernel.name) from None
    lw = LoweringContext(kernel, module, fn, inbounds=bool(inbounds), debug=location is not None)
    ops = list(kernel.walk())
    names = {op.name for op in ops}
    lw.checked_sites = {id(op): site for site, op in enumerate(fault_sites(kernel), 1)}
    _bind_params(lw, checked_facts, first)
    if waits_for_predecessor(version, hints):
        # every kernel launched as a programmatic dependent waits, one that touches no memory
        # too: the wait of the kernel after it covers only its direct predecessor, so a kernel
        # that finished without waiting would let that one read before the writer completed
        lw.gate = fn.gdc_wait()
        fn.gdc_launch_dependents(lw.gate)
    if any(lw.needs_token(op) for op in ops):
        lw.token = lw.gate if lw.gate is not None else fn.make_token()
    if names & {"tile_block_id", "mut_load", "mut_store", "load_like"}:
        lw.block_ids = _block_ids(lw, kernel.grid)
    validated: dict = {}  # parameter index -> the validated partition's argument
    for p in indexed_params(kernel):  # validated before anything is written (rule 11)
        arg, index = lw.get(p.value), kernel.params.index(p)
        twin = validated.get(checked_facts.get(p.name, {}).get("positions_of"))
        if twin is not None and len(twin.own_index) == len(p.value.type.shape):
            arg.own_index = list(twin.own_index)  # the same positions, the same tile grid
        elif first and not positions_only:  # validated by the launch before this one
            positions_from_verdict(lw, arg, tuple(p.value.type.shape))
        else:
            own_positions(lw, arg, lw.checked_sites[id(p)], tuple(p.value.type.shape))
        validated[index] = arg
    if positions_only:  # the validating launch: the verdict, and nothing of the body
        verdict = fn.select(lw.positions_verdict, fn.constant(1, TileType(I32)),
                            fn.constant(0, TileType(I32)))
        fn.store_ptr_tko(lw.verdict, verdict,
                         token=lw.token if lw.token is not None else lw.gate)
        if lw.debug:
            fn.set_location(None)
        fn.return_()
        return module.to_bytes()
    if "num_tile_blocks" in names:
        lw.num_blocks = (fn.get_num_tile_blocks() if kernel.grid is None else
                         tuple(fn.constant(g, TileType(I32)) for g in kernel.grid))
    _make_views(lw)
    # (rule 11: a launch whose positions fail writes nothing at all)
    if lw.positions_verdict is not None and names & _OTHER_WRITES:
        # writes not through a partition's own tile: the whole body waits for the verdict
        def body() -> None:
            lw.lower_block(kernel.body)
            fn.yield_()
        fn.if_(negate(lw, lw.positions_verdict), body, fn.yield_)
    else:  # (each ordinary partition's store is moved off the grid on a failed verdict)
        lw.lower_block(kernel.body)
    if lw.debug:
        fn.set_location(None)
    fn.return_()
    return module.to_bytes()

