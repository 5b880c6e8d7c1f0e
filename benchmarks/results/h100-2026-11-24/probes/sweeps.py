import csv, glob, sys
rows = []
for f in sorted(glob.glob(sys.argv[1] + "/run_*/modes*/execution_modes.csv")):
    d = {}
    for r in csv.DictReader(open(f)):
        key = (r["size"], r["variant"], r["reference"])
        d[key] = (float(r["value"]), float(r["reference_value"]))
    g = lambda n, v, ref: d.get((n, v, ref), (float("nan"),) * 2)
    run = f.split("/")[-3] + "/" + f.split("/")[-2]
    po, pot = g("1000", "per_op_sync", "torch.add+sync")
    ch, cht = g("1000", "chained_sync", "torch.add")
    asy, _ = g("1000", "async", "torch.add")
    gr, grt = g("1000", "graph_replay", "torch.add CUDA graph")
    _, fl = g("1000", "chained_sync", "bare launch via native launcher")
    _, fls = g("1000", "per_op_sync", "bare launch+sync via native launcher")
    ge, get_ = g("1000", "graph_replay_programmatic", "torch.add CUDA graph (events)")
    g1, g1t = g("1", "graph_replay", "torch.add CUDA graph")
    g10, g10t = g("10", "graph_replay", "torch.add CUDA graph")
    a10, _ = g("10", "async", "torch.add")
    print(f"{run:28s} per-op {po:6.2f} [{pot:6.2f}] chained {ch:5.2f} [{cht:5.2f}] async {asy:5.2f} graph {gr:5.3f} [{grt:5.3f}] events {ge:5.3f} [{get_:5.3f}] floor {fl:5.2f}/{fls:5.2f} over {ch-fl:5.2f}/{po-fls:5.2f}  g1 {g1:5.2f} [{g1t:5.2f}] g10 {g10:5.2f} [{g10t:5.2f}] a10 {a10:5.2f}")
