"""The reference implementations the suite compares against, built only when their library is
installed: Triton kernels (element-wise add, a standard grouped tiled GEMM) and cuTile Python
kernels (element-wise add, tiled and persistent GEMM). Each ``*_launcher`` returns a function
that enqueues one launch on the current torch stream, or raises ``Unavailable`` saying why.
"""

from __future__ import annotations

import functools
from typing import Any, Callable


class Unavailable(Exception):
    """A reference cannot run here (library missing or failing); the column is skipped."""


# -- Triton -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _triton_kernels() -> dict:
    try:
        import triton
        import triton.language as tl
    except ImportError as err:
        raise Unavailable(f"triton not installed ({err})") from err

    @triton.jit
    def add(x, y, z, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(z + offs, tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask),
                 mask=mask)

    @triton.jit
    def copy(x, z, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(z + offs, tl.load(x + offs, mask=mask), mask=mask)

    @triton.jit
    def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr,
               BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        per_group = GROUP * tiles_n
        first_m = (pid // per_group) * GROUP
        rows = min(tiles_m - first_m, GROUP)
        pid_m = first_m + (pid % per_group) % rows
        pid_n = (pid % per_group) // rows
        rm = (pid_m * BM + tl.arange(0, BM)) % M
        rn = (pid_n * BN + tl.arange(0, BN)) % N
        rk = tl.arange(0, BK)
        pa = a + rm[:, None] * sam + rk[None, :] * sak
        pb = b + rk[:, None] * sbk + rn[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            left = K - k * BK
            acc = tl.dot(tl.load(pa, mask=rk[None, :] < left, other=0.0),
                         tl.load(pb, mask=rk[:, None] < left, other=0.0), acc)
            pa += BK * sak
            pb += BK * sbk
        cm = pid_m * BM + tl.arange(0, BM)
        cn = pid_n * BN + tl.arange(0, BN)
        tl.store(c + cm[:, None] * scm + cn[None, :] * scn, acc.to(c.dtype.element_ty),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    return {"add": add, "copy": copy, "matmul": matmul, "cdiv": triton.cdiv}


def triton_add_launcher(x: Any, y: Any, z: Any, block: int = 1024) -> Callable[[], None]:
    k = _triton_kernels()
    n = x.numel()
    grid = (k["cdiv"](n, block),)
    return lambda: k["add"][grid](x, y, z, n, BLOCK=block)


def triton_copy_launcher(x: Any, z: Any, block: int = 4096) -> Callable[[], None]:
    """A copy kernel on the SMs (torch's ``copy_`` may use the copy engines instead)."""
    k = _triton_kernels()
    n = x.numel()
    grid = (k["cdiv"](n, block),)
    return lambda: k["copy"][grid](x, z, n, BLOCK=block)


# (BM, BN, BK, warps, stages): the configurations of Triton's own tutorial for Hopper-sized
# f16 GEMMs; the suite times each and keeps the best.
TRITON_GEMM_CONFIGS = ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
                       (128, 128, 32, 4, 4), (64, 256, 32, 4, 4))


def triton_matmul_launcher(a: Any, b: Any, c: Any, config: tuple) -> Callable[[], None]:
    k = _triton_kernels()
    bm, bn, bk, warps, stages = config
    m, kk = a.shape
    n = b.shape[1]
    grid = (k["cdiv"](m, bm) * k["cdiv"](n, bn),)
    return lambda: k["matmul"][grid](a, b, c, m, n, kk, a.stride(0), a.stride(1), b.stride(0),
                                     b.stride(1), c.stride(0), c.stride(1), BM=bm, BN=bn,
                                     BK=bk, GROUP=8, num_warps=warps, num_stages=stages)


# -- cuTile Python --------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _cutile() -> Any:
    try:
        import cuda.tile as ct
    except ImportError as err:
        raise Unavailable(f"cuda-tile not installed ({err})") from err
    globals()["ct"] = ct  # the kernels' annotations (ct.Constant[int]) are looked up here
    return ct


@functools.lru_cache(maxsize=None)
def _cutile_kernels(num_ctas: int) -> dict:
    ct = _cutile()
    options = {"num_ctas": num_ctas} if num_ctas > 1 else {}

    def add(x, y, z, TILE: ct.Constant[int]):
        b = ct.bid(0)
        ct.store(z, index=(b,), tile=ct.load(x, index=(b,), shape=(TILE,))
                 + ct.load(y, index=(b,), shape=(TILE,)))

    def tiled(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
        bm, bn = ct.bid(0), ct.bid(1)
        acc = ct.full((TM, TN), 0, dtype=ct.float32)
        for k in range(ct.num_tiles(a, axis=1, shape=(TM, TK))):
            acc = ct.mma(ct.load(a, index=(bm, k), shape=(TM, TK),
                                 padding_mode=ct.PaddingMode.ZERO),
                         ct.load(b, index=(k, bn), shape=(TK, TN),
                                 padding_mode=ct.PaddingMode.ZERO), acc)
        ct.store(c, index=(bm, bn), tile=ct.astype(acc, c.dtype))

    def persistent(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int],
                   TK: ct.Constant[int]):
        tiles_m = ct.num_tiles(c, axis=0, shape=(TM, TN))
        tiles_n = ct.num_tiles(c, axis=1, shape=(TM, TN))
        steps = ct.num_tiles(a, axis=1, shape=(TM, TK))
        for t in range(ct.bid(0), tiles_m * tiles_n, ct.num_blocks(0)):
            band = t // (8 * tiles_n)  # bands of 8 tile rows, walked column by column
            rows = tiles_m - band * 8
            rows = 8 if rows > 8 else rows
            bm = band * 8 + (t % (8 * tiles_n)) % rows
            bn = (t % (8 * tiles_n)) // rows
            acc = ct.full((TM, TN), 0, dtype=ct.float32)
            for k in range(steps):
                acc = ct.mma(ct.load(a, index=(bm, k), shape=(TM, TK),
                                     padding_mode=ct.PaddingMode.ZERO),
                             ct.load(b, index=(k, bn), shape=(TK, TN),
                                     padding_mode=ct.PaddingMode.ZERO), acc)
            ct.store(c, index=(bm, bn), tile=ct.astype(acc, c.dtype))

    return {name: ct.kernel(fn, **options) for name, fn in
            (("add", add), ("tiled", tiled), ("persistent", persistent))}


def cutile_add_launcher(x: Any, y: Any, z: Any, tile: int = 1024) -> Callable[[], None]:
    import torch
    ct = _cutile()
    kernel = _cutile_kernels(1)["add"]
    grid = ((x.numel() + tile - 1) // tile, 1, 1)
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, (x, y, z, tile))


# (TM, TN, TK, num_ctas): cuTile Python's GEMM sample sizes for Hopper; best one is kept.
CUTILE_GEMM_CONFIGS = ((128, 128, 64, 1), (128, 256, 64, 2), (256, 128, 64, 2),
                       (128, 128, 64, 2))


def cutile_matmul_launcher(a: Any, b: Any, c: Any, config: tuple, style: str,
                           programs: int) -> Callable[[], None]:
    import torch
    ct = _cutile()
    tm, tn, tk, ctas = config
    kernel = _cutile_kernels(ctas)[style]
    m, n = c.shape
    if style == "tiled":
        grid = ((m + tm - 1) // tm, (n + tn - 1) // tn, 1)
    else:
        tiles = ((m + tm - 1) // tm) * ((n + tn - 1) // tn)
        grid = (min(programs, tiles) // ctas * ctas or ctas, 1, 1)
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, (a, b, c, tm, tn, tk))


# -- cuTile Python: the row kernels of the kernel library, same algorithm --------------------

@functools.lru_cache(maxsize=None)
def _cutile_row_kernels(occupancy: int) -> dict:
    ct = _cutile()
    options = {"occupancy": occupancy} if occupancy else {}
    neg_inf = getattr(ct.PaddingMode, "NEG_INF", ct.PaddingMode.ZERO)

    def softmax(x, z, R: ct.Constant[int], N: ct.Constant[int]):
        b = ct.bid(0)
        row = ct.astype(ct.load(x, index=(b, 0), shape=(R, N), padding_mode=neg_inf),
                        ct.float32)
        e = ct.exp(row - ct.max(row, axis=1, keepdims=True))
        ct.store(z, index=(b, 0), tile=ct.astype(e / ct.sum(e, axis=1, keepdims=True),
                                                 z.dtype))

    def rms_norm(x, w, z, eps: float, R: ct.Constant[int], N: ct.Constant[int]):
        b = ct.bid(0)
        row = ct.astype(ct.load(x, index=(b, 0), shape=(R, N),
                                padding_mode=ct.PaddingMode.ZERO), ct.float32)
        weight = ct.astype(ct.load(w, index=(0,), shape=(N,), padding_mode=ct.PaddingMode.ZERO),
                           ct.float32)
        inv = ct.rsqrt(ct.sum(row * row, axis=1, keepdims=True) / x.shape[1] + eps)
        ct.store(z, index=(b, 0), tile=ct.astype(row * inv * ct.reshape(weight, (1, N)),
                                                 z.dtype))

    return {name: ct.kernel(fn, **options) for name, fn in
            (("softmax", softmax), ("rms_norm", rms_norm))}


def cutile_softmax_launcher(x: Any, z: Any, rows: int, occupancy: int = 0
                            ) -> Callable[[], None]:
    """cuTile Python's row softmax of a 2-D torch tensor, ``rows`` rows per program, with the
    ``occupancy`` hint (0: none)."""
    import torch
    ct = _cutile()
    kernel = _cutile_row_kernels(occupancy)["softmax"]
    n = 1 << (x.shape[1] - 1).bit_length()
    grid = ((x.shape[0] + rows - 1) // rows, 1, 1)
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, (x, z, rows, n))


def cutile_rms_norm_launcher(x: Any, w: Any, z: Any, eps: float, rows: int,
                             occupancy: int = 0) -> Callable[[], None]:
    """cuTile Python's RMSNorm (f32 statistics, ``z = x * rsqrt(mean(x**2) + eps) * w``)."""
    import torch
    ct = _cutile()
    kernel = _cutile_row_kernels(occupancy)["rms_norm"]
    n = 1 << (x.shape[1] - 1).bit_length()
    grid = ((x.shape[0] + rows - 1) // rows, 1, 1)
    return lambda: ct.launch(torch.cuda.current_stream(), grid, kernel, (x, w, z, eps, rows, n))
