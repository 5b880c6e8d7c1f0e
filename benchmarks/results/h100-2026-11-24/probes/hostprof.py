"""Host cost of the launch modes with a stand-in driver (no GPU work): per-op sync, a chain
with one sync, and an awaited chain, in us/op (min/median of 15). Run from the repository
root: python benchmarks/results/h100-2026-11-24/probes/hostprof.py [per] [chain] [await] [gc]
("gc": also with the garbage collector off, and the objects each launch leaves tracked)."""
import asyncio, gc, statistics, sys, time
import numpy as np
sys.path.insert(0, "tests")
import tilesafe as ts
from tilesafe.exec import stream as streams
from tilesafe.runtime import cuda
from test_compiled_path import add, StandInDriver, _packed, _on_stand_in, LENGTH, STAND_IN
from tilesafe.runtime.device import Device

class Quiet(StandInDriver):
    def launch(self, *a): return 0
    def synchronize(self, s): return 0
    def query(self, s): return 0
d = Quiet()
calls = vars(cuda._DRIVER_CALLS)
calls["launch"], calls["synchronize"], calls["query"] = d.launch, d.synchronize, d.query
real_make_current = cuda.make_current
def fake_make_current(index):
    cuda._THREAD.index = index
cuda.make_current = fake_make_current
cuda._THREAD.index = STAND_IN.index
eq = Device("cuda", STAND_IN.index)
pool = [ts.Stream(eq) for _ in range(streams.POOL_SIZE)]
for i, s in enumerate(pool):
    s._native, s._native_address = object(), 0x5000 + i
key = (STAND_IN.kind, STAND_IN.index)
streams._POOL._streams[key] = list(pool)
import itertools
streams._POOL._cycles[key] = itertools.cycle(pool)
z = _on_stand_in(np.zeros(LENGTH, np.float16)).partition(LENGTH)
x = _on_stand_in(np.ones(LENGTH, np.float16)); y = _on_stand_in(np.ones(LENGTH, np.float16))
first = add(z, x, y)
first._early.plan.backend["packed"] = _packed(first._early.grid)
z, x, y = first.sync()

def chain(n, z, x, y):
    op = add(z, x, y)
    for _ in range(n - 1):
        op = op.then(lambda args: add(*args))
    return op

def per_op(n):
    global z, x, y
    for _ in range(n):
        z, x, y = add(z, x, y).sync()

def chained(n):
    chain(n, z, x, y).sync()

def t(fn, n, reps=15):
    fn(n)
    s = []
    for _ in range(reps):
        a = time.perf_counter(); fn(n); s.append(time.perf_counter() - a)
    return min(s) / n * 1e6, statistics.median(s) / n * 1e6

def awaited(n, reps=15):
    async def main():
        await chain(n, z, x, y)
        s = []
        for _ in range(reps):
            a = time.perf_counter(); await chain(n, z, x, y); s.append(time.perf_counter() - a)
        return min(s) / n * 1e6, statistics.median(s) / n * 1e6
    return asyncio.run(main())

which = sys.argv[1:] or ["per", "chain", "await"]
sys.argv = sys.argv[:1]
for n in (1, 10, 1000):
    out = []
    if "per" in which: out.append("per-op %.2f/%.2f" % t(per_op, n))
    if "chain" in which: out.append("chained %.2f/%.2f" % t(chained, n))
    if "await" in which: out.append("await %.2f/%.2f" % awaited(n))
    print(f"N={n:5d} (min/median us/op): " + "  ".join(out))
if "gc" in which:
    import gc
    for label, off in (("gc on", False), ("gc off", True), ("gc on", False), ("gc off", True)):
        if off: gc.disable()
        c0 = gc.get_count()
        r = t(chained, 1000), t(per_op, 1000)
        gc.enable()
        print(label, "chained %.3f/%.3f per-op %.3f/%.3f" % (r[0] + r[1]))
    gc.collect(); gc.disable()
    before = gc.get_count()[0]
    chained(1000)
    print("gen0 objects per chained op:", (gc.get_count()[0] - before) / 1000)
    before = gc.get_count()[0]
    per_op(1000)
    print("gen0 objects per per-op:", (gc.get_count()[0] - before) / 1000)
    gc.enable()
