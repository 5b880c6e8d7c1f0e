"""CUDA graphs: record device work once, replay it many times at a fraction of the launch cost.

::

    with ts.CudaGraph.scope(stream) as graph:     # record; nothing runs
        graph.record(add(z, x, y))
        graph.record(scale(w, z_view, 2.0))
    graph.launch().sync()                           # replay (any number of times)

Only *graph-safe* ops can be recorded: kernel launches and copies into existing tensors.
Allocating ops (``ts.zeros``, ``t.clone()``, ...) are rejected at record time, so a replay
never depends on an address that could change. Recording consumes the op: its arguments are
borrowed by each replay while it runs, not while the graph merely exists. ``graph.update(...)``
swaps in new arguments of the same kinds, dtypes and shapes. On the ``cpu`` device a graph is
the recorded list of nodes, replayed in order.

Graphs hold any graph-safe DeviceOp's nodes (:class:`GraphNode`: kernel launches, copies), so
this module knows DeviceOps and the driver, nothing of tensors or kernels: a node says what a
replay borrows.
"""

from __future__ import annotations

import threading
from typing import Any, Optional, Protocol, Sequence

from .._callsite import caller_location
from ..driver import cuda
from ..driver.ledger import _EPOCH, LEDGER, Loan, shared_or_new_loans
from ..driver.stream import Stream, next_stream
from ..errors import DeviceOpError, Location
from .deviceop import DeviceOp, claim


class GraphNode(Protocol):
    """A replayable unit of work (a kernel launch with fixed arguments, a copy).

    A node that can also be captured into one native graph launch has ``capture(builder)``,
    ``borrow_key`` (equal for nodes that borrow the same memory the same way), ``borrows()``
    (what a replay borrows: ``(item, action, loan book, lo, hi, mutable)``, ``item`` being
    the argument object checked for moves) and ``launch_counter`` (an object whose
    ``launch_count`` counts its replays, or None)."""

    label: str
    where: Location

    def replay(self, stream: Stream) -> None: ...

    # (optional) ``check_permitted(where)``: raise if a replay made at ``where`` may not launch
    # this node's work (an unsafe kernel outside ``with ts.unsafe():``); ``stage(stream)``,
    # ``run_staged(staged, stream)`` and ``unstage(staged)``: ``replay`` in two steps, the
    # checks (and loans) first, for a replay that checks every node before running any

    def compatible(self, other: "GraphNode") -> Optional[str]:
        """None if ``other`` can replace this node in an instantiated graph, else why not."""


class ReplayBorrows:
    """What every replay of a captured graph borrows, worked out once when the graph is
    captured: the argument objects to check for moves and spends (each with the action an
    error names), and each distinct byte range once, mutable if any node writes it. Views never
    change their footprint, so only the checks run per replay."""

    __slots__ = ("nodes", "usable", "borrows", "checked_epoch", "stream_loans")

    def __init__(self, nodes: Sequence[Any]):
        self.nodes = list(nodes)
        self.checked_epoch: Optional[int] = None  # the ownership epoch of the last checks
        self.stream_loans: tuple[Any, tuple] = (None, ())  # the last replay's stream, loans
        self._collect()

    def _collect(self) -> None:
        usable: dict[int, tuple[Any, str]] = {}
        wanted: dict[tuple[int, int, int], tuple[Any, int, int, bool]] = {}
        for node in self.nodes:
            for item, action, book, lo, hi, mutable in node.borrows():
                usable.setdefault(id(item), (item, action))
                prev = wanted.get((id(book), lo, hi))
                wanted[(id(book), lo, hi)] = (book, lo, hi,
                                              mutable or (prev[3] if prev else False))
        self.usable = list(usable.values())
        self.borrows = [(*byte_range, "replay the graph") for byte_range in wanted.values()]

    @property
    def ranges(self) -> list[tuple[Any, int, int, bool]]:
        """``(loan book, lo, hi, mutable)`` of each distinct byte range."""
        return [borrow[:4] for borrow in self.borrows]

    def lend(self, holder: str, where: Location, stream: Any) -> list[Loan]:
        """Check that the arguments are still usable (not moved, not borrowed by other pending
        work) and lend each distinct byte range once, for one replay on ``stream``. As with a
        repeated launch, the checks of moves are skipped while the ownership epoch is that of
        the last checks, and a replay shares the live loans of a previous replay on the same
        stream (``driver.ledger.shared_or_new_loans``)."""
        LEDGER.acquire()
        try:
            if self.checked_epoch != _EPOCH[0]:  # ownership changed: all checked afresh
                for item, action in self.usable:
                    item._check_usable(action)
                self._collect()  # (loan books may have joined since)
                self.stream_loans = (None, ())
                self.checked_epoch = _EPOCH[0]
            return shared_or_new_loans(self, self.borrows, holder, where, stream)
        finally:
            LEDGER.release()


class CudaGraph:
    """A recorded sequence of graph-safe device work; ``launch()`` replays it."""

    def __init__(self, stream: Optional[Stream] = None):
        self.stream = stream
        self.nodes: list[GraphNode] = []
        self._recording = False
        self._ready = False
        self._captured: Any = None
        self._captured_nodes: Optional[list] = None  # the nodes self._captured was made from
        self._all_capturable: Optional[bool] = None
        self._capture_lock = threading.Lock()

    @classmethod
    def scope(cls, stream: Optional[Stream] = None) -> "CudaGraph":
        """A graph to record into with ``with ... as graph: graph.record(op)``."""
        return cls(stream)

    @classmethod
    def capture(cls, op: DeviceOp, stream: Optional[Stream] = None) -> "CudaGraph":
        """A graph of the single op ``op`` (recorded, not run), replayed on ``stream`` or,
        by default, on the device's pool."""
        with cls.scope(stream) as graph:
            graph.record(op)
        return graph

    def __enter__(self) -> "CudaGraph":
        if self._ready or self._recording:
            raise DeviceOpError("a CudaGraph records once; make a new one with "
                                "ts.CudaGraph.scope(stream)")
        self._recording = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._recording = False
        self._ready = exc_type is None

    def record(self, op: DeviceOp) -> None:
        """Add ``op`` to the graph without running it (only inside the ``with`` block)."""
        where = caller_location()
        if not self._recording:
            raise DeviceOpError(f"{where}: record() is only allowed inside "
                                "'with ts.CudaGraph.scope(...) as graph:'")
        if not isinstance(op, DeviceOp):
            raise TypeError(f"record() takes a DeviceOp, got {type(op).__name__}")
        nodes = op.graph_nodes()
        if nodes is None:
            raise DeviceOpError(f"{where}: {op.label} cannot be recorded into a graph: it "
                                "allocates memory, takes arguments still to be produced, or "
                                "decides its next step only when it runs, so a replay could "
                                "depend on an address that changes\n  fix: create tensors "
                                "before the scope (call .sync() on constructor ops) and record "
                                "only kernel launches and copies into existing tensors")
        op._consume("recorded into a graph")
        self.nodes.extend(nodes)

    def compile(self) -> None:
        """Compile (or load from the disk cache) every recorded kernel launch now: recording
        runs and compiles nothing, so otherwise the first replay compiles them. Runs nothing."""
        if not self._ready:
            raise DeviceOpError(f"{caller_location()}: the graph is not complete; compile it "
                                "after its 'with' block")
        for node in self.nodes:
            build = getattr(node, "compile", None)
            if build is not None:
                build()

    def launch(self, stream: Optional[Stream] = None) -> DeviceOp[None]:
        """A DeviceOp that replays the whole graph once. ``.sync()`` and ``await`` run it on
        ``stream``, else on the stream the graph was recorded with, else on the device's pool;
        a drive that names a stream (``sync_on``, a step of a pipeline) runs it there."""
        if not self._ready:
            raise DeviceOpError(f"{caller_location()}: the graph is not complete; launch it "
                                "after its 'with' block")
        where = None
        for node in self.nodes:  # a replay launches every recorded kernel again
            check = getattr(node, "check_permitted", None)
            if check is not None:
                check(where := where or caller_location())
        return _GraphLaunch(self, stream)

    def _run_on(self, stream: Stream) -> None:
        """Replay every node on ``stream`` (one CUDA graph launch when all can be captured).

        Otherwise node by node, all or nothing: under the ledger's lock every node is checked
        (and a kernel launch lent its arguments) before the first one runs, so a refused node
        refuses the replay with nothing run, and no other thread's step lands between the
        checks and the work."""
        if stream._platform.captures_graphs and self._capturable():
            self._replay_captured(stream)
            return
        # one replay runs whole before another on the stream starts
        with stream.order_lock, LEDGER:
            staged: list = []
            try:
                for node in self.nodes:
                    stage = getattr(node, "stage", None)
                    staged.append(stage(stream) if stage is not None else None)
            except BaseException:
                for node, ready in zip(self.nodes, staged):
                    if ready is not None:
                        node.unstage(ready)
                raise
            for node, ready in zip(self.nodes, staged):
                if ready is None:
                    node.replay(stream)
                else:
                    node.run_staged(ready, stream)

    def _capturable(self) -> bool:
        """Whether every node can be captured into one CUDA graph (computed once per node
        list)."""
        if self._all_capturable is None:
            self._all_capturable = bool(self.nodes) and all(hasattr(n, "capture")
                                                            for n in self.nodes)
        return self._all_capturable

    def _replay_captured(self, stream: Stream) -> None:
        """Replay as one CUDA graph launch: the nodes are captured once (again after an
        ``update``, which then updates the executable graph in place); each replay checks and
        borrows every argument once, then launches the whole graph."""
        # One capture, whichever threads replay first; and the lock is held until the launch
        # is enqueued: an ``update`` replayed by another thread rewrites this executable graph
        # in place, so a replay that took the old borrows and records and launched after that
        # rewrite would run the new work holding loans on the old arguments only.
        with self._capture_lock:
            if self._captured_nodes is not self.nodes:
                self._capture(stream)
            _, graph_exec, borrows, per_kernel, holder, records = self._captured
            where = self._captured_nodes[0].where
            loans = borrows.lend(holder, where, stream)
            try:
                cuda.launch_graph(graph_exec, stream.native_address)
            finally:  # a failed launch's loans end at the drive's synchronize
                stream.on_complete(loans, records, where)
        for kernel, count in per_kernel.items():
            kernel.launch_count += count

    def _capture(self, stream: Stream) -> None:
        """Capture the nodes into one executable graph for ``stream``'s device (on a capture
        stream of its own, not on the stream the graph replays on). Everything is taken from
        one snapshot of the node list: an ``update`` on another thread may swap the list while
        a node compiles, and the graph, its borrows and its records must be of one list."""
        nodes = self.nodes
        builder = cuda.graph_builder(stream.device.index)
        for node in nodes:
            node.capture(builder)
        distinct = {}
        for n in nodes:  # one representative node per distinct set of borrows
            distinct.setdefault(n.borrow_key, n)
        per_kernel: dict = {}
        for n in nodes:
            if n.launch_counter is not None:
                per_kernel[n.launch_counter] = per_kernel.get(n.launch_counter, 0) + 1
        previous = self._captured[0] if self._captured is not None else None
        graph = cuda.finish_graph(builder, previous)  # kept: it frees the executable graph
        records = list({id(r): r for n in nodes
                        for r in (n.fault_records() if hasattr(n, "fault_records") else ())
                        }.values())  # each kernel's fault record, read at a replay's sync
        self._captured = (graph, int(graph.handle), ReplayBorrows(distinct.values()),
                          per_kernel, f"a replay of a graph of {len(nodes)} node(s)",
                          records)
        self._captured_nodes = nodes

    def replay(self) -> None:
        """Replay once and wait: ``graph.launch().sync()``."""
        self.launch().sync()

    def update(self, *ops: DeviceOp) -> "Optional[CudaGraph]":
        """Replace the recorded work by work of the same shape (same kernels, argument kinds,
        dtypes and shapes), e.g. to run the graph on new inputs.

        ``graph.update(op, ...)`` takes the new ops at once; ``with graph.update() as g:
        g.record(op)`` records them one by one (needed when they write the same tensor, since
        each launch borrows its output until it is recorded).
        """
        if not ops:
            return _Update(self)
        where = caller_location()
        nodes: list[GraphNode] = []
        for op in ops:
            part = op.graph_nodes() if isinstance(op, DeviceOp) else None
            if part is None:
                raise DeviceOpError(f"{where}: update() takes graph-safe DeviceOps")
            nodes.extend(part)
        self._check_replacement(nodes)
        for op in ops:  # each op is used up before the graph changes: a refused one leaves it
            try:
                op._consume("used to update a graph")
            except DeviceOpError as err:
                raise DeviceOpError(f"{where}: update() cannot take {op.label}, so the graph "
                                    f"keeps its recorded work: {err}") from None
        self._swap(nodes)
        return None

    def _swap(self, nodes: list) -> None:
        self._check_replacement(nodes)
        self._all_capturable = None  # the next replay captures the new work
        self.nodes = nodes

    def _check_replacement(self, nodes: list) -> None:
        """DeviceOpError unless ``nodes`` can replace the recorded ones one for one."""
        where = caller_location()
        if len(nodes) != len(self.nodes):
            raise DeviceOpError(f"{where}: update() needs {len(self.nodes)} node(s) like the "
                                f"recorded graph, got {len(nodes)}")
        for old, new in zip(self.nodes, nodes):
            why = old.compatible(new)
            if why:
                raise DeviceOpError(f"{where}: update() cannot replace {old.label}: {why}\n  "
                                    "fix: record a new graph for work of a different shape")

    def __repr__(self) -> str:
        state = "ready" if self._ready else "recording" if self._recording else "empty"
        return f"<CudaGraph {len(self.nodes)} node(s), {state}>"


class _GraphLaunch(DeviceOp[None]):
    """One replay of a graph (what ``CudaGraph.launch`` returns)."""

    __slots__ = ("_graph", "_stream")

    def __init__(self, graph: CudaGraph, stream: Optional[Stream]):
        self._run = self._label = self._driven_at = None
        self._graph, self._stream = graph, stream
        nodes = graph.nodes
        self.device = stream.device if stream else graph.stream.device if graph.stream else (
            nodes[0].device if nodes and hasattr(nodes[0], "device") else None)

    @property
    def label(self) -> str:
        return f"graph of {len(self._graph.nodes)} node(s)"

    def _default_stream(self) -> Stream:
        return self._stream or self._graph.stream or next_stream(self.device)

    def _perform(self, stream: Stream) -> None:
        self._graph._run_on(stream)

    def sync(self) -> None:
        """Replay and wait. The direct path of a replay: it runs no nested ops, so no pipeline
        state is needed."""
        stream = self._default_stream()
        # (the check and the mark in one step: of threads driving this op at once, one runs it)
        if claim(self, "driven", caller_location()) is not None:
            return self.sync_on(stream)  # raises the error of a second drive
        try:
            self._graph._run_on(stream)
        finally:
            stream.synchronize()
        return None


class _Update(CudaGraph):
    """Records replacement work for a graph (``with graph.update() as g:``)."""

    def __init__(self, target: CudaGraph):
        super().__init__(target.stream)
        self._target = target

    def __exit__(self, exc_type, exc, tb) -> None:
        super().__exit__(exc_type, exc, tb)
        if exc_type is None:
            self._target._swap(self.nodes)
