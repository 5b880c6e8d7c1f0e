"""The numpy interpreter backend: runs kernels exactly on the CPU, one tile program at a time.

It is the ``cpu`` device and the oracle of every test."""

from .executor import InterpretedKernel, compile_kernel

__all__ = ["InterpretedKernel", "compile_kernel"]
