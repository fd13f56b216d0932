"""Keys for static values by identity of meaning, not Python equality.

A static value is baked into a compiled launch, so the caches that find a launch
again (the plan registry, the eager-dispatch executables) must key it by what the
kernel sees. Python equality gets this wrong three ways:

* ``-0.0 == 0.0``, yet ``1.0 / -0.0`` is ``-inf``: a plan built for one would run for the other;
* ``nan != nan``: a NaN never finds its own plan again, so every call builds and compiles a new one;
* ``0 == 0.0 == False``: values of different types would share an entry.

`static_key` maps a value to a hashable key that is equal exactly when the values
have the same type and the same bits (every NaN the same canonical NaN), and
`canonical` replaces each NaN by that canonical NaN, so that the value a launch
reads never depends on which NaN happened to build its plan first.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Hashable
from typing import Any

import numpy as np

_NAN = math.nan
_pack_double = struct.Struct("<d").pack
_NAN_BITS = _pack_double(_NAN)


def static_key(value: object) -> Hashable:
    """Return a hashable key of ``value`` that is equal exactly when two values mean the same to a kernel.

    Floats compare by their IEEE-754 bits (so ``-0.0`` and ``0.0`` differ) with every NaN
    the same key; every value is tagged with its type (so ``0``, ``0.0`` and ``False``
    differ); NumPy scalars are keyed as the Python number they hold; tuples and lists
    are keyed element by element (struct value fields hold nested tuples).

    Args:
        value: a static value: a number, a (nested) tuple of numbers, or any hashable value.

    Returns:
        The key. It raises ``TypeError`` when hashed if ``value`` holds an unhashable object.

    Example:
        >>> static_key(-0.0) == static_key(0.0), static_key(float("nan")) == static_key(-math.nan)
        (False, True)
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return (float, _float_bits(value))
    if isinstance(value, complex):
        return (complex, _float_bits(value.real), _float_bits(value.imag))
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(static_key(v) for v in value))
    return (type(value), value)


def _float_bits(value: float) -> bytes:
    return _NAN_BITS if math.isnan(value) else _pack_double(value)


def canonical(value: object) -> Any:
    """Return ``value`` with every float NaN in it (nested tuples included) replaced by the canonical NaN.

    Other values are returned unchanged (the same object when nothing was replaced).

    Example:
        >>> math.isnan(canonical((1.0, -math.nan))[1])
        True
    """
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    if isinstance(value, tuple):
        items = tuple(canonical(v) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


class Static:
    """A static value that compares and hashes by `static_key`, for cache keys; ``.value`` is the plain value.

    Example:
        >>> Static(-0.0) == Static(0.0), Static(float("nan")) == Static(float("nan"))
        (False, True)
    """

    __slots__ = ("_hash", "_key", "value")

    def __init__(self, value: Any) -> None:
        kind = type(value)
        if kind is float:  # the common case, inline (the eager path keys every static number per call)
            if value != value:
                value, key = _NAN, (float, _NAN_BITS)
            else:
                key = (float, _pack_double(value))
        elif kind is int or kind is bool:
            key = (kind, value)
        else:
            value, key = canonical(value), static_key(value)
        self.value = value
        self._key = key
        self._hash = hash(key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Static):
            return NotImplemented
        return self._hash == other._hash and self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Static({self.value!r})"
