import time, numpy as np, torch
import tilesafe as ts
from tilesafe.driver import cuda
from tilesafe.driver.device import as_device
from tilesafe.driver.stream import next_stream
from tilesafe.host.tensor import Tensor
from tilesafe.dtypes import bfloat16
dev = as_device("cuda:0")
ts.empty((16, 4096), ts.bfloat16, device="cuda:0").sync()
st = next_stream(dev)
def t(fn, n=300):
    for _ in range(10): fn()
    torch.cuda.synchronize(); t0 = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t0) / n * 1e6
print("ts.empty().sync()          ", t(lambda: ts.empty((16, 4096), ts.bfloat16, device="cuda:0").sync()))
print("Tensor.filled              ", t(lambda: Tensor.filled((16, 4096), 0.0, bfloat16, dev)))
print("cuda.allocate              ", t(lambda: cuda.allocate(0, 131072, st.native)))
buf = cuda.allocate(0, 131072, st.native)
print("cuda.fill (memset + sync)  ", t(lambda: cuda.fill(buf.ptr, 131072, b"\x00\x00", st.native)))
print("next_stream                ", t(lambda: next_stream(dev)))
print("dtype.round scalar         ", t(lambda: bfloat16.to_storage(bfloat16.round(np.asarray([0.0])))))
print("torch.empty                ", t(lambda: torch.empty((16, 4096), dtype=torch.bfloat16, device="cuda")))
