"""The package version, in one place: the top-level package exports it and tuning results
are filed under it (``autotune.keys``). Imports nothing."""

__version__ = "0.1.0"
