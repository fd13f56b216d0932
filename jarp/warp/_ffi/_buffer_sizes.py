"""Buffer sizes: every array a launch hands Warp covers exactly the buffer XLA allocated for it.

A Warp kernel reads an array argument through its ``array_t``: element ``(i, j)`` is ``sizeof(T)`` bytes at
``data + i * strides[0] + j * strides[1]``, ``T`` being the element type of the kernel's own annotation. jarp
writes that shape and those strides from its plan (the buffer's JAX shape, split into Warp dims and element
dims), and XLA allocates the buffer from the same plan: the dims the frame check compares on every call, on
both launch paths (`_frame.FrameBuffers.pointers`, and the native handler against its descriptor's buffers).
Were jarp's idea of an element ever to disagree with Warp's (a quaternion's JAX shape without its 4), the
kernel would read and write past XLA's buffer. So, once per plan and device, before its first launch:

- a kernel launch (`check_views`, as `_arg_blocks.argument_block` builds each argument block): each ``array_t``
  jarp wrote is read back, and it must be contiguous with Warp's element size (``wp.types.type_size_in_bytes`` of the kernel's, or the struct
  field's, own dtype), with the kernel's ndim, and span the plan's buffer (one batch slice) to the byte;
  `check_slices` then proves that every slice's pointer plus that span stays inside the call buffer whose
  dims the frame check enforces;
- a callable (`check_callable`): each ``wp.array`` it wraps a buffer in (Warp computes its strides from the
  dtype itself) must span that buffer to the byte.

A mismatch is a `BufferSizeError` naming the module, the parameter and the struct field, raised where the
executor is built, so nothing launches. Every later call costs nothing more: the buffers' dims cannot change
without failing the per-call frame check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from .._plan._arg_spec import ArgSpec
from .._plan._values import Plan, Runs
from .._upstream import _warp_kernels, _warp_launches, _warp_types
from . import _errors

_SOURCES = ("operand", "result")


class BufferSizeError(RuntimeError):
    """A launch would hand Warp an array that does not cover its call buffer exactly; nothing was launched."""


@dataclasses.dataclass(frozen=True)
class ArrayView:
    """One array a launch hands Warp over a call buffer: the buffer, and the ``array_t`` Warp reads it through.

    Attributes:
        param: the kernel parameter's name.
        field: the struct field's dotted path (``"s.x"``), or ``""`` for an array parameter.
        role: ``"data"``, ``"gradient"`` (the ``grad`` pointer of a primal array) or ``"adjoint"`` (an array of
            the backward launch's adjoint block).
        source: 0 for the call's operands, 1 for its results.
        index: the buffer's index among them.
        warp_type: Warp's own annotation of the array (the kernel's parameter, or the struct's field).
        ndim: the ``array_t``'s ndim.
        shape: its shape (``ndim`` dims).
        strides: its strides in bytes (``ndim`` of them).
    """

    param: str
    field: str
    role: str
    source: int
    index: int
    warp_type: Any
    ndim: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    @classmethod
    def read(cls, raw: bytes, offset: int, **where: Any) -> ArrayView:
        """The view of the ``array_t`` at byte ``offset`` of an argument block's bytes ``raw``.

        Args:
            raw: the argument block's bytes, as the launch copies them.
            offset: where the ``array_t`` begins in them.
            where: the other attributes (``param``, ``field``, ``role``, ``source``, ``index``, ``warp_type``).

        Returns:
            The view, with ``ndim``, ``shape`` and ``strides`` as Warp will read them.
        """
        arr = _warp_launches.ArrayStruct.from_buffer_copy(raw, offset)
        ndim = int(arr.ndim)
        return cls(ndim=ndim, shape=tuple(arr.shape[:ndim]), strides=tuple(arr.strides[:ndim]), **where)

    def element_bytes(self) -> int:
        """``sizeof(T)`` of the kernel's element type, as Warp computes it (0 if it has none)."""
        return _element_bytes(self.warp_type) or 0

    def span(self) -> int:
        """The bytes from the first element to the end of the last one that Warp's indexing can reach (0 if empty)."""
        if math.prod(self.shape) == 0:
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True)) + self.element_bytes()


def kernel_param_types(plan: Plan) -> tuple[Any, ...]:
    """Warp's annotation of each of the plan's kernel parameters, in the plan's order.

    Raises:
        BufferSizeError: if the kernel takes another number of parameters than the plan passes (the argument
            block would not be the kernel's struct at all).
    """
    params = _warp_kernels.kernel_params(plan.target)
    if len(params) != len(plan.params):
        raise BufferSizeError(
            f"{_module(plan)}: the plan passes {len(plan.params)} parameter(s) "
            f"({', '.join(p.spec.name for p in plan.params)}) to a kernel that takes {len(params)} "
            f"({', '.join(name for name, _ in params)}); jarp refused the launch. This is a bug in jarp; please "
            "report it with the kernel's signature and `python -m jarp`'s output."
        )
    return tuple(t for _, t in params)


def field_type(param_type: Any, path: Sequence[str]) -> Any:
    """Warp's annotation of the struct field at ``path`` (the parameter's name first, then the field names)."""
    t = param_type
    for name in path[1:]:
        t = dict(_warp_types.struct_fields(t))[name]
    return t


def check_views(plan: Plan, views: Sequence[ArrayView]) -> None:
    """Check that each array covers its buffer (one batch slice of it) exactly, with Warp's own element size.

    Args:
        plan: the plan whose buffers the views point into.
        views: the arrays a launch of it hands Warp.

    Raises:
        BufferSizeError: naming the module, the parameter (and struct field) and what disagrees.
    """
    buffers = (plan.operands, plan.results)
    for view in views:
        warp_type = view.warp_type
        buf = buffers[view.source][view.index]
        element = _element_bytes(warp_type)
        if element is None:
            raise _error(plan, view, f"Warp's annotation of it is {warp_type!r}, not an array of a concrete dtype")
        if view.ndim != warp_type.ndim:
            raise _error(plan, view, f"jarp would pass a {view.ndim}-d array to the kernel's {warp_type.ndim}-d one")
        covered = math.prod(view.shape) * element
        if covered != buf.nbytes:
            raise _error(
                plan,
                view,
                f"jarp would hand Warp {math.prod(view.shape)} {_element(warp_type)} element(s) of {element} bytes "
                f"(shape {list(view.shape)}: {covered} bytes) over {_SOURCES[view.source]} buffer {view.index}, "
                f"{np.dtype(buf.dtype).name}{list(buf.shape)} ({buf.nbytes} bytes a batch slice)",
            )
        contiguous = _contiguous_strides(view.shape, element)
        if view.strides != contiguous:
            raise _error(
                plan,
                view,
                f"jarp would pass strides {list(view.strides)} bytes, where {_element(warp_type)} elements "
                f"({element} bytes each) of shape {list(view.shape)} lie at strides {list(contiguous)}",
            )


def check_slices(
    plan: Plan,
    views: Sequence[ArrayView],
    offsets: Sequence[Sequence[int]],
    call_shapes: tuple[Sequence[tuple[Any, Sequence[int]]], Sequence[tuple[Any, Sequence[int]]]],
) -> None:
    """Check that each slice's array lies inside the call buffer whose dtype and dims the frame check enforces.

    Args:
        plan: the plan.
        views: the arrays a launch hands Warp (checked by `check_views`).
        offsets: for each view, the byte offset of its pointer in its buffer, one per batch slice.
        call_shapes: ``(dtype, dims)`` of each operand and of each result buffer of the call
            (`_frame.FrameBuffers.shapes`: what each call is checked against, on both launch paths).

    Raises:
        BufferSizeError: naming the module, the parameter and the slice that would reach past its buffer.
    """
    for view, offs in zip(views, offsets, strict=True):
        dtype, dims = call_shapes[view.source][view.index]
        size = math.prod(dims) * np.dtype(dtype).itemsize
        span = view.span()
        for s, off in enumerate(offs):
            if span and not 0 <= off <= off + span <= size:
                raise _error(
                    plan,
                    view,
                    f"batch slice {s} would reach bytes {off}..{off + span} of {_SOURCES[view.source]} buffer "
                    f"{view.index}, {np.dtype(dtype).name}{list(dims)} ({size} bytes)",
                )


def check_callable(plan: Plan) -> None:
    """Check each ``wp.array`` a callable plan's executor wraps a call buffer in (`CallableExecutor._array`).

    Warp gives such an array contiguous strides of its dtype's size, over the buffer's leading ``warp_ndim`` dims;
    it must span the buffer (one batch slice) to the byte.

    Raises:
        BufferSizeError: naming the module, the parameter (and struct field) and what disagrees.
    """
    views = []
    for param in plan.params:
        spec = param.spec
        if spec.is_struct:
            leaves = spec.struct.array_specs
            uses = [(leaf, "data", 0, index) for leaf, index in zip(leaves, param.primal.fields, strict=True)]
            if plan.adjoint and param.adjoint.source == "struct":
                uses += [(leaf, "gradient", 1, j) for leaf, j in zip(leaves, param.adjoint.fields, strict=True)]
            for leaf, role, source, index in uses:
                views.append(_callable_view(plan, spec.name, leaf.name, leaf, role, source, index))
        elif spec.is_array and param.primal.source in _SOURCES:
            binding = param.primal
            views.append(
                _callable_view(plan, spec.name, "", spec, "data", _SOURCES.index(binding.source), binding.index)
            )
            grad = param.adjoint
            if plan.adjoint and grad.source in _SOURCES:
                views.append(
                    _callable_view(plan, spec.name, "", spec, "gradient", _SOURCES.index(grad.source), grad.index)
                )
    check_views(plan, views)


def _callable_view(plan: Plan, param: str, field: str, spec: ArgSpec, role: str, source: int, index: int) -> ArrayView:
    """The array ``wp.array(ptr=..., dtype=spec.dtype, shape=buffer.shape[:warp_ndim])`` Warp builds over a buffer."""
    shape = tuple(int(n) for n in (plan.operands, plan.results)[source][index].shape[: spec.warp_ndim])
    warp_type = wp.array(dtype=spec.dtype, ndim=spec.warp_ndim)
    element = _element_bytes(warp_type) or 0
    return ArrayView(
        param, field, role, source, index, warp_type, len(shape), shape, _contiguous_strides(shape, element)
    )


def _contiguous_strides(shape: Sequence[int], element: int) -> tuple[int, ...]:
    """Row-major strides in bytes of ``shape`` with ``element`` bytes an element (as ``wp.array`` makes them)."""
    strides, stride = [], element
    for n in reversed(shape):
        strides.append(stride)
        stride *= n
    return tuple(reversed(strides))


def _element_bytes(warp_type: wp.array) -> int | None:
    """Warp's ``sizeof(T)`` of an array annotation's element type; None for anything but an array of a sized type."""
    if not wp.types.is_array(warp_type):
        return None
    try:
        size = wp.types.type_size_in_bytes(warp_type.dtype)
    except Exception:  # a generic (Any) dtype: Warp has no size for it
        return None
    return int(size) if isinstance(size, int) and size > 0 else None


def _element(warp_type: wp.array) -> str:
    """Warp's name of an array annotation's element type (``quatf``), or the annotation itself."""
    try:
        return wp.types.type_repr(warp_type.dtype)
    except Exception:
        return repr(warp_type)


def _module(plan: Plan) -> str:
    """How a message names the module: its name and, for a kernel, the kernel's key."""
    key = getattr(plan.target, "key", None)
    name = plan.name or plan.label
    return f"{name} (kernel {key!r})" if plan.runs is Runs.KERNEL and key is not None else name


def _error(plan: Plan, view: ArrayView, problem: str) -> BufferSizeError:
    """The error for ``view``: which module, parameter and field, what disagrees, and what to do."""
    what = f"parameter {view.param!r}" + (f", struct field {view.field!r}" if view.field else "")
    role = {"data": "", "gradient": " (its gradient)", "adjoint": " (its adjoint)"}[view.role]
    return BufferSizeError(
        f"{_module(plan)}, {what}{role}: {problem}. Warp would read and write outside the buffer XLA allocated, so "
        "jarp refused the launch. jarp's JAX shape of this parameter disagrees with Warp's element type "
        f"{_element(view.warp_type)}: this is a bug in "
        "jarp; please report it with the kernel's signature and `python -m jarp`'s output (passing the array with "
        "a plain vector or scalar dtype of the same bytes avoids it meanwhile)."
    )


_errors.own_frames(__file__)
