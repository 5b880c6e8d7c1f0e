"""The compiled launcher (runtime/_launcher.c) without a GPU: it is bound to stand-in driver
functions made with ctypes, which record what they receive, so these tests check that every
argument reaches the driver unchanged, that a programmatic launch hands the driver a
CUlaunchConfig laid out as cuda.h declares it, and that misuse is refused with a clear error.
Each scenario runs in its own interpreter: binding stand-ins is process-wide."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

BUILT = importlib.util.find_spec("tilesafe.driver._launcher") is not None


def _can_build_extensions() -> bool:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    return shutil.which(cc) is not None and os.path.exists(headers)


def test_the_launcher_is_built_wherever_a_c_compiler_is():
    if not _can_build_extensions():
        pytest.skip("no C compiler or Python headers: launches go through cuda.bindings")
    assert BUILT, ("a C compiler is present but tilesafe.driver._launcher was not built: "
                   "reinstall with pip install -e . and read the build output")


needs_launcher = pytest.mark.skipif(not BUILT, reason="the compiled launcher was not built")

STAND_INS = textwrap.dedent("""
    import ctypes
    from tilesafe.driver import _launcher

    class Attribute(ctypes.Structure):
        _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4),
                    ("allowed", ctypes.c_int), ("rest", ctypes.c_char * 60)]

    class Config(ctypes.Structure):
        _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                    ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                    ("attrs", ctypes.POINTER(Attribute)), ("count", ctypes.c_uint)]

    seen = []
    P = ctypes.c_void_p
    LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, P, *[ctypes.c_uint] * 7, P, P, P)
    LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Config), P, P, P)
    SYNC = ctypes.CFUNCTYPE(ctypes.c_int, P)
    GRAPH = ctypes.CFUNCTYPE(ctypes.c_int, P, P)
    QUERY = ctypes.CFUNCTYPE(ctypes.c_int, P)

    @LAUNCH
    def launch(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        seen.append(("launch", f, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra))
        return 0

    @LAUNCH_EX
    def launch_ex(config, f, params, extra):
        c = config.contents
        a = c.attrs[0]
        seen.append(("launch_ex", f, tuple(c.grid), tuple(c.block), c.shared, c.stream,
                     params, extra, c.count, a.id, a.allowed))
        return 0

    @SYNC
    def sync(stream):
        seen.append(("sync", stream))
        return 700  # CUDA_ERROR_ILLEGAL_ADDRESS: handed back as is

    @GRAPH
    def graph(graph_exec, stream):
        seen.append(("graph", graph_exec, stream))
        return 0

    query_states = []  # what the next queries return (then CUDA_ERROR_NOT_READY)

    @QUERY
    def query(stream):
        seen.append(("query", stream))
        return query_states.pop(0) if query_states else 600  # CUDA_ERROR_NOT_READY

    address = lambda f: ctypes.cast(f, ctypes.c_void_p).value
    ALL = (address(launch), address(launch_ex), address(sync), address(graph), address(query))
""")


def _run(body: str) -> str:
    script = STAND_INS + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_launcher
def test_arguments_reach_the_driver_unchanged():
    out = _run("""
        _launcher.bind(*ALL)
        big = (1 << 64) - 8  # addresses use all 64 bits
        assert _launcher.launch(0x1234, 7, 2, 1, big, 0x5678, False) == 0
        assert _launcher.launch(0x1234, 4096, 1, 3, 0x99, 0x5678, True) == 0
        assert _launcher.synchronize(0x99) == 700
        assert _launcher.launch_graph(0xabc, 0x99) == 0
        assert _launcher.query(0x99) == 600
        for entry in seen:
            print(entry)
    """)
    lines = out.splitlines()
    assert lines[0] == (f"('launch', 4660, (7, 2, 1), (1, 1, 1), 0, {(1 << 64) - 8}, 22136, "
                        "None)")
    # the programmatic-serialization attribute (id 6) allowed, in a 1-entry attribute list
    assert lines[1] == "('launch_ex', 4660, (4096, 1, 3), (1, 1, 1), 0, 153, 22136, None, 1, 6, 1)"
    # a stream still busy after the polling is waited for in the driver
    polls = lines.index("('sync', 153)") - 2
    assert polls >= 1 and lines[2:2 + polls] == ["('query', 153)"] * polls
    assert lines[3 + polls:] == ["('graph', 2748, 153)", "('query', 153)"]


@needs_launcher
def test_a_synchronize_that_sees_the_stream_idle_or_failed_returns_without_blocking():
    out = _run("""
        _launcher.bind(*ALL)
        query_states[:] = [600, 600, 0]  # busy twice, then complete
        assert _launcher.synchronize(0x99) == 0
        query_states[:] = [700]  # an earlier kernel faulted: the wait would report it too
        assert _launcher.synchronize(0x99) == 700
        for entry in seen:
            print(entry)
    """)
    assert out.splitlines() == ["('query', 153)"] * 4  # never the blocking wait


@needs_launcher
def test_polling_can_be_turned_off():
    out = _run("""
        _launcher.bind(*ALL)
        assert _launcher.poll(0) == 20000
        assert _launcher.synchronize(0x99) == 700
        assert _launcher.poll(20000) == 0
        for entry in seen:
            print(entry)
    """)
    assert out.splitlines() == ["('sync', 153)"]  # straight to the blocking wait


@needs_launcher
def test_calls_before_bind_are_refused():
    _run("""
        for call in (lambda: _launcher.launch(1, 1, 1, 1, 1, 1, False),
                     lambda: _launcher.synchronize(1), lambda: _launcher.launch_graph(1, 1),
                     lambda: _launcher.query(1)):
            try:
                call()
            except RuntimeError as e:
                assert "bind() the driver entry points first" in str(e), e
            else:
                raise AssertionError("an unbound launcher called the driver")
        assert not seen
    """)


@needs_launcher
def test_bad_arguments_are_refused_before_the_driver_is_called():
    _run("""
        _launcher.bind(*ALL)
        bad = [((1, 1 << 32, 1, 1, 1, 1, False), OverflowError),  # grid beyond 32 bits
               ((1, -1, 1, 1, 1, 1, False), OverflowError),
               ((-1, 1, 1, 1, 1, 1, False), OverflowError),       # not an address
               ((1, 1, 1, 1, "stream", 1, False), TypeError),
               ((1, 1, 1, 1, 1, 1), TypeError)]                   # too few arguments
        for args, error in bad:
            try:
                _launcher.launch(*args)
            except error:
                pass
            else:
                raise AssertionError(f"launch{args} was not refused")
        for entries in (ALL[:4], ALL[:2] + (0,) + ALL[3:]):
            try:
                _launcher.bind(*entries)
            except (TypeError, ValueError):
                pass
            else:
                raise AssertionError(f"bind{entries} was not refused")
        assert not seen
    """)


def test_a_failed_driver_call_names_the_call_the_users_line_and_a_fix(monkeypatch):
    from tilesafe.driver import cuda
    # (set in the instance's dict: looking the attribute up would bind the real driver)
    monkeypatch.setitem(vars(cuda._DRIVER_CALLS), "synchronize", lambda stream: 700)
    with pytest.raises(cuda.CudaError) as failure:
        cuda.synchronize(0x99)  # the line the error must point at
    message = str(failure.value)
    assert f"test_native_launcher.py:{failure.tb.tb_lineno}:" in message
    assert "cuStreamSynchronize failed:" in message
    assert "700" in message or "ILLEGAL_ADDRESS" in message
    assert "fix:" in message and "'cpu' device" in message


def test_only_the_driver_calls_bind_the_driver_on_first_use():
    from tilesafe.driver import cuda
    with pytest.raises(AttributeError):
        cuda._DRIVER_CALLS.launch_kernel  # not a launch-path call: no binding is attempted
