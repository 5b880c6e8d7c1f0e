"""Backends: how kernels run on each kind of device, behind one interface (``base``).

Each backend is listed in ``_KNOWN`` below with the device kind it serves; the kernel layer
finds it with :func:`for_device` (launches) or :func:`by_name` (ahead-of-time compiles). A
backend's module is imported on first use (the Tile IR backend brings the bytecode encoder and
the lowering: about 80 ms at ``import tilesafe`` otherwise), and a backend that needs a
compiler tells the device registry how to probe for it (``tilesafe info`` and the
default-device choice ask). Adding a backend is a package under ``backends/`` and one entry
in ``_KNOWN``.
"""

from __future__ import annotations

import importlib
import threading

from ..driver.device import Device, register_kernel_probe
from .base import Backend, Executable, KernelArg, Target

#: name -> (device kind, module, class)
_KNOWN: dict[str, tuple[str, str, str]] = {
    "interp": ("cpu", "tilesafe.backends.interp.backend", "InterpreterBackend"),
    "tileir": ("cuda", "tilesafe.backends.tileir.backend", "TileIRBackend"),
}
_LOADED: dict[str, Backend] = {}
_LOCK = threading.Lock()


def by_name(name: str) -> Backend:
    """The backend called ``name`` (``"interp"``, ``"tileir"``)."""
    backend = _LOADED.get(name)
    if backend is None:
        if name not in _KNOWN:
            raise ValueError(f"unknown backend {name!r}; known: {', '.join(_KNOWN)}")
        with _LOCK:
            backend = _LOADED.get(name)
            if backend is None:
                _, module, cls = _KNOWN[name]
                backend = _LOADED[name] = getattr(importlib.import_module(module), cls)()
    return backend


_BY_KIND = {kind: name for name, (kind, _, _) in _KNOWN.items()}


def for_device(device: Device) -> Backend:
    """The backend that runs kernels on ``device``."""
    name = _BY_KIND.get(device.kind)
    if name is None:
        raise ValueError(f"no backend runs kernels on {device} devices")
    return by_name(name)


def _probe(name: str):
    def probe() -> str:
        check = by_name(name).kernel_probe()
        return check() if check is not None else "kernels run without a compiler"
    return probe


for _name, (_kind, _, _) in _KNOWN.items():
    register_kernel_probe(_kind, _probe(_name))

__all__ = ["Backend", "Executable", "KernelArg", "Target", "for_device", "by_name"]
