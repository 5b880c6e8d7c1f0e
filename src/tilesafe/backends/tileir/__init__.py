"""The NVIDIA Tile IR backend: writes kernels as Tile IR bytecode for ``tileiras``."""
