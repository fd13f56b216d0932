"""The checks a rebuilt plan passes before it may launch: every buffer a binding names fits its parameter, and the
plan's own invariants hold, so crafted text cannot make a launch read or write outside its buffers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from ..._upstream import _warp_kernels
from .. import _analysis, _dtypes, _launch_checks
from .._analysis import _names, _races
from .._arg_spec import ArgSpec
from .._values import Binding, Buffer, Plan, Runs
from ._fields import invalid, show


def _buffer_of(b: Binding, operands: Sequence[Buffer], results: Sequence[Buffer], where: str) -> Buffer:
    bufs = operands if b.source == "operand" else results
    if not 0 <= b.index < len(bufs):
        invalid(f"field '{where}.index' {b.index} is not one of the plan's {len(bufs)} {b.source}s")
    return bufs[b.index]


def _check_array(spec: ArgSpec, buf: Buffer, where: str) -> None:
    """The buffer bound to an array parameter (or struct field) has its dims and (for a concrete one) dtype."""
    if len(buf.shape) != spec.jax_ndim or buf.shape[spec.warp_ndim :] != spec.inner_shape:
        invalid(
            f"{where}: the buffer of {spec.name!r} has shape {buf.shape}, but a {spec.phrase()} has "
            f"{spec.warp_ndim} dims followed by {spec.inner_shape}"
        )
    if not spec.generic and buf.dtype != spec.np_dtype:
        invalid(
            f"{where}: the buffer of {spec.name!r} has dtype {buf.dtype}, but a {spec.phrase()} has {spec.np_dtype}"
        )


def check_binding(
    spec: ArgSpec, primal: Binding, adjoint: Binding, operands: Sequence[Buffer], results: Sequence[Buffer], where: str
) -> None:
    p_where, a_where = f"{where}.primal", f"{where}.adjoint"
    if spec.is_array:
        if primal.source not in ("operand", "result") or primal.fields or primal.value is not None or primal.index < 0:
            invalid(f"field '{p_where}' of array parameter {spec.name!r} must bind an operand or a result")
        buf = _buffer_of(primal, operands, results, p_where)
        _check_array(spec, buf, p_where)
        if adjoint.source == "none":
            _check_none(adjoint, a_where)
            return
        if adjoint.source not in ("operand", "result") or adjoint.fields or adjoint.value is not None:
            invalid(f"field '{a_where}' of array parameter {spec.name!r} must bind an operand, a result or none")
        adj = _buffer_of(adjoint, operands, results, a_where)
        if adj != buf:
            invalid(f"field '{a_where}': the adjoint buffer of {spec.name!r} is {adj}, its primal buffer {buf}")
        return
    if spec.is_struct:
        layout = spec.struct
        n_arrays, values = len(layout.arrays), layout.values
        if primal.source != "struct" or primal.index != -1 or len(primal.fields) != n_arrays:
            invalid(f"field '{p_where}' of struct parameter {spec.name!r} must bind its {n_arrays} array field(s)")
        if type(primal.value) is not tuple or len(primal.value) != len(values):
            invalid(
                f"field '{p_where}.value' of struct parameter {spec.name!r} must hold its {len(values)} value field(s)"
            )
        for leaf, i in zip(layout.array_specs, primal.fields, strict=True):
            _check_array(leaf, _buffer_of(Binding("operand", i), operands, results, f"{p_where}.fields"), p_where)
        for leaf, v in zip(values, primal.value, strict=True):
            _check_value(leaf.scalar_type, leaf.value_shape, v, f"{p_where}.value ({leaf.name})")
        if adjoint.source == "none":
            _check_none(adjoint, a_where)
            return
        if (
            adjoint.source != "struct"
            or adjoint.index != -1
            or adjoint.value is not None
            or len(adjoint.fields) != n_arrays
        ):
            invalid(f"field '{a_where}' of struct parameter {spec.name!r} must bind its {n_arrays} array field(s)")
        for leaf, i, j in zip(layout.array_specs, primal.fields, adjoint.fields, strict=True):
            buf = _buffer_of(Binding("result", j), operands, results, f"{a_where}.fields")
            if buf != operands[i]:
                invalid(
                    f"field '{a_where}.fields': the adjoint buffer of {leaf.name!r} is {buf}, its primal "
                    f"buffer {operands[i]}"
                )
        return
    if primal.source != "static" or primal.index != -1 or primal.fields:
        invalid(f"field '{p_where}' of scalar parameter {spec.name!r} must be a static value")
    composite = _dtypes.is_composite(spec.dtype)
    _check_value(
        _dtypes.scalar_of(spec.dtype) if composite else spec.dtype,
        _dtypes.element_shape(spec.dtype) if composite else (),
        primal.value,
        f"{p_where}.value",
    )
    if adjoint.source == "none":
        _check_none(adjoint, a_where)
        return
    zero = 0.0 if spec.dtype is not None and wp.types.type_is_float(spec.dtype) else 0
    if adjoint.source != "static" or adjoint.index != -1 or adjoint.fields or adjoint != Binding("static", value=zero):
        invalid(f"field '{a_where}' of scalar parameter {spec.name!r} must be none or the static {zero!r}")


def _check_none(b: Binding, where: str) -> None:
    if b != Binding("none"):
        invalid(f"field '{where}' with source 'none' must have index -1, no value and no fields")


def _check_value(scalar: Any, shape: tuple[int, ...], value: Any, where: str) -> None:
    """A static value is a ``scalar`` value (a Python number of its kind, in range), nested as ``shape``."""
    if shape:
        if type(value) is not tuple or len(value) != shape[0]:
            invalid(f"field '{where}' must be a tuple of {shape[0]}, got {show(value)}")
        for i, v in enumerate(value):
            _check_value(scalar, shape[1:], v, f"{where}[{i}]")
        return
    if isinstance(value, np.generic):
        value = value.item()
    if scalar is None:  # a generic (``Any``) scalar of a function
        ok = type(value) in (bool, int, float)
    elif scalar is wp.bool:
        ok = type(value) is bool
    elif wp.types.type_is_float(scalar):
        ok = type(value) is float
    elif wp.types.type_is_int(scalar):
        info = np.iinfo(_dtypes.to_numpy(scalar))
        ok = type(value) is int and info.min <= value <= info.max
    else:
        ok = False
    if not ok:
        invalid(f"field '{where}' must be a {getattr(scalar, '__name__', scalar)} value, got {show(value)}")


def check_plan(plan: Plan) -> None:
    """The checks `_builder.build_plan` runs, and those a crafted plan could break that a built one cannot."""
    for op, res in plan.aliases:
        if plan.operands[op].dtype != plan.results[res].dtype or plan.operand_shape(op) != plan.result_shape(res):
            invalid(
                f"field 'aliases' pairs operand {op} ({plan.operand_shape(op)}, {plan.operands[op].dtype}) with "
                f"result {res} ({plan.result_shape(res)}, {plan.results[res].dtype}), which differ"
            )
    aliased = {res for _, res in plan.aliases}
    if not set(plan.protected) <= aliased:
        invalid(f"field 'protected' {list(plan.protected)} names results that alias no operand")
    if plan.runs is Runs.CALLABLE and (plan.bounds_checked or plan.cpu_blocks or plan.block_dim is not None):
        invalid("a callable plan has no block_dim, cpu_blocks or bounds_checked")
    if plan.runs is Runs.KERNEL:
        abi = _warp_kernels.entry_point_abi(plan.target)
        if abi != "warp":
            invalid(f"the kernel uses Warp's entry_point_abi={abi!r}, which jarp does not launch")
        if plan.cpu_blocks and plan.block_dim is None:
            invalid("field 'cpu_blocks' is true without a block_dim")
        if plan.bounds_checked != (_warp_kernels.kernel_mode(plan.target) == "debug"):
            invalid(
                f"field 'bounds_checked' is {plan.bounds_checked}, but the kernel is built in "
                f"{_warp_kernels.kernel_mode(plan.target)!r} mode"
            )
    try:
        _launch_checks.check_array_extents(plan.params, plan.operands, plan.results, plan.name)
        if plan.runs is Runs.KERNEL:
            _launch_checks.check_launch(plan.target, plan.launch_dims, plan.block_dim, plan.name)
            names = tuple(p.spec.name for p in plan.params if p.spec.is_array or p.spec.is_struct)
            accesses = (
                _analysis.tid_indexed(_names.compiled_source(plan.target), names)
                if _races.warps_thread_index(plan.target)
                else ()
            )
            _launch_checks.check_tid_indexed(
                accesses, plan.params, plan.operands, plan.results, plan.launch_dims, plan.name
            )
    except ValueError as e:
        invalid(f"the described launch is refused: {str(e).rstrip('.')}")  # `invalid` ends the sentence
