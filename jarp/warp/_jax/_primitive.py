"""jarp's JAX primitive: abstract evaluation, eager implementation, batching (lowering: `_lowering`).

Every Warp launch in a JAX program is one ``jarp_warp_call`` equation whose only
parameter is a hashable `Plan`. Batching rewrites the plan instead of the
program: the default adds a batch dimension that the callback walks slice by
slice inside one FFI call (correct for any kernel); ``"broadcast_all"`` folds the
batch into the first launch dimension (Warp's behaviour, valid for elementwise
kernels only).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .._ffi import _errors
from .._ffi._registry import registry
from .._plan import _cache_table, _launch_checks
from .._plan._normalize import FOLD_METHODS
from .._plan._values import Buffer, Plan, Runs
from .._upstream import _jax_internals
from . import _lowering

warp_call_p = Primitive("jarp_warp_call")
warp_call_p.multiple_results = True


@dataclasses.dataclass(frozen=True)
class CallConfig:
    """Static options that travel with a plan through transformations."""

    vmap_method: str | None = "sequential"
    # Whether the module is differentiated through Warp's adjoint (built with ``enable_backward=True``): for messages.
    reverse: bool = False


def bind(plan: Plan, config: CallConfig, operands: Sequence[Any]) -> tuple[jax.Array, ...]:
    """Launch ``plan`` on ``operands``; return its results."""
    return tuple(warp_call_p.bind(*operands, plan=plan, config=config))


class WarpSideEffect(_jax_internals.Effect):
    """Marks a call declared ``has_side_effect=True``: JAX and XLA keep it even when its outputs are unused."""

    def __str__(self) -> str:
        return "WarpSideEffect"


_SIDE_EFFECT = WarpSideEffect()
_jax_internals.register_effect(WarpSideEffect)


def _abstract_eval(*operands: Any, plan: Plan, config: CallConfig) -> Any:
    del config
    for i, (op, expect) in enumerate(zip(operands, range(len(plan.operands)), strict=True)):
        shape = plan.operand_shape(expect)
        if tuple(op.shape) != shape or np.dtype(op.dtype) != plan.operands[i].dtype:
            raise TypeError(
                f"jarp internal error: operand {i} of {plan.name} is {op.dtype}{list(op.shape)}, "
                f"plan expects {plan.operands[i].dtype}{list(shape)}"
            )
    spec = _batch_spec(plan, operands)
    avals = [_result_aval(plan.result_shape(j), r.dtype, operands, spec) for j, r in enumerate(plan.results)]
    return avals, ({_SIDE_EFFECT} if plan.has_side_effect else frozenset())


def _batch_spec(plan: Plan, operands: Sequence[Any]) -> Any:
    """With an explicit mesh, the results' sharding: their batch dims sharded as a batched operand's, the rest whole.

    XLA partitions a batched call along its batch dims (`_lowering.partitions`), so its results keep the batch
    sharding of its operands; with an explicit mesh that sharding is part of their type. None without one, and
    None for a call with no batch dims or none sharded: its results are typed as before (a result typed replicated
    while the operand it stands for is sharded would, for one, fail JAX's check of a custom VJP's backward types).
    """
    if not plan.batch_shape:
        return None
    mesh = None
    for op in operands:
        sharding = getattr(op, "sharding", None)
        if sharding is not None and not sharding.mesh.empty and sharding.mesh.are_all_axes_explicit:
            mesh = sharding.mesh
            break
    if mesh is None:
        return None
    batch: tuple[Any, ...] = (None,) * len(plan.batch_shape)
    for op, flags in zip(operands, plan.operand_batch, strict=True):
        if flags and all(flags):
            spec = tuple(op.sharding.spec) + (None,) * op.ndim
            if any(s is not None for s in spec[: len(flags)]):
                batch = spec[: len(flags)]
                break
    if all(s is None for s in batch):
        return None
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*batch))


def _result_aval(
    shape: tuple[int, ...], dtype: np.dtype, operands: Sequence[Any], sharding: object = None
) -> jax.core.ShapedArray:
    # Inside shard_map, a result varies over the manual mesh axes its operands vary over. Without
    # this JAX would take the result as invariant, insert an implicit cast, and transpose that
    # cast into a psum: gradients would come out multiplied by the number of devices. (A union, not
    # JAX's all-equal rule, because a symbolic-zero cotangent enters the adjoint as an invariant zero.)
    vma = frozenset().union(*(getattr(getattr(a, "mat", None), "varying", frozenset()) for a in operands))
    if not vma:
        if sharding is not None:
            return jax.core.ShapedArray(shape, dtype, sharding=sharding)
        return jax.core.ShapedArray(shape, dtype)
    return _jax_internals.varying_aval(shape, dtype, vma)


warp_call_p.def_effectful_abstract_eval(_abstract_eval)


@_cache_table.register_function
@functools.lru_cache(maxsize=4096)
def _compiled(plan: Plan, config: CallConfig) -> Any:
    return jax.jit(lambda *ops: warp_call_p.bind(*ops, plan=plan, config=config))


def _impl(*operands: object, plan: Plan, config: CallConfig) -> Any:
    # Eager calls go through one cached executable per plan instead of re-lowering; an exception raised
    # inside the call (outside jit: under vmap, grad) is raised as it was.
    return _errors.call_reraising(_compiled(plan, config), *operands)


warp_call_p.def_impl(_impl)
# Plan-keyed caches hold plans (and so kernels); jax.clear_caches() clears them with JAX's own.
_cache_table.register(registry, "jarp.warp plan registry")
_jax_internals.weak_cache_key_type(Plan)


mlir.register_lowering(warp_call_p, _lowering.lower)


class ForwardModeError(TypeError):
    """Forward-mode differentiation of a jarp call that has reverse mode (Warp's adjoint) at most."""


def forward_mode_error(plan: Plan, reverse: bool = False) -> ForwardModeError:
    """The error for forward mode (or a second derivative) through ``plan``, saying what jarp supports instead.

    ``reverse``: whether the module has reverse mode (built with ``enable_backward=True``).
    """
    # A kernel given Warp structures runs as a callable whose function says which module the user called and
    # whether that call could take derivative rules (`_geometry.Launcher`).
    factory = getattr(plan.target, "jarp_factory", None)
    if not isinstance(factory, str):
        factory = "jax_kernel()" if plan.runs is Runs.KERNEL else "jax_callable()"
    if reverse or plan.adjoint:  # the reverse pass's own launch: its module has reverse mode
        has = "it is differentiated in reverse mode only (jax.grad, jax.vjp, through Warp's adjoint)"
    else:
        has = f"Warp's adjoint gives first-order reverse mode only (pass enable_backward=True to {factory} for jax.grad and jax.vjp)"
    if getattr(plan.target, "jarp_takes_rules", True) is False:
        ways = (
            "need jvp= rules, which a call given Warp structures does not take: pass the structure's arrays as array "
            "parameters of modules with jvp= rules (e.g. a Hessian-vector product kernel) or of jarp.warp.energy"
        )
    else:
        ways = (
            "need jvp= rules (e.g. a Hessian-vector product kernel) or jarp.warp.energy (with hessian='exact' or "
            "'projected')"
        )
    return ForwardModeError(
        f"{plan.name} has no forward-mode derivative: {has}. Forward mode (jax.jvp, jacfwd) and second "
        f"derivatives (grad of grad, hessian) {ways}; see the Derivatives page of the docs."
    )


def _not_differentiable(primals: object, tangents: object, *, plan: Plan, config: CallConfig) -> Any:
    # Reached by forward mode, and by reverse mode without enable_backward (JAX linearizes through the JVP rule).
    raise forward_mode_error(plan, reverse=config.reverse)


ad.primitive_jvps[warp_call_p] = _not_differentiable


def _batch(args: Sequence[Any], dims: Sequence[int | None], *, plan: Plan, config: CallConfig) -> Any:
    if config.vmap_method is None:
        raise ValueError(
            f"{plan.name} was built with vmap_method=None, which gives it no batching rule (as in Warp's bridge), "
            "and is being batched by jax.vmap. Batch the call yourself (jax.custom_batching.custom_vmap around it, "
            "or a loop), build it with vmap_method='sequential' (correct for any kernel), or pass vmap_method="
            "'sequential' to this call."
        )
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
    mapped = [d is not None for d in dims]
    # In-out buffers are written in place, so each slice needs its own copy.
    for i, _ in plan.aliases:
        if not mapped[i]:
            args[i] = jnp.broadcast_to(args[i], (size, *args[i].shape))
            mapped[i] = True
    foldable = not plan.batch_shape and plan.runs is Runs.KERNEL and not any(mapped[i] for i in plan.scalar_operands)
    if config.vmap_method in FOLD_METHODS and foldable:
        return _fold(args, mapped, size, plan, config), [0] * len(plan.results)
    new = dataclasses.replace(
        plan,
        batch_shape=(size, *plan.batch_shape),
        operand_batch=tuple((m, *b) for m, b in zip(mapped, plan.operand_batch, strict=True)),
    )
    return bind(new, config, args), [0] * len(plan.results)


def _fold(args: list[Any], mapped: list[bool], size: int, plan: Plan, config: CallConfig) -> list[Any]:
    def fold(buf: Buffer) -> Buffer:
        return Buffer((size * buf.shape[0], *buf.shape[1:]), buf.dtype)

    ops = []
    for i, (a, m, buf) in enumerate(zip(args, mapped, plan.operands, strict=True)):
        if i in plan.scalar_operands:  # unbatched runtime scalar: shared by every folded slice
            ops.append(a)
            continue
        if not buf.shape:
            raise ValueError(f"vmap_method='broadcast_all' cannot fold a 0-d operand of {plan.name}")
        a = a if m else jnp.broadcast_to(a, (size, *a.shape))
        ops.append(a.reshape((size * buf.shape[0], *buf.shape[1:])))
    launch_dims = (size * plan.launch_dims[0], *plan.launch_dims[1:])
    if plan.runs is Runs.KERNEL:
        _launch_checks.check_launch(
            plan.target, launch_dims, plan.block_dim, f"{plan.name} under vmap_method='broadcast_all'"
        )
    new = dataclasses.replace(
        plan,
        launch_dims=launch_dims,
        operands=tuple(b if i in plan.scalar_operands else fold(b) for i, b in enumerate(plan.operands)),
        results=tuple(fold(b) for b in plan.results),
        operand_batch=tuple(() for _ in plan.operands),
    )
    outs = bind(new, config, ops)
    return [o.reshape((size, *r.shape)) for o, r in zip(outs, plan.results, strict=True)]


batching.primitive_batchers[warp_call_p] = _batch
