"""The NVIDIA Tile IR backend: writes kernels as Tile IR bytecode for ``tileiras``.

Three layers, each building on the ones before it and never on those after it:

* ``bytecode``: the standalone encoder of the Tile IR bytecode format (nothing of tilesafe);
* ``lower``: the lowering of tilesafe's typed IR to bytecode modules (the kernel ABI, the
  entry prelude and one lowering per op);
* the toolchain modules here: ``tileiras`` (the assembler), ``cache`` (cubins on disk),
  ``executable`` (loading and argument packing), ``facts`` (what the launcher knows about the
  arguments) and ``backend`` (the backend: its compile stages lower -> assemble -> load).
"""
