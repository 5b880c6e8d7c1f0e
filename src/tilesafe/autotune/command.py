"""``tilesafe tune``: run a module's tuning, and list, clear or export the stored results of
``ts.autotune`` (see ``tilesafe.autotune``).

``tilesafe tune [TARGET] [--device cuda:0] [--list] [--clear [--function NAME]]
[--export PATH [--arch sm_90]]``, in that order:

* ``TARGET`` (a ``.py`` file or an importable module) is imported and its ``tune()`` function
  called, if it has one (with ``device=`` when it takes that parameter): the place to call the
  tuned functions on the shapes that matter, on ``--device``; the winners are stored;
* ``--clear`` deletes the stored results (of one tuned function with ``--function``);
* ``--list`` prints every stored result: function, key, winner, when, device;
* ``--export PATH`` adds the stored results of one architecture (``--arch``, default the
  device's) to the shipped-format table at PATH (``src/tilesafe/kernels/tuned/sm_90.json`` is
  made this way from a GPU run).

Exit status: 0 done, 1 the target's tune() failed, 2 bad arguments (a target that cannot be
imported, no architecture for --export).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path
from typing import Any, Optional

from . import store, timing
from ..driver.device import as_device


def add_parser(sub: Any) -> None:
    """The ``tune`` sub-command of the ``tilesafe`` parser."""
    tune = sub.add_parser("tune", help="run a module's tune(), list/clear/export tuning results",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tune.add_argument("target", nargs="?", help="a .py file or module whose tune() to run")
    tune.add_argument("--device", default=None, help="the device to tune on (e.g. cuda:0)")
    tune.add_argument("--list", action="store_true", help="print the stored results")
    tune.add_argument("--clear", action="store_true", help="delete the stored results")
    tune.add_argument("--function", default=None, help="with --clear: only this function's")
    tune.add_argument("--export", default=None, metavar="PATH",
                      help="write the stored results of one architecture to PATH")
    tune.add_argument("--arch", default=None, help="with --export: the architecture (sm_90)")
    tune.set_defaults(fn=run)


def run(args: argparse.Namespace) -> int:
    if not (args.target or args.list or args.clear or args.export):
        print("tilesafe tune: nothing to do; give a TARGET, --list, --clear or --export",
              file=sys.stderr)
        return 2
    if args.target:
        status = _run_target(args.target, args.device)
        if status:
            return status
    if args.clear:
        count = store.clear(args.function)
        print(f"cleared {count} stored result(s) from {store.store_dir()}")
    if args.list:
        _list()
    if args.export:
        arch = args.arch or _arch_of(args.device)
        if arch is None:
            print("tilesafe tune: --export needs --arch (e.g. --arch sm_90) when no GPU "
                  "device is given", file=sys.stderr)
            return 2
        try:
            count = store.export(Path(args.export), arch)
        except OSError as err:
            print(f"tilesafe tune: cannot write {args.export}: {err}", file=sys.stderr)
            return 2
        print(f"exported {count} result(s) for {arch} to {args.export}")
    return 0


def _run_target(target: str, device: Optional[str]) -> int:
    try:
        module = _import(target)
    except Exception as err:  # any failure to import is reported, not raised
        print(f"tilesafe tune: cannot import {target}: {type(err).__name__}: {err}",
              file=sys.stderr)
        return 2
    tune = getattr(module, "tune", None)
    if not callable(tune):
        print(f"{target} has no tune() function: nothing was tuned")
        return 0
    try:
        if "device" in inspect.signature(tune).parameters:
            tune(device=device)
        else:
            tune()
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def _import(target: str) -> Any:
    path = Path(target)
    if path.suffix == ".py" or path.exists():
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{target} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(target)


def _arch_of(device: Optional[str]) -> Optional[str]:
    if not device:
        return None
    found = as_device(device)
    strategy = timing.TIMING
    return strategy.describe(found)[0] if strategy.can_time(found) else None


def _list() -> None:
    rows = list(store.stored())
    if not rows:
        print(f"no stored results in {store.store_dir()}")
        return
    for path, _, entry in rows:
        key = entry.get("full_key") or {}
        print(f"{key.get('function')}  key={key.get('key')}  winner={entry.get('index')} "
              f"{entry.get('config')}  when={entry.get('when')}  device={key.get('device')} "
              f"({key.get('arch')})")
