"""The launch layer: a kernel launch's checks (``checks``: validation, aliasing, grids, loans,
the backend's view of the arguments), its DeviceOp and graph node (``op``), and the compiled
repeated-launch path (``hotpath``, ``_hotpath.c``).

Builds on every host layer below it (driver, DeviceOps, host values) and on the compiler's
signature and specialization and the backend interface.
"""
