"""Warp dtypes whose scalar type follows JAX's active precision.

JAX computes in float32 unless `jax_enable_x64` is on, in which case it
computes in float64. The names of this module give the Warp dtype that matches
the precision in effect *when the attribute is read*:

| name | x64 off | x64 on |
|---|---|---|
| `floating` | `wp.float32` | `wp.float64` |
| `vec1` .. `vec9` | `vector(n, wp.float32)` | `vector(n, wp.float64)` |
| `mat11` .. `mat99` (rows and columns 1..9, e.g. `mat13`, `mat31`) | `matrix((r, c), wp.float32)` | `matrix((r, c), wp.float64)` |

`float` and `float_` are deprecated aliases of `floating`; reading them emits a
`DeprecationWarning`.

Read the names through the module (`types.floating`), not with
`from jarp.warp.types import floating`: an imported name is resolved once, at
import time, and does not follow later changes of `jax_enable_x64`.

The same dtype is returned for the same shape and scalar type, and where Warp
has a built-in name for it (`wp.vec3f`, `wp.mat33d`, ...) that built-in type is
returned, so `types.vec3 is wp.vec3f` holds with x64 off.

Example:
    >>> import warp as wp
    >>> from jarp.warp import types
    >>> types.floating is wp.float32  # jax_enable_x64 off
    True
    >>> types.vec3 is wp.vec3f
    True
    >>> types.matrix((2, 3)) is types.mat23
    True
"""

from __future__ import annotations

import functools
import operator
import re
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import warp as wp

from ._plan import _dtypes

__all__ = ["matrix", "vector"]

# Warp's scalar types, in the order of the suffixes of Warp's built-in vector
# and matrix names (`wp.vec3f`, `wp.vec2ub`, `wp.mat44d`, ...).
_SCALAR_SUFFIXES: dict[Any, str] = {
    wp.int8: "b",
    wp.uint8: "ub",
    wp.int16: "s",
    wp.uint16: "us",
    wp.int32: "i",
    wp.uint32: "ui",
    wp.int64: "l",
    wp.uint64: "ul",
    wp.float16: "h",
    wp.float32: "f",
    wp.float64: "d",
}

# Every Warp scalar dtype.
_SCALAR_TYPES: tuple[Any, ...] = _dtypes.SCALAR_TYPES

_DEPRECATED_ALIASES: frozenset[str] = frozenset({"float", "float_"})
_MIN_DIM = 1
_MAX_DIM = 9
_VECTOR_NAMES: tuple[str, ...] = tuple(f"vec{n}" for n in range(_MIN_DIM, _MAX_DIM + 1))
_MATRIX_NAMES: tuple[str, ...] = tuple(
    f"mat{r}{c}" for r in range(_MIN_DIM, _MAX_DIM + 1) for c in range(_MIN_DIM, _MAX_DIM + 1)
)
_DYNAMIC_NAMES: tuple[str, ...] = ("floating", *_VECTOR_NAMES, *_MATRIX_NAMES)
_VECTOR_NAME = re.compile(r"vec(?P<length>[1-9])")
_MATRIX_NAME = re.compile(r"mat(?P<rows>[1-9])(?P<cols>[1-9])")


if TYPE_CHECKING:
    # Static declarations of the names `__getattr__` serves at run time, so that
    # type checkers know them and flag misspelt ones.
    floating: type[Any]
    float: type[Any]  # deprecated alias of `floating`
    float_: type[Any]  # deprecated alias of `floating`
    vec1: type[Any]
    vec2: type[Any]
    vec3: type[Any]
    vec4: type[Any]
    vec5: type[Any]
    vec6: type[Any]
    vec7: type[Any]
    vec8: type[Any]
    vec9: type[Any]
    mat11: type[Any]
    mat12: type[Any]
    mat13: type[Any]
    mat14: type[Any]
    mat15: type[Any]
    mat16: type[Any]
    mat17: type[Any]
    mat18: type[Any]
    mat19: type[Any]
    mat21: type[Any]
    mat22: type[Any]
    mat23: type[Any]
    mat24: type[Any]
    mat25: type[Any]
    mat26: type[Any]
    mat27: type[Any]
    mat28: type[Any]
    mat29: type[Any]
    mat31: type[Any]
    mat32: type[Any]
    mat33: type[Any]
    mat34: type[Any]
    mat35: type[Any]
    mat36: type[Any]
    mat37: type[Any]
    mat38: type[Any]
    mat39: type[Any]
    mat41: type[Any]
    mat42: type[Any]
    mat43: type[Any]
    mat44: type[Any]
    mat45: type[Any]
    mat46: type[Any]
    mat47: type[Any]
    mat48: type[Any]
    mat49: type[Any]
    mat51: type[Any]
    mat52: type[Any]
    mat53: type[Any]
    mat54: type[Any]
    mat55: type[Any]
    mat56: type[Any]
    mat57: type[Any]
    mat58: type[Any]
    mat59: type[Any]
    mat61: type[Any]
    mat62: type[Any]
    mat63: type[Any]
    mat64: type[Any]
    mat65: type[Any]
    mat66: type[Any]
    mat67: type[Any]
    mat68: type[Any]
    mat69: type[Any]
    mat71: type[Any]
    mat72: type[Any]
    mat73: type[Any]
    mat74: type[Any]
    mat75: type[Any]
    mat76: type[Any]
    mat77: type[Any]
    mat78: type[Any]
    mat79: type[Any]
    mat81: type[Any]
    mat82: type[Any]
    mat83: type[Any]
    mat84: type[Any]
    mat85: type[Any]
    mat86: type[Any]
    mat87: type[Any]
    mat88: type[Any]
    mat89: type[Any]
    mat91: type[Any]
    mat92: type[Any]
    mat93: type[Any]
    mat94: type[Any]
    mat95: type[Any]
    mat96: type[Any]
    mat97: type[Any]
    mat98: type[Any]
    mat99: type[Any]


def _floating() -> type[Any]:
    """Return `wp.float64` when `jax_enable_x64` is on, else `wp.float32`."""
    return wp.float64 if jax.config.jax_enable_x64 else wp.float32  # pyright: ignore[reportAttributeAccessIssue]  # JAX sets its options on Config at run time


def _positive_int(value: object, what: str) -> int:
    """Return `value` as an `int` when it is a positive integer (not a bool), else raise.

    Args:
        value: The value to check.
        what: How the value is named in error messages.

    Returns:
        `value` as a plain `int`.

    Raises:
        TypeError: `value` is not an integer.
        ValueError: `value` is not positive.
    """
    if isinstance(value, bool):
        msg = f"{what} must be a positive int, got the bool {value!r}"
        raise TypeError(msg)
    try:
        result = operator.index(value)  # pyright: ignore[reportArgumentType]  # any object: operator.index raising TypeError is the check
    except TypeError:
        msg = f"{what} must be a positive int, got {value!r} of type {type(value).__name__}"
        raise TypeError(msg) from None
    if result < 1:
        msg = f"{what} must be a positive int, got {result}"
        raise ValueError(msg)
    return result


def _check_scalar(scalar: object) -> type[Any]:
    """Return `scalar` when it is a Warp scalar dtype, else raise `TypeError`."""
    for candidate in _SCALAR_TYPES:
        if scalar is candidate:
            return candidate
    names = ", ".join(f"wp.{t.__name__}" for t in _SCALAR_TYPES)
    msg = f"expected a Warp scalar dtype ({names}), got {scalar!r}"
    raise TypeError(msg)


def _check_shape(shape: object) -> tuple[int, int]:
    """Return `shape` as a `(rows, cols)` tuple of positive ints, else raise."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or len(shape) != 2:
        msg = f"shape must be a (rows, cols) tuple of two positive ints, got {shape!r}"
        raise TypeError(msg)
    return _positive_int(shape[0], "shape[0] (rows)"), _positive_int(shape[1], "shape[1] (cols)")


@functools.cache
def _cached_vector(length: int, scalar: type[Any]) -> type[Any]:
    built = wp.types.vector(length, scalar)
    suffix = _SCALAR_SUFFIXES.get(scalar)
    builtin = getattr(wp, f"vec{length}{suffix}", None) if suffix is not None else None
    return builtin if builtin is not None and wp.types.types_equal(builtin, built) else built


@functools.cache
def _cached_matrix(shape: tuple[int, int], scalar: type[Any]) -> type[Any]:
    built = wp.types.matrix(shape, scalar)
    suffix = _SCALAR_SUFFIXES.get(scalar)
    builtin = getattr(wp, f"mat{shape[0]}{shape[1]}{suffix}", None) if suffix is not None else None
    return builtin if builtin is not None and wp.types.types_equal(builtin, built) else built


def vector_type(length: int, scalar: type[Any]) -> type[Any]:
    """Return the Warp vector dtype of `length` components of type `scalar`.

    Prefers Warp's built-in type (`wp.vec3f`, ...) and otherwise builds one with
    `wp.types.vector`; either way equal arguments give the same object.

    Args:
        length: Number of components, a positive int.
        scalar: Warp scalar dtype of the components, e.g. `wp.float32`.

    Returns:
        The Warp vector dtype.

    Raises:
        TypeError: `length` is not an int or `scalar` is not a Warp scalar dtype.
        ValueError: `length` is not positive.
    """
    return _cached_vector(_positive_int(length, "length"), _check_scalar(scalar))


def matrix_type(shape: tuple[int, int], scalar: type[Any]) -> type[Any]:
    """Return the Warp matrix dtype of shape `(rows, cols)` with entries of type `scalar`.

    Prefers Warp's built-in type (`wp.mat33f`, ...) and otherwise builds one with
    `wp.types.matrix`; either way equal arguments give the same object.

    Args:
        shape: `(rows, cols)`, two positive ints.
        scalar: Warp scalar dtype of the entries, e.g. `wp.float32`.

    Returns:
        The Warp matrix dtype.

    Raises:
        TypeError: `shape` is not a pair of ints or `scalar` is not a Warp scalar dtype.
        ValueError: a dimension of `shape` is not positive.
    """
    return _cached_matrix(_check_shape(shape), _check_scalar(scalar))


def vector(length: int) -> type[Any]:
    """Return the Warp vector dtype of `length` components of type `floating`.

    Args:
        length: Number of components, a positive int.

    Returns:
        `wp.types.vector(length, floating)`, i.e. float32 components with
        `jax_enable_x64` off and float64 components with it on.

    Raises:
        TypeError: `length` is not an int.
        ValueError: `length` is not positive.

    Example:
        >>> import warp as wp
        >>> vector(3) is wp.vec3f  # jax_enable_x64 off
        True
    """
    return vector_type(length, _floating())


def matrix(shape: tuple[int, int]) -> type[Any]:
    """Return the Warp matrix dtype of shape `(rows, cols)` with entries of type `floating`.

    Args:
        shape: `(rows, cols)`, a tuple (or other sequence) of two positive ints.

    Returns:
        `wp.types.matrix(shape, floating)`, i.e. float32 entries with
        `jax_enable_x64` off and float64 entries with it on.

    Raises:
        TypeError: `shape` is not a sequence of two ints.
        ValueError: a dimension of `shape` is not positive.

    Example:
        >>> import warp as wp
        >>> matrix((3, 3)) is wp.mat33f  # jax_enable_x64 off
        True
    """
    return matrix_type(shape, _floating())


def __dir__() -> list[str]:
    """List the module's names, including the dtypes served by `__getattr__` (without deprecated aliases)."""
    return sorted({*globals(), *_DYNAMIC_NAMES})


if not TYPE_CHECKING:
    # Hidden from type checkers so that they see only the names declared above.

    def __getattr__(name: str) -> type[Any]:
        """Resolve `floating`, `vec1`..`vec9` and `mat11`..`mat99` for the current JAX precision.

        Args:
            name: The attribute being read.

        Returns:
            The Warp dtype named `name`.

        Raises:
            AttributeError: `name` is none of the names above (nor a deprecated alias).
        """
        if name == "floating":
            return _floating()
        if name in _DEPRECATED_ALIASES:
            warnings.warn(
                f"{__name__}.{name} is deprecated; use {__name__}.floating instead",
                DeprecationWarning,
                stacklevel=2,
            )
            return _floating()
        if (match := _VECTOR_NAME.fullmatch(name)) is not None:
            return _cached_vector(int(match["length"]), _floating())
        if (match := _MATRIX_NAME.fullmatch(name)) is not None:
            return _cached_matrix((int(match["rows"]), int(match["cols"])), _floating())
        msg = (
            f"module {__name__!r} has no attribute {name!r}; its dtypes are 'floating', "
            f"'vec1'..'vec9' and 'mat11'..'mat99' (rows and columns 1..9), "
            f"and vector(n)/matrix((rows, cols)) build any other size"
        )
        raise AttributeError(msg, name=name, obj=sys.modules[__name__])
