"""Lowering ``jarp_warp_call`` to jarp's FFI target: one custom call naming its plan by content.

The call carries two attributes: ``abi``, the version of jarp's call ABI, and ``desc``, the plan's
description (`jarp.warp._plan._describe`), which means the same in every process: the program text, and so
JAX's persistent-cache key and an exported program, holds nothing process-local. The FFI stage resolves the
description once per loaded executable. Within this process, each lowering also attaches a lease on the plan
to what it is lowered into, so the plan stays registered while something can call it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._ffi import _target
from .._ffi._registry import registry
from .._plan import _describe, _launch_checks
from .._plan._values import Plan, Runs
from .._upstream import _jax_internals, _warp_internals

__all__ = ["lower"]


def lower(ctx: Any, *operands: Any, plan: Plan, config: Any) -> Any:
    """Lower one ``jarp_warp_call`` to a custom call of jarp's FFI target (``config``: the primitive's `CallConfig`)."""
    del config
    platforms = getattr(ctx.module_context, "platforms", ())
    if "cpu" in platforms:
        _warp_internals.check_cpu_support(plan.name)  # an error here, not from inside the compiled call
    if "cuda" in platforms and plan.runs is Runs.KERNEL:  # Warp's deterministic mode: hidden CUDA parameters
        _launch_checks.check_cuda_signature(plan.target, plan.block_dim, plan.name)
    _target.ensure_registered()
    target = _target.TARGET if plan.graph_compatible else _target.TARGET_NO_GRAPH
    rule = jax.ffi.ffi_lowering(
        target,
        operand_output_aliases=dict(plan.aliases) or None,
        has_side_effect=plan.has_side_effect,
    )
    text = registry.description(plan)
    if _jax_internals.lowering_for_export(ctx):
        why = _describe.not_describable(plan)
        if why is not None:
            raise ValueError(
                f"jax.export: {plan.name} cannot be exported: {why.rstrip('.')}. An exported program names each call by content, "
                "and the process that loads it must find the function again by its module and qualified name."
            )
    else:
        # In this process, the lease keeps the plan registered while the lowered or compiled stage, or the
        # executable, lives (an exported program carries nothing process-local: its loader resolves `desc`).
        ctx.module_context.add_keepalive(registry.lease(plan)[1])
    return rule(ctx, *operands, abi=np.int64(_target.ABI_VERSION), desc=text)
