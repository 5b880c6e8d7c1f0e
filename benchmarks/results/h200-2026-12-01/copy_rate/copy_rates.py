"""The device-to-device copy rate three ways, interleaved in one process (1 GiB, bytes read
plus written): torch's ``copy_`` timed copy by copy after 0.3 s of unsynchronized copies, the
decode benchmark's ``tilesafe.models.generate._copy_rate`` (tilesafe's copy, each of 5 timed
copies synchronized, after 0.2 s of such copies), and tilesafe's copy timed as 5 back-to-back
copies between two events."""
import time
import torch
from tilesafe.dtypes import as_dtype
from tilesafe.driver.stream import Event, Stream
from tilesafe.host.factory import empty
from tilesafe.models.generate import _copy_rate

N = 1 << 29


def torch_rate():
    a = torch.empty(N, dtype=torch.float16, device="cuda"); b = torch.empty_like(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    while time.perf_counter() - t < 0.3:
        b.copy_(a)
    best = 1e9
    for _ in range(5):
        s.record(); b.copy_(a); e.record(); e.synchronize(); best = min(best, s.elapsed_time(e) * 1e-3)
    return 4 * N / best


def tilesafe_back_to_back():
    src = empty((N,), as_dtype("float16"), device="cuda:0").sync()
    dst = empty((N,), as_dtype("float16"), device="cuda:0").sync()
    stream = Stream("cuda:0")
    best = 1e9
    for _ in range(3):
        start, end = Event(timing=True), Event(timing=True)
        start.record(stream)
        op = dst.copy_(src)
        for _ in range(4):
            op = op.then(lambda d: d.copy_(src))
        op.then(lambda _: end.record(stream)).sync_on(stream)
        end.synchronize()
        best = min(best, start.elapsed_ms(end) * 1e-3 / 5)
    return 4 * N / best


for rnd in range(3):
    print(f"round {rnd}: torch {torch_rate() / 1e12:.3f} TB/s  benchmark's _copy_rate "
          f"{_copy_rate('cuda:0') / 1e12:.3f}  tilesafe back to back "
          f"{tilesafe_back_to_back() / 1e12:.3f}", flush=True)
