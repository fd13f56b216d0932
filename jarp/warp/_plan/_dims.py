"""Launch dims and result buffers of a bound call: what Warp launches over and what XLA allocates."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _launch_checks
from ._arg_spec import ArgSpec
from ._binding import BoundCall
from ._normalize import output_dims_for
from ._values import Buffer


def _array_shapes(bound: BoundCall) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """The Warp shapes of the array parameters, and of the struct array fields, each in call order.

    Runtime scalars (one-element operands of scalar parameters) are in neither.
    """
    parameters, fields = [], []
    for spec, op in zip(bound.operand_specs, bound.operands, strict=True):
        if spec.is_array:
            (parameters if spec in bound.sig.inputs else fields).append(tuple(op.shape[: spec.warp_ndim]))
    return parameters, fields


def default_launch_dims(bound: BoundCall) -> tuple[int, ...] | None:
    """The first array parameter's Warp shape, else the first struct array field's; None without either.

    Runtime scalars never size the launch. A kernel that takes a mesh struct and iterates over
    its elements usually wants explicit ``launch_dims`` (the element count).
    """
    parameters, fields = _array_shapes(bound)
    return next(iter(parameters + fields), None)


class InferredLaunchDims(tuple[int, ...]):
    """Launch dims that no caller gave: the first array input's Warp shape, as `launch_dims` infers them.

    A plain tuple in every other respect. `_builder.build_plan` tells inferred dims from given ones by this type
    (only an inferred launch may silently stop short of an array the kernel indexes with ``wp.tid()``) and stores
    them in the plan as a plain tuple.
    """

    __slots__ = ()


def _input_dims(bound: BoundCall, ndim: int) -> tuple[int, ...] | None:
    """The Warp shape of the first array parameter with ``ndim`` array dims, or None."""
    return next((shape for shape in _array_shapes(bound)[0] if len(shape) == ndim), None)


def launch_dims(requested: object, bound: BoundCall, what: str) -> tuple[int, ...]:
    """The launch dims: ``requested`` if given, else the first array input's Warp shape.

    Args:
        requested: the ``launch_dims`` option (the call's, else the module's), or None.
        bound: the bound call.
        what: the module's name, for error messages.

    Returns:
        The launch dims; an `InferredLaunchDims` when ``requested`` is None.
    """
    if requested is None:
        dims = default_launch_dims(bound)
        if dims is None:
            raise ValueError(f"{what}: the kernel has no array inputs, so pass launch_dims=... to size the launch.")
        return InferredLaunchDims(dims)
    return _launch_checks.normalize_launch_dims(requested, f"{what}: launch_dims")


def result_buffers(
    bound: BoundCall,
    output_dims: Any,
    default_dims: tuple[int, ...] | None,
    what: str,
) -> list[Buffer]:
    """Buffers of all results: in-out first (shaped like their inputs), then pure outputs.

    Args:
        bound: the bound call.
        output_dims: normalised ``output_dims`` (None, a tuple of ints, or sorted ``(name, dims)`` pairs).
        default_dims: the dims of pure outputs when ``output_dims`` is None (the launch dims).
        what: the module's name, for error messages.
    """
    sig = bound.sig
    default_dims = None if default_dims is None else tuple(default_dims)  # a plain tuple, not `InferredLaunchDims`
    in_outs = {
        spec.name: (spec, op) for spec, op in zip(bound.operand_specs, bound.operands, strict=True) if spec.in_out
    }
    buffers = [Buffer(tuple(op.shape), np.dtype(op.dtype)) for _, op in in_outs.values()]
    named = (
        dict(output_dims)
        if isinstance(output_dims, tuple) and output_dims and isinstance(output_dims[0], tuple)
        else None
    )
    # As in Warp's bridge, dims given for an in-out argument are not used (it is shaped like its input); unlike
    # Warp's bridge, dims that disagree with that shape are an error rather than silently ignored.
    if named is not None:
        for name in sorted(set(named) & set(in_outs)):
            spec, op = in_outs[name]
            _check_in_out_dims(spec, tuple(op.shape), named.pop(name), f"{what}: output_dims[{name!r}]")
        named = named or None
        output_dims = None if named is None else tuple(sorted(named.items()))
    elif output_dims is not None and not sig.outputs:
        for spec, op in in_outs.values():
            _check_in_out_dims(
                spec, tuple(op.shape), output_dims, f"{what}: output_dims (for in-out argument {spec.name!r})"
            )
        if not in_outs:
            raise ValueError(f"{what}: output_dims was given, but the kernel has no outputs; drop output_dims.")
        output_dims = None
    for spec in sig.outputs:
        if named is not None:
            if spec.name not in named:
                raise ValueError(
                    f"{what}: output_dims has no entry for output {spec.name!r} (got {sorted(named)}); "
                    "give every pure output's dims."
                )
            dims = output_dims_for(spec, named[spec.name], f"{what}: output_dims[{spec.name!r}]")
        elif output_dims is not None:
            dims = output_dims_for(spec, output_dims, f"{what}: output_dims")
        elif (
            default_dims is not None
            and len(default_dims) < spec.warp_ndim
            and (inferred := _input_dims(bound, spec.warp_ndim)) is not None
        ):
            # As Warp's bridge: an output with more array dims than the launch (an axis the kernel loops
            # over itself) takes the shape of the first array input with its number of dims.
            dims = inferred
        elif default_dims is not None:
            dims = output_dims_for(spec, default_dims, f"{what}: output dims (defaulting to the launch dims)")
        else:
            raise ValueError(f"{what}: cannot infer the dims of output {spec.name!r}; pass output_dims=...")
        buffer = Buffer(dims + spec.inner_shape, spec.np_dtype)
        if buffer.nbytes >= 2**62:
            raise ValueError(f"{what}: output {spec.name!r} of shape {buffer.shape} is too large to allocate.")
        buffers.append(buffer)
    if named is not None:
        unknown = set(named) - {s.name for s in sig.outputs}
        if unknown:
            raise ValueError(
                f"{what}: output_dims names {sorted(unknown)}, which are neither pure outputs "
                f"({[s.name for s in sig.outputs]}) nor in-out arguments ({sorted(in_outs)})."
            )
    return buffers


def _check_in_out_dims(spec: ArgSpec, shape: tuple[int, ...], dims: Any, what: str) -> None:
    """Accept ``output_dims`` given for an in-out argument only where it is the argument's own shape (its Warp
    dims, or its whole JAX shape): an in-out result is always shaped like its input."""
    try:
        wanted = tuple(int(d) for d in ((dims,) if isinstance(dims, int) else dims))
    except TypeError:
        raise TypeError(f"{what}: expected an int or a tuple of ints, got {dims!r}.") from None
    if wanted not in (shape[: spec.warp_ndim], shape):
        raise ValueError(
            f"{what}: {spec.name!r} is an in-out argument, so its result has its input's shape {shape}, not "
            f"{wanted}; drop its entry from output_dims (or give the input the shape you want)."
        )
