"""From a specialized kernel's IR to a loaded GPU executable, through two caches.

``cubin_for`` lowers the IR to bytecode, then looks the cubin up in the disk cache (keyed by
everything that changes it) before running tileiras; ``compiled`` tells the caller whether
tileiras ran, which is what ``Kernel.compile_count`` counts on GPUs. The in-memory cache of
executables lives on the Kernel (per specialization and device).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ...compiler.ir import KernelIR
from . import cache

BYTECODE_VERSION = (13, 4)
OPT_LEVEL = 3
#: Programmatic dependent launch (overlapping a launch with the previous kernel's tail) needs
#: Hopper or newer.
PROGRAMMATIC_CAPABILITY = (9, 0)


@dataclass(frozen=True)
class CubinResult:
    cubin: bytes
    compiled: bool
    key: str


def cubin_for(kernel: KernelIR, arch: str, *, hints: Optional[dict] = None,
              facts: Optional[dict] = None) -> CubinResult:
    """The cubin of ``kernel`` for ``arch`` (e.g. ``"sm_90"``), from the disk cache if there."""
    from .lower import lower_kernel
    from .tileiras import assemble, find_tileiras
    tool = find_tileiras()
    bytecode = lower_kernel(kernel, version=BYTECODE_VERSION, hints=hints, facts=facts)
    key = cache.cache_key(bytecode, version=BYTECODE_VERSION, arch=arch, opt_level=OPT_LEVEL,
                          tool_version=tool.version)
    cubin = cache.load(key)
    if cubin is not None:
        return CubinResult(cubin, False, key)
    cubin = assemble(bytecode, arch, kernel=kernel, opt_level=OPT_LEVEL, tool=tool)
    cache.store(key, cubin)
    return CubinResult(cubin, True, key)


def arch_of(device_index: int) -> str:
    from ...runtime import cuda
    major, minor = cuda.compute_capability(device_index)
    return f"sm_{major}{minor}"


def load(kernel: KernelIR, params: Any, result: CubinResult, device_index: int,
         rebuild) -> Any:
    """Load a cubin; a cubin the driver rejects is evicted and rebuilt once, never trusted."""
    from .executable import TileIRExecutable
    from .lower import waits_for_predecessor
    from ...runtime import cuda
    programmatic = (waits_for_predecessor(BYTECODE_VERSION)
                    and cuda.compute_capability(device_index) >= PROGRAMMATIC_CAPABILITY)
    try:
        return TileIRExecutable(kernel, params, result.cubin, device_index, programmatic)
    except Exception:
        if not result.compiled:
            cache.evict(result.key)
            fresh = rebuild()
            return TileIRExecutable(kernel, params, fresh.cubin, device_index, programmatic)
        raise
