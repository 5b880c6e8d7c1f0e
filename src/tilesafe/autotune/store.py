"""Where tuning results live: the on-disk store and the shipped tables.

*On-disk store*: ``<cache>/autotune/<function>.json``, one file per tuned function, under the
cache directory of the cubins (``$TILESAFE_CACHE_DIR``; ``0`` disables the store, and then
results live only in the process). *Shipped tables*: ``tilesafe/kernels/tuned/<arch>.json``,
made from a GPU run's store with ``tilesafe tune --export``.

Both are one JSON object ``{"format": FORMAT, "entries": {id: entry}}``; an entry is
``{"full_key": {...}, "index": i, "config": {...}, "when": ISO time, "timings_ms": {...}}``
filed under :func:`keys.entry_id` of its full key. An entry is used only when its stored full
key equals the call's in every part (a file edited, copied or swapped by hand is ignored), and
its config is still one of the configs (else ignored: the configs changed). A shipped entry is
trusted on any device of the same architecture: an entry measured on the calling device comes
first, else one of another device of that architecture is used. A file that
is not such an object is ignored; writes are atomic (temporary file + rename).

This module may import ``keys`` and the cubin cache's location; it knows nothing of timing.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ..backends.tileir.cache import cache_dir, write_atomically
from .keys import entry_id, same_key

FORMAT = "tilesafe-autotune-v1"
#: the shipped tables, one per architecture (``sm_90.json``)
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "kernels" / "tuned"


def store_dir() -> Optional[Path]:
    """The on-disk store's directory, or None when the cache is disabled."""
    root = cache_dir()
    return None if root is None else root / "autotune"


def file_for(function: str) -> Optional[Path]:
    """The store file of the tuned function ``function``."""
    root = store_dir()
    return None if root is None else root / (re.sub(r"[^A-Za-z0-9_.-]", "_", function) + ".json")


def read_entries(path: Optional[Path]) -> dict:
    """The entries of a store file or shipped table (empty: missing, unreadable or corrupt)."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or \
            not isinstance(data.get("entries"), dict):
        return {}
    return {k: v for k, v in data["entries"].items() if isinstance(v, dict)}


def write_entries(path: Path, entries: dict, *, strict: bool = False) -> None:
    """Write a whole file atomically (best effort: an unwritable store only costs tuning;
    ``strict`` raises the OSError instead)."""
    try:
        text = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
        write_atomically(path, (text + "\n").encode())
    except OSError:
        if strict:
            raise


def usable_index(entry: Any, wanted: dict, configs: Sequence[dict], *,
                 ignore: Sequence[str] = ()) -> Optional[int]:
    """The index in ``configs`` of the config an entry names, if the entry was written for
    ``wanted`` (all parts but ``ignore``) and its config is still among ``configs``."""
    if not isinstance(entry, dict) or not same_key(entry.get("full_key"), wanted, ignore=ignore):
        return None
    config, index = entry.get("config"), entry.get("index")
    if isinstance(index, int) and 0 <= index < len(configs) and _same(configs[index], config):
        return index
    for i, candidate in enumerate(configs):  # the configs were reordered
        if _same(candidate, config):
            return i
    return None


def _same(config: dict, stored: Any) -> bool:
    return json.loads(json.dumps(config, default=repr)) == stored


def lookup(wanted: dict, configs: Sequence[dict]) -> Optional[int]:
    """The stored winner for ``wanted`` in the on-disk store, if any."""
    entries = read_entries(file_for(wanted["function"]))
    return usable_index(entries.get(entry_id(wanted)), wanted, configs)


def shipped_lookup(wanted: dict, configs: Sequence[dict]) -> Optional[int]:
    """The winner for ``wanted`` in the shipped table of its architecture: the entry measured
    on ``wanted``'s device if the table has one, else that of another device (the first
    usable one in the table's order)."""
    entries = read_entries(SHIPPED_DIR / f"{wanted['arch']}.json")
    found = usable_index(entries.get(entry_id(wanted)), wanted, configs)
    if found is not None:
        return found
    for entry in entries.values():
        found = usable_index(entry, wanted, configs, ignore=("device",))
        if found is not None:
            return found
    return None


def save(wanted: dict, index: int, config: dict, timings_ms: dict) -> Optional[Path]:
    """File the winner ``configs[index] == config`` for ``wanted``; returns the file."""
    path = file_for(wanted["function"])
    if path is None:
        return None
    entries = read_entries(path)
    entries[entry_id(wanted)] = {
        "full_key": wanted, "index": index, "config": json.loads(json.dumps(config, default=repr)),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "timings_ms": {str(k): v for k, v in timings_ms.items()}}
    write_entries(path, entries)
    return path


def stored() -> Iterator[tuple[Path, str, dict]]:
    """Every entry of the on-disk store: ``(file, id, entry)``."""
    root = store_dir()
    if root is None or not root.is_dir():
        return
    for path in sorted(root.glob("*.json")):
        for eid, entry in sorted(read_entries(path).items()):
            yield path, eid, entry


def clear(function: Optional[str] = None) -> int:
    """Delete the store's files (only ``function`` 's when given); returns how many entries
    they held."""
    count = 0
    root = store_dir()
    if root is None or not root.is_dir():
        return 0
    paths = [file_for(function)] if function else sorted(root.glob("*.json"))
    for path in paths:
        if path is not None and path.exists():
            count += len(read_entries(path))
            try:
                path.unlink()
            except OSError:
                pass
    return count


def export(path: Path, arch: str) -> int:
    """Add the store's entries for ``arch`` to the shipped-format table at ``path`` (created
    if missing; its other entries are kept, an entry for the same full key replaced); returns
    how many were written."""
    entries = read_entries(path)
    count = 0
    for _, eid, entry in stored():
        key = entry.get("full_key")
        if isinstance(key, dict) and key.get("arch") == arch:
            entries[eid] = entry
            count += 1
    write_entries(path, entries, strict=True)
    return count
