"""What the driver floor of a GPU host is made of (N=1000 launches): the tilesafe kernel's
packed launch as a programmatic and as a plain launch (host enqueue time and total with the
final wait, and launch + wait per op), against torch.add in the same process. Run on the GPU
machine from the repository root after benchmarks/gpu_checks.sh built the compiled modules."""
import time, os, subprocess
import numpy as np
import tilesafe as ts
from benchmarks.execution_modes import add, _tensors
from tilesafe.exec.stream import next_stream
from tilesafe.runtime import cuda, _launcher

print(subprocess.run("lscpu | grep -E 'Model name|^CPU\\(s\\)|MHz|Hypervisor'; nproc", shell=True, capture_output=True, text=True).stdout)
z, x, y = _tensors("cuda:0")
add(z, x, y).sync()
packed = next(p.backend["packed"] for p in add._plans.values() if "packed" in p.backend)
print("params", len(packed.values), [v.dtype.str for v in packed.values], "grid", packed.grid, "programmatic", packed.programmatic)
stream = next_stream(x.device).native_address
N = 1000
launch, sync = _launcher.launch, _launcher.synchronize

def loop(fn, gx, gy, gz, addr, prog, per_op=False):
    t0 = time.perf_counter()
    for _ in range(N):
        launch(fn, gx, gy, gz, stream, addr, prog)
        if per_op:
            sync(stream)
    t1 = time.perf_counter()
    sync(stream)
    t2 = time.perf_counter()
    return (t1 - t0) / N * 1e6, (t2 - t0) / N * 1e6

cases = {}
gx, gy, gz = packed.grid
cases["tilesafe add prog"] = (packed.function, gx, gy, gz, packed.address, True)
cases["tilesafe add plain"] = (packed.function, gx, gy, gz, packed.address, False)
try:
    import cupy as cp
    src = r'''
    extern "C" __global__ void null0() {}
    extern "C" __global__ void null9(unsigned long long a, unsigned long long b, unsigned long long c,
      unsigned long long d, unsigned long long e, unsigned long long f, unsigned long long g,
      unsigned long long h, unsigned long long i) {}
    '''
    mod = cp.RawModule(code=src)
    f0 = mod.get_function("null0"); f9 = mod.get_function("null9")
    vals = [np.array(0, dtype=np.uint64) for _ in range(9)]
    ptrs = np.array([v.ctypes.data for v in vals], dtype=np.uintp)
    cases["null0 plain"] = (f0.ptr, 1, 1, 1, 0, False)
    cases["null0 prog"] = (f0.ptr, 1, 1, 1, 0, True)
    cases["null9 plain"] = (f9.ptr, 1, 1, 1, ptrs.ctypes.data, False)
    # pad to the tilesafe param count with u64s
    vals2 = [np.array(0, dtype=np.uint64) for _ in range(len(packed.values))]
except Exception as e:
    print("cupy failed:", repr(e))
import torch
a = torch.zeros(2048, dtype=torch.float16, device="cuda"); b = torch.ones_like(a)
def torch_chain():
    t0 = time.perf_counter()
    for _ in range(N):
        torch.add(a, b, out=a)
    t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
    return (t1 - t0) / N * 1e6, (t2 - t0) / N * 1e6
res = {k: [] for k in cases}; res["torch chain"] = []; resp = {k: [] for k in cases}
for c in cases.values():
    loop(*c)
for r in range(5):
    for k, c in cases.items():
        res[k].append(loop(*c))
        resp[k].append(loop(*c, per_op=True))
    res["torch chain"].append(torch_chain())
for k, v in res.items():
    enq = min(e for e, _ in v); tot = min(t for _, t in v)
    line = f"{k:22s} chained: enqueue {enq:6.2f} total {tot:6.2f} us/op (median total {sorted(t for _, t in v)[2]:6.2f})"
    if k in resp:
        line += f"   launch+sync {min(t for _, t in resp[k]):6.2f}"
    print(line)
