"""Inspection of the launch plans this process has registered: `list_plans` and its records.

The process-local plan registry (`jarp/warp/_ffi/_registry.py`) is the source of truth for
`list_plans`: every Warp launch that was lowered in this process left one plan
there, and every (plan, device) pair that ran left one executor in the FFI stage
(`jarp/warp/_ffi/_executors.py` and the executors it prepares). Generated source and ahead-of-time builds are in `_codegen`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import warp as wp

from ._ffi import _executors, _target, _trampoline
from ._ffi._registry import registry
from ._plan._values import Binding, Buffer, Param, Plan


@dataclasses.dataclass(frozen=True)
class BufferInfo:
    """Shape and dtype of one operand or result buffer of a launch plan, as XLA sees it.

    Attributes:
        shape: the full shape, batch dims included.
        dtype: the NumPy dtype name (``"float32"``...).
    """

    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(n) for n in self.shape)}]"


@dataclasses.dataclass(frozen=True)
class ParamInfo:
    """One parameter of the kernel (or function) a plan launches, and what feeds it.

    Attributes:
        name: the parameter name.
        type: the Warp type repr, e.g. ``"array(ndim=1, dtype=float32)"`` or ``"float32"``.
        primal: where its value comes from: ``"operand <i>"``, ``"result <j>"`` (an output
            buffer, in-out arguments first) or ``"static <value>"`` (a scalar baked into the plan).
        adjoint: for ``"adjoint"`` plans, where its adjoint comes from (same format); ``""`` otherwise.
    """

    name: str
    type: str
    primal: str
    adjoint: str = ""

    def __str__(self) -> str:
        text = f"{self.name}: {self.type} <- {self.primal}"
        return text + (f", adjoint <- {self.adjoint}" if self.adjoint else "")


@dataclasses.dataclass(frozen=True)
class PlanInfo:
    """A read-only summary of one registered launch plan (see `list_plans`).

    Attributes:
        handle: the plan's integer handle in this process (never reused). A lowered
            ``stablehlo.custom_call @jarp_warp_call`` names its plan by content (its
            ``desc`` attribute), not by handle.
        kind: ``"kernel"`` (forward launch), ``"adjoint"`` (Warp's backward kernel, for
            reverse mode), ``"callable"`` (a `jax_callable` function) or ``"callable_adjoint"``
            (the function run under a ``wp.Tape`` and played back, for reverse mode).
        name: the human-readable name used in error messages.
        kernel: the Warp kernel's key, or the callable's qualified name.
        module: the Warp module the kernel belongs to, or the callable's Python module.
        params: the parameters in call order with the buffer or value bound to each: the
            overload signature the plan launches.
        launch_dims: the Warp launch dims (``()`` for callables).
        operands: the input buffers XLA passes, batch dims included.
        results: the output buffers XLA allocates, batch dims included.
        batch_shape: leading dims added by ``jax.vmap`` (``vmap_method="sequential"``); the
            callback runs one launch per batch slice.
        zero_results: indices of results zero-filled before the launch.
        aliases: ``(operand, result)`` index pairs that share one buffer (in-out arguments).
        scalar_operands: indices of operands that carry a traced (runtime) scalar argument as a
            one-element array; the plan then launches a variant of the kernel that reads it.
        has_side_effect: the call is kept even when its results are unused.
        graph_compatible: XLA may capture the call in a CUDA graph (FFI target
            ``jarp_warp_call``; otherwise ``jarp_warp_call_no_graph``).
        devices: the devices the plan has been prepared and run on in this process
            (``"cpu"``, ``"cuda:0"``...); empty if it was only lowered.
        block_dim: the requested threads per block (None: Warp's default, 256 on CUDA and 1 on
            the CPU; on the CPU a request above 1 takes effect only with
            ``wp.config.enable_cpu_blocks``).
        race_free: jarp proved that every thread of the kernel writes only its own elements (at its thread index;
            the ``@wp.func`` functions it calls write no array), with no atomics, tiles or printing: its CPU launch
            may be split into index ranges run concurrently. For an adjoint: its backward launch may be split with
            no copies (the forward launch may be split, and every adjoint it accumulates into is left out because
            JAX does not differentiate it). False for callables, and whenever the proof fails (it is conservative:
            anything it does not recognise counts as a possible race).
        privatised: the output (or in-out) arrays the kernel only accumulates into (``wp.atomic_add``/``sub``/``min``/
            ``max``, ``+=``), which keep it from being race-free and nothing else: its CPU launch may be split into
            index ranges, each accumulating into its own copy of them, the copies combined after
            (`jarp.warp.set_cpu_private_bytes`). For an adjoint: the arrays whose adjoints its backward launch
            accumulates into, each range into its own copy (Warp's adjoint of a read, ``x[cells[e][k]]``, adds into
            ``x``'s gradient). Empty for race-free kernels and callables.
        concurrent_slices: the batch slices of a CPU call may run at once, on XLA's CPU thread pool: the kernel
            uses no tiles and prints nothing, also in the functions it calls (atomics are fine: each slice writes
            its own buffers). False for callables and whenever jarp cannot read the kernel.
        target: the launched object itself: the ``wp.Kernel`` overload, or the function.
    """

    handle: int
    kind: str
    name: str
    kernel: str
    module: str
    params: tuple[ParamInfo, ...]
    launch_dims: tuple[int, ...]
    operands: tuple[BufferInfo, ...]
    results: tuple[BufferInfo, ...]
    batch_shape: tuple[int, ...]
    zero_results: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]
    scalar_operands: tuple[int, ...]
    has_side_effect: bool
    graph_compatible: bool
    devices: tuple[str, ...]
    block_dim: int | None = None
    race_free: bool = False
    privatised: tuple[str, ...] = ()
    concurrent_slices: bool = False
    target: Any = dataclasses.field(repr=False, compare=False, default=None)

    def __str__(self) -> str:
        def buffers(bufs: tuple[BufferInfo, ...]) -> str:
            return ", ".join(str(b) for b in bufs) or "none"

        lines = [
            f"plan {self.handle}: {self.kind} {self.kernel} (module {self.module})",
            f"  launch dims {self.launch_dims}, block dim {self.block_dim or 'default'}, "
            f"batch shape {self.batch_shape}, "
            f"devices {', '.join(self.devices) or 'none yet'}",
            f"  operands: {buffers(self.operands)}",
            f"  results:  {buffers(self.results)}",
            f"  zero-filled results {self.zero_results}, aliases (operand, result) {self.aliases}, "
            f"runtime scalar operands {self.scalar_operands}",
            f"  side effect {self.has_side_effect}, CUDA-graph compatible {self.graph_compatible}, "
            f"race-free {self.race_free}, privatised {list(self.privatised)}, "
            f"concurrent slices {self.concurrent_slices}",
            *(f"  {p}" for p in self.params),
        ]
        return "\n".join(lines)


# -- list_plans ----------------------------------------------------------------------------------


def _binding(binding: Binding, buffers: str = "operands") -> str:
    if binding.source in ("operand", "result"):
        return f"{binding.source} {binding.index}"
    if binding.source == "static":
        return f"static {binding.value!r}"
    if binding.source == "struct":
        values = f", values {binding.value!r}" if binding.value else ""
        return f"struct: arrays from {buffers} {list(binding.fields)}{values}"
    return ""


def _type_repr(param: Param) -> str:
    spec = param.spec
    if spec.is_struct:
        return spec.phrase()
    elem = spec.element_name
    return f"array(ndim={spec.warp_ndim}, dtype={elem})" if spec.is_array else elem


def _buffer(shape: tuple[int, ...], buf: Buffer) -> BufferInfo:
    return BufferInfo(tuple(int(n) for n in shape), np.dtype(buf.dtype).name)


def _device_name(ordinal: int) -> str:
    return "cpu" if ordinal < 0 else f"cuda:{ordinal}"


def _plan_info(handle: int, plan: Plan, devices: tuple[str, ...]) -> PlanInfo:
    target = plan.target
    if isinstance(target, wp.Kernel):
        kernel, module = target.key, target.module.name
    else:
        kernel = getattr(target, "__qualname__", repr(target))
        module = getattr(target, "__module__", None) or ""
    adjoint = plan.adjoint
    return PlanInfo(
        handle=handle,
        kind=plan.label,
        name=plan.name,
        kernel=kernel,
        module=module,
        params=tuple(
            ParamInfo(p.spec.name, _type_repr(p), _binding(p.primal), _binding(p.adjoint, "results") if adjoint else "")
            for p in plan.params
        ),
        launch_dims=tuple(plan.launch_dims),
        operands=tuple(_buffer(plan.operand_shape(i), b) for i, b in enumerate(plan.operands)),
        results=tuple(_buffer(plan.result_shape(j), b) for j, b in enumerate(plan.results)),
        batch_shape=tuple(plan.batch_shape),
        zero_results=tuple(plan.zero_results),
        aliases=tuple(plan.aliases),
        scalar_operands=tuple(plan.scalar_operands),
        has_side_effect=plan.has_side_effect,
        graph_compatible=plan.graph_compatible,
        devices=devices,
        block_dim=plan.block_dim,
        race_free=plan.race_free,
        privatised=tuple(p.spec.name for p in plan.params if _private(p.adjoint if adjoint else p.primal, plan)),
        concurrent_slices=not plan.shares_cpu_state,
        target=target,
    )


def _private(binding: Binding, plan: Any) -> bool:
    """Whether ``binding`` binds a result the plan's split launches copy per range (`Plan.private`)."""
    return binding.source == "result" and any(index == binding.index for index, _ in plan.private)


def list_plans() -> list[PlanInfo]:
    """List the launch plans registered in this process, oldest first.

    Every distinct Warp launch configuration that JAX has lowered (a kernel
    overload with its static arguments, launch dims, buffer shapes and batch
    layout) is one plan; re-tracing an equal call reuses it. A plan's ``handle``
    is its number in this process; a lowered call names its plan by content, in its
    ``desc`` attribute (see the docs' "Compiled programs across processes"). The list
    is a snapshot: plans registered later do not appear in it.

    Returns:
        One `PlanInfo` per plan, in handle order. ``devices`` tells where each plan
        has been prepared and run so far.

    Example:
        ```python
        @wp.kernel
        def triple_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = 3.0 * x[i]

        triple = jarp.warp.jax_kernel(triple_kernel)
        jax.jit(lambda x: triple(x)[0])(jnp.arange(4.0))
        (info,) = [i for i in jarp.warp.list_plans() if i.target is triple_kernel]
        assert (info.kind, info.launch_dims, info.devices) == ("kernel", (4,), ("cpu",))
        print(info)  # plan 0: kernel triple_kernel (module __main__) ...
        ```
    """
    keys = _executors.executor_keys()
    devices: dict[int, list[str]] = {}
    for handle, ordinal in keys:
        devices.setdefault(handle, []).append(_device_name(ordinal))
    return [_plan_info(h, plan, tuple(devices.get(h, ()))) for h, plan in registry.items()]


def runtime_info(*, register: bool = False) -> dict[str, Any]:
    """Describe jarp's state in this process: its FFI targets, their registration, the live plans and executors.

    What a bug report needs beside the versions (``python -m jarp`` prints it).

    Args:
        register: register jarp's FFI targets with XLA first (importing `jarp.warp` does; this raises what the
            registration raises).

    Returns:
        A JSON-serialisable dict: ``ffi_targets`` (the custom-call target names), ``ffi_platforms`` (the platforms
        they are registered for), ``ffi_registered``, ``plans`` (launch plans registered, `list_plans`) and
        ``executors`` (plans prepared on a device).

    Example:
        ```python
        info = jarp.warp.runtime_info()
        assert info["ffi_registered"] and info["ffi_targets"][0] == "jarp_warp_call"
        ```
    """
    if register:
        _target.ensure_registered()
    return {
        "ffi_targets": [_target.TARGET, _target.TARGET_NO_GRAPH],
        "ffi_platforms": list(_trampoline.PLATFORMS),
        "ffi_registered": _target.is_registered(),
        "plans": len(registry),
        "executors": _executors.executor_count(),
    }
