"""Lowering ``jarp_warp_call`` to jarp's FFI target: one custom call naming its plan by content.

The call carries two attributes: ``abi``, the version of jarp's call ABI, and ``desc``, the plan's
description (`jarp.warp._plan._content`), which means the same in every process: the program text, and so
JAX's persistent-cache key and an exported program, holds nothing process-local. The FFI stage resolves the
description once per loaded executable. Within this process, each lowering also attaches a lease on the plan
to what it is lowered into, so the plan stays registered while something can call it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

from .._ffi import _target
from .._ffi._registry import registry
from .._plan import _content, _launch_checks
from .._plan._values import Plan, Runs
from .._upstream import _jax_internals, _warp_launches


def lower(
    ctx: mlir.LoweringRuleContext, *operands: mlir.ir.Value, plan: Plan, config: object
) -> Sequence[mlir.ir.Value | Sequence[mlir.ir.Value]]:
    """Lower one ``jarp_warp_call`` to a custom call of jarp's FFI target (``config``: the primitive's `CallConfig`)."""
    del config
    platforms = getattr(ctx.module_context, "platforms", ())
    if "cpu" in platforms:
        _warp_launches.check_cpu_support(plan.name)  # an error here, not from inside the compiled call
    if "cuda" in platforms and plan.runs is Runs.KERNEL:  # Warp's deterministic mode: hidden CUDA parameters
        _launch_checks.check_cuda_signature(plan.target, plan.block_dim, plan.name)
    _target.ensure_registered()
    if partitions(ctx, plan):
        return _lower_partitioned(ctx, operands, plan)
    return _lower_call(ctx, operands, plan)


def partitions(ctx: mlir.LoweringRuleContext, plan: Plan) -> bool:
    """Whether this call is lowered for XLA's batch partitioner (see `_lower_partitioned`).

    Only a batched call in a program that XLA partitions over several devices (``jax.jit`` with a
    multi-device sharding, not ``shard_map``'s manual axes or ``pmap``): a single-device program lowers as
    before. A call with a declared side effect stays whole (the partitioned call XLA makes does not keep it),
    and so does one whose in-out operand is broadcast across the batch (the batching rule never makes one).
    """
    if not plan.batch_shape or plan.has_side_effect:
        return False
    if any(not all(plan.operand_batch[i]) for i, _ in plan.aliases):
        return False
    return _jax_internals.sharding_devices(ctx) > 1


def _lower_partitioned(
    ctx: mlir.LoweringRuleContext, operands: Sequence[mlir.ir.Value], plan: Plan
) -> Sequence[mlir.ir.Value]:
    """Lower a batched call so that XLA runs each device's part of the batch where it lives.

    The custom call is marked batch partitionable (``num_batch_dims``, read by the partitioner JAX registers
    for jarp's targets; with Shardy, a sharding rule too). XLA's partitioner splits the leading
    ``num_batch_dims`` dims of every buffer with more dims than that and replicates the others. So each
    batched buffer gets a unit dim after the batch dims (``num_batch_dims`` is the batch rank plus one)
    and each operand broadcast across the batch is flattened to one dim: it reaches every device whole.
    An operand batched over some of the batch dims only is broadcast over the others first. The plan
    that names the call says so (`Plan.partitioned`); its executor takes each device's local batch from
    the frame and checks every buffer against it exactly. XLA's partitioned call keeps no aliases, so the
    call declares none: the executor copies each in-out operand to its result before the launch.
    """
    batch = plan.batch_shape
    k = len(batch)
    full = (True,) * k
    ops = []
    for i, op in enumerate(operands):
        flags = plan.operand_batch[i]
        if any(flags) and not all(flags):
            shape = plan.operands[i].shape
            keep = [d for d, has in enumerate(flags) if has]
            aval = ctx.avals_in[i]

            def widen(x: jax.Array, keep: list[int] = keep, shape: tuple[int, ...] = shape) -> jax.Array:
                dims = (*keep, *range(k, k + len(shape)))
                return jax.lax.broadcast_in_dim(x, (*batch, *shape), dims)

            op = mlir.lower_fun(widen, multiple_results=False)(
                # a call's avals are ShapedArrays (JAX types them as AbstractValue)
                ctx.replace(avals_in=[aval], avals_out=[jax.core.ShapedArray((*batch, *shape), aval.dtype)]),  # pyright: ignore[reportAttributeAccessIssue]
                op,
            )[0]
        ops.append(op)
    lowered = dataclasses.replace(
        plan,
        partitioned=True,
        operand_batch=tuple(full if any(flags) else (False,) * k for flags in plan.operand_batch),
    )
    in_avals = [
        jax.core.ShapedArray(plan.operand_shape(i) if not any(f) else (*batch, *b.shape), b.dtype)
        for i, (b, f) in enumerate(zip(plan.operands, plan.operand_batch, strict=True))
    ]
    call_in = [jax.core.ShapedArray(lowered.call_operand_shape(i), b.dtype) for i, b in enumerate(plan.operands)]
    call_out = [jax.core.ShapedArray(lowered.call_result_shape(j), b.dtype) for j, b in enumerate(plan.results)]
    ops = [
        _reshape(ctx, op, src, dst) if src.shape != dst.shape else op
        for op, src, dst in zip(ops, in_avals, call_in, strict=True)
    ]
    call_ctx = ctx.replace(avals_in=call_in, avals_out=call_out)
    extra = {"mhlo.frontend_attributes": mlir.ir_attribute({"num_batch_dims": str(k + 1)})}
    if jax.config.jax_use_shardy_partitioner:  # pyright: ignore[reportAttributeAccessIssue]  # JAX sets its options on Config at run time
        extra["sdy.sharding_rule"] = _sharding_rule(call_ctx, lowered)
    outs = _lower_call(call_ctx, ops, lowered, extra)
    # one value per result (the FFI call's results are arrays, not tuples)
    return [_reshape(ctx, out, src, dst) for out, src, dst in zip(outs, call_out, ctx.avals_out, strict=True)]  # pyright: ignore[reportArgumentType]


def _reshape(
    ctx: mlir.LoweringRuleContext, value: mlir.ir.Value, src: jax.core.ShapedArray, dst: jax.core.ShapedArray
) -> mlir.ir.Value:
    return mlir.lower_fun(lambda x: jnp.reshape(x, dst.shape), multiple_results=False)(
        ctx.replace(avals_in=[src], avals_out=[dst]), value
    )[0]


def _sharding_rule(ctx: mlir.LoweringRuleContext, plan: Plan) -> Any:
    """Shardy's rule for a partitioned call: the batch factors (and the unit dim) are shared, all else is each buffer's own."""
    batch = [f"b{d}" for d in range(len(plan.batch_shape) + 1)]
    counter = iter(range(1 << 30))

    def mapping(aval: jax.core.ShapedArray, batched: bool) -> list[str]:
        own = len(aval.shape) - (len(batch) if batched else 0)
        return (batch if batched else []) + [f"x{next(counter)}" for _ in range(own)]

    # a call's avals are ShapedArrays (JAX types them as AbstractValue)
    operands = [mapping(a, all(f)) for a, f in zip(ctx.avals_in, plan.operand_batch, strict=True)]  # pyright: ignore[reportArgumentType]
    results = [mapping(a, True) for a in ctx.avals_out]
    return _jax_internals.sdy_sharding_rule(ctx, operands, results)


def _lower_call(
    ctx: mlir.LoweringRuleContext, operands: Sequence[mlir.ir.Value], plan: Plan, extra: dict[str, Any] | None = None
) -> Sequence[mlir.ir.Value | Sequence[mlir.ir.Value]]:
    target = _target.TARGET if plan.graph_compatible else _target.TARGET_NO_GRAPH
    rule = jax.ffi.ffi_lowering(
        target,
        operand_output_aliases=None if plan.partitioned else dict(plan.aliases) or None,
        has_side_effect=plan.has_side_effect,
        **({"extra_attributes": extra} if extra else {}),  # pyright: ignore[reportArgumentType]  # only that keyword
    )
    if _jax_internals.lowering_for_export(ctx):
        why = _content.not_portable(plan)
        if why is not None:
            raise ValueError(
                f"jax.export: {plan.name} cannot be exported: {why.rstrip('.')}. An exported program names each call by content, "
                "and the process that loads it must find the function again by its module and qualified name."
            )
    else:
        # In this process, the lease keeps the plan registered while the lowered or compiled stage, or the
        # executable, lives (an exported program carries nothing process-local: its loader resolves `desc`). It is
        # taken before the text is written: a lambda's text names the plan's handle, which an equal plan's release
        # at the lease's safe point would otherwise drop between the two (the call could then never be resolved).
        ctx.module_context.add_keepalive(registry.lease(plan)[1])
    text = registry.content_text(plan)
    return rule(ctx, *operands, abi=np.int64(_target.ABI_VERSION), desc=text)
