"""The front end: a kernel's Python AST -> typed SSA IR, for one specialization.

It resolves names (locals, Const parameters, closure and module globals, the device language),
folds compile-time Python values (ints, floats, bools, tuples, dtypes) and emits IR for
everything else through the builder, which applies the op registry's type rules. Structured
control flow: ``for ... in range(...)`` becomes a ``for`` op whose loop-carried values are the
variables the body reassigns, ``while`` a ``loop`` op, ``break``/``continue`` the ops of those
names; ``if`` on a runtime bool scalar becomes an ``if`` op, on a compile-time value it is
resolved statically. Device functions (``@ts.function``) are inlined.

Errors are CompileErrors with the file:line of the offending source and a fix.

This module owns the entry point, :func:`build_ir` (a kernel's parameters -> the IR's, then its
body: a runtime scalar declared with the Python type ``int`` or ``float`` becomes a *weak* value,
``compiler.builder``; an output whose static shape is ``()`` is a SignatureError), and is where
the rest of the package imports the front end from (``SourceFunction``,
``DeviceFunction``, ``build_ir``). The work is in three modules below it, each importing only
those before it in this list:

* ``compiler.source`` — :class:`SourceFunction` (parsed source, error locations) and
  :class:`DeviceFunction` (``@ts.function``);
* ``compiler.expressions`` — :class:`ExpressionLowering`: name resolution, compile-time
  folding, operators, attributes, calls, inlining;
* ``compiler.statements`` — :class:`FunctionLowering`: assignments, ``assert``, ``if``, ``for``,
  ``while``, ``break``/``continue`` and loop-carried values.

Nothing in ``compiler`` imports this module (``pipeline`` and ``kernel`` do).
"""

from __future__ import annotations

from typing import Any

from ..errors import SignatureError
from .builder import IRBuilder
from .ir import Block, KernelIR, KernelParam, Value
from .signature import (AtomicSpec, ConstSpec, MappedSpec, Param, PointerSpec, ScalarSpec,
                        TensorSpec)
from .source import DeviceFunction, SourceFunction
from .specialize import Specialization
from .statements import FunctionLowering
from .types import MappedPartitionType, TensorViewType

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
    weak = {p.name for p in params if isinstance(p.spec, ScalarSpec) and p.spec.weak}
    for p in params:
        if isinstance(p.spec, ConstSpec):
            env[p.name] = spec.const_env()[p.name]
            continue
        t = spec.type_of(p.name)
        kind = ("pointer" if isinstance(p.spec, PointerSpec) else
                "scalar" if isinstance(p.spec, ScalarSpec) else
                "mapped" if isinstance(p.spec, MappedSpec) else
                "atomic" if isinstance(p.spec, AtomicSpec) else
                "mut_tensor" if isinstance(p.spec, TensorSpec) and p.spec.mutable else "tensor")
        _check_output_rank(name, p, t)
        value = Value(t, p.name, weak=p.name in weak)
        env[p.name] = value
        ir_params.append(KernelParam(p.name, kind, value))
    body = Block()
    lowering = FunctionLowering(builder, source, env)
    with builder.inside(body):
        lowering.run_body(source.tree.body, allow_return=False)
    return KernelIR(name, ir_params, body, source.location(source.tree),
                    unchecked_accesses=unchecked_accesses, grid=spec.grid)


def _check_output_rank(kernel: str, p: Param, t: Any) -> None:
    """An output's static shape has at least one dimension: a rank-0 sub-tensor (a shape name
    bound to ``()`` by an example) is a SignatureError at the ``def`` line."""
    shape = t.tile_shape if isinstance(t, MappedPartitionType) else \
        t.shape if isinstance(t, TensorViewType) and t.mutable else None
    if shape == ():
        raise SignatureError(f"parameter '{p.name}': an output's static shape cannot be () "
                             "(rank 0)", p.location, kernel=kernel,
                             hint="declare the output with shape (1,) for a single element "
                             "(a scalar stores into it as it is)")
