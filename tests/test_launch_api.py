"""The launch surface a Python user expects: arguments by position or by name under Python's
binding rules (missing, duplicate and unknown names are ArgumentErrors naming the launch's
line), and a result that unpacks to the tensors passed (tc.Const and scalar arguments are not
in it) and reads by parameter name."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.errors import ArgumentError

from conftest import marker_line


@ts.kernel
def axpy(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], alpha: float,
         K: tc.Const[int]):
    z.store(z.load() + tc.load_tile_like(x, z) * alpha * K)


def _at(tag: str) -> str:
    return f"test_launch_api.py:{marker_line(__file__, tag)}"


def _zx(n=16):
    return ts.zeros(n, device="cpu").sync().partition(8), ts.ones(n, device="cpu").sync()


def test_arguments_by_name_in_any_order_and_mixed_with_positions():
    z, x = _zx()
    z, x = axpy(K=2, alpha=0.5, x=x, z=z).sync()
    z, x = axpy(z, x, K=3, alpha=1.0).sync()
    z, x = axpy.launch(z, x, 2.0, K=1).sync()
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 1.0 + 3.0 + 2.0))


def test_binding_errors_name_the_launch_and_the_parameters():
    z, x = _zx()
    with pytest.raises(ArgumentError, match=rf"{_at('missing')}: kernel 'axpy' takes 4 "
                                            r"argument\(s\) \(z, x, alpha, K\), got 3: missing "
                                            "'alpha'"):
        axpy(z, x, K=2)  # <- missing
    with pytest.raises(ArgumentError, match=rf"{_at('twice')}: kernel 'axpy' got two values "
                                            "for 'x': by position"):
        axpy(z, x, 1.0, 2, x=x)  # <- twice
    with pytest.raises(ArgumentError, match=rf"{_at('unknown')}: kernel 'axpy' has no "
                                            "parameter 'beta'"):
        axpy(z, x, 1.0, 2, beta=3)  # <- unknown
    with pytest.raises(ArgumentError, match="takes 4 argument"):
        axpy(z, x, 1.0, 2, 5)
    z, x = axpy(z, x, 1.0, 2).sync()  # nothing was consumed by the refusals
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 2.0))


def test_the_result_holds_the_tensors_passed_by_position_and_by_name():
    z, x = _zx()
    result = axpy(z, x, 1.0, K=1).sync()
    assert len(result) == 2 and result[0] is z and result[1] is x  # no alpha, no K
    assert result.z is z and result.x is x
    out, source = result
    assert out is z and source is x


@ts.kernel
def plain(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z))


@ts.kernel
def with_a_const(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
                 SCALE: tc.Const[float] = 3.0):
    z.store(tc.load_tile_like(x, z) * SCALE)


def test_adding_a_const_does_not_change_what_callers_unpack():
    z, x = _zx()
    z, x = plain(z, x).sync()
    z, x = with_a_const(z, x).sync()  # the same call and unpacking with the extra Const
    t = z.unpartition()
    assert np.array_equal(t.numpy(), np.full(16, 3.0))
    z, x = with_a_const(t.partition(8), x, SCALE=0.5).sync()
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 0.5))


def test_repeated_launches_by_name_reuse_the_plan_of_the_first():
    z, x = _zx()
    z, x = axpy(z, x, alpha=1.0, K=1).sync()
    compiled, launched = axpy.compile_count, axpy.launch_count
    for _ in range(3):
        z, x = axpy(z, x, alpha=1.0, K=1).sync()
    assert axpy.compile_count == compiled and axpy.launch_count == launched + 3
    assert np.array_equal(z.unpartition().numpy(), np.full(16, 4.0))


# -- DeviceOps before they run ---------------------------------------------------------------

def test_constructor_ops_know_their_tensor_before_they_run():
    op = ts.zeros((4, 8), ts.float16, device="cpu")
    assert (op.shape, op.dtype, op.device, op.ndim) == ((4, 8), ts.float16, ts.devices()[0], 2)
    assert ts.arange(10, 0, -3).shape == (4,) and ts.arange(0, 1, 0.1).shape == (10,)
    assert ts.eye(3, 5).shape == (3, 5) and ts.linspace(0, 1, 7).shape == (7,)
    assert ts.tensor(np.zeros((2, 3))).shape == (2, 3)
    t = ts.ones(6, device="cpu").sync()
    assert t.clone().shape == (6,) and t.clone().dtype == ts.float32
    assert ts.zeros((8, 8)).partition((4, 2)).grid == (2, 4)


def test_compiling_for_ops_not_run_yet_does_not_run_them():
    z, x = ts.zeros(64, device="cpu").partition(16), ts.ones(64, device="cpu")
    compiled = axpy.compile_count
    assert "mut_tensor<16xf32>" in axpy.ir_text(z, x, 1.0, K=2)
    assert axpy.compile_count == compiled  # the IR needs no backend build
    z, x = axpy(z, x, alpha=1.0, K=2).sync()  # neither op was consumed by ir()
    assert np.array_equal(z.unpartition().numpy(), np.full(64, 2.0))


def test_what_needs_a_tensor_says_to_call_sync_first():
    op = ts.zeros(16, device="cpu")
    line = marker_line(__file__, "borrow-op")
    with pytest.raises(ArgumentError, match=rf"{_at('borrow-op')}: borrow_mut takes a tensor, "
                                            "got .*a DeviceOp not run yet"):
        ts.borrow_mut(op)  # <- borrow-op
    assert line
    with pytest.raises(ts.DeviceOpError, match=r"(?s)has not run.*call \.sync\(\) first"):
        op.numpy()
    with pytest.raises(AttributeError, match="device work not run yet; call .sync\\(\\)"):
        op.then(lambda t: t).reshape(4, 4)
    with pytest.raises(ArgumentError, match="call .sync\\(\\) first"):
        ts.from_dlpack(op)
    with pytest.raises(ArgumentError, match="compiling 'axpy' for a device needs"):
        axpy.compile(ts.zeros(16, device="cpu").partition(8), op, 1.0, 1)
    with ts.CudaGraph.scope() as graph:
        with pytest.raises(ts.DeviceOpError, match="call .sync\\(\\) on constructor ops"):
            graph.record(axpy(ts.zeros(16, device="cpu").partition(8), op, 1.0, 1))
    assert np.array_equal(op.sync().numpy(), np.zeros(16))  # still runs once, when driven


def test_an_unusable_device_is_a_tilesafe_error(monkeypatch):
    monkeypatch.setenv("TILESAFE_DEVICE", "cuda:9")
    with pytest.raises(ts.DeviceError, match="'cuda:9' is not available"):
        ts.zeros(4)
    with pytest.raises(ts.DeviceError, match="unknown device 'tpu'"):
        ts.zeros(4, device="tpu")


@ts.kernel
def scaled_rows(z: tc.MutTensor[tc.f32, ("BM", 8)], x: tc.Tensor[tc.f32, (-1, 8)],
                BM: tc.Const[int]):
    rows = tc.load_tile_like(x, z)
    z.store(rows * BM)


def test_a_const_the_partition_names_may_be_left_out_and_is_checked_when_passed():
    x = ts.tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device="cpu")
    z = ts.zeros((8, 8), device="cpu").sync().partition((4, 8))
    z, x = scaled_rows(z, x).sync()
    z, x = scaled_rows(z, x, BM=4).sync()  # the same specialization as leaving it out
    assert scaled_rows.compile_count == 1
    with pytest.raises(ts.TileShapeMismatchError, match=r"\(4, 8\).*BM = 2") as info:
        scaled_rows(z, x, BM=2)  # <- wrong-bm
    assert _at("wrong-bm") in str(info.value)
    z, x = scaled_rows(z, x).sync()  # nothing was lent to the refused launch
    assert np.array_equal(z.unpartition().numpy(), x.numpy() * 4)


@ts.kernel(hints={"tensor_dim_factor": 8})
def copy_aligned(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z))


def test_a_launch_that_breaks_the_tensor_dim_factor_promise_is_refused():
    x = ts.ones((8, 8), device="cpu").sync()
    z = ts.zeros((8, 8), device="cpu").sync().partition((4, 8))
    z, x = copy_aligned(z, x).sync()
    assert np.array_equal(z.unpartition().numpy(), x.numpy())
    bad = ts.ones((6, 8), device="cpu").sync()
    z6 = ts.zeros((6, 8), device="cpu").sync().partition((2, 8))
    with pytest.raises(ArgumentError, match=r"extent 0 is 6.*tensor_dim_factor=8") as info:
        copy_aligned(z6, bad)  # <- bad-factor
    assert _at("bad-factor") in str(info.value)
    assert np.array_equal(bad.numpy(), np.ones((6, 8), np.float32))  # nothing was lent
    assert np.array_equal(z6.unpartition().numpy(), np.zeros((6, 8), np.float32))


# -- the safety rules through the new launch surface ------------------------------------------

@ts.kernel
def inc_by(z: tc.MutTensor[tc.f32, ("B",)], x: tc.Tensor[tc.f32, (-1,)], B: tc.Const[int],
           step: float = 1.0):
    z.store(z.load() + tc.load_tile_like(x, z) * step)


def test_keyword_launches_still_refuse_two_imports_of_one_buffer():
    buffer = np.zeros(16, np.float32)
    with pytest.raises(ts.AliasingError) as info:
        inc_by(x=ts.from_dlpack(buffer), z=ts.from_dlpack(buffer).partition(4))  # <- twins
    assert _at("twins") in str(info.value)
    z, x = info.value.arguments[0], info.value.arguments[1]  # back in parameter order
    assert isinstance(z, ts.Partition) and isinstance(x, ts.Tensor)
    assert z.unpartition().numpy().shape == (16,)
    with pytest.raises(ts.AliasingError):  # overlapping slices of one buffer, left-out B
        inc_by(ts.from_dlpack(buffer[0:8]).partition(4), ts.from_dlpack(buffer[4:12]))


def test_a_keyword_launch_that_fails_after_a_move_hands_the_arguments_back():
    t = ts.ones(16, device="cpu").sync()
    z = t.partition(4)  # t is moved
    with pytest.raises(ts.MovedError) as info:
        inc_by(z=z, x=t)  # <- moved
    assert _at("moved") in str(info.value)
    z = info.value.arguments[0]
    assert np.array_equal(z.unpartition().numpy(), np.ones(16, np.float32))


def test_a_shared_result_cannot_be_the_output_of_a_keyword_launch():
    x = ts.ones(16, device="cpu").sync()
    p, x = inc_by(z=ts.zeros(16, device="cpu").sync().partition(4), x=x).shared().sync()
    with pytest.raises(ts.BorrowError, match="read-only result of .shared()"):
        inc_by(z=p, x=x, step=2.0)


def test_compiling_lazy_arguments_lends_nothing():
    x = ts.ones(16, device="cpu").sync()
    inc_by.ir(ts.zeros(16, device="cpu").partition(4), x, step=3.0)
    z = ts.borrow_mut(x).partition(4)  # x is free: compiling borrowed nothing
    inc_by(z, ts.ones(16, device="cpu").sync()).sync()
    assert np.array_equal(x.numpy(), np.full(16, 2.0, np.float32))


def test_threads_and_asyncio_launching_by_keyword_on_one_stream_lose_no_update():
    """Threads borrow inside the stream's work (a borrow taken beside a pending one is refused),
    launch by keyword with the Const left out; then awaited keyword launches."""
    import asyncio
    import threading

    t = ts.zeros(64, device="cpu").sync()
    x = ts.ones(64, device="cpu").sync()
    stream = ts.Stream("cpu")
    errors: list = []

    def work():
        try:
            for _ in range(25):
                ts.value(None).then(lambda _: inc_by(z=ts.borrow_mut(t).partition(8), x=x,
                                                     step=1.0)).sync_on(stream)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]

    async def launches():
        for _ in range(25):
            result = await inc_by(z=ts.borrow_mut(t).partition(8), x=x)
            assert result._fields == ("z", "x") and result.x is x

    asyncio.run(launches())
    assert np.array_equal(t.numpy(), np.full(64, 4 * 25 + 25, np.float32))
