"""Lowering ``jarp_warp_call`` to jarp's FFI target: one custom call naming its plan.

The call carries two attributes: the plan's handle in the process's registry (`jarp.warp._ffi._registry`),
and the process's session token, which the FFI stage checks. Each lowering attaches a lease on the handle
to the executable it is lowered into, so the plan stays registered while something can call it.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .._ffi import _target
from .._ffi._registry import registry
from .._plan import _launch_checks
from .._plan._values import Plan, Runs
from .._upstream import _warp_internals

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
    # `session` makes the compiled call (and so JAX's persistent-cache key) unique to this process:
    # plan handles index a process-local registry, so an executable must never be reused by another process.
    # The lease keeps the plan registered while the executable (or its lowered/compiled stage) lives.
    handle, lease = registry.lease(plan)
    ctx.module_context.add_keepalive(lease)
    return rule(ctx, *operands, plan=np.int64(handle), session=_target.SESSION)
