"""Loading kernels' modules (``driver.cuda.load_kernel``) without a GPU: cuda.core stands in
as a fake, so what is kept alive can be checked."""

from __future__ import annotations

import gc
import types
import weakref

import pytest

from tilesafe.driver import cuda


@pytest.fixture
def modules(monkeypatch):
    """A fake cuda.core whose modules are recorded as they are made; an empty registry."""
    made = []

    class Module:
        def __init__(self, cubin):
            self.cubin = cubin

        def get_kernel(self, name):
            return ("function", name)  # (holds no reference to its module)

    def from_cubin(cubin):
        made.append(Module(cubin))
        return made[-1]
    fake = types.SimpleNamespace(ObjectCode=types.SimpleNamespace(from_cubin=from_cubin))
    monkeypatch.setattr(cuda, "_core", lambda: fake)
    monkeypatch.setattr(cuda, "make_current", lambda index: None)
    monkeypatch.setattr(cuda, "_LOADED", {})
    return made


def test_a_loaded_module_stays_loaded_when_nothing_of_tilesafe_uses_it(modules):
    """A CUDA graph (a torch graph a library call was recorded into, say) may launch a kernel
    after every tilesafe object over its module is gone: ``load_kernel`` keeps each module it
    loads for the life of the process, so dropping the kernel never unloads the code."""
    kernel = cuda.load_kernel(b"cubin bytes", "k", 0)
    module = weakref.ref(modules.pop())
    del kernel
    gc.collect()
    assert module() is not None


def test_the_same_cubin_is_loaded_once_per_device_and_name(modules):
    """Loading a cubin again (a rebuilt kernel, a cleared cache) reuses the module: kept for
    good, modules must not pile up."""
    first = cuda.load_kernel(b"cubin A", "k", 0)
    assert cuda.load_kernel(b"cubin A", "k", 0) is first and len(modules) == 1
    cuda.load_kernel(b"cubin A", "k", 1)      # another device
    cuda.load_kernel(b"cubin A", "other", 0)  # another kernel of it
    cuda.load_kernel(b"cubin B", "k", 0)      # another cubin
    assert len(modules) == 4 and len(cuda._LOADED) == 4
