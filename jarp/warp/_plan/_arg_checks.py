"""Binding-time checks of one value against its spec: arrays, struct array fields, struct value fields.

Used by `_binding` for a call's arguments and, for struct value fields written into argument blocks, by
the FFI stage (`jarp.warp._ffi._struct_bytes`). Every error names the module, the argument (or struct
field) and what to pass instead.
"""

from __future__ import annotations

import ctypes
from typing import Any

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
import numpy as np
import warp as wp

from .._upstream import _warp_types
from . import _dtypes
from ._arg_spec import ArgSpec
from ._struct_layout import StructLeaf, is_warp_scalar

# Why a NumPy long double is refused (as a scalar argument or a struct value field) and what to pass instead.
LONG_DOUBLE_HINT = (
    "long double (np.longdouble, np.clongdouble) has no Warp or JAX dtype. Pass a Python float or np.float64 "
    "(float(value) rounds it to the nearest float64)."
)


def structure_hint(value: object) -> str | None:
    """What to pass instead of a Warp structure object (``wp.Mesh``...) given where a kernel takes its id, or None.

    Args:
        value: the argument.

    Returns:
        The hint, or None when ``value`` is no Warp structure.
    """
    if not _warp_types.is_structure(value):
        return None
    cls = type(value)
    name = cls.__name__
    wrapper = (
        f"pass a jarp.warp.{name}(...) pytree of its arrays instead (built inside the call, differentiable), or "
        if name in ("Mesh", "Bvh", "HashGrid", "Volume")
        else "pass "
    )
    return (
        f"got a wp.{name}; a kernel takes a Warp structure by its id (a wp.uint64 parameter): {wrapper}"
        f"{name.lower()}.id, a Python int (static), keeping the wp.{name} alive while any program compiled with "
        "that id may run."
    )


def cast_hint(expected: np.dtype) -> str:
    """How to give a value of dtype ``expected``: a cast, or for a 64-bit dtype with JAX's x64 off, how to get one.

    Args:
        expected: the NumPy dtype the parameter or field has.

    Returns:
        The advice, one sentence without its full stop.
    """
    if expected.itemsize == 8 and not jax.config.jax_enable_x64:  # pyright: ignore[reportAttributeAccessIssue]  # JAX sets its options on Config at run time
        return (
            f"JAX holds no {expected} array unless jax_enable_x64 is on, so pass a Python number (static), or "
            f"enable it (jax.config.update('jax_enable_x64', True)) and cast with .astype(jnp.{expected.name})"
        )
    return f"cast it with .astype(jnp.{expected.name}), or pass a Python number (static)"


def check_array_value(spec: ArgSpec, value: Any, what: str, label: str = "argument") -> Any:
    """Check a JAX or NumPy array against an array spec (dtype, dims, vector/matrix element dims).

    Args:
        spec: the array parameter (or struct field) it is passed for.
        value: the array.
        what: the module's name, for messages.
        label: how messages name the slot: ``"argument"`` or ``"struct field"``.

    Returns:
        ``value`` as a JAX array.

    Raises:
        TypeError: naming the slot, what was wrong and what to pass instead.
    """
    dtype = np.dtype(value.dtype)
    if dtype != spec.np_dtype:
        owner = "struct" if label == "struct field" else "kernel"
        raise TypeError(
            f"{what}: {label} {spec.name!r} has dtype {dtype}, but the {owner} expects {spec.np_dtype} "
            f"({spec.phrase()}); cast it with .astype(jnp.{spec.np_dtype.name})"
            + (" or enable jax_enable_x64" if spec.np_dtype.itemsize == 8 and dtype.itemsize == 4 else "")
            + "."
        )
    shape = tuple(value.shape)
    if len(shape) != spec.jax_ndim:
        inner = f" ({spec.warp_ndim} array dims + {spec.inner_shape} element dims)" if spec.inner_shape else ""
        hint = " To run over a batch, use jax.vmap instead of adding leading dims." if label == "argument" else ""
        raise TypeError(
            f"{what}: {label} {spec.name!r} must have {spec.jax_ndim} dims{inner}, got shape {shape}.{hint}"
        )
    if spec.inner_shape and shape[spec.warp_ndim :] != spec.inner_shape:
        raise TypeError(
            f"{what}: {label} {spec.name!r} holds {wp.types.type_repr(spec.dtype)} elements, so its trailing "
            f"dims must be {spec.inner_shape}, got shape {shape}."
        )
    return value if isinstance(value, jax.Array) else jnp.asarray(value)


def check_struct_array(leaf: StructLeaf, spec: ArgSpec, value: object, what: str) -> jax.Array:
    """Check the array given for a struct's array field: a JAX or NumPy array, or a ``wp.array`` of the field's
    dtype and dims (converted with ``wp.to_jax``)."""
    name = leaf.name
    if isinstance(value, wp.array):
        if not wp.types.types_equal(value.dtype, spec.dtype) or value.ndim != spec.warp_ndim:
            raise TypeError(
                f"{what}: struct field {name!r} expects a {spec.phrase()}, got a {value.ndim}-d wp.array of "
                f"{wp.types.type_repr(value.dtype)}."
            )
        value = wp.to_jax(value)
    if not isinstance(value, (jax.Array, np.ndarray)):
        raise TypeError(
            f"{what}: struct field {name!r} expects a {spec.phrase()} as a JAX or NumPy array, got {kind_of(value)}."
        )
    return check_array_value(spec, value, what, "struct field")


def runtime_value(leaf: StructLeaf, value: jax.Array, what: str) -> jax.Array:
    """Check a JAX value given for a struct value field; return it as the one-element operand a kernel reads.

    Returns:
        ``value`` reshaped to ``(1, *leaf.value_shape)``: a one-element ``wp.array`` of the field's type.

    Raises:
        TypeError: naming the field, for a dtype other than the field's or a shape other than its value's.
    """
    expected = _dtypes.to_numpy(_dtypes.scalar_of(leaf.warp_type))
    shape = tuple(leaf.value_shape)
    if np.dtype(value.dtype) != expected:
        raise TypeError(
            f"{what}: struct field {leaf.name!r} is a {leaf.phrase()} field and got a {np.dtype(value.dtype)} "
            f"array; {cast_hint(expected)}."
        )
    if tuple(value.shape) not in (shape, (1, *shape)):
        raise TypeError(
            f"{what}: struct field {leaf.name!r} is a {leaf.phrase()} field, whose value has shape {shape}, and got "
            f"an array of shape {tuple(value.shape)}."
        )
    return jnp.reshape(value, (1, *shape))


def normalize_value(leaf: StructLeaf, value: Any, what: str = "jarp", subject: str = "struct field") -> Any:
    """Check a value field's Python value and normalise it to a hashable Python number or nested tuple.

    Args:
        leaf: the value leaf.
        value: a number, NumPy scalar or array, (nested) sequence, or Warp scalar/vector/matrix.
        what: the caller, prefixed to error messages.
        subject: what the value is, for error messages (``"struct field"``; ``"argument"`` for a value parameter).

    Returns:
        A ``float``/``int``/``bool`` (scalar), a tuple (vector) or a tuple of row tuples (matrix).

    Raises:
        TypeError / ValueError: naming the leaf, for a JAX array or traced value, a wrong
            shape, a non-number, a non-integer or out-of-range value for an integer field.
    """
    name = leaf.name
    shape = leaf.value_shape
    if isinstance(value, jax.Array):
        raise TypeError(
            f"{what}: {subject} {name!r} is a {leaf.phrase()} field and got {kind_of(value)}; here its value is "
            f"baked into the launch, so pass a Python number{' or tuple' if shape else ''}. (jax_kernel's struct value "
            "fields take JAX values, traced and differentiable; a jax_callable's function gets a Warp struct "
            "instance of Python values.)"
        )
    if isinstance(value, ctypes.Array) and hasattr(type(value), "_wp_scalar_type_"):
        value = _composite_to_nested(value)
    value = value.value if is_warp_scalar(type(value)) else value
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = None
    if arr is not None and arr.dtype.type in (np.longdouble, np.clongdouble):
        raise TypeError(f"{what}: {subject} {name!r} got {short_repr(value)}; {LONG_DOUBLE_HINT}")
    if arr is None or arr.dtype.kind not in "biuf":
        hint = structure_hint(value)
        if hint is not None:
            raise TypeError(f"{what}: {subject} {name!r} {hint}")
        raise TypeError(
            f"{what}: {subject} {name!r} expects a {leaf.phrase()} ({shape if shape else 'a number'}), "
            f"got {kind_of(value)}."
        )
    if arr.shape != shape:
        raise ValueError(f"{what}: {subject} {name!r} expects a {leaf.phrase()} of shape {shape}, got {arr.shape}.")
    scalar = leaf.scalar_type
    if wp.types.type_is_float(scalar):
        out = arr.astype(np.float64)
    elif scalar is wp.bool:
        out = arr.astype(bool)
    else:
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise TypeError(
                f"{what}: {subject} {name!r} is an integer field ({leaf.phrase()}), got {short_repr(value)}."
            )
        info = np.iinfo(np.dtype(wp.dtype_to_numpy(scalar)))
        ints = [int(x) for x in arr.reshape(-1).tolist()]
        if any(not info.min <= x <= info.max for x in ints):
            raise ValueError(
                f"{what}: {subject} {name!r} = {short_repr(value)} does not fit its "
                f"{wp.types.type_repr(scalar)} range [{info.min}, {info.max}]."
            )
        out = np.array(ints, dtype=object).reshape(arr.shape)
    return _to_tuple(out.tolist())


def _composite_to_nested(value: Any) -> list[Any]:
    shape = _warp_types.vector_shape(type(value))
    if len(shape) == 1:
        return [getattr(value[i], "value", value[i]) for i in range(shape[0])]
    return [[getattr(value[i, j], "value", value[i, j]) for j in range(shape[1])] for i in range(shape[0])]


def _to_tuple(x: object) -> Any:
    return tuple(_to_tuple(v) for v in x) if isinstance(x, list) else x


# The longest repr of a user's value an error message quotes; longer ones are cut (never an array's contents).
REPR_LIMIT = 60


def short_repr(value: object, limit: int = REPR_LIMIT) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (a summary for arrays, see `kind_of`)."""
    if isinstance(value, np.ndarray) and value.size <= 16:  # a value field's vector or matrix: its numbers
        value = value.tolist()
    elif isinstance(value, (jax.Array, np.ndarray, wp.array)):
        return kind_of(value)
    try:
        text = " ".join(repr(value).split())
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def kind_of(value: object) -> str:
    """A short description of a value for messages: shape and dtype for arrays, a cut repr for numbers and strings,
    the type's name for anything else (never an array's contents)."""
    if isinstance(value, jax.core.Tracer):
        return f"a traced value ({value.aval.str_short()})"
    if isinstance(value, (jax.Array, np.ndarray)):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    if isinstance(value, wp.array):
        return f"a wp.array of shape {tuple(value.shape)} and dtype {wp.types.type_repr(value.dtype)}"
    if value is None or np.isscalar(value):
        return f"{type(value).__name__} {short_repr(value)}"
    return type(value).__name__
