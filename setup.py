"""Build script for the compiled pieces, all optional (without a C compiler the install still
succeeds and their Python equivalents run):

* the native launcher (src/tilesafe/runtime/_launcher.c, Python's stable ABI, no CUDA headers
  or libraries needed); without it launches go through cuda.bindings;
* the ownership ledger's lock (src/tilesafe/runtime/_ledger.c, stable ABI); without it the
  ledger is a threading.RLock;
* the compiled repeated-launch path (src/tilesafe/exec/_hotpath.c, built for the installing
  interpreter); without it those methods stay Python (see exec/hotpath.py).

Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tilesafe.runtime._launcher", ["src/tilesafe/runtime/_launcher.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.runtime._ledger", ["src/tilesafe/runtime/_ledger.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.exec._hotpath", ["src/tilesafe/exec/_hotpath.c"],
                           optional=True)],
)
