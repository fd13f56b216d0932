"""How one kernel parameter (or struct array field) looks from JAX: `ArgSpec`, built from a Warp annotation.

The base of the plan stage: struct layouts (`_struct_layout`) are made of these specs, and signatures
(`_signature`) of these specs and struct layouts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import warp as wp

from .._upstream import _warp_internals
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

    @property
    def element_name(self) -> str:
        """Warp's name of the element (or scalar) type: ``"vec3f"``, ``"float32"``; ``"Any"`` when generic."""
        return "Any" if self.generic else wp.types.type_repr(self.dtype)

    def describe(self) -> str:
        if self.is_struct:
            return f"struct {self.struct.describe()}"
        if not self.is_array:
            return f"scalar {getattr(self.dtype, '__name__', self.dtype)}"
        return f"{self.warp_ndim}-d wp.array of {self.element_name}"


def arg_spec(name: str, warp_type: Any, *, in_out: bool = False, what: str = "kernel") -> ArgSpec:
    """Build an `ArgSpec` from a Warp type annotation of an array or a scalar (`_signature.param_spec` adds structs)."""
    if wp.types.is_array(warp_type):
        if warp_type.ndim > MAX_WARP_NDIM:
            raise TypeError(
                f"{what} parameter {name!r} is a {warp_type.ndim}-d array; Warp arrays have at most "
                f"{MAX_WARP_NDIM} dims."
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
        f"{what} parameter {name!r} has type {warp_type!r}; jarp passes wp.array, wp.struct and scalar "
        "(int/float/bool) parameters only."
    )
