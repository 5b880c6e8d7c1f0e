"""Embedding lookup: ``embedding(ids, table)`` gathers rows of a (vocab, hidden) table.

Each program copies ``rows`` ids' rows, ``cols`` columns at a time, with one ``tc.gather``
(a checked read: an id outside the table raises ``IndexOutOfRangeError``, on a GPU when the
stream is synchronized).

The column tile is a power of two dividing the hidden size wherever one of at least
:data:`MIN_WHOLE_COLUMNS` does (``WHOLE``): the columns are then consecutive, and sm_90 code
reads each lane's 16 bytes at once (``LDG.E.128``). Otherwise the columns past the table are
clamped to its last one (their stores are masked), and the clamp leaves tileiras unable to see
consecutive columns: the gather reads element by element (``LDG.E.U16`` for 16-bit tables).

May import the host layer, ``kernel``, ``autotune``, ``core`` and the library's helpers.
"""

from __future__ import annotations

from typing import Optional

from .. import core as tc
from ..autotune import autotune
from ..deviceops.deviceop import DeviceOp
from ..host.tensor import Tensor
from ..kernel import kernel
from . import _token_args as args
from ._token_args import MEMORY_BOUND_HINTS
from ._outputs import Output
from ._torch import accepts_torch

TABLE_DTYPES = ("float16", "bfloat16", "float32")
#: the narrowest column tile chosen for dividing the hidden size (narrower ones give way to
#: the clamped form with the config's width)
MIN_WHOLE_COLUMNS = 64


@kernel(hints=MEMORY_BOUND_HINTS)
def embedding_rows(out: tc.MutTensor["T", ("TT", "TD")], table: tc.Tensor["T", (-1, -1)],
                   ids: tc.Tensor["I", (-1,)], WHOLE: tc.Const[bool]):
    """Copy the table rows of TT ids, TD columns of them (see ``embedding``); ``WHOLE``: TD
    divides the table's width, so no column lies past it."""
    i, j, _ = tc.get_tile_block_id()
    rows = ids.partition((TT,)).load(i, padding=0)
    cols = j * TD + tc.arange(TD, tc.i32)
    if not WHOLE:
        cols = tc.minimum(cols, table.shape[1] - 1)
    out.store(tc.gather(table, rows.reshape((TT, 1)), cols.reshape((1, TD))))


def column_tile(widest: int, hidden: int) -> tuple[int, bool]:
    """The column tile for a config's ``widest`` and a table ``hidden`` wide, and whether it
    divides ``hidden`` (module docstring): ``widest`` (capped at ``hidden`` rounded up to a
    power of two), halved while it does not divide ``hidden`` and stays above
    :data:`MIN_WHOLE_COLUMNS`; where no such tile divides, the capped ``widest``."""
    cols = min(widest, args.pow2(hidden))
    whole = cols
    while hidden % whole and whole > MIN_WHOLE_COLUMNS:
        whole //= 2
    return (whole, True) if hidden % whole == 0 else (cols, False)


@autotune(configs=[{"rows": 4, "cols": 1024}, {"rows": 1, "cols": 8192},
                   {"rows": 8, "cols": 512}, {"rows": 16, "cols": 256}],
          key=lambda ids, table, out: (args.pow2(ids.shape[0]), table.shape[1],
                                       table.dtype.name),
          kernels=(embedding_rows, column_tile), mutates=("out",))
def _launch(ids: Tensor, table: Tensor, out: Output, *, config: dict) -> DeviceOp:
    rows = min(config["rows"], args.pow2(ids.shape[0]))
    cols, whole = column_tile(config["cols"], table.shape[1])
    return embedding_rows(out.partition((rows, cols)), table, ids, WHOLE=whole)


@accepts_torch
def embedding(ids: Tensor, table: Tensor, *, out: Optional[Tensor] = None) -> DeviceOp:
    """Look up token embeddings: ``out[..., :] = table[ids[...], :]`` (``F.embedding``).

    Args:
        ids: token ids, int32 or int64, any shape (flattened for the lookup); on the device,
            so a CUDA graph replay reads the ids of the moment.
        table: the embedding table, ``(vocab, hidden)``, float16/bfloat16/float32.
        out: where to write, ``(*ids.shape, hidden)`` of ``table``'s dtype (default: a new
            tensor).

    Returns:
        A DeviceOp whose result is the ``(*ids.shape, hidden)`` embeddings.

    Raises:
        ArgumentError: a dtype, rank or device that does not fit, an empty ``ids`` or table,
            or an ``out`` of another shape, dtype or device.
        IndexOutOfRangeError: (when the op runs) an id outside ``[0, vocab)``.
    """
    op = "embedding"
    ids = args.tensor(op, "ids", ids, args.INDEX_DTYPES, min_rank=0)
    table = args.tensor(op, "table", table, TABLE_DTYPES, rank=2)
    device = args.same_device(op, [("ids", ids), ("table", table)])
    args.nonempty(op, "ids", ids)
    args.nonempty(op, "table", table)
    shape = tuple(ids.shape) + (table.shape[1],)
    flat_ids = _flat_view(op, "ids", ids, (ids.size,))
    if out is None:
        result = Output(None, (ids.size, table.shape[1]), table.dtype, device, op=op)
    else:
        result = Output(out, shape, table.dtype, device, name="out", op=op)
        result.value = _flat_view(op, "out", out, (ids.size, table.shape[1]))
    return _launch(flat_ids, table, result).then(
        lambda r: result.tensor(r.out).reshape(*shape))


def _flat_view(op: str, name: str, x: Tensor, shape: tuple) -> Tensor:
    try:
        return x.reshape(*shape)
    except ValueError:
        raise args.fail(op, f"{name} (shape {tuple(x.shape)}, strides {tuple(x.strides)}) "
                        f"cannot be viewed as {shape}", f"pass a contiguous {name} "
                        f"({name}.clone())") from None
