"""Build script for the compiled pieces, all optional (without a C compiler the install still
succeeds and their Python equivalents run):

* the native launcher (src/tilesafe/driver/_launcher.c, Python's stable ABI, no CUDA headers
  or libraries needed); without it launches go through cuda.bindings;
* the ownership ledger's lock (src/tilesafe/driver/_ledger.c, stable ABI); without it the
  ledger is a threading.RLock;
* the compiled repeated-launch path (src/tilesafe/launch/_hotpath.c, built for the installing
  interpreter); without it those methods stay Python (see launch/hotpath.py).

Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tilesafe.driver._launcher", ["src/tilesafe/driver/_launcher.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.driver._ledger", ["src/tilesafe/driver/_ledger.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.launch._hotpath", ["src/tilesafe/launch/_hotpath.c"],
                           optional=True)],
)
