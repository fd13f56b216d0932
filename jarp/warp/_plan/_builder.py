"""Build a launch plan from a bound call: bind each parameter to an operand, a result or a static value."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from . import _analysis, _dims, _launch_checks
from ._analysis import _generated, _names, _overwrites, _races, _writes
from ._binding import BoundCall
from ._signature import Signature
from ._values import Binding, Buffer, Param, Plan, Runs


def build_plan(
    runs: Runs,
    target: Any,
    sig: Signature,
    bound: BoundCall,
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
    *,
    has_side_effect: bool,
    graph_compatible: bool,
    name: str,
    block_dim: int | None = None,
    bounds_checked: bool = False,
) -> Plan:
    """The forward plan of one call.

    Args:
        runs: what the plan runs.
        target: the kernel overload (or runtime-scalar variant) or the Python function.
        sig: the target's signature (a runtime scalar is a one-element array parameter in it).
        bound: the call's bound arguments.
        results: the result buffers (in-out first, then pure outputs).
        launch_dims: the launch dims (``()`` for callables); an `_dims.InferredLaunchDims` when no caller gave them,
            which warns (`_launch_checks.LaunchDimsWarning`) of an array the kernel indexes with ``wp.tid()``
            that the launch stops short of.
        has_side_effect: keep the call when its results are unused.
        graph_compatible: whether XLA may capture the call in a CUDA graph.
        name: the plan's name for messages and inspection.
        block_dim: threads per block (kernels; None for Warp's default).
        bounds_checked: whether the kernel is built with Warp's bounds checks (debug mode).

    Returns:
        The plan.
    """
    inferred = isinstance(launch_dims, _dims.InferredLaunchDims)
    launch_dims = tuple(launch_dims)
    # First the hash of the code Warp's next build of the kernel compiles (a name its code resolves rebound since
    # Warp hashed the module makes a new one): every verdict below is drawn from that code, and keyed by it, and so
    # is the plan, whose executor launches no build with another hash
    code_hash = _writes.code_hash(target) if runs is Runs.KERNEL else None
    if runs is Runs.KERNEL:
        _launch_checks.check_launch(target, launch_dims, block_dim, name)
    params = []
    op_index = 0
    in_out_index = 0
    pure_index = sig.num_in_out
    aliases = []
    for spec in sig.params:
        if spec.is_struct:
            n = len(spec.struct.arrays)
            fields = tuple(range(op_index, op_index + n))
            params.append(Param(spec, Binding("struct", value=bound.statics[spec.name], fields=fields)))
            op_index += n
        elif not spec.is_array:
            params.append(Param(spec, Binding("static", value=bound.statics[spec.name])))
        elif spec in sig.outputs:
            params.append(Param(spec, Binding("result", pure_index)))
            pure_index += 1
        elif spec.in_out:
            params.append(Param(spec, Binding("result", in_out_index)))
            aliases.append((op_index, in_out_index))
            in_out_index += 1
            op_index += 1
        else:
            params.append(Param(spec, Binding("operand", op_index)))
            op_index += 1
    operand_buffers = tuple(Buffer(tuple(op.shape), np.dtype(op.dtype)) for op in bound.operands)
    _launch_checks.check_array_extents(params, operand_buffers, results, name)
    # The source analyses below know the thread index by its name: a user function called ``tid`` is not it.
    tid_known = runs is Runs.KERNEL and _races.warps_thread_index(target)
    zero_results = _zero_filled(target, sig, results, launch_dims, name, tid_known)
    if tid_known:
        accesses = _analysis.tid_indexed(
            _names.compiled_source(target), tuple(s.name for s in sig.params if s.is_array or s.is_struct)
        )
        _launch_checks.check_tid_indexed(accesses, params, operand_buffers, results, launch_dims, name)
        if inferred:
            _launch_checks.warn_short_inferred_launch(accesses, params, operand_buffers, results, launch_dims, name)
    race_free, private = _races.split_proofs(runs, target, sig.params, block_dim, bounds_checked, launch_dims)
    return Plan(
        runs=runs,
        adjoint=False,
        target=target,
        params=tuple(params),
        launch_dims=launch_dims,
        operands=operand_buffers,
        results=tuple(results),
        zero_results=zero_results,
        aliases=tuple(aliases),
        scalar_operands=bound.scalar_operands,
        has_side_effect=has_side_effect,
        graph_compatible=graph_compatible,
        name=name,
        block_dim=block_dim,
        cpu_blocks=bool(runs is Runs.KERNEL and block_dim is not None and wp.config.enable_cpu_blocks),
        bounds_checked=bounds_checked,
        race_free=race_free,
        private=_races.private_results(params, private),
        shares_cpu_state=_races.plan_shares_cpu_state(runs, target, block_dim, bounds_checked, race_free),
        code_hash=code_hash,
    )


def _zero_filled(
    target: Any,
    sig: Signature,
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
    name: str,
    tid_known: bool,
) -> tuple[int, ...]:
    """The pure outputs to zero-fill: all but those a kernel provably overwrites on every thread.

    ``tid_known``: ``target`` is a kernel whose thread index is Warp's ``wp.tid`` (else nothing counts as overwritten).
    """
    if tid_known:
        overwritten = _overwrites.overwritten_in_code(target, tuple(s.name for s in sig.outputs))
    else:
        overwritten = {}
    zero = []
    for j, spec in enumerate(sig.outputs, start=sig.num_in_out):
        rank = overwritten.get(spec.name)
        shape = results[j].shape[: spec.warp_ndim]
        if rank == len(launch_dims) == len(shape) and any(s < n for s, n in zip(shape, launch_dims, strict=True)):
            # Every thread writes out[tid]: an output smaller than the launch would be written out of bounds.
            raise ValueError(
                f"{name}: output {spec.name!r} has dims {shape}, smaller than the launch dims {launch_dims}, but the "
                f"kernel writes {spec.name}[tid] on every thread; pass output_dims covering the launch "
                "(or smaller launch_dims)."
            )
        if rank == len(launch_dims) and shape == launch_dims:
            continue  # every thread overwrites its own element: the fill would be wasted
        zero.append(j)
    return tuple(zero)


def protect_inputs(plan: Plan) -> Plan:
    """Alias every pure array input of a callable plan to an extra, discarded result.

    XLA then hands the function its own copy of each input buffer (or the buffer itself
    when the caller's value is dead after the call), so writes cannot reach the caller.
    """
    in_out = {op for op, _ in plan.in_out_aliases}
    extra = [i for i in range(len(plan.operands)) if i not in in_out and i not in plan.scalar_operands]
    if not extra:
        return plan
    n_res = len(plan.results)
    return dataclasses.replace(
        plan,
        results=plan.results + tuple(plan.operands[i] for i in extra),
        aliases=plan.aliases + tuple((i, n_res + k) for k, i in enumerate(extra)),
        protected=tuple(n_res + k for k in range(len(extra))),
    )


def backward_writes(plan: Plan) -> frozenset[str]:
    """The array parameters of a plan whose primal buffer its backward launch may write.

    Warp's backward entry point replays the kernel's forward code, calling each ``@wp.func`` again (a function that
    stores into an array stores again), and runs the reverse code, which calls the user's ``@wp.func_grad`` and
    ``@wp.func_replay`` functions and native adjoint snippets: code that may store into a primal array too. Judged on
    the generated code (`_generated.backward_write_sites`); every array parameter where Warp could not generate it.
    For a callable, whose taped replay runs its function again: the array inputs its forward plan gives a private
    copy (`protect_inputs`), which it may write (its in-out arrays are copied for the replay in any case).

    Raises:
        ValueError: the backward code may write a struct parameter's array field (the launch reads those from the
            caller's buffers, and has no copy of them to give).
    """
    if plan.runs is not Runs.KERNEL:
        protected = {op for op, res in plan.aliases if res in plan.protected}
        return frozenset(
            p.spec.name for p in plan.params if p.primal.source == "operand" and p.primal.index in protected
        )
    arrays = [p.spec.name for p in plan.params if p.spec.is_array]
    fields = [leaf.name for p in plan.params if p.spec.is_struct for leaf in p.spec.struct.arrays]
    record = _writes.codegen_record(plan.target)
    if record.error is not None or not record.backward:
        return frozenset(arrays)  # (a kernel Warp cannot generate fails to build, forward)
    sites = _generated.backward_write_sites(record.functions, record.backward)
    for write in sites:
        hit = _generated.reached(write.path, fields)
        if hit:
            where = f"in {write.via}" if write.via is not None else "in the kernel's own backward code"
            raise ValueError(
                f"{plan.name}: the backward code of kernel {plan.target.key!r} may write the struct field {hit[0]!r} "
                f"(by {write.how}, {where}), an input the caller owns, and jarp gives a backward launch a private "
                "copy of an array parameter only, not of a struct field. Pass the array as an array parameter of "
                "its own, keep the gradient code from writing it, or give the module a vjp= rule."
            )
    return frozenset(_generated.backward_written_params(record.functions, record.backward))
