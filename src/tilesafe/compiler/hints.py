"""A kernel's optimization hints (``@ts.kernel(hints=...)``): the names tilesafe knows and the
per-architecture keys, validated when the kernel is decorated. The backends read them (the
Tile IR lowering writes them as the entry's optimization hints).

This module imports only ``errors``."""

from __future__ import annotations

from typing import Optional

from ..errors import SignatureError

KNOWN_HINTS = ("num_cta_in_cga", "occupancy", "num_worker_warps_per_cta")


def check_hints(hints: Optional[dict]) -> dict:
    """``hints`` checked: a dict keyed by ``"sm_NN"`` or ``"default"`` of known hint names."""
    if hints is None:
        return {}
    if not isinstance(hints, dict):
        raise SignatureError(f"hints must be a dict keyed by architecture, got {hints!r}")
    for arch, values in hints.items():
        if not (arch == "default" or (isinstance(arch, str) and arch.startswith("sm_")
                                      and arch[3:].isdigit())):
            raise SignatureError(f"hints key {arch!r} is not an architecture",
                                 hint="use 'sm_90', 'sm_100', ... or 'default'")
        for name in values:
            if name not in KNOWN_HINTS:
                raise SignatureError(f"unknown kernel hint {name!r} for {arch}",
                                     hint="known hints: " + ", ".join(KNOWN_HINTS))
    return dict(hints)
