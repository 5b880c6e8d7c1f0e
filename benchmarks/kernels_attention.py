"""Attention kernels of ``tilesafe.kernels`` against torch, measured in one process:

* prefill, ``flash_attention``: S = 512 ... 16384 (batch 16384 // S), 32 query heads, GQA
  groups 4 and 8, head dims 64 and 128, causal and not, f16, against
  ``F.scaled_dot_product_attention`` (``enable_gqa``, else K/V repeated beforehand). TFLOP/s
  count 4·B·Hq·S²·d (half of it causal). Every config of the launch's autotune list is timed
  (``tilesafe BMxBN``); ``tilesafe`` is the one the library picks today (its first).
* decode, ``decode_attention``: one token against caches of 1k ... 32k keys, batch 1 ... 64,
  32 query heads over 8 KV heads, d 128, f16: GB/s of K/V bytes read, against a
  device-to-device copy of the same bytes (read + write bytes / time) and SDPA's time on the
  same caches.

The timed launches are the library's own kernels with the arguments the public functions give
them (recorded into CUDA graphs, which take launches, not the functions' result steps); each
variant's output is poisoned, computed once and checked against SDPA first, and the public
function is checked the same way.

    python -m benchmarks kernels_attention --device cuda:0 --out DIR [--quick]
"""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any, Callable, Iterator

import tilesafe as ts
from tilesafe.kernels import decode_attention, flash_attention

# (the package's ``decode_attention`` attribute is the function: the modules by their names)
attention_args = importlib.import_module("tilesafe.kernels._attention_args")
prefill_module = importlib.import_module("tilesafe.kernels.attention")
decode_module = importlib.import_module("tilesafe.kernels.decode_attention")

from . import _harness as h

Q_HEADS = 32
PREFILL_TOKENS = 16384
PREFILL_SEQS = (512, 1024, 2048, 4096, 8192, 16384)
PREFILL_HEAD_DIMS = (64, 128)
PREFILL_GROUPS = (4, 8)
QUICK_PREFILL = ((4096, 128, 4, False), (4096, 128, 4, True))
DECODE_KV_HEADS, DECODE_HEAD_DIM = 8, 128
DECODE_LENS = (1024, 4096, 16384, 32768)
DECODE_BATCHES = (1, 8, 32, 64)
QUICK_DECODE = ((1, 4096), (32, 16384))
DTYPE = "float16"
TOLERANCE = 5e-3


def prefill_cases(quick: bool) -> list:
    """(S, d, group, causal) of every prefill measurement."""
    if quick:
        return list(QUICK_PREFILL)
    return [(s, d, g, c) for d in PREFILL_HEAD_DIMS for g in PREFILL_GROUPS
            for c in (False, True) for s in PREFILL_SEQS]


def decode_cases(quick: bool) -> list:
    """(batch, kv length) of every decode measurement."""
    return list(QUICK_DECODE) if quick else [(b, n) for b in DECODE_BATCHES for n in DECODE_LENS]


def prefill_flops(batch: int, seq: int, d: int, causal: bool) -> float:
    flops = 4.0 * batch * Q_HEADS * seq * seq * d
    return flops / 2 if causal else flops


def _sdpa(F: Any, q: Any, k: Any, v: Any, causal: bool) -> Callable[[], Any]:
    """SDPA with grouped heads: ``enable_gqa`` where torch has it, else K/V repeated now."""
    try:
        F.scaled_dot_product_attention(q[:1, :, :1], k[:1, :, :1], v[:1, :, :1],
                                       enable_gqa=True)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                      enable_gqa=True)
    except TypeError:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def flash_launch(o3: Any, q3: Any, k3: Any, v3: Any, qk_scale: float, kv_heads: int,
                 bm: int, bn: int, causal: bool, hints: Any = None) -> Any:
    """The launch ``flash_attention`` makes, for flattened ``(batch*heads, S, d)`` tensors
    (recordable into a graph: no result step)."""
    return prefill_module.kernel_for(hints)(
        ts.borrow_mut(o3).partition((1, bm, q3.shape[-1])), q3, k3, v3, qk_scale, Q_HEADS,
        kv_heads, BN=bn, CAUSAL=causal)


def decode_launches(o3: Any, parts: Any, lses: Any, q3: Any, k3: Any, v3: Any, seq_lens: Any,
                    qk_scale: float, kv_heads: int, block: int,
                    hints: Any = None) -> Iterator[Any]:
    """The two launches ``decode_attention`` makes, into caller-made scratch tensors
    ``parts`` ``(programs, splits*G, d)`` and ``lses`` ``(programs, splits*G, 1)``; the
    second is made when the first has been driven or recorded (it reads what the first
    writes)."""
    g, d = decode_module.group_rows(q3.shape[1]), q3.shape[-1]
    yield decode_module._partial_for(hints)(
        ts.borrow_mut(parts).partition((1, g, d)), ts.borrow_mut(lses).partition((1, g, 1)),
        q3, k3, v3, seq_lens, qk_scale, kv_heads, BN=block)
    splits = parts.shape[1] // g
    columns = decode_module.merge_columns(splits, g, d)
    yield decode_module.decode_attention_merge_kernel(
        ts.borrow_mut(o3).partition((1, g, columns)), parts, lses,
        SP=decode_module.args.next_power_of_two(splits))


def _check(name: str, view: Any, want: Any) -> None:
    err = h.relative_error(view, want)
    if not err < TOLERANCE:
        raise AssertionError(f"{name}: relative error {err} against SDPA")


def _prefill(rows: list, plots: dict, device: str, stream: Any, ts_stream: Any, seq: int,
             d: int, group: int, causal: bool, quick: bool) -> None:
    import torch
    import torch.nn.functional as F
    batch, kv_heads = max(1, PREFILL_TOKENS // seq), Q_HEADS // group
    generator = torch.Generator(device=device).manual_seed(seq + d + group)
    (q, qv), (k, kv), (v, vv) = (h.shared(shape, DTYPE, device) for shape in (
        (batch, Q_HEADS, seq, d), (batch, kv_heads, seq, d), (batch, kv_heads, seq, d)))
    for view in (qv, kv, vv):
        h.fill_random(view, generator)
    sdpa = _sdpa(F, qv, kv, vv, causal)
    with torch.cuda.stream(stream):
        want = sdpa()
    o, ov = h.shared((batch, Q_HEADS, seq, d), DTYPE, device)
    h.poison(ov)
    flash_attention(q, k, v, causal=causal, out=o).sync_on(ts_stream)
    _check(f"flash_attention S={seq} d={d}", ov, want)

    flops = prefill_flops(batch, seq, d, causal)
    reps = h.repetitions(flops / 400e12)
    q3, k3, v3 = (t.reshape((t.shape[0] * t.shape[1], seq, d)) for t in (q, k, v))
    o3 = o.reshape(q3.shape)
    qk_scale = d ** -0.5 * attention_args.LOG2E
    configs = prefill_module._launch_flash.configs
    runs: dict = {}
    names = []
    for config in (configs[:1] if quick else configs):
        bm = prefill_module._tile(config["BM"], seq)
        bn = prefill_module._tile(config["BN"], seq)
        hints = config.get("hints")
        name = f"tilesafe {bm}x{bn}" + "".join(f",{k}={v}" for k, v in (hints or {}).items())
        if name in runs:
            continue

        def launch(bm=bm, bn=bn, hints=hints):
            return flash_launch(o3, q3, k3, v3, qk_scale, kv_heads, bm, bn, causal, hints)
        h.poison(ov)
        launch().sync_on(ts_stream)
        _check(name, ov, want)
        runs[name] = h.tilesafe_graph(ts_stream, lambda f=launch: (f() for _ in range(reps)))
        names.append(name)

    def torch_body():
        for _ in range(reps):
            sdpa()
    runs["sdpa"] = h.torch_graph(stream, torch_body)
    timed = h.interleaved_ms(runs, stream, rounds=11 if quick else 21)
    tflops = {n: flops * reps / (t[0] * 1e-3) / 1e12 for n, t in timed.items()}
    size = f"S{seq} d{d} g{group}" + (" causal" if causal else "")
    rows.append(h.Row("flash_attention", "f16", size, "tilesafe", tflops[names[0]], "TFLOP/s",
                      "sdpa", tflops["sdpa"]))
    best = max(names, key=tflops.get)
    rows.append(h.Row("flash_attention_best_config", "f16", size, best, tflops[best],
                      "TFLOP/s", "sdpa", tflops["sdpa"]))
    for name in names:
        rows.append(h.Row("flash_attention_config", "f16", size, name, tflops[name],
                          "TFLOP/s", "sdpa", tflops["sdpa"]))
    key = f"d{d} g{group}" + (" causal" if causal else "")
    plots.setdefault(key, {}).setdefault("tilesafe", []).append((seq, tflops[names[0]]))
    plots[key].setdefault("sdpa", []).append((seq, tflops["sdpa"]))
    print(f"  flash_attention {size}: " + ", ".join(f"{n} {t:.0f}" for n, t in tflops.items())
          + " TFLOP/s", flush=True)


def _decode(rows: list, plots: dict, device: str, stream: Any, ts_stream: Any, batch: int,
            length: int, quick: bool) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F
    d, kv_heads = DECODE_HEAD_DIM, DECODE_KV_HEADS
    group = Q_HEADS // kv_heads
    cache_bytes = 2 * batch * kv_heads * length * d * 2  # K and V, f16
    sets = max(1, min(16, math.ceil(2 * h.L2_BYTES / cache_bytes)))
    generator = torch.Generator(device=device).manual_seed(batch + length)
    inputs = []
    for _ in range(sets):
        (q, qv), (k, kv), (v, vv) = (h.shared(shape, DTYPE, device) for shape in (
            (batch, Q_HEADS, d), (batch, kv_heads, length, d), (batch, kv_heads, length, d)))
        for view in (qv, kv, vv):
            h.fill_random(view, generator)
        inputs.append((q, qv, k, kv, v, vv))
    seq_lens = ts.tensor(np.full(batch, length, np.int32), device=device).sync()
    q, qv, k, kv, v, vv = inputs[0]
    sdpa = _sdpa(F, qv[:, :, None], kv, vv, False)
    with torch.cuda.stream(stream):
        want = sdpa()[:, :, 0]
    o, ov = h.shared((batch, Q_HEADS, d), DTYPE, device)
    h.poison(ov)
    decode_attention(q, k, v, seq_lens, out=o).sync_on(ts_stream)
    _check(f"decode_attention b{batch} kv{length}", ov, want)

    programs = batch * kv_heads
    g = decode_module.group_rows(group)
    o3 = o.reshape((programs, group, d))
    qk_scale = d ** -0.5 * attention_args.LOG2E
    flat = [(q_.reshape((programs, group, d)), k_.reshape((programs, length, d)),
             v_.reshape((programs, length, d))) for q_, _, k_, _, v_, _ in inputs]
    reps = h.repetitions(cache_bytes / 2.5e12)
    configs = decode_module._launch_decode.configs
    runs, split_of = {}, {}
    for index, config in enumerate(configs[:1] if quick else configs):
        block, hints = config["BN"], config.get("hints")
        splits = decode_module.choose_splits(programs, length, block,
                                             decode_module.sm_count(q.device))
        parts = ts.empty((programs, splits * g, d), ts.float32, device=device).sync()
        lses = ts.empty((programs, splits * g, 1), ts.float32, device=device).sync()

        def launches(i, block=block, hints=hints, parts=parts, lses=lses):
            q3, k3, v3 = flat[i % sets]
            return decode_launches(o3, parts, lses, q3, k3, v3, seq_lens, qk_scale, kv_heads,
                                   block, hints)

        h.poison(ov)
        for op in launches(0):
            op.sync_on(ts_stream)
        _check(f"decode kernels {config}", ov, want)
        name = "tilesafe" if index == 0 else "tilesafe " + _config_label(config)
        split_of[name] = splits
        runs[name] = h.tilesafe_graph(
            ts_stream, lambda launches=launches: (op for i in range(reps) for op in launches(i)))
    sdpa_by_set = [_sdpa(F, s[1][:, :, None], s[3], s[5], False) for s in inputs]
    copies = [(torch.empty_like(s[3]), torch.empty_like(s[5])) for s in inputs]

    def sdpa_body():
        for i in range(reps):
            sdpa_by_set[i % sets]()

    def copy_body():
        for i in range(reps):
            kd, vd = copies[i % sets]
            kd.copy_(inputs[i % sets][3])
            vd.copy_(inputs[i % sets][5])
    runs["sdpa"] = h.torch_graph(stream, sdpa_body)
    runs["copy"] = h.torch_graph(stream, copy_body)
    timed = h.interleaved_ms(runs, stream, rounds=11 if quick else 21)
    seconds = {n: t[0] * 1e-3 / reps for n, t in timed.items()}
    copy_bw = 2 * cache_bytes / seconds["copy"] / 1e9
    size = f"b{batch} kv{length}"
    for name, splits in split_of.items():
        ours_bw = cache_bytes / seconds[name] / 1e9
        rows.append(h.Row("decode_attention", "f16", size, f"{name} (splits {splits})",
                          ours_bw, "GB/s", "copy", copy_bw))
        rows.append(h.Row("decode_attention_time", "f16", size, f"{name} (splits {splits})",
                          seconds[name] * 1e6, "us", "sdpa", seconds["sdpa"] * 1e6,
                          lower_is_better=True))
        if name == "tilesafe":
            plots.setdefault(f"batch {batch}", []).append((length, ours_bw / copy_bw))
        print(f"  decode_attention {size} {name}: {ours_bw:.0f} GB/s ({ours_bw / copy_bw:.2f} "
              f"of copy {copy_bw:.0f}), {seconds[name] * 1e6:.1f} us vs sdpa "
              f"{seconds['sdpa'] * 1e6:.1f} us, splits {splits}", flush=True)


def _config_label(config: dict) -> str:
    hints = config.get("hints") or {}
    return f"BN{config['BN']}" + "".join(f" {k}={v}" for k, v in hints.items())


def run(out: Path, device: str = "cuda:0", quick: bool = False) -> list:
    import torch
    stream = torch.cuda.Stream()
    ts_stream = ts.Stream.wrap(stream, device)
    rows: list = []
    prefill_plots: dict = {}
    decode_plots: dict = {}
    for seq, d, group, causal in prefill_cases(quick):
        _prefill(rows, prefill_plots, device, stream, ts_stream, seq, d, group, causal, quick)
        torch.cuda.empty_cache()
    for batch, length in decode_cases(quick):
        _decode(rows, decode_plots, device, stream, ts_stream, batch, length, quick)
        torch.cuda.empty_cache()
    out.mkdir(parents=True, exist_ok=True)
    h.write_csv(rows, out / "kernels_attention.csv")
    h.print_table("Attention, f16 (same run)", rows)
    for key, series in prefill_plots.items():
        h.plot(out / f"kernels_attention_prefill_{key.replace(' ', '_')}.png",
               f"flash_attention, {key}, f16", series, "S", "TFLOP/s")
    h.plot(out / "kernels_attention_decode.png", "decode_attention: K/V GB/s over copy GB/s",
           decode_plots, "KV length", "fraction of copy bandwidth")
    return rows


def main(argv=None) -> int:
    return h.standalone(run, __doc__, "kernels_attention", argv)


if __name__ == "__main__":
    raise SystemExit(main())
