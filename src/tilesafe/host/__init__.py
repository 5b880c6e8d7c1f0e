"""Host values: tensors and their views, partitions and borrows, constructors, copies, and
DLPack interop, with the ownership rules that guard them.

Builds on the driver layer (memory, the ledger) and the DeviceOp machinery (constructors and
copies are DeviceOps); knows nothing of kernels or backends. Inside the package:
``partition``, ``copies`` and ``export`` come first and know tensors by their methods;
``tensor`` builds on them; ``factory`` and ``interop`` make tensors.
"""
