"""Shared test helpers: a seeded RNG, poisoned outputs (NaN or a sentinel, so an element a
kernel fails to write is caught), the line of a ``# <- tag`` marker in a test file, integer
wrap-around, and ``launch_path`` (which launch path the process runs: compiled or Python)."""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import tilesafe as ts


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def poisoned(shape, dtype=ts.float32):
    """A tensor filled with a value no kernel in the tests produces (NaN, or -123 for ints)."""
    dtype = ts.dtypes.as_dtype(dtype)
    value = float("nan") if dtype.is_float else (True if dtype.is_bool else -123
                                                 if dtype.is_signed else 123)
    return ts.full(shape, value, dtype).sync()


@functools.lru_cache(maxsize=None)
def _lines(path: str) -> tuple[str, ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(f.read().splitlines())


def marker_line(path: str, tag: str) -> int:
    """The 1-based line of file ``path`` that carries the marker ``# <- tag`` (exactly one)."""
    pattern = re.compile(rf"# <- {re.escape(tag)}(\s|$)")
    hits = [i + 1 for i, line in enumerate(_lines(path)) if pattern.search(line)]
    assert len(hits) == 1, f"marker {tag!r} found {len(hits)} times"
    return hits[0]


def wrap(v: int, dtype) -> int:
    """A Python int wrapped modulo 2**bits into ``dtype``'s range."""
    m = 1 << dtype.bits
    v %= m
    if dtype.is_signed and v >= m >> 1:
        v -= m
    return v


@pytest.fixture
def launch_path():
    """Which launch path this process runs: ``"compiled"`` (the fast path's C types are the
    bases of the launch path's objects) or ``"python"`` (their Python definitions:
    ``TILESAFE_COMPILED_PATH=0``, or the fast path was not built). The modules that use it
    also run in a second process on the Python path (``test_compiled_path.py``)."""
    from tilesafe import _compiled
    return "compiled" if _compiled.FASTPATH is not None else "python"


#: ``id(kernel IR) -> (that IR, {launch facts})``: the alignment facts a GPU launch would have compiled
#: each interpreter launch of the suite with (``backends/tileir/facts.py``), recorded so that
#: ``tests/tileir/test_zz_compile_suite.py`` compiles those variants too (TMA and wide accesses
#: are chosen from them), not only the variant that assumes nothing
GPU_FACTS_SEEN: dict = {}


def _record_gpu_facts() -> None:
    """Make the interpreter backend note, for each launch, the facts the GPU backend would
    derive from the same arguments (the interpreter itself still assumes nothing)."""
    from tilesafe.backends.interp.backend import InterpreterBackend
    from tilesafe.backends.tileir.facts import launch_facts
    plain = InterpreterBackend.launch_facts

    def noting(self, ir, args):
        try:
            # (the IR is kept with its facts, so that its id is never reused by another)
            GPU_FACTS_SEEN.setdefault(id(ir), (ir, set()))[1].add(launch_facts(ir, args))
        except Exception:  # (a launch the GPU backend would describe otherwise: not noted)
            pass
        return plain(self, ir, args)
    InterpreterBackend.launch_facts = noting


def pytest_configure(config):
    _record_gpu_facts()
    config.addinivalue_line("markers", "interpreter_only(reason): checks a property only the "
                            "cpu interpreter has (its out-of-bounds diagnostics, correctly "
                            "rounded transcendentals, cpu memory); skipped when the suite runs "
                            "on a GPU (TILESAFE_DEVICE=cuda:0)")


def pytest_collection_modifyitems(config, items):
    """tests/gpu runs only where a CUDA device and tileiras are usable; interpreter_only tests
    run only when the default device is the cpu."""
    from tilesafe.driver.device import default_device, probe_gpu
    probe = probe_gpu()
    gpu_usable = probe.available and probe.compiles
    on_gpu = default_device().kind != "cpu"
    for item in items:
        if not gpu_usable and "/tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.skip(reason=f"no usable GPU: {probe.reason}"))
        marker = item.get_closest_marker("interpreter_only")
        if marker is not None and on_gpu:
            why = marker.args[0] if marker.args else "interpreter semantics"
            item.add_marker(pytest.mark.skip(reason=f"interpreter only: {why}"))


@pytest.fixture
def run_ranks():
    """``run(target, args, ranks, timeout)``: ``target(rank, *args, queue)`` in one spawned
    process per rank (torch.multiprocessing; the processes of a torch.distributed test);
    returns what they put in ``queue`` and their exit codes, once each has exited (or been
    killed after ``timeout`` seconds)."""
    def run(target, args, ranks, timeout=300):
        mp = pytest.importorskip("torch.multiprocessing")
        context = mp.get_context("spawn")
        queue = context.SimpleQueue()
        procs = [context.Process(target=target, args=(rank, *args, queue))
                 for rank in range(ranks)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
        items = []
        while not queue.empty():
            items.append(queue.get())
        return items, [p.exitcode for p in procs]
    return run
