"""Loading kernels' modules (``driver.cuda.load_kernel``) without a GPU: cuda.core stands in
as a fake, so what is kept alive can be checked."""

from __future__ import annotations


def test_a_loaded_module_stays_loaded_when_nothing_of_tilesafe_uses_it(monkeypatch):
    """A CUDA graph (a torch graph a library call was recorded into, say) may launch a kernel
    after every tilesafe object over its module is gone: ``load_kernel`` keeps each module it
    loads for the life of the process, so dropping the kernel never unloads the code."""
    import gc
    import types
    import weakref

    from tilesafe.driver import cuda

    class Module:
        def __init__(self, cubin):
            self.cubin = cubin

        def get_kernel(self, name):
            return ("function", name, self)[:2]  # (holds no reference to its module)

    made = []

    def from_cubin(cubin):
        made.append(Module(cubin))
        return made[-1]
    fake = types.SimpleNamespace(ObjectCode=types.SimpleNamespace(from_cubin=from_cubin))
    monkeypatch.setattr(cuda, "_core", lambda: fake)
    monkeypatch.setattr(cuda, "make_current", lambda index: None)
    monkeypatch.setattr(cuda, "_LOADED", [])
    kernel = cuda.load_kernel(b"cubin bytes", "k", 0)
    module = weakref.ref(made.pop())
    del kernel
    gc.collect()
    assert module() is not None and module() in cuda._LOADED
