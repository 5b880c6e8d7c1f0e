"""Choosing a launch configuration per problem: ``@ts.autotune``.

Two forms share one tuner. A *tuned function* is a host function that builds a launch (a
DeviceOp) from its arguments and a *config* (a dict of choices: tile sizes, rows per program,
hints)::

    @ts.autotune(configs=[{"rows": 1}, {"rows": 4}],
                 key=lambda x, w, out: (x.shape[-1], x.dtype.name),
                 kernels=(rms_norm_kernel,))
    def launch_rms_norm(x, w, out, *, config):
        ...  # partition out by config["rows"], return kernel(...)

A *tuned kernel* is ``ts.autotune(...)`` applied to a ``@ts.kernel``: each config gives values
of the kernel's ``tc.Const`` parameters and, optionally, ``"hints"`` (merged over the kernel's
own ``hints=``; each distinct hints dict compiles its own variant of the kernel)::

    @ts.autotune(configs=[{"BLOCK": 64}, {"BLOCK": 128, "hints": {"default": {"occupancy": 2}}}],
                 key=["x"])
    @ts.kernel
    def scale(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)],
              BLOCK: tc.Const[int]): ...

    scale(z.partition((1, n)), x).sync()     # BLOCK comes from the chosen config

``key`` is a function of the call's arguments, or a list of parameter names: a tensor (or
partition, or lazy tensor) stands for its shape and dtype, other values for themselves.

Which config a call uses, in order:

1. on a device the tuner cannot time (``cpu``), or with a single config: the first config,
   nothing timed or stored;
2. the winner this process already found for the full key (:mod:`.keys`: function, source of
   it and its kernels, toolchain, architecture and device name, key values);
3. the on-disk store (:mod:`.store`, under ``$TILESAFE_CACHE_DIR``);
4. the shipped table of the architecture (``tilesafe/kernels/tuned/<arch>.json``), trusted on
   any device of that architecture with the same source and toolchain (an entry measured on
   the calling device first);
5. unless ``TILESAFE_AUTOTUNE=0`` (then the first config): tuning now. Every config is run
   once (compiled; a config that fails to compile or launch with a ``TilesafeError`` is
   skipped; :class:`~tilesafe.errors.TuningError` if all fail, unless every one failed a
   check of the call's arguments (:func:`_fails_the_arguments`: an id outside a table,
   repeated positions, an ``out=`` of the wrong shape): then the call runs the first config
   on its own arguments, raising that error as an untuned call would, nothing is stored and
   one line on stderr says so), then timed in interleaved rounds (:mod:`.timing`), and the
   fastest median wins; it is stored, and one line on stderr says what was tuned and what
   won. A call whose arguments are DeviceOps not run yet, or made while torch captures a
   CUDA graph, cannot be timed: it uses the first config and stores nothing (tune before
   capturing: call once outside the capture, or ship a table). A call whose runs cannot be
   recorded into a graph (it allocates, say) is timed as enqueued chains; a config whose
   chains kept the device waiting for the host in most rounds (:class:`.timing.HostBound`)
   took the device less time than the host's enqueueing, which every other config's time
   exceeded: alone, it wins; with another such config the times cannot rank them, so the
   first config runs for that key in this process, nothing is stored and one line on stderr
   says so.

Timing runs never change what the caller sees (see :mod:`.timing`): tensors named in
``mutates`` and kernel outputs (partitions) are cloned, outputs not allocated yet are
replaced by scratch tensors.

This package may import every layer up to ``kernel``.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import statistics
import sys
import threading
from typing import Any, Callable, Hashable, Optional, Sequence, Union

from .._callsite import caller_location
from ..compiler.signature import ConstSpec
from ..deviceops.deviceop import DeviceOp
from ..driver.device import Device, default_device
from ..errors import (ArgumentError, KernelRuntimeError, PositionsError, TilesafeError,
                      TuningError)
from ..kernel import Kernel, kernel as make_kernel
from . import keys, store, timing

__all__ = ["autotune", "Tuned", "TunedKernel"]

#: interleaved rounds of timing per config (the median is kept)
ROUNDS = 5
#: the time one round of one config aims for (runs per round are chosen to reach it)
ROUND_MS = 2.0
#: the most runs of one config per round
MAX_RUNS = 100

Key = Union[Callable[..., Hashable], Sequence[str]]


#: errors of a timing run that say the call's arguments failed a check (an index outside its
#: tensor, a device assertion, positions repeated or outside their grid), not that the config
#: is wrong; and a plain :class:`ArgumentError`, what a launch function's own host checks
#: raise (an ``out=`` of the wrong shape). Its subclasses are not: a kernel refusing a
#: config's constants (an extent, a dtype) is the config's error.
ARGUMENT_CHECKS = (KernelRuntimeError, PositionsError)


def _fails_the_arguments(err: Exception) -> bool:
    """Whether ``err`` of a timing run says the call's arguments are wrong (above)."""
    return isinstance(err, ARGUMENT_CHECKS) or type(err) is ArgumentError


class _ArgumentsFailed(Exception):
    """Every config failed a check of the call's arguments (:func:`_fails_the_arguments`)."""


class _HostBoundTiming(Exception):
    """The timing runs measured the host, not the configs (:class:`.timing.HostBound`)."""


def _tuning_enabled() -> bool:
    return os.environ.get("TILESAFE_AUTOTUNE", "1") != "0"


class Tuned:
    """A tuned host function (made by :func:`autotune`): calling it picks a config for the
    arguments' key (module docstring) and calls the function with ``config=``.

    Attributes:
        fn: the function; configs: the configs (``configs[0]`` the default); name: the name
        results are filed under; kernels, mutates: as given to :func:`autotune`.
    """

    def __init__(self, fn: Callable, configs: Sequence[dict], key: Key,
                 kernels: Sequence[Any] = (), mutates: Sequence[str] = (),
                 name: Optional[str] = None):
        where = caller_location()
        if not configs or not all(isinstance(c, dict) for c in configs):
            raise ArgumentError(f"autotune needs a non-empty list of dict configs, got "
                                f"{configs!r}", where,
                                hint="e.g. configs=[{'BLOCK': 64}, {'BLOCK': 128}]")
        self.fn = fn
        self.configs = [dict(c) for c in configs]
        self.kernels = tuple(kernels)
        self.mutates = tuple(mutates)
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        self._signature = _signature_without_config(fn)
        unknown = [m for m in self.mutates if m not in self._signature.parameters]
        if unknown:
            raise ArgumentError(f"autotune of {self.name}: mutates={unknown} names no parameter "
                                f"of {fn.__qualname__}{self._signature}", where,
                                hint="name the parameters the launch writes in place")
        self.key = _key_function(key, self._signature, self.name, where)
        self._source: Optional[str] = None
        self._chosen: dict = {}  # (device, key values) -> config index
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)

    # -- choosing -------------------------------------------------------------------------
    def config_for(self, *args: Any, **kwargs: Any) -> dict:
        """The config a call with these arguments uses (tuning now if nothing is known)."""
        return self.configs[self._choose(args, kwargs)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, config=self.config_for(*args, **kwargs), **kwargs)

    def _choose(self, args: tuple, kwargs: dict) -> int:
        device = timing.device_of((*args, *kwargs.values())) or default_device()
        strategy = timing.TIMING
        if not strategy.can_time(device):
            return 0
        raw = self.key(*args, **kwargs)
        try:  # the fast path of a repeated call: the key as computed, when it is hashable
            memo: Any = (device, raw)
            found = self._chosen.get(memo)
        except TypeError:
            memo, found = None, None
        if found is not None:
            return found
        try:
            values = keys.key_value(raw)
        except TypeError as err:
            raise ArgumentError(f"autotune of {self.name}: the key of this call is not "
                                f"usable: {err}", caller_location(),
                                hint="make key return numbers, strings, booleans, dtypes or "
                                "tuples of them") from None
        if memo is None:
            memo = (device, json.dumps(values, sort_keys=True))
        with self._lock:
            found = self._chosen.get(memo)
            if found is None:
                found = self._resolve(strategy, device, values, args, kwargs)
                if found is not None:
                    self._chosen[memo] = found
        return 0 if found is None else found

    def full_key(self, device_facts: tuple[str, str], values: Any) -> dict:
        """The full key of a result for ``values`` on a device ``(arch, device name)``."""
        if self._source is None:
            self._source = keys.source_hash(self.fn, self.kernels)
        return keys.full_key(self.name, self._source, device_facts[0], device_facts[1], values)

    def _resolve(self, strategy: timing.Timing, device: Device, values: Any, args: tuple,
                 kwargs: dict) -> Optional[int]:
        """Steps 3-5 of the module docstring: the config index, or None for a call that could
        not be timed (the device cannot time now, or timing runs cannot copy its arguments:
        the default runs, and a later call with the same key is timed if it can be)."""
        if len(self.configs) == 1:  # nothing to choose: nothing timed or stored
            return 0
        wanted = self.full_key(strategy.describe(device), values)
        for found in (store.lookup(wanted, self.configs),
                      store.shipped_lookup(wanted, self.configs)):
            if found is not None:
                return found
        if not _tuning_enabled():
            return 0
        if not strategy.ready(device):
            return None
        bound = self._signature.bind(*args, **kwargs)
        try:
            copies = timing.timing_arguments(dict(bound.arguments), self.mutates)
        except timing.NotTimeable:  # (refused before any copy: cheap to find out again)
            return None
        try:
            index, times, failures = self._tune(strategy, device, bound, copies)
        except _ArgumentsFailed:  # (the call itself raises it, with its own arguments)
            return None
        except _HostBoundTiming:  # (timing it again would measure the host again)
            return 0
        path = store.save(wanted, index, self.configs[index], times)
        self._report(strategy.describe(device)[1], values, index, times, failures, path)
        return index

    # -- tuning ---------------------------------------------------------------------------
    def _tune(self, strategy: timing.Timing, device: Device, bound: inspect.BoundArguments,
              copies: dict) -> tuple[int, dict, dict]:
        """Time every config on copies of the arguments: ``(winner, median ms by index,
        failure by index)``."""
        stream = strategy.stream(device)

        def maker(config: dict) -> Callable[[], DeviceOp]:
            def make() -> DeviceOp:
                call = inspect.BoundArguments(self._signature, dict(copies))
                return self.fn(*call.args, config=config, **call.kwargs)
            return make

        failures: dict[int, str] = {}
        runs: dict[int, int] = {}
        data_failures = 0
        for i, config in enumerate(self.configs):
            try:
                strategy.time_runs(config, maker(config), stream, 1)  # compiles
                once = strategy.time_runs(config, maker(config), stream, 1)
            except TilesafeError as err:
                failures[i] = f"{type(err).__name__}: {err}".replace("\n", "\n    ")
                data_failures += _fails_the_arguments(err)
                continue
            runs[i] = max(1, min(MAX_RUNS, int(ROUND_MS / max(once, 1e-6))))
        if data_failures == len(self.configs):  # (then nothing ran)
            print(f"tilesafe: not tuning {self.name} for key "
                  f"{self.key(*bound.args, **bound.kwargs)!r}: every config's run failed a "
                  "check of the arguments (the call raises it); nothing stored",
                  file=sys.stderr)
            raise _ArgumentsFailed()
        if not runs:
            listed = "\n".join(f"  config {i} {self.configs[i]}: {why}"
                               for i, why in failures.items())
            raise TuningError(f"{caller_location()}: tuning {self.name} for key "
                              f"{self.key(*bound.args, **bound.kwargs)!r}: every config failed"
                              f"\n{listed}\n  fix: correct the configs (or the launch "
                              "function) so that at least one compiles and launches")
        samples: dict[int, list[float]] = {i: [] for i in runs}
        waited: dict[int, int] = {i: 0 for i in runs}  # rounds a config kept the device waiting
        for _ in range(ROUNDS):
            for i, n in runs.items():
                try:
                    ms = strategy.time_runs(self.configs[i], maker(self.configs[i]), stream, n)
                except timing.HostBound as err:
                    ms, waited[i] = err.device_ms, waited[i] + 1
                samples[i].append(ms)
        medians = {i: statistics.median(s) for i, s in samples.items()}
        # A config whose chains kept the device waiting in most rounds took the device less
        # time than the host took to enqueue it, which the other configs' device time
        # exceeded: one such config is the fastest; several cannot be ranked by these times.
        host_bound = [i for i in runs if waited[i] * 2 > ROUNDS]
        if len(host_bound) > 1:
            print(f"tilesafe: not tuning {self.name} for key "
                  f"{self.key(*bound.args, **bound.kwargs)!r}: its timing runs could not be "
                  "recorded into a graph (the call allocates, or decides a step only when it "
                  f"runs), and configs {host_bound} kept the device waiting for the host, so "
                  "their times are the host's and cannot rank them. The first config runs and "
                  "nothing is stored (pass out= and workspace= where the function takes them, "
                  "so that its runs can be recorded)", file=sys.stderr)
            raise _HostBoundTiming()
        winner = host_bound[0] if host_bound else min(medians, key=lambda i: (medians[i], i))
        return winner, medians, failures

    def _report(self, device_name: str, values: Any, index: int, times: dict, failures: dict,
                path: Any) -> None:
        skipped = f", {len(failures)} failed" if failures else ""
        where = f"; stored in {path}" if path is not None else ""
        print(f"tilesafe: tuned {self.name} for key {values} on {device_name}: config "
              f"{index} {self.configs[index]} ({times[index]:.4f} ms; {len(times)} configs "
              f"timed{skipped}){where}", file=sys.stderr)

    def __repr__(self) -> str:
        return f"<tilesafe tuned {self.name} ({len(self.configs)} configs)>"


class TunedKernel:
    """A ``@ts.kernel`` under :func:`autotune`: calling it launches the kernel (the variant of
    the chosen config's hints) with the chosen config's ``tc.Const`` values.

    Attributes:
        kernel: the kernel; configs: the configs; tuned: the :class:`Tuned` launch it uses.
    """

    def __init__(self, kernel: Kernel, configs: Sequence[dict], key: Key,
                 mutates: Sequence[str] = (), name: Optional[str] = None):
        self.kernel = kernel
        where = caller_location()
        consts = {p.name for p in kernel.params if _is_const(p)}
        for config in configs:
            if not isinstance(config, dict):
                continue
            wrong = [k for k in config if k != "hints" and k not in consts]
            if wrong:
                raise ArgumentError(f"autotune of kernel '{kernel.name}': config {config} "
                                    f"sets {wrong}, which are not tc.Const parameters of the "
                                    f"kernel (its Consts: {sorted(consts) or 'none'})", where,
                                    hint="a config gives Const values and optionally "
                                    "'hints': {...}")
        self._variants: dict[str, Kernel] = {}
        self._variants_lock = threading.Lock()

        self._chosen_consts = sorted({k for c in configs if isinstance(c, dict) for k in c
                                      if k != "hints"})
        optional = set(inspect.signature(kernel.fn).parameters) - \
            {n for n, p in inspect.signature(kernel.fn).parameters.items()
             if p.default is inspect.Parameter.empty and not _is_const_named(kernel, n)}

        def launch(*args: Any, config: dict, **kwargs: Any) -> DeviceOp:
            given = {k: v for k, v in kwargs.items() if v is not _LEFT_OUT}
            return self.variant(config.get("hints")).launch(
                *args, **given, **{k: v for k, v in config.items() if k != "hints"})
        launch.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               default=_LEFT_OUT if p.name in optional else
                               inspect.Parameter.empty)
             for p in kernel.params if p.name not in self._chosen_consts] +
            [inspect.Parameter("grid", inspect.Parameter.KEYWORD_ONLY, default=None),
             inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY)])
        self.tuned = Tuned(launch, configs, key, kernels=(kernel,), mutates=mutates,
                           name=name or f"{kernel.fn.__module__}.{kernel.fn.__qualname__}")
        self.configs = self.tuned.configs
        functools.update_wrapper(self, kernel.fn)

    def variant(self, hints: Optional[dict]) -> Kernel:
        """The kernel compiled with ``hints`` merged over its own (made once per hints)."""
        if not hints:
            return self.kernel
        merged = {**self.kernel.hints, **hints}
        label = json.dumps(merged, sort_keys=True, default=repr)
        found = self._variants.get(label)
        if found is None:
            with self._variants_lock:
                found = self._variants.get(label)
                if found is None:
                    found = self._variants[label] = make_kernel(
                        self.kernel.fn, hints=merged,
                        unchecked_accesses=self.kernel.unchecked_accesses,
                        const_grid=self.kernel.const_grid)
        return found

    def config_for(self, *args: Any, **kwargs: Any) -> dict:
        """The config a launch with these arguments uses."""
        return self.tuned.config_for(*args, **kwargs)

    def __call__(self, *args: Any, grid: Optional[Sequence[int]] = None,
                 **kwargs: Any) -> DeviceOp:
        given = [k for k in self._chosen_consts if k in kwargs]
        if given:
            raise ArgumentError(f"kernel '{self.kernel.name}' is tuned: {given} come from its "
                                "autotune configs and cannot be passed", caller_location(),
                                hint=f"leave {', '.join(given)} out (or launch "
                                f"{self.kernel.name}.kernel to choose them yourself)")
        return self.tuned(*args, grid=grid, **kwargs)

    def __repr__(self) -> str:
        return f"<tilesafe tuned kernel {self.kernel.name} ({len(self.configs)} configs)>"


def autotune(configs: Sequence[dict], key: Key, *, kernels: Sequence[Any] = (),
             mutates: Sequence[str] = (),
             name: Optional[str] = None) -> Callable[[Any], Union[Tuned, TunedKernel]]:
    """Decorate a host function ``fn(*args, config, **kwargs) -> DeviceOp``, or a
    ``@ts.kernel``, so that each call uses the best of ``configs`` for its key (see the
    module docstring for the order in which a config is found).

    Args:
        configs: the choices (dicts), tried in order; the first is the default, used on the
            ``cpu`` device and whenever nothing is timed: make it valid for every shape. For
            a kernel: ``tc.Const`` values and optionally ``"hints": {...}``.
        key: the values the best config depends on: a function of the call's arguments, or a
            list of parameter names (a tensor stands for its shape and dtype). The values must
            be numbers, strings, booleans, None, dtypes, or tuples/lists of them.
        kernels: the kernels the function launches (their source and hints are part of the
            key a result is filed under; a tuned kernel adds itself).
        mutates: the names of arguments the launch writes in place and whose data the caller
            needs: timing runs write clones of them instead.
        name: the name results are filed under (default: module and qualified name).

    Raises:
        ArgumentError: no configs, a config that is not a dict, a ``mutates`` or ``key`` name
            that is no parameter, or (for a kernel) a config key that is no ``tc.Const``.
    """
    def decorate(fn: Any) -> Union[Tuned, TunedKernel]:
        if isinstance(fn, Kernel):
            return TunedKernel(fn, configs, key, mutates=mutates, name=name)
        return Tuned(fn, configs, key, kernels=kernels, mutates=mutates, name=name)
    return decorate


# -- helpers ----------------------------------------------------------------------------------

def _is_const(param: Any) -> bool:
    return isinstance(param.spec, ConstSpec)


def _is_const_named(kernel: Kernel, name: str) -> bool:
    return any(p.name == name and _is_const(p) for p in kernel.params)


#: a kernel parameter a tuned kernel's call left out (the kernel binds it, or uses its default)
_LEFT_OUT = type("LeftOut", (), {"__repr__": lambda self: "<left out>"})()


def _signature_without_config(fn: Callable) -> inspect.Signature:
    signature = inspect.signature(fn)
    return signature.replace(parameters=[p for n, p in signature.parameters.items()
                                         if n != "config"])


def _key_function(key: Key, signature: inspect.Signature, name: str,
                  where: Any) -> Callable[..., Any]:
    """``key`` as a function of the call's arguments."""
    if callable(key):
        return key
    if isinstance(key, str) or not all(isinstance(k, str) for k in key):
        raise ArgumentError(f"autotune of {name}: key={key!r} must be a function or a list of "
                            "parameter names", where, hint="e.g. key=['x', 'n']")
    names = list(key)
    missing = [k for k in names if k not in signature.parameters]
    if missing:
        raise ArgumentError(f"autotune of {name}: key names {missing}, which are not "
                            f"parameters (they are: {list(signature.parameters)})", where,
                            hint="name parameters of the function or kernel")

    def from_names(*args: Any, **kwargs: Any) -> tuple:
        bound = signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        return tuple(_describe(bound.arguments.get(k)) for k in names)
    return from_names


def _describe(value: Any) -> Any:
    """A key value for one argument: a tensor-like by its shape and dtype."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and not isinstance(value, (int, float)):
        described = (tuple(shape), getattr(dtype, "name", str(dtype)))
        tile = getattr(value, "tile_shape", None)
        return described + (tuple(tile),) if tile is not None else described
    return value
