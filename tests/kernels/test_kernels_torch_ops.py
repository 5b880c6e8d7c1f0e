"""The library as torch custom operators (``tilesafe.kernels.torch_ops``), on torch's CPU build:
each op computes what the library function does, its fake implementation gives the output's
shape and dtype (checked against the real result), in-place ops change their arguments, and
the ops trace into a ``torch.compile`` graph with no graph break."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ops_module = pytest.importorskip("tilesafe.kernels.torch_ops")
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

T = torch.ops.tilesafe


def _fake_matches(op, *args):
    real = op(*args)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = op(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
    if real is None:
        assert fake is None
        return real
    assert fake.shape == real.shape and fake.dtype == real.dtype, (fake, real)
    return real


def test_row_ops_and_their_fakes():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 40, generator=g)
    w = torch.randn(40, generator=g)
    y = _fake_matches(T.rms_norm, x, w, 1e-6)
    want = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) * w
    assert torch.allclose(y, want, atol=1e-5)
    assert torch.allclose(_fake_matches(T.softmax, x), torch.softmax(x, -1), atol=1e-6)
    gate_up = torch.randn(3, 64, generator=g)
    got = _fake_matches(T.silu_mul, gate_up, None)
    assert got.shape == (3, 32)
    assert torch.allclose(got, torch.nn.functional.silu(gate_up[:, :32]) * gate_up[:, 32:],
                          atol=1e-6)
    assert _fake_matches(T.matmul, torch.randn(3, 16).half(), torch.randn(8, 16).half(),
                         None).shape == (3, 8)
    ids = torch.tensor([3, 1, 4], dtype=torch.int32)
    table = torch.randn(10, 8, generator=g)
    assert torch.equal(_fake_matches(T.embedding, ids, table), table[ids.long()])
    logits = torch.randn(2, 50, generator=g)
    assert torch.equal(_fake_matches(T.argmax, logits).long(), logits.argmax(-1))


def test_flash_attention_takes_torch_tensors_and_is_a_torch_op():
    """flash_attention on torch tensors (the function and the op) equals torch's attention
    over the same tensors, grouped query heads and a causal mask included; the fake gives the
    query's shape; and out= of the wrong shape is refused before anything runs."""
    from tilesafe import kernels as K
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 24, 64, generator=g).half()
    k = torch.randn(1, 2, 40, 64, generator=g).half()
    v = torch.randn(1, 2, 40, 64, generator=g).half()
    rows = torch.arange(24).reshape(24, 1) + 16  # (bottom-right aligned: the last 24 of 40)
    visible = torch.arange(40).reshape(1, 40) <= rows
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1),
        attn_mask=visible)
    got = K.flash_attention(q, k, v, causal=True)
    assert isinstance(got, torch.Tensor) and got.shape == q.shape and got.dtype == q.dtype
    assert torch.allclose(got.double(), want, atol=2e-3)
    out = torch.full_like(q, float("nan"))
    assert K.flash_attention(q, k, v, causal=True, out=out) is out
    assert torch.equal(out, got)
    assert torch.equal(_fake_matches(T.flash_attention, q, k, v, True, None), got)
    with pytest.raises(Exception, match="out"):
        K.flash_attention(q, k, v, out=torch.empty(1, 4, 23, 64).half())


def test_every_other_op_computes_what_torch_does_and_its_fake_agrees():
    """The ops no other test calls: gelu (both forms), layer_norm, scaled_matmul, sample and
    kv_cache_update, each against torch's own computation on the same tensors."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(6, 48, generator=g)
    for form in ("none", "tanh"):
        got = _fake_matches(T.gelu, x, form)
        assert torch.allclose(got, torch.nn.functional.gelu(x, approximate=form), atol=1e-5)
    w, b = torch.randn(48, generator=g), torch.randn(48, generator=g)
    assert torch.allclose(_fake_matches(T.layer_norm, x, w, b, 1e-5),
                          torch.nn.functional.layer_norm(x, (48,), w, b, 1e-5), atol=1e-5)
    a = torch.randn(20, 64, generator=g).to(torch.float8_e4m3fn)
    bw = torch.randn(24, 64, generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5]), torch.tensor([0.25])
    got = _fake_matches(T.scaled_matmul, a, bw, sa, sb, torch.bfloat16)
    want = (a.double() @ bw.double().t() * 0.125).to(torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    # (the interpreter sums exactly either way; a GPU's fast accumulation rounds differently)
    assert torch.equal(T.scaled_matmul(a, bw, sa, sb, torch.bfloat16, True), want)
    logits = torch.randn(3, 100, generator=g)
    offset = torch.tensor([7], dtype=torch.int64)
    greedy = _fake_matches(T.sample, logits, 1.0, 1, 1.0, 123, offset)  # top-1: the maximum
    assert torch.equal(greedy.long(), logits.argmax(-1))
    drawn = T.sample(logits, 0.8, 0, 1.0, 123, offset)
    assert torch.equal(drawn, T.sample(logits, 0.8, 0, 1.0, 123, offset))  # by the seed
    assert drawn.dtype == torch.int32 and bool(((drawn >= 0) & (drawn < 100)).all())
    cache_k, cache_v = torch.zeros(1, 2, 16, 8), torch.zeros(1, 2, 16, 8)
    k, v = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    slots = torch.tensor([9, 2, 14], dtype=torch.int32)
    assert T.kv_cache_update(cache_k, cache_v, k, v, slots, "hnd") is None
    want_k, want_v = torch.zeros(1, 2, 16, 8), torch.zeros(1, 2, 16, 8)
    want_k[0, :, slots.long()] = k.transpose(0, 1)
    want_v[0, :, slots.long()] = v.transpose(0, 1)
    assert torch.equal(cache_k, want_k) and torch.equal(cache_v, want_v)


def test_paged_decode_attention_as_a_torch_op_reads_through_the_block_table():
    """The paged op equals the contiguous one over the same keys, laid out in shuffled blocks;
    its fake gives the query's shape."""
    g = torch.Generator().manual_seed(4)
    batch, heads, kv_heads, d, block, blocks_per = 2, 4, 2, 64, 16, 3
    k = torch.randn(batch, kv_heads, block * blocks_per, d, generator=g).half()
    v = torch.randn(batch, kv_heads, block * blocks_per, d, generator=g).half()
    q = torch.randn(batch, heads, d, generator=g).half()
    lengths = torch.tensor([40, 17], dtype=torch.int32)
    order = torch.randperm(batch * blocks_per, generator=g)  # logical block -> physical
    pool_k = torch.zeros(batch * blocks_per, block, kv_heads, d).half()
    pool_v = torch.zeros_like(pool_k)
    table = order.reshape(batch, blocks_per).to(torch.int32)
    for b in range(batch):
        for i in range(blocks_per):
            rows = slice(i * block, (i + 1) * block)
            pool_k[table[b, i]] = k[b, :, rows].transpose(0, 1)
            pool_v[table[b, i]] = v[b, :, rows].transpose(0, 1)
    got = _fake_matches(T.paged_decode_attention, q, pool_k, pool_v, lengths, table, None)
    want = T.decode_attention(q, k, v, lengths, None)
    assert got.shape == q.shape and torch.allclose(got.float(), want.float(), atol=2e-3)


def test_in_place_ops_change_their_arguments():
    g = torch.Generator().manual_seed(1)
    x, residual = torch.randn(4, 32, generator=g), torch.randn(4, 32, generator=g)
    w = torch.ones(32)
    before = residual.clone()
    normed = T.add_rms_norm(x, residual, w, 1e-6)
    assert torch.allclose(residual, before + x)
    r = residual
    assert torch.allclose(normed, r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6),
                          atol=1e-5)


def test_rope_with_qk_norm_as_a_torch_op_rotates_in_place():
    from tilesafe.kernels import rope_cache
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 4, 8, generator=g), torch.randn(2, 2, 8, generator=g)
    wq, wk = torch.randn(8, generator=g), torch.randn(8, generator=g)
    table = torch.from_numpy(rope_cache(16, 8).sync().numpy())
    positions = torch.tensor([3, 11], dtype=torch.int32)
    want_q = T.rms_norm(q.reshape(8, 8), wq, 1e-6).reshape(2, 4, 8)
    want_k = T.rms_norm(k.reshape(4, 8), wk, 1e-6).reshape(2, 2, 8)
    T.rope(want_q, want_k, table, positions, "neox")
    assert _fake_matches(T.rope, q, k, table, positions, "neox", wq, wk, 1e-6) is None
    assert torch.equal(q, want_q) and torch.equal(k, want_k)


def test_rope_kv_cache_update_as_a_torch_op_writes_the_caches():
    from tilesafe.kernels import rope_cache
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 4, 8, generator=g), torch.randn(2, 2, 8, generator=g),
               torch.randn(2, 2, 8, generator=g))
    table = torch.from_numpy(rope_cache(16, 8).sync().numpy())
    positions, slots = torch.tensor([3, 11]), torch.tensor([4, 0])
    cache_k, cache_v = torch.zeros(5, 2, 8), torch.zeros(5, 2, 8)
    q_out = T.rope_kv_cache_update(q, k, v, table, positions, cache_k, cache_v, slots, "neox")
    want_q, want_k = q.clone(), k.clone()
    T.rope(want_q, want_k, table, positions, "neox")
    assert torch.equal(q_out, want_q) and torch.equal(cache_k[[4, 0]], want_k)
    assert torch.equal(cache_v[[4, 0]], v) and bool((cache_k[1:4] == 0).all())
    assert _fake_matches(T.rope_kv_cache_update, q, k, v, table, positions, cache_k.clone(),
                         cache_v.clone(), slots, "neox").shape == q.shape


def test_the_ops_trace_into_torch_compile_without_a_break():
    def block(x, w, up):
        h = T.rms_norm(x, w, 1e-6)
        return T.silu_mul(h, up)
    g = torch.Generator().manual_seed(2)
    x, w, up = (torch.randn(4, 32, generator=g), torch.randn(32, generator=g),
                torch.randn(4, 32, generator=g))
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(x, w, up), block(x, w, up))


def test_the_fused_products_as_torch_ops():
    """``silu_mul_matmul``, ``rms_norm_matmul`` (a norm weight or None) and
    ``matmul_accumulate`` (the residual written in place) equal their unfused ops."""
    g = torch.Generator().manual_seed(4)
    gate_up = torch.randn(1, 64, generator=g).to(torch.bfloat16)
    w = (torch.randn(24, 32, generator=g) / 4).to(torch.bfloat16)
    got = _fake_matches(T.silu_mul_matmul, gate_up, w)
    assert torch.equal(got, T.matmul(T.silu_mul(gate_up, None), w, None))
    x = torch.randn(1, 32, generator=g).to(torch.bfloat16)
    scale = (1 + torch.randn(32, generator=g) / 4).to(torch.bfloat16)
    got = _fake_matches(T.rms_norm_matmul, x, scale, w, 1e-6)
    assert torch.equal(got, T.matmul(T.rms_norm(x, scale, 1e-6), w, None))
    unit = _fake_matches(T.rms_norm_matmul, x, None, w, 1e-6)
    assert torch.equal(unit, T.matmul(T.rms_norm(x, torch.ones_like(scale), 1e-6), w, None))
    residual = torch.randn(1, 24, generator=g).to(torch.bfloat16)
    before = residual.clone()
    assert _fake_matches(T.matmul_accumulate, x, w, residual) is None
    product = T.matmul(x, w, None)
    assert torch.equal(residual, (before.float() + product.float()).to(torch.bfloat16))
