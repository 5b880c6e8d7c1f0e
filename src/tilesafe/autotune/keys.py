"""The *full key* a tuning result is filed under, so that a result is never trusted across a
change that could change the winner: the tuned function's name, a hash of its source and of
the kernels it launches (each kernel's source, the device functions it calls, its hints and
flags), the toolchain (tilesafe's and tileiras' versions), the architecture (``sm_90``) and the
device's name, and the key values of the call.

A full key is a JSON-able dict; :func:`entry_id` is the SHA-256 of its canonical JSON text.
This module may import the compiler (device functions), the kernel layer and the Tile IR
toolchain's version; it reads no files but the sources of the functions it hashes.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from typing import Any, Callable, Iterable, Optional

from .._version import __version__
from ..compiler.source import DeviceFunction
from ..dtypes import DType
from ..kernel import Kernel

#: the parts of a full key, in the order they are shown
PARTS = ("function", "source", "toolchain", "arch", "device", "key")


def _source_text(fn: Callable) -> str:
    """The source of ``fn``, or its bytecode when the source cannot be read (a REPL)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        return code.co_code.hex() if code is not None else repr(fn)


def _called_device_functions(fn: Callable) -> Iterable[DeviceFunction]:
    """The ``@ts.function`` s that ``fn`` names as globals (their changes change the kernel)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
    scope = getattr(fn, "__globals__", {})
    return [scope[n] for n in sorted(names) if isinstance(scope.get(n), DeviceFunction)]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)


def kernel_fingerprint(kernel: Kernel) -> str:
    """Everything of ``kernel`` that changes its code: its source, that of the device
    functions it calls (transitively), its hints and its flags."""
    parts, seen = [_source_text(kernel.fn)], set()
    pending = list(_called_device_functions(kernel.fn))
    while pending:
        device_fn = pending.pop()
        if id(device_fn) in seen:
            continue
        seen.add(id(device_fn))
        parts.append(_source_text(device_fn.fn))
        pending.extend(_called_device_functions(device_fn.fn))
    parts.append(_canonical(kernel.hints))
    parts.append(f"unchecked_accesses={kernel.unchecked_accesses} const_grid={kernel.const_grid}")
    return "\n".join(parts)


def source_hash(fn: Callable, kernels: Iterable[Any]) -> str:
    """The SHA-256 of the tuned function's source and of each kernel's fingerprint."""
    h = hashlib.sha256()
    for part in [_source_text(fn)] + [kernel_fingerprint(k) if isinstance(k, Kernel)
                                      else _source_text(k) for k in kernels]:
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def toolchain() -> dict:
    """The versions a tuning result depends on: tilesafe's and tileiras' (``"none"`` when no
    tileiras is found)."""
    mine = __version__  # (the package's own: also without install metadata)
    try:
        from ..backends.tileir.tileiras import find_tileiras
        assembler = find_tileiras().version
    except Exception:  # TileirasNotFound, or a broken install: no GPU result can be made
        assembler = "none"
    return {"tilesafe": mine, "tileiras": assembler}


def key_value(value: Any) -> Any:
    """The JSON form of one key value: tuples and lists as lists, dtypes by name, numbers,
    strings, booleans and None as themselves; anything else is a ``TypeError``."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, DType):
        return value.name
    if isinstance(value, (tuple, list)):
        return [key_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): key_value(v) for k, v in value.items()}
    try:
        import numbers
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, numbers.Real):
            return float(value)
    except (TypeError, ValueError):
        pass
    raise TypeError(f"a {type(value).__name__} ({value!r}) cannot be part of a tuning key")


def full_key(function: str, source: str, arch: str, device: str, key: Any,
             tools: Optional[dict] = None) -> dict:
    """The full key of one tuning result (see the module docstring)."""
    return {"function": function, "source": source,
            "toolchain": dict(tools if tools is not None else toolchain()),
            "arch": arch, "device": device, "key": key_value(key)}


def entry_id(key: dict) -> str:
    """The name an entry is filed under: the SHA-256 of the full key's canonical JSON."""
    return hashlib.sha256(_canonical(key).encode()).hexdigest()


def same_key(stored: Any, wanted: dict, *, ignore: Iterable[str] = ()) -> bool:
    """Whether a stored full key is ``wanted`` in every part but those in ``ignore``."""
    if not isinstance(stored, dict):
        return False
    skip = set(ignore)
    return all(_canonical(stored.get(p)) == _canonical(wanted.get(p))
               for p in PARTS if p not in skip) and set(stored) == set(wanted)
