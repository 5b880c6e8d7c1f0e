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
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Optional

from . import backends
from .backends.base import Target
from .compiler.frontend import SourceFunction, build_ir
from .compiler.ir import KernelIR
from .compiler.signature import Param
from .compiler.specialize import Specialization
from .compiler.verify import verify


def typed_ir(name: str, source: SourceFunction, params: list[Param], spec: Specialization, *,
             unchecked_accesses: bool) -> KernelIR:
    """The front end and the verifier: the typed, verified IR of one specialization."""
    ir = build_ir(name, source, params, spec, unchecked_accesses=unchecked_accesses)
    verify(ir)
    return ir


def compile(ir: KernelIR, target: Target, *, hints: Optional[dict] = None,  # noqa: A001
            facts: Hashable = (), on_compiled: Callable[[], None] = lambda: None) -> Any:
    """Run the backend stages of ``target`` on the verified ``ir``: a loaded executable when
    the target has a device, else the compiled artifact (a cubin for ``tileir``)."""
    result: Any = ir
    for _, stage in backends.by_name(target.backend).stages(
            target, hints=hints or {}, facts=facts, on_compiled=on_compiled):
        result = stage(result)
    return result


def stage_names(target: Target) -> list[str]:
    """The names of every stage for ``target``, in order."""
    backend = backends.by_name(target.backend)
    return ["front end", "verify"] + [name for name, _ in backend.stages(
        target, hints={}, facts=(), on_compiled=lambda: None)]
