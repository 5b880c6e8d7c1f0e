"""The compile pipeline: the one path from a kernel's source to something that runs.

The stages, in order:

=============  ===========================================  =================================
stage          from -> to                                   where
=============  ===========================================  =================================
front end      Python AST -> typed tile IR, for one         ``compiler.frontend``
               specialization (names, types, device-side
               safety rules)
verify         the IR's invariants                          ``compiler.verify``
backend        the backend's own stages, e.g. for           ``backends.<name>``
               ``tileir``: lower (IR -> bytecode),
               assemble (disk cache, else tileiras ->
               cubin), load (cubin -> loaded kernel);
               for ``interp``: build (IR -> executor)
=============  ===========================================  =================================

:func:`typed_ir` runs the first two (a kernel caches its result per specialization, since
every target starts from it); :func:`compile` runs the rest for a target. :func:`stage_names`
lists them. Nothing else turns a kernel's IR into a cubin.

Every run of either is metered (:func:`compile_totals`): the seconds spent in each stage, the
compilations run and how many of them were built afresh (``tileiras`` ran; the others came from
the disk cache), so a program can report what its first launches spent compiling (``tilesafe
generate`` does).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional

from . import backends
from .backends.base import Target
from .compiler.frontend import SourceFunction, build_ir
from .compiler.ir import KernelIR
from .compiler.signature import Param
from .compiler.specialize import Specialization
from .compiler.verify import verify


@dataclass(frozen=True)
class CompileTotals:
    """What compiling has cost this process so far (a snapshot; subtract two for a span).
    Seconds are wall time summed over threads."""

    #: seconds in each stage, by stage name (``front end`` counts the verifier too)
    seconds: dict = field(default_factory=dict)
    #: backend compilations run (one executable or artifact each)
    compiled: int = 0
    #: of those, built afresh (``tileiras`` ran, or the interpreter built its executor); the
    #: others came from the disk cache
    fresh: int = 0

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def __sub__(self, earlier: "CompileTotals") -> "CompileTotals":
        names = set(self.seconds) | set(earlier.seconds)
        return CompileTotals({n: self.seconds.get(n, 0.0) - earlier.seconds.get(n, 0.0)
                              for n in names},
                             self.compiled - earlier.compiled, self.fresh - earlier.fresh)


_TOTALS_LOCK = threading.Lock()
_seconds: dict = {}
_counts = {"compiled": 0, "fresh": 0}


def _add(stage: str, seconds: float) -> None:
    with _TOTALS_LOCK:
        _seconds[stage] = _seconds.get(stage, 0.0) + seconds


def _count(what: str) -> None:
    with _TOTALS_LOCK:
        _counts[what] += 1


def compile_totals() -> CompileTotals:
    """The compile meter's totals so far (see the module docstring)."""
    with _TOTALS_LOCK:
        return CompileTotals(dict(_seconds), _counts["compiled"], _counts["fresh"])


def typed_ir(name: str, source: SourceFunction, params: list[Param], spec: Specialization, *,
             unchecked_accesses: bool) -> KernelIR:
    """The front end and the verifier: the typed, verified IR of one specialization."""
    started = time.perf_counter()
    try:
        ir = build_ir(name, source, params, spec, unchecked_accesses=unchecked_accesses)
        verify(ir)
    finally:
        _add("front end", time.perf_counter() - started)
    return ir


def compile(ir: KernelIR, target: Target, *, hints: Optional[dict] = None,  # noqa: A001
            facts: Hashable = (), on_compiled: Callable[[], None] = lambda: None) -> Any:
    """Run the backend stages of ``target`` on the verified ``ir``: a loaded executable when
    the target has a device, else the compiled artifact (a cubin for ``tileir``)."""
    def built_afresh() -> None:
        _count("fresh")
        on_compiled()
    result: Any = ir
    for name, stage in backends.by_name(target.backend).stages(
            target, hints=hints or {}, facts=facts, on_compiled=built_afresh):
        started = time.perf_counter()
        try:
            result = stage(result)
        finally:
            _add(name, time.perf_counter() - started)
    _count("compiled")
    return result


def stage_names(target: Target) -> list[str]:
    """The names of every stage for ``target``, in order."""
    backend = backends.by_name(target.backend)
    return ["front end", "verify"] + [name for name, _ in backend.stages(
        target, hints={}, facts=(), on_compiled=lambda: None)]
