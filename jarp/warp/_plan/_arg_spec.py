"""How one kernel parameter (or struct array field) looks from JAX: `ArgSpec`, built from a Warp annotation.

The base of the plan stage: struct layouts (`_struct_layout`) are made of these specs, and signatures
(`_signature`) of these specs and struct layouts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np
import warp as wp

from .._upstream import _warp_types
from . import _dtypes

MAX_WARP_NDIM = 4
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
            `_struct_layout.StructLayout`); the parameter is then neither an array
            nor a scalar: its array fields are operands, its value fields static.
        structure: for a function parameter taking a Warp structure (``wp.Mesh``, ``wp.Bvh``, ``wp.HashGrid``,
            ``wp.Volume``, the class in ``dtype``): the call gives it a jarp pytree, whose arrays are bound in
            its place (`jarp.warp.Mesh`...).
    """

    name: str
    is_array: bool
    dtype: Any
    warp_ndim: int
    inner_shape: tuple[int, ...]
    in_out: bool = False
    struct: Any = None
    structure: bool = False

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

    @property
    def element_name(self) -> str:
        """Warp's name of the element (or scalar) type: ``"vec3f"``, ``"float32"``; ``"Any"`` when generic."""
        return "Any" if self.generic else wp.types.type_repr(self.dtype)

    def phrase(self) -> str:
        if self.structure:
            return f"Warp structure wp.{self.dtype.__name__}"
        if self.is_struct:
            return f"struct {self.struct.phrase()}"
        if not self.is_array:
            return f"scalar {getattr(self.dtype, '__name__', self.dtype)}"
        return f"{self.warp_ndim}-d wp.array of {self.element_name}"


def describe_type(warp_type: Any) -> str:
    """How an error message names a parameter's Warp annotation: ``a 1-d wp.array of float32``, ``wp.uint64``."""
    if wp.types.is_array(warp_type):
        return f"a {warp_type.ndim}-d wp.array of {_dtype_name(warp_type.dtype)}"
    name = _dtype_name(warp_type)
    return name if name.startswith("wp.") or not wp.types.type_is_value(warp_type) else f"wp.{name}"


def _dtype_name(dtype: object) -> str:
    """How an error message names a Warp type: ``float32``, ``vec3f``, ``Any``, a struct's name, ``wp.Texture2D``."""
    name = getattr(dtype, "__name__", None)
    if dtype is Any or name == "Any":
        return "Any"
    if isinstance(dtype, type) and name and getattr(wp, name, None) is dtype and not wp.types.type_is_value(dtype):
        return f"wp.{name}"  # a Warp class with a public name (wp.Texture2D, wp.Mesh, wp.handle)
    if _warp_types.is_struct_type(dtype):
        return _warp_types.struct_name(dtype)
    try:
        return wp.types.type_repr(dtype)
    except Exception:  # not a Warp type at all
        return repr(dtype)


# What to do instead of each array kind jarp does not pass (see `_warp_types.array_kind`).
_KIND_ADVICE = {
    "indexedarray": (
        "an indexed view (an array plus one index array per dim) that jarp does not build. Annotate it as a "
        "plain wp.array and do the indexing in the kernel (pass the indices as another wp.array(dtype=wp.int32) "
        "and read a[indices[i]]), or gather the values with jnp.take before the call"
    ),
    "fabricarray": (
        "an array of Omniverse Fabric attribute buckets, which JAX arrays are not. Annotate it as a plain "
        "wp.array and pass the values as a JAX array (copied out of Fabric first)"
    ),
    "indexedfabricarray": (
        "an indexed view of Omniverse Fabric attribute buckets, which JAX arrays are not. Annotate it as a plain "
        "wp.array and pass the values as a JAX array (copied and gathered out of Fabric first)"
    ),
    "fixedarray": "a stack array local to Warp code, which cannot be a parameter. Annotate it as a plain wp.array",
}


def array_kind_error(subject: str, warp_type: object) -> TypeError | None:
    """The error for an array annotation of a kind jarp does not pass; None for a plain ``wp.array``.

    Each of Warp's array classes is a different kernel argument (``wp.indexedarray`` is an
    ``indexedarray_t``, larger than the ``array_t`` jarp writes), so only ``wp.array`` is passed, and
    the others are refused when the signature is parsed instead of packed as something else.

    Args:
        subject: what the annotation belongs to, e.g. ``"jax_kernel() parameter 'a'"`` or
            ``"struct field 'mesh.verts'"``.
        warp_type: an array annotation (``wp.types.is_array`` is true of it).
    """
    kind = _warp_types.array_kind(warp_type)
    if kind == "array":
        return None
    advice = _KIND_ADVICE.get(kind or "", "an array kind jarp does not know. Annotate it as a plain wp.array")
    ndim = getattr(warp_type, "ndim", "?")
    return TypeError(
        f"{subject} is a wp.{kind} ({ndim}-d, of {_dtype_name(getattr(warp_type, 'dtype', Any))}); jarp passes "
        f"plain wp.array arrays only, and a wp.{kind} is {advice}."
    )


def _unsupported_advice(warp_type: object) -> str:
    """What to do instead of a parameter type jarp does not pass (for the message of `arg_spec`)."""
    name = getattr(warp_type, "__name__", "")
    if name.startswith(("Texture", "texture")):
        return (
            "a Warp texture is a texture object that JAX cannot supply; pass the texels as a wp.array and "
            "interpolate them in the kernel"
        )
    if name in ("Mesh", "Volume", "Bvh", "HashGrid"):
        return (
            f"a kernel takes a wp.{name} by its id: annotate the parameter as wp.uint64 and pass a "
            f"jarp.warp.{name}(...) pytree (built inside the call) or the object's .id"
        )
    if warp_type is wp.handle:
        return "annotate an object id as wp.uint64 and pass the object's .id"
    if isinstance(warp_type, TypeVar):
        return "annotate a generic parameter as typing.Any and pick the overload with arg_types_factory"
    if getattr(warp_type, "__origin__", None) is tuple:
        return "pass the tuple's elements as separate parameters, or as a vector (wp.vec3...)"
    if wp.types.is_tile(warp_type):
        return "tiles live inside a kernel; pass a wp.array and load it with wp.tile_load"
    return "pass it as a wp.array, a wp.struct or a scalar/vector/matrix value"


def arg_spec(name: str, warp_type: Any, *, in_out: bool = False, what: str = "kernel") -> ArgSpec:
    """Build an `ArgSpec` from a Warp type annotation of an array or a scalar (`_signature.param_spec` adds structs).

    Raises:
        TypeError: naming the parameter and its kind, for a kind jarp does not pass (an indexed or
            Fabric array, an array of structs, a texture, a tile, a tuple, a Warp object type...).
    """
    if wp.types.is_array(warp_type):
        kind_error = array_kind_error(f"{what} parameter {name!r}", warp_type)
        if kind_error is not None:
            raise kind_error
        if warp_type.ndim > MAX_WARP_NDIM:
            raise TypeError(
                f"{what} parameter {name!r} is a {warp_type.ndim}-d array; Warp arrays have at most "
                f"{MAX_WARP_NDIM} dims."
            )
        dtype = warp_type.dtype
        if dtype is Any or isinstance(dtype, str) or getattr(dtype, "__name__", None) == "Any":
            return ArgSpec(name, True, None, warp_type.ndim, (), in_out)
        if not _dtypes.is_element(dtype):
            raise TypeError(
                f"{what} parameter {name!r} is an array of {_dtype_name(dtype)}, which JAX cannot carry; jarp passes "
                "arrays of Warp scalars and of their vectors, matrices, quaternions, transforms and spatial "
                "vectors/matrices. Pass a struct's fields as separate arrays (or as a wp.struct of arrays)."
            )
        return ArgSpec(name, True, dtype, warp_type.ndim, _dtypes.element_shape(dtype), in_out)
    if _warp_types.is_struct_type(warp_type):
        raise TypeError(
            f"{what} parameter {name!r}: a wp.struct's spec needs its layout (see `_signature.param_spec`)."
        )
    if warp_type is Any:
        return ArgSpec(name, False, None, 0, (), in_out)
    if warp_type in _PYTHON_SCALARS:
        return ArgSpec(name, False, _PYTHON_SCALARS[warp_type], 0, (), in_out)
    if wp.types.type_is_value(warp_type):
        return ArgSpec(name, False, warp_type, 0, (), in_out)
    raise TypeError(
        f"{what} parameter {name!r} has type {_dtype_name(warp_type)}; jarp passes wp.array, wp.struct and "
        f"scalar/vector/matrix value parameters only: {_unsupported_advice(warp_type)}."
    )
