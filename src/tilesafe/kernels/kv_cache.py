"""Writing new keys and values into a KV cache: ``kv_cache_update`` scatters token ``i``'s
``k[i]``/``v[i]`` to the cache slot ``slots[i]`` through an indexed partition (a safe scatter:
every launch proves the slots distinct and inside the cache before any program writes, and
otherwise writes nothing and raises ``PositionsError``).

Cache layout (what ``decode_attention`` reads): ``(num_slots, kv_heads, head_dim)``, one
contiguous ``kv_heads * head_dim`` row per slot, keys and values in two tensors of one shape.
A paged cache ``(num_blocks, block_size, kv_heads, head_dim)`` is the same memory: its slot
``b * block_size + j`` is block ``b``'s row ``j``, and it is accepted as is. A sequence's
tokens live where the engine's slot mapping puts them (a contiguous range of slots for a
dense per-sequence cache, a block table's blocks for a paged one).

Tiles: when a slot's row (``kv_heads * head_dim`` elements) is a power of two (Qwen3: 8 x
128) the cache is viewed flat and the slot is the tile coordinate itself (one launch);
otherwise the row is one padded ``(1, 2**m)`` tile of a ``(num_slots, row)`` view, whose
``(slot, 0)`` coordinates a tiny kernel writes first (two launches).

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's helpers.
"""

from __future__ import annotations

from typing import Any

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..host.tensor import Tensor, borrow_mut
from ..kernel import kernel
from . import _token_args as args
from ._outputs import Output
from ._token_args import MEMORY_BOUND_HINTS
from ._torch import accepts_torch

CACHE_DTYPES = ("float16", "bfloat16", "float32")


@kernel(hints=MEMORY_BOUND_HINTS)
def kv_write_rows(cache_k: tc.MutTensor["T", ("W",)], cache_v: tc.MutTensor["T", ("W",)],
                  k: tc.Tensor["T", (-1,)], v: tc.Tensor["T", (-1,)]):
    """Program i writes token i's key and value row (W elements) into its slot's row."""
    i, _, _ = tc.get_tile_block_id()
    cache_k.store(k.partition((W,)).load(i))
    cache_v.store(v.partition((W,)).load(i))


@kernel(hints=MEMORY_BOUND_HINTS)
def kv_write_padded_rows(cache_k: tc.MutTensor["T", (1, "WP")],
                         cache_v: tc.MutTensor["T", (1, "WP")],
                         k: tc.Tensor["T", (-1, -1)], v: tc.Tensor["T", (-1, -1)]):
    """As ``kv_write_rows`` for a row that is not a power of two (a padded tile)."""
    i, _, _ = tc.get_tile_block_id()
    cache_k.store(k.partition((1, WP)).load((i, 0), padding=0))
    cache_v.store(v.partition((1, WP)).load((i, 0), padding=0))


@kernel
def slot_coordinates(out: tc.MutTensor["S", ("N", 2)], slots: tc.Tensor["S", (-1,)]):
    """``out[i] = (slots[i], 0)``: the tile coordinates of slot rows in a (slots, row) view."""
    i, _, _ = tc.get_tile_block_id()
    s = slots.partition((N,)).load(i, padding=0).reshape((N, 1))
    out.store(tc.cat((s, tc.zeros((N, 1), s.dtype)), axis=1))


@autotune(configs=[{}], key=lambda cache_k, cache_v, k, v, slots: (
              cache_k.shape[-1] * cache_k.shape[-2], cache_k.dtype.name),
          kernels=(kv_write_rows, kv_write_padded_rows, slot_coordinates),
          mutates=("cache_k", "cache_v"))
def _launch(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor, slots: Tensor, *,
            config: dict) -> DeviceOp:
    tokens, heads, d = k.shape
    width = heads * d
    num_slots = cache_k.size // width
    done = lambda r: (cache_k, cache_v)  # noqa: E731 (the caller's tensors, whatever shape)
    if width == args.pow2(width):
        flat = (num_slots * width,)
        return kv_write_rows(borrow_mut(cache_k.reshape(*flat)).partition(width, at=slots),
                             borrow_mut(cache_v.reshape(*flat)).partition(width, at=slots),
                             k.reshape(tokens * width), v.reshape(tokens * width)).then(done)
    tile = (1, args.pow2(width))
    n = min(1024, args.pow2(tokens))

    # (allocated as the library's outputs are: by torch when the call came with torch tensors)
    coordinates = Output(None, (tokens, 2), slots.dtype, slots.device, op="kv_cache_update")

    def write(r: Any) -> DeviceOp:
        at = coordinates.tensor(r.out)
        return kv_write_padded_rows(
            borrow_mut(cache_k.reshape(num_slots, width)).partition(tile, at=at),
            borrow_mut(cache_v.reshape(num_slots, width)).partition(tile, at=at),
            k.reshape(tokens, width), v.reshape(tokens, width))
    return slot_coordinates(coordinates.partition((n, 2)), slots).then(write).then(done)


@accepts_torch
def kv_cache_update(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor,
                    slots: Tensor) -> DeviceOp:
    """Write new keys and values into the cache slots ``slots``, in place:
    ``cache_k[slots[i]] = k[i]`` and ``cache_v[slots[i]] = v[i]`` (``index_copy_``).

    Args:
        cache_k: the key cache, ``(num_slots, kv_heads, head_dim)`` or paged ``(num_blocks,
            block_size, kv_heads, head_dim)`` (slot ``b * block_size + j``), contiguous,
            float16/bfloat16/float32.
        cache_v: the value cache, same shape and dtype as ``cache_k`` (other memory).
        k: new keys, ``(tokens, kv_heads, head_dim)`` of the caches' dtype, contiguous.
        v: new values, same shape and dtype as ``k``.
        slots: the slot of each token, ``(tokens,)`` int32 or int64, on the device (a CUDA
            graph replay reads the slots of the moment).

    Returns:
        A DeviceOp whose result is ``(cache_k, cache_v)``.

    Raises:
        ArgumentError: a dtype, rank, shape or device that does not fit (the message says
            which), or a cache that is not contiguous.
        PositionsError: (when the op runs) two tokens with one slot, or a slot outside
            ``[0, num_slots)``; nothing is written then.
    """
    op = "kv_cache_update"
    cache_k = args.tensor(op, "cache_k", cache_k, CACHE_DTYPES, min_rank=3)
    cache_v = args.tensor(op, "cache_v", cache_v, CACHE_DTYPES, min_rank=3)
    k = args.tensor(op, "k", k, CACHE_DTYPES, rank=3)
    v = args.tensor(op, "v", v, CACHE_DTYPES, rank=3)
    slots = args.tensor(op, "slots", slots, args.INDEX_DTYPES, rank=1)
    args.same_device(op, [("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v),
                          ("slots", slots)])
    if cache_k.ndim > 4:
        raise args.fail(op, f"cache_k has shape {tuple(cache_k.shape)}; it must be (num_slots, "
                        "kv_heads, head_dim) or (num_blocks, block_size, kv_heads, head_dim)",
                        "reshape the cache to one of those layouts")
    for name, x in (("cache_v", cache_v), ("k", k), ("v", v)):
        if x.dtype != cache_k.dtype:
            raise args.fail(op, f"{name} has dtype {x.dtype.name}, cache_k {cache_k.dtype.name}",
                            f"convert {name} to {cache_k.dtype.name}")
    if tuple(cache_v.shape) != tuple(cache_k.shape):
        raise args.fail(op, f"cache_v has shape {tuple(cache_v.shape)}, cache_k "
                        f"{tuple(cache_k.shape)}", "pass key and value caches of one shape")
    if tuple(v.shape) != tuple(k.shape):
        raise args.fail(op, f"v has shape {tuple(v.shape)}, k {tuple(k.shape)}",
                        "pass keys and values of one shape")
    if tuple(k.shape[1:]) != tuple(cache_k.shape[-2:]):
        raise args.fail(op, f"k has shape {tuple(k.shape)}; the cache holds rows of "
                        f"(kv_heads, head_dim) = {tuple(cache_k.shape[-2:])}",
                        "pass k and v as (tokens, kv_heads, head_dim) of the cache's layout")
    if slots.shape[0] != k.shape[0]:
        raise args.fail(op, f"slots has {slots.shape[0]} entries for {k.shape[0]} tokens",
                        "pass one slot per token")
    for name, x in (("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v)):
        args.nonempty(op, name, x)
        if not x.is_contiguous:
            raise args.fail(op, f"{name} is not contiguous (strides {tuple(x.strides)})",
                            f"pass a contiguous {name} ({name}.clone())")
    return _launch(cache_k, cache_v, k, v, slots)
