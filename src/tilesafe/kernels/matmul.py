"""Matrix multiplication for linear layers: ``matmul`` (f16/bf16) and ``scaled_matmul`` (8-bit
floats with per-tensor scales, like ``torch._scaled_mm``).

``y = a @ b.T`` with ``a`` (..., K) and the weight ``b`` (N, K), K contiguous: the layout of
every checkpoint (``b_layout="kn"`` takes a (K, N) ``b`` instead). The weight is read through a
transposed view, never copied. Products accumulate in f32; scales and the output conversion are
applied once, in the epilogue.

Three paths, chosen by the shape on the host (each tuned by ``tilesafe.autotune``, keyed on
(M bucket, N, K, dtype, scaled)):

* M <= 16 (a decode step): the skinny path of ``kernels.gemv``, where the weight is read once
  at memory bandwidth (split-K when the column blocks alone are too few for the SMs);
* fewer than ``PERSISTENT_WAVES`` waves of 128 x 128 output tiles (one wave: one tile per
  SM): one output tile per program (``matmul_tiled``), tiles sized so that the grid fills the
  GPU;
* otherwise persistent: one program per SM walking bands of ``GROUP_ROWS`` tile rows column
  by column (``matmul_persistent``, a ``MappedPartitionMut``), so that the programs running
  at once share their A and B tiles in L2.

Edge tiles need no care from the caller: tile loads pad with zeros past the extents (which add
nothing to a dot product) and stores are masked.

May import every layer below the public surface, ``tilesafe.core`` (the device language) and
the other modules of ``kernels``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import tilesafe.core as tc

from ..kernel import function as _device_function, kernel as _make_kernel
from .._callsite import caller_location
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..dtypes import (DType, bfloat16, float8_e4m3fn, float8_e5m2, float16, float32)
from ..errors import ArgumentError
from ..host.factory import empty, full
from ..host.lazy import not_run_yet
from ..host.tensor import Tensor, borrow_mut
from . import gemv as _skinny
from .activations import silu_mul
from .gemv import gemv_rows_normed, gemv_rows_silu_mul, scale_product, with_occupancy
from .norms import MAX_ROW_TILE, _check_eps, rms_norm
from ._rowwise import check_vector
from ._outputs import Output, check_disjoint
from ._torch import accepts_torch, workspace_accepts_torch

__all__ = ["matmul", "scaled_matmul", "silu_mul_matmul", "rms_norm_matmul"]

SM_COUNT = _skinny.SM_COUNT
#: rows of tiles a persistent program's band spans (L2 reuse of the B tiles)
GROUP_ROWS = 8
#: 128 x 128 tiles per SM from which the persistent path runs. Below it, on the H100 with
#: tileiras 13.4, some persistent configs never finish: 128 x 128 tiles at (512, 6144, 1024)
#: (192 tiles: 1.5 per SM) and every 2-CTA cluster config at (512, 9728, 2560) spin forever,
#: while the same kernels finish at 8192^3 (benchmarks/results/h100-2026-11-24/matmul_hang/).
#: With one tile per program the tiled path needs no loop over tiles and loses little there.
PERSISTENT_WAVES = 3
#: M at or below which the skinny path runs
SKINNY_ROWS = 16
MATMUL_DTYPES = (float16, bfloat16)
SCALED_DTYPES = (float8_e4m3fn, float8_e5m2)
OUT_DTYPES = (float16, bfloat16, float32)


# -- device code --------------------------------------------------------------------------------

@_make_kernel(examples=[{"T": tc.bf16, "BC": 1024}])
def add_into(z: tc.MutTensor["T", (1, "BC")], x: tc.Tensor["T", (-1, -1)]):  # noqa: F821
    """``z = round(z + x)``: a product added to the output where its own launch cannot add
    (``matmul(..., accumulate=True)`` off the one-row GEMV)."""
    total = z.load().astype(tc.f32) + tc.load_tile_like(x, z).astype(tc.f32)
    z.store(total.astype(z.dtype))


@_device_function
def _tile_product(pa, pb, m, n, BM, BN, FAST):
    """f32 ``(BM, BN)``: row tile ``m`` of ``pa`` times column tile ``n`` of ``pb`` over K
    (``FAST``: the 8-bit floats' fast accumulation, see ``tc.mma``)."""
    acc = tc.zeros((BM, BN), tc.f32)
    for k in range(tc.num_tiles(pa, 1)):
        acc = tc.mma(pa.load((m, k)), pb.load((k, n)), acc, fast_accumulation=FAST)
    return acc


def matmul_tiled(z: tc.MutTensor["TO", ("BM", "BN")], a: tc.Tensor["T", (-1, -1)],
                 b: tc.Tensor["T", (-1, -1)], BK: tc.Const[int]):
    i, j, _ = tc.get_tile_block_id()
    acc = _tile_product(a.partition((BM, BK)), b.partition((BK, BN)), i, j, BM, BN, False)
    z.store(acc.astype(z.dtype))


def matmul_tiled_scaled(z: tc.MutTensor["TO", ("BM", "BN")], a: tc.Tensor["T", (-1, -1)],
                        b: tc.Tensor["T", (-1, -1)], scale_a: tc.Tensor[tc.f32, (1,)],
                        scale_b: tc.Tensor[tc.f32, (1,)], BK: tc.Const[int],
                        FAST: tc.Const[bool]):
    i, j, _ = tc.get_tile_block_id()
    acc = _tile_product(a.partition((BM, BK)), b.partition((BK, BN)), i, j, BM, BN, FAST)
    z.store((acc * scale_product(scale_a, scale_b)).astype(z.dtype))


def matmul_persistent(z: tc.MappedPartitionMut["TO", ("BM", "BN"), "G"],
                      a: tc.Tensor["T", (-1, -1)], b: tc.Tensor["T", (-1, -1)],
                      BK: tc.Const[int]):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    for idx in z.iter_indices():
        m, n = idx.coords()
        z.store(_tile_product(pa, pb, m, n, BM, BN, False).astype(z.dtype), idx)


def matmul_persistent_scaled(z: tc.MappedPartitionMut["TO", ("BM", "BN"), "G"],
                             a: tc.Tensor["T", (-1, -1)], b: tc.Tensor["T", (-1, -1)],
                             scale_a: tc.Tensor[tc.f32, (1,)], scale_b: tc.Tensor[tc.f32, (1,)],
                             BK: tc.Const[int], FAST: tc.Const[bool]):
    pa, pb = a.partition((BM, BK)), b.partition((BK, BN))
    scale = scale_product(scale_a, scale_b)
    for idx in z.iter_indices():
        m, n = idx.coords()
        z.store((_tile_product(pa, pb, m, n, BM, BN, FAST) * scale).astype(z.dtype), idx)


_EXAMPLE = {"T": tc.f16, "TO": tc.f16, "BM": 128, "BN": 128, "BK": 64}
_EXAMPLE_F8 = {"T": tc.f8e4m3fn, "TO": tc.bf16, "BM": 128, "BN": 128, "BK": 128, "FAST": False}
_FUNCTIONS = {
    ("tiled", False): (matmul_tiled, _EXAMPLE),
    ("tiled", True): (matmul_tiled_scaled, _EXAMPLE_F8),
    ("persistent", False): (matmul_persistent, {**_EXAMPLE, "G": (GROUP_ROWS, 1)}),
    ("persistent", True): (matmul_persistent_scaled, {**_EXAMPLE_F8, "G": (GROUP_ROWS, 1)})}
_KERNELS: dict = {}  # (style, scaled, warps, cga) -> kernel: the cache of hinted kernels


def tile_kernel(style: str, scaled: bool, warps: int = 4, cga: int = 1) -> Any:
    """The ``style`` ("tiled" or "persistent") kernel, ``scaled`` or not, compiled with
    ``warps`` worker warps per CTA and clusters of ``cga`` CTAs (one kernel per choice)."""
    key = (style, scaled, warps, cga)
    if key not in _KERNELS:
        hints = {}
        if warps != 4:
            hints["num_worker_warps_per_cta"] = warps
        if cga != 1:
            hints["num_cta_in_cga"] = cga
        fn, example = _FUNCTIONS[(style, scaled)]
        _KERNELS[key] = _make_kernel(fn, hints={"sm_90": hints} if hints else None,
                                              examples=[example])
    return _KERNELS[key]


# -- launches -------------------------------------------------------------------------------------

#: persistent tiles, best first on the H100 (BK is for 16-bit inputs; the 8-bit floats take
#: twice as many K per tile, the same bytes). 128 x 256 tiles need two consumer warpgroups
#: (8 worker warps) or a 2-CTA cluster, else they spill.
LARGE_CONFIGS = (  # (8192^3 f16 on the H100: 699, 690, 676, 380 TFLOP/s; cuBLAS 634)
    {"BM": 256, "BN": 128, "BK": 64, "warps": 8, "cga": 1},
    {"BM": 128, "BN": 256, "BK": 32, "warps": 8, "cga": 1},
    {"BM": 128, "BN": 256, "BK": 64, "warps": 8, "cga": 1},
    {"BM": 128, "BN": 128, "BK": 64, "warps": 4, "cga": 1},
)  # 2-CTA clusters (380 TFLOP/s at 8192^3) are left out: they hung at (512, 9728, 2560)
#: one tile per program, for problems with fewer 128 x 128 tiles than SMs
MEDIUM_CONFIGS = (
    {"BM": 128, "BN": 64, "BK": 64, "warps": 4, "cga": 1},
    {"BM": 64, "BN": 128, "BK": 64, "warps": 4, "cga": 1},
    {"BM": 64, "BN": 64, "BK": 64, "warps": 4, "cga": 1},
    {"BM": 128, "BN": 128, "BK": 64, "warps": 4, "cga": 1},
    {"BM": 64, "BN": 64, "BK": 128, "warps": 4, "cga": 1},
)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _tiles(m: int, n: int, bm: int, bn: int) -> int:
    return -(-m // bm) * -(-n // bn)


def _k_tile(config: dict, dtype: DType) -> int:
    """The config's K tile for ``dtype``: the same bytes per row as 16-bit inputs."""
    return int(config["BK"]) * max(1, 2 // dtype.itemsize)


def _scale_args(scale_a: Any, scale_b: Any) -> tuple:
    return () if scale_a is None else (scale_a, scale_b)


def _scaled_consts(scale_a: Any, out: Output) -> dict:
    """The scaled kernels' ``FAST`` (the output's ``fast_accumulation``); none for others."""
    return {} if scale_a is None else {"FAST": bool(out.fast_accumulation)}


@autotune(configs=LARGE_CONFIGS, key=_skinny.problem_key,
          kernels=(tile_kernel("persistent", False), tile_kernel("persistent", True)),
          name="tilesafe.kernels.matmul.persistent")
def launch_persistent(a: Any, b_kn: Any, out: Output, scale_a: Any, scale_b: Any, *,
                      config: dict) -> DeviceOp:
    """The persistent launch (``min(tiles, SM_COUNT)`` programs). A 128 x 256 config whose
    tiles would not cover every SM once falls back to 128 x 128 tiles; 64 rows or fewer take
    64 x 128 tiles, 128 or fewer 128 x 128."""
    (m, _), n = a.shape, b_kn.shape[1]
    bm, bn, warps, cga = int(config["BM"]), int(config["BN"]), config["warps"], config["cga"]
    if bn > 128 and _tiles(m, n, bm, bn) < SM_COUNT:
        bm, bn, warps = 128, 128, 4
    if m <= 64 < bm:  # a few rows, many columns (a prefill chunk on a vocabulary projection):
        bm, bn, warps = 64, 128, 4  # 64 x 256 tiles spill with one warpgroup (sm_90 cubin)
    elif m <= 128 < bm:
        bm, bn, warps = 128, 128, 4
    programs = min(_tiles(m, n, bm, bn), SM_COUNT)
    programs = max(cga, programs // cga * cga)
    kernel = tile_kernel("persistent", scale_a is not None, warps, cga)

    def run(tensor: Tensor, moved: bool) -> DeviceOp:
        part = (tensor if moved else borrow_mut(tensor)).partition((bm, bn))
        return kernel(part.map((GROUP_ROWS, 1), programs), a, b_kn,
                      *_scale_args(scale_a, scale_b), BK=_k_tile(config, a.dtype),
                      **_scaled_consts(scale_a, out))
    if isinstance(out.value, Tensor):
        return run(out.value, False)
    # a lazy allocation has no mapped partition before it runs: map the tensor it makes
    return out.value.then(lambda tensor: run(tensor, True))


@autotune(configs=MEDIUM_CONFIGS, key=_skinny.problem_key,
          kernels=(tile_kernel("tiled", False), tile_kernel("tiled", True)),
          name="tilesafe.kernels.matmul.tiled")
def launch_tiled(a: Any, b_kn: Any, out: Output, scale_a: Any, scale_b: Any, *,
                 config: dict) -> DeviceOp:
    """One output tile per program; the tile is no taller or wider than the problem (rounded
    up to a power of two, at least 16)."""
    (m, _), n = a.shape, b_kn.shape[1]
    bm = min(int(config["BM"]), max(16, _pow2_at_least(m)))
    bn = min(int(config["BN"]), max(16, _pow2_at_least(n)))
    kernel = tile_kernel("tiled", scale_a is not None, config["warps"], config["cga"])
    return kernel(out.partition((bm, bn)), a, b_kn, *_scale_args(scale_a, scale_b),
                  BK=_k_tile(config, a.dtype), **_scaled_consts(scale_a, out))


def path_of(m: int, n: int, dtype: DType, scaled: bool) -> str:
    """Which path ``m`` x ``n`` outputs take: "gemv", "skinny", "tiled" or "persistent"."""
    if m <= SKINNY_ROWS:
        return "gemv" if _skinny.uses_gemv(m, dtype, scaled) else "skinny"
    return "persistent" if _tiles(m, n, 128, 128) >= PERSISTENT_WAVES * SM_COUNT else "tiled"


_LAUNCHERS: dict[str, Callable[..., DeviceOp]] = {
    "gemv": _skinny.launch_gemv, "skinny": _skinny.launch_skinny,
    "tiled": launch_tiled, "persistent": launch_persistent}


def launch(a: Any, b_kn: Any, out: Output, scale_a: Any = None, scale_b: Any = None) -> DeviceOp:
    """The launches of one product ``out = a @ b_kn`` (``a`` (M, K), ``b_kn`` a (K, N) tensor or
    view, ``out`` an :class:`Output` of (M, N)), on the path :func:`path_of` picks: a DeviceOp
    whose result is the last launch's named tuple (``.z``: the output's partition)."""
    path = path_of(a.shape[0], b_kn.shape[1], a.dtype, scale_a is not None)
    return _LAUNCHERS[path](a, b_kn, out, scale_a, scale_b)


# -- the public functions -----------------------------------------------------------------------

def _tensor(value: Any, name: str, op: str, where: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, DeviceOp):
        raise not_run_yet(f"{op}: {name} must be a tensor", value, where,
                          f", e.g. {name} = {name}.sync()")
    raise ArgumentError(f"{op}: {name} must be a tilesafe tensor, got {type(value).__name__}",
                        where, hint=f"pass {name} as ts.tensor(...) or a torch tensor")


def _names(dtypes: tuple) -> str:
    return ", ".join(d.name for d in dtypes)


def _operands(a: Any, b: Any, b_layout: str, dtypes: tuple, op: str,
              where: Any, a_name: str = "a") -> tuple[Tensor, Tensor, tuple]:
    """Check ``a`` and ``b``; return ``a`` as (M, K), ``b`` as a (K, N) view and the output's
    leading shape (``a``'s leading dims). ``a_name``: what the caller calls ``a``."""
    a, b = _tensor(a, a_name, op, where), _tensor(b, "b", op, where)
    if b_layout not in ("nk", "kn"):
        raise ArgumentError(f"{op}: b_layout={b_layout!r} is not a layout", where,
                            hint="b_layout='nk' for a linear layer's weight (N, K), "
                            "'kn' for a (K, N) matrix")
    if a.ndim < 2:
        raise ArgumentError(f"{op}: {a_name} has shape {a.shape}; it needs (M, K) or more dims "
                            "(..., K)", where, hint="reshape a vector to (1, K)")
    if b.ndim != 2:
        raise ArgumentError(f"{op}: b has shape {b.shape}; it needs 2 dims, "
                            f"({'N, K' if b_layout == 'nk' else 'K, N'})", where,
                            hint="pass the weight matrix itself")
    for name, t in ((a_name, a), ("b", b)):
        if t.dtype not in dtypes:
            raise ArgumentError(f"{op}: {name} is {t.dtype.name}; supported: {_names(dtypes)}",
                                where, hint=f"convert {name} to one of them first")
    if a.dtype != b.dtype:
        raise ArgumentError(f"{op}: {a_name} is {a.dtype.name} and b is {b.dtype.name}; both need "
                            "one dtype", where, hint="convert one of them")
    b_kn = b.T if b_layout == "nk" else b
    k, n = b_kn.shape
    if a.shape[-1] != k:
        raise ArgumentError(f"{op}: {a_name} has shape {a.shape} and b {b.shape} (b_layout="
                            f"{b_layout!r}): K is {a.shape[-1]} in {a_name}, {k} in b", where,
                            hint=f"{a_name}'s last dim must equal b's K dim"
                            + (" (b is (N, K); pass b_layout='kn' for a (K, N) b)"
                               if b_layout == "nk" else
                               " (b is (K, N); pass b_layout='nk' for a weight (N, K))"))
    if str(a.device) != str(b.device):
        raise ArgumentError(f"{op}: {a_name} is on {a.device}, b on {b.device}", where,
                            hint="move both to one device")
    if 0 in a.shape or n == 0:
        raise ArgumentError(f"{op}: {a_name} {a.shape} and b {b.shape} have an empty extent",
                            where,
                            hint="call it with at least one row, column and K element")
    lead = tuple(a.shape[:-1])
    try:
        a2 = a if a.ndim == 2 else a.reshape(-1, k)
    except ValueError as err:
        raise ArgumentError(f"{op}: {a_name} {a.shape} cannot be viewed as (M, K) rows ({err})",
                            where, hint=f"pass a contiguous {a_name} ({a_name}.clone())") \
            from None
    return a2, b_kn, lead


def _out_dtype(out_dtype: Any, default: DType, op: str, where: Any) -> DType:
    dtype = default if out_dtype is None else out_dtype
    if dtype not in OUT_DTYPES:
        raise ArgumentError(f"{op}: out_dtype={getattr(dtype, 'name', dtype)!r} is not "
                            f"supported; choose one of {_names(OUT_DTYPES)}", where,
                            hint="e.g. out_dtype=ts.bfloat16")
    return dtype


def _scale_tensor(value: Any, name: str, device: Any, op: str, where: Any) -> Tensor:
    t = _tensor(value, name, op, where)
    if t.dtype != float32 or t.size != 1 or t.ndim > 1:
        raise ArgumentError(f"{op}: {name} is {t.dtype.name} of shape {t.shape}; it needs one "
                            "float32 value, shape () or (1,)", where,
                            hint=f"pass the per-tensor scale as a float32 tensor on {device}, "
                            "e.g. ts.tensor(np.float32(s), device=...)")
    if str(t.device) != str(device):
        raise ArgumentError(f"{op}: {name} is on {t.device}, the operands on {device}", where,
                            hint=f"move {name} to {device}")
    return t.reshape(1)


def _run(a2: Tensor, b_kn: Tensor, lead: tuple, out: Any, dtype: DType, op: str,
         scales: tuple = (None, None), workspace: Any = None,
         accumulate: bool = False, fast_accumulation: bool = False) -> DeviceOp:
    (m, _), n = a2.shape, b_kn.shape[1]
    shape = lead + (n,)
    if workspace is not None and (not isinstance(workspace, Tensor)
                                  or workspace.dtype != float32):
        raise ArgumentError(f"{op}: workspace must be a float32 tilesafe tensor",
                            caller_location(), hint="allocate it with matmul_workspace(a, b)")
    check_disjoint(op, {"out": out, "workspace": workspace},
                   {"a": a2, "b": b_kn, "scale_a": scales[0], "scale_b": scales[1]})
    if accumulate:
        return _accumulate(a2, b_kn, out, shape, dtype, op, workspace)
    result = Output(out, shape, dtype, a2.device, op=op)
    target = result
    if len(lead) != 1 and isinstance(result.value, Tensor):
        target = Output(result.value.reshape(m, n), (m, n), dtype, a2.device, op=op)
    elif len(lead) != 1:
        target = Output(None, (m, n), dtype, a2.device, op=op)
    target.workspace = workspace
    target.fast_accumulation = fast_accumulation
    launched = launch(a2, b_kn, target, *scales)
    if target is result:
        return launched.then(lambda r: result.tensor(_plain(r.z)))
    if isinstance(result.value, Tensor):
        return launched.then(lambda r: result.value)
    return launched.then(lambda r: target.tensor(_plain(r.z)).reshape(shape))


def _check_accumulate(accumulate: Any, out: Any, op: str, where: Any) -> bool:
    """``accumulate`` as a bool, refused when it is not one or when it has no ``out``."""
    if not isinstance(accumulate, bool):
        raise ArgumentError(f"{op}: accumulate={accumulate!r} must be True or False", where,
                            hint="pass accumulate=True to add the product to out=")
    if accumulate and out is None:
        raise ArgumentError(f"{op}: accumulate=True adds the product to out=, and out= is "
                            "missing", where,
                            hint="pass the tensor to add to as out=, or leave accumulate off")
    return accumulate


def _accumulate(a2: Tensor, b_kn: Tensor, out: Any, shape: tuple, dtype: DType, op: str,
                workspace: Any) -> DeviceOp:
    """``out += a2 @ b_kn`` (``_run`` with ``accumulate``): added by the one-row GEMV's own
    store, else by a second launch (:func:`add_into`) of the product written to a new tensor
    (so that path allocates, and cannot be recorded into a graph)."""
    where = caller_location()
    Output(out, shape, dtype, a2.device, op=op)  # (checks out: shape, dtype, device)
    (m, _), n = a2.shape, b_kn.shape[1]
    try:
        flat = out.reshape(m, n)
    except ValueError as err:
        raise ArgumentError(f"{op}: out= {tuple(out.shape)} cannot be viewed as ({m}, {n}) "
                            f"rows ({err})", where,
                            hint="pass a contiguous out, or out of shape (M, N)") from None
    if path_of(m, n, a2.dtype, False) == "gemv":
        target = _skinny.AccumulatingOutput(flat, (m, n), dtype, a2.device, op=op)
        target.workspace = workspace
        return launch(a2, b_kn, target).then(lambda r: out)
    product = Output(None, (m, n), dtype, a2.device, op=op)
    product.workspace = workspace
    columns = min(1024, _pow2_at_least(n))
    return launch(a2, b_kn, product).then(
        lambda r: add_into(borrow_mut(flat).partition((1, columns)), product.tensor(_plain(r.z)))
    ).then(lambda r: out)


def _plain(handed_back: Any) -> Any:
    """The partition a launch handed back (a mapped partition's own partition)."""
    return handed_back.partition if hasattr(handed_back, "map_shape") else handed_back


@accepts_torch
def matmul(a: Any, b: Any, *, b_layout: str = "nk", out_dtype: Optional[DType] = None,
           out: Any = None, workspace: Any = None, accumulate: bool = False) -> DeviceOp:
    """``a @ b.T``: a linear layer's product, f32 accumulation.

    Args:
        a: the activations, (M, K) or (..., K) (leading dims flattened), float16 or bfloat16.
        b: the weight, (N, K) with K contiguous (``b_layout="nk"``, the layout of checkpoints),
            or (K, N) (``b_layout="kn"``: then the product is ``a @ b``); a's dtype.
        b_layout: "nk" or "kn", see ``b``.
        out_dtype: the output's dtype (float16, bfloat16 or float32); default a's dtype.
        out: a tensor of shape (..., N) and ``out_dtype`` to write in place; default a new one.
        workspace: float32 scratch for the skinny path's split-K partial sums (from
            :func:`matmul_workspace`); else allocated per call. With ``out`` and a workspace
            a call allocates nothing and records into a ``ts.CudaGraph``.
        accumulate: add the product to ``out`` (required) instead of writing over it, as a
            residual connection does: ``out = round(out + round(a @ b.T))``, the product
            rounded to ``out``'s dtype, then the sum (a torch add of the written product).
            At one row the GEMV's own store adds (no second launch, and with a workspace
            the call records into a graph); otherwise a second launch adds the product
            written to a new tensor (allocated per call). ``out`` is borrowed exclusively by
            the launch, so it must not share memory with ``a``, ``b`` or ``workspace``.

    Returns:
        A DeviceOp whose result is the (..., N) output (``out`` itself when given). Torch
        tensors in give torch tensors out, on torch's current stream.

    Raises:
        ArgumentError: an operand is not a tensor (or a DeviceOp not run yet), of another
            dtype, rank or device, K differs, ``b_layout`` or ``out_dtype`` is unknown,
            ``out`` has the wrong shape, dtype or device, or ``accumulate`` has no ``out``;
            nothing is launched.
    """
    where = caller_location()
    a2, b_kn, lead = _operands(a, b, b_layout, MATMUL_DTYPES, "matmul", where)
    dtype = _out_dtype(out_dtype, a2.dtype, "matmul", where)
    return _run(a2, b_kn, lead, out, dtype, "matmul", workspace=workspace,
                accumulate=_check_accumulate(accumulate, out, "matmul", where))


@accepts_torch
def silu_mul_matmul(gate_up: Any, b: Any, *, activations: Any = None, out: Any = None,
                    workspace: Any = None, accumulate: bool = False) -> DeviceOp:
    """``matmul(silu_mul(gate_up), b)``: SwiGLU's gating, then the down projection.

    At one row, where ``matmul`` runs this product as one GEMV launch (``gemv_rows``: the
    config the tuner chose, or the first), it is that one launch with the gating computed
    per K chunk as the weight streams by: the activations are never written and their
    launch is gone. Otherwise it is ``silu_mul`` into ``activations`` then ``matmul``. Either
    way the result equals the two calls bit for bit.

    Args:
        gate_up: the merged gate/up projection's output, ``(M, 2 * I)`` (the gate's ``I``
            columns first), float16 or bfloat16.
        b: the down projection's weight, ``(N, I)``, ``gate_up``'s dtype and device.
        activations: ``(M, I)`` scratch of ``gate_up``'s dtype for the two-launch form
            (allocated when it is needed and left out). With ``out``, ``workspace`` and this,
            a call allocates nothing and records into a ``ts.CudaGraph``.
        out: an ``(M, N)`` output to write in place; default a new one.
        workspace: as ``matmul``'s.
        accumulate: as ``matmul``'s: add the product to ``out`` (the one launch's store
            adds it at one row).

    Returns:
        A DeviceOp whose result is the ``(M, N)`` output (``out`` itself when given).

    Raises:
        ArgumentError: as ``matmul`` and ``silu_mul`` do: a non-tensor, a dtype, rank or
            device that does not fit, an odd ``gate_up`` width, or an ``out`` or
            ``activations`` of another shape or dtype; nothing is launched.
    """
    op, where = "silu_mul_matmul", caller_location()
    gate_up = _tensor(gate_up, "gate_up", op, where)
    if gate_up.ndim != 2 or gate_up.shape[1] % 2:
        raise ArgumentError(f"{op}: gate_up has shape {tuple(gate_up.shape)}; it needs (M, 2 * "
                            "I): the gate's I columns, then up's", where,
                            hint="pass the (M, 2 * I) output of the merged gate/up projection")
    half = gate_up.shape[1] // 2
    gate, up = gate_up[:, :half], gate_up[:, half:]
    a2, b_kn, _ = _operands(gate, b, "nk", MATMUL_DTYPES, op, where)
    (m, _), n = a2.shape, b_kn.shape[1]
    accumulate = _check_accumulate(accumulate, out, op, where)
    result = Output(out, (m, n), a2.dtype, a2.device, op=op)  # (checked before any launch)
    check_disjoint(op, {"out": out, "activations": activations, "workspace": workspace},
                   {"gate_up": gate_up, "b": b_kn})
    config = _one_launch_config(a2, b_kn, op)
    if config is not None:
        kernel = with_occupancy(gemv_rows_silu_mul, config)
        return kernel(result.partition((1, int(config["BN"]))), gate, up, b_kn.T,
                      BK=int(config["BK"]), ACC=accumulate).then(
                          lambda r: result.tensor(r.z))
    if activations is not None:
        Output(activations, (m, half), a2.dtype, a2.device, name="activations", op=op)
    return silu_mul(gate_up, out=activations).then(
        lambda act: matmul(act, b, out=out, workspace=workspace, accumulate=accumulate))


@accepts_torch
def rms_norm_matmul(x: Any, norm_weight: Any, b: Any, *, eps: float = 1e-6, out: Any = None,
                    normed: Any = None, workspace: Any = None) -> DeviceOp:
    """``matmul(rms_norm(x, norm_weight, eps=eps), b)``: a decoder layer's RMSNorm, then the
    projection that reads it.

    At one row, where ``matmul`` runs this product as one GEMV launch (``gemv_rows``: the
    config the tuner chose, or the first), it is that one launch: every program takes the
    row's mean square itself and normalizes each K chunk as the weight streams by, so the
    normalized row is never written and the norm's launch is gone. Otherwise it is
    ``rms_norm`` into ``normed`` then ``matmul``. Either way each normalized value is rounded
    as ``rms_norm`` rounds it (the fused mean square is the same (1, K) row reduction).

    Args:
        x: the rows to normalize, ``(M, K)``, float16 or bfloat16.
        norm_weight: the norm's scale, ``(K,)``, ``x``'s dtype and device; None: a unit
            scale (for a weight ``b`` that already holds it, its column ``k`` times the
            scale's element ``k``: the one-launch form then reads no scale at all).
        b: the projection's weight, ``(N, K)``, ``x``'s dtype and device.
        eps: added to the mean square (a finite positive number).
        out: an ``(M, N)`` output to write in place; default a new one.
        normed: ``(M, K)`` scratch of ``x``'s dtype for the two-launch form (allocated when
            it is needed and left out). With ``out``, ``workspace`` and this, a call
            allocates nothing and records into a ``ts.CudaGraph`` (with ``norm_weight=None``
            the two-launch form reads a unit weight made on its first use for that K, dtype
            and device).
        workspace: as ``matmul``'s.

    Returns:
        A DeviceOp whose result is the ``(M, N)`` output (``out`` itself when given).

    Raises:
        ArgumentError: as ``matmul`` and ``rms_norm`` do: a non-tensor, a dtype, rank or device
            that does not fit, a ``norm_weight`` of another shape, a bad ``eps``, or an ``out``
            or ``normed`` of another shape or dtype; nothing is launched.
    """
    op, where = "rms_norm_matmul", caller_location()
    a2, b_kn, lead = _operands(x, b, "nk", MATMUL_DTYPES, op, where, a_name="x")
    if len(lead) != 1:
        raise ArgumentError(f"{op}: x has shape {lead + (a2.shape[1],)}; it needs (M, K)", where,
                            hint="reshape x to (M, K) rows (and the result back)")
    (m, k), n = a2.shape, b_kn.shape[1]
    weighted = norm_weight is not None
    norm = check_vector(norm_weight, "norm_weight", a2, op).reshape((k,)) if weighted else None
    eps = _check_eps(eps, op)
    # (every output checked before anything is launched)
    result = Output(out, (m, n), a2.dtype, a2.device, op=op)
    if normed is not None:
        Output(normed, (m, k), a2.dtype, a2.device, name="normed", op=op)
    check_disjoint(op, {"out": out, "normed": normed, "workspace": workspace},
                   {"x": a2, "norm_weight": norm, "b": b_kn})
    config = _one_launch_config(a2, b_kn, op) if _pow2_at_least(k) <= MAX_ROW_TILE else None
    if config is not None:
        kernel = with_occupancy(gemv_rows_normed, config)
        return kernel(result.partition((1, int(config["BN"]))), a2,
                      norm if weighted else a2.reshape((k,)), b_kn.T, float(k), eps,
                      BK=int(config["BK"]), KP=_pow2_at_least(k), WEIGHTED=weighted).then(
                          lambda r: result.tensor(r.z))
    unit = norm_weight if weighted else _unit_weight(k, a2.dtype, a2.device)
    return rms_norm(a2, unit, eps=eps, out=normed).then(
        lambda rows: matmul(rows, b, out=out, workspace=workspace))


#: (K, dtype, device) -> a (K,) tensor of ones: the unit weight of ``rms_norm_matmul``'s
#: two-launch form, made once (so that a call made while a graph records allocates nothing)
_UNIT_WEIGHTS: dict = {}


def _unit_weight(k: int, dtype: DType, device: Any) -> Tensor:
    key = (k, dtype.name, str(device))
    if key not in _UNIT_WEIGHTS:
        _UNIT_WEIGHTS[key] = full((k,), 1.0, dtype=dtype, device=device).sync()
    return _UNIT_WEIGHTS[key]


def _one_launch_config(a2: Tensor, b_kn: Tensor, op: str) -> Optional[dict]:
    """The GEMV config of ``a2 @ b_kn`` when the product is one ``gemv_rows`` launch (one
    row, and the config the tuner chose, or the first, writes directly), else None: where a
    fused variant of ``gemv_rows`` can replace the product and the launch before it."""
    (m, _), n = a2.shape, b_kn.shape[1]
    if path_of(m, n, a2.dtype, False) != "gemv":
        return None
    config = _skinny.launch_gemv.config_for(
        a2, b_kn, Output(None, (m, n), a2.dtype, a2.device, op=op), None, None)
    return config if _skinny.writes_directly(config) else None


@workspace_accepts_torch
def matmul_workspace(a: Any, b: Any, *, b_layout: str = "nk") -> Any:
    """A float32 scratch tensor (a lazy constructor: ``.sync()`` it) large enough for
    ``matmul(a, b, workspace=...)`` (and ``scaled_matmul``) whatever config the tuner picks;
    at least one element."""
    where = caller_location()
    a2, b_kn, _ = _operands(a, b, b_layout, MATMUL_DTYPES + SCALED_DTYPES, "matmul", where)
    size = _skinny.workspace_size(a2.shape[0], b_kn.shape[1], a2.shape[1], a2.dtype.itemsize)
    return empty((max(1, size),), float32, device=a2.device)


@accepts_torch
def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, b_layout: str = "nk",
                  out_dtype: DType = bfloat16, out: Any = None,
                  workspace: Any = None, fast_accumulation: bool = False) -> DeviceOp:
    """``(a @ b.T) * scale_a * scale_b`` for 8-bit float operands, like ``torch._scaled_mm``:
    exact products, f32 accumulation, the scales applied once in the epilogue.

    Args:
        a: (M, K) or (..., K), float8_e4m3fn or float8_e5m2.
        b: the weight (N, K) (``b_layout="nk"``) or (K, N) (``"kn"``), a's dtype.
        scale_a, scale_b: per-tensor float32 scales, device tensors of shape () or (1,) (read
            on the device: no host synchronization).
        b_layout: "nk" or "kn", see ``b``.
        out_dtype: bfloat16 (default), float16 or float32.
        out: a tensor of shape (..., N) and ``out_dtype`` to write in place.
        workspace: as for :func:`matmul`.
        fast_accumulation: like ``torch._scaled_mm``'s ``use_fast_accum``: on Hopper, keep
            the sum over K in the tensor cores' reduced-precision accumulator instead of
            adding each K tile's product into an f32 accumulator (``tc.mma``), which is faster
            and less precise. It applies to products of more than 16 rows (fewer rows stream
            the weight, and always accumulate precisely); the ``cpu`` interpreter computes
            the exact sum either way.

    Returns:
        A DeviceOp whose result is the (..., N) output (``out`` itself when given).

    Raises:
        ArgumentError: as :func:`matmul`, for a scale that is not one float32 value on the
            operands' device, and for a ``fast_accumulation`` that is not a bool; nothing is
            launched.
    """
    where = caller_location()
    if not isinstance(fast_accumulation, bool):
        raise ArgumentError(f"scaled_matmul: fast_accumulation={fast_accumulation!r} must be "
                            "True or False", where, hint="pass fast_accumulation=True to trade "
                            "precision for speed, as torch._scaled_mm's use_fast_accum does")
    a2, b_kn, lead = _operands(a, b, b_layout, SCALED_DTYPES, "scaled_matmul", where)
    scales = tuple(_scale_tensor(s, name, a2.device, "scaled_matmul", where)
                   for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b")))
    dtype = _out_dtype(out_dtype, bfloat16, "scaled_matmul", where)
    return _run(a2, b_kn, lead, out, dtype, "scaled_matmul", scales, workspace,
                fast_accumulation=fast_accumulation)
