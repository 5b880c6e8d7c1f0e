"""graph.update + replay: executable updated in place vs instantiated anew (same process)."""
import time, statistics
import numpy as np
import tilesafe as ts
from tilesafe.runtime import cuda
from benchmarks.execution_modes import add, LENGTH
GPU = "cuda:0"
x = ts.tensor(np.ones(LENGTH, np.float16), device=GPU).sync()
y = ts.tensor(np.ones(LENGTH, np.float16), device=GPU).sync()
zs = [ts.zeros(LENGTH, ts.float16, device=GPU).sync() for _ in range(2)]
N = 100
def record(g, z):
    for _ in range(N):  # each launch borrows z until it is recorded
        g.record(add(ts.borrow_mut(z).partition(LENGTH), x, y))
with ts.CudaGraph.scope() as graph:
    record(graph, zs[0])
graph.replay()
original = cuda.finish_graph
def anew(builder, previous=None):
    return original(builder)
for name, fin in (("in place", original), ("anew", anew), ("in place", original), ("anew", anew)):
    cuda.finish_graph = fin
    samples = []
    for i in range(30):
        t = time.perf_counter()
        with graph.update() as g:
            record(g, zs[i % 2])
        graph.replay()
        samples.append(time.perf_counter() - t)
    print(f"update+replay of a {N}-node graph, {name}: {statistics.median(samples)*1e6:.1f} us")
cuda.finish_graph = original
assert np.array_equal(zs[1].numpy(), np.full(LENGTH, 2, np.float16))
