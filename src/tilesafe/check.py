"""``tilesafe check FILE.py``: compile every kernel a module defines, without running anything.

Each kernel is specialized from its ``examples=`` (name bindings) or, when it has none, from
its signature alone (possible when every shape and dtype is explicit). The front end and the
device-side safety rules run for each; with a target, the whole path to a cubin does too.
Errors are printed with their file:line. A kernel whose shape, dtype or ``tc.Const`` names
cannot be bound without an example fails the check, with the ``examples=[{...}]`` to give it,
unless ``skip_unbound`` reports it as skipped; an example that leaves a name unbound, or does not
fit the signature, always fails.

Exit status: 0 when every kernel checked (or was skipped), 1 when any failed (or the file
raised on import), 2 when the file cannot be read.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Optional

from . import backends, pipeline
from .compiler.signature import AtomicSpec, ConstSpec, MappedSpec, Param, TensorSpec
from .errors import TilesafeError
from .kernel import Kernel

_KINDS = {"const": "tc.Const", "dtype": "dtype name", "shape": "shape name",
          "extent": "extent name", "grid": "launch grid"}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_tilesafe_check_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def _import_failure(path: Path, err: Exception) -> str:
    """One line for an exception the checked file raised while being imported: where (the
    deepest line of that file in the traceback) and what."""
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__)
             if Path(f.filename) == path]
    what = str(err)
    if isinstance(err, SyntaxError) and err.lineno is not None:
        lines, what = [err.lineno], err.msg
    where = f"{path}:{lines[-1]}" if lines else str(path)
    return f"error: {where}: importing the file raised {type(err).__name__}: {what}"


def _unbound_names(params: list[Param], bindings: dict, const_grid: bool = False
                   ) -> dict[str, str]:
    """The names a specialization from ``bindings`` alone needs and ``bindings`` lacks, in
    signature order, each with its kind: ``"const"`` (a ``tc.Const`` parameter, also where a
    shape tuple names it), ``"extent"`` (a name in a shape tuple that is no parameter),
    ``"dtype"`` (a dtype name), ``"shape"`` (a shape name) or ``"grid"`` (the grid a
    ``const_grid`` kernel compiles in)."""
    needed: dict[str, str] = {}
    consts = {p.name for p in params if isinstance(p.spec, ConstSpec)}

    def shape(entries) -> None:
        if isinstance(entries, str):
            needed.setdefault(entries, "shape")
        else:  # a name in a shape tuple: a tc.Const parameter, or an extent name alone
            for d in entries:
                if isinstance(d, str):
                    needed.setdefault(d, "const" if d in consts else "extent")

    for p in params:
        spec = p.spec
        if isinstance(spec, ConstSpec):
            needed.setdefault(p.name, "const")
        if isinstance(getattr(spec, "dtype", None), str):
            needed.setdefault(spec.dtype, "dtype")
        if isinstance(spec, (TensorSpec, AtomicSpec)):
            shape(spec.shape)
        elif isinstance(spec, MappedSpec):
            shape(spec.tile_shape)
            shape(spec.map_shape)
    if const_grid:
        needed.setdefault("grid", "grid")
    return {n: kind for n, kind in needed.items() if n not in bindings}


def _example_value(kernel: Kernel, name: str, kind: str) -> str:
    """A plausible binding for ``name`` in the suggested ``examples=[{...}]``."""
    if kind == "dtype":
        return "ts.float32"
    if kind == "shape":
        for p in kernel.params:  # a map shape has the rank of its tile shape
            if isinstance(p.spec, MappedSpec) and p.spec.map_shape == name:
                rank = 1 if isinstance(p.spec.tile_shape, str) else len(p.spec.tile_shape)
                return repr((1,) * rank)
        return "(1024,)"
    if kind == "extent":
        return "64"
    if kind == "grid":
        return "(132, 1, 1)"
    const = next(p.spec.type for p in kernel.params if p.name == name)
    return {int: "64", float: "1.0", bool: "True"}.get(const, "...")


def _unbound_report(kernel: Kernel, label: str, missing: dict[str, str],
                    skip_unbound: bool) -> tuple[bool, str]:
    """(failed, the lines to print) for a kernel or example that leaves names unbound."""
    names = ", ".join(f"{_KINDS[kind]} '{n}'" for n, kind in missing.items())
    values = ", ".join(f'"{n}": {_example_value(kernel, n, k)}' for n, k in missing.items())
    fix = f"@ts.kernel(examples=[{{{values}}}])"
    if skip_unbound and not kernel.examples:
        return False, f"skipped {label}: nothing binds {names}; to check it, give it {fix}"
    where = kernel.source.location(kernel.source.tree)
    if kernel.examples:
        return True, (f"error   {label}: {where}: nothing binds {names} in this example of "
                      f"kernel '{kernel.name}'\n  fix: add {values} to the example")
    return True, (f"error   {label}: {where}: kernel '{kernel.name}' cannot be checked from its "
                  f"signature alone: nothing binds {names}\n  fix: bind them on the decorator, "
                  f"e.g. {fix} (one dict per specialization to check), or pass "
                  f"--skip-unbound to skip such kernels")


def _check_one(kernel: Kernel, label: str, bindings: dict, target: Optional[str]) -> bool:
    """Specialize ``kernel`` by ``bindings`` and compile it; print the outcome and return
    whether it failed."""
    try:
        spec = kernel.specialize_example(bindings)
    except (TilesafeError, TypeError, ValueError) as err:
        where = kernel.source.location(kernel.source.tree)
        print(f"error   {label}: {where}: the example {bindings!r} does not fit the signature "
              f"of kernel '{kernel.name}': {err}")
        return True
    try:
        ir = kernel._ir(spec)
        ops = f"{len(list(ir.walk()))} ops"
        if target is not None:
            cubin = pipeline.compile(ir, backends.by_name("tileir").ahead_of_time(target),
                                     hints=kernel.hints)
            ops += f", cubin {len(cubin)} B for {target}"
    except TilesafeError as err:
        print(f"error   {label}: {err}")
        return True
    print(f"ok      {label}: {ops}")
    return False


def check_file(file: str, target: Optional[str] = None, *, skip_unbound: bool = False) -> int:
    """Check one file; returns the process exit status (see the module's docstring)."""
    path = Path(file)
    if not path.is_file():
        print(f"error: {file}: " + ("is not a file" if path.exists() else "no such file"))
        return 2
    try:
        path.read_bytes()
    except OSError as err:
        print(f"error: {file}: cannot be read: {err.strerror or err}")
        return 2
    try:
        module = _load(path)
    except TilesafeError as err:
        print(f"error: {err}")
        return 1
    except Exception as err:  # the checked file's own code raised while being imported
        print(_import_failure(path, err))
        return 1
    kernels = [(name, value) for name, value in vars(module).items()
               if isinstance(value, Kernel)]
    if not kernels:
        print(f"{path}: no @ts.kernel found")
        return 0
    failed = 0
    for name, kernel in kernels:
        for number, bindings in enumerate(kernel.examples or [{}]):
            label = f"{name}" + (f" (example {number + 1})" if kernel.examples else "")
            missing = _unbound_names(kernel.params, bindings, kernel.const_grid)
            if missing:
                unbound_failed, line = _unbound_report(kernel, label, missing, skip_unbound)
                failed += unbound_failed
                print(line)
            else:
                failed += _check_one(kernel, label, bindings, target)
    return 1 if failed else 0
