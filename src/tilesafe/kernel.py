"""``@ts.kernel``, ``@ts.function`` and ``ts.unsafe()``: the host-side handle of a kernel.

A :class:`Kernel` parses its signature when decorated, compiles one specialization per distinct
set of compile-time inputs (dtypes, static shapes, constants) on first use, and launches lazily:
calling it returns a DeviceOp that validates, runs and returns the arguments when driven.

It owns the signature, the specialization and the caches (typed IR per specialization,
executables per target and launch facts, launch plans); compiling goes through
``tilesafe.pipeline``, the device's backend (``tilesafe.backends``) runs it, and the launch
checks and ops are the launch layer's (``tilesafe.launch``).
"""

from __future__ import annotations

import functools
import inspect
import threading
import weakref
from typing import Any, Callable, Optional, Sequence

from . import _compiled, backends, pipeline
from ._callsite import caller_location
from .backends.base import BoundLaunch, Target
from .compiler.frontend import DeviceFunction, SourceFunction
from .compiler.hints import check_hints, dim_factors
from .compiler.ir import KernelIR, print_ir
from .compiler.signature import Param, PointerSpec, launch_bound_consts, parse_signature
from .compiler.specialize import Specialization, specialize_from_names
from .deviceops.deviceop import DeviceOp
from .driver.device import Device
from .driver.stream import Stream
from .errors import (ArgumentError, LaunchError, Location, SignatureError, TilesafeError,
                     UnsafeError)
from .launch.checks import (LaunchRules, PreparedLaunch, describe, kernel_args, launch_grid,
                            prepare, recover)
from .launch.arguments import bind, result_type
from .launch.op import LaunchOp
from .launch.unsafe import unsafe, unsafe_permitted

_FAST = _compiled.FASTPATH
_LIVE_KERNELS: "weakref.WeakSet[Kernel]" = weakref.WeakSet()


def live_kernels() -> list["Kernel"]:
    """Every kernel object alive in this process (the test suite compiles each one's
    specializations for a GPU target)."""
    return list(_LIVE_KERNELS)

class _KernelState:
    """What launching a kernel needs at every call: its name, whether it is unsafe, its cache
    of launch plans and its launch count; calling it launches (``launch``).

    (The Python definition of ``KernelCore``, the base of :class:`Kernel`; the compiled fast
    path has the same type in C, whose call makes a launch from a cached plan without running
    Python, and hands every other call to ``launch``.)"""

    __slots__ = ("name", "_unsafe", "_plans", "launch_count")

    def __call__(self, *args: Any, **kwargs: Any) -> DeviceOp[tuple]:
        return self.launch(*args, **kwargs)


KernelCore = _FAST.KernelCore if _FAST is not None else _KernelState


class Kernel(KernelCore):
    """A tile kernel (made by ``@ts.kernel``). Call it with the launch arguments to get a lazy
    :class:`~tilesafe.deviceops.deviceop.DeviceOp`; ``.sync()`` runs it and returns the arguments.

    Attributes:
        name: the function name.
        params: the parsed parameters.
        unchecked_accesses: True if bounds checks are off (the kernel is unsafe).
        compile_count: compilations so far in this process: interpreter builds on the cpu,
            tileiras runs for GPUs (a cubin found in the disk cache does not count).
        launch_count: number of launches that have run (replays included).
    """

    def __init__(self, fn: Callable, *, unchecked_accesses: bool = False,
                 hints: Optional[dict] = None, examples: Sequence[dict] = (),
                 const_grid: bool = False):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = fn.__name__
        self.params: list[Param] = parse_signature(fn)
        self.unchecked_accesses = bool(unchecked_accesses)
        self.hints = check_hints(hints, self.params)
        self.examples = [dict(e) for e in examples]
        self._source: Optional[SourceFunction] = None
        self._ir_cache: dict[Specialization, KernelIR] = {}
        self._executables: dict[tuple[Specialization, Target, Any], Any] = {}
        self._targets: dict[Device, Target] = {}
        self._plans: dict[Any, Any] = {}
        _LIVE_KERNELS.add(self)
        self._lock = threading.Lock()
        self.compile_count = 0
        self.launch_count = 0
        self._unsafe = self.unchecked_accesses or any(isinstance(p.spec, PointerSpec)
                                                      for p in self.params)
        self.rules = LaunchRules(self.name, tuple(self.params),
                                 result_type(self.name, self.params),
                                 dim_factors(self.hints, self.params), bool(const_grid))
        self._defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()
                          if p.default is not inspect.Parameter.empty}
        self._left_out_ok = launch_bound_consts(self.params)  # Consts a launch may leave out

    @property
    def const_grid(self) -> bool:
        """Whether the launch grid is compiled in as a constant (``kernel(const_grid=True)``)."""
        return self.rules.const_grid

    @property
    def is_unsafe(self) -> bool:
        """True if the kernel turns a check off (``unchecked_accesses``) or takes raw pointers."""
        return self._unsafe

    @property
    def source(self) -> SourceFunction:
        if self._source is None:
            self._source = SourceFunction.parse(self.fn)
        return self._source

    # -- compilation ------------------------------------------------------------------------
    def _ir(self, spec: Specialization) -> KernelIR:
        """The typed, verified IR of one specialization (front end and verifier; cached)."""
        ir = self._ir_cache.get(spec)
        if ir is None:
            ir = pipeline.typed_ir(self.name, self.source, self.params, spec,
                                   unchecked_accesses=self.unchecked_accesses)
            self._ir_cache[spec] = ir
        return ir

    def _counted(self) -> None:
        self.compile_count += 1

    def _executable(self, spec: Specialization, target: Target, facts: Any) -> Any:
        """The executable of a specialization for ``target`` and launch facts (single-flight,
        cached; ``compile_count`` counts the real compilations)."""
        key = (spec, target, facts)
        exe = self._executables.get(key)
        if exe is None:
            with self._lock:
                exe = self._executables.get(key)
                if exe is None:
                    exe = pipeline.compile(self._ir(spec), target, hints=self.hints,
                                           facts=facts, on_compiled=self._counted)
                    self._executables[key] = exe
        return exe

    def _target(self, device: Device) -> Target:
        target = self._targets.get(device)
        if target is None:
            target = self._targets[device] = backends.for_device(device).target(device)
        return target

    def _bound(self, prepared: PreparedLaunch) -> BoundLaunch:
        """The backend's launch of a validated launch, its arguments marshalled (once per
        launch plan: a repeated launch reuses it)."""
        plan = prepared.plan
        if plan is not None and plan.bound is not None:
            return plan.bound
        exe, args = self._executable_for(prepared)
        bound = exe.bind(args, prepared.grid)
        if plan is not None:
            record = getattr(bound, "fault_record", None)
            if record is not None:  # lent to every launch of the plan, read when it completes
                plan.borrowed_partitions.append(record)
            plan.bound = bound
        return bound

    def _executable_for(self, prepared: PreparedLaunch) -> tuple[Any, list]:
        """The executable of a validated launch (its specialization, device and launch facts)
        and the backend's description of its arguments."""
        device = prepared.device
        args = kernel_args(self.params, prepared.args)
        facts = backends.for_device(device).launch_facts(self._ir(prepared.specialization), args)
        return self._executable(prepared.specialization, self._target(device), facts), args

    def compile(self, *args: Any, target: Optional[str] = None,
                grid: Optional[Sequence[int]] = None, **kwargs: Any) -> Any:
        """Compile for these arguments (by position or by name) without launching or running
        them: constructor and copy ops not run yet describe their results. With ``target``
        (e.g. ``"sm_90"``) this needs no GPU and returns the cubin bytes; otherwise it returns
        the executable for the arguments' device (interpreter or GPU), which needs tensors
        (their alignment is part of it)."""
        prepared = self._check_only(args, grid, kwargs)
        if target is None:
            self._check_permitted("compiled for launching", prepared.where)
            if prepared.args is None:
                raise ArgumentError(f"compiling '{self.name}' for a device needs its arguments' "
                                    "memory, and some are DeviceOps not run yet",
                                    prepared.where, hint="call .sync() on them first, or "
                                    "compile ahead of time with target='sm_90'")
        if target is not None:
            ahead = backends.by_name("tileir").ahead_of_time(target)
            return pipeline.compile(self._ir(prepared.specialization), ahead, hints=self.hints,
                                    on_compiled=self._counted)
        return self._executable_for(prepared)[0]

    def ir(self, *args: Any, grid: Optional[Sequence[int]] = None, **kwargs: Any) -> KernelIR:
        """Compile (without running anything) for these arguments and return the typed IR."""
        return self._ir(self._check_only(args, grid, kwargs).specialization)

    def _check_only(self, args: Sequence[Any], grid: Optional[Sequence[int]],
                    kwargs: Optional[dict] = None) -> PreparedLaunch:
        """Validate ``args`` like a launch but borrow nothing; DeviceOp arguments are not run
        (their described results specialize the kernel: ``launch.checks.describe``)."""
        where = caller_location()
        args = bind(self.name, self.params, tuple(args), kwargs or {}, self._left_out_ok,
                    where, self._defaults)
        if any(isinstance(a, DeviceOp) for a in args):
            return describe(self.rules, args, grid, where)
        return prepare(self.rules, args, grid, where, lend=False)

    def specialize_example(self, bindings: dict) -> Specialization:
        """A specialization from names alone, with no tensors: ``bindings`` gives each shape
        name (``"S": (1024,)``), dtype name (``"T": ts.float16``) and tc.Const parameter.
        Used by ``tilesafe check`` and to compile ahead of time. A ``const_grid`` kernel also
        needs ``"grid"``: the launch grid, e.g. ``(132, 1, 1)``."""
        if not self.const_grid:
            return specialize_from_names(self.name, self.params, bindings)
        bindings = dict(bindings)
        grid = bindings.pop("grid", None)
        if grid is None:
            raise ArgumentError(f"kernel '{self.name}' compiles its grid in (const_grid=True), "
                                "and the example gives none", hint="add \"grid\": (x, y, z) "
                                "(say (132, 1, 1)) to the example")
        g = launch_grid((), (), grid, self.name, None)  # checked as a launch's explicit grid
        return specialize_from_names(self.name, self.params, bindings).with_grid(g)

    def ir_text(self, *args: Any, grid: Optional[Sequence[int]] = None, **kwargs: Any) -> str:
        """The printed IR for these arguments (see :meth:`ir`)."""
        return print_ir(self.ir(*args, grid=grid, **kwargs))

    # -- launching --------------------------------------------------------------------------
    def launch(self, *args: Any, grid: Optional[Sequence[int]] = None,
               **kwargs: Any) -> DeviceOp[tuple]:
        """A lazy launch with arguments by position or by parameter name (Python's binding
        rules); ``grid`` defaults to the tile grid of the partitioned outputs. ``.sync()``
        returns the tensor-like arguments (a named tuple: ``z, x = k(z, x, 2.0).sync()``, or
        ``r.z``).

        When no argument is itself a pending DeviceOp, the launch is validated right here and
        its arguments are lent to it (shared inputs, exclusive outputs) until it completes.
        """
        where = caller_location()
        try:
            if kwargs or len(args) < len(self.params):
                args = bind(self.name, self.params, args, kwargs, self._left_out_ok, where,
                            self._defaults)
            self._check_permitted("launched", where)
            return LaunchOp(self, args, grid, where)
        except TilesafeError as err:  # nothing was lent: the arguments come back with the error
            err.arguments = args
            raise

    def _check_permitted(self, what: str, where: Location) -> None:
        """An unsafe kernel is launched (or compiled for launching) only inside an open
        ``with ts.unsafe():`` block."""
        if self._unsafe and not unsafe_permitted():
            why = ("unchecked_accesses=True" if self.unchecked_accesses
                   else "it takes raw tc.Ptr parameters")
            raise UnsafeError(f"kernel '{self.name}' is unsafe ({why}) and is {what} outside "
                              "'with ts.unsafe():'", where,
                              hint="wrap the launch in 'with ts.unsafe():' after checking the "
                              "kernel cannot access out of bounds or race")

    def _run_prepared(self, prepared: PreparedLaunch, stream: Stream, *,
                      spend: bool = True) -> tuple:
        """Run a validated launch to completion on ``stream`` and hand back its arguments
        (``spend=False`` for graph replays: borrowed partitions stay with the graph)."""
        bound = None
        try:
            if stream.device is not prepared.device and stream.device != prepared.device:
                raise ArgumentError(f"the launch of '{self.name}' runs on {prepared.device} but "
                                    f"was driven on a {stream.device} stream", prepared.where,
                                    hint=f"drive it with .sync() or on a {prepared.device} "
                                    "stream")
            bound = self._bound(prepared)
            bound.launch(stream)
            self.launch_count += 1
        except Exception as err:  # the arguments come back with the error, none is lost
            if isinstance(err, LaunchError):
                # found as it ran (an indexed partition's positions on the interpreter): the
                # error names the launch
                err.with_context(location=prepared.where)
            _hand_back(err, prepared.args)
            raise
        finally:  # the loans end when the stream is next synchronized, whatever happened
            results = recover(prepared, stream, spend=spend,
                              fault_record=getattr(bound, "fault_record", None))
        return results

    def __repr__(self) -> str:
        flag = " unsafe" if self.is_unsafe else ""
        return f"<tilesafe kernel {self.name}{flag}>"


def _hand_back(err: Exception, args: tuple) -> None:
    """Attach a failed launch's arguments to its error (``err.arguments``)."""
    try:
        err.arguments = args
    except AttributeError:  # (an exception type without a dict)
        pass


def kernel(fn: Optional[Callable] = None, *, unchecked_accesses: bool = False,
           hints: Optional[dict] = None, examples: Sequence[dict] = (),
           const_grid: bool = False):
    """Decorate a tile kernel: ``@ts.kernel`` or ``@ts.kernel(unchecked_accesses=True)``.

    Args:
        unchecked_accesses: turn off bounds checks; makes the kernel unsafe (launch it inside
            ``with ts.unsafe():``).
        hints: optimization hints, e.g. ``{"tensor_dim_factor": 16, "sm_90":
            {"num_cta_in_cga": 2, "occupancy": 1}, "default": {"occupancy": 2}}``: an
            architecture's entry applies to that target, ``default`` otherwise; unknown names
            are an error. ``tensor_dim_factor`` (a power of two, or ``{"x": 16}`` per
            parameter) promises that the dynamic extents of the tensor parameters are
            multiples of it; every launch checks the promise.
        examples: name bindings (shape names, dtype names, tc.Const values), each a dict, that
            ``tilesafe check`` compiles the kernel with when no tensors are at hand.
        const_grid: compile the launch grid in as a constant: ``get_num_tile_blocks()`` is
            static and the block ids have known bounds, so the GPU compiler can drop index
            arithmetic and bounds checks derived from them; each grid compiles its own
            specialization (an example gives it as ``"grid": (x, y, z)``).

    Module globals the kernel reads (numbers, dtypes, tuples) are read when it is compiled for
    a specialization, and later changes to them are not seen by that specialization: pass a
    value that changes as an argument or a ``tc.Const``.
    """
    def wrap(f: Callable) -> Kernel:
        return Kernel(f, unchecked_accesses=unchecked_accesses, hints=hints,
                      examples=examples, const_grid=const_grid)
    return wrap(fn) if fn is not None else wrap


def function(fn: Callable) -> DeviceFunction:
    """Decorate a device function: callable from kernels and other device functions, inlined
    at each call site. It takes and returns tiles, tensors, partitions and constants."""
    return DeviceFunction(fn)


def compile(kernel: Kernel, *args: Any, target: str = "sm_90",  # noqa: A001
            grid: Optional[Sequence[int]] = None) -> bytes:
    """Compile ``kernel`` for the given (cpu or abstract) arguments to a cubin for ``target``;
    needs tileiras but no GPU."""
    return kernel.compile(*args, target=target, grid=grid)
