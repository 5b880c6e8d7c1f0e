"""The launch layer: a kernel launch's checks (``checks``: validation, aliasing, grids, loans,
the backend's view of the arguments) and its DeviceOp and graph node (``op``). The state of a
repeated launch (plans, prepared launches, launch ops) lives in types that the compiled fast
path (``tilesafe._fastpath``) defines in C where it was built.

Builds on every host layer below it (driver, DeviceOps, host values) and on the compiler's
signature and specialization and the backend interface.
"""
