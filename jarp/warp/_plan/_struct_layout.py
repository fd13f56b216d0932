"""The byte layout of ``wp.struct`` kernel parameters, flattened into array and value leaves.

Warp passes a struct parameter by value: its ctypes layout (``Struct.ctype``,
nested structs inlined) sits in the kernel's argument block like any other
parameter. Each ``wp.array`` field is an ``array_t`` (data, grad, shape,
strides, ndim, flags) and each value field (scalar, vector, matrix,
quaternion, transform) its plain C representation. jarp treats a struct as a
flat list of *leaves*:

- array leaves become operands of the launch: their ``array_t`` is written
  into the template with shape and contiguous strides, and their ``data``
  pointer is patched per call at `pointer_slots`;
- value leaves are static: they are written into the template once, from
  Python numbers or tuples (a JAX array is refused, like a traced value).

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

- primal block: `struct_bytes`, ``data`` at `pointer_slots`, the gradient
  buffer of each array field at `grad_pointer_slots` (0 for a field without
  a gradient: Warp then drops its contribution);
- adjoint block: `adjoint_struct_bytes` (same shapes, value fields zero), the
  same gradient buffers at `pointer_slots`.

Example:
    >>> import warp as wp
    >>> @wp.struct
    ... class Spring:
    ...     ends: wp.array(dtype=wp.vec2i)
    ...     stiffness: wp.float32
    >>> layout = struct_layout(Spring, "spring")
    >>> [leaf.name for leaf in layout.leaves]
    ['spring.ends', 'spring.stiffness']
    >>> pointer_slots(layout)
    (0,)
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
import warp as wp

from .._upstream import _warp_internals
from ._signature import ArgSpec, arg_spec, check_array_value

__all__ = [
    "FlatStruct",
    "StructLayout",
    "StructLeaf",
    "adjoint_struct_bytes",
    "flatten_struct_value",
    "grad_pointer_slots",
    "make_struct_instance",
    "normalize_value",
    "pointer_slots",
    "struct_bytes",
    "struct_layout",
]

_DATA_OFFSET = _warp_internals.ArrayStruct.data.offset
_GRAD_OFFSET = _warp_internals.ArrayStruct.grad.offset
_ARRAY_T_SIZE = ctypes.sizeof(_warp_internals.ArrayStruct)


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
        return tuple(int(d) for d in getattr(self.warp_type, "_shape_", ()))

    def describe(self) -> str:
        if self.spec is not None:
            return self.spec.describe()
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

    def describe(self) -> str:
        """The struct's name, e.g. ``Mesh``."""
        return _warp_internals.struct_name(self.struct_type)

    @property
    def ctype(self) -> type[ctypes.Structure]:
        """The struct's ctypes type: use it as the field type of the parameter in an argument block."""
        return _warp_internals.struct_ctype(self.struct_type)

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
    if not _warp_internals.is_struct_type(struct_type):
        raise TypeError(
            f"parameter {param_name!r}: expected a Warp struct type (from @wp.struct), got {struct_type!r}."
        )
    leaves: list[StructLeaf] = []
    _collect(struct_type, (param_name,), 0, leaves)
    ctype = _warp_internals.struct_ctype(struct_type)
    return StructLayout(param_name, struct_type, tuple(leaves), ctypes.sizeof(ctype), ctypes.alignment(ctype))


def _collect(struct_type: Any, path: tuple[str, ...], base: int, leaves: list[StructLeaf]) -> None:
    ctype = _warp_internals.struct_ctype(struct_type)
    for field, warp_type in _warp_internals.struct_fields(struct_type):
        fpath = (*path, field)
        name = ".".join(fpath)
        offset = base + getattr(ctype, field).offset
        if _warp_internals.is_struct_type(warp_type):
            _collect(warp_type, fpath, offset, leaves)
        elif wp.types.is_array(warp_type):
            leaves.append(StructLeaf(fpath, offset, warp_type, _array_spec(name, warp_type)))
        elif _is_value_type(warp_type):
            leaves.append(StructLeaf(fpath, offset, warp_type, None))
        else:
            raise TypeError(
                f"struct field {name!r} has type {wp.types.type_repr(warp_type)}; jarp passes struct fields that are "
                "wp.array of scalars/vectors/matrices, scalars, vectors, matrices, quaternions, transforms or nested "
                "structs."
            )


def _array_spec(name: str, warp_type: Any) -> ArgSpec:
    if type(warp_type) is not wp.array:
        raise TypeError(
            f"struct field {name!r} is a {type(warp_type).__name__}; jarp passes plain wp.array fields only "
            "(no indexed or Fabric arrays)."
        )
    dtype = warp_type.dtype
    if _warp_internals.is_struct_type(dtype):
        raise TypeError(
            f"struct field {name!r} is an array of structs ({_warp_internals.struct_name(dtype)}); jarp cannot pass arrays of "
            "structs. Use one array per struct field instead (a struct of arrays)."
        )
    if dtype is Any or isinstance(dtype, str) or getattr(dtype, "__name__", None) == "Any":
        raise TypeError(f"struct field {name!r} is an array of generic dtype; give it a concrete dtype.")
    return arg_spec(name, warp_type, what="struct")


def _is_value_type(warp_type: Any) -> bool:
    if warp_type is wp.bool:
        return True
    return _is_warp_scalar(warp_type) or (
        isinstance(warp_type, type) and issubclass(warp_type, ctypes.Array) and wp.types.type_is_composite(warp_type)
    )


def _is_warp_scalar(t: Any) -> bool:
    """Whether ``t`` is one of Warp's scalar classes (``wp.float32``, ``wp.bool``...; not Python's)."""
    return t is wp.bool or (isinstance(t, type) and t not in (int, float) and wp.types.type_is_scalar(t))


# -- JAX-side values --


class FlatStruct(NamedTuple):
    """A struct argument flattened along a `StructLayout`.

    Attributes:
        arrays: one JAX array per array leaf, in layout order (with the element's trailing dims).
        statics: one normalised value per value leaf, in layout order: a Python ``float``/``int``/``bool``
            for a scalar, a tuple for a vector, a tuple of row tuples for a matrix (hashable).
    """

    arrays: tuple[jax.Array, ...]
    statics: tuple[Any, ...]


def flatten_struct_value(layout: StructLayout, value: Any, what: str = "jarp") -> FlatStruct:
    """Check a JAX-side struct argument against its layout and split it into array and value leaves.

    A struct is given as a ``dict`` keyed by field name, or any object carrying the
    fields as attributes (a NamedTuple, a dataclass, an ``eqx.Module``, a Warp struct
    instance of the same type); nested structs as nested such objects. Array fields
    take JAX or NumPy arrays (JAX layout: the element's vector/matrix dims trailing)
    or ``wp.array`` (converted with ``wp.to_jax``, which shares memory where DLPack
    allows). Value fields take Python numbers, NumPy scalars or (nested) sequences
    for vectors and matrices; a JAX array is refused, as the value is baked into
    the launch at trace time.

    Args:
        layout: the parameter's `struct_layout`.
        value: the argument.
        what: the caller, prefixed to error messages (e.g. ``"Kernel(energy)"``).

    Returns:
        The `FlatStruct` of array leaves (as JAX arrays) and normalised value leaves.

    Raises:
        TypeError / ValueError: naming the leaf (``mesh.verts``) and what to pass instead:
            a missing or (for dicts) unknown field, a wrong struct type, an array of the
            wrong dtype, number of dims or trailing (element) dims, a JAX array or traced
            value for a value field, an integer field given a non-integer or out of range.

    Example:
        >>> import warp as wp, jax.numpy as jnp
        >>> @wp.struct
        ... class Spring:
        ...     ends: wp.array(dtype=wp.vec2i)
        ...     stiffness: wp.float32
        >>> flat = flatten_struct_value(struct_layout(Spring, "s"), {"ends": jnp.zeros((4, 2), jnp.int32), "stiffness": 2})
        >>> flat.arrays[0].shape, flat.statics
        ((4, 2), (2.0,))
    """
    arrays: list[jax.Array] = []
    statics: list[Any] = []
    leaves = iter(layout.leaves)
    _flatten(layout.struct_type, (layout.param,), value, leaves, arrays, statics, what)
    return FlatStruct(tuple(arrays), tuple(statics))


def _flatten(
    struct_type: Any,
    path: tuple[str, ...],
    value: Any,
    leaves: Any,
    arrays: list[jax.Array],
    statics: list[Any],
    what: str,
) -> None:
    name = ".".join(path)
    fields = _warp_internals.struct_fields(struct_type)
    names = [f for f, _ in fields]
    key = _warp_internals.struct_name(struct_type)
    if isinstance(value, (jax.Array, np.ndarray, np.generic, int, float, complex, str, bytes)) or value is None:
        raise TypeError(
            f"{what}: argument {name!r} is a struct {key} and got {_kind(value)}; pass a dict keyed by field name "
            f"({', '.join(names) or 'no fields'}) or an object with those attributes (a NamedTuple, dataclass, "
            "eqx.Module or Warp struct instance)."
        )
    inst_type = _warp_internals.struct_instance_type(value)
    if inst_type is not None and inst_type is not struct_type:
        raise TypeError(
            f"{what}: argument {name!r} is a struct {key} and got a Warp struct instance of another type, "
            f"{_warp_internals.struct_name(inst_type)}."
        )
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            shown = ", ".join(repr(f"{name}.{k}") for k in unknown)
            raise TypeError(
                f"{what}: argument {name!r} has unknown field(s) {shown}; the fields of {key} are "
                f"{', '.join(names) or 'none'}."
            )
    for field, warp_type in fields:
        fpath = (*path, field)
        fname = ".".join(fpath)
        try:
            item = value[field] if isinstance(value, Mapping) else getattr(value, field)
        except (KeyError, AttributeError):
            how = "key" if isinstance(value, Mapping) else "attribute"
            raise TypeError(
                f"{what}: argument {name!r} is missing field {fname!r} (no {how} {field!r} on the "
                f"{type(value).__name__} given); a {key} needs {', '.join(names)}."
            ) from None
        if _warp_internals.is_struct_type(warp_type):
            _flatten(warp_type, fpath, item, leaves, arrays, statics, what)
            continue
        leaf = next(leaves)
        assert leaf.path == fpath, (leaf.path, fpath)
        if leaf.spec is not None:
            arrays.append(_check_array(leaf, leaf.spec, item, what))
        else:
            statics.append(normalize_value(leaf, item, what))


def _kind(value: Any) -> str:
    if isinstance(value, jax.core.Tracer):
        return f"a traced value ({value.aval.str_short()})"
    if isinstance(value, (jax.Array, np.ndarray)):
        return f"an array of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}" if value is None or np.isscalar(value) else type(value).__name__


def _check_array(leaf: StructLeaf, spec: ArgSpec, value: Any, what: str) -> jax.Array:
    name = leaf.name
    if isinstance(value, wp.array):
        if not wp.types.types_equal(value.dtype, spec.dtype) or value.ndim != spec.warp_ndim:
            raise TypeError(
                f"{what}: struct field {name!r} expects a {spec.describe()}, got a {value.ndim}-d wp.array of "
                f"{wp.types.type_repr(value.dtype)}."
            )
        value = wp.to_jax(value)
    if not isinstance(value, (jax.Array, np.ndarray)):
        raise TypeError(
            f"{what}: struct field {name!r} expects a {spec.describe()} as a JAX or NumPy array, got {_kind(value)}."
        )
    return check_array_value(spec, value, what, "struct field")


def normalize_value(leaf: StructLeaf, value: Any, what: str = "jarp") -> Any:
    """Check a value field's Python value and normalise it to a hashable Python number or nested tuple.

    Args:
        leaf: the value leaf.
        value: a number, NumPy scalar or array, (nested) sequence, or Warp scalar/vector/matrix.
        what: the caller, prefixed to error messages.

    Returns:
        A ``float``/``int``/``bool`` (scalar), a tuple (vector) or a tuple of row tuples (matrix).

    Raises:
        TypeError / ValueError: naming the leaf, for a JAX array or traced value, a wrong
            shape, a non-number, a non-integer or out-of-range value for an integer field.
    """
    name = leaf.name
    shape = leaf.value_shape
    if isinstance(value, jax.Array):
        hint = " (mark it static with jax.jit(..., static_argnames=...))" if isinstance(value, jax.core.Tracer) else ""
        raise TypeError(
            f"{what}: struct field {name!r} is a {leaf.describe()} field, which Warp bakes into the launch, and got "
            f"{_kind(value)}; pass a Python number{' or tuple' if shape else ''} instead{hint}."
        )
    if isinstance(value, ctypes.Array) and hasattr(type(value), "_wp_scalar_type_"):
        value = _composite_to_nested(value)
    value = value.value if _is_warp_scalar(type(value)) else value
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{what}: struct field {name!r} expects a {leaf.describe()} ({shape if shape else 'a number'}), "
            f"got {_kind(value)}."
        )
    if arr.shape != shape:
        raise ValueError(
            f"{what}: struct field {name!r} expects a {leaf.describe()} of shape {shape}, got {arr.shape}."
        )
    scalar = leaf.scalar_type
    if wp.types.type_is_float(scalar):
        out = arr.astype(np.float64)
    elif scalar is wp.bool:
        out = arr.astype(bool)
    else:
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr))):
            raise TypeError(f"{what}: struct field {name!r} is an integer field ({leaf.describe()}), got {value!r}.")
        info = np.iinfo(np.dtype(wp.dtype_to_numpy(scalar)))
        ints = [int(x) for x in arr.reshape(-1).tolist()]
        if any(not info.min <= x <= info.max for x in ints):
            raise ValueError(
                f"{what}: struct field {name!r} = {value!r} does not fit its {wp.types.type_repr(scalar)} range "
                f"[{info.min}, {info.max}]."
            )
        out = np.array(ints, dtype=object).reshape(arr.shape)
    return _to_tuple(out.tolist())


def _composite_to_nested(value: Any) -> list[Any]:
    shape = tuple(type(value)._shape_)
    if len(shape) == 1:
        return [getattr(value[i], "value", value[i]) for i in range(shape[0])]
    return [[getattr(value[i, j], "value", value[i, j]) for j in range(shape[1])] for i in range(shape[0])]


def _to_tuple(x: Any) -> Any:
    return tuple(_to_tuple(v) for v in x) if isinstance(x, list) else x


# -- argument-block bytes --


def pointer_slots(layout: StructLayout) -> tuple[int, ...]:
    """Byte offsets (from the struct's start) of each array leaf's ``array_t.data``, in leaf order.

    In a forward block they receive the array buffers; in an adjoint block (see
    `adjoint_struct_bytes`) the gradient buffers. All are multiples of 8 when the
    struct is placed at an 8-aligned offset, as ctypes does.
    """
    return tuple(leaf.offset + _DATA_OFFSET for leaf in layout.arrays)


def grad_pointer_slots(layout: StructLayout) -> tuple[int, ...]:
    """Byte offsets of each array leaf's ``array_t.grad``, in leaf order.

    For a backward launch these receive the gradient buffers in the *primal*
    block: Warp's generated backward code accumulates (and reads the incoming
    cotangent of) a struct's array field through this pointer.
    """
    return tuple(leaf.offset + _GRAD_OFFSET for leaf in layout.arrays)


def struct_bytes(layout: StructLayout, array_shapes: Sequence[Sequence[int]], static_values: Sequence[Any]) -> bytes:
    """The struct's bytes for one launch, with every pointer 0 (patched per call at `pointer_slots`).

    Args:
        layout: the parameter's `struct_layout`.
        array_shapes: one shape per array leaf, in leaf order: the JAX shape (with the
            element's trailing dims) or the Warp shape (without them).
        static_values: one value per value leaf, in leaf order (as `FlatStruct.statics`).

    Returns:
        ``layout.size`` bytes: each array field an ``array_t`` with the shape,
        contiguous row-major strides (in bytes, the element size included) and ndim;
        each value field its C representation (half types as their bit patterns).

    Example:
        >>> import warp as wp
        >>> @wp.struct
        ... class S:
        ...     x: wp.array(dtype=wp.vec3f)
        ...     k: wp.float32
        >>> layout = struct_layout(S, "s")
        >>> raw = struct_bytes(layout, [(5, 3)], [2.0])
        >>> st = layout.ctype.from_buffer_copy(raw)
        >>> st.x.shape[0], st.x.strides[0], st.k
        (5, 12, 2.0)
    """
    if len(static_values) != len(layout.values):
        raise ValueError(
            f"struct {layout.param!r}: expected {len(layout.values)} value(s) "
            f"({', '.join(leaf.name for leaf in layout.values) or 'none'}), got {len(static_values)}."
        )
    inst = layout.struct_type()
    for leaf, value in zip(layout.values, static_values, strict=True):
        parent, field = _parent(inst, leaf)
        setattr(parent, field, _warp_value(leaf, normalize_value(leaf, value)))
    raw = bytearray(bytes(_warp_internals.struct_instance_ctype(inst)))
    _write_arrays(raw, layout, array_shapes)
    return bytes(raw)


def adjoint_struct_bytes(layout: StructLayout, array_shapes: Sequence[Sequence[int]]) -> bytes:
    """The adjoint struct's bytes for a backward launch: array shapes as the primal's, value fields zero.

    Patch the gradient buffers at `pointer_slots` (as ``wp.Tape`` does), and at
    `grad_pointer_slots` of the primal struct, which is what Warp's backward code reads.
    """
    raw = bytearray(layout.size)
    _write_arrays(raw, layout, array_shapes)
    return bytes(raw)


def _write_arrays(raw: bytearray, layout: StructLayout, array_shapes: Sequence[Sequence[int]]) -> None:
    arrays = layout.arrays
    if len(array_shapes) != len(arrays):
        raise ValueError(
            f"struct {layout.param!r}: expected {len(arrays)} array shape(s) "
            f"({', '.join(leaf.name for leaf in arrays) or 'none'}), got {len(array_shapes)}."
        )
    for leaf, shape in zip(arrays, array_shapes, strict=True):
        spec = leaf.spec
        assert spec is not None
        shape = tuple(int(d) for d in shape)
        if len(shape) == spec.jax_ndim and shape[spec.warp_ndim :] == spec.inner_shape:
            shape = shape[: spec.warp_ndim]
        elif len(shape) != spec.warp_ndim:
            raise ValueError(
                f"struct field {leaf.name!r} ({spec.describe()}): shape {shape} has neither {spec.warp_ndim} dims "
                f"nor {spec.jax_ndim} ending in {spec.inner_shape}."
            )
        arr = _warp_internals.contiguous_array(
            spec.warp_ndim, shape, spec.np_dtype.itemsize * math.prod(spec.inner_shape)
        )
        raw[leaf.offset : leaf.offset + _ARRAY_T_SIZE] = bytes(arr)


def _parent(inst: Any, leaf: StructLeaf) -> tuple[Any, str]:
    """The (nested) struct instance holding ``leaf``, and the leaf's field name in it."""
    for field in leaf.path[1:-1]:
        inst = getattr(inst, field)
    return inst, leaf.path[-1]


def _warp_value(leaf: StructLeaf, value: Any) -> Any:
    """A normalised value as Warp's struct setter takes it (Warp converts half types to bits)."""
    if not leaf.value_shape:
        return value
    return leaf.warp_type(value)


# -- Warp struct instances (jax_callable) --


def make_struct_instance(
    struct_type: Any, layout: StructLayout, arrays: Sequence[wp.array], statics: Sequence[Any]
) -> Any:
    """Build a Warp struct instance whose array fields are the given ``wp.array``s.

    For `jax_callable`: the arrays wrap XLA's buffers (with ``.grad`` wrapping the
    adjoint buffers for a taped backward pass; ``wp.Tape`` then builds the adjoint
    struct itself). Warp's setters check each array's dtype and ndim.

    Args:
        struct_type: the Warp struct type; must be ``layout.struct_type``.
        layout: its `struct_layout`.
        arrays: one ``wp.array`` per array leaf, in leaf order.
        statics: one value per value leaf, in leaf order (as `FlatStruct.statics`).

    Returns:
        A new instance of ``struct_type``. It keeps the arrays alive.

    Example:
        >>> import warp as wp
        >>> @wp.struct
        ... class S:
        ...     x: wp.array(dtype=float)
        ...     k: float
        >>> layout = struct_layout(S, "s")
        >>> s = make_struct_instance(S, layout, [wp.zeros(3, dtype=float, device="cpu")], [2.0])
        >>> s.k, s.x.shape
        (2.0, (3,))
    """
    if struct_type is not layout.struct_type:
        raise ValueError(f"struct {layout.param!r}: the layout describes {layout.struct_type!r}, not {struct_type!r}.")
    if len(arrays) != len(layout.arrays) or len(statics) != len(layout.values):
        raise ValueError(
            f"struct {layout.param!r}: expected {len(layout.arrays)} array(s) and {len(layout.values)} value(s), "
            f"got {len(arrays)} and {len(statics)}."
        )
    inst = struct_type()
    for leaf, arr in zip(layout.arrays, arrays, strict=True):
        parent, field = _parent(inst, leaf)
        setattr(parent, field, arr)
    for leaf, value in zip(layout.values, statics, strict=True):
        parent, field = _parent(inst, leaf)
        setattr(parent, field, _warp_value(leaf, normalize_value(leaf, value)))
    return inst
