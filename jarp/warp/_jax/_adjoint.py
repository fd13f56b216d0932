"""Reverse mode through Warp's adjoint: the adjoint plan and the custom VJP that launches it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import warp as wp
from jax.custom_derivatives import SymbolicZero

from .._plan import _builder, _dtypes
from .._plan._analysis import _races
from .._plan._values import Binding, Buffer, Param, Plan, Runs
from .._upstream import _jax_internals, _warp_kernels
from ._primitive import CallConfig, bind, forward_mode_error


@_warp_kernels.one_code_version()  # drawn from one version of the kernel's code, hashed once
def adjoint_plan(plan: Plan, perturbed: frozenset[int] | None = None) -> Plan:
    """The plan of the backward launch of a forward kernel plan.

    Built afresh on each backward trace (it is cheap, and equal plans share one registry handle): a cache of
    adjoint plans would hold their kernels past their executables, and Warp's next build of a kernel's module
    keeps every kernel of the module still alive then (until the module changes again), so a strong cache
    here kept every kernel differentiated in the process alive.

    Operands: the forward array operands, then one cotangent per forward result.
    Results: one cotangent per forward operand (zero-filled), a zero-filled stand-in
    for each forward result (the adjoint replays the forward pass as it was before
    the launch, when pure outputs were zero), and a writable copy of each incoming
    cotangent (Warp's adjoint may accumulate into the adjoints of arrays it reads).

    Then, as results aliased to them, private copies of the forward operands the backward launch may write
    (`_builder.backward_writes`: a ``@wp.func`` its replay calls again stores into one, or a ``@wp.func_grad``,
    ``@wp.func_replay`` or native adjoint does, or a callable's function writes its protected input), so that the
    caller's buffer keeps its value and the launch reads the value the forward launch read; an input's copy is
    discarded (`Plan.protected`). A callable's in-out operands always get one (its taped replay writes them).

    ``perturbed`` names the forward operands JAX differentiates (None: all). The others get no adjoint buffer
    (``Binding("none")``; a struct when none of its array fields is differentiated): a kernel's backward entry
    point then accumulates nothing for them (Warp's adjoints skip an adjoint array whose data is null), so no
    cotangent JAX discards is zero-filled, written or, on a split CPU launch, copied per range; and a
    callable's replay sees differentiated what the caller differentiates (a mesh built from an input that is
    not differentiated is no concern of the gradient check of `_ffi._callable_executor`). Their cotangent results stay
    in the plan, unwritten, and are not read back.
    """
    n_ops, n_res = len(plan.operands), len(plan.results)
    in_out = {res: op for op, res in plan.in_out_aliases}
    written = _builder.backward_writes(plan)
    params = []
    replays: list[int] = []  # the forward operands the launch runs on a copy of (results aliased to them)
    copies: list[int] = []  # those of them that are inputs (the others: callables' in-out replays)

    def copy(op: int) -> Binding:
        replays.append(op)
        return Binding("result", n_ops + 2 * n_res + len(replays) - 1)

    for p in plan.params:
        b = p.primal
        if b.source == "operand":
            primal = b
            if p.spec.name in written:
                # The backward code may store into this input: never into the caller's buffer
                primal = copy(b.index)
                copies.append(len(replays) - 1)
            if perturbed is not None and b.index not in perturbed:
                params.append(Param(p.spec, primal, Binding("none")))
                continue
            params.append(Param(p.spec, primal, Binding("result", b.index)))
        elif b.source == "result" and b.index in in_out:
            # In-out: replay from the value before the launch; the incoming cotangent buffer
            # accumulates the adjoint of the reads and becomes the input's cotangent.
            primal = Binding("operand", in_out[b.index])
            if plan.runs is Runs.CALLABLE or p.spec.name in written:
                # A callable's taped replay runs its function again, which writes the in-out array, and a kernel's
                # backward code may (above): give it a copy of the value before the launch (a result aliased to
                # that operand), never the caller's buffer.
                primal = copy(in_out[b.index])
            params.append(Param(p.spec, primal, Binding("result", n_ops + n_res + b.index)))
        elif b.source == "result":
            params.append(Param(p.spec, Binding("result", n_ops + b.index), Binding("result", n_ops + n_res + b.index)))
        elif b.source == "struct":
            if perturbed is not None and not perturbed.intersection(b.fields):
                params.append(Param(p.spec, b, Binding("none")))
                continue
            # The cotangent of each array field lands where the operand's cotangent goes.
            params.append(Param(p.spec, b, Binding("struct", fields=b.fields)))
        else:
            zero = 0.0 if wp.types.type_is_float(p.spec.dtype) else 0
            params.append(Param(p.spec, b, Binding("static", value=zero)))
    cotangents = tuple(Buffer(r.shape, r.dtype) for r in plan.results)
    # Only the operand cotangents the launch accumulates into are zero-filled first; the others are not read back.
    bound = {i for p in params for i in ((p.adjoint.index,) if p.adjoint.source == "result" else p.adjoint.fields)}
    results = plan.operands + plan.results + cotangents + tuple(plan.operands[op] for op in replays)
    race_free, private = _races.adjoint_split_proofs(
        plan.runs, plan.target, params, results, plan.block_dim, plan.bounds_checked, plan.launch_dims
    )
    return dataclasses.replace(
        plan,
        adjoint=True,
        params=tuple(params),
        operands=plan.operands + cotangents,
        results=results,
        zero_results=tuple(i for i in range(n_ops) if i in bound) + tuple(range(n_ops, n_ops + n_res)),
        aliases=tuple((n_ops + j, n_ops + n_res + j) for j in range(n_res))
        + tuple((op, n_ops + 2 * n_res + k) for k, op in enumerate(replays)),
        batch_shape=(),
        operand_batch=(),
        protected=tuple(n_ops + 2 * n_res + k for k in copies),
        name=plan.name + " (adjoint)",
        race_free=race_free,
        private=private,
    )


# symbolic_zeros: the forward rule learns which operands JAX differentiates (`adjoint_plan`'s ``perturbed``).
@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _differentiable(plan: Plan, config: CallConfig, *operands: object) -> tuple[jax.Array, ...]:
    return bind(plan, config, operands)


def _fwd(plan: Plan, config: CallConfig, *primals: Any) -> Any:
    operands = tuple(p.value for p in primals)
    # The perturbed operands' indices travel as the keys of a dict: part of the residuals' tree structure, which
    # is static (residual leaves must be arrays).
    perturbed = {i: None for i, p in enumerate(primals) if p.perturbed}
    return bind(plan, config, operands), (operands, perturbed)


def _bwd(plan: Plan, config: CallConfig, residuals: Any, cts: Any) -> Any:
    operands, perturbed = residuals
    cts = [
        ct
        if ct is not None and not isinstance(ct, SymbolicZero) and ct.dtype == r.dtype
        else jnp.zeros(plan.result_shape(j), r.dtype)
        for j, (ct, r) in enumerate(zip(cts, plan.results, strict=True))
    ]
    outs = bind(adjoint_plan(plan, frozenset(perturbed)), config, (*operands, *cts))
    n_ops, n_res = len(plan.operands), len(plan.results)
    source = dict(enumerate(range(n_ops))) | {op: n_ops + n_res + res for op, res in plan.in_out_aliases}
    return tuple(
        _match_sharding(_reduce_varying(outs[source[i]], op), op)
        if _dtypes.is_inexact(op.dtype) and i in perturbed
        else None
        for i, op in enumerate(operands)
    )


def _match_sharding(ct: jax.Array, primal: object) -> jax.Array:
    """With an explicit mesh, a cotangent resharded to its primal's sharding, which is part of its type.

    A batched adjoint call is partitioned along its batch dims only (`_lowering.partitions`): its results are
    typed with the batch sharding alone, while the primal may also be sharded along its other dims; JAX's check
    of the backward rule's types would refuse the difference.
    """
    want = getattr(jax.typeof(primal), "sharding", None)
    have = getattr(jax.typeof(ct), "sharding", None)
    if want is None or have is None or want.mesh.empty or not want.mesh.are_all_axes_explicit:
        return ct
    ndim = len(jax.typeof(primal).shape)
    if tuple(want.spec) + (None,) * (ndim - len(want.spec)) == tuple(have.spec) + (None,) * (ndim - len(have.spec)):
        return ct
    return jax.sharding.reshard(ct, want)


def _varying(x: object) -> frozenset[Any]:
    return frozenset(getattr(getattr(jax.typeof(x), "mat", None), "varying", frozenset()))


def _reduce_varying(ct: jax.Array, primal: object) -> jax.Array:
    """Inside ``shard_map``, sum a cotangent over the mesh axes along which its primal is replicated.

    The adjoint launch varies over every axis any of its operands varies over; an input that was
    the same on every device (a shared stiffness, say) collects one contribution per device.
    """
    extra = tuple(sorted(_varying(ct) - _varying(primal), key=str))
    return jax.lax.psum(ct, extra) if extra else ct


_differentiable.defvjp(_fwd, _bwd, symbolic_zeros=True)


def launch(plan: Plan, config: CallConfig, operands: Sequence[Any], differentiable: bool) -> tuple[jax.Array, ...]:
    """Bind ``plan`` (through Warp's adjoint when ``differentiable``)."""
    if differentiable:
        config = dataclasses.replace(config, reverse=True)
        try:
            return tuple(_differentiable(plan, config, *operands))
        except TypeError as e:
            # JAX's own message for forward mode through a custom_vjp names neither jarp nor the way out.
            if not _jax_internals.is_custom_vjp_forward_mode_error(e):
                raise
            raise forward_mode_error(plan, reverse=True) from e
    return bind(plan, config, operands)
