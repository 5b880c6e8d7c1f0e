"""The op registry: every tile op is declared here exactly once, and every backend reads it.

Two kinds of entries:

* :class:`OpDef` — an IR operation: its type rule (``infer``), its exact numpy semantics
  (``evaluate``, run by the interpreter and used as the test oracle), and a slot per backend for
  its lowering (``lowerings["tileir"]`` is filled by the Tile IR backend).
* :class:`Builtin` — a function or method of the device language (``tc.exp``, ``tile.astype``,
  ``z.store``): its documentation, and a ``build`` function that coerces the Python-level
  arguments (weak scalars, broadcasting, compile-time constants) and emits IR ops.

An op module declares both with :func:`op` and :func:`builtin`. Nothing here knows about the AST.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .types import IRType

InferFn = Callable[[tuple[IRType, ...], dict[str, Any]], tuple[IRType, ...]]
EvalFn = Callable[..., Any]
BuildFn = Callable[..., Any]

# Receiver kinds for methods: a tile value, a shared tensor, a mutable (owned) tensor, a
# partition of a shared tensor, a mapped output partition, a partition index, an atomic tensor.
RECEIVER_KINDS = ("tile", "tensor", "mut_tensor", "partition", "mapped", "index", "atomic")


@dataclass(eq=False)
class OpDef:
    """One IR operation.

    Attributes:
        name: registry key, used by ``Operation.name``.
        doc: what the op computes (shown in the IR reference).
        infer: ``infer(operand_types, attrs) -> result_types``; raises a CompileError subclass
            (without location; the builder adds it) when the operands do not fit.
        evaluate: ``evaluate(ctx, attrs, *operand_values) -> result or tuple of results`` over
            numpy arrays in the operand dtypes' compute representation. The interpreter rounds
            each result to its declared dtype.
        num_regions: number of nested blocks (``for``: 1, ``if``: 2).
        effect: ``"pure"``, ``"read"`` (reads global memory), ``"write"`` (writes it),
            ``"io"`` (device output, ordered with the program's memory accesses: ``print``) or
            ``"trap"`` (may stop the program: ``assert``).
        lowerings: backend name -> lowering function, filled in by each backend.
    """

    name: str
    doc: str
    infer: InferFn
    evaluate: EvalFn
    num_regions: int = 0
    effect: str = "pure"
    lowerings: dict[str, Callable[..., Any]] = field(default_factory=dict)


@dataclass(eq=False)
class Builtin:
    """A function of the device language, exposed as ``tc.<name>`` and/or as methods.

    ``build(builder, *args, **kwargs)`` receives frontend values (IR ``Value`` s, Python
    constants, tuples, dtypes) and returns one, emitting IR through the builder.
    """

    name: str
    doc: str
    build: BuildFn
    methods: tuple[tuple[str, str], ...] = ()
    public: bool = True


OPS: dict[str, OpDef] = {}
BUILTINS: dict[str, Builtin] = {}
METHODS: dict[tuple[str, str], Builtin] = {}


def op(name: str, doc: str, infer: InferFn, evaluate: EvalFn, *, num_regions: int = 0,
       effect: str = "pure") -> OpDef:
    """Declare an IR op. Declaring the same name twice is a bug and raises."""
    if name in OPS:
        raise RuntimeError(f"op {name!r} declared twice")
    definition = OpDef(name, doc.strip(), infer, evaluate, num_regions, effect)
    OPS[name] = definition
    return definition


def builtin(name: str, doc: str, build: BuildFn, *, methods: tuple[tuple[str, str], ...] = (),
            public: bool = True) -> Builtin:
    """Declare a device-language function; ``methods`` lists ``(receiver_kind, method_name)``."""
    if name in BUILTINS:
        raise RuntimeError(f"builtin {name!r} declared twice")
    entry = Builtin(name, doc.strip(), build, methods, public)
    BUILTINS[name] = entry
    for receiver, method in methods:
        assert receiver in RECEIVER_KINDS, receiver
        if (receiver, method) in METHODS:
            raise RuntimeError(f"method {receiver}.{method} declared twice")
        METHODS[(receiver, method)] = entry
    return entry


def get_op(name: str) -> OpDef:
    return OPS[name]


def get_builtin(name: str) -> Builtin:
    return BUILTINS[name]
