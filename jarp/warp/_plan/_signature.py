"""Parse a Warp kernel's (or annotated function's) parameters into JAX-facing argument specs."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from .._upstream import _warp_internals
from . import _dtypes

ShapeLike = int | Sequence[int]

_MAX_WARP_NDIM = 4
_PYTHON_SCALARS = {float: wp.float32, int: wp.int32, bool: wp.bool}


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """How one kernel parameter looks from JAX.

    Attributes:
        name: the parameter's name.
        is_array: whether it is a ``wp.array`` (otherwise a scalar).
        dtype: the Warp element type (``wp.vec3f``, ``wp.float32``...) or None when generic.
        warp_ndim: number of Warp array dimensions (0 for scalars).
        inner_shape: trailing JAX dims of a vector/matrix element (``(3,)`` for vec3).
        in_out: whether the array is both read and returned.
        struct: for a ``wp.struct`` parameter, its flattened layout (a
            ``_struct_layout.StructLayout``); the parameter is then neither an array
            nor a scalar: its array fields are operands, its value fields static.
    """

    name: str
    is_array: bool
    dtype: Any
    warp_ndim: int
    inner_shape: tuple[int, ...]
    in_out: bool = False
    struct: Any = None

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    @property
    def generic(self) -> bool:
        return self.dtype is None

    @property
    def jax_ndim(self) -> int:
        return self.warp_ndim + len(self.inner_shape)

    @property
    def scalar_type(self) -> Any:
        return _dtypes.scalar_of(self.dtype)

    @property
    def np_dtype(self) -> np.dtype:
        return _dtypes.to_numpy(self.dtype)

    def describe(self) -> str:
        if self.is_struct:
            return f"struct {self.struct.describe()}"
        if not self.is_array:
            return f"scalar {getattr(self.dtype, '__name__', self.dtype)}"
        elem = "Any" if self.generic else wp.types.type_repr(self.dtype)
        return f"{self.warp_ndim}-d wp.array of {elem}"


def arg_spec(name: str, warp_type: Any, *, in_out: bool = False, what: str = "kernel") -> ArgSpec:
    """Build an `ArgSpec` from a Warp type annotation."""
    if wp.types.is_array(warp_type):
        if warp_type.ndim > _MAX_WARP_NDIM:
            raise TypeError(
                f"{what} parameter {name!r} is a {warp_type.ndim}-d array; Warp arrays have at most "
                f"{_MAX_WARP_NDIM} dims."
            )
        dtype = warp_type.dtype
        if dtype is Any or isinstance(dtype, str) or getattr(dtype, "__name__", None) == "Any":
            return ArgSpec(name, True, None, warp_type.ndim, (), in_out)
        if wp.types.type_is_vector(dtype) or wp.types.type_is_matrix(dtype):
            inner = tuple(int(d) for d in dtype._shape_)
        elif wp.types.type_is_value(dtype):
            inner = ()
        else:
            raise TypeError(
                f"{what} parameter {name!r} is an array of {wp.types.type_repr(dtype)}; jarp passes arrays of "
                "scalars, vectors or matrices only."
            )
        return ArgSpec(name, True, dtype, warp_type.ndim, inner, in_out)
    if _warp_internals.is_struct_type(warp_type):
        from ._struct_layout import struct_layout  # the layout module builds on ArgSpec

        return ArgSpec(name, False, warp_type, 0, (), in_out, struct=struct_layout(warp_type, name))
    if warp_type is Any:
        return ArgSpec(name, False, None, 0, (), in_out)
    if warp_type in _PYTHON_SCALARS:
        return ArgSpec(name, False, _PYTHON_SCALARS[warp_type], 0, (), in_out)
    if wp.types.type_is_value(warp_type):
        return ArgSpec(name, False, warp_type, 0, (), in_out)
    raise TypeError(
        f"{what} parameter {name!r} has type {warp_type!r}; jarp passes wp.array, wp.struct and scalar "
        "(int/float/bool) parameters only."
    )


@dataclasses.dataclass(frozen=True)
class Signature:
    """The parameters of a kernel split into inputs (including in-out) and pure outputs."""

    params: tuple[ArgSpec, ...]
    num_outputs: int

    @property
    def num_inputs(self) -> int:
        return len(self.params) - self.num_pure_outputs

    @property
    def num_pure_outputs(self) -> int:
        return self.num_outputs - self.num_in_out

    @property
    def num_in_out(self) -> int:
        return sum(p.in_out for p in self.params)

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return self.params[self.num_inputs :]

    @property
    def in_out(self) -> tuple[ArgSpec, ...]:
        return tuple(p for p in self.inputs if p.in_out)


def make_signature(
    params: Sequence[tuple[str, Any]], num_outputs: int, in_out_argnames: tuple[str, ...], *, what: str
) -> Signature:
    """Validate the output options against a parameter list and build a `Signature`.

    Raises:
        ValueError / TypeError naming the offending option.
    """
    names = [name for name, _ in params]
    if isinstance(num_outputs, bool) or not isinstance(num_outputs, int):
        raise TypeError(f"{what}: num_outputs must be an int, got {num_outputs!r}.")
    if num_outputs < 1:
        raise ValueError(f"{what}: num_outputs must be at least 1 (a kernel needs an output), got {num_outputs}.")
    if num_outputs > len(params):
        raise ValueError(
            f"{what}: num_outputs={num_outputs} exceeds the number of parameters ({len(params)}: {names})."
        )
    if len(set(in_out_argnames)) != len(in_out_argnames):
        # Warp's wording ("must not contain duplicate names", "did not match any function argument names",
        # "should be placed before output-only arguments") is kept, so code ported from Warp's bridge that
        # matches on it keeps working.
        raise ValueError(
            f"{what}: in_out_argnames must not contain duplicate names, got {list(in_out_argnames)}; "
            "name each in-out argument once."
        )
    for name in in_out_argnames:
        if name not in names:
            raise ValueError(
                f"{what}: in_out_argnames {name!r} did not match any function argument names (have {names})."
            )
    num_inputs = len(params) - num_outputs + len(in_out_argnames)
    if len(in_out_argnames) > num_outputs:
        raise ValueError(
            f"{what}: in_out_argnames has {len(in_out_argnames)} names but num_outputs={num_outputs}; "
            "num_outputs counts in-out arguments too."
        )
    specs = []
    for i, (name, warp_type) in enumerate(params):
        in_out = name in in_out_argnames
        if in_out and i >= num_inputs:
            raise ValueError(
                f"{what}: in_out_argnames names {name!r}, which comes after the pure outputs; in_out arguments "
                f"should be placed before output-only arguments (the last {num_outputs - len(in_out_argnames)} "
                "parameters), or raise num_outputs."
            )
        spec = arg_spec(name, warp_type, in_out=in_out, what=what)
        if (i >= num_inputs or in_out) and spec.is_struct:
            raise TypeError(
                f"{what}: output parameter {name!r} is a {spec.describe()}; jarp does not return structs. Make "
                "the struct an input and its arrays pure outputs (separate array parameters), or lower num_outputs."
            )
        if (i >= num_inputs or in_out) and not spec.is_array:
            raise TypeError(f"{what}: output parameter {name!r} must be a wp.array, got {spec.describe()}.")
        specs.append(spec)
    return Signature(tuple(specs), num_outputs)


# Warp stores array shapes and thread indices as 32-bit signed ints.
MAX_EXTENT = 2**31 - 1


def _dim(d: Any) -> int:
    if isinstance(d, bool):
        raise TypeError
    return operator.index(d)


def normalize_dims(value: ShapeLike, what: str, max_extent: int | None = MAX_EXTENT) -> tuple[int, ...]:
    """Turn an int or a sequence of ints into a tuple of ints in ``[0, max_extent]`` (no upper bound for None)."""
    try:
        if isinstance(value, (str, bytes, Mapping)) or (
            isinstance(value, Iterable) and not isinstance(value, Sequence)
        ):
            raise TypeError
        dims = tuple(_dim(d) for d in value) if isinstance(value, Iterable) else (_dim(value),)
    except TypeError:
        raise TypeError(f"{what} must be an int or a sequence (tuple, list) of ints, got {value!r}.") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} must be non-negative, got {dims}.")
    if max_extent is not None and any(d > max_extent for d in dims):
        raise ValueError(f"{what} has an extent above Warp's limit of 2**31 - 1: {dims}.")
    return dims


def normalize_output_dims(value: Any, what: str) -> Any:
    """Normalise ``output_dims`` into a hashable value: None, a tuple of ints, or a sorted tuple of pairs."""
    if value is None:
        return None
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value)
    ):
        value = dict(value)  # already normalised
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"{what} keys must be output names (str), got {bad!r}.")
        return tuple(sorted((k, normalize_dims(v, f"{what}[{k!r}]")) for k, v in value.items()))
    return normalize_dims(value, what)


def output_dims_for(spec: ArgSpec, dims: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Accept Warp (without inner dims) or JAX (with them) convention; return Warp dims."""
    if len(dims) == spec.warp_ndim:
        return dims
    n_inner = len(spec.inner_shape)
    if n_inner and len(dims) == spec.jax_ndim and dims[spec.warp_ndim :] == spec.inner_shape:
        return dims[: spec.warp_ndim]
    expect = f"{spec.warp_ndim} dims"
    if n_inner:
        expect += f" (or {spec.jax_ndim} ending in {spec.inner_shape})"
    raise ValueError(f"{what} for output {spec.name!r} ({spec.describe()}) must have {expect}, got {dims}.")


def check_launch_dims(dims: tuple[int, ...], what: str) -> tuple[int, ...]:
    if not 1 <= len(dims) <= _MAX_WARP_NDIM:
        raise ValueError(f"{what} must have 1 to {_MAX_WARP_NDIM} dims, got {dims}.")
    return dims


FOLD_METHODS = ("broadcast_all", "expand_dims")
VMAP_METHODS = ("sequential", *FOLD_METHODS)


def check_vmap_method(value: Any, what: str) -> str:
    if value not in VMAP_METHODS:
        raise ValueError(
            f"{what}: unknown vmap_method {value!r}; use 'sequential' (default, correct for any kernel) or "
            "'broadcast_all' (fold the batch into the launch; only for elementwise kernels)."
        )
    return value


def tuple_of_str(value: Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


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
            f"({spec.describe()}); cast it with .astype(jnp.{spec.np_dtype.name})"
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
