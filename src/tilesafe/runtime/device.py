"""The device registry: ``cpu`` (the numpy interpreter, always present) and ``cuda:N``.

The GPU is probed once, lazily, and every failure is caught and turned into a reason string
(``tilesafe info`` prints it), so ``import tilesafe`` works on machines without a driver.
This module owns the only process-wide device state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


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
    """The outcome of looking for a usable GPU."""

    available: bool
    devices: tuple[str, ...]
    reason: str


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
    return GpuProbe(True, tuple(f"cuda:{i}" for i in range(count)),
                    f"{count} CUDA device(s) found; the Tile IR backend is not built into this "
                    "version yet, so kernels run on the cpu interpreter")


def as_device(device: "Device | str | None") -> Device:
    """Normalize a device spec (None means the default device)."""
    if device is None:
        return default_device()
    if isinstance(device, Device):
        return device
    if device == "cpu":
        return CPU
    if isinstance(device, str) and device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        raise ValueError(f"device 'cuda:{index}' is not supported by this version of tilesafe: "
                         f"{probe_gpu().reason}")
    raise ValueError(f"unknown device {device!r}; use 'cpu' or 'cuda:N'")


def default_device() -> Device:
    """The device used when none is given: ``cpu`` until the GPU backend is available."""
    return CPU


def devices() -> list[Device]:
    """Every device kernels can run on in this process."""
    return [CPU]
