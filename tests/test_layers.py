"""The package's layers, read from the source (``ast``): every import of a tilesafe module goes
to a layer below it (or its own), and module-level imports form no cycle.

The layers, bottom up (ARCHITECTURE.md draws them):

* ``base``: ``errors``, ``dtypes``, ``shapes``, ``_compiled``, ``_callsite``, ``_version``
* ``compiler`` (device side: front end, IR, verifier, op registry), and above it the device
  language ``core`` (what kernels, the kernel library's too, are written in)
* ``driver`` (devices, platforms, CUDA calls, streams, the ownership ledger)
* ``backends`` (the backend interface, the interpreter, Tile IR)
* ``deviceops`` (DeviceOps, their driving and graphs)
* ``host`` (tensors, partitions, constructors, copies, interop)
* ``launch`` (launch checks, launch ops and graph nodes); beside it ``distributed``
  (collectives as DeviceOps over tensors: imports up to ``host``)
* ``pipeline``, then ``kernel``, then ``autotune`` (choosing launch configs), then ``kernels``
  (the safe kernel library), then ``models`` (language models built on it), then the public
  surface (``__init__``, ``core``, ``cli``, ...)
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator

import pytest

import tilesafe

ROOT = Path(tilesafe.__file__).parent
BASE = {"errors", "dtypes", "shapes", "_compiled", "_callsite", "_version"}
TOP = {"__init__", "__main__", "check", "cli", "_demo"}
#: the device language (``tilesafe.core``): kernels are written in it, the kernel library too
LANGUAGE = {"core"}

#: layer -> the layers it may import (its own included)
ALLOWED = {
    "base": {"base"},
    "compiler": {"base", "compiler"},
    "driver": {"base", "driver"},
    "backends": {"base", "compiler", "driver", "backends"},
    "deviceops": {"base", "driver", "deviceops"},
    "host": {"base", "driver", "deviceops", "host"},
    "launch": {"base", "compiler", "driver", "backends", "deviceops", "host", "launch"},
    "pipeline": {"base", "compiler", "backends", "pipeline"},
    "kernel": {"base", "compiler", "driver", "backends", "deviceops", "host", "launch",
               "pipeline", "kernel"},
    "autotune": {"base", "compiler", "driver", "backends", "deviceops", "host", "launch",
                 "pipeline", "kernel", "autotune"},
    "distributed": {"base", "driver", "deviceops", "host", "distributed"},
    "language": {"base", "compiler", "language"},
    "kernels": {"base", "compiler", "language", "driver", "backends", "deviceops", "host",
                "launch", "pipeline", "kernel", "autotune", "kernels"},
    "models": {"base", "compiler", "language", "driver", "backends", "deviceops", "host",
               "launch", "pipeline", "kernel", "autotune", "kernels", "models", "distributed"},
    "top": {"base", "compiler", "language", "driver", "backends", "deviceops", "host", "launch",
            "pipeline", "kernel", "autotune", "kernels", "models", "distributed", "top"},
}
EXCEPTIONS: set[tuple[str, str]] = set()  # (importer, imported) allowed to go up: none


def module_name(path: Path) -> str:
    parts = ("tilesafe",) + path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    head = parts[1]
    if head in BASE:
        return "base"
    if head in TOP:
        return "top"
    if head in LANGUAGE:
        return "language"
    return head


def imports(path: Path, top_level_only: bool) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of the tilesafe modules ``path`` imports (``from X import a`` names
    ``X.a`` when that is a module, else ``X``)."""
    package = module_name(path) if path.name == "__init__.py" else \
        module_name(path).rpartition(".")[0]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tilesafe"):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("tilesafe"):
                continue
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                yield node.lineno, candidate if _exists(candidate) else module


def _exists(module: str) -> bool:
    relative = Path(*module.split(".")[1:])
    return (ROOT / relative).with_suffix(".py").exists() or (ROOT / relative).is_dir()


MODULES = sorted(ROOT.rglob("*.py"))


def test_every_module_imports_only_its_own_layer_and_those_below():
    wrong = []
    for path in MODULES:
        me = module_name(path)
        mine = layer_of(me)
        for line, other in imports(path, top_level_only=False):
            if layer_of(other) not in ALLOWED[mine] and (me, other) not in EXCEPTIONS:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {mine} imports {other} "
                             f"({layer_of(other)})")
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_module_level_imports_have_no_cycle():
    graph = {module_name(p): {m for _, m in imports(p, top_level_only=True)} for p in MODULES}
    for me in graph:  # a package's __init__ importing its own modules is not a cycle
        graph[me] = {m for m in graph[me] if not (me != "tilesafe" and m.startswith(me + "."))
                     and m != me}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("module, layer", [
    ("tilesafe.errors", "base"), ("tilesafe.driver.ledger", "driver"),
    ("tilesafe.host.tensor", "host"), ("tilesafe.kernel", "kernel"), ("tilesafe", "top"),
    ("tilesafe.backends.tileir.bytecode.builder", "backends")])
def test_layer_of(module, layer):
    assert layer_of(module) == layer
