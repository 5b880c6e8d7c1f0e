"""The ``tilesafe`` command: ``info`` (version, devices, why a GPU is or is not usable),
``demo`` (the README example, timed, on the default device), ``tune`` (tuning results of
``ts.autotune``: ``tilesafe tune --help``), ``generate`` (a Qwen3 model's tokens/s:
``tilesafe generate --help``) and ``check`` (compile every
kernel of a module without a GPU: front end and safety rules, and with ``--target`` the whole
path to a cubin). A reader that closes the output early (``tilesafe info | head -1``) ends any
command quietly, with status 1."""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
from typing import Optional, Sequence

import numpy as np

from . import __version__
from ._demo import run_demo
from .check import check_file
from .autotune.command import add_parser as add_tune_parser
from .driver.device import default_device, devices, probe_gpu
from . import _compiled
from .models.generate import add_parser as add_generate_parser


def cmd_info(args: argparse.Namespace) -> int:
    probe = probe_gpu()
    print(f"tilesafe {__version__}")
    print(f"python   {platform.python_version()} ({sys.executable})")
    print(f"numpy    {np.__version__}")
    print(f"devices  {', '.join(d.name for d in devices())} (default: {default_device()})")
    print(f"gpu      {'available' if probe.available else 'not usable'}: {probe.reason}")
    print(f"launches {_launcher_status()}")
    print(f"repeats  {_compiled_path_status()}")
    return 0


def _launcher_status() -> str:
    """Which code makes the driver calls of GPU launches."""
    if importlib.util.find_spec("tilesafe.driver._launcher") is not None:
        return "through the compiled launcher (tilesafe.driver._launcher)"
    return ("through cuda.bindings: the compiled launcher was not built (it needs a C compiler "
            "and Python headers when installing; reinstall with pip install -e . to build it)")


def _compiled_path_status() -> str:
    """Whether repeated launches (cached plans) run through the compiled fast path."""
    if _compiled.FASTPATH is not None:
        return "through the compiled fast path (tilesafe._fastpath)"
    if _compiled.built("tilesafe._fastpath") is not None:
        return "through Python: the compiled fast path is off (TILESAFE_COMPILED_PATH=0)"
    return ("through Python: the compiled fast path was not built (it needs a C compiler "
            "and Python headers when installing; reinstall with pip install -e . to build it)")


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(n=args.n, tile=args.tile)


def cmd_check(args: argparse.Namespace) -> int:
    return check_file(args.file, target=args.target, skip_unbound=args.skip_unbound)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="tilesafe", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="version, devices and GPU status").set_defaults(fn=cmd_info)
    demo = sub.add_parser("demo", help="run the README example on the default device")
    demo.add_argument("--n", type=int, default=1 << 20, help="vector length (default 2**20)")
    demo.add_argument("--tile", type=int, default=1024, help="tile size (default 1024)")
    demo.set_defaults(fn=cmd_demo)
    check = sub.add_parser("check", help="compile every kernel of a Python file, no GPU needed")
    check.add_argument("file", help="a .py file defining @ts.kernel functions")
    check.add_argument("--target", default=None,
                       help="also compile to a cubin for this GPU (e.g. sm_90; needs tileiras)")
    check.add_argument("--skip-unbound", action="store_true",
                       help="report kernels whose shape, dtype or tc.Const names only an "
                       "example can bind (no examples=[...] on @ts.kernel) as skipped, not "
                       "failed")
    check.set_defaults(fn=cmd_check)
    add_tune_parser(sub)
    add_generate_parser(sub)
    try:
        args = parser.parse_args(argv)
        status = args.fn(args)
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return 1
    return status


def _drop_stdout() -> None:
    """The reader of stdout went away (``tilesafe info | head -1``): point stdout at the null
    device, so that the interpreter's flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a file descriptor (replaced, captured)
        pass
