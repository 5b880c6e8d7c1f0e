"""The ``tileiras`` driver: find the Tile IR assembler, report its version, and turn bytecode
into an sm_XY cubin.

Search order for ``tileiras`` (:func:`find_tileiras`): the ``TILESAFE_TILEIRAS`` environment
variable (a path to the executable), the ``nvidia-cuda-tileiras`` pip package
(``site-packages/nvidia/cu13/bin``), ``PATH``, then a CUDA toolkit (``CUDA_HOME``,
``CUDA_PATH``, ``/usr/local/cuda``, ``/usr/local/cuda-13.*``) of release 13.3 or newer. The
toolkit directory it came from (the ``bin`` directory's parent, the pip package's ``cu13``
directory) becomes ``CUDA_HOME`` of the run, so tileiras finds the ``ptxas`` beside it.

:func:`assemble` assembles bytecode (the compile pipeline's ``assemble`` stage, in
``backends.tileir.backend``, keys the disk cache on those bytes).
Failures are :class:`~tilesafe.errors.CompileError` s naming the kernel, the source location
(from tileiras' ``loc(...)`` when it reports one, else the kernel's ``def``) and tileiras'
message. A missing tileiras raises :class:`TileirasNotFound` with the install hint.

This module runs programs; it does not cache cubins (the backend's ``assemble`` stage does).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ...compiler.ir import KernelIR
from ...errors import CompileError, Location, TileirasNotFound

__all__ = ["Tileiras", "TileirasNotFound", "find_tileiras", "find_tileirdisasm", "assemble",
           "normalize_target", "INSTALL_HINT"]

INSTALL_HINT = ("install the Tile IR assembler: pip install 'tilesafe[gpu]' (it brings "
                "nvidia-cuda-tileiras, nvidia-cuda-nvcc and nvidia-nvvm 13.4), or set "
                "TILESAFE_TILEIRAS to a tileiras from CUDA 13.3 or newer")

_MIN_RELEASE = (13, 3)
_TIMEOUT_S = 600


@dataclass(frozen=True)
class Tileiras:
    """A located assembler: its path, the toolkit directory to use as ``CUDA_HOME``, its
    release (``(13, 4)``) and full version string (``"13.4.92"``; part of the cubin cache key)."""

    path: str
    cuda_home: str
    release: tuple[int, int]
    version: str


def _version_of(path: str) -> Optional[tuple[tuple[int, int], str]]:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"V(\d+)\.(\d+)\.(\d+)", done.stdout + done.stderr) or \
        re.search(r"release (\d+)\.(\d+)()", done.stdout + done.stderr)
    if done.returncode != 0 or match is None:
        return None
    major, minor, patch = match.groups()
    return (int(major), int(minor)), ".".join(x for x in (major, minor, patch) if x)


def _pip_tool_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [Path(root) / "cu13" / "bin" for root in roots]


def _toolkit_dirs() -> list[Path]:
    dirs = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    dirs += sorted(glob.glob("/usr/local/cuda-13.*"), reverse=True)
    return [Path(d) / "bin" for d in dirs if d]


def _candidates(name: str) -> list[tuple[str, str]]:
    """``(tool path, where it came from)`` in search order (duplicates removed)."""
    found: list[tuple[str, str]] = []
    if name == "tileiras" and os.environ.get("TILESAFE_TILEIRAS"):
        found.append((os.environ["TILESAFE_TILEIRAS"], "TILESAFE_TILEIRAS"))
    found += [(str(d / name), "the nvidia-cuda-tileiras package") for d in _pip_tool_dirs()]
    on_path = shutil.which(name)
    if on_path:
        found.append((on_path, "PATH"))
    found += [(str(d / name), f"the CUDA toolkit in {d.parent}") for d in _toolkit_dirs()]
    seen, out = set(), []
    for path, origin in found:
        if path not in seen and os.path.isfile(path) and os.access(path, os.X_OK):
            seen.add(path)
            out.append((path, origin))
    return out


@functools.lru_cache(maxsize=None)
def _find_tileiras() -> Union[Tileiras, str]:
    rejected = []
    candidates = _candidates("tileiras")
    override = os.environ.get("TILESAFE_TILEIRAS")
    if override:  # an explicit choice is used or reported, never silently skipped
        candidates = [c for c in candidates if c[1] == "TILESAFE_TILEIRAS"]
        if not candidates:
            return f"TILESAFE_TILEIRAS={override} is not an executable file"
    for path, origin in candidates:
        info = _version_of(path)
        if info is None:
            rejected.append(f"{path} (from {origin}) does not run")
            continue
        release, version = info
        if release < _MIN_RELEASE:
            rejected.append(f"{path} (from {origin}) is release {version}; sm_90 needs 13.3+")
            continue
        home = str(Path(path).resolve().parent.parent)
        return Tileiras(path, home, release, version)
    return "; ".join(rejected) or "no tileiras was found"


def find_tileiras(*, refresh: bool = False) -> Tileiras:
    """The Tile IR assembler to use (cached); raises :class:`TileirasNotFound`."""
    if refresh:
        _find_tileiras.cache_clear()
    found = _find_tileiras()
    if isinstance(found, str):
        raise TileirasNotFound(f"cannot compile kernels for the GPU: {found}", hint=INSTALL_HINT)
    return found


def find_tileirdisasm() -> Optional[str]:
    """``tileirdisasm`` beside the chosen tileiras, else by the same search; None if absent."""
    try:
        beside = Path(find_tileiras().path).with_name("tileirdisasm")
        if beside.is_file():
            return str(beside)
    except TileirasNotFound:
        pass
    found = _candidates("tileirdisasm")
    return found[0][0] if found else None


def normalize_target(target: Any) -> str:
    """``"sm_90"`` from ``"sm_90"``, ``"sm_90a"``, ``"90"``, ``90`` or ``(9, 0)``."""
    if isinstance(target, tuple) and len(target) == 2:
        return f"sm_{target[0]}{target[1]}"
    text = str(target).strip().lower()
    match = re.fullmatch(r"(?:sm_?)?(\d{2,3})[a-z]?", text)
    if match is None:
        raise ValueError(f"unknown GPU target {target!r}; use e.g. 'sm_90'")
    return f"sm_{match.group(1)}"


_LOC = re.compile(r"loc\(\"([^\"]+)\":(\d+):(\d+)\)|([^\s:\"]+\.py):(\d+):(\d+)")


def _error_location(stderr: str, kernel: Optional[KernelIR]) -> Optional[Location]:
    """The first source location tileiras names in ``stderr``, else the kernel's."""
    match = _LOC.search(stderr)
    if match:
        file, line, col = match.group(1, 2, 3) if match.group(1) else match.group(4, 5, 6)
        return Location(file, int(line), max(0, int(col) - 1))
    return kernel.location if kernel is not None else None


def assemble(bytecode: bytes, target: Any = "sm_90", *, opt_level: int = 3,
             lineinfo: bool = False, device_debug: bool = False,
             kernel: Optional[KernelIR] = None, tool: Optional[Tileiras] = None) -> bytes:
    """Run ``tileiras <bc> -o <cubin> --gpu-name sm_XY --opt-level=<n>`` in a temporary
    directory and return the cubin. ``lineinfo`` keeps line tables (bytecode lowered with
    ``debug=True``); ``device_debug`` emits full debug info and forces ``--opt-level=0``.
    ``kernel`` only improves error messages: tileiras reports verifier errors without source
    positions, so they point at the kernel's ``def``."""
    tool = tool or find_tileiras()
    gpu = normalize_target(target)
    name = kernel.name if kernel is not None else "kernel"
    with tempfile.TemporaryDirectory(prefix="tilesafe-") as tmp:
        source, cubin = Path(tmp) / f"{name}.tileirbc", Path(tmp) / f"{name}.cubin"
        source.write_bytes(bytecode)
        command = [tool.path, str(source), "-o", str(cubin), "--gpu-name", gpu,
                   f"--opt-level={int(opt_level)}"]
        if lineinfo:
            command.append("--lineinfo")
        if device_debug:  # tileiras supports full debug info only without optimization
            command[-1] = "--opt-level=0"
            command.append("-g")
        env = dict(os.environ, CUDA_HOME=tool.cuda_home)
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp,
                                  timeout=_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"tileiras did not finish within {_TIMEOUT_S} s for {gpu}",
                               kernel.location if kernel else None,
                               kernel=kernel.name if kernel else None) from None
        if done.returncode != 0 or not cubin.is_file():
            message = (done.stderr or done.stdout).strip().replace(str(source), f"{name}.tileirbc")
            raise CompileError(
                f"tileiras {tool.version} failed for {gpu} (exit {done.returncode}):\n{message}",
                _error_location(message, kernel), kernel=kernel.name if kernel else None,
                hint="this usually means tilesafe emitted bytecode this tileiras does not "
                "accept; please report it with the kernel source")
        return cubin.read_bytes()
