"""Build script for the one compiled piece, the optional native launcher
(src/tilesafe/runtime/_launcher.c, Python's stable ABI, no CUDA headers or libraries needed).
It is optional: without a C compiler the install still succeeds and launches go through
cuda.bindings. Everything else about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[Extension("tilesafe.runtime._launcher", ["src/tilesafe/runtime/_launcher.c"],
                           py_limited_api=True, optional=True)],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
