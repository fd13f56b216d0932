"""The byte layout of ``wp.struct`` kernel parameters, flattened into array and value leaves.

Warp passes a struct parameter by value: its ctypes layout (``Struct.ctype``,
nested structs inlined) sits in the kernel's argument block like any other
parameter. Each ``wp.array`` field is an ``array_t`` (data, grad, shape,
strides, ndim, flags) and each value field (scalar, vector, matrix,
quaternion, transform) its plain C representation. jarp treats a struct as a
flat list of *leaves*:

- array leaves become operands of the launch: their ``array_t`` is written
  into the template with shape and contiguous strides, and their ``data``
  pointer is patched per call (`jarp.warp._ffi._struct_bytes.pointer_slots`);
- value leaves are static: they are written into the template once, from
  Python numbers or tuples (a JAX array is refused, like a traced value).

This module describes the type (leaves, offsets, ctypes layout); the binding of a struct
argument's value is in `_binding`/`_arg_checks`, and the argument-block bytes the executors
write are in `jarp.warp._ffi._struct_bytes`.

The backward launch takes the primal block and an adjoint block with the same
parameters. For a struct parameter Warp's generated backward code
(``warp/_src/codegen.py``: a member access ``s.x`` gets a fresh, zeroed
adjoint local) calls ``adj_address(buf, i, adj_buf, ...)`` /
``adj_array_store`` (``warp/native/array.h``) with ``adj_buf`` null, so the
gradient of an array field is read and accumulated through the ``grad``
pointer of the field's ``array_t`` in the *primal* struct. The adjoint struct
is never read. ``wp.Tape`` (``warp/_src/tape.py``, ``Tape.get_adjoint``) sets
both: the primal struct's arrays carry ``grad`` (``array.__ctype__``), and the
adjoint struct is a struct of the same type whose array fields are the
gradient arrays. jarp does the same:

- primal block: ``struct_bytes``, ``data`` at ``pointer_slots``, the gradient
  buffer of each array field at ``grad_pointer_slots`` (0 for a field without
  a gradient: Warp then drops its contribution);
- adjoint block: ``adjoint_struct_bytes`` (same shapes, value fields zero), the
  same gradient buffers at ``pointer_slots``.

Example:
    >>> import warp as wp
    >>> @wp.struct
    ... class Spring:
    ...     ends: wp.array(dtype=wp.vec2i)
    ...     stiffness: wp.float32
    >>> layout = struct_layout(Spring, "spring")
    >>> [leaf.name for leaf in layout.leaves]
    ['spring.ends', 'spring.stiffness']
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from typing import Any

import warp as wp

from .._upstream import _warp_types
from . import _cache_table, _dtypes
from ._arg_spec import ArgSpec, arg_spec, array_kind_error


@dataclasses.dataclass(frozen=True)
class StructLeaf:
    """One array or value field of a (possibly nested) struct parameter.

    Attributes:
        path: the parameter name followed by the field names, e.g. ``("mesh", "verts")``.
        offset: byte offset of the field inside the top-level struct's ctypes layout.
        warp_type: the field's Warp annotation (``wp.array(dtype=wp.vec3f)``, ``wp.float32``, ``wp.mat33d``...).
        spec: for an array field, how it looks from JAX (named like `name`); None for a value field.
    """

    path: tuple[str, ...]
    offset: int
    warp_type: Any
    spec: ArgSpec | None

    @property
    def name(self) -> str:
        """The dotted display name, e.g. ``mesh.verts``."""
        return ".".join(self.path)

    @property
    def is_array(self) -> bool:
        return self.spec is not None

    @property
    def scalar_type(self) -> Any:
        """The Warp scalar type of the field's elements (of the array, or of the value)."""
        if self.spec is not None:
            return self.spec.scalar_type
        return getattr(self.warp_type, "_wp_scalar_type_", self.warp_type)

    @property
    def value_shape(self) -> tuple[int, ...]:
        """Shape of a value field: ``()`` for a scalar, ``(n,)`` for a vector, ``(r, c)`` for a matrix."""
        if self.spec is not None:
            return self.spec.inner_shape
        return _dtypes.element_shape(self.warp_type) if _dtypes.is_composite(self.warp_type) else ()

    def phrase(self) -> str:
        if self.spec is not None:
            return self.spec.phrase()
        return f"value {wp.types.type_repr(self.warp_type)}"


@dataclasses.dataclass(frozen=True)
class StructLayout:
    """A Warp struct type flattened into leaves, in memory (declaration, depth-first) order.

    Attributes:
        param: the kernel parameter's name.
        struct_type: the Warp struct type (what ``@wp.struct`` returned).
        leaves: every array and value field, nested structs inlined.
        size: ``ctypes.sizeof`` of the struct.
        alignment: ``ctypes.alignment`` of the struct.
    """

    param: str
    struct_type: Any
    leaves: tuple[StructLeaf, ...]
    size: int
    alignment: int

    def phrase(self) -> str:
        """The struct's name, e.g. ``Mesh``."""
        return _warp_types.struct_name(self.struct_type)

    @property
    def ctype(self) -> type[ctypes.Structure]:
        """The struct's ctypes type: use it as the field type of the parameter in an argument block."""
        return _warp_types.struct_ctype(self.struct_type)

    @property
    def arrays(self) -> tuple[StructLeaf, ...]:
        """The array leaves, in layout order (the order of `FlatStruct.arrays`)."""
        return tuple(leaf for leaf in self.leaves if leaf.is_array)

    @property
    def values(self) -> tuple[StructLeaf, ...]:
        """The value leaves, in layout order (the order of `FlatStruct.statics`)."""
        return tuple(leaf for leaf in self.leaves if not leaf.is_array)

    @property
    def array_specs(self) -> tuple[ArgSpec, ...]:
        """The `ArgSpec` of each array leaf, named by its dotted path."""
        return tuple(leaf.spec for leaf in self.arrays if leaf.spec is not None)


@_cache_table.register_function
@functools.lru_cache(maxsize=256)
def struct_layout(struct_type: Any, param_name: str) -> StructLayout:
    """Flatten a Warp struct type into the leaves jarp binds (cached per type and name).

    Args:
        struct_type: a Warp struct type (``@wp.struct`` class, or a `jarp.warp.struct`
            specialisation ``Cls[wp.float64]``).
        param_name: the kernel parameter's name; the first element of every leaf path.

    Returns:
        The `StructLayout`, hashable and frozen.

    Raises:
        TypeError: naming the field, for a field jarp cannot pass: an array of structs,
            an indexed or Fabric array, a texture, a generic (``Any``) or native type.

    Example:
        >>> import warp as wp
        >>> @wp.struct
        ... class Material:
        ...     mu: wp.float64
        ...     dirs: wp.array(dtype=wp.vec3d)
        >>> [(leaf.name, leaf.offset) for leaf in struct_layout(Material, "mat").leaves]
        [('mat.mu', 0), ('mat.dirs', 8)]
    """
    if not _warp_types.is_struct_type(struct_type):
        raise TypeError(
            f"parameter {param_name!r}: expected a Warp struct type (from @wp.struct), got {struct_type!r}."
        )
    leaves: list[StructLeaf] = []
    _collect(struct_type, (param_name,), 0, leaves)
    ctype = _warp_types.struct_ctype(struct_type)
    return StructLayout(param_name, struct_type, tuple(leaves), ctypes.sizeof(ctype), ctypes.alignment(ctype))


def _collect(struct_type: Any, path: tuple[str, ...], base: int, leaves: list[StructLeaf]) -> None:
    ctype = _warp_types.struct_ctype(struct_type)
    for field, warp_type in _warp_types.struct_fields(struct_type):
        fpath = (*path, field)
        name = ".".join(fpath)
        offset = base + getattr(ctype, field).offset
        if _warp_types.is_struct_type(warp_type):
            _collect(warp_type, fpath, offset, leaves)
        elif wp.types.is_array(warp_type):
            leaves.append(StructLeaf(fpath, offset, warp_type, _array_spec(name, warp_type)))
        elif is_value_type(warp_type):
            leaves.append(StructLeaf(fpath, offset, warp_type, None))
        else:
            raise TypeError(
                f"struct field {name!r} has type {wp.types.type_repr(warp_type)}; jarp passes struct fields that are "
                "wp.array of scalars/vectors/matrices, scalars, vectors, matrices, quaternions, transforms or nested "
                "structs."
            )


def _array_spec(name: str, warp_type: Any) -> ArgSpec:
    kind_error = array_kind_error(f"struct field {name!r}", warp_type)
    if kind_error is not None:
        raise kind_error
    dtype = warp_type.dtype
    if _warp_types.is_struct_type(dtype):
        raise TypeError(
            f"struct field {name!r} is an array of structs ({_warp_types.struct_name(dtype)}); jarp cannot pass arrays of "
            "structs. Use one array per struct field instead (a struct of arrays)."
        )
    if dtype is Any or isinstance(dtype, str) or getattr(dtype, "__name__", None) == "Any":
        raise TypeError(f"struct field {name!r} is an array of generic dtype; give it a concrete dtype.")
    return arg_spec(name, warp_type, what="struct")


def passed_by_value(warp_type: object) -> bool:
    """A parameter type passed by value, holding no array: Python's ``int``, ``float``, ``bool`` or a Warp value type
    (`is_value_type`)."""
    return warp_type in (int, float, bool) or is_value_type(warp_type)


def is_value_type(warp_type: object) -> bool:
    """A Warp scalar, vector, matrix, quaternion or transform type (a struct field of one is a value leaf)."""
    if warp_type is wp.bool:
        return True
    return is_warp_scalar(warp_type) or (
        isinstance(warp_type, type) and issubclass(warp_type, ctypes.Array) and wp.types.type_is_composite(warp_type)
    )


def is_warp_scalar(t: object) -> bool:
    """Whether ``t`` is one of Warp's scalar classes (``wp.float32``, ``wp.bool``...; not Python's)."""
    return t is wp.bool or (isinstance(t, type) and t not in (int, float) and wp.types.type_is_scalar(t))
