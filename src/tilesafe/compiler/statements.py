"""The front end's statements: a function body's Python statements -> IR, with the structured
control flow of the tile language.

Owns :class:`FunctionLowering`, the complete lowering of one function (kernel or inlined device
function): it adds the ``stmt_*`` forms to :class:`ExpressionLowering` (``compiler.expressions``).
Assignments bind names in the local environment (tuples unpack; indexed assignment is an error);
``assert`` checks compile-time conditions; ``if`` on a compile-time value is resolved
statically, on a runtime scalar it becomes an ``if`` op whose results are the variables the
branches bind differently. Loops:

* ``for ... in range(lb, ub, step)`` (and ``z.iter_indices()``) becomes a ``for`` op whose
  loop-carried values are the variables the body reassigns. The step is a positive
  compile-time int or a runtime integer scalar (a runtime step <= 0: ``compiler.ops.control``);
* ``while cond:`` becomes a ``loop`` op whose body first tests ``cond`` (on the carried values)
  and breaks when it is false; ``while True:`` (any compile-time true condition) needs a
  ``break`` in its body, ``while False:`` compiles to nothing;
* ``break``/``continue`` end the innermost loop's body, also from inside runtime ``if``s: they
  become ``break``/``continue`` ops passing the carried variables' current values. What follows
  them in their block is dead and is not compiled; an ``if`` branch that leaves the loop does not
  take part in the merge (the names the other branch binds are defined after the ``if``);
* a loop over a compile-time tuple is unrolled; there, ``break``/``continue`` may only stand
  under compile-time conditions (they end the unrolling or the item).

Names bound in only one branch, or only inside a loop, go out of scope (``_Undefined``). A
``return`` may only end a device function's body.

Imports: ``errors``, the compiler's builder, IR, registry and ops, and ``compiler.expressions``;
never ``compiler.frontend`` (it imports this module).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import CompileError, DTypeError, UnsupportedSyntaxError
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


def _leaves(stmts: list[ast.stmt], kind: type) -> bool:
    """Whether ``stmts`` hold a ``kind`` (ast.Break, ast.Continue) of their own loop, i.e. one
    not inside a nested loop."""
    for stmt in stmts:
        if isinstance(stmt, kind):
            return True
        if isinstance(stmt, ast.If) and (_leaves(stmt.body, kind) or _leaves(stmt.orelse, kind)):
            return True
    return False


@dataclass
class _LoopFrame:
    """A loop being lowered. ``kind``: "for" and "while" (IR loops; ``names`` and ``types`` are
    the carried variables, ``entry`` the body's block arguments for them) or "unrolled" (a
    compile-time tuple; ``depth`` is the runtime-if nesting where it started, ``static_exit``
    the break/continue met at compile time)."""

    kind: str
    names: list[str] = field(default_factory=list)
    types: list[Any] = field(default_factory=list)
    entry: list[Value] = field(default_factory=list)
    depth: int = 0
    static_exit: Optional[str] = None


class FunctionLowering(ExpressionLowering):
    """Lowers the body of one function (kernel or inlined device function) into the builder."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.frames: list[_LoopFrame] = []  # the enclosing loops, innermost last
        self.exited = False  # the current block has reached a break/continue
        self.if_depth = 0  # runtime-if regions being lowered

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
        """Lower a nested statement list; after a break/continue the rest is dead."""
        for stmt in stmts:
            if self.exited:
                return
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
                             "Python's assert checks compile-time conditions (shapes, "
                             "constants); check a runtime value on the device with "
                             "tc.assert_(cond, message)")
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
        branches = []  # (block, env after it, whether it left the loop)
        for stmts in (node.body, node.orelse):
            self.env, self.exited, block = dict(before), False, Block()
            self.if_depth += 1
            try:
                with self.b.inside(block):
                    self.block(stmts)
            finally:
                self.if_depth -= 1
            branches.append((block, self.env, self.exited))
        self.env, self.exited = dict(before), False
        (then_block, then_env, then_left), (else_block, else_env, else_left) = branches
        if then_left and else_left:
            self.b.emit("if", (cond,), {"result_types": ()}, regions=(then_block, else_block))
            self.b.emit("continue", self.frames[-1].entry)  # unreachable: ends the block
            self.exited = True
            return
        if then_left or else_left:
            block, env = (else_block, else_env) if then_left else (then_block, then_env)
            names, values = self.one_branch(env, before)
            with self.b.inside(block):
                self.b.emit("yield", values)
        else:
            names, values, else_values = self.merge_branches(then_env, else_env, then_block,
                                                             else_block, node)
            with self.b.inside(then_block):
                self.b.emit("yield", values)
            with self.b.inside(else_block):
                self.b.emit("yield", else_values)
        results = self.b.emit("if", (cond,), {"result_types": tuple(v.type for v in values)},
                              regions=(then_block, else_block))
        for name, value in zip(names, results):
            self.env[name] = value

    def one_branch(self, env: dict, before: dict) -> tuple[list[str], list[Value]]:
        """The names an if binds when only one branch falls through (the other left the loop):
        its values; those the branch computed are yielded (returned), the rest bound here."""
        names, values = [], []
        for name, value in env.items():
            if before.get(name, _MISSING) is value:
                continue
            if isinstance(value, Value):
                names.append(name)
                values.append(value)
            else:
                self.env[name] = value
        return names, values

    def merge_branches(self, then_env, else_env, then_block, else_block, node):
        """The names both branches of an if bind differently: (names, then values, else
        values); names bound in one branch only go out of scope."""
        names, then_values, else_values = [], [], []
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
            names.append(name)
            then_values.append(tv)
            else_values.append(ev)
        return names, then_values, else_values

    def merge_pair(self, name, tv, ev, then_block, else_block, node):
        """Make the two branch values of ``name`` tiles of one type (numbers and weak scalars
        take the other branch's dtype, as in arithmetic)."""
        def materialize(v, other, block):
            if isinstance(v, Value):
                if not (v.weak and isinstance(other, Value) and not other.weak):
                    return v
                with self.b.inside(block):
                    return self.b.adapt(v, other.type.dtype, f"'{name}'")
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

    # -- loops ----------------------------------------------------------------------------
    def stmt_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self.error(UnsupportedSyntaxError, node, "for ... else is not supported",
                             "set a flag before 'break' and test it after the loop")
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
            self.unrolled_loop(node, seq)
            return
        raise self.error(UnsupportedSyntaxError, node, "only 'for i in range(...)' loops (or "
                         "loops over compile-time tuples) are supported")

    def unrolled_loop(self, node: ast.For, seq: tuple) -> None:
        frame = _LoopFrame("unrolled", depth=self.if_depth)
        self.frames.append(frame)
        try:
            for item in seq:
                self.assign(node.target, item, node)
                self.block(node.body)
                self.exited = False
                if frame.static_exit == "break":
                    break
                frame.static_exit = None
        finally:
            self.frames.pop()

    def range_loop(self, node: ast.For, bounds: list[Any]) -> None:
        if not 1 <= len(bounds) <= 3:
            raise self.error(CompileError, node, "range() takes 1 to 3 arguments")
        lb, ub, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
        for v in (lb, ub, step):
            if not (isinstance(v, Value) or (isinstance(v, int) and not isinstance(v, bool))):
                raise self.error(CompileError, node, f"range bounds and steps must be integers, "
                                 f"got {describe(v)}", "pass ints, tc.Const[int] or int "
                                 "parameters, or integer scalars (n.astype(tc.i32))")
        runtime_step = isinstance(step, Value)
        if runtime_step:
            if not (isinstance(step.type, TileType) and step.type.is_scalar
                    and step.type.dtype.is_int):
                raise self.error(DTypeError, node, f"the range step must be an integer scalar, "
                                 f"got a {step.type}", "pass an int parameter or an integer "
                                 "scalar (convert with .astype(tc.i32)); it must be positive "
                                 "when the loop runs")
        elif step <= 0:
            raise self.error(CompileError, node, f"the range step must be positive, got {step}",
                             "loops count upward; compute descending indices from the loop "
                             "variable, e.g. 'for k in range(n): i = n - 1 - k'")
        lbv, ubv, stepv = self.b.coerce([lb, ub, step], "range bounds")
        self.emit_loop(node, lbv, ubv, stepv, lambda iv: iv,
                       {"runtime_step": True} if runtime_step else {"step": step})

    def loop_inits(self, node: ast.AST, body: list[ast.stmt],
                   exclude: Optional[str]) -> tuple[list[str], list[Value]]:
        """The variables a loop carries (those its body reassigns that are defined before it)
        and their initial tiles (numbers become scalars of their default dtype)."""
        names = [n for n in _assigned_names(body)
                 if n != exclude and n in self.env and not isinstance(self.env[n], _Undefined)]
        inits = []
        for n in names:
            v = self.env[n]
            if is_py_scalar(v):
                v = self.b.tile(v)
            if not (isinstance(v, Value) and isinstance(v.type, TileType)):
                raise self.error(CompileError, node, f"'{n}' is reassigned in the loop but holds "
                                 f"a {describe(v)}", "only tiles and scalars can be loop-carried")
            inits.append(v)
        return names, inits

    def carried_now(self, frame: _LoopFrame, node: ast.AST) -> list[Value]:
        """The current values of ``frame``'s carried variables, of their loop-carried types
        (numbers and weak scalars adapt)."""
        values = []
        for n, t in zip(frame.names, frame.types):
            v = self.env.get(n)
            if is_py_scalar(v) or (isinstance(v, Value) and v.weak):
                v = self.b.adapt(v, t.dtype, f"loop-carried variable '{n}'")
            if not isinstance(v, Value) or v.type != t:
                got = v.type if isinstance(v, Value) else describe(v)
                raise self.error(CompileError, node, f"loop-carried variable '{n}' changes "
                                 f"from {t} to {got} in the loop body",
                                 f"initialize '{n}' before the loop with the type it has "
                                 f"after each iteration (e.g. tc.zeros(shape, dtype))")
            values.append(v)
        return values

    def loop_body(self, node: ast.AST, frame: _LoopFrame, body: Block,
                  test: Optional[ast.expr] = None) -> bool:
        """Lower ``node.body`` into ``body`` (its block arguments already bound), ending it
        with the next carried values. ``test``: a while loop's condition, checked first; a
        compile-time false one returns False (the loop never runs; nothing is emitted)."""
        self.frames.append(frame)
        try:
            with self.b.inside(body):
                if test is not None and not self.loop_test(test, frame, node):
                    return False
                self.exited = False
                self.block(node.body)
                if not self.exited:
                    self.b.emit("yield", self.carried_now(frame, node))
                self.exited = False
        finally:
            self.frames.pop()
        return True

    def loop_test(self, test: ast.expr, frame: _LoopFrame, node: ast.While) -> bool:
        """Emit a while loop's ``if cond: (go on) else: break``; False if the condition is
        compile-time false."""
        cond = self.expr(test)
        if not isinstance(cond, Value):
            if cond and not _leaves(node.body, ast.Break):
                raise self.error(CompileError, node, f"'while {ast.unparse(test)}' never ends: "
                                 "its condition is a compile-time truth and its body has no "
                                 "break", "add a break (under an if on a runtime condition), "
                                 "or loop over range(n)")
            return bool(cond)
        cond = self.condition(cond, test)
        stay, leave = Block(), Block()
        with self.b.inside(stay):
            self.b.emit("yield", ())
        with self.b.inside(leave):
            self.b.emit("break", frame.entry)
        self.b.emit("if", (cond,), {"result_types": ()}, regions=(stay, leave))
        return True

    def emit_loop(self, node: ast.For, lbv: Value, ubv: Value, stepv: Value,
                  bind: Any, attrs: Optional[dict] = None) -> None:
        """A ``for`` op over ``[lb, ub)`` by ``step``; ``bind(iv)`` is the loop variable's
        value. Variables the body reassigns are carried; names first bound inside the body
        (and the loop variable) are not visible after it."""
        if not isinstance(node.target, ast.Name):
            raise self.error(UnsupportedSyntaxError, node, "the loop variable must be a name")
        name = node.target.id
        names, inits = self.loop_inits(node, node.body, exclude=name)
        body = Block(args=[Value(lbv.type, name)] + [Value(v.type, n) for n, v in
                                                      zip(names, inits)])
        frame = _LoopFrame("for", names, [v.type for v in inits], body.args[1:])
        before = dict(self.env)
        self.env.update(zip(names, body.args[1:]))
        with self.b.inside(body):
            self.env[name] = bind(body.args[0])
        self.loop_body(node, frame, body)
        results = self.b.emit("for", (lbv, ubv, stepv, *inits), attrs, regions=(body,))
        self.after_loop(node, before, names, results, name)

    def stmt_While(self, node: ast.While) -> None:
        if node.orelse:
            raise self.error(UnsupportedSyntaxError, node, "while ... else is not supported",
                             "set a flag before 'break' and test it after the loop")
        names, inits = self.loop_inits(node, node.body, exclude=None)
        body = Block(args=[Value(v.type, n) for n, v in zip(names, inits)])
        frame = _LoopFrame("while", names, [v.type for v in inits], body.args)
        before = dict(self.env)
        self.env.update(zip(names, body.args))
        if not self.loop_body(node, frame, body, test=node.test):
            self.env = before
            return
        results = self.b.emit("loop", inits, regions=(body,))
        self.after_loop(node, before, names, results, None)

    def after_loop(self, node: ast.AST, before: dict, names: list[str], results,
                   loop_var: Optional[str]) -> None:
        """Bind the carried variables to the loop's results; names first bound inside the
        body (and the loop variable) go out of scope."""
        body_env, self.env = self.env, before
        for n, r in zip(names, results):
            self.env[n] = r
        for n in body_env:
            if n not in before or n == loop_var:
                self.env[n] = _Undefined(f"'{n}' is only defined inside the loop at line "
                                         f"{node.lineno}")

    def stmt_Break(self, node: ast.Break) -> None:
        self.leave_loop("break", node)

    def stmt_Continue(self, node: ast.Continue) -> None:
        self.leave_loop("continue", node)

    def leave_loop(self, kind: str, node: ast.stmt) -> None:
        if not self.frames:
            raise self.error(UnsupportedSyntaxError, node, f"'{kind}' outside a loop",
                             "break and continue end a loop of the same function")
        frame = self.frames[-1]
        if frame.kind == "unrolled":
            if self.if_depth > frame.depth:
                raise self.error(UnsupportedSyntaxError, node, f"'{kind}' under a runtime "
                                 "condition in a loop over a compile-time tuple",
                                 "such loops are unrolled, so only compile-time conditions "
                                 "(tc.Const values) can end them early; loop with range() "
                                 "instead, or mask with tc.where")
            frame.static_exit = kind
        else:
            self.b.emit(kind, self.carried_now(frame, node))
        self.exited = True


_MISSING = object()


def _same_const(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


_STATEMENT_HINTS = {
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
