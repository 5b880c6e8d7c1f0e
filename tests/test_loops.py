"""Loops beyond counted ``for``: a runtime ``range`` step, ``while`` loops, ``break`` and
``continue`` (also from inside runtime ``if``s, with loop-carried tiles and stores in the body),
and their misuse. Results are compared exactly with Python's own loops, for several trip counts,
zero included; the suite's last test compiles every kernel here for sm_90
(``tests/tileir/test_zz_compile_suite.py``; the lowering itself: ``tests/tileir/test_lowering.py``).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line, poisoned, wrap
from tilesafe.errors import CompileError, DTypeError, KernelRuntimeError, UnsupportedSyntaxError


def out_i32(n: int = 8):
    return poisoned(n, ts.int32).partition(n)


def values(z) -> np.ndarray:
    return z.unpartition().numpy()


# ---------------------------------------------------------------------------------------------
# a runtime range step


@ts.kernel
def stepped(z: tc.MutTensor[tc.i32, (8,)], lb: int, ub: int, step: int):
    acc = tc.arange(8)
    count = 0
    for i in range(lb, ub, step):  # <- runtime-step
        acc = acc * 3 + i
        count = count + 1
    z.store(acc + count * 1000)


def stepped_reference(lb, ub, step):
    acc, count = np.arange(8, dtype=np.int64), 0
    for i in range(lb, ub, step):
        acc = acc * 3 + i
        count += 1
    return np.array([wrap(int(v), ts.int32) for v in acc + count * 1000], np.int64)


@pytest.mark.parametrize("lb,ub,step", [(0, 10, 3), (0, 9, 3), (0, 0, 2), (5, 2, 1),
                                        (-7, 8, 4), (0, 1, 100), (3, 4, 1), (-20, -3, 6)])
def test_runtime_step(lb, ub, step):
    z, *_ = stepped(out_i32(), lb, ub, step).sync()
    np.testing.assert_array_equal(values(z), stepped_reference(lb, ub, step))
    assert stepped.compile_count <= 1  # the step is a runtime value (0: a GPU's disk cache)


@ts.kernel
def stepped_until(z: tc.MutTensor[tc.i32, (8,)], lb: int, ub: int, step: int, stop: int):
    acc = tc.arange(8)
    count = 0
    for i in range(lb, ub, step):    # a break: the GPU runs this for as a counting loop
        if i == stop:
            break
        acc = acc * 3 + i
        count = count + 1
    z.store(acc + count * 1000)


@ts.kernel
def stepped_by(z: tc.MutTensor[tc.i32, (8,)], lb: int, ub: int, STEP: tc.Const[int]):
    acc = tc.arange(8)
    count = 0
    for i in range(lb, ub, STEP):    # a compile-time step
        acc = acc * 3 + i
        count = count + 1
    z.store(acc + count * 1000)


EXTREMES = [(2**31 - 10, 2**31 - 1, 4), (2**31 - 3, 2**31 - 1, 2**30),
            (-(2**31), -(2**31) + 9, 2**30), (-(2**31), 2**31 - 1, 2**30 + 7)]


@pytest.mark.parametrize("lb,ub,step", EXTREMES + [(0, 10, 3), (4, 4, 1)])
def test_trip_counts_are_exact_near_the_limits_of_i32(lb, ub, step):
    """iv + step overflows i32 after the last iteration here: no extra iteration is run (on
    a GPU, Tile IR's for would wrap below the bound and never end)."""
    z, *_ = stepped(out_i32(), lb, ub, step).sync()
    np.testing.assert_array_equal(values(z), stepped_reference(lb, ub, step))
    z, *_ = stepped_by(out_i32(), lb, ub, step).sync()
    np.testing.assert_array_equal(values(z), stepped_reference(lb, ub, step))
    z, *_ = stepped_until(out_i32(), lb, ub, step, 0).sync()
    expected = stepped_reference(lb, ub, step) if 0 not in range(lb, ub, step) else None
    if expected is not None:
        np.testing.assert_array_equal(values(z), expected)
    z, *_ = stepped_until(out_i32(), 0, 10, 3, 6).sync()
    np.testing.assert_array_equal(values(z), stepped_reference(0, 6, 3))


@pytest.mark.parametrize("step", [0, -1, -5])
def test_non_positive_runtime_step_is_a_runtime_error_at_the_loop(step):
    """The interpreter refuses the step; a GPU cannot, and runs the loop zero times."""
    if ts.default_device().kind != "cpu":
        z, *_ = stepped(out_i32(), 0, 10, step).sync()
        np.testing.assert_array_equal(values(z), stepped_reference(0, 0, 1))
        return
    with pytest.raises(KernelRuntimeError) as info:
        stepped(out_i32(), 0, 10, step).sync()
    text = str(info.value)
    assert f"test_loops.py:{marker_line(__file__, 'runtime-step')}" in text, text
    assert "'stepped'" in text and f"the range step is {step}" in text
    assert "runs zero times" in text  # what a GPU does instead


@ts.kernel
def narrow_stepped(z: tc.MutTensor[tc.i32, (8,)], lb: tc.i16, ub: int, step: int,
                   big: tc.i64):
    acc = tc.zeros((8,), tc.i32)
    for i in range(lb, ub, step):                # i16 bounds: ub and step convert to i16
        acc = acc + i.astype(tc.i32)
    wide = tc.zeros((8,), tc.i64)
    for j in range(big, big + 3 * step, step):   # i64 bounds: the step widens to i64
        wide = wide + (j - big)
    z.store(acc * 1000 + wide.astype(tc.i32))


@pytest.mark.parametrize("lb,ub,step", [(-5, 20, 4), (3, 3, 1), (0, 7, 7)])
def test_runtime_step_with_narrow_and_wide_bounds(lb, ub, step):
    big = 2**40 + 5
    z, *_ = narrow_stepped(out_i32(), lb, ub, step, big).sync()
    expected = sum(range(lb, ub, step)) * 1000 + sum(range(0, 3 * step, step))
    assert (values(z) == expected).all()


@ts.kernel
def float_step(z: tc.MutTensor[tc.f32, "S"], s: float):
    acc = tc.zeros(z.shape, tc.f32)
    for i in range(0, 10, s):  # <- float-step
        acc = acc + 1.0
    z.store(acc)


@ts.kernel
def zero_step(z: tc.MutTensor[tc.f32, "S"]):
    acc = tc.zeros(z.shape, tc.f32)
    for i in range(0, 10, 0):  # <- zero-step
        acc = acc + 1.0
    z.store(acc)


def test_bad_steps_are_compile_errors_with_a_fitting_fix():
    with pytest.raises(DTypeError) as info:
        float_step.ir(poisoned(8).partition(8), 1.0)
    err = info.value
    assert "the range step must be an integer scalar, got a tile<f32>" in err.message
    assert err.location.line == marker_line(__file__, "float-step")
    assert "astype(tc.i32)" in err.hint and "descending" not in err.hint
    with pytest.raises(CompileError) as info:
        zero_step.ir(poisoned(8).partition(8))
    err = info.value
    assert "the range step must be positive, got 0" in err.message
    assert err.location.line == marker_line(__file__, "zero-step")
    assert "descending indices" in err.hint


# ---------------------------------------------------------------------------------------------
# while


@ts.kernel
def collatz(z: tc.MutTensor[tc.i32, (1,)], n: int):
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps = steps + 1
    z.store(steps)  # a scalar into a one-element sub-tensor: no broadcast


@pytest.mark.parametrize("n,steps", [(1, 0), (2, 1), (6, 8), (27, 111)])
def test_while_loop_with_a_carried_scalar_condition(n, steps):
    z, *_ = collatz(poisoned(1, ts.int32).partition(1), n).sync()
    assert values(z).tolist() == [steps]


@ts.kernel
def halve(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], limit: float):
    t = tc.load_tile_like(x, z)
    rounds = 0
    while tc.reduce_max(tc.abs(t)) > limit:  # a tile carried, a reduction as the condition
        t = t * 0.5
        rounds += 1
    z.store(t + rounds.astype(tc.f32) * 1000.0)


@pytest.mark.parametrize("limit", [100.0, 3.0, 0.01])
def test_while_loop_over_a_tile(rng, limit):
    x = (rng.standard_normal(8) * 10).astype(np.float32)
    z, _ = halve(poisoned(8).partition(8), ts.tensor(x), limit).sync()
    t, rounds = x.copy(), 0
    while np.abs(t).max() > np.float32(limit):
        t, rounds = t * np.float32(0.5), rounds + 1
    np.testing.assert_array_equal(values(z), t + np.float32(rounds * 1000.0))


@ts.kernel
def while_exits(z: tc.MutTensor[tc.i32, (8,)], n: int, stop: int):
    i = 0
    acc = tc.zeros((8,), tc.i32)
    while True:                      # a compile-time truth: ended by the break
        i = i + 1
        if i > n:
            break
        if i % 3 == 0:
            continue                 # i was updated before: no endless loop
        if i == stop:
            acc = acc * 2
            break
        acc = acc + i
    while False:                     # never runs: compiles to nothing
        acc = acc + 1000
    z.store(acc + i * 10000)


def while_exits_reference(n, stop):
    i, acc = 0, 0
    while True:
        i += 1
        if i > n:
            break
        if i % 3 == 0:
            continue
        if i == stop:
            acc *= 2
            break
        acc += i
    return acc + i * 10000


# ---------------------------------------------------------------------------------------------
# break and continue in for loops


@ts.kernel
def scan_until(z: tc.MutTensor[tc.i32, (4,)], x: tc.Tensor[tc.i32, (-1,)], limit: int):
    """The index of the first element above ``limit``, the sum of the non-negative elements
    before it, and how many elements were skipped."""
    p = x.partition((1,))
    found = -1
    total = 0
    skipped = 0
    for i in range(tc.num_tiles(p, 0)):
        v = tc.reduce_sum(p.load((i,)), 0)
        if v > limit:
            found = i
            break
        if v < 0:
            skipped = skipped + 1
            continue
        total = total + v
    lane = tc.arange(4)
    z.store(tc.where(lane == 0, found, tc.where(lane == 1, total, skipped)))


def scan_until_reference(x, limit):
    found, total, skipped = -1, 0, 0
    for i, v in enumerate(x.tolist()):
        if v > limit:
            found = i
            break
        if v < 0:
            skipped += 1
            continue
        total += v
    return [found, total, skipped, skipped]


@pytest.mark.parametrize("length,limit", [(0, 5), (1, 5), (9, 5), (9, 100), (16, -100)])
def test_break_and_continue_in_a_for_loop(rng, length, limit):
    x = rng.integers(-10, 12, length).astype(np.int32)
    z, _ = scan_until(out_i32(4), ts.tensor(x), limit).sync()
    assert values(z).tolist() == scan_until_reference(x, limit)


@ts.kernel
def exits_everywhere(z: tc.MutTensor[tc.i32, (8,)], n: int, stop: int):
    acc = tc.zeros((8,), tc.i32)
    outer = 0
    for i in range(n):
        for j in range(i):               # break leaves the inner loop only
            if j == 2:
                break
            outer = outer + j
        if i == stop:
            acc = acc + 1000
            break
        elif i % 2 == 0:
            acc = acc + i
            continue                     # both branches leave: the rest is dead
        else:
            acc = acc - 1
            continue
        acc = acc * 0                    # never compiled: after the if, nothing runs
    z.store(acc + outer * 100000)


def exits_everywhere_reference(n, stop):
    acc, outer = 0, 0
    for i in range(n):
        for j in range(i):
            if j == 2:
                break
            outer += j
        if i == stop:
            acc += 1000
            break
        elif i % 2 == 0:
            acc += i
            continue
        else:
            acc -= 1
            continue
    return acc + outer * 100000


@pytest.mark.parametrize("kernel,reference,n,stop", [
    *((while_exits, while_exits_reference, n, stop)
      for n, stop in [(0, 5), (1, 5), (10, 5), (10, 100), (7, 3)]),
    *((exits_everywhere, exits_everywhere_reference, n, stop)
      for n, stop in [(0, 3), (1, 3), (6, 3), (9, 100), (12, 11)])],
    ids=lambda v: getattr(v, "name", None))
def test_while_true_nested_loops_and_branches_that_all_leave(kernel, reference, n, stop):
    z, *_ = kernel(out_i32(), n, stop).sync()
    assert (values(z) == reference(n, stop)).all()


@ts.kernel
def store_in_loop(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], n: int,
                  step: int):
    t = tc.load_tile_like(x, z)
    z.store(t)
    for i in range(0, n, step):          # stores in a loop that breaks: the token is carried
        if i >= 6:
            break
        if i % 2 == 1:
            continue
        t = t + 1.0
        z.store(t)
    k = 0
    while k < n:
        k = k + 1
        if k == 4:
            continue
        z.store(z.load() * 2.0)


@pytest.mark.parametrize("n,step", [(0, 1), (3, 1), (10, 1), (10, 3)])
def test_loops_that_leave_early_order_their_stores(n, step):
    x = np.arange(8, dtype=np.float32)
    z, _ = store_in_loop(poisoned(8).partition(8), ts.tensor(x), n, step).sync()
    t = x.copy()
    for i in range(0, n, step):
        if i >= 6:
            break
        if i % 2 == 1:
            continue
        t = t + 1
    doublings = sum(1 for k in range(1, n + 1) if k != 4)
    np.testing.assert_array_equal(values(z), t * 2.0**doublings)


@ts.kernel
def unrolled_exits(z: tc.MutTensor[tc.i32, (8,)], LAST: tc.Const[int]):
    acc = tc.zeros((8,), tc.i32)
    for k in (1, 2, 3, 4, 5):
        if k == 2:
            continue
        if k == LAST:
            break
        acc = acc * 10 + k
    z.store(acc)


@pytest.mark.parametrize("last,expected", [(1, 0), (4, 13), (9, 1345)])
def test_compile_time_break_and_continue_in_unrolled_loops(last, expected):
    z, *_ = unrolled_exits(out_i32(), last).sync()
    assert (values(z) == expected).all()
    assert "if" not in [op.name for op in unrolled_exits.ir(out_i32(), last).walk()]


# ---------------------------------------------------------------------------------------------
# misuse


@ts.kernel
def endless(z: tc.MutTensor[tc.f32, "S"]):
    t = z.load()
    while True:  # <- endless
        t = t + 1.0
    z.store(t)


@ts.kernel
def runtime_exit_in_unrolled(z: tc.MutTensor[tc.f32, "S"], n: int):
    t = z.load()
    for s in (1.0, 2.0):
        if n > 0:
            break  # <- unrolled-break
        t = t * s
    z.store(t)


@ts.kernel
def while_else(z: tc.MutTensor[tc.f32, "S"], n: int):
    t = z.load()
    while n > 0:  # <- while-else
        n = n - 1
    else:
        t = t + 1.0
    z.store(t)


@ts.kernel
def carried_changes_at_break(z: tc.MutTensor[tc.f32, "S"], n: int):
    acc = tc.zeros(z.shape, tc.f32)
    for i in range(n):
        if i == 3:
            acc = acc.astype(tc.f16)
            break  # <- break-type
        acc = acc + 1.0
    z.store(acc.astype(tc.f32))


@pytest.mark.parametrize("kernel,cls,phrase,tag,hint", [
    (endless, CompileError, "'while True' never ends", "endless", "add a break"),
    (runtime_exit_in_unrolled, UnsupportedSyntaxError,
     "'break' under a runtime condition in a loop over a compile-time tuple", "unrolled-break",
     "range()"),
    (while_else, UnsupportedSyntaxError, "while ... else is not supported", "while-else",
     "flag"),
    (carried_changes_at_break, CompileError, "loop-carried variable 'acc' changes from "
     "tile<8xf32> to tile<8xf16>", "break-type", "initialize 'acc'"),
], ids=["endless", "unrolled-break", "while-else", "break-type"])
def test_loop_misuse_is_a_compile_error_at_its_line(kernel, cls, phrase, tag, hint):
    args = [poisoned(8).partition(8)] + ([] if kernel is endless else [3])
    with pytest.raises(CompileError) as info:
        kernel.ir(*args)
    err = info.value
    assert type(err) is cls, repr(err)
    assert phrase in err.message, err.message
    assert os.path.samefile(err.location.file, __file__)
    assert err.location.line == marker_line(__file__, tag)
    assert err.kernel == kernel.name and hint in err.hint, err.hint
