"""The front end: a kernel's Python AST -> typed SSA IR, for one specialization.

It resolves names (locals, Const parameters, closure and module globals, the device language),
folds compile-time Python values (ints, floats, bools, tuples, dtypes) and emits IR for
everything else through the builder, which applies the op registry's type rules. Structured
control flow: ``for ... in range(...)`` becomes a ``for`` op whose loop-carried values are the
variables the body reassigns; ``if`` on a runtime bool scalar becomes an ``if`` op, on a
compile-time value it is resolved statically. Device functions (``@ts.function``) are inlined.

Errors are CompileErrors with the file:line of the offending source and a fix.

This module owns the entry point, :func:`build_ir` (a kernel's parameters -> the IR's, then its
body), and is where the rest of the package imports the front end from (``SourceFunction``,
``DeviceFunction``, ``build_ir``). The work is in three modules below it, each importing only
those before it in this list:

* ``compiler.source`` — :class:`SourceFunction` (parsed source, error locations) and
  :class:`DeviceFunction` (``@ts.function``);
* ``compiler.expressions`` — :class:`ExpressionLowering`: name resolution, compile-time
  folding, operators, attributes, calls, inlining;
* ``compiler.statements`` — :class:`FunctionLowering`: assignments, ``assert``, ``if``, ``for``
  and loop-carried values.

Nothing in ``compiler`` imports this module (``pipeline`` and ``kernel`` do).
"""

from __future__ import annotations

from typing import Any

from .builder import IRBuilder
from .ir import Block, KernelIR, KernelParam, Value
from .signature import ConstSpec, MappedSpec, Param, PointerSpec, ScalarSpec, TensorSpec
from .source import DeviceFunction, SourceFunction
from .specialize import Specialization
from .statements import FunctionLowering

__all__ = ["DeviceFunction", "FunctionLowering", "SourceFunction", "build_ir"]


def build_ir(name: str, source: SourceFunction, params: list[Param],
             spec: Specialization, *, unchecked_accesses: bool) -> KernelIR:
    """Build the typed IR of ``source`` specialized by ``spec`` (not yet verified: the
    compile pipeline runs ``compiler.verify`` next)."""
    builder = IRBuilder(name)
    env: dict[str, Any] = {}
    ir_params: list[KernelParam] = []
    for bound_name, value in spec.bound_names:
        env[bound_name] = value
    for p in params:
        if isinstance(p.spec, ConstSpec):
            env[p.name] = spec.const_env()[p.name]
            continue
        t = spec.type_of(p.name)
        kind = ("pointer" if isinstance(p.spec, PointerSpec) else
                "scalar" if isinstance(p.spec, ScalarSpec) else
                "mapped" if isinstance(p.spec, MappedSpec) else
                "mut_tensor" if isinstance(p.spec, TensorSpec) and p.spec.mutable else "tensor")
        value = Value(t, p.name)
        env[p.name] = value
        ir_params.append(KernelParam(p.name, kind, value))
    body = Block()
    lowering = FunctionLowering(builder, source, env)
    with builder.inside(body):
        lowering.run_body(source.tree.body, allow_return=False)
    return KernelIR(name, ir_params, body, source.location(source.tree),
                    unchecked_accesses=unchecked_accesses)
