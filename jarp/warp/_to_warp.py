"""Conversion of NumPy, JAX and Warp arrays into Warp arrays, with dtype hints."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from typing import Any

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import numpy as np
import warp as wp

from ._plan import _dtypes
from ._upstream import _warp_types
from .types import matrix_type, vector_type

_SUPPORTED = "warp.array, numpy.ndarray, jax.Array"
_HINT_FORMS = (
    "None, a Warp dtype (e.g. wp.float32, wp.vec3f, wp.mat33d), "
    "(length, scalar) for a vector or (rows, cols, scalar) for a matrix, "
    "where a dimension may be -1 (take it from arr's trailing dims) and scalar may be Any (take arr's)"
)


@dataclass(frozen=True)
class _Hint:
    """A parsed `dtype` argument of `to_warp`.

    Attributes:
        inner: Trailing dims the Warp dtype spans, `None` entries to be read from
            the source array; `()` for scalars.
        scalar: Warp scalar type, or `None` to take the source array's.
        concrete: The Warp dtype given as is, or `None` for `None` and tuple hints.
        spec: The `dtype` argument as given, for error messages.
    """

    inner: tuple[int | None, ...]
    scalar: Any
    concrete: Any
    spec: Any


def _dtype_phrase(dtype: object) -> str:
    """Return a short name of a Warp dtype (or of any other object) for error messages."""
    return getattr(dtype, "__name__", None) or repr(dtype)


def _parse_dim(value: object, index: int, dtype: tuple[object, ...]) -> int | None:
    """Return a hint dimension: `None` for -1, else the positive int `value`.

    Raises:
        TypeError: `value` is not an int.
        ValueError: `value` is neither -1 nor positive.
    """
    if isinstance(value, bool):
        msg = f"dtype={dtype!r}: dimension {index} must be -1 or a positive int, got the bool {value!r}"
        raise TypeError(msg)
    try:
        dim = operator.index(value)  # pyright: ignore[reportArgumentType]  # any object: operator.index raising TypeError is the check
    except TypeError:
        msg = f"dtype={dtype!r}: dimension {index} must be -1 or a positive int, got {value!r}"
        raise TypeError(msg) from None
    if dim == -1:
        return None
    if dim < 1:
        msg = f"dtype={dtype!r}: dimension {index} must be -1 (inferred) or a positive int, got {dim}"
        raise ValueError(msg)
    return dim


def _parse_hint(dtype: type | tuple[int, object] | tuple[int, int, object] | None) -> _Hint:
    """Parse the `dtype` argument of `to_warp`.

    Raises:
        TypeError: `dtype` has none of the supported forms.
        ValueError: a dimension of a tuple hint is neither -1 nor positive.
    """
    if dtype is None:
        return _Hint(inner=(), scalar=None, concrete=None, spec=dtype)
    if isinstance(dtype, tuple):
        if len(dtype) not in (2, 3):
            msg = f"dtype={dtype!r} is not a valid hint; use (length, scalar) or (rows, cols, scalar)"
            raise TypeError(msg)
        *dims, scalar = dtype
        inner = tuple(_parse_dim(d, i, dtype) for i, d in enumerate(dims))
        if scalar is Any or scalar is None:
            scalar = None
        elif not _dtypes.is_scalar(scalar):
            msg = (
                f"dtype={dtype!r}: the last entry must be a Warp scalar dtype (e.g. wp.float32) "
                f"or Any to keep arr's scalar type, got {scalar!r}"
            )
            raise TypeError(msg)
        return _Hint(inner=inner, scalar=scalar, concrete=None, spec=dtype)
    if _dtypes.is_scalar(dtype):
        return _Hint(inner=(), scalar=dtype, concrete=dtype, spec=dtype)
    if _dtypes.is_composite(dtype):
        return _Hint(
            inner=_dtypes.element_shape(dtype),
            scalar=_warp_types.scalar_type(dtype),
            concrete=dtype,
            spec=dtype,
        )
    msg = f"dtype={dtype!r} is not supported; pass {_HINT_FORMS}"
    raise TypeError(msg)


def _apply_hint(hint: _Hint, shape: tuple[int, ...], scalar: type, source: str) -> tuple[Any, Any]:
    """Apply a dtype hint to the shape and Warp scalar type of a NumPy or JAX array.

    Args:
        hint: The parsed hint.
        shape: Shape of the source array.
        scalar: Warp scalar type of the source array.
        source: Name of the source type for error messages.

    Returns:
        `(dtype, scalar)`: the Warp dtype of the result and its scalar type.

    Raises:
        ValueError: the source array has too few dims or trailing dims that differ from the hint's.
    """
    if not shape:
        msg = f"arr is a 0-d {source}; Warp arrays have at least one dimension, pass arr.reshape(1) instead"
        raise ValueError(msg)
    target_scalar = scalar if hint.scalar is None else hint.scalar
    if not hint.inner:
        return target_scalar, target_scalar
    n_inner = len(hint.inner)
    if len(shape) <= n_inner:
        what = "vector" if n_inner == 1 else "matrix"
        msg = (
            f"arr has shape {shape}, but a {what} dtype needs at least {n_inner + 1} dims: "
            f"{n_inner} for the {what} and at least one for the Warp array; add a leading axis, e.g. arr[None]"
        )
        raise ValueError(msg)
    trailing = shape[-n_inner:]
    for want, have in zip(hint.inner, trailing, strict=True):
        if want is not None and want != have:
            given = _dtype_phrase(hint.concrete) if hint.concrete is not None else repr(hint.spec)
            msg = (
                f"dtype={given} spans trailing dims {tuple(-1 if d is None else d for d in hint.inner)}, "
                f"but arr has shape {shape}; pass -1 to infer a dimension or reshape arr"
            )
            raise ValueError(msg)
    if hint.concrete is not None:
        return hint.concrete, target_scalar
    if n_inner == 1:
        return vector_type(trailing[0], target_scalar), target_scalar
    return matrix_type((trailing[0], trailing[1]), target_scalar), target_scalar


def _check_device(kwargs: dict[str, Any], actual: wp.Device | None, source: str, fix: str) -> None:
    """Check the keyword arguments of a zero-copy conversion: only a matching `device` is accepted.

    Raises:
        TypeError: a keyword other than `device` was given.
        ValueError: `device` names another device than the array's.
    """
    unexpected = sorted(set(kwargs) - {"device"})
    if unexpected:
        names = ", ".join(repr(k) for k in unexpected)
        msg = (
            f"to_warp() got unexpected keyword argument(s) {names} for a {source}: it is used in place, "
            "so only device= (which must be its own device) is accepted; convert a numpy.ndarray to pass "
            "other wp.array options"
        )
        raise TypeError(msg)
    if "device" in kwargs and kwargs["device"] is not None and wp.get_device(kwargs["device"]) != actual:
        msg = f"device={kwargs['device']!r} differs from arr's device {actual}; to_warp never moves a {source}, {fix}"
        raise ValueError(msg)


@functools.singledispatch
def to_warp(
    arr: object,
    dtype: type | tuple[int, object] | tuple[int, int, object] | None = None,
    *,
    requires_grad: bool = False,
    **kwargs: object,
) -> wp.array:
    """Convert a Warp, NumPy or JAX array into a `warp.array`.

    By source type:

    - `warp.array`: returned as is when it matches `dtype` and `requires_grad`.
      A Warp array is never cast, reinterpreted, copied or modified, so a
      mismatch raises `ValueError`.
    - `numpy.ndarray`: copied into a new Warp array (`wp.array(arr, ...)`;
      on the CPU, `copy=False` makes a view instead); the scalar type is cast
      with NumPy first when `dtype` asks for another one.
    - `jax.Array`: a zero-copy view through DLPack (`wp.from_jax`) when the
      scalar type is kept; when `dtype` asks for another scalar type, JAX casts
      first and the view is of the cast copy. The view aliases JAX's buffer,
      which JAX assumes immutable: do not write into it. Traced values (inside
      `jit`, `vmap`, `grad`) cannot be converted; wrap the kernel with
      `jarp.warp.jax_kernel` instead.

    `dtype` takes one of these forms:

    - `None`: the source's scalar type, no vector/matrix grouping.
    - a Warp dtype: a scalar (`wp.float32`), vector (`wp.vec3f`), matrix
      (`wp.mat33d`), quaternion or transformation type; a composite type spans
      the source's trailing dims, which must equal its shape.
    - `(length, scalar)`: a vector dtype over the last dim.
    - `(rows, cols, scalar)`: a matrix dtype over the last two dims.

    In tuples a dimension of `-1` is taken from the source's shape and a scalar
    of `Any` (or `None`) keeps the source's scalar type, so `(-1, Any)` turns a
    float32 array of shape `(n, 3)` into `n` `wp.vec3f`. Each vector or matrix
    dim must leave at least one dim for the Warp array. For a `warp.array`
    source, tuples are patterns its dtype must fit (`(-1, Any)` matches any
    vector dtype).

    `to_warp` is a `functools.singledispatch` function: support for other
    types can be added with `@to_warp.register(cls)`.

    Args:
        arr: The array to convert.
        dtype: Warp dtype of the result, or a hint for it (see above).
        requires_grad: Whether the result must carry a gradient array. A NumPy
            or JAX source gets a new zero-filled one; a `warp.array` must
            already have one.
        **kwargs: For a NumPy source, forwarded to `wp.array` (e.g. `device`,
            `copy`, `pinned`, `retain_grad`; not `shape`). JAX and Warp
            sources are used in place and accept only `device`, which must be
            the array's own device.

    Returns:
        The Warp array: `arr` itself, a view of it, or a new array, as above.

    Raises:
        TypeError: `arr` is of an unsupported type or a JAX tracer, `dtype`
            has an unsupported form, the source's dtype has no Warp equivalent,
            a JAX/Warp source got keyword arguments other than `device`, or a
            NumPy source got `shape`.
        ValueError: `arr` is 0-d, its trailing dims do not fit `dtype`, a
            `warp.array` does not match `dtype` or lacks a gradient asked for
            by `requires_grad`, `device` is not the device of a JAX/Warp
            source, or the cast needs float64 while `jax_enable_x64` is off.

    Example:
        >>> import jax.numpy as jnp
        >>> from typing import Any
        >>> a = to_warp(jnp.zeros((4, 3), jnp.float32), (-1, Any))
        >>> a.shape, a.dtype is wp.vec3f
        ((4,), True)
        >>> to_warp(a, wp.vec3f) is a
        True
    """
    del dtype, requires_grad, kwargs
    _reject_tracer(arr)
    msg = (
        f"to_warp() does not support arr of type {type(arr).__module__}.{type(arr).__qualname__}; "
        f"supported types: {_SUPPORTED}. Convert it first, e.g. with numpy.asarray(arr)"
    )
    raise TypeError(msg)


def _reject_tracer(arr: object) -> None:
    """Raise `TypeError` when `arr` is a JAX tracer (`singledispatch` does not route tracers to `jax.Array`)."""
    if isinstance(arr, jax.core.Tracer):
        msg = (
            f"arr is a JAX tracer ({type(arr).__name__}) of {arr.aval}: to_warp needs a concrete array and cannot "
            "run inside jit/vmap/grad; call Warp from traced code through jarp.warp.jax_kernel or jax_callable"
        )
        raise TypeError(msg)


def _dtype_fits(actual: type, hint: _Hint) -> bool:
    """Return whether the dtype of a Warp array fits a hint."""
    if hint.concrete is not None:
        return wp.types.types_equal(actual, hint.concrete)
    if hint.inner:
        if not _dtypes.is_composite(actual) or len(_dtypes.element_shape(actual)) != len(hint.inner):
            return False
        if any(
            want is not None and want != have
            for want, have in zip(hint.inner, _dtypes.element_shape(actual), strict=True)
        ):
            return False
        actual = _warp_types.scalar_type(actual)
    return hint.scalar is None or actual is hint.scalar


@to_warp.register(wp.array)
def _to_warp_warp(
    arr: wp.array,
    dtype: type | tuple[int, object] | tuple[int, int, object] | None = None,
    *,
    requires_grad: bool = False,
    **kwargs: Any,
) -> wp.array:
    """Return a Warp array as is once it is checked against `dtype`, `requires_grad` and `device`."""
    hint = _parse_hint(dtype)
    _check_device(kwargs, arr.device, "warp.array", "copy it first with arr.to(device)")
    if not _dtype_fits(arr.dtype, hint):
        msg = (
            f"arr is a warp.array of dtype {_dtype_phrase(arr.dtype)}, which does not match dtype={dtype!r}; "
            "to_warp returns Warp arrays as they are and never casts or reinterprets them. "
            "Build the array with the wanted dtype instead, e.g. to_warp(arr.numpy(), dtype)"
        )
        raise ValueError(msg)
    if requires_grad and not arr.requires_grad:
        msg = (
            "requires_grad=True, but arr is a warp.array without a gradient; to_warp does not modify Warp arrays. "
            "Create it with requires_grad=True or set arr.requires_grad = True first"
        )
        raise ValueError(msg)
    return arr


def _warp_scalar_of(dtype: np.dtype, source: str) -> Any:
    """Return the Warp scalar type of a NumPy or JAX dtype.

    Raises:
        TypeError: Warp has no equivalent of `dtype`.
    """
    try:
        return _dtypes.from_jax(dtype)
    except TypeError as err:
        msg = (
            f"arr is a {source} of dtype {dtype}, which has no Warp equivalent; "
            "cast it to a boolean, integer or floating dtype first"
        )
        raise TypeError(msg) from err


@to_warp.register(np.ndarray)
def _to_warp_numpy(
    arr: np.ndarray,
    dtype: type | tuple[int, object] | tuple[int, int, object] | None = None,
    *,
    requires_grad: bool = False,
    **kwargs: Any,
) -> wp.array:
    """Copy a NumPy array into a new Warp array, casting its scalar type if `dtype` asks for it."""
    if "shape" in kwargs:
        msg = "to_warp() takes no shape= for a numpy.ndarray: the shape follows arr and dtype; reshape arr instead"
        raise TypeError(msg)
    hint = _parse_hint(dtype)
    source_scalar = _warp_scalar_of(arr.dtype, "numpy.ndarray")
    target, scalar = _apply_hint(hint, arr.shape, source_scalar, "numpy.ndarray")
    # Given explicitly: left to infer it, Warp drops trailing dims of size 1 before matching the dtype.
    shape = arr.shape[: arr.ndim - len(hint.inner)]
    if scalar is not source_scalar:
        arr = arr.astype(_dtypes.to_numpy(scalar))
    return wp.array(arr, dtype=target, shape=shape, requires_grad=requires_grad, **kwargs)


@to_warp.register(jax.Array)
def _to_warp_jax(
    arr: jax.Array,
    dtype: type | tuple[int, object] | tuple[int, int, object] | None = None,
    *,
    requires_grad: bool = False,
    **kwargs: Any,
) -> wp.array:
    """View a JAX array as a Warp array through DLPack, casting its scalar type first if `dtype` asks for it."""
    _reject_tracer(arr)
    hint = _parse_hint(dtype)
    source_scalar = _warp_scalar_of(arr.dtype, "jax.Array")
    target, scalar = _apply_hint(hint, arr.shape, source_scalar, "jax.Array")
    devices = arr.devices()
    if len(devices) != 1:
        msg = (
            f"arr is a jax.Array sharded over {len(devices)} devices; to_warp views one buffer, "
            "so pass a single-device array (e.g. one of arr.addressable_shards) instead"
        )
        raise ValueError(msg)
    _check_device(kwargs, wp.device_from_jax(next(iter(devices))), "jax.Array", "move it with jax.device_put")
    if scalar is not source_scalar:
        jax_dtype = _dtypes.to_numpy(scalar)
        if jax.dtypes.canonicalize_dtype(jax_dtype) != jax_dtype:
            msg = (
                f"dtype={dtype!r} asks for {jax_dtype}, which JAX cannot hold while jax_enable_x64 is off; "
                "enable it (JAX_ENABLE_X64=1) or ask for a 32-bit scalar type"
            )
            raise ValueError(msg)
        arr = arr.astype(jax_dtype)
    out = wp.from_jax(arr, target)
    if requires_grad:
        out.requires_grad = True
    return out
