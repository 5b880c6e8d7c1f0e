"""The chained and per-op loops with the compiled launcher bound to a C no-op instead of the
driver: the launch path exactly as on a GPU but for the driver calls (for perf record).
From the repository root: python benchmarks/results/h100-2026-11-24/probes/noop_driver_profile.py
[loop SECONDS]."""
import ctypes, subprocess, sys, tempfile, time, statistics
from pathlib import Path
# the stand-in setup, tensors and the timed loops (chain, chained, per_op, t) of hostprof.py
exec(Path(__file__).with_name("hostprof.py").read_text().split("which = sys.argv")[0])
from tilesafe.runtime import _launcher
built = Path(tempfile.mkdtemp()) / "zero.so"
subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-x", "c", "-", "-o", str(built)],
               input=b"int zero(void) { return 0; }\n", check=True)
zero = ctypes.CDLL(str(built)).zero
addr = ctypes.cast(zero, ctypes.c_void_p).value
_launcher.bind(addr, addr, addr, addr, addr)
_launcher.poll(0)
calls["launch"], calls["synchronize"], calls["query"] = _launcher.launch, _launcher.synchronize, _launcher.query
print("chained %.3f/%.3f" % t(chained, 1000), "per-op %.3f/%.3f" % t(per_op, 1000))
if "loop" in sys.argv:
    end = time.time() + float(sys.argv[-1])
    while time.time() < end:
        chained(1000)
