"""The one mapping between Warp scalar types and NumPy/JAX dtypes, and the packing of static half scalars.

Warp's own `wp.dtype_to_numpy` maps `wp.bfloat16` to `uint16` (its storage type), so a
`jnp.bfloat16` array would not match a `wp.array(dtype=wp.bfloat16)` parameter. JAX's
bfloat16 is `ml_dtypes.bfloat16` (a NumPy dtype), which this module uses instead. Every
other scalar type maps as in Warp. JAX dtypes are NumPy dtypes, so one table serves both.

Warp passes `float16`/`bfloat16` kernel parameters as their bit pattern (a `uint16`);
`ctype_value` packs static half scalars the way `wp.launch` does, with Warp's host
conversion rewritten in integer arithmetic so that it gives the same bits on XLA's CPU
threads, which run with flush-to-zero set.
"""

from __future__ import annotations

import ctypes
import math
import struct
from typing import Any, cast

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import warp as wp
from jax.typing import DTypeLike

from .._upstream import _warp_types

_TO_NUMPY: dict[Any, np.dtype] = {
    wp.bool: np.dtype(np.bool_),
    wp.int8: np.dtype(np.int8),
    wp.uint8: np.dtype(np.uint8),
    wp.int16: np.dtype(np.int16),
    wp.uint16: np.dtype(np.uint16),
    wp.int32: np.dtype(np.int32),
    wp.uint32: np.dtype(np.uint32),
    wp.int64: np.dtype(np.int64),
    wp.uint64: np.dtype(np.uint64),
    wp.float16: np.dtype(np.float16),
    wp.float32: np.dtype(np.float32),
    wp.float64: np.dtype(np.float64),
    wp.bfloat16: np.dtype(ml_dtypes.bfloat16),
}
_FROM_NUMPY: dict[np.dtype, Any] = {v: k for k, v in _TO_NUMPY.items()}

SCALAR_TYPES: tuple[Any, ...] = tuple(_TO_NUMPY)
"""Every Warp scalar type (those with a NumPy/JAX dtype), in the order error messages list them."""

HALF_TYPES: tuple[Any, ...] = (wp.float16, wp.bfloat16)
"""The 16-bit float types, which Warp passes to kernels as their bit pattern (a `uint16`)."""


def is_inexact(dtype: DTypeLike) -> bool:
    """Whether a NumPy/JAX dtype is floating point or complex (the dtypes JAX differentiates)."""
    return bool(jnp.issubdtype(dtype, jnp.inexact))


def is_float_array(x: object, *, numpy: bool = True) -> bool:
    """Whether ``x`` is a JAX array or tracer (or, with ``numpy``, a NumPy array) of an inexact dtype."""
    kinds = (jax.Array, np.ndarray) if numpy else jax.Array
    return isinstance(x, kinds) and is_inexact(x.dtype)


def is_scalar(dtype: object) -> bool:
    """Return whether `dtype` is one of Warp's scalar types (by identity; `float` and `int` are not).

    Example:
        >>> is_scalar(wp.bfloat16), is_scalar(wp.vec3f), is_scalar(float)
        (True, False, False)
    """
    return any(dtype is t for t in SCALAR_TYPES)


def scalar_of(dtype: object) -> Any:
    """Return the scalar type of a Warp vector or matrix type, or `dtype` itself for a scalar type.

    Example:
        >>> scalar_of(wp.vec3h) is wp.float16
        True
    """
    return getattr(dtype, "_wp_scalar_type_", dtype)


def is_composite(dtype: object) -> bool:
    """Return whether `dtype` is one of Warp's composite value types over a scalar: a vector, matrix, quaternion,
    transform, spatial vector or spatial matrix (Warp's own or made with `wp.types.vector`/`wp.types.matrix`).

    Warp 1.19's `type_is_vector`/`type_is_matrix` are false for quaternions and transforms, which are neither; every
    composite type has a shape (`_shape_`) and a scalar type, which is all the JAX side needs.

    Example:
        >>> is_composite(wp.quat), is_composite(wp.transformd), is_composite(wp.float32)
        (True, True, False)
    """
    return isinstance(dtype, type) and bool(wp.types.type_is_composite(dtype)) and is_scalar(scalar_of(dtype))


def is_element(dtype: object) -> bool:
    """Return whether `dtype` is a Warp type JAX can carry as an array element: a scalar or a composite of one."""
    return is_scalar(dtype) or is_composite(dtype)


def element_shape(dtype: type) -> tuple[int, ...]:
    """Return the trailing JAX dims of one element of a Warp scalar or composite type: the one source of truth.

    A Warp array of `dtype` with Warp dims `(n, ...)` is a JAX array of shape `(n, ..., *element_shape(dtype))`
    and dtype `to_numpy(dtype)`; a value parameter of `dtype` is a JAX value of shape `element_shape(dtype)`.

    Args:
        dtype: A Warp scalar type or a composite type over one (see `is_composite`).

    Returns:
        `()` for a scalar, `(3,)` for `wp.vec3`, `(3, 3)` for `wp.mat33`, `(4,)` for `wp.quat`, `(7,)` for
        `wp.transform`, `(6,)` for `wp.spatial_vector`, `(6, 6)` for `wp.spatial_matrix`.

    Raises:
        TypeError: `dtype` is neither (a struct, an array, a Warp object type...).

    Example:
        >>> element_shape(wp.quatd), element_shape(wp.transform), element_shape(wp.types.matrix((2, 5), wp.float16))
        ((4,), (7,), (2, 5))
    """
    if is_scalar(dtype):
        return ()
    if is_composite(dtype):
        return _warp_types.vector_shape(dtype)
    raise TypeError(
        f"{_type_name(dtype)} is not a Warp scalar or composite type (vector, matrix, quaternion, transform, spatial "
        "vector or matrix), so it has no JAX element shape."
    )


def element_bytes(dtype: type) -> int:
    """Return the bytes of one element of a Warp scalar or composite type, as Warp lays it out.

    Equal to `to_numpy(dtype).itemsize * prod(element_shape(dtype))` for every type JAX can carry (Warp packs a
    composite's scalars with no padding); taken from Warp (`wp.types.type_size_in_bytes`), so a check of one
    against the other catches a type whose JAX shape jarp would get wrong.

    Example:
        >>> element_bytes(wp.transformd), element_bytes(wp.float16)
        (56, 2)
    """
    return int(wp.types.type_size_in_bytes(dtype))


def _type_name(dtype: object) -> str:
    try:
        return wp.types.type_repr(dtype)
    except Exception:  # not a Warp type at all
        return repr(dtype)


def to_numpy(dtype: type) -> np.dtype:
    """Return the NumPy (and JAX) dtype of the scalars of a Warp scalar, vector or matrix type.

    Args:
        dtype: A Warp scalar type (`wp.float16`, `wp.bfloat16`, `wp.uint8`...) or a vector or
            matrix type over one (`wp.vec3h`, `wp.types.vector(3, wp.bfloat16)`...).

    Returns:
        The NumPy dtype; `ml_dtypes.bfloat16` (which is `jnp.bfloat16`) for `wp.bfloat16`.

    Raises:
        TypeError: `dtype` has no NumPy equivalent (it is not a Warp scalar, vector or matrix type).

    Example:
        >>> import jax.numpy as jnp
        >>> to_numpy(wp.bfloat16) == jnp.bfloat16, to_numpy(wp.vec3h)
        (True, dtype('float16'))
    """
    scalar = scalar_of(dtype)
    for candidate, np_dtype in _TO_NUMPY.items():
        if scalar is candidate:
            return np_dtype
    raise TypeError(
        f"{wp.types.type_repr(dtype)} has no NumPy/JAX dtype; use a Warp scalar type "
        f"({', '.join(t.__name__ for t in SCALAR_TYPES)}) or a vector/matrix of one."
    )


def from_jax(dtype: DTypeLike) -> Any:
    """Return the Warp scalar type of a JAX or NumPy dtype.

    Args:
        dtype: Anything `np.dtype` accepts: `jnp.bfloat16`, `np.float16`, an array's `.dtype`...

    Returns:
        The Warp scalar type, e.g. `wp.bfloat16` for `jnp.bfloat16`.

    Raises:
        TypeError: Warp has no scalar type for `dtype` (complex, float8, int4, strings...).

    Example:
        >>> import jax.numpy as jnp
        >>> from_jax(jnp.bfloat16) is wp.bfloat16
        True
    """
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a NumPy/JAX dtype.") from None
    scalar = _FROM_NUMPY.get(np_dtype)
    if scalar is None:
        raise TypeError(
            f"dtype {np_dtype} has no Warp scalar type; Warp has bool, int8..int64, uint8..uint64, "
            "float16, bfloat16, float32 and float64."
        )
    return scalar


def _float32_bits(value: float) -> int:
    """The bits of `value` rounded to float32 (to nearest even, as ctypes' `c_float` rounds it).

    In integer arithmetic, so that the result does not depend on the thread's flush-to-zero
    mode (a C cast to float gives 0 for float32 subnormals on XLA's CPU threads).
    """
    sign = 0x80000000 if math.copysign(1.0, value) < 0 else 0
    if math.isnan(value):  # quieted, with the payload's top bits (as x86's conversion keeps them)
        payload = struct.unpack("<Q", struct.pack("<d", value))[0] & ((1 << 52) - 1)
        return sign | 0x7FC00000 | (payload >> 29)
    magnitude = abs(value)
    if magnitude == 0.0:
        return sign
    if math.isinf(magnitude):
        return sign | 0x7F800000
    _, exponent = math.frexp(magnitude)  # magnitude = m * 2**exponent, 0.5 <= m < 1
    if exponent - 1 < -126:  # a float32 subnormal (or zero): units of 2**-149
        return sign | round(magnitude * 2.0**149)  # 2**23 units is the smallest normal's bit pattern
    mantissa = round(math.ldexp(magnitude, 24 - exponent))  # 24 significant bits, ties to even
    if mantissa == 1 << 24:
        mantissa, exponent = 1 << 23, exponent + 1
    biased = exponent - 1 + 127
    if biased >= 255:
        return sign | 0x7F800000
    return sign | (biased << 23) | (mantissa - (1 << 23))


def _float_to_half_bits(value: float) -> int:
    """Warp's host conversion of a float (via float32) to float16 bits (`wp_float_to_half_bits` in warp.cpp).

    Rewritten in integer arithmetic: Warp's C version scales by 2**-112 in float32, which a
    thread with flush-to-zero set (XLA's CPU threads, where jarp's FFI callback runs) turns
    into 0 for float16 subnormals. Rounding: half-ulp ties of normal values round away from
    zero, subnormal results round to nearest even first (as Warp's float32 multiply does).
    """
    bits = _float32_bits(value)
    sign = (bits >> 16) & 0x8000
    bits &= 0x7FFFFFFF
    if bits >= 0x7F800000:  # inf or nan
        return sign | (0x7E00 if bits > 0x7F800000 else 0x7C00)
    bits &= ~0xFFF
    if bits >= (127 - 14) << 23:  # the float32 product f * 2**-112 is normal: an exact exponent shift
        bits -= 112 << 23
    else:  # the product is a float32 subnormal: its mantissa, rounded to nearest even
        magnitude = struct.unpack("<f", struct.pack("<I", bits))[0]
        bits = round(magnitude * 2.0**37)
    bits = min(bits + 0x1000, 31 << 23)
    return sign | (bits >> 13)


def _float_to_bfloat16_bits(value: float) -> int:
    """Warp's host conversion of a float (via float32) to bfloat16 bits (`wp_float_to_bfloat16_bits_sw`)."""
    bits = _float32_bits(value)
    if bits & 0x7F800000 == 0x7F800000:  # inf or nan: truncate, keeping a nan a nan
        high = bits >> 16
        return high | 0x40 if bits & 0x7FFFFF and not high & 0x7F else high
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _half_bits(scalar: type, value: float) -> int:
    """The bit pattern `wp.launch` packs a Python float into for a `float16`/`bfloat16` kernel parameter."""
    return _float_to_half_bits(value) if scalar is wp.float16 else _float_to_bfloat16_bits(value)


def static_float(scalar: type, value: float) -> float:
    """Return the value a float kernel parameter receives for a static Python float.

    `float16` and `bfloat16` values are rounded as `wp.launch` rounds them: to float32,
    then to the half type, where float16 ties round away from zero (NumPy and JAX round
    them to even). `float32` and `float64` values are returned unchanged (ctypes rounds
    a float32 when the argument is packed).

    Args:
        scalar: The parameter's Warp float type.
        value: The Python float given for the parameter.

    Returns:
        The value as a Python float; `inf` when a finite `value` overflows a half type
        (see `overflows`).

    Example:
        >>> static_float(wp.float16, 0.1)
        0.0999755859375
    """
    value = float(value)
    if any(scalar is t for t in HALF_TYPES):
        bits = np.array(_half_bits(scalar, value), np.uint16)
        return float(bits.view(to_numpy(scalar)))
    return value


def overflows(scalar: type, value: float) -> bool:
    """Return whether a finite `value` becomes infinite as a static argument of type `scalar`.

    Only the half types can overflow here (float32 parameters take what ctypes packs, and
    integer ranges are checked separately).

    Example:
        >>> overflows(wp.float16, 1e5), overflows(wp.bfloat16, 1e5)
        (True, False)
    """
    is_half = any(scalar is t for t in HALF_TYPES)
    return is_half and math.isfinite(value) and math.isinf(static_float(scalar, value))


def composite_ctype_value(dtype: type[ctypes.Array[Any]], value: object) -> Any:
    """Return the ctypes value of a static composite kernel argument (a vector, matrix, quaternion, transform...).

    Args:
        dtype: The parameter's composite type (see `is_composite`).
        value: Its value as nested tuples of numbers (as the binding normalises it), or one number for every
            component (the zero an adjoint starts from).

    Returns:
        An instance of ``dtype`` (a ctypes array) with the scalars packed as `ctype_value` packs them: half types as
        the bit pattern ``wp.launch`` gives, computed in integer arithmetic (so a thread with flush-to-zero set packs
        the same bits).

    Example:
        >>> bytes(composite_ctype_value(wp.vec2h, (1.0, -2.0))).hex()
        '003c00c0'
    """
    scalar = scalar_of(dtype)
    flat = np.broadcast_to(np.asarray(value, dtype=object), element_shape(dtype)).reshape(-1).tolist()
    if any(scalar is t for t in HALF_TYPES):
        raw = np.array([_half_bits(scalar, float(v)) for v in flat], np.uint16).tobytes()
    else:
        raw = np.array(flat, dtype=to_numpy(scalar)).tobytes()
    return dtype.from_buffer_copy(raw)


def ctype_value(scalar: type, value: float | int | bool) -> ctypes._SimpleCData:
    """Return the ctypes value of a static scalar kernel argument, packed as `wp.launch` packs it.

    Warp passes `float16` and `bfloat16` parameters as their bit pattern in a `uint16`
    (`wp.types.type_ctype(wp.float16)` is `c_uint16`), so a Python float must be converted
    to that pattern first; every other scalar type takes the value as is.

    Args:
        scalar: The parameter's Warp scalar type.
        value: The static value (already checked against the type).

    Returns:
        A ctypes scalar holding the value.

    Example:
        >>> ctype_value(wp.float16, 1.0).value == 0x3C00
        True
    """
    # a scalar type's (Warp's return type also lists its vector, matrix and struct ctypes)
    ctype = cast("type[ctypes._SimpleCData[Any]]", wp.types.type_ctype(scalar))
    if any(scalar is t for t in HALF_TYPES):
        return ctype(_half_bits(scalar, float(value)))
    return ctype(value)
