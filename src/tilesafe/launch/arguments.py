"""A launch's arguments as the caller writes them and as the launch hands them back.

:func:`bind` applies Python's binding rules to a launch's positional and keyword arguments
(``matmul(z, a, b, BM=64)``, ``k(z=..., x=...)``): too many, missing, duplicate and unknown
names are ArgumentErrors naming the launch's line and the parameters. A ``tc.Const`` that the
arguments determine (a shape tuple names it) may be left out: it is bound from the arguments'
shapes (see ``compiler.specialize``).

:func:`result_type` is what ``.sync()`` of a launch returns: a named tuple of the very
tensor-like objects the caller passed (tensors, partitions, mapped partitions, pointers; for
an atomic borrow ``ts.atomic(t)``, the tensor ``t``), in parameter order, readable by
parameter name (``r.z``); ``tc.Const`` and scalar arguments are
not in it, so adding one to a kernel does not change what its callers unpack.

This module imports the compiler's signature types and ``errors``.
"""

from __future__ import annotations

import collections
import keyword
from typing import Any, Optional, Sequence

from ..compiler.signature import ConstSpec, Param, ScalarSpec
from ..compiler.specialize import UNBOUND  # what a left-out parameter is bound to (below)
from ..errors import ArgumentError, Location


def bind(kernel_name: str, params: Sequence[Param], args: tuple, kwargs: dict,
         optional: frozenset, where: Location, defaults: Optional[dict] = None) -> tuple:
    """The launch's arguments in parameter order: by position, by name, else the parameter's
    default (``defaults``, from the kernel's ``def``). ``optional`` names the parameters that
    may be left out besides: they get ``compiler.specialize.UNBOUND``, which the
    specialization binds from the arguments' shapes."""
    names = [p.name for p in params]
    listing = f"({', '.join(names)})"
    if len(args) > len(params):
        raise ArgumentError(f"kernel '{kernel_name}' takes {len(params)} argument(s) {listing}, "
                            f"got {len(args)}", where,
                            hint="pass one value per parameter, in order or by name")
    bound = list(args) + [UNBOUND] * (len(params) - len(args))
    for name, value in kwargs.items():
        if name not in names:
            raise ArgumentError(f"kernel '{kernel_name}' has no parameter '{name}' {listing}",
                                where, hint="name one of its parameters, or pass the value "
                                "by position")
        at = names.index(name)
        if at < len(args):
            raise ArgumentError(f"kernel '{kernel_name}' got two values for '{name}': by "
                                f"position (argument {at + 1}) and by name", where,
                                hint=f"pass '{name}' once")
        bound[at] = value
    for at, name in enumerate(names):
        if bound[at] is UNBOUND and defaults and name in defaults:
            bound[at] = defaults[name]
    missing = [n for n, v in zip(names, bound) if v is UNBOUND and n not in optional]
    if missing:
        quoted = ", ".join(f"'{n}'" for n in missing)
        raise ArgumentError(f"kernel '{kernel_name}' takes {len(params)} argument(s) {listing}, "
                            f"got {len(params) - len(missing)}: missing {quoted}", where,
                            hint="pass one value per parameter, in order or by name "
                            "(tc.Const values included, unless a shape in the signature "
                            "names them)")
    return tuple(bound)


def is_tensor_like(param: Param) -> bool:
    """Whether the parameter takes a tensor, a partition or a pointer (what a launch returns)."""
    return not isinstance(param.spec, (ConstSpec, ScalarSpec))


def result_type(kernel_name: str, params: Sequence[Param]) -> type:
    """The named tuple ``.sync()`` of a launch of this kernel returns (see the module)."""
    fields = [p.name for p in params if is_tensor_like(p)]
    safe = [f if f.isidentifier() and not keyword.iskeyword(f) and not f.startswith("_")
            else f"arg{i}" for i, f in enumerate(fields)]
    cls = collections.namedtuple(f"{kernel_name}_result", safe)
    cls.__doc__ = (f"What a launch of '{kernel_name}' hands back: the tensor-like arguments it "
                   f"was given ({', '.join(fields) or 'none'}), by position or by name.")
    positions = tuple(i for i, p in enumerate(params) if is_tensor_like(p))
    cls._positions = positions
    return cls


def result_of(result: type, args: tuple) -> tuple:
    """The result of a launch with ``args``, of the named tuple type ``result``."""
    return result._make([args[i] for i in result._positions])
