"""Where the host time of per-op and chained launches goes on the GPU machine (cProfile)."""
import cProfile, pstats, sys, time, io, timeit
sys.path.insert(0, "benchmarks")
import execution_modes as em
import tilesafe as ts
from tilesafe._callsite import caller_location
from tilesafe.exec.stream import next_stream, current_stream
z, x, y = em._tensors("cuda:0")
em.per_op_sync(3, z, x, y)
em.chained_sync(10, z, x, y)
for name in ("per_op_sync", "chained_sync"):
    fn = getattr(em, name)
    best = min(timeit.repeat(lambda: fn(1000, z, x, y), number=1, repeat=5))
    print(name, best / 1000 * 1e6, "us/op")
    pr = cProfile.Profile(); pr.enable(); fn(3000, z, x, y); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(16); print(s.getvalue()[:4000])
g = dict(globals())
for stmt in ("caller_location()", "next_stream(x.device)", "current_stream()", "tuple(map(id, (z, x, y)))",
             "hash(x.device)", "em.add(z, x, y)._driven_at"):
    n = 20000
    try:
        print(f"{stmt:32s}", min(timeit.repeat(stmt, globals=g, number=n, repeat=5)) / n * 1e6, "us")
    except Exception as e:
        print(stmt, e)
