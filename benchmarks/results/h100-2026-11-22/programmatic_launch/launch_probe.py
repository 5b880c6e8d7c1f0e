"""GPU probe: launch cost by mechanism, graph replay with and without programmatic launches,
and what happens to a dependent chain when kernels do NOT wait but are launched early."""
import ctypes, statistics, sys, time
from ctypes import c_double, c_int, c_uint, c_void_p
sys.path.insert(0, ".")
import numpy as np
import tilesafe as ts
import tilesafe.core as tc
from benchmarks.execution_modes import add, _tensors, graph_builder
from tilesafe.exec.stream import next_stream
from tilesafe.runtime import cuda
from tilesafe.backends.tileir import lower

def med(fn, reps=7):
    fn(); s = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); s.append(time.perf_counter() - t)
    return statistics.median(s)

z, x, y = _tensors("cuda:0")
add(z, x, y).sync()
plan = next(p for p in add._plans.values() if "packed" in p.backend)
packed = plan.backend["packed"]
print("programmatic:", packed.programmatic)
stream = next_stream(x.device); h = stream.native_handle; hint = int(h)
N = 1000
libcuda = ctypes.CDLL("libcuda.so.1")
addr = lambda f: ctypes.cast(f, c_void_p).value
lk, lkx, ss = addr(libcuda.cuLaunchKernel), addr(libcuda.cuLaunchKernelEx), addr(libcuda.cuStreamSynchronize)
floor = ctypes.CDLL("./scratch/launchfloor.so")
floor.launch_loop.restype = c_double
floor.launch_loop.argtypes = [c_void_p] * 4 + [c_uint, c_void_p, c_void_p, c_int, c_int]
func = int(packed.function)
res = {}
for mode, name in ((0, "C cuLaunchKernel"), (1, "C cuLaunchKernelEx PDL"), (2, "C launch+sync")):
    vals = [floor.launch_loop(lk, lkx, ss, func, packed.grid[0], hint, packed.address, N, mode) for _ in range(5)]
    res[name] = statistics.median(vals)

def bind_loop(programmatic):
    packed.programmatic = programmatic
    def f():
        for _ in range(N):
            cuda.launch_packed(h, packed)
        stream.native.sync()
    return med(f) / N * 1e6
res["bindings cuLaunchKernel"] = bind_loop(False)
res["bindings cuLaunchKernelEx PDL"] = bind_loop(True)

LK = libcuda.cuLaunchKernel
LK.argtypes = [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, c_void_p, c_void_p]
LK.restype = c_int
class Attr(ctypes.Structure):
    _fields_ = [("id", c_uint), ("pad", c_uint), ("flag", c_int), ("rest", ctypes.c_char * 60)]
class Config(ctypes.Structure):
    _fields_ = [("gx", c_uint), ("gy", c_uint), ("gz", c_uint), ("bx", c_uint), ("by", c_uint),
                ("bz", c_uint), ("smem", c_uint), ("stream", c_void_p), ("attrs", ctypes.POINTER(Attr)),
                ("num", c_uint)]
attr = Attr(6, 0, 1); cfg = Config(packed.grid[0], 1, 1, 1, 1, 1, 0, hint, ctypes.pointer(attr), 1)
LKX = libcuda.cuLaunchKernelEx
LKX.argtypes = [c_void_p, c_void_p, c_void_p, c_void_p]; LKX.restype = c_int
cfg_ref = ctypes.byref(cfg)
def ct_loop():
    g = packed.grid[0]; a = packed.address
    for _ in range(N):
        LK(func, g, 1, 1, 1, 1, 1, 0, hint, a, None)
    stream.native.sync()
def ctx_loop():
    a = packed.address
    for _ in range(N):
        LKX(cfg_ref, func, a, None)
    stream.native.sync()
res["ctypes cuLaunchKernel"] = med(ct_loop) / N * 1e6
res["ctypes cuLaunchKernelEx PDL"] = med(ctx_loop) / N * 1e6
SS = libcuda.cuStreamSynchronize; SS.argtypes = [c_void_p]; SS.restype = c_int
def ct_sync_loop():
    a = packed.address
    for _ in range(N):
        LKX(cfg_ref, func, a, None); SS(hint)
res["ctypes launchEx+cuStreamSynchronize"] = med(ct_sync_loop) / N * 1e6
def bind_sync_loop():
    for _ in range(N):
        cuda.launch_packed(h, packed); stream.native.sync()
res["bindings launch+stream.sync"] = med(bind_sync_loop) / N * 1e6

# graph replay: programmatic vs serialized launches of the same kernel
for programmatic in (True, False):
    packed.programmatic = programmatic
    g = graph_builder(N, z, x, y)
    g.replay()
    res[f"graph replay programmatic={programmatic}"] = med(g.replay) / N * 1e6
packed.programmatic = True
try:
    import cupy as cp
    k = cp.RawKernel(r'extern "C" __global__ void empty() {}', "empty")
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        k((1,), (128,), ())
        s.synchronize()
        s.begin_capture()
        for _ in range(N):
            k((1,), (128,), ())
        cg = s.end_capture()
    cg.launch(s); s.synchronize()
    res["cupy empty-kernel graph"] = med(lambda: (cg.launch(s), s.synchronize())) / N * 1e6
except Exception as e:
    print("cupy graph failed:", type(e).__name__, e)
for k_, v in res.items():
    print(f"{k_:45s} {v:8.3f} us/op")

# Without the wait, launched early: does a dependent chain go wrong?
@ts.kernel
def step(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + 1.0)
lower.GRID_DEPENDENCY_SINCE = (99, 0)  # no gdc_wait in the cubin
M, T = 1 << 22, 1024
for trial in range(2):
    a = ts.zeros(M, device="cuda:0").sync(); b = ts.zeros(M, device="cuda:0").sync()
    step(ts.borrow_mut(b).partition(T), a).sync()
    for p in step._plans.values():
        if "packed" in p.backend:
            p.backend["packed"].programmatic = bool(trial)  # trial 1: early launch without wait
    with ts.CudaGraph.scope() as gr:
        for _ in range(50):
            gr.record(step(ts.borrow_mut(b).partition(T), a))
            gr.record(step(ts.borrow_mut(a).partition(T), b))
    for p in step._plans.values():
        if "packed" in p.backend:
            p.backend["packed"].programmatic = bool(trial)
    gr.replay()
    av = a.numpy()
    print(f"no-wait kernel, programmatic={bool(trial)}: a wrong in {int((av != 100).sum())} of {M} "
          f"elements (min {av.min()}, max {av.max()})")
lower.GRID_DEPENDENCY_SINCE = (13, 4)
