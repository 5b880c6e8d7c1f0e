"""Kernel hints (``@ts.kernel(hints=...)``): the per-architecture keys, and ``tensor_dim_factor``
(the cuTile Rust book's kernel-wide alignment promise), validated at decoration with a fix, and
checked at launch by ``compiler.hints.check_dim_factors``. (The lowering's side is in
``tests/tileir/test_kernel_hints.py``.)"""

from __future__ import annotations

import os

import pytest

import tilesafe as ts
import tilesafe.core as tc
from tilesafe.compiler.hints import (arch_hints, check_dim_factors, check_hints, covered_dims,
                                     dim_factors)
from tilesafe.compiler.signature import parse_signature
from tilesafe.compiler.specialize import ArgInfo
from tilesafe.errors import ArgumentError, SignatureError


def body(z: tc.MutTensor[tc.f32, "S"], x: tc.Tensor[tc.f32, (-1, 8)],
         y: tc.Tensor[tc.f32, (4,)], n: int):
    z.store(tc.load_tile_like(x, z))


@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_120", "default"])
def test_per_architecture_keys_are_accepted(arch):
    k = ts.kernel(hints={arch: {"occupancy": 2}, "tensor_dim_factor": 16})(body)
    assert k.hints == {arch: {"occupancy": 2}, "tensor_dim_factor": 16}
    assert arch_hints(k.hints) == {arch: {"occupancy": 2}}


def test_the_kernel_wide_factor_covers_every_dynamic_extent():
    k = ts.kernel(hints={"tensor_dim_factor": 16})(body)
    assert dim_factors(k.hints, k.params) == {"z": 16, "x": 16, "y": 16}
    by_name = {p.name: p for p in k.params}
    assert covered_dims(by_name["z"], 2) == (0, 1)  # the partitioned tensor: every extent
    assert covered_dims(by_name["x"], 2) == (0,)  # the -1 extents only
    assert covered_dims(by_name["y"], 1) == ()  # static: known exactly
    per_param = ts.kernel(hints={"tensor_dim_factor": {"x": 8}})(body)
    assert dim_factors(per_param.hints, per_param.params) == {"x": 8}


@pytest.mark.parametrize("hints,phrase,fix", [
    ({"tensor_dim_factor": 12}, "tensor_dim_factor must be a positive power of two", "16"),
    ({"tensor_dim_factor": 0}, "positive power of two", "16"),
    ({"tensor_dim_factor": -16}, "positive power of two", "16"),
    ({"tensor_dim_factor": True}, "positive power of two", "16"),
    ({"tensor_dim_factor": 16.0}, "positive power of two", "16"),
    ({"tensor_dim_factor": 1 << 31}, "at most 2**30", "16"),
    ({"tensor_dim_factor": {"x": 3}}, "tensor_dim_factor of 'x' must be a positive power", "16"),
    ({"tensor_dim_factor": {}}, "'tensor_dim_factor' is an empty dict", "{'x': 16}"),
    ({"sm_90": {"tensor_dim_factor": 16}}, "'tensor_dim_factor' is not a per-architecture hint",
     "'tensor_dim_factor': 16, 'sm_90'"),
    ({"sm_90": 2}, "the hints for sm_90 must be a dict of hint names, got 2", "occupancy"),
    ({"tensor_dims": 16}, "hints key 'tensor_dims' is not an architecture",
     "'tensor_dim_factor'"),
    ({"sm_90a": {"occupancy": 1}}, "hints key 'sm_90a' is not an architecture", "sm_90"),
    ([("sm_90", {})], "hints must be a dict keyed by architecture", "tensor_dim_factor"),
], ids=["not-pow2", "zero", "negative", "bool", "float", "too-large", "param-not-pow2",
        "empty-dict", "per-arch", "arch-not-dict", "unknown-key", "arch-suffix", "not-a-dict"])
def test_bad_hints_are_signature_errors_with_a_fix(hints, phrase, fix):
    with pytest.raises(SignatureError) as info:
        ts.kernel(hints=hints)(body)  # <- bad-hints
    err = info.value
    assert phrase in err.message, err.message
    assert fix in err.hint, err.hint
    assert err.location is not None and os.path.samefile(err.location.file, __file__)


@pytest.mark.parametrize("factor,phrase,fix", [
    ({"w": 16}, "'tensor_dim_factor' names 'w', which is not a tensor parameter", "z, x, y"),
    ({"n": 16}, "names 'n', which is not a tensor parameter", "z, x, y"),
    ({"y": 16}, "names 'y', whose shape has no dynamic extent", "drop 'y'"),
], ids=["unknown-name", "scalar", "static-only"])
def test_a_per_parameter_factor_names_tensor_parameters(factor, phrase, fix):
    params, hints = parse_signature(body), {"tensor_dim_factor": factor}
    with pytest.raises(SignatureError) as info:
        check_hints(hints, params)  # (a kernel passes its parameters to check the names)
    assert phrase in info.value.message and fix in info.value.hint, str(info.value)
    with pytest.raises(SignatureError):
        dim_factors(hints, params)


def _infos(z_shape, x_shape):
    return [ArgInfo("partition", ts.float32, z_shape, (16, 8)),
            ArgInfo("tensor", ts.float32, x_shape), ArgInfo("tensor", ts.float32, (4,)),
            ArgInfo("const", value=1)]


def test_the_launch_check_refuses_extents_that_break_the_promise():
    k = ts.kernel(hints={"tensor_dim_factor": 16})(body)
    factors = dim_factors(k.hints, k.params)
    check_dim_factors(k.name, k.params, _infos((32, 64), (48, 8)), factors)  # keeps it
    with pytest.raises(ArgumentError) as info:
        check_dim_factors(k.name, k.params, _infos((32, 64), (40, 8)), factors, "here")
    err = info.value
    assert "argument 'x' of 'body' has shape (40, 8): extent 0 is 40, but the kernel's hint " \
        "tensor_dim_factor=16 promises its dynamic extents are multiples of 16" in err.message
    assert "multiples of 16" in err.hint and err.location == "here"
    with pytest.raises(ArgumentError, match="argument 'z' of 'body' has shape \\(32, 72\\): "
                       "extent 1 is 72.*the extents of the tensor it partitions"):
        check_dim_factors(k.name, k.params, _infos((32, 72), (48, 8)), factors)
    only_z = ts.kernel(hints={"tensor_dim_factor": {"z": 8}})(body)
    check_dim_factors(k.name, k.params, _infos((32, 72), (40, 8)),
                      dim_factors(only_z.hints, only_z.params))
