"""The typed IR: printing, the verifier's invariants, and the registry's completeness."""

from __future__ import annotations

import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.compiler import registry
from tilesafe.compiler.ir import Block, KernelIR, KernelParam, Operation, Value
from tilesafe.compiler.types import TensorViewType, TileType
from tilesafe.compiler.verify import verify
from tilesafe.errors import CompileError, SafetyError


@ts.kernel
def scaled_sum(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1,)], alpha: float):
    acc = tc.zeros(z.shape, tc.f32)
    for _ in range(3):
        acc = acc + tc.load_tile_like(x, z) * alpha
    z.store(acc)


def _args(n=100, tile=32):
    return ts.zeros(n).partition(tile).sync(), ts.ones(n).sync(), 2.0


def test_printed_ir_shows_types_ops_and_lines():
    text = scaled_sum.ir_text(*_args())
    assert text.startswith("kernel @scaled_sum(z: %z")
    assert "mut_tensor<32xf32>" in text and "tensor<?xf32>" in text
    assert "for(" in text and "^region0(" in text and "yield(" in text
    assert "load_like(" in text and "mut_store(" in text
    assert "// line" in text


def test_every_emitted_op_is_declared_in_the_registry():
    ir = scaled_sum.ir(*_args())
    names = {op.name for op in ir.walk()}
    assert names <= set(registry.OPS)
    assert {"for", "mul", "add", "load_like", "mut_store"} <= names


def _kernel(ops, params=(), unchecked=False):
    body = Block(ops=list(ops))
    return KernelIR("k", list(params), body, None, unchecked_accesses=unchecked)


def test_verifier_rejects_use_before_definition():
    a = Value(TileType(ts.float32, (4,)))
    b = Value(TileType(ts.float32, (4,)))
    op = Operation("add", (a, a), (b,), {}, None)
    with pytest.raises(CompileError, match="used before it is defined"):
        verify(_kernel([op]))


def test_verifier_rejects_result_types_the_rule_does_not_give():
    c = Value(TileType(ts.float32, (4,)))
    wrong = Value(TileType(ts.int32, (4,)))
    ops = [Operation("constant", (), (c,), {"value": 1.0, "dtype": ts.float32, "shape": (4,)},
                     None),
           Operation("exp", (c,), (wrong,), {}, None)]
    with pytest.raises(CompileError, match="type rule"):
        verify(_kernel(ops))


def test_raw_pointer_parameters_make_a_kernel_unsafe():
    @ts.kernel
    def gather(p: tc.Ptr[tc.f32], z: tc.MutTensor[tc.f32, "S"]):
        z.store(tc.load_ptr(p, tc.arange(16)))

    assert gather.is_unsafe and not scaled_sum.is_unsafe


def test_verifier_rejects_a_region_without_yield():
    z = Value(TensorViewType(ts.float32, (4,), True))
    lb = Value(TileType(ts.int32, ()))
    body = Block(args=[Value(TileType(ts.int32, ()))], ops=[])
    ops = [Operation("constant", (), (lb,), {"value": 0, "dtype": ts.int32, "shape": ()}, None),
           Operation("for", (lb, lb, lb), (), {}, None, (body,))]
    with pytest.raises(CompileError, match="yield"):
        verify(_kernel(ops, [KernelParam("z", "mut_tensor", z)]))


def test_each_public_function_has_a_docstring_and_registry_entry():
    for name in tc.__all__:
        obj = getattr(tc, name)
        if callable(obj) and hasattr(obj, "__tilesafe_builtin__"):
            assert obj.__doc__ and len(obj.__doc__) > 20, name
            assert obj.__tilesafe_builtin__ in registry.BUILTINS
    for definition in registry.OPS.values():
        assert definition.doc, definition.name


def test_ops_are_declared_once():
    with pytest.raises(RuntimeError, match="declared twice"):
        registry.op("add", "again", lambda t, a: t, lambda *a: None)
