"""The Tile IR backend: kernels for ``cuda`` devices, compiled through Tile IR bytecode.

Its compile stages, in order (after the front end and the verifier, see ``tilesafe.pipeline``):

1. ``lower``: typed IR to Tile IR bytecode (``lower``, writing through ``bytecode``);
2. ``assemble``: the cubin from the disk cache (``cache``, keyed by everything that changes
   it), else from ``tileiras`` (then stored);
3. ``load``: the cubin loaded on the target's device (``executable``); a cached cubin the
   driver rejects is evicted and assembled again once, never trusted. A kernel whose
   positions a launch before it validates (the fact ``validated_first``) also gets that
   launch's cubin here (lowered with ``positions_only``, assembled the same way).

Without a device (ahead of time: ``tilesafe check --target``, ``ts.compile``) the stages end
with the cubin. Launch facts (``facts``: alignment classes of the arguments) join the cache
keys. This module imports the compiler's IR, the driver and its own sub-modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable, Optional, Sequence

from ..._callsite import caller_location
from ...compiler.ir import KernelIR
from ...driver import cuda
from ...driver.device import Device
from ...compiler.hints import arch_hints
from ...errors import PartitionError
from ..base import KernelArg, Stage, Target
from . import cache
from .executable import TileIRExecutable
from .faults import fault_records_for
from .facts import launch_facts
from .lower import lower_kernel, validates_first, waits_for_predecessor
from .tileiras import assemble, find_tileiras

BYTECODE_VERSION = (13, 4)
OPT_LEVEL = 3
#: Programmatic dependent launch (overlapping a launch with the previous kernel's tail) needs
#: Hopper or newer.
PROGRAMMATIC_CAPABILITY = (9, 0)


@dataclass(frozen=True)
class Cubin:
    """An assembled kernel: the cubin, whether tileiras ran for it (else it came from the disk
    cache), its cache key and the bytecode it was assembled from."""

    cubin: bytes
    compiled: bool
    key: str
    bytecode: bytes


class TileIRBackend:
    """Kernels on ``cuda`` devices: Tile IR bytecode, ``tileiras``, cubins."""

    name = "tileir"
    device_kind = "cuda"

    def target(self, device: Device) -> Target:
        major, minor = cuda.compute_capability(device.index)
        return Target(self.name, f"sm_{major}{minor}", device)

    def ahead_of_time(self, arch: str) -> Target:
        return Target(self.name, arch)

    def launch_facts(self, ir: KernelIR, args: Sequence[KernelArg]) -> Hashable:
        return launch_facts(ir, args)

    def stages(self, target: Target, *, hints: dict, facts: Hashable,
               on_compiled: Callable[[], None]) -> list[tuple[str, Stage]]:
        ir_of: dict = {}

        def lower(ir: KernelIR) -> bytes:
            refuse_hanging_kernel(ir, hints)
            ir_of["ir"] = ir
            return lower_kernel(ir, version=BYTECODE_VERSION, hints=hints, facts=facts)

        def assemble_cached(bytecode: bytes) -> Cubin:
            tool = find_tileiras()
            key = cache.cache_key(bytecode, version=BYTECODE_VERSION, arch=target.arch,
                                  opt_level=OPT_LEVEL, tool_version=tool.version)
            cubin = cache.load(key)
            if cubin is not None:
                return Cubin(cubin, False, key, bytecode)
            cubin = assemble(bytecode, target.arch, kernel=ir_of["ir"], opt_level=OPT_LEVEL,
                             tool=tool)
            cache.store(key, cubin)
            on_compiled()
            return Cubin(cubin, True, key, bytecode)

        def validating_cubin(ir: KernelIR) -> Optional[Cubin]:
            if not validates_first(facts):
                return None
            return assemble_cached(lower_kernel(ir, version=BYTECODE_VERSION, hints=hints,
                                                facts=facts, positions_only=True))

        def load(built: Cubin) -> TileIRExecutable:
            ir, index = ir_of["ir"], target.device.index
            programmatic = (waits_for_predecessor(BYTECODE_VERSION, hints)
                            and cuda.compute_capability(index) >= PROGRAMMATIC_CAPABILITY)
            records = fault_records_for(ir, index)
            first = validating_cubin(ir)

            def executable(main: Cubin, check: Optional[Cubin]) -> TileIRExecutable:
                return TileIRExecutable(ir.name, main.cubin, index, programmatic, records,
                                        validating_cubin=check.cubin if check else None)
            try:
                return executable(built, first)
            except Exception:
                if built.compiled and (first is None or first.compiled):
                    raise
                # a cached cubin the driver rejects is rebuilt once
                fresh = built
                if not built.compiled:
                    cache.evict(built.key)
                    fresh = assemble_cached(built.bytecode)
                if first is not None and not first.compiled:
                    cache.evict(first.key)
                    first = assemble_cached(first.bytecode)
                return executable(fresh, first)

        stages: list[tuple[str, Stage]] = [("lower", lower), ("assemble", assemble_cached)]
        if target.device is not None:
            stages.append(("load", load))
        else:
            stages.append(("cubin", lambda built: built.cubin))
        return stages

    def kernel_probe(self) -> Optional[Callable[[], str]]:
        def probe() -> str:
            tool = find_tileiras()
            return f"kernels compile with tileiras {tool.version} ({tool.path})"
        return probe


def refuse_hanging_kernel(ir: KernelIR, hints: Optional[dict]) -> None:
    """Refuse to compile a kernel known not to finish on the GPU: one that writes an indexed
    partition and carries an ``occupancy`` hint. On the H100 (tileiras 13.4) such a kernel
    never finished, with one or two indexed partitions, ranks 1 and 3 alike (a (1024,) tile at
    1 or 10 device positions, ``{"occupancy": 4}``), while the same kernel without the hint
    finished in every case tried; the cause is not known. Raised before anything is
    compiled or enqueued, naming the partition."""
    occupancy = sorted(arch for arch, values in arch_hints(hints).items()
                       if "occupancy" in values)
    if not occupancy:
        return
    for p in ir.params:
        if getattr(p.value.type, "positions", None) is not None:
            raise PartitionError(
                f"kernel '{ir.name}' writes the indexed partition '{p.name}' and has an "
                f"occupancy hint (under {', '.join(map(repr, occupancy))}): such kernels "
                "never finished on the GPU (the validation of the positions at entry, compiled "
                "with that hint, spins)", caller_location(),
                hint="drop the occupancy hint from this kernel's hints")
