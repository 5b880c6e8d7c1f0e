"""Tune the kernel library on the shapes that matter, for the shipped table of a GPU
architecture (``src/tilesafe/kernels/tuned/<arch>.json``)::

    tilesafe tune benchmarks/tune_kernels.py --device cuda:0 \\
        --export src/tilesafe/kernels/tuned/sm_90.json --arch sm_90

``tune(device)`` calls each tuned library function once per shape below (each call of a new
key tunes it and stores the winner); ``--export`` then adds the stored winners to the table.
A key not covered here is tuned on the user's first call of it. ``TILESAFE_TUNE_QUICK=1`` keeps
a few shapes (to check the script).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Optional

HIDDEN = (1024, 2048, 4096, 8192, 16384)
ROWS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
DTYPES = ("bfloat16", "float16")
#: (M, N, K) of linear layers: decode (M 1-16), prefill (M 512-4096)
MATMULS = [(m, n, k) for m in (1, 4, 16, 512, 4096)
           for n, k in ((4096, 4096), (12288, 4096), (4096, 12288), (151936, 4096))]
#: (batch, heads, kv heads, sequence, head dim, causal)
PREFILL = [(1, 32, 8, s, d, True) for s in (512, 2048, 8192) for d in (64, 128)]
#: (batch, heads, kv heads, cache length, head dim)
DECODE = [(b, 32, 8, n, 128) for b in (1, 8, 64) for n in (1024, 8192, 32768)]


def _quick() -> bool:
    return os.environ.get("TILESAFE_TUNE_QUICK", "0") == "1"


def shapes(device: str = "cuda:0") -> Iterable[tuple[str, Callable[[], Any]]]:
    """``(label, call)`` for every library call ``tune`` makes (the calls build their inputs
    when run, so listing them allocates nothing)."""
    import tilesafe as ts
    from tilesafe import kernels as K

    def tensor(shape: tuple, dtype: str, seed: int) -> Any:
        return ts.randn(shape, dtype=getattr(ts, dtype), seed=seed, device=device).sync()

    hidden, rows, dtypes = (HIDDEN[:2], ROWS[:2], DTYPES[:1]) if _quick() else \
        (HIDDEN, ROWS, DTYPES)
    for dtype in dtypes:
        for h in hidden:
            for r in rows:
                label = f"{dtype} rows={r} hidden={h}"
                yield f"rms_norm {label}", lambda r=r, h=h, d=dtype: K.rms_norm(
                    tensor((r, h), d, 0), tensor((h,), d, 1))
                yield f"add_rms_norm {label}", lambda r=r, h=h, d=dtype: K.add_rms_norm(
                    tensor((r, h), d, 0), tensor((r, h), d, 2), tensor((h,), d, 1))
                yield f"layer_norm {label}", lambda r=r, h=h, d=dtype: K.layer_norm(
                    tensor((r, h), d, 0), tensor((h,), d, 1), tensor((h,), d, 3))
                yield f"softmax {label}", lambda r=r, h=h, d=dtype: K.softmax(
                    tensor((r, h), d, 0))
                yield f"silu_mul {label}", lambda r=r, h=h, d=dtype: K.silu_mul(
                    tensor((r, h), d, 0), tensor((r, h), d, 2))
                yield f"gelu {label}", lambda r=r, h=h, d=dtype: K.gelu(tensor((r, h), d, 0))
        for m, n, k in (MATMULS[:1] if _quick() else MATMULS):
            yield f"matmul {dtype} {m}x{n}x{k}", lambda m=m, n=n, k=k, d=dtype: K.matmul(
                tensor((m, k), d, 0), tensor((n, k), d, 1))
        for b, hq, hkv, s, d, causal in (PREFILL[:1] if _quick() else PREFILL):
            yield (f"flash_attention {dtype} b={b} s={s} d={d}",
                   lambda b=b, hq=hq, hkv=hkv, s=s, d=d, c=causal, t=dtype: K.flash_attention(
                       tensor((b, hq, s, d), t, 0), tensor((b, hkv, s, d), t, 1),
                       tensor((b, hkv, s, d), t, 2), causal=c))
        for b, hq, hkv, n, d in (DECODE[:1] if _quick() else DECODE):
            yield (f"decode_attention {dtype} b={b} n={n} d={d}",
                   lambda b=b, hq=hq, hkv=hkv, n=n, d=d, t=dtype: K.decode_attention(
                       tensor((b, hq, d), t, 0), tensor((b, hkv, n, d), t, 1),
                       tensor((b, hkv, n, d), t, 2),
                       ts.full((b,), n, dtype=ts.int32, device=device).sync()))


def tune(device: Optional[str] = None) -> None:
    """Call every shape once on ``device`` (default ``cuda:0``); a failing call is reported
    and the others go on."""
    failed = []
    for label, call in shapes(device or "cuda:0"):
        print(f"tune: {label}", flush=True)
        try:
            call().sync()
        except Exception as err:  # noqa: BLE001 (reported; the other shapes go on)
            failed.append(f"{label}: {type(err).__name__}: {err}")
    for line in failed:
        print(f"tune: FAILED {line}", flush=True)
