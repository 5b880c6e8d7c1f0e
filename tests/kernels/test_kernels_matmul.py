"""``tilesafe.kernels.matmul`` and ``scaled_matmul`` on the default device, against float64:
every path (the M = 1 elementwise GEMV, the M <= 16 mma path with and without split-K, one tile
per program, persistent), odd M/N/K (edge tiles padded and masked), f16, bf16 and the 8-bit
floats with scales, both weight layouts, leading dims, ``out=`` and ``out_dtype``, torch tensors,
and each misuse refused with its message, at the caller's line, with nothing written.

Tolerance: the interpreter rounds each f32 accumulation step once and the output once, so an
element may be off by the output's rounding (``u`` of its dtype, relative) plus at most
``K + 4`` f32 roundings of the sum of |products|."""

from __future__ import annotations

import importlib
import ml_dtypes
import numpy as np
import pytest

import tilesafe as ts
from tilesafe.kernels import matmul, scaled_matmul
from tilesafe.kernels import gemv as skinny
# (the package's ``matmul`` is the function; the module by its full name)
mm_module = importlib.import_module("tilesafe.kernels.matmul")
from tilesafe.kernels._outputs import Output
from tilesafe.autotune import store as store_module, timing as timing_module

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}
THIS_FILE = "test_kernels_matmul.py"


def _operands(m: int, n: int, k: int, dtype: str, seed: int = 0, layout: str = "nk"):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(NP[dtype])
    b = rng.standard_normal((n, k) if layout == "nk" else (k, n)).astype(NP[dtype])
    return a, b


def _assert_close(got, a, b_kn, out_dtype: str, scale: float = 1.0):
    """``got`` within the rounding bound of ``(a @ b_kn) * scale`` (see the module docstring)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b_kn, np.float64)
    ref = (a64 @ b64) * scale
    magnitude = (np.abs(a64) @ np.abs(b64)) * abs(scale)
    u = 2.0 ** -{"float16": 11, "bfloat16": 8, "float32": 24}[out_dtype]
    f32_sum = (a.shape[-1] + 4) * 2.0 ** -24 * magnitude
    tiny = float(ml_dtypes.finfo(NP[out_dtype]).smallest_subnormal)
    bound = u * np.abs(ref) + (1 + u) * f32_sum + tiny
    err = np.abs(np.asarray(got, np.float64) - ref)
    assert got.shape == ref.shape
    assert np.all(err <= bound), (float((err / (bound)).max()), np.argwhere(err > bound)[:5])


# -- every path, odd sizes, both 16-bit dtypes ---------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m", [1, 3, 16, 33])
@pytest.mark.parametrize("n,k", [(40, 1024), (37, 99)])
def test_matmul_matches_float64(dtype, m, n, k):
    a, b = _operands(m, n, k, dtype, seed=m + k)
    y = matmul(ts.tensor(a).sync(), ts.tensor(b).sync()).sync()
    assert y.dtype.name == dtype and y.shape == (m, n)
    _assert_close(y.numpy(), a, b.T, dtype)


def test_the_paths_the_shapes_take():
    path = mm_module.path_of
    assert path(1, 4096, ts.float16, False) == "gemv"
    assert path(1, 4096, ts.float8_e4m3fn, True) == "skinny"
    assert path(16, 151936, ts.bfloat16, False) == "skinny"
    assert path(17, 4096, ts.float16, False) == "tiled"
    assert path(1024, 1024, ts.float16, False) == "tiled"
    assert path(2048, 2048, ts.float16, False) == "tiled"       # 256 tiles: under 3 waves
    assert path(512, 9728, ts.bfloat16, False) == "tiled"       # 304 tiles
    assert path(4096, 4096, ts.float16, False) == "persistent"  # 1024 tiles
    assert path(8192, 1024, ts.float16, False) == "persistent"  # 512 tiles


def test_split_k_slices():
    # 64 column blocks of 64 on 132 SMs: 8 slices of 512 give 512 programs (>= 2 per SM)
    assert skinny.slices(4096, 4096, 64, 256, 2) == 8
    assert skinny.slices(2560, 9728, 64, 256, 2) == 8
    assert skinny.slices(151936, 4096, 64, 256, 2) == 2  # enough blocks: the fewest slices
    assert skinny.slices(4096, 4104, 64, 256, 2) == 1    # slices would not be 16-aligned
    assert skinny.slices(40, 1024, 64, 256, 2) == 4      # each slice keeps one whole chunk
    assert skinny.slices(40, 99, 64, 256, 2) == 1
    # 16 mma rows: the merge's tile of every slice (rows x 16 each) stays within its bound
    assert skinny.slices(40, 9728, 64, 64, 4, rows=16) * 16 * 16 <= skinny.MERGE_VALUES


def test_m_buckets_share_configs():
    assert [skinny.m_bucket(m) for m in (1, 2, 3, 16, 17, 33)] == [1, 2, 4, 16, 32, 64]


def test_float32_output_and_out_given():
    a, b = _operands(3, 40, 1024, "bfloat16", seed=5)
    out = ts.full((3, 40), 7.0, dtype=ts.float32).sync()
    got = matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), out_dtype=ts.float32, out=out).sync()
    assert got is out
    _assert_close(out.numpy(), a, b.T, "float32")
    a, b = _operands(33, 37, 99, "float16", seed=6)
    out = ts.full((33, 37), 7.0, dtype=ts.float16).sync()
    assert matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), out=out).sync() is out
    _assert_close(out.numpy(), a, b.T, "float16")


@pytest.mark.parametrize("m", [3, 33])
def test_kn_layout(m):
    a, b = _operands(m, 40, 1024, "bfloat16", seed=m, layout="kn")
    y = matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), b_layout="kn").sync()
    _assert_close(y.numpy(), a, b, "bfloat16")


@pytest.mark.parametrize("m", [3, 33])
def test_a_call_with_out_records_into_a_graph(m):
    """With ``out=`` given (and no split-K workspace to allocate) a call is launches only: it
    records into a graph, and each replay recomputes the product from the inputs' memory."""
    a, b = _operands(m, 37, 99, "float16", seed=20 + m)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = ts.zeros((m, 37), dtype=ts.float16).sync()
    stream = ts.Stream(out.device)
    with ts.CudaGraph.scope(stream) as graph:
        graph.record(matmul(at, bt, out=out))
    assert np.all(out.numpy() == 0)  # recorded, not run
    graph.launch(stream).sync()
    _assert_close(out.numpy(), a, b.T, "float16")


@pytest.mark.parametrize("m", [1, 3])
def test_a_split_k_call_with_a_workspace_records_into_a_graph(m):
    """N = 40 over K = 1024 splits K (4 slices) for M = 3 (M = 1 takes the one-launch GEMV
    by default, the workspace sized for its split configs): with ``out=`` and a workspace from
    ``matmul_workspace`` the call allocates nothing, records into a graph and each replay
    recomputes the product; a workspace too small for a split is refused naming the size
    needed."""
    from tilesafe.kernels import matmul_workspace
    a, b = _operands(m, 40, 1024, "bfloat16", seed=30 + m)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = ts.zeros((m, 40), dtype=ts.bfloat16).sync()
    workspace = matmul_workspace(at, bt).sync()
    assert workspace.size >= 4 * 40 * (1 if m == 1 else 16)
    with ts.CudaGraph.scope(ts.Stream(out.device)) as graph:
        graph.record(matmul(at, bt, out=out, workspace=workspace))
    assert np.all(out.numpy().astype(np.float32) == 0)  # recorded, not run
    graph.replay()
    _assert_close(out.numpy(), a, b.T, "bfloat16")
    if m == 1:
        return
    with pytest.raises(ts.ArgumentError, match=r"workspace holds 3 float32 values; this call "
                       r"needs \d+"):
        matmul(at, bt, out=out, workspace=ts.zeros(3).sync())


def test_leading_dims_are_rows():
    a, b = _operands(6, 37, 99, "float16", seed=8)
    a3 = ts.tensor(a.reshape(2, 3, 99)).sync()
    y = matmul(a3, ts.tensor(b).sync()).sync()
    assert y.shape == (2, 3, 37)
    _assert_close(y.numpy().reshape(6, 37), a, b.T, "float16")
    out = ts.zeros((2, 3, 37), dtype=ts.float16).sync()
    assert matmul(a3, ts.tensor(b).sync(), out=out).sync() is out
    _assert_close(out.numpy().reshape(6, 37), a, b.T, "float16")


def test_persistent_launch():
    """The persistent kernel, on a problem small enough for the interpreter: 3 x 2 tiles of
    128 x 128 (the 128 x 256 default falls back to them below one tile per SM), 6 programs."""
    a, b = _operands(300, 200, 99, "bfloat16", seed=9)
    out = Output(None, (300, 200), ts.bfloat16, ts.tensor(a).sync().device)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    r = mm_module.launch_persistent(at, bt.T, out, None, None).sync()
    assert r.z.map_shape == (mm_module.GROUP_ROWS, 1)
    _assert_close(out.tensor(r.z.partition).numpy(), a, b.T, "bfloat16")


def test_one_row_through_the_mma_path():
    """M = 1 also runs on the mma path (the benchmark times it beside the elementwise GEMV)."""
    a, b = _operands(1, 40, 1024, "float16", seed=15)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = Output(None, (1, 40), ts.float16, at.device)
    r = skinny.launch_skinny(at, bt.T, out, None, None).sync()
    count = skinny.slices(40, 1024, 64, 256, 1)  # the first config's split
    assert count > 1 and r.z.tile_shape == (skinny.MMA_ROWS, min(  # the merge's tiles
        skinny.MERGE_COLUMNS, skinny.MERGE_VALUES // (count * skinny.MMA_ROWS)))
    _assert_close(out.tensor(r.z).numpy(), a, b.T, "float16")


def test_few_rows_many_columns_take_persistent_64_row_tiles():
    """33 rows on 60000 columns: three waves of 128 x 128 tiles, so persistent, in 64 x 128
    tiles (the rows of a prefill chunk on a vocabulary projection)."""
    a, b = _operands(33, 60000, 24, "float16", seed=10)
    assert mm_module.path_of(33, 60000, ts.float16, False) == "persistent"
    y = matmul(ts.tensor(a).sync(), ts.tensor(b).sync()).sync()
    _assert_close(y.numpy(), a, b.T, "float16")


# -- the 8-bit floats with scales ---------------------------------------------------------------

SCALE_A, SCALE_B = 0.75, 2.0 ** -3


def _scales():
    """The two scales, one of shape () and one of shape (1,)."""
    return (ts.tensor(np.float32(SCALE_A)).sync(),
            ts.tensor(np.array([SCALE_B], np.float32)).sync())


@pytest.mark.parametrize("m,n,k", [(1, 40, 1024), (3, 37, 99), (33, 40, 99)])
def test_scaled_matmul_matches_float64(m, n, k):
    a, b = _operands(m, n, k, "float8_e4m3fn", seed=m)
    y = scaled_matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), *_scales()).sync()
    assert y.dtype == ts.bfloat16
    _assert_close(y.numpy(), a, b.T, "bfloat16", SCALE_A * SCALE_B)


def test_scaled_matmul_e5m2_float16_out_and_persistent():
    a, b = _operands(3, 40, 1024, "float8_e5m2", seed=11)
    y = scaled_matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), *_scales(),
                      out_dtype=ts.float16).sync()
    _assert_close(y.numpy(), a, b.T, "float16", SCALE_A * SCALE_B)
    a, b = _operands(200, 136, 264, "float8_e4m3fn", seed=12)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = Output(None, (200, 136), ts.bfloat16, at.device)
    r = mm_module.launch_persistent(at, bt.T, out, *(s.reshape(1) for s in _scales())).sync()
    _assert_close(out.tensor(r.z.partition).numpy(), a, b.T, "bfloat16", SCALE_A * SCALE_B)


# -- torch tensors --------------------------------------------------------------------------------

def test_torch_tensors_in_torch_tensor_out():
    torch = pytest.importorskip("torch")
    a, b = _operands(3, 37, 99, "bfloat16", seed=13)
    ta = torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
    tb = torch.from_numpy(b.view(np.uint16)).view(torch.bfloat16)
    y = matmul(ta, tb)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (3, 37)
    _assert_close(y.view(torch.uint16).numpy().view(ml_dtypes.bfloat16), a, b.T, "bfloat16")
    # split-K: the workspace is allocated by torch too; out= is written in place
    for m in (1, 3):
        a, b = _operands(m, 40, 1024, "float16", seed=14 + m)
        out = torch.full((m, 40), float("nan"), dtype=torch.float16)
        assert matmul(torch.from_numpy(a), torch.from_numpy(b), out=out) is out
        _assert_close(out.numpy(), a, b.T, "float16")


# -- misuse ---------------------------------------------------------------------------------------

def _refused(call, message: str):
    with pytest.raises(ts.ArgumentError, match=message) as info:
        call()
    assert THIS_FILE in str(info.value)
    return info.value


def test_misuse_is_refused_with_nothing_written():
    a = ts.tensor(np.ones((3, 8), np.float16)).sync()
    w = ts.tensor(np.ones((5, 8), np.float16)).sync()
    out = ts.full((3, 5), 7.0, dtype=ts.float16).sync()
    _refused(lambda: matmul(a, ts.tensor(np.ones((5, 9), np.float16)).sync(), out=out),
             r"matmul: a has shape \(3, 8\) and b \(5, 9\) \(b_layout='nk'\): K is 8 in a, 9 "
             r"in b")
    err = _refused(lambda: matmul(a, ts.tensor(np.ones((5, 8), np.float16)).sync(),
                                  b_layout="kn"), "K is 8 in a, 5 in b")
    assert "b_layout='nk' for a weight" in str(err)
    _refused(lambda: matmul(a, w, b_layout="nt"), "matmul: b_layout='nt' is not a layout")
    _refused(lambda: matmul(ts.tensor(np.ones((3, 8), np.float32)).sync(),
                            ts.tensor(np.ones((5, 8), np.float32)).sync()),
             "matmul: a is float32; supported: float16, bfloat16")
    _refused(lambda: matmul(a, ts.tensor(np.ones((5, 8), ml_dtypes.bfloat16)).sync()),
             "matmul: a is float16 and b is bfloat16; both need one dtype")
    _refused(lambda: matmul(ts.tensor(np.ones(8, np.float16)).sync(), w),
             r"matmul: a has shape \(8,\); it needs \(M, K\)")
    _refused(lambda: matmul(a, ts.tensor(np.ones((1, 5, 8), np.float16)).sync()),
             r"matmul: b has shape \(1, 5, 8\); it needs 2 dims, \(N, K\)")
    _refused(lambda: matmul(a, w, out=ts.zeros((3, 4), dtype=ts.float16).sync()),
             r"matmul: out= has shape \(3, 4\) and dtype float16; this call writes shape "
             r"\(3, 5\)")
    _refused(lambda: matmul(a, w, out_dtype=ts.int32),
             "matmul: out_dtype='int32' is not supported; choose one of float16, bfloat16, "
             "float32")
    _refused(lambda: matmul(ts.tensor(np.ones((3, 8), np.float16)), w),
             "matmul: a must be a tensor, got .*a DeviceOp not run yet")
    _refused(lambda: matmul(np.ones((3, 8), np.float16), w),
             "matmul: a must be a tilesafe tensor, got ndarray")
    _refused(lambda: matmul(ts.tensor(np.ones((0, 8), np.float16)).sync(), w),
             r"matmul: a \(0, 8\) and b \(5, 8\) have an empty extent")
    assert np.all(out.numpy() == 7.0)


def test_scaled_misuse_is_refused():
    a8 = ts.tensor(np.ones((3, 8), ml_dtypes.float8_e4m3fn)).sync()
    w8 = ts.tensor(np.ones((5, 8), ml_dtypes.float8_e4m3fn)).sync()
    sa, sb = _scales()
    _refused(lambda: scaled_matmul(ts.tensor(np.ones((3, 8), np.float16)).sync(),
                                   ts.tensor(np.ones((5, 8), np.float16)).sync(), sa, sb),
             "scaled_matmul: a is float16; supported: float8_e4m3fn, float8_e5m2")
    _refused(lambda: scaled_matmul(a8, w8, ts.tensor(np.ones(2, np.float32)).sync(), sb),
             r"scaled_matmul: scale_a is float32 of shape \(2,\); it needs one float32 value")
    _refused(lambda: scaled_matmul(a8, w8, sa, ts.tensor(np.ones(1, np.float16)).sync()),
             r"scaled_matmul: scale_b is float16 of shape \(1,\)")
    _refused(lambda: scaled_matmul(a8, w8, 0.5, sb),
             "scaled_matmul: scale_a must be a tilesafe tensor, got float")
    _refused(lambda: scaled_matmul(a8, w8, sa, sb, fast_accumulation="yes"),
             "scaled_matmul: fast_accumulation='yes' must be True or False")


def test_fast_accumulation_launches_the_fast_kernels_under_its_own_key(monkeypatch):
    """Asked for, fast accumulation reaches the scaled kernels (tiled and persistent) as
    FAST=True and files its tuning under a key of its own; the interpreter's sums are the
    same exact ones."""
    a, b = _operands(200, 136, 264, "float8_e4m3fn", seed=14)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    keys, fast_consts = [], []
    real = mm_module.launch_tiled.fn

    def spy(*args, **kwargs):
        keys.append(mm_module._skinny.problem_key(*args[:5]))
        return real(*args, **kwargs)
    monkeypatch.setattr(mm_module.launch_tiled, "fn", spy)
    kernel_type = type(mm_module.tile_kernel("tiled", True))
    real_call = kernel_type.__call__

    def spy_call(self, *args, **kwargs):
        fast_consts.append(kwargs.get("FAST"))
        return real_call(self, *args, **kwargs)
    monkeypatch.setattr(kernel_type, "__call__", spy_call)
    results = [scaled_matmul(at, bt, *_scales(), fast_accumulation=fast).sync().numpy()
               for fast in (False, True)]
    assert np.array_equal(results[0], results[1])
    _assert_close(results[1], a, b.T, "bfloat16", SCALE_A * SCALE_B)
    assert [key[-1] for key in keys] == [True, "fast accumulation"], keys
    out = Output(None, (200, 136), ts.bfloat16, at.device)
    out.fast_accumulation = True
    r = mm_module.launch_persistent(at, bt.T, out, *(s.reshape(1) for s in _scales())).sync()
    assert np.array_equal(out.tensor(r.z.partition).numpy(), results[0])
    assert fast_consts == [False, True, True], fast_consts


@pytest.mark.parametrize("index", range(len(skinny.GEMV_CONFIGS)))
def test_every_gemv_config_matches_float64(index):
    """Each GEMV config the tuner may pick, the 2-D one-launch kernel and split-K with its
    merge alike, on a product whose K splits (and whose N is no multiple of 64)."""
    config = skinny.GEMV_CONFIGS[index]
    a, b = _operands(1, 200, 2048, "bfloat16", seed=20 + index)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = Output(None, (1, 200), ts.bfloat16, at.device)
    r = skinny.launch_gemv.fn(at, bt.T, out, None, None, config=config).sync()
    _assert_close(out.tensor(r.z).numpy(), a, b.T, "bfloat16")


def test_a_gemv_config_may_leave_out_the_grid_dependency_wait():
    """``"programmatic": False`` in a GEMV config compiles the kernel without the wait (a
    variant made once, beside the default), and the product is the same."""
    base = {"BN": 16, "BK": 256, "slices": 1, "occupancy": 3}
    plain = skinny.with_occupancy(skinny.gemv_rows, base)
    no_wait = skinny.with_occupancy(skinny.gemv_rows, {**base, "programmatic": False})
    assert plain.hints.get("programmatic_launch", True) is True
    assert no_wait.hints["programmatic_launch"] is False
    assert no_wait.hints["default"] == {"occupancy": 3}
    assert skinny.with_occupancy(skinny.gemv_rows, {**base, "programmatic": False}) is no_wait
    a, b = _operands(1, 200, 2048, "bfloat16", seed=7)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    out = Output(None, (1, 200), ts.bfloat16, at.device)
    r = skinny.launch_gemv.fn(at, bt.T, out, None, None,
                              config={**base, "programmatic": False}).sync()
    _assert_close(out.tensor(r.z).numpy(), a, b.T, "bfloat16")


# -- SwiGLU's gating fused into the down projection's GEMV -------------------------------------

def _silu_mul_reference(gate_up: np.ndarray, dtype: str) -> np.ndarray:
    """transformers' rounding: silu in float64 rounded to dtype, times up rounded again."""
    half = gate_up.shape[1] // 2
    g, u = gate_up[:, :half].astype(np.float64), gate_up[:, half:].astype(np.float64)
    activated = (g / (1.0 + np.exp(-g))).astype(NP[dtype]).astype(np.float64)
    return (activated * u).astype(NP[dtype])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m,n,i", [(1, 70, 300), (1, 16, 1024), (3, 40, 96)])
def test_silu_mul_matmul_equals_the_two_calls(monkeypatch, dtype, m, n, i):
    from tilesafe.kernels import silu_mul, silu_mul_matmul
    gate_up, b = _operands(m, n, 2 * i, dtype, seed=m + n)
    b = (b[:, :i] / 8).astype(NP[dtype])
    fused = []
    original = mm_module.gemv_rows_silu_mul
    monkeypatch.setattr(mm_module, "with_occupancy",
                        lambda kern, config: fused.append(kern) or skinny.with_occupancy(
                            kern, config))
    got = silu_mul_matmul(ts.tensor(gate_up).sync(), ts.tensor(b).sync()).sync().numpy()
    assert fused == ([original] if m == 1 else [])  # one row: the one-launch form
    two = matmul(silu_mul(ts.tensor(gate_up).sync()).sync(), ts.tensor(b).sync()).sync()
    assert np.array_equal(got, two.numpy())
    _assert_close(got, _silu_mul_reference(gate_up, dtype), b.T, dtype)


def test_silu_mul_matmul_records_into_a_graph_with_its_buffers():
    from tilesafe.kernels import silu_mul_matmul
    gate_up, b = _operands(3, 24, 64, "bfloat16", seed=4)
    gu, w = ts.tensor(gate_up).sync(), ts.tensor(b[:, :32]).sync()
    out = ts.zeros((3, 24), ts.bfloat16).sync()
    act = ts.zeros((3, 32), ts.bfloat16).sync()
    work = mm_module.matmul_workspace(act, w).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(silu_mul_matmul(gu, w, activations=act, out=out, workspace=work))
    assert np.all(out.numpy() == 0)  # recorded, nothing ran
    graph.replay()
    want = silu_mul_matmul(gu, w).sync().numpy()
    assert np.array_equal(out.numpy(), want)


def test_silu_mul_matmul_argument_errors():
    from tilesafe.kernels import silu_mul_matmul
    w = ts.zeros((8, 16), ts.bfloat16).sync()
    cases = [
        (ts.zeros((1, 31), ts.bfloat16).sync(), w,
         r"silu_mul_matmul: gate_up has shape \(1, 31\); it needs \(M, 2 \* I\)"),
        (ts.zeros((1, 40), ts.bfloat16).sync(), w,
         r"silu_mul_matmul: a has shape \(1, 20\) and b \(8, 16\).*K is 20 in a, 16 in b"),
        (ts.zeros((1, 32), ts.float16).sync(), w,
         "silu_mul_matmul: a is float16 and b is bfloat16"),
        (np.zeros((1, 32)), w, "silu_mul_matmul: gate_up must be a tilesafe tensor"),
    ]
    for gate_up, weight, words in cases:
        with pytest.raises(ts.ArgumentError, match=words):
            silu_mul_matmul(gate_up, weight)


# -- a residual add in the product's own store (accumulate=True) --------------------------------

def _summed(residual: np.ndarray, product: np.ndarray) -> np.ndarray:
    """A torch add of the written product: both as float32, the sum rounded once."""
    return (residual.astype(np.float32) + product.astype(np.float32)).astype(residual.dtype)


def _residual(shape: tuple, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 4).astype(ml_dtypes.bfloat16)


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values).view(np.uint8)


@pytest.mark.parametrize("index", range(len(skinny.GEMV_CONFIGS)))
def test_every_gemv_config_adds_into_its_output(index):
    """Each GEMV config the tuner may pick adds the rounded product to the output: the
    one-launch store, the merge of split-K and, where K allows no split, the 3-D GEMV's own
    store (K = 1040 takes no split at BK 512 or 256)."""
    config = skinny.GEMV_CONFIGS[index]
    for k in (2048, 1040):
        a, b = _operands(1, 200, k, "bfloat16", seed=40 + index)
        residual = _residual((1, 200), seed=k)
        at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
        product = Output(None, (1, 200), ts.bfloat16, at.device)
        r = skinny.launch_gemv.fn(at, bt.T, product, None, None, config=config).sync()
        written = product.tensor(r.z).numpy()
        out = ts.tensor(residual).sync()
        target = skinny.AccumulatingOutput(out, (1, 200), ts.bfloat16, at.device)
        skinny.launch_gemv.fn(at, bt.T, target, None, None, config=config).sync()
        assert np.array_equal(_bits(out.numpy()), _bits(_summed(residual, written)))


@pytest.mark.parametrize("m", [1, 3, 40])
def test_matmul_accumulate_adds_the_rounded_product(m):
    """Every path: the one-row GEMV's store, and the product then ``add_into`` on the mma and
    tiled paths; leading dimensions and a float32 output too."""
    a, b = _operands(m, 70, 300, "bfloat16", seed=m)
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    residual = _residual((m, 70), seed=m + 1)
    out = ts.tensor(residual).sync()
    got = matmul(at, bt, out=out, accumulate=True).sync()
    assert got is out
    written = matmul(at, bt).sync().numpy()
    assert np.array_equal(_bits(out.numpy()), _bits(_summed(residual, written)))
    wide = residual.astype(np.float32).reshape(1, m, 70)
    out32 = ts.tensor(wide).sync()
    matmul(ts.tensor(a.reshape(1, m, 300)).sync(), bt, out_dtype=ts.float32, out=out32,
           accumulate=True).sync()
    written32 = matmul(at, bt, out_dtype=ts.float32).sync().numpy()
    assert np.array_equal(out32.numpy(), _summed(wide, written32.reshape(1, m, 70)))


def test_accumulate_misuse_is_refused_with_nothing_written():
    a = ts.tensor(np.ones((1, 8), np.float16)).sync()
    w = ts.tensor(np.ones((8, 8), np.float16)).sync()
    _refused(lambda: matmul(a, w, accumulate=True),
             "matmul: accumulate=True adds the product to out=, and out= is missing")
    short = ts.full((1, 5), 7.0, dtype=ts.float16).sync()
    _refused(lambda: matmul(a, w, out=short, accumulate=True),
             r"matmul: out= has shape \(1, 5\) and dtype float16; this call writes shape "
             r"\(1, 8\)")
    assert np.all(short.numpy() == 7.0)
    from tilesafe.kernels import silu_mul_matmul
    _refused(lambda: silu_mul_matmul(ts.tensor(np.ones((1, 16), np.float16)).sync(), w,
                                     accumulate=True),
             "silu_mul_matmul: accumulate=True adds the product to out=")
    # the output is borrowed exclusively: an input sharing its memory is refused by the call
    # before anything is launched
    square = ts.tensor(np.ones((1, 8), np.float16)).sync()
    with pytest.raises(ts.AliasingError, match="matmul: out and a overlap in memory, and out "
                       "is written"):
        matmul(square, w, out=square, accumulate=True)
    assert np.all(square.numpy() == 1.0)


def test_a_written_tensor_over_another_of_the_call_is_refused_before_any_launch():
    """The two-launch forms (the gating or the norm into a buffer, then the product; a split
    product into a workspace, then its merge) would meet an overlap only at their second
    launch, after the first had written: every call refuses it up front, nothing written."""
    from tilesafe.kernels import rms_norm_matmul, silu_mul_matmul
    w = ts.tensor(np.ones((8, 16), np.float16)).sync()
    raw = np.full(64, 3.0, np.float16)
    out = ts.from_dlpack(raw[:16].reshape(2, 8))
    activations = ts.from_dlpack(raw[8:40].reshape(2, 16))  # (overlaps out's second row)
    gate_up = ts.tensor(np.ones((2, 32), np.float16)).sync()
    with pytest.raises(ts.AliasingError, match="silu_mul_matmul: out and activations overlap"):
        silu_mul_matmul(gate_up, w, activations=activations, out=out)
    x = ts.tensor(np.ones((2, 16), np.float16)).sync()
    with pytest.raises(ts.AliasingError, match="rms_norm_matmul: out and normed overlap"):
        rms_norm_matmul(x, None, w, normed=activations, out=out)
    workspace = ts.from_dlpack(raw[32:].view(np.float32))
    with pytest.raises(ts.AliasingError, match="matmul: out and workspace overlap"):
        matmul(ts.tensor(np.ones((2, 16), np.float16)).sync(), w,
               out=ts.from_dlpack(raw[32:48].reshape(2, 8)), workspace=workspace)
    assert (raw == 3.0).all()


class _EveryConfigTiming(timing_module.Timing):
    """Times every config on the interpreter (each run really runs), the last one fastest."""

    def can_time(self, device):
        return True

    def describe(self, device):
        return "sm_90", "Fake GPU 80GB"

    def stream(self, device):
        return ts.Stream(device)

    def time_runs(self, config, make_op, stream, runs):
        for _ in range(runs):
            make_op().sync_on(stream)
        return 1.0 / (1 + list(skinny.GEMV_CONFIGS).index(config))


def test_tuning_an_accumulating_product_adds_once(tmp_path, monkeypatch):
    """The tuner runs every config several times; those runs add into a clone, so the
    caller's output holds its values plus one product."""
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TILESAFE_AUTOTUNE", raising=False)
    monkeypatch.setattr(store_module, "SHIPPED_DIR", tmp_path)
    monkeypatch.setattr(timing_module, "TIMING", _EveryConfigTiming())
    a, b = _operands(1, 48, 512, "bfloat16", seed=9)
    residual = _residual((1, 48), seed=10)
    out = ts.tensor(residual).sync()
    matmul(ts.tensor(a).sync(), ts.tensor(b).sync(), out=out, accumulate=True).sync()
    at, bt = ts.tensor(a).sync(), ts.tensor(b).sync()
    winner = Output(None, (1, 48), ts.bfloat16, at.device)  # (the fastest: the last config)
    r = skinny.launch_gemv.fn(at, bt.T, winner, None, None,
                              config=skinny.GEMV_CONFIGS[-1]).sync()
    want = _summed(residual, winner.tensor(r.z).numpy())
    assert np.array_equal(_bits(out.numpy()), _bits(want))


# -- the RMSNorm fused into the product that reads it (rms_norm_matmul) --------------------------

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("m,n,k", [(1, 70, 300), (1, 24, 2560), (3, 40, 96)])
def test_rms_norm_matmul_equals_the_two_calls(monkeypatch, dtype, m, n, k):
    from tilesafe.kernels import rms_norm, rms_norm_matmul
    rng = np.random.default_rng(k)
    x = (rng.standard_normal((m, k)) * 3).astype(NP[dtype])
    g = (1 + rng.standard_normal(k) / 4).astype(NP[dtype])
    b = (rng.standard_normal((n, k)) / 8).astype(NP[dtype])
    fused = []
    monkeypatch.setattr(mm_module, "with_occupancy",
                        lambda kern, config: fused.append(kern) or skinny.with_occupancy(
                            kern, config))
    xt, gt, bt = ts.tensor(x).sync(), ts.tensor(g).sync(), ts.tensor(b).sync()
    got = rms_norm_matmul(xt, gt, bt, eps=1e-6).sync().numpy()
    assert fused == ([skinny.gemv_rows_normed] if m == 1 else [])  # one row: one launch
    normed = rms_norm(xt, gt, eps=1e-6).sync()
    assert np.array_equal(_bits(got), _bits(matmul(normed, bt).sync().numpy()))
    _assert_close(got, normed.numpy(), b.T, dtype)
    # against float64: the normalized row as transformers rounds it
    x64 = x.astype(np.float64)
    scale = 1 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + 1e-6)
    want = ((x64 * scale).astype(NP[dtype]).astype(np.float64) * g).astype(NP[dtype])
    close = np.abs(want.astype(np.float64) - normed.numpy().astype(np.float64))
    assert close.max() <= np.abs(want.astype(np.float64)).max() * 2.0 ** -6


def test_rms_norm_matmul_records_into_a_graph_and_refuses_misuse():
    from tilesafe.kernels import rms_norm_matmul
    x = ts.tensor(np.ones((1, 64), ml_dtypes.bfloat16)).sync()
    g = ts.tensor(np.ones(64, ml_dtypes.bfloat16)).sync()
    w = ts.tensor(np.full((8, 64), 0.5, ml_dtypes.bfloat16)).sync()
    out = ts.zeros((1, 8), ts.bfloat16).sync()
    work = mm_module.matmul_workspace(x, w).sync()
    with ts.CudaGraph.scope() as graph:
        graph.record(rms_norm_matmul(x, g, w, out=out, workspace=work))
    assert np.all(out.numpy() == 0)  # recorded, nothing ran
    graph.replay()
    assert np.allclose(out.numpy().astype(np.float32), 32.0, rtol=2 ** -7)
    _refused(lambda: rms_norm_matmul(x, ts.tensor(np.ones(63, ml_dtypes.bfloat16)).sync(), w),
             r"rms_norm_matmul: norm_weight has shape \(63,\); x's last axis has 64 elements")
    _refused(lambda: rms_norm_matmul(x, g, w, eps=0.0),
             "rms_norm_matmul: eps=0.0 must be a finite positive number")
    _refused(lambda: rms_norm_matmul(x, g, ts.tensor(np.ones((8, 32), ml_dtypes.bfloat16)).sync()),
             r"rms_norm_matmul: x has shape \(1, 64\) and b \(8, 32\)")


def test_fused_products_refuse_bad_outputs_before_launching():
    from tilesafe.kernels import rms_norm_matmul, silu_mul_matmul
    bf16 = ml_dtypes.bfloat16
    x3 = ts.tensor(np.ones((3, 64), bf16)).sync()
    g = ts.tensor(np.ones(64, bf16)).sync()
    w = ts.tensor(np.ones((8, 64), bf16)).sync()
    normed = ts.full((3, 64), 5.0, dtype=ts.bfloat16).sync()
    _refused(lambda: rms_norm_matmul(x3, g, w, out=ts.zeros((3, 7), ts.bfloat16).sync(),
                                     normed=normed),
             r"rms_norm_matmul: out= has shape \(3, 7\)")
    assert np.all(normed.numpy() == 5.0)  # (the norm's launch did not run)
    _refused(lambda: rms_norm_matmul(x3[:1], g, w, normed=ts.zeros((2, 64), ts.bfloat16).sync()),
             r"rms_norm_matmul: normed= has shape \(2, 64\)")
    _refused(lambda: rms_norm_matmul(x3.reshape(1, 3, 64), g, w),
             r"rms_norm_matmul: x has shape \(1, 3, 64\); it needs \(M, K\)")
    _refused(lambda: rms_norm_matmul(ts.tensor(np.ones((1, 64), np.float32)).sync(), g, w),
             "rms_norm_matmul: x is float32")
    act = ts.full((3, 32), 5.0, dtype=ts.bfloat16).sync()
    _refused(lambda: silu_mul_matmul(x3, w[:, :32], activations=act,
                                     out=ts.zeros((3, 9), ts.bfloat16).sync(), accumulate=True),
             r"silu_mul_matmul: out= has shape \(3, 9\)")
    assert np.all(act.numpy() == 5.0)
    _refused(lambda: matmul(x3, w, out=ts.zeros((3, 8), ts.bfloat16).sync(), accumulate="no"),
             "matmul: accumulate='no' must be True or False")
    x4 = ts.tensor(np.ones((2, 2, 64), bf16)).sync()
    crossed = ts.zeros((2, 2, 8), ts.bfloat16).sync().permute(1, 0, 2)  # (no (4, 8) view)
    _refused(lambda: matmul(x4, w, out=crossed, accumulate=True),
             r"matmul: out= \(2, 2, 8\) cannot be viewed as \(4, 8\) rows")


def test_accumulate_into_a_torch_residual_and_through_an_alias():
    """A torch residual is added to in place (its own tensor handed back); a torch view of
    the same memory passed as the input is refused by the launch, the residual untouched."""
    torch = pytest.importorskip("torch")
    from tilesafe.kernels import rms_norm_matmul
    rng = np.random.default_rng(5)
    residual = torch.from_numpy(rng.standard_normal((1, 64)).astype(np.float32)).to(torch.bfloat16)
    weight = torch.from_numpy(rng.standard_normal((64, 64)).astype(np.float32) / 8).to(
        torch.bfloat16)
    a = torch.from_numpy(rng.standard_normal((1, 64)).astype(np.float32)).to(torch.bfloat16)
    before = residual.clone()
    got = matmul(a, weight, out=residual, accumulate=True)
    assert got is residual
    product = (a.float() @ weight.float().T).to(torch.bfloat16)
    assert torch.allclose(residual.float(), (before.float() + product.float()), rtol=2 ** -7,
                          atol=2 ** -6)
    kept = residual.clone()
    with pytest.raises(ts.AliasingError, match="overlap in memory"):
        matmul(residual[:, :64], weight, out=residual, accumulate=True)  # (a view of out)
    assert torch.equal(residual, kept)
    normed = rms_norm_matmul(residual, None, weight)  # (torch in, torch out)
    assert isinstance(normed, torch.Tensor) and normed.shape == (1, 64)
