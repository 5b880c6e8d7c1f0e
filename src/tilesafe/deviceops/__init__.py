"""DeviceOps: lazy device work, how it composes (``then``, ``zip``, ``shared``), how it is
driven (``sync``, ``await``) and recorded into replayable graphs.

Generic over what the work is: this package imports the driver layer and nothing about
tensors, partitions or kernels (those build on it).
"""
