"""Local host cost of graph.launch().sync() with a stand-in driver (no GPU)."""
import sys, time, statistics
from pathlib import Path
# the stand-in driver, pool, tensors z, x, y and the first launch of hostprof.py
exec(Path(__file__).with_name("hostprof.py").read_text().split("def chain(")[0])
calls["launch_graph"] = lambda g, s: 0
from tilesafe.runtime import cuda as _c
_c.graph_builder = lambda native: None
class FakeGraph:
    handle = 0x6000
_c.finish_graph = lambda builder, previous: FakeGraph()
from tilesafe.exec.launch import KernelNode
KernelNode.capture = lambda self, builder: None
with ts.CudaGraph.scope(pool[0]) as graph:
    graph.record(add(z, x, y))
graph.launch().sync()
def replay(n):
    for _ in range(n):
        graph.launch().sync()
s = []
for _ in range(15):
    a = time.perf_counter(); replay(1000); s.append(time.perf_counter() - a)
print("graph.launch().sync(): min %.2f median %.2f us" % (min(s) / 1000 * 1e6, statistics.median(s) / 1000 * 1e6))
import cProfile, pstats
if "prof" in sys.argv:
    cProfile.run("replay(20000)", "/tmp/g.prof")
    pstats.Stats("/tmp/g.prof").sort_stats("tottime").print_stats(18)
