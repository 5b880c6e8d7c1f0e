"""The cubin disk cache: keys, atomic round trips, corruption detection, disabling."""

from __future__ import annotations

from tilesafe.backends.tileir import cache


def _key(**over):
    args = dict(version=(13, 4), arch="sm_90", opt_level=3, tool_version="13.4.92")
    args.update(over)
    return cache.cache_key(b"bytecode", **args)


def test_key_changes_with_everything_that_changes_the_cubin():
    base = _key()
    assert len({base, _key(arch="sm_100"), _key(version=(13, 3)), _key(opt_level=2),
                _key(tool_version="13.5.0"), cache.cache_key(b"other", version=(13, 4),
                arch="sm_90", opt_level=3, tool_version="13.4.92")}) == 6


def test_round_trip_and_corruption_is_evicted(tmp_path, monkeypatch):
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path))
    key = _key()
    assert cache.load(key) is None
    cache.store(key, b"\x7fELF cubin bytes")
    assert cache.load(key) == b"\x7fELF cubin bytes"
    path = tmp_path / f"{key}.cubin"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert cache.load(key) is None and not path.exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_disabled_with_zero(monkeypatch):
    monkeypatch.setenv("TILESAFE_CACHE_DIR", "0")
    assert cache.cache_dir() is None
    cache.store(_key(), b"x")
    assert cache.load(_key()) is None


def test_an_entry_filed_under_another_key_is_evicted(tmp_path, monkeypatch):
    """Each entry carries the key it was written for: swapping two entries' files (or copying
    one over another) must not hand one kernel the other's cubin."""
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path))
    first, second = _key(), _key(arch="sm_100")
    cache.store(first, b"\x7fELF first kernel")
    cache.store(second, b"\x7fELF second kernel")
    a, b = tmp_path / f"{first}.cubin", tmp_path / f"{second}.cubin"
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)
    b.write_bytes(data_a)
    assert cache.load(first) is None and cache.load(second) is None
    assert not a.exists() and not b.exists()


def test_an_entry_of_the_old_format_is_rebuilt(tmp_path, monkeypatch):
    """Entries without a key (format v1) count as corrupt: evicted, then rebuilt."""
    import hashlib
    monkeypatch.setenv("TILESAFE_CACHE_DIR", str(tmp_path))
    key, cubin = _key(), b"\x7fELF old entry"
    path = tmp_path / f"{key}.cubin"
    path.write_bytes(b"tilesafe-cubin-v1\n" + hashlib.sha256(cubin).hexdigest().encode() + b"\n"
                     + cubin)
    assert cache.load(key) is None and not path.exists()
    cache.store(key, cubin)
    assert cache.load(key) == cubin
