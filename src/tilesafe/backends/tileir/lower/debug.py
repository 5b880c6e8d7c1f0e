"""Tile IR lowerings of the debugging and random-number ops (``compiler/ops/debug.py``,
``compiler/ops/random.py``): ``print``, ``assert`` and ``umulhi``.

* ``print`` is ``print_tko``, in the kernel's token chain: it takes the current token and
  makes the next, so a program's prints (and its mutable memory accesses) keep their program
  order. The format is rebuilt from the op's pieces: literal text with ``%`` doubled, and each
  conversion with the length modifier its value needs (``ll`` for 64-bit integers, ``h``/``hh``
  where written, none otherwise). Values reach ``printf`` as C's default promotions would: bools and integers
  narrower than 32 bits are widened to i32 with their own signedness, f16/bf16 to f32.
* ``assert`` is Tile IR's ``assert``; its message names the kernel (tileiras adds the failing
  tile block and element, and the source line when the kernel has debug info; without debug
  info the message carries the line itself).
* ``umulhi`` is ``mulhii`` (defined for unsigned integers, as the op is).

Importing it registers these lowerings (``context.lowers``). It imports the ``bytecode``
package, ``context``, ``arith`` and ``tilesafe.compiler``/``dtypes``, never the host layers,
``tilesafe.driver`` or the toolchain modules of ``backends.tileir``.
"""

from __future__ import annotations

from .... import dtypes as dt
from ....compiler.ir import Operation
from ....compiler.ops.debug import printf_length
from ....dtypes import DType
from ..bytecode import Value
from .arith import convert
from .context import HALF_FLOATS, LoweringContext, lowers

__all__: list[str] = []


def _printable(lw: LoweringContext, x: Value, dtype: DType) -> Value:
    """``x`` as printf receives it: bools and narrow integers as i32, halves as f32."""
    if dtype.is_bool:
        return convert(lw, x, dtype, dt.int32)
    if dtype.is_int and dtype.bits < 32:
        return convert(lw, x, dtype, dt.int32 if dtype.is_signed else dt.uint32)
    if dtype in HALF_FLOATS:
        return convert(lw, x, dtype, dt.float32)
    return x


def tileir_format(pieces, dtypes) -> str:
    """The ``print_tko`` format of a print op's pieces for values of ``dtypes``."""
    out: list[str] = []
    it = iter(dtypes)
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece.replace("%", "%%"))
            continue
        spec, length = piece
        out.append(spec.c_text(printf_length(length, next(it))))
    return "".join(out)


@lowers("print")
def lower_print(lw: LoweringContext, op: Operation) -> None:
    dtypes = [v.type.dtype for v in op.operands]
    args = [_printable(lw, x, d) for x, d in zip(lw.operands(op), dtypes)]
    fmt = tileir_format(op.attrs["format"].pieces, dtypes)
    lw.token = lw.fn.print_tko(fmt, args, token=lw.token)


@lowers("assert")
def lower_assert(lw: LoweringContext, op: Operation) -> None:
    (cond,) = lw.operands(op)
    # With debug info tileiras prefixes the source location and the failing tile block and
    # element itself; without it, the message carries the location.
    where = f"{op.location}: " if op.location and not lw.debug else ""
    lw.fn.assert_(cond, f"{where}kernel '{lw.kernel.name}': device assertion failed: "
                        f"{op.attrs['message']}")


@lowers("umulhi")
def lower_umulhi(lw: LoweringContext, op: Operation) -> None:
    a, b = lw.operands(op)
    lw.set_result(op, lw.fn.mulhii(a, b))
