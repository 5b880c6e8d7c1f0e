"""Shape arithmetic shared by the host and the device side: tile grids, contiguous strides,
normalized shapes and reshaped strides.

Pure functions of tuples of ints. It imports nothing of tilesafe, so every layer may use it
(the host's partitions, the compiler's partition ops and the backends' lowerings compute the
same tile grid here).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

MAX_GRID_RANK = 3
"""A launch grid has at most three axes, so a partition (one tile per program) has rank 1-3."""


def tile_grid(shape: Sequence[int], tile_shape: Sequence[int]) -> tuple[int, ...]:
    """Tiles per axis when ``shape`` is cut into ``tile_shape`` tiles (edge tiles partial)."""
    return tuple(-(-d // t) for d, t in zip(shape, tile_shape))


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides, step = [], 1
    for d in reversed(tuple(shape)):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def is_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` are row-major for ``shape`` (extents of 1 may have any stride)."""
    return all(s == c for d, s, c in zip(shape, strides, contiguous_strides(shape)) if d != 1)


def normalize_shape(shape: "int | Sequence[int]") -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints (a bare int is a 1-D shape)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or d < 0:
            raise ValueError(f"bad tensor shape {shape!r}: extents must be non-negative ints")
    return tuple(int(d) for d in dims)


def reshape_strides(shape: Sequence[int], strides: Sequence[int],
                    new_shape: Sequence[int]) -> Optional[tuple[int, ...]]:
    """Strides that view ``shape``/``strides`` as ``new_shape`` without a copy, or None."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new_strides = [0] * len(new_shape)
    oi = ni = 0
    while oi < len(old) and ni < len(new_shape):
        if new_shape[ni] == 1:
            ni += 1
            continue
        o_end, n_end = oi + 1, ni + 1
        o_prod, n_prod = old[oi][0], new_shape[ni]
        while o_prod != n_prod:
            if o_prod < n_prod:
                o_prod *= old[o_end][0]
                o_end += 1
            else:
                n_prod *= new_shape[n_end]
                n_end += 1
        for k in range(oi, o_end - 1):  # the old chunk must be one contiguous run
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[o_end - 1][1]
        for k in range(n_end - 1, ni - 1, -1):
            new_strides[k] = stride
            stride *= new_shape[k]
        oi, ni = o_end, n_end
    for k in range(ni, len(new_shape)):
        new_strides[k] = 1
    return tuple(new_strides)


def footprint(shape: Sequence[int], strides: Sequence[int], offset: int,
              itemsize: int) -> tuple[int, int]:
    """The half-open byte range ``[lo, hi)`` that a strided view (element ``offset``, element
    ``strides``) can touch, counted from element 0 of its storage."""
    if any(d == 0 for d in shape):
        return (offset * itemsize, offset * itemsize)
    lo = hi = offset
    for d, s in zip(shape, strides):
        if s < 0:
            lo += (d - 1) * s
        else:
            hi += (d - 1) * s
    return (lo * itemsize, (hi + 1) * itemsize)


def is_injective(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether no two indices of a view of ``shape`` and element ``strides`` reach the same
    element: taken by increasing stride, each axis must step past everything the axes before
    it span."""
    spanned = 0
    for d, s in sorted(((d, abs(s)) for d, s in zip(shape, strides) if d > 1),
                       key=lambda axis: axis[1]):
        if s <= spanned:
            return False
        spanned += (d - 1) * s
    return True
