"""The front end's statements: a function body's Python statements -> IR, with the structured
control flow of the tile language.

Owns :class:`FunctionLowering`, the complete lowering of one function (kernel or inlined device
function): it adds the ``stmt_*`` forms to :class:`ExpressionLowering` (``compiler.expressions``).
Assignments bind names in the local environment (tuples unpack; indexed assignment is an error);
``assert`` checks compile-time conditions; ``if`` on a compile-time value is resolved
statically, on a runtime scalar it becomes an ``if`` op whose results are the variables the
branches bind differently; ``for ... in range(...)`` (and ``z.iter_indices()``) becomes a
``for`` op whose loop-carried values are the variables the body reassigns, while a loop over a
compile-time tuple is unrolled. Names bound in only one branch, or only inside a loop, go out of
scope (``_Undefined``). A ``return`` may only end a device function's body.

Imports: ``errors``, the compiler's builder, IR, registry and ops, and ``compiler.expressions``;
never ``compiler.frontend`` (it imports this module).
"""

from __future__ import annotations

import ast
from typing import Any

from ..errors import CompileError, UnsupportedSyntaxError
from . import registry
from .builder import describe, is_py_scalar
from .expressions import _AST_BINOPS, ExpressionLowering, _receiver_kind, _Undefined
from .ir import Block, Value
from .ops.mapped import IndexStream
from .types import TileType


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


class FunctionLowering(ExpressionLowering):
    """Lowers the body of one function (kernel or inlined device function) into the builder."""

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


_MISSING = object()


def _same_const(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


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
