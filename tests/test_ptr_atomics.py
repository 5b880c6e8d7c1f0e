"""Compare-and-swap and exchange through raw pointers (``tc.atomic_cas_ptr``,
``tc.atomic_exchange_ptr``): unsafe kernels only.

The interpreter serves the lanes of one op in row-major order, each lane seeing the ones before
it (lanes at one offset included), and the tile programs one after another in grid order: the
tests compare with a numpy model that does exactly that (``serve``). They also check what holds
in any order (one winner per claimed slot; an exchange hands back a permutation of what went
in), which is what ``tests/gpu/test_gpu_atomics.py`` checks on a GPU. Then: masks and padding,
bit-pattern comparison of floats, the dtype and shape errors, offsets outside the allocation,
the ops in a kernel without a ``tc.Ptr`` parameter, the launch outside ``ts.unsafe()``, and the
lowering (one ``atomic_cas_tko`` / ``atomic_rmw_tko xchg`` each, acquire-release, in the
token chain).
"""

import os
import re
import subprocess

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from conftest import marker_line
from tilesafe.driver.device import default_device
from tilesafe.errors import (CompileError, DTypeError, KernelRuntimeError, PositionsError,
                             ShapeError, UnsafeError)

FILE = os.path.abspath(__file__)
TILE = 16
DTYPES = (ts.int32, ts.uint32, ts.int64, ts.uint64, ts.float32, ts.float64)
#: whether the suite runs on the interpreter, whose order of serving lanes the exact checks
#: assume (on a GPU, with ``TILESAFE_DEVICE=cuda:0``, only what holds in any order is checked)
INTERPRETED = default_device().kind == "cpu"


def here(tag: str) -> int:
    return marker_line(FILE, tag)


def serve(table, offsets, values, compare=None, mask=None, padding=0):
    """The interpreter's model: every program's lanes (``offsets[p]``, any shape) one at a
    time, programs in order, lanes in row-major order; returns the old values per program.
    With ``compare``: compare-and-swap (by bit pattern), else exchange."""
    table = table.copy()
    olds = []
    for p in range(len(offsets)):
        off = np.asarray(offsets[p]).reshape(-1)
        val = np.broadcast_to(values[p], np.shape(offsets[p])).reshape(-1)
        cmp = None if compare is None else np.broadcast_to(compare[p],
                                                           np.shape(offsets[p])).reshape(-1)
        live = (np.ones(off.shape, bool) if mask is None
                else np.broadcast_to(mask[p], np.shape(offsets[p])).reshape(-1))
        old = np.full(off.shape, padding, dtype=table.dtype)
        for lane in range(off.size):
            if not live[lane]:
                continue
            found = table[off[lane]]
            old[lane] = found
            if cmp is None or _bits(found) == _bits(cmp[lane].astype(table.dtype)):
                table[off[lane]] = val[lane]
        olds.append(old.reshape(np.shape(offsets[p])))
    return table, np.stack(olds)


def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def rows(values, dtype):
    return ts.tensor(np.asarray(values, dtype=dtype.storage)).sync()


def out(programs, dtype):
    """A poisoned (programs, TILE) output partitioned into one row per program."""
    return ts.full((programs, TILE), 99, dtype).sync().partition((1, TILE))


# ---------------------------------------------------------------------------------------------
# the kernels (one per element type: a raw pointer's dtype is part of the signature)


def _claim_kernel(D):
    @ts.kernel
    def claim(won: tc.MutTensor[D, (1, TILE)], table: tc.Ptr[D],
              keys: tc.Tensor[tc.i32, (-1, TILE)]):
        i = tc.get_tile_block_id()[0]
        slots = keys.partition((1, TILE)).load(i, 0)
        # an empty slot holds 0; program i writes i + 1 there if it finds it empty
        won.store(tc.atomic_cas_ptr(table, slots, 0, (i + 1).astype(D)))
    return claim


def _exchange_kernel(D):
    @ts.kernel
    def exchange(old: tc.MutTensor[D, (1, TILE)], table: tc.Ptr[D],
                 at: tc.Tensor[tc.i32, (-1, TILE)], values: tc.Tensor[D, (-1, TILE)]):
        i = tc.get_tile_block_id()[0]
        old.store(tc.atomic_exchange_ptr(table, at.partition((1, TILE)).load(i, 0),
                                         values.partition((1, TILE)).load(i, 0)))
    return exchange


def _cas_kernel(D):
    @ts.kernel
    def cas(old: tc.MutTensor[D, (1, TILE)], table: tc.Ptr[D],
            at: tc.Tensor[tc.i32, (-1, TILE)], compare: tc.Tensor[D, (-1, TILE)],
            values: tc.Tensor[D, (-1, TILE)]):
        i = tc.get_tile_block_id()[0]
        old.store(tc.atomic_cas_ptr(table, at.partition((1, TILE)).load(i, 0),
                                    compare.partition((1, TILE)).load(i, 0),
                                    values.partition((1, TILE)).load(i, 0)))
    return cas


CLAIM = {d: _claim_kernel(d) for d in DTYPES}
EXCHANGE = {d: _exchange_kernel(d) for d in DTYPES}
CAS = {d: _cas_kernel(d) for d in DTYPES}


def check_exchanged(start, at, values, table, old):
    """What holds in any order: per slot, what it held at the end and what was handed back
    is what it held at the start and what went in."""
    for slot in range(start.size):
        hit = at == slot
        went_in = np.concatenate([[start[slot]], values[hit]])
        came_out = np.concatenate([[table[slot]], old[hit]])
        np.testing.assert_array_equal(np.sort(went_in), np.sort(came_out))


def check_claims(table, won, keys):
    """What holds in any order: every slot named is claimed by exactly one lane, which found
    it empty; every other lane found the winner's mark (a CAS against 0 fails once claimed)."""
    programs = np.repeat(np.arange(len(keys)) + 1, TILE).reshape(keys.shape)
    winners = won == 0
    named = np.unique(keys)
    assert winners.sum() == named.size
    assert np.array_equal(np.sort(keys[winners]), named)  # one winner per slot
    assert np.array_equal(table[keys[winners]], programs[winners])  # the winner's mark stays
    assert np.array_equal(won[~winners], table[keys[~winners]])
    untouched = np.setdiff1d(np.arange(table.size), named)
    assert not table[untouched].any()


# ---------------------------------------------------------------------------------------------
# results against numpy


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_first_writer_wins_a_claimed_slot(dtype, rng):
    programs, slots = 24, 40
    keys = rng.integers(0, slots, (programs, TILE)).astype(np.int32)
    keys[3, 5] = keys[3, 9]  # one program naming one slot twice: its second lane loses
    table = ts.zeros(slots, dtype=dtype).sync()
    won = out(programs, dtype)
    with ts.unsafe():
        won, table, _ = CLAIM[dtype](won, table, rows(keys, ts.int32)).sync()
    want_table, want_won = serve(np.zeros(slots, dtype.storage), keys,
                                 np.arange(1, programs + 1, dtype=dtype.storage)[:, None],
                                 compare=np.zeros((programs, 1), dtype.storage))
    got_won = won.unpartition().numpy()
    if INTERPRETED:
        np.testing.assert_array_equal(table.numpy(), want_table)
        np.testing.assert_array_equal(got_won, want_won)
    check_claims(table.numpy(), got_won, keys)
    assert got_won[3, 9] != 0  # (the second lane of one program at one slot never wins)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_exchange_returns_the_previous_values(dtype, rng):
    programs, slots = 6, 20
    start = (np.arange(slots) * 3 + 1).astype(dtype.storage)
    at = rng.integers(0, slots, (programs, TILE)).astype(np.int32)
    values = (np.arange(programs * TILE).reshape(programs, TILE) + 100).astype(dtype.storage)
    table = rows(start, dtype)
    old = out(programs, dtype)
    with ts.unsafe():
        old, table, _, _ = EXCHANGE[dtype](old, table, rows(at, ts.int32),
                                           rows(values, dtype)).sync()
    want_table, want_old = serve(start, at, values)
    got_table, got_old = table.numpy(), old.unpartition().numpy()
    if INTERPRETED:
        np.testing.assert_array_equal(got_table, want_table)
        np.testing.assert_array_equal(got_old, want_old)
    check_exchanged(start, at, values, got_table, got_old)


@pytest.mark.interpreter_only("the interpreter's order of serving the lanes")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
def test_compare_and_swap_swaps_only_where_the_value_matches(dtype, rng):
    programs, slots = 5, 8
    start = rng.integers(0, 4, slots).astype(dtype.storage)
    at = rng.integers(0, slots, (programs, TILE)).astype(np.int32)
    compare = rng.integers(0, 4, (programs, TILE)).astype(dtype.storage)
    values = rng.integers(0, 4, (programs, TILE)).astype(dtype.storage)
    table = rows(start, dtype)
    old = out(programs, dtype)
    with ts.unsafe():
        old, table, *_ = CAS[dtype](old, table, rows(at, ts.int32), rows(compare, dtype),
                                    rows(values, dtype)).sync()
    want_table, want_old = serve(start, at, values, compare=compare)
    np.testing.assert_array_equal(table.numpy(), want_table)
    np.testing.assert_array_equal(old.unpartition().numpy(), want_old)


@ts.kernel
def chain(old: tc.MutTensor[tc.i64, (4, 4)], p: tc.Ptr[tc.i64], AT: tc.Const[int]):
    values = tc.arange(16).astype(tc.i64).reshape((4, 4)) + 10
    old.store(tc.atomic_exchange_ptr(p, AT, values))  # every lane at one offset


@pytest.mark.interpreter_only("the interpreter's order of serving the lanes")
def test_lanes_at_one_offset_chain_in_row_major_order():
    p = rows([7, 8, 9], ts.int64)
    old = ts.zeros((4, 4), dtype=ts.int64).sync().partition((4, 4))
    with ts.unsafe():
        old, p = chain(old, p, 1).sync()
    want = np.concatenate([[8], np.arange(15) + 10]).reshape(4, 4)
    np.testing.assert_array_equal(old.unpartition().numpy(), want)
    np.testing.assert_array_equal(p.numpy(), [7, 25, 9])


@ts.kernel
def cas_loop(count: tc.MutTensor[tc.i32, (1,)], p: tc.Ptr[tc.i32], ROUNDS: tc.Const[int]):
    """A counter bumped by a compare-and-swap loop: read, try old + 1, retry on failure."""
    tries = tc.zeros((1,), tc.i32)
    for _ in range(ROUNDS):
        seen = tc.load_ptr(p, tc.zeros((1,), tc.i32))
        done = tc.zeros((1,), tc.bool_)
        while tc.reduce_sum(done.astype(tc.i32), 0) == 0:
            old = tc.atomic_cas_ptr(p, 0, seen, seen + 1)
            done = old == seen
            seen = old
            tries = tries + 1
    count.store(tries)


def test_a_compare_and_swap_loop_counts_every_increment():
    p = ts.zeros(1, dtype=ts.int32).sync()
    counts = ts.zeros(8, dtype=ts.int32).sync().partition(1)
    with ts.unsafe():
        counts, p = cas_loop(counts, p, 5).sync()
    assert p.numpy()[0] == 8 * 5
    assert (counts.unpartition().numpy() >= 5).all()


# ---------------------------------------------------------------------------------------------
# masks and padding


@ts.kernel
def masked(old_cas: tc.MutTensor[tc.i32, (TILE,)], old_xchg: tc.MutTensor[tc.i32, (TILE,)],
           p: tc.Ptr[tc.i32], q: tc.Ptr[tc.i32], n: int, PAD: tc.Const[int]):
    off = tc.arange(TILE) * 2 - 4  # -4, -2, 0, ..., 26: out of range only where masked off
    live = (off >= 0) & (off < n)
    old_cas.store(tc.atomic_cas_ptr(p, off, 0, 7, live, padding=PAD))
    old_xchg.store(tc.atomic_exchange_ptr(q, off, off + 1000, live))


@pytest.mark.parametrize("pad", [0, -1])
def test_masked_off_lanes_return_padding_and_touch_no_memory(pad):
    n = 16
    start = np.arange(n, dtype=np.int32) % 3  # zeros at 0, 3, 6, ...
    p, q = rows(start, ts.int32), rows(start, ts.int32)
    a = ts.full(TILE, 99, ts.int32).sync().partition(TILE)
    b = ts.full(TILE, 99, ts.int32).sync().partition(TILE)
    with ts.unsafe():
        a, b, p, q = masked(a, b, p, q, n, pad).sync()
    off = np.arange(TILE) * 2 - 4
    live = (off >= 0) & (off < n)
    want_p, want_a = serve(start, off[None], np.full((1, 1), 7, np.int32),
                           compare=np.zeros((1, 1), np.int32), mask=live[None], padding=pad)
    want_q, want_b = serve(start, off[None], (off + 1000)[None], mask=live[None])
    got_a, got_b = a.unpartition().numpy(), b.unpartition().numpy()
    np.testing.assert_array_equal(p.numpy(), want_p)
    np.testing.assert_array_equal(got_a, want_a[0])
    np.testing.assert_array_equal(q.numpy(), want_q)
    np.testing.assert_array_equal(got_b, want_b[0])
    assert (got_a[~live] == pad).all() and (got_b[~live] == 0).all()
    np.testing.assert_array_equal(p.numpy()[1::2], start[1::2])  # odd offsets never named


@ts.kernel
def float_cas(old: tc.MutTensor[tc.f32, (4,)], p: tc.Ptr[tc.f32],
              compare: tc.Tensor[tc.f32, (-1,)]):
    old.store(tc.atomic_cas_ptr(p, tc.arange(4), tc.load_tile_like(compare, old), 5.0))


def test_floats_compare_by_bit_pattern():
    start = np.array([0.0, -0.0, np.nan, 1.0], np.float32)
    compare = np.array([0.0, 0.0, np.nan, 1.0], np.float32)
    p = rows(start, ts.float32)
    old = ts.zeros(4).sync().partition(4)
    with ts.unsafe():
        old, p, _ = float_cas(old, p, rows(compare, ts.float32)).sync()
    np.testing.assert_array_equal(_bits(old.unpartition().numpy()), _bits(start))
    # 0.0 matched 0.0, -0.0 did not match 0.0, the NaN matched the same NaN
    np.testing.assert_array_equal(_bits(p.numpy()),
                                  _bits(np.array([5.0, -0.0, 5.0, 5.0], np.float32)))


# ---------------------------------------------------------------------------------------------
# dtype and shape errors


def _half_cas(D):
    @ts.kernel
    def narrow(z: tc.MutTensor[D, (4,)], p: tc.Ptr[D]):
        z.store(tc.atomic_cas_ptr(p, tc.arange(4), z.load(), z.load()))  # <- narrow-cas
    return narrow


def _half_exchange(D):
    @ts.kernel
    def narrow_xchg(z: tc.MutTensor[D, (4,)], p: tc.Ptr[D]):
        z.store(tc.atomic_exchange_ptr(p, tc.arange(4), z.load()))  # <- narrow-xchg
    return narrow_xchg


@pytest.mark.parametrize("dtype", [ts.float16, ts.bfloat16, ts.int8, ts.int16, ts.uint16,
                                   ts.bool_], ids=lambda d: d.short)
@pytest.mark.parametrize("make,tag,name", [(_half_cas, "narrow-cas", "atomic_cas_ptr"),
                                           (_half_exchange, "narrow-xchg",
                                            "atomic_exchange_ptr")], ids=["cas", "exchange"])
def test_elements_narrower_than_32_bits_are_refused(dtype, make, tag, name):
    kernel = make(dtype)
    z = ts.zeros(4, dtype=dtype).sync().partition(4)
    p = ts.zeros(4, dtype=dtype).sync()
    with pytest.raises(DTypeError) as info, ts.unsafe():
        kernel(z, p).sync()
    err = info.value
    assert f"{name} on {dtype.short} elements is not supported" in err.message
    assert "32- and 64-bit" in err.message and err.hint
    assert err.location is not None and err.location.line == here(tag)
    np.testing.assert_array_equal(p.numpy(), np.zeros(4, dtype.storage))


@ts.kernel
def mismatched(z: tc.MutTensor[tc.i64, (4,)], p: tc.Ptr[tc.i64], WHICH: tc.Const[str]):
    i64 = tc.arange(4).astype(tc.i64)
    i32 = tc.arange(4)
    if WHICH == "compare":
        z.store(tc.atomic_cas_ptr(p, i32, i32, i64))  # <- bad-compare
    elif WHICH == "value":
        z.store(tc.atomic_cas_ptr(p, i32, i64, i32))  # <- bad-value
    elif WHICH == "xchg":
        z.store(tc.atomic_exchange_ptr(p, i32, i64.astype(tc.f64)))  # <- bad-xchg
    elif WHICH == "float-number":
        z.store(tc.atomic_cas_ptr(p, i32, 0, 1.5))  # <- float-number
    elif WHICH == "float-offsets":
        z.store(tc.atomic_exchange_ptr(p, i32.astype(tc.f32), i64))  # <- float-offsets
    elif WHICH == "int-mask":
        z.store(tc.atomic_exchange_ptr(p, i32, i64, i32))  # <- int-mask
    elif WHICH == "padding":
        z.store(tc.atomic_exchange_ptr(p, i32, i64, i32 < 2, padding=0.5))  # <- padding
    else:
        z.store(tc.atomic_cas_ptr(p, i32, i64.reshape((2, 2)), i64))  # <- shapes


OPERAND_ERRORS = [
    ("compare", DTypeError, "atomic_cas_ptr: compare dtype i32 differs from the pointer's i64"),
    ("value", DTypeError, "atomic_cas_ptr: value dtype i32 differs from the pointer's i64"),
    ("xchg", DTypeError, "atomic_exchange_ptr: value dtype f64 differs from the pointer's i64"),
    ("float-number", DTypeError, "atomic_cas_ptr: value 1.5 is not a i64 value"),
    ("float-offsets", DTypeError, "atomic_exchange_ptr: offsets must be an integer tile"),
    ("int-mask", DTypeError, "atomic_exchange_ptr: mask must be a bool tile"),
    ("padding", DTypeError, "atomic_exchange_ptr: padding 0.5 must be a compile-time number"),
    ("shapes", ShapeError, "cannot be broadcast together"),
]


@pytest.mark.parametrize("which,error,words", OPERAND_ERRORS,
                         ids=[case[0] for case in OPERAND_ERRORS])
def test_operand_errors_name_the_operand(which, error, words):
    z = ts.zeros(4, dtype=ts.int64).sync().partition(4)
    p = ts.zeros(4, dtype=ts.int64).sync()
    with pytest.raises(error) as info, ts.unsafe():
        mismatched(z, p, which).sync()
    err = info.value
    assert words in err.message, err
    assert err.hint, f"no fix in: {err}"
    tag = {"compare": "bad-compare", "value": "bad-value", "xchg": "bad-xchg"}.get(which, which)
    assert err.location is not None and err.location.line == here(tag)
    assert err.kernel == "mismatched"


# ---------------------------------------------------------------------------------------------
# offsets outside the allocation


@ts.kernel
def shifted(old: tc.MutTensor[tc.i32, (8,)], p: tc.Ptr[tc.i32], shift: int,
            EXCHANGE: tc.Const[bool]):
    i, _, _ = tc.get_tile_block_id()
    off = tc.arange(8) + i * 8 + shift
    if EXCHANGE:
        old.store(tc.atomic_exchange_ptr(p, off, off))  # <- xchg-out
    else:
        old.store(tc.atomic_cas_ptr(p, off, 0, off))  # <- cas-out


@pytest.mark.interpreter_only("the interpreter's out-of-bounds diagnostics")
@pytest.mark.parametrize("exchange,tag", [(False, "cas-out"), (True, "xchg-out")],
                         ids=["cas", "exchange"])
@pytest.mark.parametrize("shift,program,offset", [(3, 3, 32), (-2, 0, -2)])
def test_an_offset_outside_the_allocation_is_a_launch_error(exchange, tag, shift, program,
                                                            offset):
    p = ts.zeros(32, dtype=ts.int32).sync()
    old = ts.full(32, -1, ts.int32).sync().partition(8)
    with ts.unsafe():
        op = shifted(old, p, shift, exchange)
    with pytest.raises(KernelRuntimeError) as info:
        op.sync()
    text = str(info.value)
    assert text.startswith(f"{FILE}:{here(tag)}: "), text
    assert f"kernel 'shifted', tile program ({program}, 0, 0)" in text
    assert f"element offset {offset} is outside the allocation of 32 elements" in text
    # the programs before the failing one did their work; the failing op touched nothing
    want = np.zeros(32, np.int32)
    done = np.arange(8 * program) + shift
    want[done] = done
    np.testing.assert_array_equal(p.numpy(), want)


# ---------------------------------------------------------------------------------------------
# only in unsafe kernels


@ts.kernel
def safe_cas(z: tc.MutTensor[tc.i32, (8,)], x: tc.Tensor[tc.i32, (-1,)]):
    z.store(tc.atomic_cas_ptr(x, tc.arange(8), 0, 1))  # <- safe-cas


@ts.kernel
def safe_exchange(z: tc.MutTensor[tc.i32, (8,)], a: tc.AtomicTensor[tc.i32, (-1,)]):
    z.store(tc.atomic_exchange_ptr(a, tc.arange(8), 1))  # <- safe-xchg


@pytest.mark.parametrize("kernel,tag,name,wrap", [
    (safe_cas, "safe-cas", "atomic_cas_ptr", lambda t: t),
    (safe_exchange, "safe-xchg", "atomic_exchange_ptr", ts.atomic)], ids=["cas", "exchange"])
def test_the_ops_need_a_pointer_parameter(kernel, tag, name, wrap):
    assert not kernel.is_unsafe
    x = rows(np.zeros(8), ts.int32)
    z = ts.full(8, -1, ts.int32).sync().partition(8)
    with pytest.raises(CompileError) as info:
        kernel(z, wrap(x)).sync()
    err = info.value
    assert f"{name}: the first argument must be a tc.Ptr parameter" in err.message, err
    assert "tc.Ptr[dtype]" in err.hint
    assert err.location is not None and err.location.line == here(tag)
    assert os.path.samefile(err.location.file, FILE)
    assert err.kernel == kernel.name
    np.testing.assert_array_equal(x.numpy(), np.zeros(8, np.int32))


def test_a_kernel_with_pointer_atomics_launches_only_inside_unsafe():
    claim = CLAIM[ts.int32]
    assert claim.is_unsafe
    keys = rows(np.zeros((1, TILE)), ts.int32)
    table, won = ts.zeros(4, dtype=ts.int32).sync(), out(1, ts.int32)
    with pytest.raises(UnsafeError) as info:
        claim(won, table, keys).sync()
    assert "kernel 'claim' is unsafe (it takes raw tc.Ptr parameters)" in str(info.value)
    assert "ts.unsafe()" in info.value.hint
    np.testing.assert_array_equal(table.numpy(), np.zeros(4, np.int32))  # nothing ran
    with ts.unsafe():
        won, table, keys = claim(won, table, keys).sync()
    np.testing.assert_array_equal(table.numpy(), [1, 0, 0, 0])
    got = won.unpartition().numpy()[0]  # one lane found the slot empty (the first, here)
    np.testing.assert_array_equal(np.sort(got), [0] + [1] * (TILE - 1))
    assert got[0] == 0 or not INTERPRETED


# ---------------------------------------------------------------------------------------------
# the lowering


def test_lowered_to_one_acquire_release_atomic_each_in_the_token_chain(tmp_path):
    from tilesafe.backends.tileir import tileiras
    from tilesafe.backends.tileir.lower import lower_kernel
    tool = tileiras.find_tileirdisasm()
    if tool is None:
        pytest.skip("tileirdisasm is not installed")
    vec = lambda: ts.zeros(TILE, dtype=ts.int32).sync()  # noqa: E731
    ir = masked.ir(vec().partition(TILE), vec().partition(TILE), vec(), vec(), 16, -1)
    path = tmp_path / "masked.tileirbc"
    path.write_bytes(lower_kernel(ir))
    text = subprocess.run([tool, str(path)], capture_output=True, text=True,
                          timeout=60).stdout
    cas = [line for line in text.splitlines() if "atomic_cas_tko" in line]
    xchg = [line for line in text.splitlines() if "atomic_rmw_tko" in line]
    assert len(cas) == 1 and "atomic_cas_tko acq_rel device" in cas[0], text
    assert len(xchg) == 1 and re.search(r"atomic_rmw_tko acq_rel device %\w+, xchg,", xchg[0])
    assert "tile<16xi1>" in cas[0] and "tile<16xi1>" in xchg[0]  # masked
    # one chain: the compare-and-swap, its result's store, the exchange, its result's store
    chain = []
    for line in text.splitlines():
        op = re.search(r"= (\w+_tko)\b", line)
        if op and op.group(1) in ("atomic_cas_tko", "atomic_rmw_tko", "store_view_tko"):
            token_in = re.search(r"token ?= ?(%\w+)", line)
            results = [r.strip() for r in line.split("=")[0].split(",")]
            chain.append((op.group(1), token_in.group(1) if token_in else "", results[-1]))
    assert [c[0] for c in chain] == ["atomic_cas_tko", "store_view_tko", "atomic_rmw_tko",
                                     "store_view_tko"], text
    for before, after in zip(chain, chain[1:]):
        assert after[1] == before[2], chain
    # masked-off lanes read the padding
    assert len(re.findall(r"= select ", text)) >= 2


@ts.kernel
def claim_rows(cache: tc.MutTensor[tc.f32, (4,)], flags: tc.Ptr[tc.i32],
               rows: tc.Tensor[tc.f32, (-1,)]):
    """Write a row at its position and claim its flag: a compare-and-swap beside an indexed
    partition."""
    i, _, _ = tc.get_tile_block_id()
    cache.store(rows.partition((4,)).load(i))
    tc.atomic_cas_ptr(flags, i, 0, 1)


def test_a_launch_refused_for_its_positions_swaps_nothing():
    """Rule 11's "nothing written" covers the pointer atomics of the launch (on a GPU the whole
    body waits for the positions' verdict: ``tests/tileir/test_indexed_verdict.py``)."""
    cache = ts.zeros((16,), ts.float32).sync()
    flags = ts.zeros((3,), ts.int32).sync()
    rows = ts.tensor(np.arange(12, dtype=np.float32)).sync()
    repeated = ts.tensor(np.array([1, 1, 2], np.int32)).sync()
    with ts.unsafe():
        with pytest.raises(PositionsError, match="names the same tile"):
            claim_rows(ts.borrow_mut(cache).partition(4, at=repeated), flags, rows).sync()
        assert np.all(flags.numpy() == 0) and np.all(cache.numpy() == 0)
        good = ts.tensor(np.array([3, 0, 2], np.int32)).sync()
        claim_rows(ts.borrow_mut(cache).partition(4, at=good), flags, rows).sync()
    assert flags.numpy().tolist() == [1, 1, 1]
    assert cache.numpy()[12:].tolist() == [0.0, 1.0, 2.0, 3.0]
