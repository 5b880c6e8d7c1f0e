"""A kernel's optimization hints (``@ts.kernel(hints=...)``): the names tilesafe knows, the
per-architecture keys and the kernel-wide ``tensor_dim_factor``, validated when the kernel is
decorated. The backends read them (the Tile IR lowering writes the per-architecture ones as the
entry's optimization hints, and ``tensor_dim_factor`` as ``assume div_by`` facts).

Form (the cuTile Rust book's ``optimization_hints``)::

    hints={"tensor_dim_factor": 16,                   # kernel-wide (every architecture)
           "sm_90": {"num_cta_in_cga": 2},            # per architecture ...
           "default": {"occupancy": 2}}               # ... else these

Per-architecture keys are ``"sm_NN"`` (``sm_90``, ``sm_100``, ``sm_120``, ...) and
``"default"``; tileiras uses the entry for the target's architecture, else ``default``.

``programmatic_launch`` (kernel-wide, default True) says whether the kernel starts with the
grid-dependency wait that lets a GPU launch it as a programmatic dependent of the previous
kernel on its stream (its launch overlaps that kernel's tail). ``False`` leaves the wait out,
and the launch then waits for the previous kernel to complete, as an ordinary launch does: the
wait can change how the GPU compiler sizes a register-heavy kernel (threads per block,
registers per thread), so a kernel may run faster without it. Either way a kernel never reads
memory before its predecessor on the stream has written it.

``tensor_dim_factor`` is a promise: every dynamic extent of the tensor parameters (the ``-1``
extents of a ``tc.Tensor`` or ``tc.AtomicTensor``, every extent of the tensor a ``tc.MutTensor`` or
``tc.MappedPartitionMut`` partitions) is a multiple of the factor (a power of two), so the
compiler may use aligned, vectorized accesses. ``{"tensor_dim_factor": {"x": 16, "z": 8}}``
gives it per parameter instead. The launch checks the promise on every device
(:func:`check_dim_factors`) before anything runs: a launch whose extents break it is refused.

This module imports ``errors``, ``_callsite`` and the compiler's signature types."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

from .._callsite import caller_location
from ..errors import ArgumentError, SignatureError
from .signature import AtomicSpec, MappedSpec, Param, TensorSpec

KNOWN_HINTS = ("num_cta_in_cga", "occupancy", "num_worker_warps_per_cta")
#: The kernel-wide hint: a promise on the tensor parameters' extents.
TENSOR_DIM_FACTOR = "tensor_dim_factor"
#: The kernel-wide hint: compile the grid-dependency wait in (launch as a programmatic
#: dependent) or not.
PROGRAMMATIC_LAUNCH = "programmatic_launch"
KERNEL_WIDE = (TENSOR_DIM_FACTOR, PROGRAMMATIC_LAUNCH)
_EXAMPLE = {TENSOR_DIM_FACTOR: 16, PROGRAMMATIC_LAUNCH: False}
MAX_DIM_FACTOR = 1 << 30  # extents are i32
_FACTOR_FIX = ("e.g. 'tensor_dim_factor': 16 (every dynamic extent of the tensor parameters "
               "is a multiple of 16), or {'x': 16} for parameter 'x' only")


def is_arch_key(key: Any) -> bool:
    """``"default"`` or ``"sm_"`` followed by digits."""
    return key == "default" or (isinstance(key, str) and key.startswith("sm_")
                                and key[3:].isdigit())


def check_hints(hints: Optional[dict], params: Optional[Sequence[Param]] = None) -> dict:
    """``hints`` checked (see the module): per-architecture dicts of known hint names, and
    ``tensor_dim_factor``. With ``params`` (the kernel's), the parameters a per-parameter
    ``tensor_dim_factor`` names are checked too (else when the kernel is compiled). Errors are
    SignatureErrors at the user's line (the decorator)."""
    try:
        return _checked(hints, params)
    except SignatureError as err:
        raise err.with_context(location=caller_location()) from None


def _checked(hints: Optional[dict], params: Optional[Sequence[Param]]) -> dict:
    if hints is None:
        return {}
    if not isinstance(hints, dict):
        raise SignatureError(f"hints must be a dict keyed by architecture, got {hints!r}",
                             hint="e.g. hints={'sm_90': {'occupancy': 2}, "
                             "'tensor_dim_factor': 16}")
    for arch, values in hints.items():
        if arch == PROGRAMMATIC_LAUNCH:
            if not isinstance(values, bool):
                raise SignatureError(f"'{PROGRAMMATIC_LAUNCH}' must be True or False, got "
                                     f"{values!r}", hint=f"e.g. hints={{'{PROGRAMMATIC_LAUNCH}"
                                     "': False} (leave out the grid-dependency wait)")
            continue
        if arch == TENSOR_DIM_FACTOR:
            if params is None:
                _factor_entries(values, None)
            else:
                dim_factors(hints, params)
            continue
        if not is_arch_key(arch):
            raise SignatureError(f"hints key {arch!r} is not an architecture",
                                 hint="use 'sm_90', 'sm_100', 'sm_120', ... or 'default' for "
                                 f"per-architecture hints, or '{TENSOR_DIM_FACTOR}'")
        if not isinstance(values, dict):
            raise SignatureError(f"the hints for {arch} must be a dict of hint names, got "
                                 f"{values!r}", hint=f"e.g. {{'{arch}': {{'occupancy': 2}}}}")
        for name in values:
            if name in KERNEL_WIDE:
                raise SignatureError(f"'{name}' is not a per-architecture hint "
                                     f"(found under {arch!r})",
                                     hint=f"give it at the top level, e.g. hints={{"
                                     f"'{name}': {_EXAMPLE[name]}, '{arch}': {{...}}}}: it "
                                     "applies to the kernel on every architecture")
            if name not in KNOWN_HINTS:
                raise SignatureError(f"unknown kernel hint {name!r} for {arch}",
                                     hint="known hints: " + ", ".join(KNOWN_HINTS)
                                     + f"; and '{TENSOR_DIM_FACTOR}', '{PROGRAMMATIC_LAUNCH}' at "
                                     "the top level")
    return dict(hints)


def arch_hints(hints: Optional[Mapping]) -> dict:
    """The per-architecture part of checked ``hints`` (what becomes the entry's
    optimization hints)."""
    return {k: dict(v) for k, v in (hints or {}).items() if k not in KERNEL_WIDE}


def programmatic_launch(hints: Optional[Mapping]) -> bool:
    """Whether checked ``hints`` keep the grid-dependency wait (the default)."""
    return bool((hints or {}).get(PROGRAMMATIC_LAUNCH, True))


def _factor(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM_FACTOR \
            or value & (value - 1):
        raise SignatureError(f"{where} must be a positive power of two (at most 2**30), got "
                             f"{value!r}", hint=_FACTOR_FIX)
    return value


def _factor_entries(value: Any, names: Optional[Iterable[str]]) -> dict[Optional[str], int]:
    """``{None: factor}`` (kernel-wide) or ``{param: factor}``, checked; with ``names``
    (the tensor parameters), a name outside them is an error."""
    if not isinstance(value, dict):
        return {None: _factor(value, TENSOR_DIM_FACTOR)}
    if not value:
        raise SignatureError(f"'{TENSOR_DIM_FACTOR}' is an empty dict", hint=_FACTOR_FIX)
    allowed = None if names is None else list(names)
    out: dict[Optional[str], int] = {}
    for name, factor in value.items():
        if allowed is not None and name not in allowed:
            raise SignatureError(f"'{TENSOR_DIM_FACTOR}' names {name!r}, which is not a tensor "
                                 "parameter of the kernel", hint="name tensor parameters: "
                                 + (", ".join(allowed) or "(the kernel has none)"))
        out[name] = _factor(factor, f"{TENSOR_DIM_FACTOR} of {name!r}")
    return out


def factors_by_name(hints: Optional[Mapping], tensor_names: Sequence[str]) -> dict[str, int]:
    """The factor of each named tensor parameter under ``hints`` (absent: no promise)."""
    if not hints or TENSOR_DIM_FACTOR not in hints:
        return {}
    entries = _factor_entries(hints[TENSOR_DIM_FACTOR], tensor_names)
    if None in entries:
        return {name: entries[None] for name in tensor_names}
    return {str(name): f for name, f in entries.items()}


def covered_dims(param: Param, rank: int) -> tuple[int, ...]:
    """The extents ``tensor_dim_factor`` covers for ``param`` (the dynamic ones the kernel
    receives): the ``-1`` extents of a ``tc.Tensor`` or ``tc.AtomicTensor``; every extent of
    the tensor a ``tc.MutTensor`` or ``tc.MappedPartitionMut`` partitions (``rank`` is its
    rank)."""
    spec = param.spec
    if isinstance(spec, AtomicSpec) or isinstance(spec, TensorSpec) and not spec.mutable:
        return tuple(i for i, d in enumerate(spec.shape) if d is None)
    return tuple(range(rank))


def _tensor_params(params: Sequence[Param]) -> list[Param]:
    return [p for p in params if isinstance(p.spec, (TensorSpec, MappedSpec, AtomicSpec))]


def dim_factors(hints: Optional[Mapping], params: Sequence[Param]) -> dict[str, int]:
    """``{parameter: factor}`` for the tensor parameters ``tensor_dim_factor`` covers; a
    SignatureError for a name that is no tensor parameter, or a parameter with no dynamic
    extent (the promise would say nothing)."""
    tensors = _tensor_params(params)
    factors = factors_by_name(hints, [p.name for p in tensors])
    explicit = isinstance((hints or {}).get(TENSOR_DIM_FACTOR), dict)
    for p in tensors:
        if p.name in factors and explicit and not covered_dims(p, 1):
            raise SignatureError(f"'{TENSOR_DIM_FACTOR}' names '{p.name}', whose shape has no "
                                 "dynamic extent: the promise would say nothing",
                                 hint=f"drop '{p.name}' from it (static extents are known "
                                 "exactly)")
    return factors


def check_dim_factors(kernel_name: str, params: Sequence[Param], args: Sequence[Any],
                      factors: Mapping[str, int], where: Any = None) -> None:
    """Refuse a launch whose arguments break the kernel's ``tensor_dim_factor`` promise.

    ``args`` are the launch's ``specialize.ArgInfo`` s (in parameter order; a partition's
    ``shape`` is the whole tensor's), ``factors`` what :func:`dim_factors` gave. Raises an
    ArgumentError naming the argument, the extent and the factor."""
    if not factors:
        return
    for p, a in zip(params, args):
        factor = factors.get(p.name)
        if not factor or a.shape is None:
            continue
        for axis in covered_dims(p, len(a.shape)):
            extent = a.shape[axis]
            if extent % factor:
                shared = isinstance(p.spec, AtomicSpec) or \
                    isinstance(p.spec, TensorSpec) and not p.spec.mutable
                whose = ("its dynamic extents" if shared
                         else "the extents of the tensor it partitions")
                raise ArgumentError(
                    f"argument '{p.name}' of '{kernel_name}' has shape {tuple(a.shape)}: extent "
                    f"{axis} is {extent}, but the kernel's hint tensor_dim_factor={factor} "
                    f"promises {whose} are multiples of {factor}", where,
                    hint=f"launch with extents that are multiples of {factor} (pad the tensor, "
                    "or launch on a view that fits), or lower the kernel's tensor_dim_factor")
