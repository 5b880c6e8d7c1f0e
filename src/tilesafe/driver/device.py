"""The device registry: ``cpu`` (host memory; kernels run on the numpy interpreter, always
present) and ``cuda:N``.

The GPU is probed once, lazily, and every failure is caught and turned into a reason string
(``tilesafe info`` prints it), so ``import tilesafe`` works on machines without a driver.
Whether kernels can be *compiled* for a device kind is the business of its backend: a backend
registers a kernel probe here (:func:`register_kernel_probe`), which the default-device choice
and ``tilesafe info`` consult. This module owns the only process-wide device state; it imports
only ``errors``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Callable

from ..errors import DeviceError


@dataclass(frozen=True)
class Device:
    """A place where tensors live and kernels run: ``Device("cpu")`` or ``Device("cuda", 0)``."""

    kind: str
    index: int = 0

    @property
    def name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"{self.kind}:{self.index}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Device({self.name!r})"


CPU = Device("cpu")


@dataclass(frozen=True)
class GpuProbe:
    """The outcome of looking for a usable GPU: ``available`` (a driver reports devices),
    ``compiles`` (tileiras is usable too, so kernels can run there), the device names and a
    sentence saying why."""

    available: bool
    devices: tuple[str, ...]
    reason: str
    compiles: bool = False


@functools.lru_cache(maxsize=1)
def probe_gpu() -> GpuProbe:
    """Look for CUDA devices through cuda.core; never raises."""
    try:
        from cuda.core import system  # type: ignore[import-not-found]
    except Exception as err:  # ImportError, or a broken install
        return GpuProbe(False, (), f"cuda.core is not importable ({type(err).__name__}: {err}); "
                        "install the GPU extra: pip install 'tilesafe[gpu]'")
    try:
        count = int(system.get_num_devices() if hasattr(system, "get_num_devices")
                    else system.num_devices)
    except BaseException as err:  # no driver: RuntimeError subclasses, sometimes SystemError
        if isinstance(err, KeyboardInterrupt):
            raise
        return GpuProbe(False, (), f"no usable CUDA driver ({type(err).__name__}: {err})")
    if count == 0:
        return GpuProbe(False, (), "the CUDA driver reports no GPU")
    names = tuple(f"cuda:{i}" for i in range(count))
    probe = _KERNEL_PROBES.get("cuda")
    if probe is None:
        return GpuProbe(True, names, f"{count} CUDA device(s); no kernel backend is registered "
                        "for them")
    try:
        how = probe()
    except Exception as err:  # a missing or broken compiler: tensors work, kernels do not
        return GpuProbe(True, names, f"{count} CUDA device(s); kernels cannot be compiled for "
                        f"them: {err}")
    return GpuProbe(True, names, f"{count} CUDA device(s); {how}", compiles=True)


_KERNEL_PROBES: dict[str, Callable[[], str]] = {}


def register_kernel_probe(kind: str, probe: Callable[[], str]) -> None:
    """Declare how to tell whether kernels can be compiled for devices of ``kind``: ``probe``
    returns a sentence saying with what (e.g. "kernels compile with tileiras 13.4.92"), or
    raises saying why not. Called by the backend of that kind when it is imported."""
    _KERNEL_PROBES[kind] = probe
    probe_gpu.cache_clear()


_CUDA_DEVICES: dict[int, Device] = {}


def _cuda_device(index: int) -> Device:
    """One Device object per GPU index for names resolved here, so the launch path's checks
    mostly find the very same object (equal devices still compare equal)."""
    device = _CUDA_DEVICES.get(index)
    if device is None:
        device = _CUDA_DEVICES.setdefault(index, Device("cuda", index))
    return device


def as_device(device: "Device | str | None") -> Device:
    """Normalize a device spec (None means the default device)."""
    if device is None:
        return default_device()
    if isinstance(device, Device):
        return device
    if device == "cpu":
        return CPU
    if isinstance(device, str) and device.startswith("cuda"):
        name = device if ":" in device else "cuda:0"
        probe = probe_gpu()
        if name not in probe.devices:
            raise DeviceError(f"device {name!r} is not available: {probe.reason}\n  fix: "
                              f"use one of {', '.join(['cpu', *probe.devices])}" +
                              (" (TILESAFE_DEVICE names the default device)"
                               if os.environ.get("TILESAFE_DEVICE") else ""))
        return _cuda_device(int(name.partition(":")[2]))
    raise DeviceError(f"unknown device {device!r}\n  fix: use 'cpu' or 'cuda:N'")


def default_device() -> Device:
    """The device used when none is given: ``$TILESAFE_DEVICE`` if set, else ``cuda:0`` when a
    GPU and tileiras are usable, else ``cpu`` (the interpreter)."""
    chosen = os.environ.get("TILESAFE_DEVICE")
    if chosen:
        return as_device(chosen)
    probe = probe_gpu()
    if probe.available and probe.compiles:
        return _cuda_device(0)
    return CPU


def devices() -> list[Device]:
    """Every device in this process: ``cpu`` and each usable ``cuda:N``."""
    return [CPU] + [as_device(name) for name in probe_gpu().devices]
