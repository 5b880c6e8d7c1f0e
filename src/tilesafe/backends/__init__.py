"""Backends: executors of the typed tile IR (``interp``: numpy, exact; ``tileir``: NVIDIA Tile IR
bytecode assembled by tileiras and launched on a GPU)."""
