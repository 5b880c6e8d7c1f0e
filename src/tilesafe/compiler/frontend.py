"""The front end: a kernel's Python AST -> typed SSA IR, for one specialization.

It resolves names (locals, Const parameters, closure and module globals, the device language),
folds compile-time Python values (ints, floats, bools, tuples, dtypes) and emits IR for
everything else through the builder, which applies the op registry's type rules. Structured
control flow: ``for ... in range(...)`` becomes a ``for`` op whose loop-carried values are the
variables the body reassigns; ``if`` on a runtime bool scalar becomes an ``if`` op, on a
compile-time value it is resolved statically. Device functions (``@ts.function``) are inlined.

Errors are CompileErrors with the file:line of the offending source and a fix.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import operator
import textwrap
import types as pytypes
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..dtypes import DType, bool_
from ..errors import CompileError, KernelNameError, Location, UnsupportedSyntaxError
from . import registry
from .builder import IRBuilder, describe, is_py_scalar
from .ir import Block, KernelIR, KernelParam, Value
from .ops.elementwise import BINARY_OPERATORS
from .ops.memory import tensor_shape
from .signature import ConstSpec, MappedSpec, Param, PointerSpec, ScalarSpec, TensorSpec
from .specialize import Specialization
from .ops.mapped import IndexStream
from .types import (MappedPartitionType, PartitionIndexType, PartitionViewType, TensorViewType,
                    TileType)

registry.load_all()

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


@dataclass
class SourceFunction:
    """A Python function's parsed source, with line numbers of the file it lives in."""

    fn: Any
    tree: ast.FunctionDef
    file: str
    first_line: int

    @classmethod
    def parse(cls, fn: Any) -> "SourceFunction":
        try:
            lines, first_line = inspect.getsourcelines(fn)
            file = inspect.getsourcefile(fn) or inspect.getfile(fn)
        except (OSError, TypeError):
            raise CompileError(f"cannot read the source of '{fn.__name__}'",
                               hint="define kernels and device functions in a .py file (not in "
                               "an interactive prompt or exec)") from None
        source = "".join(lines)
        indent = len(lines[0]) - len(lines[0].lstrip())
        tree = ast.parse(textwrap.dedent(source))
        ast.increment_lineno(tree, first_line - 1)
        if indent:
            for node in ast.walk(tree):
                if hasattr(node, "col_offset"):
                    node.col_offset += indent
        func = tree.body[0]
        if not isinstance(func, ast.FunctionDef):
            raise CompileError(f"'{fn.__name__}' is not a plain function definition",
                               Location(file, first_line))
        return cls(fn, func, file, first_line)

    def location(self, node: ast.AST) -> Location:
        return Location(self.file, getattr(node, "lineno", self.first_line),
                        getattr(node, "col_offset", 0))


class DeviceFunction:
    """A device function (``@ts.function``): inlined into the kernels that call it."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._source: Optional[SourceFunction] = None

    @property
    def source(self) -> SourceFunction:
        if self._source is None:
            self._source = SourceFunction.parse(self.fn)
        return self._source

    def __call__(self, *args, **kwargs):
        raise CompileError(f"device function '{self.__name__}' can only be called from a "
                           "@ts.kernel or another @ts.function",
                           hint="call it inside a kernel body; on the host, call the "
                           "undecorated function or write numpy")

    def __repr__(self) -> str:
        return f"<tilesafe device function {self.__qualname__}>"


@dataclass(frozen=True)
class BoundMethod:
    receiver: Any
    entry: registry.Builtin
    name: str


class _Undefined:
    """Marks a name that went out of scope (defined only inside a loop or one branch)."""

    def __init__(self, why: str):
        self.why = why


class _Return(Exception):
    def __init__(self, value: Any):
        self.value = value


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
    return None


def _assigned_names(stmts: list[ast.stmt]) -> list[str]:
    """Names a statement list (re)binds, nested blocks included, in first-assignment order."""
    seen: dict[str, None] = {}

    def add_target(t: ast.AST) -> None:
        if isinstance(t, ast.Name):
            seen.setdefault(t.id, None)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                add_target(e)

    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    add_target(t)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                add_target(node.target)
            elif isinstance(node, ast.For):
                add_target(node.target)
    return list(seen)


class FunctionLowering:
    """Lowers the body of one function (kernel or inlined device function) into the builder."""

    def __init__(self, builder: IRBuilder, source: SourceFunction, env: dict[str, Any],
                 call_stack: tuple[Any, ...] = ()):
        self.b = builder
        self.src = source
        self.env = env
        self.call_stack = call_stack + (source.fn,)
        closure = inspect.getclosurevars(source.fn)
        self.outer = {**closure.globals, **closure.nonlocals}
        self.globals = source.fn.__globals__

    # -- errors ---------------------------------------------------------------------------
    def error(self, cls, node: ast.AST, message: str, hint: str = "") -> CompileError:
        return cls(message, self.src.location(node), kernel=self.b.kernel_name, hint=hint)

    # -- statements -----------------------------------------------------------------------
    def run_body(self, stmts: list[ast.stmt], *, allow_return: bool) -> Any:
        """Lower a function body; returns the value of a final ``return`` (or None)."""
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.Return):
                if i != len(stmts) - 1:
                    raise self.error(UnsupportedSyntaxError, stmt,
                                     "code after 'return' is not allowed")
                if stmt.value is None:
                    return None
                if not allow_return:
                    raise self.error(UnsupportedSyntaxError, stmt,
                                     "a kernel cannot return a value",
                                     "store results into a tc.MutTensor parameter instead")
                with self.b.at(self.src.location(stmt)):
                    return self.expr(stmt.value)
            self.stmt(stmt)
        return None

    def block(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, ast.Return):
                raise self.error(UnsupportedSyntaxError, stmt,
                                 "'return' inside a loop or branch is not supported",
                                 "compute the value in both branches and return it once at "
                                 "the end of the function")
            self.stmt(stmt)

    def stmt(self, node: ast.stmt) -> None:
        with self.b.at(self.src.location(node)):
            method = getattr(self, f"stmt_{type(node).__name__}", None)
            if method is None:
                raise self.error(UnsupportedSyntaxError, node,
                                 f"'{type(node).__name__}' statements are not supported in "
                                 "kernels", _STATEMENT_HINTS.get(type(node).__name__, ""))
            method(node)

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.expr(node.value)

    def stmt_Pass(self, node: ast.Pass) -> None:
        return

    def stmt_Assign(self, node: ast.Assign) -> None:
        value = self.expr(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            raise self.error(UnsupportedSyntaxError, node, "a declaration needs a value")
        self.assign(node.target, self.expr(node.value), node)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            self.assign(node.target, None, node)  # raises the subscript/attribute error
        current = self.expr(ast.Name(node.target.id, ast.Load(), lineno=node.lineno,
                                     col_offset=node.col_offset))
        symbol = _AST_BINOPS[type(node.op)]
        self.assign(node.target, self.binary(symbol, current, self.expr(node.value), node), node)

    def assign(self, target: ast.AST, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                raise self.error(CompileError, node, f"cannot unpack {describe(value)} into "
                                 f"{len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            base = self.expr(target.value)
            if isinstance(base, Value):
                entry = registry.METHODS.get((_receiver_kind(base), "__setitem__"))
                if entry is not None:
                    entry.build(self.b, base)
            raise self.error(UnsupportedSyntaxError, node, "indexed assignment is not supported",
                             "tiles are immutable values: build a new tile (tc.where, "
                             "arithmetic) and store it whole")
        else:
            raise self.error(UnsupportedSyntaxError, node,
                             f"cannot assign to {type(target).__name__}",
                             "assign to plain names only")

    def stmt_Assert(self, node: ast.Assert) -> None:
        cond = self.expr(node.test)
        if isinstance(cond, Value):
            raise self.error(UnsupportedSyntaxError, node,
                             "assert on a runtime value is not supported",
                             "assert only compile-time conditions (shapes, constants)")
        if not cond:
            msg = self.expr(node.msg) if node.msg is not None else "assertion failed"
            raise self.error(CompileError, node, f"compile-time assertion failed: {msg}")

    def stmt_If(self, node: ast.If) -> None:
        cond = self.expr(node.test)
        if not isinstance(cond, Value):
            self.block(node.body if cond else node.orelse)
            return
        cond = self.condition(cond, node.test)
        before = dict(self.env)
        then_block, else_block = Block(), Block()
        with self.b.inside(then_block):
            self.block(node.body)
        then_env, self.env = self.env, dict(before)
        with self.b.inside(else_block):
            self.block(node.orelse)
        else_env = self.env
        merged_names, then_vals, else_vals = [], [], []
        self.env = dict(before)
        for name in dict.fromkeys(list(then_env) + list(else_env)):
            tv, ev = then_env.get(name, _MISSING), else_env.get(name, _MISSING)
            if tv is ev:
                if tv is not _MISSING:
                    self.env[name] = tv
                continue
            if tv is _MISSING or ev is _MISSING or isinstance(tv, _Undefined) \
                    or isinstance(ev, _Undefined):
                self.env[name] = _Undefined(f"'{name}' is assigned in only one branch of the "
                                            f"if at line {node.lineno}")
                continue
            if not isinstance(tv, Value) and not isinstance(ev, Value) and _same_const(tv, ev):
                self.env[name] = tv
                continue
            tv, ev = self.merge_pair(name, tv, ev, then_block, else_block, node)
            merged_names.append(name)
            then_vals.append(tv)
            else_vals.append(ev)
        with self.b.inside(then_block):
            self.b.emit("yield", then_vals)
        with self.b.inside(else_block):
            self.b.emit("yield", else_vals)
        results = self.b.emit("if", (cond,), {"result_types": tuple(v.type for v in then_vals)},
                              regions=(then_block, else_block))
        for name, value in zip(merged_names, results):
            self.env[name] = value

    def merge_pair(self, name, tv, ev, then_block, else_block, node):
        """Make the two branch values of ``name`` tiles of one type."""
        def materialize(v, other, block):
            if isinstance(v, Value):
                return v
            if not is_py_scalar(v):
                raise self.error(CompileError, node, f"'{name}' holds a {describe(v)} in one "
                                 "branch; only tiles and scalars can differ between branches")
            dtype = other.type.dtype if isinstance(other, Value) else None
            with self.b.inside(block):
                return self.b.tile(v) if dtype is None else self.b.constant(v, dtype)
        tv = materialize(tv, ev, then_block)
        ev = materialize(ev, tv, else_block)
        if tv.type != ev.type:
            raise self.error(CompileError, node, f"'{name}' is a {tv.type} in the if branch but "
                             f"a {ev.type} in the else branch",
                             "give the variable the same shape and dtype in both branches")
        return tv, ev

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

    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(UnsupportedSyntaxError, node, "for ... else is not supported",
                             "loops always run to the end here; put the else code after the "
                             "loop")
        iterable = node.iter
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) \
                and self.lookup(iterable.func.id, iterable.func) is range:
            self.range_loop(node, [self.expr(a) for a in iterable.args])
            return
        seq = self.expr(iterable)
        if isinstance(seq, IndexStream):  # for idx in z.iter_indices(): see ops/mapped.py
            self.emit_loop(node, *seq.loop(self.b))
            return
        if isinstance(seq, tuple):  # compile-time sequence: unrolled
            for item in seq:
                self.assign(node.target, item, node)
                self.block(node.body)
            return
        raise self.error(UnsupportedSyntaxError, node, "only 'for i in range(...)' loops (or "
                         "loops over compile-time tuples) are supported")

    def range_loop(self, node: ast.For, bounds: list[Any]) -> None:
        if not 1 <= len(bounds) <= 3:
            raise self.error(CompileError, node, "range() takes 1 to 3 arguments")
        lb, ub, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        if isinstance(step, Value) or not isinstance(step, int) or step <= 0:
            raise self.error(CompileError, node, f"the range step must be a positive "
                             f"compile-time integer, got {describe(step)}",
                             "loops count upward; compute descending indices from the loop "
                             "variable if needed")
        for v in (lb, ub):
            if not (isinstance(v, Value) or (isinstance(v, int) and not isinstance(v, bool))):
                raise self.error(CompileError, node, f"range bounds must be integers, got "
                                 f"{describe(v)}")
        lbv, ubv, stepv = self.b.coerce([lb, ub, step], "range bounds")
        self.emit_loop(node, lbv, ubv, stepv, lambda iv: iv)

    def emit_loop(self, node: ast.For, lbv: Value, ubv: Value, stepv: Value,
                  bind: Any) -> None:
        """A ``for`` op over ``[lb, ub)`` by ``step``; ``bind(iv)`` is the loop variable's
        value. Variables the body reassigns are carried; names first bound inside the body
        (and the loop variable) are not visible after it."""
        if not isinstance(node.target, ast.Name):
            raise self.error(UnsupportedSyntaxError, node, "the loop variable must be a name")
        name = node.target.id
        carried = [n for n in _assigned_names(node.body)
                   if n != name and n in self.env and not isinstance(self.env[n], _Undefined)]
        inits = []
        for n in carried:
            v = self.env[n]
            if is_py_scalar(v):
                v = self.b.tile(v)
            if not (isinstance(v, Value) and isinstance(v.type, TileType)):
                raise self.error(CompileError, node, f"'{n}' is reassigned in the loop but holds "
                                 f"a {describe(v)}", "only tiles and scalars can be loop-carried")
            inits.append(v)
        body = Block(args=[Value(lbv.type, name)] + [Value(v.type, n) for n, v in
                                                      zip(carried, inits)])
        before = dict(self.env)
        for n, arg in zip(carried, body.args[1:]):
            self.env[n] = arg
        with self.b.inside(body):
            self.env[name] = bind(body.args[0])
            self.block(node.body)
            nexts = []
            for n, init in zip(carried, inits):
                v = self.env.get(n)
                if is_py_scalar(v):
                    v = self.b.constant(v, init.type.dtype)
                if not isinstance(v, Value) or v.type != init.type:
                    got = v.type if isinstance(v, Value) else describe(v)
                    raise self.error(CompileError, node, f"loop-carried variable '{n}' changes "
                                     f"from {init.type} to {got} in the loop body",
                                     f"initialize '{n}' before the loop with the type it has "
                                     f"after each iteration (e.g. tc.zeros(shape, dtype))")
                nexts.append(v)
            self.b.emit("yield", nexts)
        body_env = self.env
        self.env = before
        results = self.b.emit("for", (lbv, ubv, stepv, *inits), regions=(body,))
        for n, r in zip(carried, results):
            self.env[n] = r
        for n in body_env:
            if n not in before or n == name:
                self.env[n] = _Undefined(f"'{n}' is only defined inside the loop at line "
                                         f"{node.lineno}")

    # -- expressions ----------------------------------------------------------------------
    def expr(self, node: ast.expr) -> Any:
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
                             "available in kernels",
                             "kernels run on the device: compute with tilesafe.core functions; "
                             "inspect results on the host after .sync()")
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
        elif isinstance(t, PartitionViewType) and attr == "tile_shape":
            return t.tile_shape
        entry = registry.METHODS.get((kind, attr)) if kind else None
        if entry is None:
            raise self.error(CompileError, node, f"a {t} has no attribute or method '{attr}'",
                             _METHOD_HINTS.get((kind, attr), ""))
        return BoundMethod(value, entry, attr)

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        index = self.expr(node.slice)
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

    def expr_Slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.expr(p) for p in (node.lower, node.upper, node.step)]
        if any(isinstance(p, Value) for p in parts):
            raise self.error(CompileError, node, "slice bounds must be compile-time integers")
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
        inner = FunctionLowering(self.b, func.source, dict(bound.arguments), self.call_stack)
        return inner.run_body(func.source.tree.body, allow_return=True)


_MISSING = object()


def _same_const(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _builtin_name(value: Any) -> Optional[str]:
    """The registry name of a tilesafe.core function stub, or None."""
    return getattr(value, "__tilesafe_builtin__", None) if callable(value) else None


_PY_BUILTINS = {n: getattr(builtins, n) for n in
                ("range", "min", "max", "abs", "len", "int", "float", "bool", "tuple")}

_STATEMENT_HINTS = {
    "While": "use 'for i in range(n)' with a compile-time or scalar bound",
    "Break": "loops run their full range; use tc.where to mask iterations",
    "Continue": "loops run their full range; use tc.where to mask iterations",
    "With": "kernels have no context managers",
    "Try": "kernels cannot raise or catch exceptions",
    "Raise": "kernels cannot raise exceptions",
    "FunctionDef": "define device functions at module level with @ts.function",
    "Import": "import at module level; kernels see module globals",
    "ImportFrom": "import at module level; kernels see module globals",
    "Global": "kernels cannot rebind globals",
    "Nonlocal": "kernels cannot rebind enclosing variables",
    "Delete": "tiles are values; just stop using them",
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

_METHOD_HINTS = {
    ("tensor", "load"): "load a shared tensor with tc.load_tile_like(x, z) or "
                        "x.partition(tile_shape).load(index)",
    ("mut_tensor", "load_tile"): "use z.load()",
}


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

