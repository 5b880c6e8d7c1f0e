"""The torch-graph replay of a dropped kernel with load_kernel's module retention turned off
(argv[1] == "off": the old behaviour) or on: prints the replay's outcome. Run "off" last and in
its own process: an illegal address ends the CUDA context."""
import gc
import sys

import torch

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.driver import cuda
from tilesafe.kernels._outputs import Output
from tilesafe.kernels._torch import accepts_torch


class _Forgetful(list):
    def append(self, item):  # (the module is not kept: unloaded once its kernel is dropped)
        pass


if sys.argv[1:] == ["off"]:
    cuda._LOADED = _Forgetful()


def made_here():
    @ts.kernel
    def doubled(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)]):  # noqa: F821
        z.store(tc.load_tile_like(x, z) * 2.0)

    @accepts_torch
    def call(x, *, out=None):
        result = Output(out, x.shape, ts.float32, x.device, op="doubled")
        return doubled(result.partition((1, 128)), x).then(lambda r: result.tensor(r.z))
    return call


call = made_here()
x = torch.randn(64, 96, device="cuda")
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    call(x)
s.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph, stream=s):
    y = call(x)
del call
gc.collect()
try:
    x.fill_(1.5)
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    print(f"retention {sys.argv[1]}: replay ok, exact: {torch.equal(y, torch.full_like(x, 3.0))}")
except Exception as err:  # noqa: BLE001 (the outcome is what is printed)
    print(f"retention {sys.argv[1]}: replay failed: {type(err).__name__}: {str(err)[:160]}")
