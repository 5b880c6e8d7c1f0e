"""The driver layer: devices, what each kind does with memory and streams (platforms), the CUDA
calls, streams and events, and the ownership ledger (allocations and loans).

The bottom of the host side: it imports nothing of tilesafe above it (only ``errors``,
``shapes``, ``_callsite``, ``_compiled``). The compiled modules ``_launcher.c`` (the driver
calls of the launch path) and ``_ledger.c`` (the ledger's lock) live here.
"""
