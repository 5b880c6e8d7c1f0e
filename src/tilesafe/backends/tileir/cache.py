"""The disk cache of cubins: compiled kernels survive the process.

Location: ``$TILESAFE_CACHE_DIR`` if set (``0`` disables the cache), else
``$XDG_CACHE_HOME/tilesafe`` or ``~/.cache/tilesafe``. An entry's name is the SHA-256 of
everything that changes the cubin (bytecode bytes, bytecode version, target arch, opt level,
tileiras version); its content is a magic line, the key it was written for, the SHA-256 of the
key and the cubin, then the cubin. Writes are atomic (temporary file + rename). An entry whose
checksum does not match, that was written for another key (a file renamed, copied or swapped
by hand), of an older format, or that the driver rejects, is evicted and rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Optional

_MAGIC = b"tilesafe-cubin-v2\n"


def cache_dir() -> Optional[Path]:
    """The cache directory, or None when caching is disabled."""
    configured = os.environ.get("TILESAFE_CACHE_DIR")
    if configured == "0":
        return None
    if configured:
        return Path(configured)
    return default_cache_dir()


def default_cache_dir() -> Path:
    """Where the cache lives unless ``TILESAFE_CACHE_DIR`` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilesafe"


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file beside it, renamed over it; the
    temporary file is removed if the write fails). Raises the OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def cache_key(bytecode: bytes, *, version: tuple[int, int], arch: str, opt_level: int,
              tool_version: str) -> str:
    h = hashlib.sha256()
    for part in (bytecode, repr(version).encode(), arch.encode(), str(opt_level).encode(),
                 tool_version.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _path(key: str) -> Optional[Path]:
    root = cache_dir()
    return None if root is None else root / f"{key}.cubin"


def _header(key: str) -> bytes:
    """An entry's first two lines: the format's magic and the key the entry was written for."""
    return _MAGIC + key.encode() + b"\n"


def _digest(key: str, cubin: bytes) -> bytes:
    """The checksum line's 64 hex digits: the SHA-256 of the key and the cubin together."""
    return hashlib.sha256(key.encode() + b"\n" + cubin).hexdigest().encode()


def load(key: str) -> Optional[bytes]:
    """The cached cubin for ``key``, or None (missing, disabled, or not an intact entry written
    for ``key``: then evicted)."""
    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header = _header(key)
    checksum, cubin = data[len(header):len(header) + 65], data[len(header) + 65:]
    if data.startswith(header) and cubin and checksum == _digest(key, cubin) + b"\n":
        return cubin
    evict(key)
    return None


def store(key: str, cubin: bytes) -> None:
    """Write an entry atomically (best effort: an unwritable cache only costs recompiles)."""
    path = _path(key)
    if path is None:
        return
    try:
        write_atomically(path, _header(key) + _digest(key, cubin) + b"\n" + cubin)
    except OSError:
        pass


def evict(key: str) -> None:
    path = _path(key)
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass
