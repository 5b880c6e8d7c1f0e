"""The compiled repeated-launch path: which methods run as C (``launch/_hotpath.c``).

A launch that repeats an earlier one with the very same argument objects (a cached launch
plan) needs no validation, only its loans. When the extension was built, these methods are its
C versions, which do that path without running Python bytecode and hand every other case to
the Python method they replace, before doing anything:

* ``Kernel.__call__`` (a launch op from a cached plan);
* ``LaunchOp._execute``, ``LaunchOp.sync`` and ``LaunchOp.__del__``;
* ``_Chain.then``, ``_Chain._perform`` and ``_Chain._enqueue_while_only_enqueueing``
  (extending a chain, running it, running it under ``await``);
* ``Stream.synchronize`` (waiting for a stream and ending the loans of its work);
* ``ReplayBorrows.lend`` (the loans of a graph replay whose arguments cannot have moved).

(``tilesafe._callsite.caller_location`` is the C version of its frame walk from import on.)

The Python code is the definition of what they do; the test suite runs on both paths.
:func:`use_compiled_path` switches (``TILESAFE_COMPILED_PATH=0`` in the environment keeps the
Python methods from the start).
"""

from __future__ import annotations

from typing import Any

from .. import _callsite, _compiled
from ..deviceops import deviceop, graph
from ..driver import cuda, stream
from ..driver import ledger as allocation
from ..host.partition import Partition
from ..host.tensor import Tensor
from ..kernel import Kernel
from . import checks as runtime_launch
from . import op as launch

_hotpath = _compiled.built("tilesafe.launch._hotpath")  # None: the Python methods stay

_PYTHON_METHODS: list[tuple[type, str, Any]] = [
    (Kernel, "__call__", Kernel.__dict__["__call__"]),
    (launch.LaunchOp, "_execute", deviceop.DeviceOp._execute),
    (launch.LaunchOp, "sync", launch.LaunchOp.__dict__["sync"]),
    (launch.LaunchOp, "__del__", launch.LaunchOp.__dict__["__del__"]),
    (deviceop._Chain, "then", deviceop._Chain.__dict__["then"]),
    (deviceop._Chain, "_perform", deviceop._Chain.__dict__["_perform"]),
    (deviceop._Chain, "_enqueue_while_only_enqueueing",
     deviceop._Chain.__dict__["_enqueue_while_only_enqueueing"]),
    (stream.Stream, "synchronize", stream.Stream.__dict__["synchronize"]),
    (graph.ReplayBorrows, "lend", graph.ReplayBorrows.__dict__["lend"]),
]
_state = {"in_use": False}


def _setup() -> None:
    ledger = allocation.LEDGER
    python = {(cls, name): method for cls, name, method in _PYTHON_METHODS}
    _hotpath.setup({
        "LaunchOp": launch.LaunchOp, "PreparedLaunch": runtime_launch.PreparedLaunch,
        "LaunchPlan": runtime_launch.LaunchPlan, "Loan": allocation.Loan,
        "Allocation": allocation.Allocation, "Chain": deviceop._Chain,
        "Stream": stream.Stream, "PackedLaunch": cuda.PackedLaunch, "Tensor": Tensor,
        "Partition": Partition, "DeviceOp": deviceop.DeviceOp,
        "ReplayBorrows": graph.ReplayBorrows,
        "epoch": allocation._EPOCH, "current": stream._CURRENT,
        "drive": deviceop._DRIVE, "thread": cuda._THREAD,
        "holders": runtime_launch._HOLDERS, "holder": runtime_launch._holder,
        "take_loans": allocation.take_loans,
        "fail": cuda._fail, "next_stream": stream.next_stream,
        "driver_calls": cuda._DRIVER_CALLS, "pool_cycles": stream._POOL._cycles,
        "slow_execute": python[launch.LaunchOp, "_execute"],
        "slow_perform": launch.LaunchOp._perform,
        "slow_sync": deviceop.DeviceOp.sync,  # what LaunchOp.sync hands the other cases to
        "slow_then": python[deviceop._Chain, "then"],
        "slow_chain_perform": python[deviceop._Chain, "_perform"],
        "slow_synchronize": python[stream.Stream, "synchronize"],
        "slow_replay_lend": python[graph.ReplayBorrows, "lend"],
        "slow_chain_enqueue_while": python[deviceop._Chain, "_enqueue_while_only_enqueueing"],
        "ChainRest": deviceop._ChainRest,
        "ledger": ledger, "ledger_functions": _ledger_functions(ledger),
        "context_switches": cuda._CONTEXT_SWITCHES,
    })


def _ledger_functions(ledger: Any) -> Any:
    """The C acquire and release of a ``driver._ledger.Ledger`` ledger (else None: the
    compiled path calls the lock's Python methods)."""
    compiled = _compiled.built("tilesafe.driver._ledger")
    return compiled.functions() if compiled and type(ledger) is compiled.Ledger else None


def compiled_path_built() -> bool:
    """Whether the extension was built (it needs a C compiler at install time)."""
    return _hotpath is not None


def use_compiled_path(enabled: bool = True) -> bool:
    """Run the repeated-launch path as C (``enabled``, when built) or as Python; returns
    whether the C methods are now in use."""
    enabled = bool(enabled) and _hotpath is not None
    if enabled and not _state["in_use"]:
        _callsite.share_caches(_hotpath)  # kernel_call walks to the caller in C
        _setup()
    for cls, name, python in _PYTHON_METHODS:
        setattr(cls, name, _hotpath.method(cls, name) if enabled else python)
    _state["in_use"] = enabled
    return enabled


def compiled_path_in_use() -> bool:
    """Whether the C methods are installed."""
    return _state["in_use"]


use_compiled_path(_compiled.wanted())
