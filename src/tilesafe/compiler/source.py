"""The Python functions the front end reads: a kernel's or device function's parsed source
(:class:`SourceFunction`, with the file and line numbers every error points at) and the
``@ts.function`` wrapper (:class:`DeviceFunction`) that kernels inline.

Plain data over ``ast`` and ``inspect``: this module imports only ``errors`` from tilesafe;
never the builder, the IR or the other front-end modules (``compiler.expressions``,
``compiler.statements``, ``compiler.frontend``), which import it.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import CompileError, Location

#: One parse at a time: CPython 3.11 keeps the depth count of building an AST in state shared by
#: all threads, so two threads parsing at once can fail with "SystemError: AST constructor
#: recursion depth mismatch" (python/cpython gh-106905); a kernel first launched from several
#: threads parses its source in each.
_PARSING = threading.Lock()


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
        with _PARSING:
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

