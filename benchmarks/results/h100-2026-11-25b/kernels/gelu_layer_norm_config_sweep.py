"""Config sweeps: gelu and layer_norm at 16384 x 4096 bf16, every config timed by the tuner
(graph replays); torch's op timed the same way (torch CUDA graph, events) in the same process."""
import json, os, glob, torch
import tilesafe as ts
from tilesafe.autotune import autotune
from tilesafe.kernels import activations as A, norms as N
from tilesafe.kernels._rowwise import RowsOutput, as_rows

def torch_time(fn, reps=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn(); torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(reps): fn()
    ts_ = []
    for _ in range(7):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts_.append(a.elapsed_time(b) / reps)
    return sorted(ts_)[3]

G = [{"rows": r, "cols": c, "occupancy": o, "warps": w}
     for (r, c) in ((1, 512), (1, 1024), (2, 1024), (1, 2048), (4, 1024))
     for o in (4, 8, 16) for w in (4, 8) if not (w == 8 and o == 16)]
G += [{"rows": 2, "cols": 1024, "occupancy": 0}, {"rows": 1, "cols": 2048}]

@autotune(configs=G, key=A._tiles_key, kernels=(A.gelu_tiles,))
def gelu_sweep(x, out, tanh, *, config):
    tile = A._elementwise_tile(x, config)
    return A._GELU.pick(tile, config)(out.partition(tile), x, TANH=tanh)

L = [{"rows": r, "chunk": 4096, "occupancy": o, "warps": w} for r in (1, 2, 4)
     for o in (2, 4, 8) for w in (4, 8)] + [dict(c) for c in N.ROW_CONFIGS]

@autotune(configs=L, key=N._key, kernels=(N.layer_norm_rows,))
def ln_sweep(x, w, b, out, eps, *, config):
    hidden = x.shape[1]
    tile = N._tile(x, config)
    return N._LAYER_ROWS.pick(tile, config)(out.partition(tile), x, w, b, float(hidden), hidden,
                                            eps, HAS_BIAS=True)

dev = "cuda:0"
xt = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16)
x = ts.from_dlpack(xt)
out = RowsOutput(None, tuple(x.shape), x.dtype, x.device, op="gelu")
gelu_sweep(as_rows(x, "x", "gelu"), out, False).sync()
nbytes = 2 * xt.numel() * 2
tg = torch_time(lambda: torch.nn.functional.gelu(xt))
tc_ = torch_time(lambda: xt.clone())
print(f"torch gelu {tg*1e3:.1f} us ({nbytes/tg/1e6:.0f} GB/s); copy {tc_*1e3:.1f} us ({nbytes/tc_/1e6:.0f} GB/s)")
root = os.environ["TILESAFE_CACHE_DIR"] + "/autotune/"
def show(name, configs, ref_ms, label):
    for f in glob.glob(root + "*" + name + "*.json"):
        for e in json.load(open(f))["entries"].values():
            tm = e["timings_ms"]
            rows = sorted(((float(t), int(i)) for i, t in tm.items()))
            for t, i in rows[:12]:
                print(f"  {label} {t*1e3:7.1f} us  {nbytes/t/1e6:6.0f} GB/s  x{ref_ms/t:.2f} torch  {configs[i]}")
            print(f"  ... worst {rows[-1][0]*1e3:.1f} us {configs[rows[-1][1]]}")
show("gelu_sweep", G, tg, "gelu")
w = torch.randn(4096, device=dev, dtype=torch.bfloat16); bb = torch.randn(4096, device=dev, dtype=torch.bfloat16)
tl = torch_time(lambda: torch.nn.functional.layer_norm(xt, (4096,), w, bb))
print(f"torch layer_norm {tl*1e3:.1f} us ({nbytes/tl/1e6:.0f} GB/s)")
from tilesafe.kernels._rowwise import check_vector
wv = check_vector(ts.from_dlpack(w), "weight", x, "layer_norm"); bv = check_vector(ts.from_dlpack(bb), "bias", x, "layer_norm")
out2 = RowsOutput(None, tuple(x.shape), x.dtype, x.device, op="layer_norm")
ln_sweep(as_rows(x, "x", "layer_norm"), wv, bv, out2, 1e-5).sync()
show("ln_sweep", L, tl, "layer_norm")
