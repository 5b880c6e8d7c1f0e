"""The opcode table: the number of each operation written to bytecode and the version adding it.

Also owns the list of bytecode versions this encoder can write and the version-gate check used
before any version-dependent field is written.

Part of the standalone ``bytecode`` package: it imports only its sibling modules and the
standard library, nothing else of tilesafe.
"""

from __future__ import annotations

from typing import Mapping

__all__ = ["Version", "SUPPORTED_VERSIONS", "OPCODES", "check_version", "opcode_for"]

Version = tuple[int, int]

#: Bytecode versions this encoder writes (tileiras 13.4 reads exactly these).
SUPPORTED_VERSIONS: tuple[Version, ...] = ((13, 1), (13, 2), (13, 3), (13, 4))

_V13_1: Version = (13, 1)
_V13_2: Version = (13, 2)
_V13_3: Version = (13, 3)
_V13_4: Version = (13, 4)

#: mnemonic -> (opcode, first bytecode version that has it)
OPCODES: Mapping[str, tuple[int, Version]] = {
    "absf": (0x00, _V13_1),
    "absi": (0x01, _V13_1),
    "addf": (0x02, _V13_1),
    "addi": (0x03, _V13_1),
    "andi": (0x04, _V13_1),
    "assert": (0x05, _V13_1),
    "assume": (0x06, _V13_1),
    "atomic_cas_tko": (0x07, _V13_1),
    "atomic_rmw_tko": (0x08, _V13_1),
    "bitcast": (0x09, _V13_1),
    "break": (0x0A, _V13_1),
    "broadcast": (0x0B, _V13_1),
    "cat": (0x0C, _V13_1),
    "ceil": (0x0D, _V13_1),
    "cmpf": (0x0E, _V13_1),
    "cmpi": (0x0F, _V13_1),
    "constant": (0x10, _V13_1),
    "continue": (0x11, _V13_1),
    "cos": (0x12, _V13_1),
    "cosh": (0x13, _V13_1),
    "divf": (0x14, _V13_1),
    "divi": (0x15, _V13_1),
    "exp": (0x17, _V13_1),
    "exp2": (0x18, _V13_1),
    "exti": (0x25, _V13_1),
    "extract": (0x26, _V13_1),
    "floor": (0x27, _V13_1),
    "fma": (0x28, _V13_1),
    "for": (0x29, _V13_1),
    "ftof": (0x2A, _V13_1),
    "ftoi": (0x2B, _V13_1),
    "get_global": (0x2C, _V13_1),
    "get_index_space_shape": (0x2D, _V13_1),
    "get_num_tile_blocks": (0x2E, _V13_1),
    "get_tensor_shape": (0x2F, _V13_1),
    "get_tile_block_id": (0x30, _V13_1),
    "if": (0x32, _V13_1),
    "int_to_ptr": (0x33, _V13_1),
    "iota": (0x3A, _V13_1),
    "itof": (0x3B, _V13_1),
    "join_tokens": (0x3C, _V13_1),
    "load_ptr_tko": (0x3D, _V13_1),
    "load_view_tko": (0x3E, _V13_1),
    "log": (0x3F, _V13_1),
    "log2": (0x40, _V13_1),
    "loop": (0x41, _V13_1),
    "make_partition_view": (0x42, _V13_1),
    "make_tensor_view": (0x43, _V13_1),
    "make_token": (0x44, _V13_1),
    "maxf": (0x45, _V13_1),
    "maxi": (0x46, _V13_1),
    "minf": (0x47, _V13_1),
    "mini": (0x48, _V13_1),
    "mmaf": (0x49, _V13_1),
    "mmai": (0x4A, _V13_1),
    "mulf": (0x4C, _V13_1),
    "mulhii": (0x4D, _V13_1),
    "muli": (0x4E, _V13_1),
    "negf": (0x4F, _V13_1),
    "negi": (0x50, _V13_1),
    "offset": (0x51, _V13_1),
    "ori": (0x52, _V13_1),
    "permute": (0x53, _V13_1),
    "fpowf": (0x54, _V13_1),
    "print_tko": (0x55, _V13_1),
    "ptr_to_int": (0x56, _V13_1),
    "ptr_to_ptr": (0x57, _V13_1),
    "reduce": (0x58, _V13_1),
    "remf": (0x59, _V13_1),
    "remi": (0x5A, _V13_1),
    "reshape": (0x5B, _V13_1),
    "return": (0x5C, _V13_1),
    "rsqrt": (0x5D, _V13_1),
    "scan": (0x5E, _V13_1),
    "select": (0x5F, _V13_1),
    "shli": (0x60, _V13_1),
    "shri": (0x61, _V13_1),
    "sin": (0x62, _V13_1),
    "sinh": (0x63, _V13_1),
    "sqrt": (0x64, _V13_1),
    "store_ptr_tko": (0x65, _V13_1),
    "store_view_tko": (0x66, _V13_1),
    "subf": (0x67, _V13_1),
    "subi": (0x68, _V13_1),
    "tan": (0x69, _V13_1),
    "tanh": (0x6A, _V13_1),
    "trunci": (0x6B, _V13_1),
    "xori": (0x6C, _V13_1),
    "yield": (0x6D, _V13_1),
    "atan2": (0x6E, _V13_2),
    "insert": (0x76, _V13_4),
    "gdc_launch_dependents_tko": (0x77, _V13_4),
    "gdc_wait_tko": (0x78, _V13_4),
    "fpowi": (0x79, _V13_4),
}


def check_version(version: Version, since: Version, what: str) -> None:
    """Raise ``ValueError`` unless ``version`` (the module's) is at least ``since``."""
    if version < since:
        raise ValueError(
            f"{what} requires Tile IR bytecode {since[0]}.{since[1]} or newer; "
            f"this module is written as {version[0]}.{version[1]}")


def opcode_for(mnemonic: str, version: Version) -> int:
    """The opcode of ``mnemonic``; ``ValueError`` if unknown or newer than ``version``."""
    try:
        code, since = OPCODES[mnemonic]
    except KeyError:
        raise ValueError(f"unknown Tile IR operation {mnemonic!r}") from None
    check_version(version, since, f"operation {mnemonic!r}")
    return code
