"""``tilesafe check FILE.py``: compile every kernel a module defines, without running anything.

Each kernel is specialized from its ``examples=`` (name bindings) or, when it has none, from
its signature alone (possible when every shape and dtype is explicit). The front end and the
device-side safety rules run for each; with a target, the whole path to a cubin does too.
Errors are printed with their file:line; a kernel whose names cannot be bound without an
example is reported as skipped.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Optional

from . import backends, pipeline
from .errors import ArgumentError, TilesafeError
from .kernel import Kernel


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"_tilesafe_check_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    return module


def check_file(file: str, target: Optional[str] = None) -> int:
    """Check one file; returns the process exit code (1 if any kernel failed)."""
    path = Path(file)
    try:
        module = _load(path)
    except TilesafeError as err:
        print(f"error: {err}")
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
            try:
                spec = kernel.specialize_example(bindings)
            except ArgumentError as err:
                print(f"skipped {label}: {err.message}; give the kernel examples=[{{...}}]")
                continue
            try:
                ir = kernel._ir(spec)
                if target is not None:
                    cubin = pipeline.compile(ir, backends.by_name("tileir").ahead_of_time(target),
                                             hints=kernel.hints)
                    print(f"ok      {label}: {len(list(ir.walk()))} ops, cubin {len(cubin)} B "
                          f"for {target}")
                else:
                    print(f"ok      {label}: {len(list(ir.walk()))} ops")
            except TilesafeError as err:
                failed += 1
                print(f"error   {label}: {err}")
    return 1 if failed else 0
