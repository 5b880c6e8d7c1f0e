"""tune(): every gemv/skinny key of the shipped table (M, N, K bf16), tuned by the (cold) tuners."""
import json, pathlib
TABLE = pathlib.Path(__file__).with_name("hot_table.json")

def keys():
    d = json.load(open(TABLE))["entries"]
    return [v["full_key"]["key"] for v in d.values()
            if v["full_key"]["function"] in ("tilesafe.kernels.matmul.gemv", "tilesafe.kernels.matmul.skinny")]

def tune(device=None):
    import tilesafe as ts
    from tilesafe import kernels as K
    device = device or "cuda:0"
    for m, n, k, dtype, scaled in keys():
        a = ts.randn((m, k), dtype=getattr(ts, dtype), seed=0, device=device).sync()
        b = ts.randn((n, k), dtype=getattr(ts, dtype), seed=1, device=device).sync()
        K.matmul(a, b).sync()
        print("tuned", m, n, k, flush=True)
