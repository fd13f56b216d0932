"""Argument blocks: the bytes a kernel launch passes, built from a plan alone (no device, no loaded code).

A Warp kernel's entry point takes its parameters as one C struct on the CPU (``<key>_cpu_forward(bounds,
args)``; the backward entry point takes a second struct of adjoints) and as separate parameters on CUDA
(``cuLaunchKernel``: the launch bounds, then every field of the struct(s)). `argument_block` builds that
struct for a plan, as a template whose pointer words are patched per call; `cuda_params` lists the CUDA
parameters the executors pass, in order, so `jarp.warp.check_cuda_launches` can compare them with the
compiled kernel's ``.param`` list without a GPU: the executors and the check read the same list.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from typing import Any

import warp as wp

from .._plan import _dtypes
from .._plan._values import Plan
from .._upstream import _warp_launches
from . import _buffer_sizes, _struct_bytes

_GRAD_OFFSET = _warp_launches.ArrayStruct.grad.offset


@dataclasses.dataclass(frozen=True)
class ArgumentBlock:
    """One argument block (0: primal values; 1: adjoints, for a backward launch) and its pointer slots.

    Attributes:
        words: the ctypes array type (``c_uint64 * n``) the block is copied into per call.
        raw: the template's bytes, padded to whole 8-byte words.
        template: the block as a ctypes structure (one field per kernel parameter).
        slots: ``(word, source, buffer index)`` of each pointer patched per call; ``source`` is 0 for the
            call's operands, 1 for its results.
        arrays: for each slot, the array Warp reads through it (its ``array_t`` as written in ``raw``, with the
            kernel's own annotation), which `_buffer_sizes.check_views` has checked against the slot's buffer.
    """

    words: type[ctypes.Array[ctypes.c_uint64]]
    raw: bytes
    template: ctypes.Structure
    slots: tuple[tuple[int, int, int], ...]
    arrays: tuple[_buffer_sizes.ArrayView, ...]


@dataclasses.dataclass(frozen=True)
class CudaParam:
    """One parameter of a CUDA launch: where its bytes live and how many.

    Attributes:
        name: the kernel parameter's name (``"bounds"`` for the launch bounds; ``"adj_<name>"`` in the
            adjoint block).
        block: 0 or 1 for an argument block, 2 for the launch bounds.
        offset: the byte offset in that block.
        size: the bytes the kernel reads for it.
    """

    name: str
    block: int
    offset: int
    size: int


def argument_block(plan: Plan, block: int) -> ArgumentBlock:
    """The argument block ``block`` (0: primal values, 1: adjoints) of ``plan``'s kernel launch.

    Raises:
        _buffer_sizes.BufferSizeError: if an array it passes would not cover its buffer exactly with Warp's own
            element size (jarp's JAX shape of the parameter disagrees with Warp's type): it is never built.
    """
    buffers = (plan.operands, plan.results)
    warp_types = _buffer_sizes.kernel_param_types(plan)
    role = "data" if block == 0 else "adjoint"
    fields, values = [], []
    # (parameter name, byte offset in the parameter, source, buffer index) of each pointer, and where its
    # array_t begins in the parameter with what describes it (field path, role, Warp's annotation of the array)
    pointers: list[tuple[str, int, int, int]] = []
    arrays: list[tuple[int, str, str, Any]] = []
    for param, warp_type in zip(plan.params, warp_types, strict=True):
        spec = param.spec
        binding = param.primal if block == 0 else param.adjoint
        if spec.is_struct:
            layout = spec.struct
            src = 0 if block == 0 else 1
            shapes = [plan.operands[i].shape for i in param.primal.fields]
            if block == 0:
                raw = _struct_bytes.struct_bytes(layout, shapes, binding.value)
            else:
                # no adjoint (an operand JAX does not differentiate): the shapes of the primal, every pointer null
                raw = _struct_bytes.adjoint_struct_bytes(layout, shapes)
            fields.append((spec.name, layout.ctype))
            values.append(layout.ctype.from_buffer_copy(raw))
            # each array field's array_t, with Warp's own annotation of the field (not jarp's spec of it)
            leaves = [
                (leaf.offset, leaf.name, _buffer_sizes.field_type(warp_type, leaf.path)) for leaf in layout.arrays
            ]
            slots = _struct_bytes.pointer_slots(layout)
            if binding.source == "struct":
                pointers.extend((spec.name, off, src, i) for off, i in zip(slots, binding.fields, strict=True))
                arrays.extend((at, name, role, t) for at, name, t in leaves)
            if block == 0 and plan.adjoint and param.adjoint.source == "struct":
                # Warp's backward code accumulates a struct field's gradient through the grad
                # pointer of the primal struct (as wp.Tape sets it), not through the adjoint struct.
                grads = _struct_bytes.grad_pointer_slots(layout)
                pointers.extend((spec.name, off, 1, i) for off, i in zip(grads, param.adjoint.fields, strict=True))
                arrays.extend((at, name, "gradient", t) for at, name, t in leaves)
        elif spec.is_array:
            # An adjoint of source none (an operand JAX does not differentiate) is the primal's shape and strides
            # with a null data pointer: Warp's adjoints skip it, and its strides keep the contiguous specialisation.
            shaped = param.primal if binding.source == "none" else binding
            src = 0 if shaped.source == "operand" else 1
            buf = buffers[src][shaped.index]
            element_bytes = buf.dtype.itemsize * math.prod(spec.inner_shape)
            arr = _warp_launches.contiguous_array(spec.warp_ndim, buf.shape[: spec.warp_ndim], element_bytes)
            fields.append((spec.name, _warp_launches.ArrayStruct))
            values.append(arr)
            if binding.source != "none":
                pointers.append((spec.name, 0, src, binding.index))  # array_t.data is its first field
                arrays.append((0, "", role, warp_type))
            grad = param.adjoint
            if block == 0 and plan.adjoint and grad.source in ("operand", "result"):
                # As under wp.Tape, the primal array carries its adjoint buffer as its gradient: Warp's
                # adjoints of array views (``a[i]``, ``wp.view``) and of tile loads accumulate through it.
                pointers.append((spec.name, _GRAD_OFFSET, 0 if grad.source == "operand" else 1, grad.index))
                arrays.append((0, "", "gradient", warp_type))
        else:
            fields.append((spec.name, wp.types.type_ctype(spec.dtype)))
            value = binding.value if binding.source == "static" else 0  # a runtime value: read from its array
            if _dtypes.is_composite(spec.dtype):  # a vector, matrix, quaternion... by value
                values.append(_dtypes.composite_ctype_value(spec.dtype, value))
            else:
                values.append(_dtypes.ctype_value(spec.dtype, value))
    struct_type = type("ArgBlock", (ctypes.Structure,), {"_fields_": fields})
    template = struct_type(*values)
    nwords = (ctypes.sizeof(struct_type) + 7) // 8
    raw = bytes(template) + b"\0" * (nwords * 8 - ctypes.sizeof(struct_type))
    slots, views = [], []
    for (name, offset, src, index), (array_at, field, what, array_type) in zip(pointers, arrays, strict=True):
        base = getattr(struct_type, name).offset
        address = base + offset
        assert address % 8 == 0, "pointer slots are 8-byte aligned"
        slots.append((address // 8, src, index))
        # the array_t as the launch will copy it: what Warp indexes the buffer through
        views.append(
            _buffer_sizes.ArrayView.read(
                raw, base + array_at, param=name, field=field, role=what, source=src, index=index, warp_type=array_type
            )
        )
    _buffer_sizes.check_views(plan, views)
    return ArgumentBlock(ctypes.c_uint64 * nwords, raw, template, tuple(slots), tuple(views))


def cuda_params(templates: list[ctypes.Structure], bounds: ctypes.Structure) -> list[CudaParam]:
    """The parameters of a CUDA launch, in the kernel's order: the launch bounds, then every field of each block.

    ``cuLaunchKernel`` takes one pointer per parameter and reads as many bytes as the compiled kernel
    declares for it, so this list is what `_executors` passes (both launch paths) and what
    `jarp.warp.check_cuda_launches` compares with the compiled kernel.
    """
    params = [CudaParam("bounds", 2, 0, ctypes.sizeof(bounds))]
    for block, template in enumerate(templates):
        cls = type(template)
        prefix = "adj_" if block else ""
        params.extend(
            CudaParam(prefix + name, block, getattr(cls, name).offset, ctypes.sizeof(ctype))
            for name, ctype in cls._fields_  # pyright: ignore[reportAssignmentType]  # pairs: a block has no bit fields
        )
    return params


def plan_cuda_params(plan: Plan, block_dim: int) -> list[CudaParam]:
    """The CUDA parameters a launch of ``plan`` passes, with ``block_dim`` threads per block (no device needed)."""
    templates = [argument_block(plan, b).template for b in range(2 if plan.adjoint else 1)]
    bounds = _warp_launches.launch_bounds(plan.target, plan.launch_dims, block_dim)
    return cuda_params(templates, bounds)
