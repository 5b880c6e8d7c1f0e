"""Choosing a launch configuration per problem: ``@ts.autotune``.

A tuned function is a host function that builds a launch (a DeviceOp) from its arguments and a
*config* (a dict of choices: tile sizes, rows per program, hints). ``autotune`` picks the config
for each *key* (values computed from the arguments, e.g. the row length and dtype)::

    @ts.autotune(configs=[{"rows": 1}, {"rows": 4}],
                 key=lambda x, w, out: (x.shape[-1], x.dtype.name),
                 kernels=(rms_norm_kernel,))
    def launch_rms_norm(x, w, out, *, config):
        ...  # partition out by config["rows"], return kernel(...)

On the ``cpu`` device the first config is used (nothing is timed).

This module may import every layer up to ``kernel``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Hashable, Optional, Sequence


class Tuned:
    """A tuned host function (made by :func:`autotune`): calling it picks a config for the
    arguments' key and calls the function with ``config=``."""

    def __init__(self, fn: Callable, configs: Sequence[dict], key: Callable[..., Hashable],
                 kernels: Sequence[Any] = (), mutates: Sequence[str] = (),
                 name: Optional[str] = None):
        if not configs:
            raise ValueError("autotune needs at least one config")
        self.fn = fn
        self.configs = [dict(c) for c in configs]
        self.key = key
        self.kernels = tuple(kernels)
        self.mutates = tuple(mutates)
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        functools.update_wrapper(self, fn)

    def config_for(self, *args: Any, **kwargs: Any) -> dict:
        """The config a call with these arguments uses."""
        return self.configs[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, config=self.config_for(*args, **kwargs), **kwargs)


def autotune(configs: Sequence[dict], key: Callable[..., Hashable], *,
             kernels: Sequence[Any] = (), mutates: Sequence[str] = (),
             name: Optional[str] = None) -> Callable[[Callable], Tuned]:
    """Decorate a host function ``fn(*args, config, **kwargs) -> DeviceOp`` so that each call
    uses the best of ``configs`` for ``key(*args, **kwargs)``.

    Args:
        configs: the choices, tried in order; the first is the default.
        key: the values a best config depends on, computed from the call's arguments.
        kernels: the kernels the function launches (their source is part of the key a
            stored result is filed under).
        mutates: the names of arguments the launch writes in place and that hold data the
            caller needs (timing runs on copies of them).
        name: the name tuning results are filed under (default: module and function).
    """
    def decorate(fn: Callable) -> Tuned:
        return Tuned(fn, configs, key, kernels=kernels, mutates=mutates, name=name)
    return decorate
