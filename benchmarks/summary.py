"""The headline tables of a results directory, in Markdown, read back from its CSV files
(``python -m benchmarks summary benchmarks/results/<gpu>-<date>``): what README's
"Performance" section shows. Needs only the standard library."""

from __future__ import annotations

import csv
from pathlib import Path


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _value(rows: list[dict], **match) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in match.items()):
            return r
    return None


def _fmt(x: str | None, digits: int = 3) -> str:
    if not x:
        return "-"
    try:
        return f"{float(x):.{digits}g}" if float(x) < 100 else f"{float(x):.0f}"
    except ValueError:
        return x


def elementwise_table(rows: list[dict]) -> list[str]:
    lines = ["| N | safe TB/s | unchecked | torch.add | Triton | cuTile | copy ceiling | "
             "safe / torch.add | safe / copy | safe / unchecked | same cubin |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    sizes = sorted({int(r["size"]) for r in rows if r["benchmark"] == "elementwise_add"})
    for n in sizes:
        s = str(n)

        def get(variant, reference="torch.add", field="value"):
            r = _value(rows, benchmark="elementwise_add", size=s, variant=variant,
                       reference=reference)
            return r[field] if r else None
        same = _value(rows, benchmark="elementwise_safety", size=s)
        lines.append(
            f"| 2^{n.bit_length() - 1} | {_fmt(get('safe'))} | {_fmt(get('unchecked'))} | "
            f"{_fmt(get('safe', field='reference_value'))} | {_fmt(get('triton'))} | "
            f"{_fmt(get('cutile'))} | {_fmt(get('copy_ceiling'))} | "
            f"{_fmt(get('safe', field='ratio'))} | "
            f"{_fmt(get('safe', 'copy_ceiling', 'ratio'))} | "
            f"{_fmt(get('safe', 'unchecked', 'ratio'))} | "
            f"{'yes' if same and float(same['value']) == 1 else 'no' if same else '-'} |")
    return lines


def gemm_table(rows: list[dict]) -> list[str]:
    lines = ["| dtype | M x N x K | persistent | tiled | unchecked | cuBLAS | Triton | cuTile | "
             "best ours / cuBLAS | persistent / unchecked | best ours / cuTile | same cubin |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        if r["benchmark"] == "gemm" and (r["dtype"], r["size"]) not in keys:
            keys.append((r["dtype"], r["size"]))
    for dtype, size in keys:
        def get(variant, reference="cublas", field="value"):
            r = _value(rows, benchmark="gemm", dtype=dtype, size=size, variant=variant,
                       reference=reference)
            return r[field] if r else None
        ours = [float(v) for v in (get("persistent"), get("tiled")) if v]
        best = max(ours) if ours else None
        cublas = get("persistent", field="reference_value")
        cutile = get("cutile")
        same = _value(rows, benchmark="gemm_safety", dtype=dtype, size=size)
        lines.append(
            f"| {dtype} | {size} | {_fmt(get('persistent'))} | {_fmt(get('tiled'))} | "
            f"{_fmt(get('unchecked'))} | {_fmt(cublas)} | {_fmt(get('triton'))} | "
            f"{_fmt(cutile)} | "
            f"{f'{best / float(cublas):.3f}' if best and cublas else '-'} | "
            f"{_fmt(get('persistent', 'unchecked', 'ratio'))} | "
            f"{f'{best / float(cutile):.3f}' if best and cutile else '-'} | "
            f"{'yes' if same and float(same['value']) == 1 else 'no' if same else '-'} |")
    return lines


def modes_table(rows: list[dict]) -> list[str]:
    lines = ["| N | mode | tilesafe us/op | reference | reference us/op |",
             "|---|---|---|---|---|"]
    for r in rows:
        if r["size"] == "1000":
            lines.append(f"| {r['size']} | {r['variant']} | {_fmt(r['value'])} | "
                         f"{r['reference'] or '-'} | {_fmt(r['reference_value'])} |")
    return lines


def histogram_table(rows: list[dict]) -> list[str]:
    lines = ["| bins | atomic Gelem/s | onehot | torch.bincount | torch.scatter_add | "
             "best ours / bincount | best ours / scatter_add |", "|---|---|---|---|---|---|---|"]
    sizes = list(dict.fromkeys(r["size"] for r in rows if r["benchmark"] == "histogram"))
    for size in sizes:
        def get(variant, reference="torch.bincount", field="value"):
            r = _value(rows, benchmark="histogram", size=size, variant=variant,
                       reference=reference)
            return r[field] if r else None
        ours = [v for v in ("atomic", "onehot") if get(v)]
        best = max(ours, key=lambda v: float(get(v)), default=None)
        lines.append(
            f"| {size.rpartition('bins=')[2]} | {_fmt(get('atomic'))} | {_fmt(get('onehot'))} | "
            f"{_fmt(get('atomic', field='reference_value'))} | "
            f"{_fmt(get('torch.scatter_add'))} | "
            f"{_fmt(get(best, field='ratio')) if best else '-'} | "
            f"{_fmt(get(best, 'torch.scatter_add', 'ratio')) if best else '-'} |")
    return lines


def summary(directory: Path) -> str:
    parts = []
    ew = _read(directory / "elementwise.csv")
    if ew:
        parts += ["Element-wise add, f32 (TB/s):", ""] + elementwise_table(ew) + [""]
    gm = _read(directory / "gemm.csv")
    if gm:
        parts += ["GEMM, f32 accumulate (TFLOP/s):", ""] + gemm_table(gm) + [""]
    hg = _read(directory / "histogram.csv")
    if hg:
        parts += ["Histogram of 2^24 int32 values (Gelem/s):", ""] + histogram_table(hg) + [""]
    md = _read(directory / "execution_modes.csv")
    if md:
        parts += ["Launch modes at N = 1000 (microseconds per op, lower is better):", ""] + \
            modes_table(md) + [""]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    for d in argv or ["benchmarks/results/latest"]:
        print(summary(Path(d)))
    return 0
