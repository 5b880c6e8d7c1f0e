"""What the row-wise kernel families (norms, activations) share on the host: checking their
tensor arguments (kind, float dtype, device, shape), viewing a tensor of any rank as a 2-D
matrix of rows (leading dimensions flattened), the output over those rows, and the tile sizes
a launch derives from a shape and a config.

May import the host layer, ``errors``, ``_callsite``, ``kernel`` and ``kernels._outputs``."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .._callsite import caller_location
from ..dtypes import DType, bfloat16, float16, float32
from ..errors import ArgumentError
from ..host.partition import Partition
from ..host.tensor import Tensor, borrow_mut
from ..kernel import Kernel, kernel
from ._outputs import Output

#: the programs a launch aims for at least (about two per SM of an H100) where the problem is
#: large enough: tiles shrink to reach it, so that short problems still spread over the GPU
MIN_PROGRAMS = 256
#: the tile size (elements) from which a whole-row program runs 8 warps rather than 4: a row
#: kept in registers then needs half the registers per thread (about 230 -> 130 for a bf16
#: add_rms_norm tile of 8192), so twice the warps fit on an SM to keep loads in flight
WIDE_TILE = 4096
#: the element types every row-wise kernel accepts (math in f32 whatever the storage)
FLOAT_DTYPES: tuple[DType, ...] = (float16, bfloat16, float32)


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()


def rows_bucket(rows: int) -> int:
    """The row count a tuning key files a launch under: the next power of two, at most 16384
    (beyond that the best config no longer changes)."""
    return min(next_pow2(rows), 16384)


def check_tensor(value: Any, name: str, op: str) -> Tensor:
    """``value`` if it is a tilesafe tensor of rank >= 1 and a float dtype, else an
    ArgumentError naming ``op``'s argument ``name``."""
    if not isinstance(value, Tensor):
        raise ArgumentError(f"{op}: {name} must be a tilesafe tensor, got "
                            f"{type(value).__name__}", caller_location(),
                            hint="pass a ts.Tensor (call .sync() on a lazy op such as "
                            "ts.tensor(...) first)")
    if len(value.shape) == 0:
        raise ArgumentError(f"{op}: {name} is a 0-d tensor; it needs a last axis to work along",
                            caller_location(), hint=f"give {name} at least one dimension")
    if value.dtype not in FLOAT_DTYPES:
        raise ArgumentError(f"{op}: {name} has dtype {value.dtype.name}; supported are "
                            "float16, bfloat16 and float32", caller_location(),
                            hint=f"convert {name} to one of them first")
    return value


def check_like(value: Tensor, name: str, ref: Tensor, ref_name: str, op: str) -> None:
    """``value`` has ``ref``'s dtype and device (else an ArgumentError)."""
    if value.dtype != ref.dtype:
        raise ArgumentError(f"{op}: {name} has dtype {value.dtype.name}, {ref_name} "
                            f"{ref.dtype.name}; they must agree", caller_location(),
                            hint=f"convert {name} to {ref.dtype.name}")
    if str(value.device) != str(ref.device):
        raise ArgumentError(f"{op}: {name} is on {value.device}, {ref_name} on {ref.device}",
                            caller_location(), hint=f"move {name} to {ref.device}")


def check_vector(value: Any, name: str, x: Tensor, op: str) -> Tensor:
    """A per-feature parameter (a weight or bias): a tensor of shape ``(hidden,)`` with
    ``x``'s dtype and device; returned as a ``(1, hidden)`` view."""
    value = check_tensor(value, name, op)
    hidden = x.shape[-1]
    if tuple(value.shape) != (hidden,):
        raise ArgumentError(f"{op}: {name} has shape {tuple(value.shape)}; x's last axis "
                            f"has {hidden} elements, so {name} must have shape ({hidden},)",
                            caller_location(), hint=f"pass a 1-D {name} of {hidden} elements")
    check_like(value, name, x, "x", op)
    return value.reshape((1, hidden))


def as_rows(t: Tensor, name: str, op: str) -> Tensor:
    """``t`` as a 2-D ``(rows, last extent)`` view (leading dimensions flattened)."""
    if len(t.shape) == 2:
        return t
    rows = 1
    for extent in t.shape[:-1]:
        rows *= extent
    try:
        return t.reshape((rows, t.shape[-1]))
    except ValueError:
        raise ArgumentError(f"{op}: {name} of shape {tuple(t.shape)} and strides "
                            f"{tuple(t.strides)} cannot be viewed as {rows} rows of "
                            f"{t.shape[-1]} elements", caller_location(),
                            hint=f"pass {name}.clone() (a contiguous copy)") from None


class RowsOutput:
    """An output of shape ``shape`` (any rank >= 1) written as a 2-D matrix of rows: the
    caller's ``out=`` (checked by :class:`Output`) or a new tensor, viewed as ``(rows,
    shape[-1])`` for the launch, and handed back in ``shape`` afterwards."""

    def __init__(self, out: Any, shape: Sequence[int], dtype: DType, device: Any, *,
                 op: str, name: str = "out"):
        shape = tuple(int(s) for s in shape)
        rows = 1
        for extent in shape[:-1]:
            rows *= extent
        self.shape, self.rows_shape = shape, (rows, shape[-1])
        output = Output(out, shape, dtype, device, name=name, op=op)
        value = output.value
        if isinstance(value, Tensor):
            self._tensor: Any = value
            self._rows: Any = as_rows(value, name, op)
        else:  # a lazy allocation: allocate the rows directly
            self._tensor = None
            self._rows = value if len(shape) == 2 else \
                Output(None, self.rows_shape, dtype, device, name=name, op=op).value

    def partition(self, tile: Sequence[int]) -> Partition:
        """The partition a launch writes (a borrow of a tensor, a move of a lazy one)."""
        if isinstance(self._rows, Tensor):
            return borrow_mut(self._rows).partition(tuple(tile))
        return self._rows.partition(tuple(tile))

    def result(self, partition: Partition) -> Tensor:
        """The output tensor in its shape, from the partition the launch handed back."""
        if self._tensor is not None:
            return self._tensor
        rows = partition.unpartition()
        return rows if len(self.shape) == 2 else rows.reshape(self.shape)


def finish(op: Any, pick: Callable[[Any], Any]) -> Any:
    """``op`` with its result replaced by ``pick(result)``, with no host synchronization (the
    caller drives it)."""
    return op.then(pick)


def row_tile(config_rows: int, rows: int, block: int, budget: int,
             column_tiles: int = 1) -> int:
    """Rows per program: the config's, at most the (power-of-two) row count, at most what
    keeps a tile of ``block`` columns within ``budget`` elements, and halved while the launch
    would have fewer than :data:`MIN_PROGRAMS` programs (``column_tiles`` per row band)."""
    tile = max(1, min(int(config_rows), next_pow2(rows), max(1, budget // block)))
    while tile > 1 and -(-rows // tile) * column_tiles < MIN_PROGRAMS:
        tile //= 2
    return tile


def chunk_columns(config_chunk: int, rows: int, columns: int, largest: int,
                  smallest: int = 1024) -> int:
    """The column chunk of a row too long for one tile: the config's (at most ``largest``),
    halved down to ``smallest`` while the launch would have fewer than :data:`MIN_PROGRAMS`
    programs."""
    chunk = min(int(config_chunk), largest)
    while chunk > smallest and rows * -(-columns // chunk) < MIN_PROGRAMS:
        chunk //= 2
    return chunk


def matrix_tile(config_rows: int, config_cols: int, rows: int, columns: int) -> tuple[int, int]:
    """An elementwise launch's (rows, columns) tile: the config's, no larger than the matrix,
    shrunk (rows first, then columns down to 256) while the launch would have fewer than
    :data:`MIN_PROGRAMS` programs."""
    cols = min(int(config_cols), next_pow2(columns))
    tile = row_tile(config_rows, rows, cols, 1 << 24, -(-columns // cols))
    while cols > 256 and -(-rows // tile) * -(-columns // cols) < MIN_PROGRAMS:
        cols //= 2
    return tile, cols


def auto_occupancy(elements: int) -> int:
    """CTAs per SM to plan a whole-row kernel for, from its tile's element count: without the
    hint tileiras gives these kernels 255 registers per thread and one CTA per SM, which halves
    their bandwidth; about 64 registers per thread at 256 threads keeps them fed without spills
    (measured on the H100: benchmarks/results/h100-2026-11-24/kernels/SUMMARY.md)."""
    if elements <= 4096:
        return 4
    if elements <= 16384:
        return 2
    return 1


class WarpVariants:
    """A kernel compiled with the hints a config asks for: 4 or 8 warps per program
    (``num_worker_warps_per_cta``; ``"warps"``, else 8 for tiles of :data:`WIDE_TILE` elements
    or more), the CTAs per SM the compiler plans for (``"occupancy"``: a number, ``"auto"`` for
    :func:`auto_occupancy`, the default, or 0 for no hint) and whether it keeps the
    grid-dependency wait (``"programmatic"``, default True). Each variant is made once."""

    def __init__(self, narrow: Kernel):
        self.narrow = narrow
        self._made: dict[tuple, Kernel] = {}

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return (self.narrow,)

    def pick(self, tile: Sequence[int], config: dict) -> Kernel:
        elements = 1
        for extent in tile:
            elements *= extent
        warps = config.get("warps") or (8 if elements >= WIDE_TILE else 4)
        occupancy = config.get("occupancy", "auto")
        if occupancy == "auto":
            occupancy = auto_occupancy(elements)
        programmatic = bool(config.get("programmatic", True))
        key = (warps, occupancy, programmatic)
        made = self._made.get(key)
        if made is None:
            default: dict = {}
            if warps == 8:
                default["num_worker_warps_per_cta"] = 8
            if occupancy and occupancy > 1:
                default["occupancy"] = int(occupancy)
            hints = {k: v for k, v in self.narrow.hints.items() if k != "default"}
            if default:
                hints["default"] = {**self.narrow.hints.get("default", {}), **default}
            if not programmatic:
                hints["programmatic_launch"] = False
            made = self._made[key] = kernel(self.narrow.fn, hints=hints) if hints != \
                self.narrow.hints else self.narrow
        return made
