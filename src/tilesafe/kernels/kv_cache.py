"""Writing new keys and values into a KV cache: ``kv_cache_update`` scatters token ``i``'s
``k[i]``/``v[i]`` to the cache slot ``slots[i]`` through an indexed partition (a safe scatter:
every launch proves the slots distinct and inside the cache before any program writes, and
otherwise writes nothing and raises ``PositionsError``).

Two cache layouts, keys and values in two tensors of one shape; a slot is always a token row
``b * max_len + p`` (sequence ``b``, position ``p``):

- ``"hnd"`` (the default; what ``decode_attention`` reads): ``(batch, kv_heads, max_len,
  head_dim)``, each head's keys of a sequence contiguous. A token's heads are ``kv_heads``
  rows ``max_len * head_dim`` apart: one program writes them as one ``(1, kv_heads,
  head_dim)`` tile of a ``(batch, kv_heads, max_len * head_dim)`` view, at tile coordinates
  ``(b, 0, p)`` that a tiny kernel computes from the slots first (two launches).
  ``head_dim`` must be a power of two.
- ``"nhd"``: ``(num_slots, kv_heads, head_dim)``, one contiguous ``kv_heads * head_dim`` row
  per slot, or paged ``(num_blocks, block_size, kv_heads, head_dim)`` (slot ``blk *
  block_size + j``). When a row is a power of two (8 x 128) the cache is viewed flat and the
  slot is the tile coordinate itself (one launch); otherwise the row is one padded ``(1,
  2**m)`` tile of a ``(num_slots, row)`` view at coordinates ``(slot, 0)`` (two launches).

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's helpers.
"""

from __future__ import annotations

from typing import Any, Optional

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..host.tensor import Tensor, borrow_mut
from ..kernel import kernel
from . import _token_args as args
from ._outputs import Output, check_disjoint
from ._torch import accepts_torch

CACHE_DTYPES = ("float16", "bfloat16", "float32")
LAYOUTS = ("hnd", "nhd")


@kernel
def kv_write_rows(cache_k: tc.MutTensor["T", ("W",)], cache_v: tc.MutTensor["T", ("W",)],
                  k: tc.Tensor["T", (-1,)], v: tc.Tensor["T", (-1,)]):
    """Program i writes token i's key and value row (W elements) into its slot's row."""
    i, _, _ = tc.get_tile_block_id()
    cache_k.store(k.partition((W,)).load(i))
    cache_v.store(v.partition((W,)).load(i))


@kernel
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


@kernel
def kv_write_heads(cache_k: tc.MutTensor["T", (1, "KHP", "D")],
                   cache_v: tc.MutTensor["T", (1, "KHP", "D")],
                   k: tc.Tensor["T", (-1, -1, "D")], v: tc.Tensor["T", (-1, -1, "D")]):
    """Program i writes token i's kv_heads key and value rows into its position's rows of
    the head-major cache (viewed (batch, kv_heads, max_len * D))."""
    i, _, _ = tc.get_tile_block_id()
    cache_k.store(k.partition((1, KHP, D)).load((i, 0, 0)))
    cache_v.store(v.partition((1, KHP, D)).load((i, 0, 0)))


@kernel
def head_major_coordinates(out: tc.MutTensor["S", ("N", 4)], slots: tc.Tensor["S", (-1,)],
                           max_len: int):
    """``out[i, :3] = (slot // max_len, 0, slot % max_len)``: the tile coordinates of slot
    ``i`` in a (batch, kv_heads, max_len * D) view tiled (1, kv_heads, D)."""
    i, _, _ = tc.get_tile_block_id()
    s = slots.partition((N,)).load(i, padding=0).reshape((N, 1))
    zero = tc.zeros((N, 1), s.dtype)
    out.store(tc.cat((s // max_len, zero, s % max_len, zero), axis=1))


@autotune(configs=[{}], key=lambda cache_k, cache_v, k, v, slots, head_major, workspace, reuse: (
              cache_k.shape[-1] * cache_k.shape[-2], cache_k.dtype.name, head_major),
          kernels=(kv_write_rows, kv_write_padded_rows, slot_coordinates, kv_write_heads,
                   head_major_coordinates),
          mutates=("cache_k", "cache_v"))
def _launch(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor, slots: Tensor,
            head_major: bool, workspace: Optional[Tensor], reuse: bool, *,
            config: dict) -> DeviceOp:
    tokens, heads, d = k.shape
    n = min(1024, args.pow2(tokens))
    done = lambda r: (cache_k, cache_v)  # noqa: E731 (the caller's tensors, whatever shape)
    if head_major:
        batch, _, max_len, _ = cache_k.shape
        view = (batch, heads, max_len * d)
        tile = (1, args.pow2(heads), d)
        # (the 4th column of the tile is padding, never written)
        coordinates = _coordinates(workspace, tokens, 3, slots)

        def write_heads(at: Tensor) -> DeviceOp:
            return kv_write_heads(borrow_mut(cache_k.reshape(*view)).partition(tile, at=at),
                                  borrow_mut(cache_v.reshape(*view)).partition(tile, at=at),
                                  k, v)
        if reuse:  # the workspace holds these slots' coordinates already
            return write_heads(workspace).then(done)
        return head_major_coordinates(coordinates.partition((n, 4)), slots, max_len).then(
            lambda r: write_heads(coordinates.tensor(r.out))).then(done)
    width = heads * d
    num_slots = cache_k.size // width
    done = lambda r: (cache_k, cache_v)  # noqa: E731 (the caller's tensors, whatever shape)
    if width == args.pow2(width):
        flat = (num_slots * width,)
        return kv_write_rows(borrow_mut(cache_k.reshape(*flat)).partition(width, at=slots),
                             borrow_mut(cache_v.reshape(*flat)).partition(width, at=slots),
                             k.reshape(tokens * width), v.reshape(tokens * width)).then(done)
    tile = (1, args.pow2(width))

    coordinates = _coordinates(workspace, tokens, 2, slots)

    def write(r: Any) -> DeviceOp:
        at = coordinates.tensor(r.out)
        return kv_write_padded_rows(
            borrow_mut(cache_k.reshape(num_slots, width)).partition(tile, at=at),
            borrow_mut(cache_v.reshape(num_slots, width)).partition(tile, at=at),
            k.reshape(tokens, width), v.reshape(tokens, width))
    return slot_coordinates(coordinates.partition((n, 2)), slots).then(write).then(done)


def _coordinates(workspace: Optional[Tensor], tokens: int, rank: int, slots: Tensor) -> Output:
    """The slots' tile coordinates: the caller's ``workspace``, or allocated as the library's
    outputs are (by torch when the call came with torch tensors)."""
    return Output(workspace, (tokens, rank), slots.dtype, slots.device, name="workspace",
                  op="kv_cache_update")


def checked_arguments(op: str, cache_k: Any, cache_v: Any, k: Any, v: Any, slots: Any,
                      layout: str) -> tuple:
    """``kv_cache_update``'s tensors checked (what its docstring says of each; ``k`` and ``v``
    may be strided, see :func:`contiguous`), each failure an ``ArgumentError`` naming ``op``:
    ``(cache_k, cache_v, k, v, slots, head_major)``."""
    if layout not in LAYOUTS:
        raise args.fail(op, f"layout={layout!r} is not one of {', '.join(map(repr, LAYOUTS))}",
                        "pass layout='hnd' (batch, kv_heads, max_len, head_dim) or "
                        "layout='nhd' (num_slots, kv_heads, head_dim)")
    cache_k = args.tensor(op, "cache_k", cache_k, CACHE_DTYPES, min_rank=3)
    cache_v = args.tensor(op, "cache_v", cache_v, CACHE_DTYPES, min_rank=3)
    k = args.tensor(op, "k", k, CACHE_DTYPES, rank=3)
    v = args.tensor(op, "v", v, CACHE_DTYPES, rank=3)
    slots = args.tensor(op, "slots", slots, args.INDEX_DTYPES, rank=1)
    args.same_device(op, [("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v),
                          ("slots", slots)])
    head_major = layout == "hnd"
    if head_major and cache_k.ndim != 4:
        raise args.fail(op, f"cache_k has shape {tuple(cache_k.shape)}; layout 'hnd' is "
                        "(batch, kv_heads, max_len, head_dim)",
                        "pass a 4-D cache, or layout='nhd' for (num_slots, kv_heads, head_dim)")
    if not head_major and cache_k.ndim > 4:
        raise args.fail(op, f"cache_k has shape {tuple(cache_k.shape)}; layout 'nhd' is "
                        "(num_slots, kv_heads, head_dim) or (num_blocks, block_size, kv_heads, "
                        "head_dim)", "reshape the cache to one of those layouts")
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
    row = (cache_k.shape[1], cache_k.shape[3]) if head_major else tuple(cache_k.shape[-2:])
    if tuple(k.shape[1:]) != row:
        raise args.fail(op, f"k has shape {tuple(k.shape)}; the cache holds rows of "
                        f"(kv_heads, head_dim) = {row}",
                        "pass k and v as (tokens, kv_heads, head_dim) of the cache's heads")
    if head_major and row[1] != args.pow2(row[1]):
        raise args.fail(op, f"head_dim={row[1]} is not a power of two (layout 'hnd' writes "
                        "each head's row as one tile)", "use layout='nhd' for this head size")
    if slots.shape[0] != k.shape[0]:
        raise args.fail(op, f"slots has {slots.shape[0]} entries for {k.shape[0]} tokens",
                        "pass one slot per token")
    for name, x in (("cache_k", cache_k), ("cache_v", cache_v), ("k", k), ("v", v)):
        args.nonempty(op, name, x)
    contiguous(op, (("cache_k", cache_k), ("cache_v", cache_v)))
    return cache_k, cache_v, k, v, slots, head_major


def contiguous(op: str, named: Any) -> None:
    """An ``ArgumentError`` naming ``op`` for the first of the ``(name, tensor)`` pairs that is
    not contiguous."""
    for name, x in named:
        if not x.is_contiguous:
            raise args.fail(op, f"{name} is not contiguous (strides {tuple(x.strides)})",
                            f"pass a contiguous {name} ({name}.clone())")


@accepts_torch
def kv_cache_update(cache_k: Tensor, cache_v: Tensor, k: Tensor, v: Tensor,
                    slots: Tensor, *, layout: str = "hnd",
                    workspace: Optional[Tensor] = None,
                    coordinates_in_workspace: bool = False) -> DeviceOp:
    """Write new keys and values into the cache slots ``slots``, in place: token ``i``'s
    ``k[i]``/``v[i]`` (its ``kv_heads`` rows) become the cache's rows of slot ``slots[i]``
    (``index_copy_`` on the token rows).

    Args:
        cache_k: the key cache, contiguous, float16/bfloat16/float32, in ``layout``:
            ``"hnd"``: ``(batch, kv_heads, max_len, head_dim)`` (``decode_attention``'s),
            slot ``b * max_len + p`` is sequence ``b``'s position ``p``, ``head_dim`` a power
            of two; ``"nhd"``: ``(num_slots, kv_heads, head_dim)``, or paged ``(num_blocks,
            block_size, kv_heads, head_dim)`` with slot ``blk * block_size + j``.
        cache_v: the value cache, same shape and dtype as ``cache_k`` (other memory).
        k: new keys, ``(tokens, kv_heads, head_dim)`` of the caches' dtype, contiguous.
        v: new values, same shape and dtype as ``k``.
        slots: the slot of each token, ``(tokens,)`` int32 or int64, on the device (a CUDA
            graph replay reads the slots of the moment).
        layout: ``"hnd"`` (head-major, the default) or ``"nhd"`` (token-major), as above.
        workspace: where the slots' tile coordinates are written when the layout needs
            them (``"hnd"``: ``(tokens, 3)``; ``"nhd"`` rows that are not a power of two:
            ``(tokens, 2)``; the slots' dtype and device); allocated per call when left out.
            A call that allocates cannot be recorded into a tilesafe CUDA graph: give a
            workspace to record one.
        coordinates_in_workspace: ``True`` when ``workspace`` already holds the
            coordinates of these ``slots`` for a cache of this shape, written by an earlier
            update on the same stream (the previous layer's, in a decode step that writes
            every layer's cache at the same slots): the launch that computes them is
            skipped. The write still proves them distinct and inside the cache before
            anything is written, so stale coordinates write the wrong rows of this cache,
            never outside it. ``"hnd"`` layout only.

    Returns:
        A DeviceOp whose result is ``(cache_k, cache_v)``.

    Raises:
        ArgumentError: a dtype, rank, shape or device that does not fit (the message says
            which), a cache that is not contiguous, or a ``workspace`` of another shape,
            dtype or device.
        PositionsError: (when the op runs) two tokens with one slot, or a slot outside
            ``[0, num_slots)``; nothing is written then.
    """
    op = "kv_cache_update"
    cache_k, cache_v, k, v, slots, head_major = checked_arguments(op, cache_k, cache_v, k, v,
                                                                  slots, layout)
    contiguous(op, (("k", k), ("v", v)))
    if coordinates_in_workspace and (not head_major or workspace is None):
        raise args.fail(op, "coordinates_in_workspace=True needs layout='hnd' and the "
                        "workspace= an earlier update filled",
                        "pass the workspace of the earlier update at the same slots, or "
                        "leave coordinates_in_workspace=False")
    check_disjoint(op, {"cache_k": cache_k, "cache_v": cache_v, "workspace": workspace},
                   {"k": k, "v": v, "slots": slots})
    if workspace is not None:  # checked before anything is launched
        width = k.shape[1] * k.shape[2]
        if head_major or width != args.pow2(width):
            _coordinates(workspace, k.shape[0], 3 if head_major else 2, slots)
    return _launch(cache_k, cache_v, k, v, slots, head_major, workspace,
                   bool(coordinates_in_workspace))
