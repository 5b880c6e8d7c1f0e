"""The front end's expressions: one Python expression of a kernel or device function -> a
compile-time Python value (int, float, bool, tuple, dtype, ...) or IR values emitted through the
builder.

Owns :class:`ExpressionLowering`, the state of lowering one function (builder, source, local
environment, closure and module scopes, errors at a source line), and every ``expr_*`` form:
name resolution (locals, Const parameters, closure and module globals, the device language,
a few Python built-ins), constants and tuples, attributes and methods of IR values, subscripts,
operators (folded when both sides are compile-time values), calls of builtins, dtypes and Python
built-ins, and the inlining of device functions (``@ts.function``). Also the truth value of a
runtime scalar (``condition``), which ``if`` statements share, and the operator tables. The
lowering recurses along an expression's nesting; an expression nested deeper than Python's
recursion allows is a CompileError at its line (``expr``), never a RecursionError.

Statements are ``compiler.statements``: its :class:`FunctionLowering` completes this class, and
inlining runs a fresh one (``type(self)``) over the device function's body.

Imports: ``errors``, ``dtypes``, the compiler's builder, IR, registry, types and ops, and
``compiler.source``; never ``compiler.statements`` or ``compiler.frontend`` (they import this).
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import types as pytypes
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..dtypes import DType, bool_
from ..errors import CompileError, KernelNameError, UnsupportedSyntaxError
from . import ops as _ops  # noqa: F401 (importing declares every op in the registry)
from . import registry
from .builder import IRBuilder, describe
from .ir import Value
from .ops.elementwise import BINARY_OPERATORS
from .ops.memory import tensor_shape
from .source import DeviceFunction, SourceFunction
from .types import (AtomicTensorType, MappedPartitionType, PartitionIndexType,
                    PartitionViewType, TensorViewType, TileType)


_AST_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
               ast.Mod: "%", ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
               ast.LShift: "<<", ast.RShift: ">>", ast.MatMult: "@"}
_PY_BINOPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
              "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
              "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
              ">>": operator.rshift}
_AST_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
               ast.GtE: ">="}
_PY_CMPOPS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
              ">": operator.gt, ">=": operator.ge}


@dataclass(frozen=True)
class BoundMethod:
    receiver: Any
    entry: registry.Builtin
    name: str


class _Undefined:
    """Marks a name that went out of scope (defined only inside a loop or one branch)."""

    def __init__(self, why: str):
        self.why = why


def _receiver_kind(value: Value) -> Optional[str]:
    t = value.type
    if isinstance(t, TileType):
        return "tile"
    if isinstance(t, TensorViewType):
        return "mut_tensor" if t.mutable else "tensor"
    if isinstance(t, PartitionViewType):
        return "partition"
    if isinstance(t, MappedPartitionType):
        return "mapped"
    if isinstance(t, PartitionIndexType):
        return "index"
    if isinstance(t, AtomicTensorType):
        return "atomic"
    return None


class ExpressionLowering:
    """The state of lowering one function into the builder, and its expressions (statements:
    ``compiler.statements.FunctionLowering``, which derives from this class)."""

    def __init__(self, builder: IRBuilder, source: SourceFunction, env: dict[str, Any],
                 call_stack: tuple[Any, ...] = ()):
        self.b = builder
        self.src = source
        self.env = env
        self.call_stack = call_stack + (source.fn,)
        closure = inspect.getclosurevars(source.fn)
        self.outer = {**closure.globals, **closure.nonlocals}
        self.globals = source.fn.__globals__
        self.nesting = False  # inside an expression (see ``expr``)

    # -- errors ---------------------------------------------------------------------------
    def error(self, cls, node: ast.AST, message: str, hint: str = "") -> CompileError:
        return cls(message, self.src.location(node), kernel=self.b.kernel_name, hint=hint)

    # -- statements: compiler.statements.FunctionLowering ---------------------------------
    def run_body(self, stmts: list[ast.stmt], *, allow_return: bool) -> Any:
        """Lower a function body (``inline`` runs a device function's through it)."""
        raise NotImplementedError

    # -- truth values (of ``if``, ``not``, ``and``/``or``) --------------------------------
    def condition(self, cond: Value, node: ast.AST) -> Value:
        """A runtime truth value: a bool scalar (an integer scalar is compared with 0)."""
        t = cond.type
        if not (isinstance(t, TileType) and t.is_scalar):
            raise self.error(CompileError, node, f"the truth value of a {t} is ambiguous",
                             "branch on a scalar; reduce a tile first (tc.reduce_max(...)) or "
                             "use tc.where for elementwise choices")
        if t.dtype.is_bool:
            return cond
        return self.b.emit1("not_equal", (cond, self.b.constant(0, t.dtype)))

    # -- expressions ----------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Any:
        """Lower one expression. The lowering recurses along the expression's nesting, so an
        expression nested deeper than Python's recursion allows (a sum of hundreds of terms) is
        a CompileError at the outermost expression, not a RecursionError."""
        if self.nesting:
            return self.expr_node(node)
        self.nesting = True
        try:
            return self.expr_node(node)
        except RecursionError:
            raise self.error(CompileError, node, "this expression is nested too deeply for the "
                             "front end", TOO_DEEP_HINT) from None
        finally:
            self.nesting = False

    def expr_node(self, node: ast.expr) -> Any:
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is None:
            raise self.error(UnsupportedSyntaxError, node,
                             f"'{type(node).__name__}' expressions are not supported in kernels",
                             _EXPRESSION_HINTS.get(type(node).__name__, ""))
        with self.b.at(self.src.location(node)):
            return method(node)

    def expr_Constant(self, node: ast.Constant) -> Any:
        if node.value is Ellipsis or isinstance(node.value, bytes):
            raise self.error(UnsupportedSyntaxError, node, f"constant {node.value!r} is not "
                             "supported")
        return node.value

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.expr(e) for e in node.elts)

    expr_List = expr_Tuple

    def expr_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            value = self.env[name]
            if isinstance(value, _Undefined):
                raise self.error(KernelNameError, node, f"'{name}' is not defined here: "
                                 f"{value.why}", f"assign '{name}' before the loop or if")
            return value
        for scope in (self.outer, self.globals):
            if name in scope:
                return self.classify_global(name, scope[name], node)
        if name in _PY_BUILTINS:
            return _PY_BUILTINS[name]
        if hasattr(builtins, name):
            raise self.error(KernelNameError, node, f"the Python built-in '{name}' is not "
                             "available in kernels", _BUILTIN_HINTS.get(
                                 name, "kernels run on the device: compute with tilesafe.core "
                                 "functions; inspect results on the host after .sync()"))
        raise self.error(KernelNameError, node, f"name '{name}' is not defined",
                         "define it before this line, pass it as a parameter, or import it at "
                         "module level")

    def classify_global(self, name: str, value: Any, node: ast.AST) -> Any:
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, (bool, int, float, str, DType, tuple, type(None), DeviceFunction,
                              pytypes.ModuleType)) or _builtin_name(value):
            return value
        raise self.error(KernelNameError, node, f"'{name}' is a {type(value).__name__}, which "
                         "cannot be used inside a kernel",
                         "kernels can use numbers, tuples, dtypes, tilesafe.core functions and "
                         "@ts.function device functions from the enclosing scope")

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        attr = node.attr
        if isinstance(base, pytypes.ModuleType):
            if not hasattr(base, attr):
                raise self.error(KernelNameError, node, f"module '{base.__name__}' has no "
                                 f"attribute '{attr}'")
            return self.classify_global(f"{base.__name__}.{attr}", getattr(base, attr), node)
        if isinstance(base, Value):
            return self.value_attribute(base, attr, node)
        if isinstance(base, DType) and attr in ("itemsize", "bits", "name"):
            return getattr(base, attr)
        raise self.error(CompileError, node, f"{describe(base)} has no attribute '{attr}'")

    def value_attribute(self, value: Value, attr: str, node: ast.AST) -> Any:
        t = value.type
        kind = _receiver_kind(value)
        if attr == "dtype" and hasattr(t, "dtype"):
            return t.dtype
        if isinstance(t, TileType):
            if attr == "shape":
                return t.shape
            if attr == "ndim":
                return t.rank
            if attr == "T":
                return registry.get_builtin("transpose").build(self.b, value)
        elif isinstance(t, TensorViewType):
            if attr == "shape":
                return t.shape if t.mutable else tensor_shape(self.b, value)
            if attr == "ndim":
                return t.rank
        elif isinstance(t, AtomicTensorType):
            if attr == "shape":
                return tensor_shape(self.b, value)
            if attr == "ndim":
                return t.rank
        elif isinstance(t, PartitionViewType) and attr == "tile_shape":
            return t.tile_shape
        entry = registry.METHODS.get((kind, attr)) if kind else None
        if entry is None:
            raise self.error(CompileError, node, f"a {t} has no attribute or method '{attr}'",
                             _METHOD_HINTS.get((kind, attr), ""))
        return BoundMethod(value, entry, attr)

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        index = self.subscript_index(node.slice)
        if isinstance(base, tuple):
            if isinstance(index, Value) or not isinstance(index, (int, slice)):
                raise self.error(CompileError, node, "tuples can only be indexed by "
                                 "compile-time integers")
            try:
                return base[index]
            except IndexError:
                raise self.error(CompileError, node, f"index {index} out of range for a tuple "
                                 f"of {len(base)}") from None
        if isinstance(base, Value):
            entry = registry.METHODS.get((_receiver_kind(base), "__getitem__"))
            if entry is not None:
                return entry.build(self.b, base, index)
            raise self.error(UnsupportedSyntaxError, node, f"a {base.type} cannot be indexed",
                             "load tiles from tensors with x.partition(shape).load(index); "
                             "reshape/reduce tiles instead of indexing them")
        raise self.error(CompileError, node, f"{describe(base)} cannot be indexed")

    def subscript_index(self, node: ast.expr) -> Any:
        """The index of a subscript, where ``...`` (only there) stands for Ellipsis."""
        if isinstance(node, ast.Constant) and node.value is Ellipsis:
            return Ellipsis
        if isinstance(node, ast.Tuple):
            return tuple(self.subscript_index(e) for e in node.elts)
        return self.expr(node)

    def expr_Slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        if any(isinstance(p, Value) for p in parts):
            raise self.error(CompileError, node, "slice bounds must be compile-time integers",
                             "use integer literals or tc.Const[int] parameters")
        return slice(*parts)

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        symbol = _AST_BINOPS[type(node.op)]
        return self.binary(symbol, self.expr(node.left), self.expr(node.right), node)

    def binary(self, symbol: str, left: Any, right: Any, node: ast.AST) -> Any:
        if not isinstance(left, Value) and not isinstance(right, Value):
            if symbol == "@":
                raise self.error(CompileError, node, "'@' needs tiles")
            try:
                return _PY_BINOPS[symbol](left, right)
            except Exception as err:
                raise self.error(CompileError, node, f"cannot compute {left!r} {symbol} "
                                 f"{right!r} at compile time: {err}") from None
        name = "matmul" if symbol == "@" else BINARY_OPERATORS[symbol]
        return registry.get_builtin(name).build(self.b, left, right)

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        operand = self.expr(node.operand)
        if not isinstance(operand, Value):
            ops = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
                   ast.Not: operator.not_}
            try:
                return ops[type(node.op)](operand)
            except TypeError as err:
                raise self.error(CompileError, node, str(err)) from None
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.USub):
            return registry.get_builtin("negative").build(self.b, operand)
        if isinstance(node.op, ast.Invert):
            return registry.get_builtin("invert").build(self.b, operand)
        cond = self.condition(operand, node)
        return self.b.emit1("invert", (cond,))

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.expr(v) for v in node.values]
        if not any(isinstance(v, Value) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        conds = [self.condition(v, node) if isinstance(v, Value) else
                 self.b.constant(bool(v), bool_) for v in values]
        name = "bitwise_and" if isinstance(node.op, ast.And) else "bitwise_or"
        result = conds[0]
        for c in conds[1:]:
            result = self.b.emit1(name, (result, c))
        return result

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.expr(node.left)
        result = None
        for op_node, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            if isinstance(op_node, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                if isinstance(left, Value) or isinstance(right, Value):
                    raise self.error(CompileError, node, "'is' and 'in' only work on "
                                     "compile-time values")
                fn = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                      ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
                part = fn[type(op_node)](left, right)
            else:
                symbol = _AST_CMPOPS[type(op_node)]
                if isinstance(left, Value) or isinstance(right, Value):
                    part = registry.get_builtin(BINARY_OPERATORS[symbol]).build(self.b, left,
                                                                                right)
                else:
                    part = _PY_CMPOPS[symbol](left, right)
            if result is None:
                result = part
            elif isinstance(result, Value) or isinstance(part, Value):
                result = registry.get_builtin("bitwise_and").build(self.b, result, part)
            else:
                result = result and part
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.expr(node.test)
        if not isinstance(cond, Value):
            return self.expr(node.body if cond else node.orelse)
        return registry.get_builtin("where").build(self.b, cond, self.expr(node.body),
                                                   self.expr(node.orelse))

    def expr_Call(self, node: ast.Call) -> Any:
        func = self.expr(node.func)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                seq = self.expr(a.value)
                if not isinstance(seq, tuple):
                    raise self.error(CompileError, a, "only compile-time tuples can be unpacked")
                args.extend(seq)
            else:
                args.append(self.expr(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error(UnsupportedSyntaxError, node, "**kwargs is not supported")
            kwargs[kw.arg] = self.expr(kw.value)
        return self.call(func, args, kwargs, node)

    def call(self, func: Any, args: list, kwargs: dict, node: ast.AST) -> Any:
        if isinstance(func, BoundMethod):
            return self.call_builtin(func.entry, [func.receiver, *args], kwargs, node, func.name)
        name = _builtin_name(func)
        if name is not None:
            return self.call_builtin(registry.get_builtin(name), args, kwargs, node, name)
        if isinstance(func, DeviceFunction):
            return self.inline(func, args, kwargs, node)
        if isinstance(func, DType):
            if len(args) != 1 or kwargs:
                raise self.error(CompileError, node, f"{func.short}(x) takes one argument")
            return registry.get_builtin("astype").build(self.b, args[0], func)
        if func in _PY_BUILTINS.values():
            return self.call_python_builtin(func, args, kwargs, node)
        raise self.error(CompileError, node, f"{describe(func)} is not callable in a kernel",
                         "call tilesafe.core functions, methods of tiles and tensors, or "
                         "@ts.function device functions")

    def call_builtin(self, entry: registry.Builtin, args: list, kwargs: dict, node: ast.AST,
                     shown: str) -> Any:
        try:
            inspect.signature(entry.build).bind(self.b, *args, **kwargs)
        except TypeError as err:
            raise self.error(CompileError, node, f"{shown}(): {err}",
                             f"see help(tilesafe.core.{entry.name})" if entry.public else "")
        return entry.build(self.b, *args, **kwargs)

    def call_python_builtin(self, func: Any, args: list, kwargs: dict, node: ast.AST) -> Any:
        dynamic = any(isinstance(a, Value) for a in args)
        if func is builtins.range:
            raise self.error(CompileError, node, "range() is only allowed as a for-loop iterable")
        if func in (builtins.min, builtins.max) and dynamic:
            name = "minimum" if func is builtins.min else "maximum"
            result = args[0]
            for a in args[1:]:
                result = registry.get_builtin(name).build(self.b, result, a)
            return result
        if func is builtins.abs and dynamic:
            return registry.get_builtin("abs").build(self.b, args[0])
        if dynamic:
            raise self.error(CompileError, node, f"{func.__name__}() only works on compile-time "
                             "values here", "use .astype(dtype) to convert tiles")
        try:
            return func(*args, **kwargs)
        except Exception as err:
            raise self.error(CompileError, node, f"{func.__name__}(): {err}") from None

    def inline(self, func: DeviceFunction, args: list, kwargs: dict, node: ast.AST) -> Any:
        if func.fn in self.call_stack:
            raise self.error(UnsupportedSyntaxError, node, f"device function '{func.__name__}' "
                             "calls itself; recursion is not supported",
                             "device functions are inlined: write the recursion as a loop")
        sig = inspect.signature(func.fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as err:
            raise self.error(CompileError, node, f"{func.__name__}(): {err}") from None
        bound.apply_defaults()
        inner = type(self)(self.b, func.source, dict(bound.arguments), self.call_stack)
        return inner.run_body(func.source.tree.body, allow_return=True)


def _builtin_name(value: Any) -> Optional[str]:
    """The registry name of a tilesafe.core function stub, or None."""
    return getattr(value, "__tilesafe_builtin__", None) if callable(value) else None


TOO_DEEP_HINT = ("split the expression into smaller statements, e.g. sum a few terms per "
                 "assignment: 't = a + b + c' then 't = t + d + e'")

_PY_BUILTINS = {n: getattr(builtins, n) for n in
                ("range", "min", "max", "abs", "len", "int", "float", "bool", "tuple")}

_BUILTIN_HINTS = {
    "print": "print from the device with tc.print(fmt, *values), a C printf format with one "
             "conversion per value, e.g. tc.print(\"x = %f\", x)",
}

_EXPRESSION_HINTS = {
    "Lambda": "define a device function with @ts.function",
    "ListComp": "build tiles with tc.arange/tc.full and arithmetic instead of lists",
    "GeneratorExp": "build tiles with tc.arange/tc.full and arithmetic instead of generators",
    "JoinedStr": "kernels have no strings at run time",
    "Dict": "kernels have no dictionaries",
    "Set": "kernels have no sets",
    "Await": "await DeviceOps on the host, not in kernels",
    "NamedExpr": "assign with '=' in a separate statement",
}

_ATOMIC_HINT = ("atomic updates need a tc.AtomicTensor parameter, passed as ts.atomic(t); they "
                "return nothing")
_METHOD_HINTS = {
    ("tensor", "load"): "load a shared tensor with tc.load_tile_like(x, z) or "
                        "x.partition(tile_shape).load(index)",
    ("mut_tensor", "load_tile"): "use z.load()",
    **{(kind, f"atomic_{mode}"): _ATOMIC_HINT for kind in ("tensor", "mut_tensor")
       for mode in ("add", "max", "min", "and", "or", "xor")},
}
