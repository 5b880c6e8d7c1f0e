"""Build script for the compiled pieces, all optional (without a C compiler the install still
succeeds and their Python equivalents run):

* the native launcher (src/tilesafe/driver/_launcher.c, Python's stable ABI, no CUDA headers
  or libraries needed); without it launches go through cuda.bindings;
* the ownership ledger's lock (src/tilesafe/driver/_ledger.c, stable ABI); without it the
  ledger is a threading.RLock;
* the compiled fast path of a repeated launch (src/tilesafe/fastpath/*.c, built for the
  installing interpreter): the C types the objects of the launch path derive from; without it
  their Python definitions are the bases (see ARCHITECTURE.md, "The fast path").

Everything else about the package is in pyproject.toml."""

from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tilesafe.driver._launcher", ["src/tilesafe/driver/_launcher.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.driver._ledger", ["src/tilesafe/driver/_ledger.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe._fastpath", sorted(glob("src/tilesafe/fastpath/*.c")),
                           depends=["src/tilesafe/fastpath/fastpath.h"], optional=True)],
)
