"""The output tensors of the library's functions: validated when the caller gives one
(``out=``), else allocated (by tilesafe, or by torch when the call came with torch tensors), and
partitioned for the launch so that the launch writes it in place; and the check that a call's
written tensors share no memory with its others, made before a call of several launches
launches any.

May import the host layer and ``errors``."""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Optional, Sequence

from .._callsite import caller_location
from ..deviceops.deviceop import DeviceOp
from ..dtypes import DType
from ..errors import AliasingError, ArgumentError
from ..host.partition import Partition
from ..host.tensor import Tensor, borrow_mut

#: set while a call made with torch tensors runs: allocates an output as a torch tensor and
#: returns the tilesafe tensor over its memory (``torch_ops``)
ALLOCATOR: contextvars.ContextVar[Optional[Callable[[tuple, DType, Any], Tensor]]] = \
    contextvars.ContextVar("tilesafe_kernels_allocator", default=None)


class Output:
    """One output of a library call: the caller's ``out=`` tensor, checked against the
    ``shape``/``dtype``/``device`` the call produces, or a new tensor of them."""

    #: scratch memory the caller lends to the call (a float32 tensor), for the launches that
    #: need some besides this output (a split-K matmul's partial sums), so the call allocates
    #: nothing and can be recorded into a graph; None: allocated per call
    workspace: Optional[Tensor] = None
    #: for a product of 8-bit floats, whether its tensor-core paths accumulate fast (``tc.mma``'s
    #: ``fast_accumulation``; ``scaled_matmul``'s keyword)
    fast_accumulation: bool = False

    def __init__(self, out: Any, shape: Sequence[int], dtype: DType, device: Any, *,
                 name: str = "out", op: str = "kernel"):
        self.shape, self.dtype, self.device = tuple(int(s) for s in shape), dtype, device
        if out is None:
            allocate = ALLOCATOR.get()
            self.given = False
            self.value = allocate(self.shape, dtype, device) if allocate is not None else \
                _empty(self.shape, dtype, device)
        else:
            self.given = True
            _check_given(out, self.shape, dtype, device, name, op)
            self.value = out

    def partition(self, tile: Sequence[int], *, at: Any = None) -> Partition:
        """The partition a launch writes: in place (a borrow) for a tensor, a move for a lazy
        constructor's result."""
        if isinstance(self.value, Tensor):
            return borrow_mut(self.value).partition(tuple(tile), at=at)
        if at is not None:
            return self.value.partition(tuple(tile), at=at)
        return self.value.partition(tuple(tile))


    def tensor(self, handed_back: Partition) -> Tensor:
        """The output tensor, from the partition the launch handed back: the caller's (or the
        torch-allocated) tensor itself when it was written in place (its borrowed partition is
        spent once the launch completes), else the moved tensor, unpartitioned."""
        if isinstance(self.value, Tensor):
            return self.value
        return handed_back.unpartition()


def _empty(shape: tuple, dtype: DType, device: Any) -> DeviceOp:
    from ..host.factory import empty
    return empty(shape, dtype=dtype, device=device)


def _check_given(out: Any, shape: tuple, dtype: DType, device: Any, name: str, op: str) -> None:
    if not isinstance(out, Tensor):
        raise ArgumentError(f"{op}: {name}= must be a tilesafe tensor, got "
                            f"{type(out).__name__}", caller_location(),
                            hint=f"pass a tensor of shape {shape} and dtype {dtype.name}, "
                            "or leave it out to allocate one")
    if tuple(out.shape) != shape or out.dtype != dtype:
        raise ArgumentError(f"{op}: {name}= has shape {tuple(out.shape)} and dtype "
                            f"{out.dtype.name}; this call writes shape {shape}, dtype "
                            f"{dtype.name}", caller_location(),
                            hint=f"allocate {name} with that shape and dtype, or leave it out")
    if str(out.device) != str(device):
        raise ArgumentError(f"{op}: {name}= is on {out.device}, the inputs on {device}",
                            caller_location(), hint=f"allocate {name} on {device}")


def check_disjoint(op: str, written: dict, read: dict) -> None:
    """Refuse, before anything is launched, a call whose written memory (``out=``, a
    ``workspace=``: name -> tensor or None) shares a byte with another tensor of the call
    (``read`` too): a call of several launches would otherwise be refused only by the launch
    that takes both, after the launches before it had written (the overlap test is the
    launches' own, ``Tensor._overlaps``)."""
    given = {n: t for n, t in {**written, **read}.items() if isinstance(t, Tensor)}
    names = list(given)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if (a in written or b in written) and given[a]._overlaps(given[b]):
                raise AliasingError(f"{op}: {a} and {b} overlap in memory, and "
                                    f"{a if a in written else b} is written", caller_location(),
                                    hint="pass disjoint tensors (a workspace of its own, an "
                                    "out= that is no view of an input)")
