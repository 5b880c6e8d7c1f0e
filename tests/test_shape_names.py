"""Names in shape annotations bind at launch: an output's extents from its partition's tile shape
(``tc.MutTensor[tc.f32, (1, "N")]``), an input's extents from its shape (``tc.Tensor[tc.f16,
("M", "K")]``). Each bound name is a compile-time constant of the specialization (usable in the
body like a ``tc.Const``, one compilation per value), arguments sharing a name must agree, and a
``tc.Const`` that a shape names is checked against the arguments, or bound from them when the
caller leaves it out (``ArgInfo("unbound")``). Misuse at decoration is a SignatureError."""

from __future__ import annotations

import numpy as np
import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.compiler.signature import launch_bound_consts
from tilesafe.compiler.specialize import UNBOUND, ArgInfo, specialize, specialize_from_names
from tilesafe.errors import (ArgumentError, ExtentMismatchError, RankMismatchError,
                             SignatureError, TileShapeMismatchError)


def rows(n: int, cols: int, dtype=np.float32):
    return ts.tensor(np.arange(n * cols, dtype=dtype).reshape(n, cols)).sync()


# ---------------------------------------------------------------------------------------------
# outputs: extent names bound from the partition's tile shape


@ts.kernel
def scaled_rows(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, -1)]):
    z.store(tc.load_tile_like(x, z) * N)  # noqa: F821 (N is bound from z's tile shape)


def test_an_extent_name_binds_from_the_partition_and_is_a_constant():
    before = scaled_rows.compile_count
    x = rows(4, 16)
    z = ts.zeros((4, 16)).sync().partition((1, 16))
    z, _ = scaled_rows(z, x).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy() * 16)
    assert "value=16" in scaled_rows.ir_text(ts.zeros((4, 16)).sync().partition((1, 16)), x)
    # one specialization per value: 16 again reuses it, 8 compiles a new one
    scaled_rows(ts.zeros((4, 16)).sync().partition((1, 16)), x).sync()
    assert scaled_rows.compile_count == before + 1
    z8 = ts.zeros((4, 16)).sync().partition((1, 8))
    z8, _ = scaled_rows(z8, x).sync()
    np.testing.assert_array_equal(z8.unpartition().numpy(), x.numpy() * 8)
    assert scaled_rows.compile_count == before + 2


@ts.kernel
def block_sum(z: tc.MutTensor[tc.f32, ("BM", "D")], x: tc.Tensor[tc.f32, (-1, -1)]):
    acc = tc.zeros((BM, D), tc.f32)  # noqa: F821 (BM, D are bound from z's tile shape)
    for _ in range(2):
        acc = acc + tc.load_tile_like(x, z)
    z.store(acc)


def test_names_bound_from_the_tile_shape_build_tiles_in_the_body():
    x = rows(8, 8)
    z = ts.zeros((8, 8)).sync().partition((4, 8))
    z, _ = block_sum(z, x).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy() * 2)
    ir = block_sum.ir(ts.zeros((8, 8)).sync().partition((2, 4)), x)
    assert ir.params[0].value.type.shape == (2, 4)
    assert "tile<2x4xf32> = constant()" in block_sum.ir_text(
        ts.zeros((8, 8)).sync().partition((2, 4)), x)


@ts.kernel
def tiled(z: tc.MutTensor[tc.f32, ("B", 8)], x: tc.Tensor[tc.f32, (-1, -1)], B: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) + B)


def test_a_const_named_in_a_tile_shape_is_checked_against_the_partition():
    x = rows(8, 8)
    z = ts.zeros((8, 8)).sync().partition((4, 8))
    with pytest.raises(TileShapeMismatchError) as info:
        tiled(z, x, 2).sync()
    err = info.value
    assert "partition tile shape (4, 8) differs from the kernel's static shape (2, 8)" \
        in err.message and "B = 2 was passed as a tc.Const" in err.message
    assert "use (2, 8), or pass B=4" in err.hint and "leave 'B' out" in err.hint
    z, _ = tiled(z.unpartition().partition((4, 8)), x, 4).sync()
    np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy() + 4)


def _infos(z_tile, x_shape, b):
    return [ArgInfo("partition", ts.float32, (8, 8), z_tile),
            ArgInfo("tensor", ts.float32, x_shape), b]


def test_a_left_out_const_binds_from_the_partition_to_the_same_specialization():
    """The compiler's side of leaving a tc.Const out of a launch: the host describes it as
    ArgInfo("unbound"), and the specialization is the one a passed value gives."""
    assert launch_bound_consts(tiled.params) == frozenset({"B"})
    left_out = specialize("tiled", tiled.params, _infos((4, 8), (8, 8), UNBOUND))
    passed = specialize("tiled", tiled.params, _infos((4, 8), (8, 8),
                                                      ArgInfo("const", value=4)))
    assert left_out.const_env() == {"B": 4} and left_out == passed and hash(left_out) == hash(passed)
    ir = tiled._ir(left_out)
    assert ir.params[0].value.type.shape == (4, 8)


def test_a_left_out_const_that_no_shape_names_is_an_error():
    @ts.kernel
    def reps(z: tc.MutTensor[tc.f32, "S"], R: tc.Const[int]):
        z.store(0.0 + R)
    with pytest.raises(ArgumentError, match="'R' of 'reps' were left out, and no argument's "
                       "shape binds them") as info:
        specialize("reps", reps.params, [ArgInfo("partition", ts.float32, (8,), (8,)), UNBOUND])
    assert info.value.hint
    with pytest.raises(ArgumentError, match="argument 'z' of 'reps' is missing"):
        specialize("reps", reps.params, [UNBOUND, ArgInfo("const", value=1)])


@ts.kernel
def pair(z: tc.MutTensor[tc.f32, (1, "N")], w: tc.MutTensor[tc.f32, ("N", 1)]):
    z.store(tc.zeros((1, N), tc.f32))  # noqa: F821
    w.store(tc.ones((N, 1), tc.f32))  # noqa: F821


def test_a_name_in_two_outputs_binds_once_and_must_agree():
    z = ts.zeros((1, 16)).sync().partition((1, 16))
    w = ts.zeros((16, 1)).sync().partition((16, 1))
    z, w = pair(z, w).sync()
    assert (w.unpartition().numpy() == 1).all()
    with pytest.raises(TileShapeMismatchError) as info:
        pair(ts.zeros((1, 16)).sync().partition((1, 8)),
             ts.zeros((16, 1)).sync().partition((16, 1))).sync()
    msg = info.value.message
    assert "'N' is bound to 8 by an earlier argument of 'pair', the partition tile shape " \
        "(1, 8) of 'z', but the partition tile shape (16, 1) of 'w' gives 16" in msg
    assert "must agree" in info.value.hint


def test_a_tile_shape_of_another_rank_is_a_tile_shape_mismatch():
    with pytest.raises(TileShapeMismatchError, match=r"partition tile shape \(16,\) has rank 1, "
                       r"the kernel's static shape \(1, N\) has rank 2"):
        specialize("pair", pair.params, [ArgInfo("partition", ts.float32, (16,), (16,)),
                                         ArgInfo("partition", ts.float32, (16, 1), (16, 1))])


# ---------------------------------------------------------------------------------------------
# inputs: extent names bound from the argument's shape, static in the kernel


@ts.kernel
def row_dot(z: tc.MutTensor[tc.f32, (1, 1)], x: tc.Tensor[tc.f16, ("M", "K")]):
    i, _, _ = tc.get_tile_block_id()
    m, k = x.shape
    tile = x.partition((1, K)).load((i, 0)).astype(tc.f32)  # noqa: F821 (K from x's shape)
    z.store(tc.reduce_sum(tile, 1, keepdims=True) * (m * 0 + M) + k * 0)  # noqa: F821


def test_input_extent_names_are_compile_time_constants():
    before = row_dot.compile_count
    x = rows(4, 8, np.float16)
    z = ts.zeros((4, 1)).sync().partition((1, 1))
    ir = row_dot.ir(z, x)
    assert ir.params[1].value.type.shape == (4, 8)  # static in the kernel: no tensor_dim op
    assert "tensor_dim" not in row_dot.ir_text(z, x)
    z, _ = row_dot(z, x).sync()
    expected = x.numpy().astype(np.float32).sum(1, keepdims=True) * 4
    np.testing.assert_array_equal(z.unpartition().numpy(), expected)
    assert row_dot.compile_count == before + 1
    row_dot(ts.zeros((4, 1)).sync().partition((1, 1)), rows(4, 8, np.float16)).sync()
    assert row_dot.compile_count == before + 1  # the same extents: the same specialization
    x2 = rows(2, 16, np.float16)
    z2, _ = row_dot(ts.zeros((2, 1)).sync().partition((1, 1)), x2).sync()
    np.testing.assert_array_equal(z2.unpartition().numpy(),
                                  x2.numpy().astype(np.float32).sum(1, keepdims=True) * 2)
    assert row_dot.compile_count == before + 2  # new extents: a new specialization


@ts.kernel
def mixed(z: tc.MutTensor[tc.f32, (1, "N")], x: tc.Tensor[tc.f32, (-1, "N")],
          y: tc.Tensor[tc.f32, (-1, 4)]):
    z.store(tc.load_tile_like(x, z))


def test_dynamic_and_int_extents_keep_their_meaning_beside_names():
    before = mixed.compile_count
    for n_rows in (3, 5):  # -1 stays dynamic: no new specialization
        x = rows(n_rows, 8)
        z, _, _ = mixed(ts.zeros((n_rows, 8)).sync().partition((1, 8)), x, rows(2, 4)).sync()
        np.testing.assert_array_equal(z.unpartition().numpy(), x.numpy())
    assert mixed.compile_count == before + 1
    assert mixed.ir(ts.zeros((3, 8)).sync().partition((1, 8)), rows(3, 8),
                    rows(2, 4)).params[1].value.type.shape == (None, 8)
    with pytest.raises(ExtentMismatchError, match=r"static extent 4 differs from the tensor's "
                       r"shape \(2, 5\)"):
        mixed(ts.zeros((3, 8)).sync().partition((1, 8)), rows(3, 8), rows(2, 5)).sync()


def test_a_name_shared_by_an_input_and_an_output_must_agree():
    with pytest.raises(ExtentMismatchError) as info:
        mixed(ts.zeros((3, 8)).sync().partition((1, 8)), rows(3, 16), rows(2, 4)).sync()
    msg = info.value.message
    assert "'N' is bound to 8 by an earlier argument of 'mixed', the partition tile shape " \
        "(1, 8) of 'z', but the shape (3, 16) of 'x' gives 16" in msg
    assert info.value.hint
    assert not isinstance(info.value, RankMismatchError)  # the rank is right: an extent differs


@ts.kernel
def by_const(x: tc.Tensor[tc.f32, ("N",)], z: tc.MutTensor[tc.f32, "S"], N: tc.Const[int]):
    z.store(tc.load_tile_like(x, z) * N)


def test_a_const_named_in_an_input_shape_is_checked_or_bound():
    assert launch_bound_consts(by_const.params) == frozenset({"N"})
    x = ts.tensor(np.arange(8, dtype=np.float32)).sync()
    with pytest.raises(ExtentMismatchError) as info:
        by_const(x, ts.zeros(8).sync().partition(8), 4).sync()
    assert "static extent 4 differs from the tensor's shape (8,) (N = 4 was passed as a " \
        "tc.Const)" in info.value.message
    assert "pass N=8 (or leave 'N' out" in info.value.hint
    spec = specialize("by_const", by_const.params, [ArgInfo("tensor", ts.float32, (8,)),
                                                    ArgInfo("partition", ts.float32, (8,), (8,)),
                                                    UNBOUND])
    assert spec.const_env() == {"N": 8} and spec.type_of("x").shape == (8,)


# ---------------------------------------------------------------------------------------------
# examples (tilesafe check) and misuse at decoration


def test_examples_bind_extent_names():
    spec = specialize_from_names("block_sum", block_sum.params, {"BM": 4, "D": 8})
    assert spec.type_of("z").shape == (4, 8) and dict(spec.bound_names) == {"BM": 4, "D": 8}
    assert "BM=4" in spec.describe()
    with pytest.raises(ArgumentError, match="no binding for extent name 'D'") as info:
        specialize_from_names("block_sum", block_sum.params, {"BM": 4})
    assert "'D': 64" in info.value.hint
    with pytest.raises(ArgumentError, match="binds extent name 'D' to '8', not a positive int"):
        specialize_from_names("block_sum", block_sum.params, {"BM": 4, "D": "8"})


@pytest.mark.parametrize("source,phrase,fix", [
    ("def k(z: tc.MutTensor[tc.f32, ('F',)], F: tc.Const[float]): pass",
     "shape entry 'F' is not a tc.Const[int] parameter (it is tc.Const[float])",
     "declare 'F' as tc.Const[int]"),
    ("def k(z: tc.MutTensor[tc.f32, 'N'], x: tc.Tensor[tc.f32, ('N',)]): pass",
     "'N' is a whole-shape name in parameter 'z' and an extent name in parameter 'x'",
     "its own name"),
    ("def k(z: tc.MutTensor['T', 'S'], x: tc.Tensor[tc.f32, ('T',)]): pass",
     "'T' is a dtype name in parameter 'z' and an extent name in parameter 'x'", "its own name"),
    ("def k(z: tc.MutTensor[tc.f32, 'n'], n: tc.Const[int]): pass",
     "a whole-shape name 'n' is also a parameter of the kernel", "('n',)"),
    ("def k(z: tc.MutTensor['x', 'S'], x: tc.Tensor[tc.f32, (-1,)]): pass",
     "a dtype name 'x' is also a parameter of the kernel", "rename"),
], ids=["const-float", "shape-and-extent", "dtype-and-extent", "shape-is-param",
        "dtype-is-param"])
def test_a_name_with_two_roles_is_a_signature_error(source, phrase, fix):
    scope = {"tc": tc}
    exec(source, scope)  # noqa: S102 (a signature under test)
    with pytest.raises(SignatureError) as info:
        ts.kernel(scope["k"])
    assert phrase in info.value.message, info.value.message
    assert fix in info.value.hint, info.value.hint


@ts.kernel
def mapped_fill(z: tc.MappedPartitionMut[tc.f32, ("B", "C"), (1, "P")]):
    for idx in z.iter_indices():
        z.store(tc.full((B, C), P, tc.f32), idx)  # noqa: F821 (B, C, P from the partition)


def test_a_mapped_partition_binds_its_extent_names():
    z = ts.zeros((4, 32)).sync().partition((2, 8)).map((1, 2), 4)
    (z,) = mapped_fill(z).sync()
    np.testing.assert_array_equal(z.partition.unpartition().numpy(),
                                  np.full((4, 32), 2.0, np.float32))
    spec = specialize("mapped_fill", mapped_fill.params,
                      [ArgInfo("mapped", ts.float32, (4, 32), (2, 8), (1, 4))])
    assert dict(spec.bound_names) == {"B": 2, "C": 8, "P": 4}
