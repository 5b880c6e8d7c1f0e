"""All-reduce bandwidth through ``tilesafe.distributed`` against ``torch.distributed`` directly,
on the same buffers in the same run (one process per GPU, NCCL), interleaved.

    torchrun --nproc-per-node N -m benchmarks.allreduce [--sizes 1M,16M,256M,1G] [--out DIR]

For each size (bytes of a bf16 buffer): the median time of ``--runs`` back-to-back
all-reduces after a warm-up, timed with CUDA events on the stream they run on, for tilesafe
(ops chained with ``.then`` on one tilesafe stream) and for torch (``dist.all_reduce`` on
torch's current stream); the algorithm bandwidth (bytes / time) and the bus bandwidth
(``2 (n - 1) / n`` times it, NCCL's convention). Rank 0 prints the table and writes
``allreduce.csv``. With one process the bus bandwidth is 0 by definition (nothing crosses a
link): a run checks the script, not a network.

NVLink multicast stays off (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str) -> int:
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1:] in UNITS else int(text)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.allreduce", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,16M,256M,1G")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    import torch
    import torch.distributed as dist
    import tilesafe as ts
    from tilesafe import distributed as D
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{local}"
    stream = ts.Stream(device)
    ours_stream = torch.cuda.ExternalStream(stream.native_address, device=device)
    rows = []
    for size in (_size(s) for s in args.sizes.split(",")):
        n = size // 2
        mine = ts.zeros((n,), ts.bfloat16, device=device).sync()
        theirs = torch.zeros(n, dtype=torch.bfloat16, device=device)

        def tilesafe_runs(count: int) -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(ours_stream)
            op = D.all_reduce(mine)
            for _ in range(count - 1):
                op = op.then(lambda t: D.all_reduce(t))
            op.then(lambda t: end.record(ours_stream)).sync_on(stream)
            end.synchronize()
            return start.elapsed_time(end) / count

        def torch_runs(count: int) -> float:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(count):
                dist.all_reduce(theirs)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / count

        tilesafe_runs(3), torch_runs(3)  # (warm-up: NCCL's first calls set up its channels)
        times: dict = {"tilesafe": [], "torch": []}
        for _ in range(args.rounds):  # (interleaved)
            times["tilesafe"].append(tilesafe_runs(args.runs))
            times["torch"].append(torch_runs(args.runs))
        for system, ms in times.items():
            t = float(np.median(ms)) * 1e-3
            algbw = size / t
            rows.append({"bytes": size, "system": system, "ranks": world,
                         "ms": round(t * 1e3, 4), "algbw_GBps": round(algbw / 1e9, 2),
                         "busbw_GBps": round(algbw * 2 * (world - 1) / world / 1e9, 2)})
    if rank == 0:
        for row in rows:
            print(f"{row['bytes']:>11d} B  {row['system']:8s}  {row['ms']:9.4f} ms  "
                  f"algbw {row['algbw_GBps']:8.2f} GB/s  busbw {row['busbw_GBps']:8.2f} GB/s "
                  f"({row['ranks']} ranks)")
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            with open(out / "allreduce.csv", "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
