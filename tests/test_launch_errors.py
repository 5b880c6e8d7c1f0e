"""Misuse is a feature: launches that break the host-side rules (README, "Safety": unsafe
kernels, moves, aliasing, launch preconditions) are rejected before anything runs, with the right LaunchError subclass and a message
that names the launch site (file:line of this test) and the fix. Afterwards every tensor of the
failed launch is unchanged and still usable: it reads back with ``.numpy()`` and a correct
launch with the very same objects succeeds.

Launches are written ``kernel(...).sync()`` on one line (marked ``# <- tag``), so the expected
launch site is that line whether the launch is checked when it is created or when it is driven.
"""

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line
from tilesafe.errors import (AliasingError, ArgumentError, CompileError, DeviceOpError,
                             DTypeMismatchError, LaunchError, MovedError, PartitionError,
                             PartitionRankError, RankMismatchError, ExtentMismatchError,
                             SignatureError, TileShapeMismatchError, UnsafeError)
from tilesafe.host.tensor import Tensor

pytestmark = pytest.mark.usefixtures("launch_path")  # both launch paths

FILE = os.path.abspath(__file__)


def here(tag: str) -> int:
    """The 1-based line of this file that carries the marker ``# <- tag``."""
    return marker_line(__file__, tag)


def site(tag: str) -> str:
    return f"{FILE}:{here(tag)}"


def check(err: Exception, cls: type, phrase: str, tag: str) -> None:
    """``err`` is exactly ``cls``, says ``phrase`` and names the ``tag`` line."""
    assert type(err) is cls, f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert phrase in str(err), str(err)
    assert site(tag) in str(err), f"launch site {site(tag)} not in: {err}"


def assert_fix(err: Exception) -> None:
    """The message says how to fix it (every error does). Asserted last in each test, so a
    missing fix does not hide the checks that the failed launch left everything usable."""
    assert getattr(err, "hint", ""), f"no fix in: {err}"
    assert err.hint in str(err)


# ---------------------------------------------------------------------------------------------
# kernels and operands

N, TILE = 64, 16


@ts.kernel
def add(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def x_values(n=N):
    return np.arange(n, dtype=np.float32)


def operands(n=N, tile=TILE):
    """(z, x, y): a partitioned output poisoned with -1, x = 0..n-1, y = 2."""
    z = ts.full(n, -1.0).sync().partition(tile)
    return z, ts.tensor(x_values(n)).sync(), ts.full(n, 2.0).sync()


def assert_untouched_and_usable(z, x, y, n=N, tile=TILE):
    """Nothing ran: z still holds its poison, x and y read back unchanged; then a correct
    launch with the same x and y (and z's tensor) works and hands back the same objects."""
    assert np.array_equal(x.numpy(), x_values(n))
    assert np.array_equal(y.numpy(), np.full(n, 2.0, np.float32))
    if z is not None:
        t = z.unpartition()
        assert np.array_equal(t.numpy(), np.full(n, -1.0, np.float32)), "the output changed"
        z = t.partition(tile)
    else:
        z = ts.zeros(n).sync().partition(tile)
    out = add(z, x, y).sync()
    assert out[0] is z and out[1] is x and out[2] is y
    assert np.array_equal(z.unpartition().numpy(), x_values(n) + 2)
    assert np.array_equal(x.numpy(), x_values(n))


def launch_fails(cls, thunk):
    with pytest.raises(LaunchError) as info:
        thunk()
    return info.value


# =============================================================================================
# arguments: count, kind, dtype, rank, static extents (rule 9)


def test_too_few_arguments():
    z, x, y = operands()
    err = launch_fails(ArgumentError, lambda: add(z, x).sync())  # <- too-few
    check(err, ArgumentError, "takes 3 argument(s) (z, x, y), got 2", "too-few")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_too_many_arguments():
    z, x, y = operands()
    err = launch_fails(ArgumentError, lambda: add(z, x, y, y).sync())  # <- too-many
    check(err, ArgumentError, "got 4", "too-many")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_wrong_dtype():
    z, x, y = operands()
    x64 = ts.tensor(x_values().astype(np.float64)).sync()
    err = launch_fails(DTypeMismatchError, lambda: add(z, x64, y).sync())  # <- dtype
    check(err, DTypeMismatchError, "argument 'x' of 'add' must have dtype f32, got f64", "dtype")
    assert np.array_equal(x64.numpy(), x_values().astype(np.float64))
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_wrong_output_dtype():
    z, x, y = operands()
    zi = ts.zeros(N, ts.int32).sync().partition(TILE)
    err = launch_fails(DTypeMismatchError, lambda: add(zi, x, y).sync())  # <- out-dtype
    check(err, DTypeMismatchError, "argument 'z' of 'add' must have dtype f32, got i32", "out-dtype")
    assert np.array_equal(zi.unpartition().numpy(), np.zeros(N, np.int32))
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_wrong_rank():
    z, x, y = operands()
    x2 = ts.tensor(x_values().reshape(8, 8)).sync()
    err = launch_fails(RankMismatchError, lambda: add(z, x2, y).sync())  # <- rank
    check(err, RankMismatchError, "must have rank 1, got shape (8, 8)", "rank")
    assert np.array_equal(x2.numpy(), x_values().reshape(8, 8))
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


@ts.kernel
def add_static(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (64,)],
               y: tc.Tensor[tc.f32, ("N",)], N: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def test_static_extent_mismatch():
    z, x, y = operands()
    short = ts.zeros(32).sync()
    err = launch_fails(ExtentMismatchError, lambda: add_static(z, short, y, 64).sync())  # <- extent
    check(err, ExtentMismatchError, "static extent 64 differs from the tensor's shape (32,)", "extent")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_const_named_extent_mismatch():
    z, x, y = operands()
    err = launch_fails(ExtentMismatchError, lambda: add_static(z, x, y, 32).sync())  # <- extent-const
    check(err, ExtentMismatchError, "static extent 32 differs from the tensor's shape (64,)",
          "extent-const")
    assert_untouched_and_usable(z, x, y)
    z2, x2, y2 = operands()
    add_static(z2, x2, y2, 64).sync()  # the matching extent is accepted
    assert np.array_equal(z2.unpartition().numpy(), x_values() + 2)
    assert_fix(err)


def test_tensor_where_a_partition_is_expected():
    _, x, y = operands()
    out = ts.full(N, -1.0).sync()
    err = launch_fails(ArgumentError, lambda: add(out, x, y).sync())  # <- want-partition
    check(err, ArgumentError, "argument 'z' of 'add' is a tc.MutTensor: pass a partition",
          "want-partition")
    assert "partition(" in err.hint
    assert np.array_equal(out.numpy(), np.full(N, -1.0, np.float32))
    assert_untouched_and_usable(out.partition(TILE), x, y)
    assert_fix(err)


def test_partition_where_a_tensor_is_expected():
    z, x, y = operands()
    xp = ts.tensor(x_values()).sync().partition(TILE)
    err = launch_fails(ArgumentError, lambda: add(z, xp, y).sync())  # <- want-tensor
    check(err, ArgumentError, "argument 'x' of 'add' is a shared tc.Tensor, got a partition",
          "want-tensor")
    assert "unpartition()" in err.hint
    assert np.array_equal(xp.unpartition().numpy(), x_values())
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


@pytest.mark.parametrize("slot", [0, 1])
def test_numpy_array_passed_directly(slot):
    z, x, y = operands()
    array = x_values()
    args = [z, x, y]
    args[slot] = array
    err = launch_fails(ArgumentError, lambda: add(*args).sync())  # <- numpy-arg
    check(err, ArgumentError, f"argument '{'zx'[slot]}' of 'add' is a numpy array", "numpy-arg")
    assert "ts.tensor(" in err.hint
    assert np.array_equal(array, x_values())
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_python_list_passed_directly():
    z, x, y = operands()
    err = launch_fails(ArgumentError, lambda: add(z, list(range(N)), y).sync())  # <- list-arg
    check(err, ArgumentError, "argument 'x' of 'add' has unsupported type list", "list-arg")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


@ts.kernel
def axpy(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], y: tc.Tensor[tc.f32, (-1,)],
         alpha: float, reps: tc.Const[int]):
    acc = tc.load_tile_like(y, z)
    for _ in range(reps):
        acc = acc + alpha * tc.load_tile_like(x, z)
    z.store(acc)


@pytest.mark.parametrize("alpha,reps,phrase", [
    ("2", 1, "argument 'alpha' of 'axpy' is a f32 scalar, got '2'"),
    (2.0, 1.5, "argument 'reps' of 'axpy' is a compile-time constant (int), got 1.5"),
    (2.0, "1", "argument 'reps' of 'axpy' is a compile-time constant (int), got '1'"),
], ids=["scalar-str", "const-float", "const-str"])
def test_scalar_and_constant_arguments(alpha, reps, phrase):
    z, x, y = operands()
    err = launch_fails(ArgumentError, lambda: axpy(z, x, y, alpha, reps).sync())  # <- scalar
    check(err, ArgumentError, phrase, "scalar")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_tensor_passed_for_a_constant():
    z, x, y = operands()
    err = launch_fails(ArgumentError, lambda: axpy(z, x, y, 2.0, x).sync())  # <- const-tensor
    check(err, ArgumentError, "argument 'reps' of 'axpy' is a compile-time constant",
          "const-tensor")
    assert_untouched_and_usable(z, x, y)
    assert "got None" not in err.message and "tensor" in err.message.split("got")[-1], \
        f"the message does not say what was passed: {err.message}"
    assert_fix(err)


@ts.kernel
def add_typed(z: tc.MutTensor["T", "S"], x: tc.Tensor["T", (-1,)], y: tc.Tensor["T", (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def test_dtype_name_bound_inconsistently():
    z, x, y = operands()
    y64 = ts.full(N, 2.0, ts.float64).sync()
    err = launch_fails(DTypeMismatchError, lambda: add_typed(z, x, y64).sync())  # <- dtype-name
    check(err, DTypeMismatchError, "'T' is bound to f32 by an earlier argument", "dtype-name")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


# =============================================================================================
# partitions: tile shape, rank, powers of two, grids (rule 9)


@ts.kernel
def add16(z: tc.MutTensor[tc.f32, (16,)], x: tc.Tensor[tc.f32, (-1,)],
          y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


@ts.kernel
def add_b(z: tc.MutTensor[tc.f32, ("B",)], x: tc.Tensor[tc.f32, (-1,)],
          y: tc.Tensor[tc.f32, (-1,)], B: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


def test_partition_tile_differs_from_static_shape():
    z, x, y = operands(tile=32)
    err = launch_fails(TileShapeMismatchError, lambda: add16(z, x, y).sync())  # <- static-tile
    check(err, TileShapeMismatchError, "partition tile shape (32,) differs from the kernel's static "
          "shape (16,)", "static-tile")
    assert_untouched_and_usable(z, x, y, tile=32)
    assert_fix(err)


def test_partition_tile_differs_from_const_shape_names_both_values():
    z, x, y = operands()
    err = launch_fails(TileShapeMismatchError, lambda: add_b(z, x, y, 32).sync())  # <- const-both
    check(err, TileShapeMismatchError, "partition tile shape (16,) differs from the kernel's static "
          "shape (32,) (B = 32 was passed as a tc.Const)", "const-both")
    assert "pass B=16" in err.hint and "leave 'B' out" in err.hint
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


@ts.kernel
def copy_rows(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, "N")]):
    z.store(tc.load_tile_like(x, z))


def test_extent_name_bound_inconsistently():
    z = ts.full((4, 16), -1.0).sync().partition((1, 16))
    x = ts.tensor(np.arange(32, dtype=np.float32).reshape(4, 8)).sync()
    err = launch_fails(ExtentMismatchError, lambda: copy_rows(z, x).sync())  # <- extent-name
    check(err, ExtentMismatchError, "'N' is bound to 16 by an earlier argument of 'copy_rows', the "
          "partition tile shape (1, 16) of 'z', but the shape (4, 8) of 'x' gives 8", "extent-name")
    zt = z.unpartition()
    assert np.array_equal(zt.numpy(), np.full((4, 16), -1.0, np.float32))
    assert np.array_equal(x.numpy(), np.arange(32, dtype=np.float32).reshape(4, 8))
    z8 = ts.full((4, 8), -1.0).sync().partition((1, 8))
    copy_rows(z8, x).sync()  # the same x with a matching tile: accepted
    assert np.array_equal(z8.unpartition().numpy(), x.numpy())
    assert_fix(err)


def test_partition_tile_differs_from_const_shape():
    z, x, y = operands()
    err = launch_fails(TileShapeMismatchError, lambda: add_b(z, x, y, 32).sync())  # <- const-tile
    check(err, TileShapeMismatchError, "partition tile shape (16,) differs from the kernel's static "
          "shape (32,)", "const-tile")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


@ts.kernel
def fill(z: tc.MutTensor[tc.f32, "S"], value: float):
    z.store(value)


def test_partition_of_rank_4_is_refused_where_it_is_made():
    t = ts.full((2, 2, 2, 2), -1.0).sync()
    err = launch_fails(PartitionRankError, lambda: t.partition((1, 1, 1, 1)))  # <- rank4
    check(err, PartitionRankError, "a partition of rank 4 cannot be made", "rank4")
    assert np.array_equal(t.numpy(), np.full((2, 2, 2, 2), -1.0, np.float32))  # not moved
    assert_fix(err)
    with pytest.raises(PartitionRankError, match="rank 0"):
        ts.full((), 1.0).sync().partition(())
    z = t.reshape(4, 4).partition((2, 2))  # the tensor is still usable
    fill(z, 3.0).sync()


def test_partition_of_rank_3_is_accepted():
    z = ts.full((2, 4, 8), -1.0).sync().partition((1, 2, 4))
    fill(z, 3.0).sync()
    assert np.array_equal(z.unpartition().numpy(), np.full((2, 4, 8), 3.0, np.float32))


@pytest.mark.parametrize("tile", [12, 3, (16, 6)], ids=["12", "3", "16x6"])
def test_partition_tile_not_a_power_of_two(tile):
    shape = (N,) if isinstance(tile, int) else (N, N)
    z = ts.full(shape, -1.0).sync().partition(tile)
    err = launch_fails(PartitionError, lambda: fill(z, 3.0).sync())  # <- pow2
    check(err, PartitionError, "is not a power of two", "pow2")
    assert np.array_equal(z.unpartition().numpy(), np.full(shape, -1.0, np.float32))
    assert_fix(err)


def test_partition_tile_too_large():
    z = ts.full((4, 4), -1.0).sync().partition((1 << 13, 1 << 12))  # tiles may pass the edge
    err = launch_fails(PartitionError, lambda: fill(z, 3.0).sync())  # <- too-large
    check(err, PartitionError, "more than 2**24", "too-large")
    assert_fix(err)


@ts.kernel
def two_outputs(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "T"],
                x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z))
    w.store(tc.load_tile_like(x, w) * 2.0)


def test_partitions_with_different_grids():
    z = ts.full(N, -1.0).sync().partition(16)  # grid (4,)
    w = ts.full(N, -1.0).sync().partition(8)   # grid (8,)
    x = ts.tensor(x_values()).sync()
    err = launch_fails(PartitionError, lambda: two_outputs(z, w, x).sync())  # <- grids
    check(err, PartitionError, "have different grids ('z': (4,), 'w': (8,))", "grids")
    zt, wt = z.unpartition(), w.unpartition()
    assert np.array_equal(zt.numpy(), np.full(N, -1.0, np.float32))
    assert np.array_equal(wt.numpy(), np.full(N, -1.0, np.float32))
    z, w = zt.partition(16), ts.full(2 * N, -1.0).sync().partition(32)  # same grid (4,)
    x2 = ts.tensor(x_values(2 * N)).sync()
    two_outputs(z, w, x2).sync()
    assert np.array_equal(z.unpartition().numpy(), x_values())
    assert np.array_equal(w.unpartition().numpy()[:N], x_values() * 2)
    assert_fix(err)


def test_shape_name_bound_by_two_partitions_inconsistently():
    @ts.kernel
    def same_shape(z: tc.MutTensor[tc.f32, "S"], w: tc.MutTensor[tc.f32, "S"]):
        z.store(1.0)
        w.store(2.0)

    z = ts.full(N, -1.0).sync().partition(16)
    w = ts.full(2 * N, -1.0).sync().partition(32)
    err = launch_fails(TileShapeMismatchError, lambda: same_shape(z, w).sync())  # <- shape-name
    check(err, TileShapeMismatchError, "'S' is bound to (16,)", "shape-name")
    assert_fix(err)


def test_explicit_grid_differing_from_the_partition():
    z, x, y = operands()
    err = launch_fails(PartitionError, lambda: add.launch(z, x, y, grid=(5,)).sync())  # <- grid
    check(err, PartitionError, "explicit grid (5,) differs from the grid (4,)", "grid")
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_partition_rank_mismatch_on_the_host():
    t = ts.full((8, 8), -1.0).sync()
    with pytest.raises(PartitionError) as info:
        t.partition(4)  # <- host-partition-rank
    check(info.value, PartitionError, "tile shape (4,) has rank 1 but the tensor has shape "
          "(8, 8)", "host-partition-rank")
    assert_fix(info.value)


def test_partition_with_a_numpy_integer_tile():
    """numpy integers are accepted as tensor extents; as a tile extent they must either work
    or be rejected with a PartitionError, never crash with a raw TypeError."""
    t = ts.full(N, -1.0).sync()
    try:
        z = t.partition(np.int64(TILE))
    except PartitionError:
        return
    _, x, y = operands()
    assert z.tile_shape == (TILE,)
    assert_untouched_and_usable(z, x, y)


def test_lazy_arguments_report_the_launch_site_not_the_sync():
    _, x, _ = operands()
    op = add(ts.full(N, -1.0).partition(TILE), x, ts.full(N, 2.0, ts.float64))  # <- lazy-site
    with pytest.raises(ArgumentError) as info:
        op.sync()
    check(info.value, DTypeMismatchError, "argument 'y' of 'add' must have dtype f32, got f64",
          "lazy-site")
    assert_fix(info.value)


# =============================================================================================
# ownership: moved tensors and spent partitions (rule 6)


def test_moved_tensor_cannot_be_read():
    t = ts.full(N, -1.0).sync()
    p = t.partition(TILE)  # <- move-read
    with pytest.raises(MovedError) as info:
        t.numpy()  # <- read-moved
    check(info.value, MovedError, f"this tensor was moved at {site('move-read')}", "read-moved")
    _, x, y = operands()
    assert_untouched_and_usable(p, x, y)
    assert_fix(info.value)


def test_moved_tensor_cannot_be_launched():
    z, x, y = operands()
    t = ts.tensor(x_values()).sync()
    p = t.partition(TILE)  # <- move-launch
    err = launch_fails(MovedError, lambda: add(z, t, y).sync())  # <- launch-moved
    check(err, MovedError, f"this tensor was moved at {site('move-launch')}", "launch-moved")
    assert np.array_equal(p.unpartition().numpy(), x_values())
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_moved_tensor_cannot_be_partitioned_again():
    t = ts.full(N, -1.0).sync()
    p = t.partition(TILE)  # <- move-twice
    with pytest.raises(MovedError) as info:
        t.partition(TILE)  # <- partition-moved
    check(info.value, MovedError, f"this tensor was moved at {site('move-twice')}",
          "partition-moved")
    _, x, y = operands()
    assert_untouched_and_usable(p, x, y)
    assert_fix(info.value)


def test_relaunch_with_the_partition_of_a_moved_output_works():
    z, x, y = operands()
    z, x, y = add(z, x, y).sync()
    z, x, y = add(z, y, y).sync()  # the launch handed back the same, still usable objects
    assert np.array_equal(z.unpartition().numpy(), np.full(N, 4.0, np.float32))


def test_partition_used_after_unpartition():
    z, x, y = operands()
    t = z.unpartition()  # <- unpartition
    err = launch_fails(MovedError, lambda: add(z, x, y).sync())  # <- launch-spent
    check(err, MovedError, f"this partition was unpartitioned at {site('unpartition')}",
          "launch-spent")
    with pytest.raises(MovedError) as info:
        z.unpartition()  # <- unpartition-twice
    check(info.value, MovedError, f"was unpartitioned at {site('unpartition')}",
          "unpartition-twice")
    assert_untouched_and_usable(t.partition(TILE), x, y)
    assert_fix(info.value)


# =============================================================================================
# aliasing: a mutable argument may not overlap another argument (rule 7)


def _memory(buffer: np.ndarray):
    """What the internal Tensor constructor takes as its memory: the buffer itself, or (once
    allocations exist) an Allocation wrapping it."""
    try:
        from tilesafe.driver.ledger import Allocation
    except ImportError:  # pragma: no cover - the original host API
        return buffer
    from tilesafe.driver.device import CPU
    return Allocation(buffer, CPU)


def sharing(total: int, *ranges: tuple[int, int]) -> tuple[np.ndarray, list[Tensor]]:
    """f32 tensors over one buffer of ``total`` elements (filled with -1), one per
    ``(offset, length)``, made with the internal constructor."""
    buffer = np.full(total, -1.0, np.float32)
    memory = _memory(buffer)
    return buffer, [Tensor(memory, (n,), ts.float32, offset=off) for off, n in ranges]


@pytest.mark.parametrize("z_range,x_range", [
    ((0, 32), (0, 32)),    # the same memory
    ((0, 32), (16, 32)),   # partial overlap
    ((16, 32), (0, 32)),   # partial overlap, the other way round
    ((0, 32), (31, 32)),   # one element in common
    ((8, 16), (0, 48)),    # the output inside the input
], ids=["same", "partial", "partial-reversed", "one-element", "inside"])
@pytest.mark.interpreter_only("builds tensors over cpu memory")
def test_output_overlapping_an_input(z_range, x_range):
    buffer, (zt, xt) = sharing(96, z_range, x_range)
    before = buffer.copy()
    z = zt.partition(8)
    y = ts.full(z_range[1], 2.0).sync()
    err = launch_fails(AliasingError, lambda: add(z, xt, y).sync())  # <- alias
    check(err, AliasingError, "arguments 'z' and 'x' of 'add' overlap in memory and 'z' is "
          "mutable", "alias")
    assert np.array_equal(buffer, before), "the aliasing launch wrote memory"
    assert np.array_equal(xt.numpy(), before[x_range[0]:sum(x_range)])
    # still usable: the output with a disjoint input works
    x_ok = ts.tensor(x_values(z_range[1])).sync()
    add(z, x_ok, y).sync()
    assert np.array_equal(z.unpartition().numpy(), x_values(z_range[1]) + 2)
    assert_fix(err)


@pytest.mark.parametrize("z_range,x_range", [
    ((0, 32), (32, 32)),   # adjacent, after
    ((32, 32), (0, 32)),   # adjacent, before
    ((0, 32), (64, 32)),   # apart
], ids=["adjacent-after", "adjacent-before", "apart"])
@pytest.mark.interpreter_only("builds tensors over cpu memory")
def test_output_next_to_an_input_is_accepted(z_range, x_range):
    buffer, (zt, xt) = sharing(96, z_range, x_range)
    buffer[x_range[0]:sum(x_range)] = x_values(32)
    z = zt.partition(8)
    y = ts.full(32, 2.0).sync()
    out = add(z, xt, y).sync()
    assert out[0] is z and out[1] is xt
    expected = np.full(96, -1.0, np.float32)
    expected[x_range[0]:sum(x_range)] = x_values(32)
    expected[z_range[0]:sum(z_range)] = x_values(32) + 2
    assert np.array_equal(buffer, expected)
    assert np.array_equal(xt.numpy(), x_values(32))


@pytest.mark.interpreter_only("builds tensors over cpu memory")
def test_shared_inputs_may_overlap():
    buffer, (xt, yt) = sharing(48, (0, 32), (16, 32))
    buffer[:] = np.arange(48, dtype=np.float32)
    z = ts.full(32, -1.0).sync().partition(8)
    add(z, xt, yt).sync()
    assert np.array_equal(z.unpartition().numpy(), np.arange(32) + np.arange(16, 48))
    z2 = ts.full(32, -1.0).sync().partition(8)
    add(z2, xt, xt).sync()  # the very same tensor twice, both shared
    assert np.array_equal(z2.unpartition().numpy(), 2 * np.arange(32, dtype=np.float32))


def test_two_outputs_overlapping():
    buffer, (zt, wt, xt) = sharing(96, (0, 32), (16, 32), (64, 32))
    z, w = zt.partition(8), wt.partition(8)
    err = launch_fails(AliasingError, lambda: two_outputs(z, w, xt).sync())  # <- alias-outputs
    check(err, AliasingError, "arguments 'z' and 'w' of 'two_outputs' overlap", "alias-outputs")
    assert np.array_equal(buffer, np.full(96, -1.0, np.float32))
    assert_fix(err)


def test_the_same_partition_for_two_outputs():
    z = ts.full(N, -1.0).sync().partition(TILE)
    x = ts.tensor(x_values()).sync()
    err = launch_fails(AliasingError, lambda: two_outputs(z, z, x).sync())  # <- same-partition
    check(err, AliasingError, "arguments 'z' and 'w' of 'two_outputs' overlap", "same-partition")
    _, _, y = operands()
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_view_of_a_moved_tensor():
    base = ts.tensor(x_values()).sync()
    if not hasattr(Tensor, "__getitem__"):
        pytest.skip("the host API has no views")
    view = base[0:N]
    z = base.partition(TILE)  # <- move-base
    y = ts.full(N, 2.0).sync()
    err = launch_fails(MovedError, lambda: add(z, view, y).sync())  # <- launch-view
    check(err, MovedError, f"was moved at {site('move-base')}", "launch-view")
    assert_fix(err)


def test_views_overlapping_are_rejected():
    base = ts.tensor(x_values(96)).sync()
    if not hasattr(Tensor, "__getitem__"):
        pytest.skip("the host API has no views")
    zt, xt = base[0:32], base[16:48]
    z = zt.partition(8)
    y = ts.full(32, 2.0).sync()
    err = launch_fails(AliasingError, lambda: add(z, xt, y).sync())  # <- alias-views
    check(err, AliasingError, "overlap in memory", "alias-views")
    assert np.array_equal(xt.numpy(), x_values(96)[16:48])
    assert_fix(err)


# =============================================================================================
# unsafe kernels (rule 5)


@ts.kernel(unchecked_accesses=True)
def add_unchecked(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)],
                  y: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_tile_like(x, z) + tc.load_tile_like(y, z))


@ts.kernel
def gather(z: tc.MutTensor[tc.f32, (8,)], p: tc.Ptr[tc.f32]):
    i, _, _ = tc.get_tile_block_id()
    z.store(tc.load_ptr(p, tc.arange(8) + i * 8) + 1.0)


def test_unchecked_kernel_outside_unsafe():
    z, x, y = operands()
    assert add_unchecked.is_unsafe
    err = launch_fails(UnsafeError, lambda: add_unchecked(z, x, y).sync())  # <- unchecked
    check(err, UnsafeError, "kernel 'add_unchecked' is unsafe (unchecked_accesses=True) and is "
          "launched outside 'with ts.unsafe():'", "unchecked")
    assert "ts.unsafe()" in err.hint
    assert_untouched_and_usable(z, x, y)
    assert_fix(err)


def test_unchecked_kernel_inside_unsafe():
    z, x, y = operands()
    with ts.unsafe():
        op = add_unchecked(z, x, y)
    op.sync()  # checked when created: driving it after the block is fine
    assert np.array_equal(z.unpartition().numpy(), x_values() + 2)


def test_unsafe_is_checked_when_the_launch_is_created():
    z, x, y = operands()
    with pytest.raises(UnsafeError) as info:
        op = add_unchecked(z, x, y)  # <- created-outside
        with ts.unsafe():
            op.sync()
    check(info.value, UnsafeError, "launched outside", "created-outside")
    assert_untouched_and_usable(z, x, y)
    assert_fix(info.value)


def test_a_graph_of_an_unsafe_kernel_replays_only_inside_unsafe():
    """A replay launches the recorded kernel again, so the replay op is made inside the
    block, as a launch is (recording needs the permission too: each launch is made there)."""
    z, x, y = operands()
    with ts.unsafe():
        with ts.CudaGraph.scope() as g:
            g.record(add_unchecked(z, x, y))
        g.launch().sync()
    err = launch_fails(UnsafeError, lambda: g.launch().sync())  # <- unsafe-replay
    check(err, UnsafeError, "kernel 'add_unchecked' is unsafe (unchecked_accesses=True) and is "
          "replayed from a graph outside 'with ts.unsafe():'", "unsafe-replay")
    with ts.unsafe():
        replay = g.launch()
    replay.sync()  # made inside: driving it after the block is fine
    assert np.array_equal(z.unpartition().numpy(), x_values() + 2)


def test_unsafe_blocks_nest_and_end():
    z, x, y = operands()
    with ts.unsafe():
        with ts.unsafe():
            pass
        add_unchecked(z, x, y).sync()  # still inside the outer block
    with pytest.raises(UnsafeError):
        add_unchecked(z, x, y).sync()
    assert np.array_equal(z.unpartition().numpy(), x_values() + 2)


def test_pointer_kernel_outside_unsafe():
    z = ts.full(32, -1.0).sync().partition(8)
    src = ts.tensor(x_values(32)).sync()
    assert gather.is_unsafe and "unsafe" in repr(gather)
    err = launch_fails(UnsafeError, lambda: gather(z, src).sync())  # <- ptr-outside
    check(err, UnsafeError, "kernel 'gather' is unsafe (it takes raw tc.Ptr parameters)",
          "ptr-outside")
    assert np.array_equal(src.numpy(), x_values(32))
    with ts.unsafe():
        gather(z, src).sync()
    assert np.array_equal(z.unpartition().numpy(), x_values(32) + 1)
    assert_fix(err)


def test_pointer_argument_of_the_wrong_dtype():
    z = ts.full(32, -1.0).sync().partition(8)
    src = ts.tensor(x_values(32).astype(np.float64)).sync()
    with ts.unsafe():
        err = launch_fails(ArgumentError, lambda: gather(z, src).sync())  # <- ptr-dtype
    check(err, ArgumentError, "argument 'p' of 'gather' is a raw f32 pointer", "ptr-dtype")
    assert_fix(err)


@ts.kernel
def sneaky_gather(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)]):
    z.store(tc.load_ptr(x, tc.arange(8)))  # <- sneaky-load


@ts.kernel(unchecked_accesses=True)
def sneaky_scatter(z: tc.MutTensor[tc.f32, (8,)], x: tc.Tensor[tc.f32, (-1,)]):
    tc.store_ptr(x, tc.arange(8), z.load())  # <- sneaky-store


@pytest.mark.parametrize("kernel,tag", [(sneaky_gather, "sneaky-load"),
                                        (sneaky_scatter, "sneaky-store")],
                         ids=["load_ptr", "store_ptr"])
def test_pointer_ops_need_a_pointer_parameter(kernel, tag):
    z, x = ts.full(8, -1.0).sync().partition(8), ts.tensor(x_values(8)).sync()
    with pytest.raises(CompileError) as info, ts.unsafe():
        kernel(z, x).sync()
    err = info.value
    assert "must be a tc.Ptr parameter" in err.message, err
    assert err.location is not None and err.location.line == here(tag)
    assert os.path.samefile(err.location.file, __file__)
    assert err.kernel == kernel.name
    assert np.array_equal(x.numpy(), x_values(8))
    assert err.hint, f"no fix in: {err}"


# =============================================================================================
# DeviceOps run once; kernel hints are checked


def test_device_op_driven_twice():
    z, x, y = operands()
    op = add(z, x, y)
    op.sync()  # <- first-drive
    with pytest.raises(DeviceOpError) as info:
        op.sync()  # <- second-drive
    text = str(info.value)
    assert f"already driven at {site('first-drive')}" in text
    assert text.startswith(site("second-drive"))
    assert "fix:" in text
    assert np.array_equal(z.unpartition().numpy(), x_values() + 2)


def test_constructor_op_driven_twice():
    op = ts.zeros(8)
    t = op.sync()
    with pytest.raises(DeviceOpError):
        op.sync()
    assert np.array_equal(t.numpy(), np.zeros(8, np.float32))


@pytest.mark.parametrize("hints,phrase,fix", [
    ({"sm_90": {"num_ctas": 2}}, "unknown kernel hint 'num_ctas' for sm_90", "occupancy"),
    ({"default": {"occupancy": 1, "bogus": 3}}, "unknown kernel hint 'bogus'", "num_cta_in_cga"),
    ({"hopper": {"occupancy": 1}}, "hints key 'hopper' is not an architecture", "sm_90"),
], ids=["unknown-name", "unknown-name-default", "bad-arch"])
def test_unknown_kernel_hints(hints, phrase, fix):
    def body(z: tc.MutTensor[tc.f32, "S"]):
        z.store(1.0)
    with pytest.raises(SignatureError) as info:
        ts.kernel(hints=hints)(body)
    assert phrase in info.value.message
    assert fix in info.value.hint


def test_known_kernel_hints_are_accepted():
    @ts.kernel(hints={"sm_90": {"num_cta_in_cga": 2, "occupancy": 1}, "default": {}})
    def hinted(z: tc.MutTensor[tc.f32, "S"]):
        z.store(1.0)
    z = ts.zeros(16).sync().partition(8)
    hinted(z).sync()
    assert np.array_equal(z.unpartition().numpy(), np.ones(16, np.float32))


def test_launch_errors_are_launch_errors():
    for cls in (ArgumentError, PartitionError, MovedError, AliasingError, UnsafeError):
        assert issubclass(cls, LaunchError)
