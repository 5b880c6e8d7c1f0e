"""Build script for the two compiled pieces, both optional (without a C compiler the install
still succeeds and their Python equivalents run):

* the native launcher (src/tilesafe/runtime/_launcher.c, Python's stable ABI, no CUDA headers
  or libraries needed); without it launches go through cuda.bindings;
* the compiled repeated-launch path (src/tilesafe/exec/_hotpath.c, built for the installing
  interpreter); without it those methods stay Python (see exec/hotpath.py).

Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tilesafe.runtime._launcher", ["src/tilesafe/runtime/_launcher.c"],
                           py_limited_api=True, optional=True),
                 Extension("tilesafe.exec._hotpath", ["src/tilesafe/exec/_hotpath.c"],
                           optional=True)],
)
