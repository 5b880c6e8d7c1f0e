"""The lowering of tilesafe's typed IR (:class:`~tilesafe.compiler.ir.KernelIR`) to Tile IR
bytecode.

``kernel`` holds the entry point (:func:`lower_kernel`), the kernel ABI (:func:`abi_signature`),
the launcher's facts (:func:`normalize_facts`), the entry prelude and
:func:`waits_for_predecessor`; ``context`` the state shared by the per-op lowerings
(:class:`LoweringContext`); ``arith``, ``tile``, ``memory``, ``indexed``, ``positions``,
``atomic``, ``control`` and ``debug`` lower the ops, each registering its functions on the op's
registry declaration when imported (this
package imports all five).

It builds modules with the ``bytecode`` package and reads ``tilesafe.compiler``,
``tilesafe.dtypes`` and ``tilesafe.errors``; it must not import the host side
(``tilesafe.driver``, ``tilesafe.host``, ``tilesafe.launch``) nor the toolchain modules of
``backends.tileir`` (``tileiras``, ``cache``, ``backend``, ``executable``, ``facts``), which
build on it (``tests/tileir/test_tileir_layers.py`` checks this).
"""

from . import arith, atomic, control, debug, indexed, memory, tile  # noqa: F401 (lowerings)
from .context import LoweringContext, PartitionArg, TensorArg, lowers, scalar_type
from .kernel import (AbiArg, Facts, abi_signature, lower_kernel, normalize_facts,
                     validates_first, waits_for_predecessor)

__all__ = ["lower_kernel", "waits_for_predecessor", "abi_signature", "AbiArg", "normalize_facts",
           "validates_first", "Facts", "LoweringContext", "TensorArg", "PartitionArg", "lowers", "scalar_type"]
