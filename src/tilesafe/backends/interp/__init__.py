"""The numpy interpreter backend: exact execution of verified kernel IR on the host
(``executor``), registered for the ``cpu`` device (``backend``)."""

from .backend import InterpreterBackend
from .executor import InterpretedKernel

__all__ = ["InterpreterBackend", "InterpretedKernel"]
