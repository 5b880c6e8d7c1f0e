"""Driver-only launch loops (floorc.c via ctypes: no Python between launches) against the
Python loop through the compiled launcher and tilesafe's chained mode, in one process. On the
GPU machine, from the repository root, after benchmarks/gpu_checks.sh built the modules."""
import ctypes, subprocess, time, statistics, os
import numpy as np
import tilesafe as ts
from benchmarks.execution_modes import add, _tensors
from tilesafe.exec.stream import next_stream
from tilesafe.runtime import cuda, _launcher
from pathlib import Path
source = Path(__file__).with_name("floorc.c")
subprocess.run(f"cc -O2 -shared -fPIC {source} -o /tmp/floorc.so -ldl", shell=True, check=True)
lib = ctypes.CDLL("/tmp/floorc.so")
print("bind", lib.bind())
z, x, y = _tensors("cuda:0")
add(z, x, y).sync()
packed = next(p.backend["packed"] for p in add._plans.values() if "packed" in p.backend)
stream = next_stream(x.device).native_address
N = 1000
out = (ctypes.c_double * 2)()
names = {0: "cuLaunchKernel params", 1: "cuLaunchKernelEx+PDL params", 2: "cuLaunchKernel extra buffer",
         3: "cuLaunchKernelEx+PDL extra buffer", 4: "cuLaunchKernelEx no attrs params"}
def c_loop(mode, per_op):
    e = lib.loop(ctypes.c_void_p(packed.function), ctypes.c_void_p(stream), ctypes.c_void_p(packed.address),
                 len(packed.values), N, mode, per_op, out)
    assert e == 0, (mode, e)
    return out[0] / 1e3, out[1] / 1e3
def py_loop(per_op):
    launch, sync = _launcher.launch, _launcher.synchronize
    t0 = time.perf_counter()
    for _ in range(N):
        launch(packed.function, 1, 1, 1, stream, packed.address, True)
        if per_op: sync(stream)
    t1 = time.perf_counter(); sync(stream); t2 = time.perf_counter()
    return (t1 - t0) / N * 1e6, (t2 - t0) / N * 1e6
def tilesafe_chain():
    from benchmarks.execution_modes import chained_sync
    global z, x, y
    t0 = time.perf_counter(); chained_sync(N, z, x, y); t1 = time.perf_counter()
    return (t1 - t0) / N * 1e6, (t1 - t0) / N * 1e6
res = {}
for rnd in range(7):
    for m in names:
        res.setdefault(names[m], []).append(c_loop(m, 0))
        res.setdefault(names[m] + " +sync", []).append(c_loop(m, 1))
    res.setdefault("python loop _launcher.launch (PDL)", []).append(py_loop(0))
    res.setdefault("python loop _launcher.launch (PDL) +sync", []).append(py_loop(1))
    res.setdefault("tilesafe chained_sync", []).append(tilesafe_chain())
for k, v in res.items():
    print(f"{k:42s} enqueue min {min(e for e, _ in v):6.3f} total min {min(t for _, t in v):6.3f} median {statistics.median(t for _, t in v):6.3f} us/launch")
