"""Every kernel the test suite compiled for the interpreter also compiles, through the real
tileiras, to an sm_90 cubin, for every specialization the tests used (but for the kernels
the backend refuses to compile because they hang on the GPU, which a test makes on purpose):
assuming nothing of the arguments, and with each set of launch facts (alignment classes,
which decide TMA and wide accesses) the suite's own arguments would have given a GPU launch
(``conftest.GPU_FACTS_SEEN``).

This module runs after the rest of the suite (pytest collects ``tests/tileir`` last), so
``live_kernels()`` holds the suite's kernels with the specializations they were compiled for.
A failure names the kernel, its specialization and tileiras' message (with the op's line)."""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from tilesafe.kernel import live_kernels

tileiras = pytest.importorskip("tilesafe.backends.tileir.tileiras")


def _tool_or_skip():
    try:
        return tileiras.find_tileiras()
    except Exception as err:  # not installed here: the rest of the suite still ran
        pytest.skip(f"tileiras not available: {err}")


def _refused(ir, hints) -> bool:
    """Whether the backend refuses the kernel before compiling (a kernel known to hang on the
    GPU, made on purpose by the test of that refusal)."""
    from tilesafe.backends.tileir.backend import refuse_hanging_kernel
    from tilesafe.errors import PartitionError
    try:
        refuse_hanging_kernel(ir, hints)
    except PartitionError:
        return True
    return False


def _facts_seen(seen: dict, ir) -> set:
    """The launch facts noted for this very IR object (``conftest.GPU_FACTS_SEEN``)."""
    entry = seen.get(id(ir))
    return entry[1] if entry is not None and entry[0] is ir else set()


def test_every_specialization_of_the_suite_compiles_for_sm_90(tmp_path, monkeypatch):
    _tool_or_skip()
    from tilesafe import backends, pipeline
    target = backends.by_name("tileir").ahead_of_time("sm_90")
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path))
    from conftest import GPU_FACTS_SEEN
    jobs = [(k, spec, ir, facts) for k in live_kernels()
            for spec, ir in list(k._ir_cache.items()) if not _refused(ir, k.hints)
            for facts in {(), *_facts_seen(GPU_FACTS_SEEN, ir)}]
    if not jobs:
        pytest.skip("no kernel was compiled before this test: it checks what the whole suite "
                    "compiled, so run it with the rest of the suite")

    def build(job):
        kernel, spec, ir, facts = job
        try:
            pipeline.compile(ir, target, hints=kernel.hints, facts=facts)
            return None
        except Exception as err:
            return f"{kernel.name} [{spec.describe()}] facts {facts}: {err}"

    workers = max(2, os.cpu_count() or 2)
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        failures = [f for f in pool.map(build, jobs) if f]
    print(f"compiled {len(jobs)} variants ({sum(1 for j in jobs if j[3])} with the launch "
          f"facts of the suite's arguments) of {len({id(j[0]) for j in jobs})} kernels")
    assert not failures, "\n\n".join(failures[:10])
