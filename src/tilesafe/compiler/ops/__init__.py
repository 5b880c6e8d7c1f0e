"""The tile language's op declarations, one module per family; importing this package fills
the registry (``compiler.registry``)."""

from . import elementwise, shape, reduce, matmul, memory, mapped, control  # noqa: F401
from . import indexed, debug, random, atomic  # noqa: F401
