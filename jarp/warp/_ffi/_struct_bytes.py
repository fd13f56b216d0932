"""The bytes of ``wp.struct`` arguments in an argument block, and Warp struct instances for callables.

For a kernel executor: the primal block holds `struct_bytes` (each array field's ``array_t`` with its
shape and contiguous strides, each value field's C value), with the buffers patched per call at
`pointer_slots` and the gradient buffers at `grad_pointer_slots`; the adjoint block holds
`adjoint_struct_bytes` (see `jarp.warp._plan._struct_layout` for why Warp reads gradients through the
primal struct). For a callable executor: `make_struct_instance` builds the Warp struct itself.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import warp as wp

from .._plan._arg_checks import normalize_value
from .._plan._struct_layout import StructLayout, StructLeaf
from .._upstream import _warp_launches, _warp_types

_DATA_OFFSET = _warp_launches.ArrayStruct.data.offset
_GRAD_OFFSET = _warp_launches.ArrayStruct.grad.offset
_ARRAY_T_SIZE = ctypes.sizeof(_warp_launches.ArrayStruct)


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
    raw = bytearray(bytes(_warp_types.struct_instance_ctype(inst)))
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
                f"struct field {leaf.name!r} ({spec.phrase()}): shape {shape} has neither {spec.warp_ndim} dims "
                f"nor {spec.jax_ndim} ending in {spec.inner_shape}."
            )
        arr = _warp_launches.contiguous_array(
            spec.warp_ndim, shape, spec.np_dtype.itemsize * math.prod(spec.inner_shape)
        )
        raw[leaf.offset : leaf.offset + _ARRAY_T_SIZE] = bytes(arr)


def _parent(inst: object, leaf: StructLeaf) -> tuple[Any, str]:
    """The (nested) struct instance holding ``leaf``, and the leaf's field name in it."""
    for field in leaf.path[1:-1]:
        inst = getattr(inst, field)
    return inst, leaf.path[-1]


def _warp_value(leaf: StructLeaf, value: object) -> Any:
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
