"""Tune ``embedding`` (the kernel changed, so its shipped winners no longer apply) for the
decode and prefill keys of the Qwen3 shapes and the benchmark's: each call of a new key times
every config on the device and stores the winner; ``tilesafe tune --export`` then writes them."""
import numpy as np
import tilesafe as ts
from tilesafe.kernels import embedding

table = {h: ts.tensor(np.random.default_rng(0).standard_normal((151936, h), np.float32),
                      ts.bfloat16, device="cuda:0").sync() for h in (1024, 2560, 4096)}
for tokens in (1, 32, 512, 4096):
    ids = ts.tensor(np.random.default_rng(1).integers(0, 151936, tokens).astype(np.int32),
                    device="cuda:0").sync()
    for hidden, t in table.items():
        got = embedding(ids, t).sync()
        print(f"tuned embedding {tokens} x {hidden}", flush=True)
