"""Inspection: the launch plans this process has registered, generated kernel source, ahead-of-time CUDA builds.

The process-local plan registry (`jarp/warp/_values.py`) is the source of truth for
`list_plans`: every Warp launch that was lowered in this process left one plan
there, and every (plan, device) pair that ran left one executor in the FFI bridge.
`kernel_source` and `compile_aot` work on the Warp module behind a kernel, which
is Warp's compilation unit: one module holds every kernel of a Python module.
"""

from __future__ import annotations

import dataclasses
import os
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import warp as wp

from ._callable import JaxCallable
from ._ffi import _executors
from ._ffi._registry import registry
from ._kernel import JaxKernel
from ._plan import _launch_checks
from ._plan._values import Binding, Buffer, Param, Plan
from ._upstream import _warp_internals

__all__ = ["BufferInfo", "ParamInfo", "PlanInfo", "compile_aot", "kernel_source", "list_plans"]


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
        handle: the plan's integer handle: the ``plan`` attribute of its
            ``stablehlo.custom_call @jarp_warp_call`` in lowered programs.
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
            f"  side effect {self.has_side_effect}, CUDA-graph compatible {self.graph_compatible}",
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
        return spec.describe()
    if spec.dtype is None:
        elem = "Any"
    else:
        elem = wp.types.type_repr(spec.dtype)
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
        target=target,
    )


def list_plans() -> list[PlanInfo]:
    """List the launch plans registered in this process, oldest first.

    Every distinct Warp launch configuration that JAX has lowered (a kernel
    overload with its static arguments, launch dims, buffer shapes and batch
    layout) is one plan; re-tracing an equal call reuses it. A plan's ``handle``
    is the integer ``plan`` attribute of its custom call in lowered programs, so
    ``list_plans()[handle]`` finds the plan behind a call in
    ``jax.jit(f).lower(...).as_text()``. The list is a snapshot: plans registered
    later do not appear in it.

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


# -- Warp modules: generated source and ahead-of-time builds --------------------------------------


def _warp_module(obj: Any, what: str) -> wp.Module:
    """The Warp module behind a `JaxKernel`, a ``wp.Kernel``, a ``wp.Module`` or a Python module."""
    if isinstance(obj, JaxKernel):
        obj = obj.kernel
    if isinstance(obj, wp.Kernel):
        module = obj.module
    elif isinstance(obj, wp.Module):
        module = obj
    elif isinstance(obj, types.ModuleType):
        found = {
            id(v.module): v.module
            for v in vars(obj).values()
            if isinstance(v, wp.Kernel) and v.module.name == obj.__name__
        }
        if not found:
            raise ValueError(f"{what}: Python module {obj.__name__!r} defines no Warp kernels.")
        (module,) = found.values()
    elif isinstance(obj, JaxCallable):
        raise TypeError(
            f"{what}: a JaxCallable launches whatever kernels its function launches; pass one of those kernels "
            "(or the Python module defining them) instead."
        )
    else:
        raise TypeError(
            f"{what}: expected a JaxKernel, a Warp kernel, a Warp module or a Python module defining Warp kernels, "
            f"got {type(obj).__name__}."
        )
    if not module.kernels:
        raise ValueError(f"{what}: Warp module {module.name!r} has no kernels.")
    return module


def _block_dim_of(obj: Any, block_dim: int | None, what: str) -> int | None:
    """The requested block dim: ``block_dim`` if given, else a `JaxKernel`'s own, else Warp's default (None)."""
    if block_dim is not None:
        return _launch_checks.check_block_dim(block_dim, what)
    return obj.block_dim if isinstance(obj, JaxKernel) else None


def kernel_source(
    kernel_or_module: Any,
    device: Literal["cpu", "cuda"] = "cpu",
    *,
    arch: int | None = None,
    block_dim: int | None = None,
) -> str:
    """Return the C++ or CUDA source Warp generates for a kernel's module.

    Warp compiles one native module per Python module, so the source covers every
    kernel of that module (and every registered overload of a generic kernel). A
    kernel's entry points are named ``<key>_<hash>_cpu_kernel_forward`` /
    ``..._backward`` in C++ and ``<key>_<hash>_cuda_kernel_forward`` / ``..._backward``
    in CUDA. Generating the source does not compile it and needs no GPU.

    Args:
        kernel_or_module: a `JaxKernel`, a ``wp.Kernel``, a ``wp.Module`` or a Python module
            that defines Warp kernels.
        device: ``"cpu"`` for the C++ source of the CPU build, ``"cuda"`` for the CUDA source.
        arch: for ``"cuda"``, the CUDA architecture to generate for (e.g. 90); it only changes
            tile kernels that link NVIDIA's math libraries. By default the arch Warp would
            compile for on the first CUDA device, or Warp's default PTX arch without a GPU.
        block_dim: the threads per block of the build to show (tile code depends on it). By
            default a `JaxKernel`'s own ``block_dim``, else Warp's default (256 on CUDA, 1 on the
            CPU; on the CPU a block dim above 1 applies only with ``wp.config.enable_cpu_blocks``).

    Returns:
        The generated source, as Warp writes it next to the compiled module in its kernel cache.

    Raises:
        TypeError: if ``kernel_or_module`` is none of the accepted kinds.
        ValueError: for an unknown ``device``, or a module without kernels.

    Example:
        ```python
        @wp.kernel
        def triple_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = 3.0 * x[i]

        cuda = jarp.warp.kernel_source(jarp.warp.jax_kernel(triple_kernel), "cuda", arch=90)
        assert "triple_kernel" in cuda and "__global__" in cuda
        ```
    """
    what = "kernel_source()"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"{what}: device must be 'cpu' or 'cuda', got {device!r}.")
    if arch is not None and (isinstance(arch, bool) or not isinstance(arch, int)):
        raise TypeError(f"{what}: arch must be an int such as 90, got {arch!r}.")
    module = _warp_module(kernel_or_module, what)
    block_dim = _block_dim_of(kernel_or_module, block_dim, what)
    if device == "cuda" and arch is None:
        arch = _warp_internals.default_cuda_arch()
    return _warp_internals.module_codegen(module, device, arch, block_dim)


def _archs(arch: int | Iterable[int], what: str) -> tuple[int, ...]:
    values = (arch,) if isinstance(arch, int) else tuple(arch)
    for a in values:
        if isinstance(a, bool) or not isinstance(a, int):
            raise TypeError(f"{what}: arch must be an int or ints such as (80, 90), got {arch!r}.")
    if not values:
        raise ValueError(f"{what}: give at least one CUDA architecture, e.g. arch=(80, 90).")
    supported = list(wp.get_cuda_supported_archs())
    if not supported:
        raise RuntimeError(
            f"{what}: Warp's CUDA compiler (NVRTC) is not available in this installation, so it cannot build for CUDA."
        )
    unknown = [a for a in values if a not in supported]
    if unknown:
        raise ValueError(f"{what}: arch {unknown} not supported by this CUDA toolkit; supported: {supported}.")
    return tuple(dict.fromkeys(values))


def compile_aot(
    kernel_or_module: Any,
    arch: int | Iterable[int] = (80, 90),
    module_dir: str | os.PathLike[str] | None = None,
    *,
    use_ptx: bool = False,
    block_dim: int | None = None,
) -> dict[int, Path]:
    """Compile a kernel's Warp module ahead of time for CUDA architectures, without a GPU.

    Runs Warp's ahead-of-time compiler (``wp.compile_aot_module``, NVRTC), which
    needs no CUDA driver: a CPU-only machine can check that kernels build for a
    GPU and produce the binaries. The whole module is compiled (every kernel,
    every registered overload of a generic kernel). Warp skips the build when
    ``module_dir`` already holds the binary for the module's current hash.

    Args:
        kernel_or_module: a `JaxKernel`, a ``wp.Kernel``, a ``wp.Module`` or a Python module
            that defines Warp kernels.
        arch: one CUDA architecture or several (``80`` is sm_80, Ampere; ``90`` is sm_90, Hopper).
        module_dir: where to write the source (``.cu``), metadata (``.meta``) and binaries;
            by default a ``wp_<module>_<hash>`` directory in Warp's kernel cache.
        use_ptx: build PTX (compiled by the driver when loaded) instead of a CUBIN.
        block_dim: the threads per block to build for: each block dim is its own build (and
            its own module hash), the one a launch with that ``block_dim`` loads. By default a
            `JaxKernel`'s own ``block_dim``, else the module's default (256).

    Returns:
        The path of the compiled binary for each architecture, in the order given
        (``<module_dir>/wp_<module>_<hash>.sm<arch>.cubin`` or ``.ptx``).

    Raises:
        TypeError: for a bad ``kernel_or_module`` or ``arch``.
        ValueError: for an architecture the CUDA toolkit does not support.
        RuntimeError: if Warp has no CUDA compiler here, or the build fails.

    Example:
        ```python
        @wp.kernel
        def triple_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = 3.0 * x[i]

        paths = jarp.warp.compile_aot(triple_kernel, arch=(80, 90), module_dir="build/kernels")
        print(paths[90])  # build/kernels/wp___main___0123abc.sm90.cubin
        ```
    """
    what = "compile_aot()"
    module = _warp_module(kernel_or_module, what)
    _warp_internals.runtime_core()  # Warp must be initialised to know its CUDA toolkit
    archs = _archs(arch, what)
    out_dir = None if module_dir is None else os.fspath(module_dir)
    block_dim = _block_dim_of(kernel_or_module, block_dim, what)
    if block_dim is None or block_dim == module.options["block_dim"]:
        paths = wp.compile_aot_module(module, arch=list(archs), module_dir=out_dir, use_ptx=use_ptx)
    else:
        paths = _warp_internals.compile_aot_variant(module, archs, out_dir, use_ptx, block_dim)
    return {a: Path(p) for a, p in zip(archs, paths, strict=True)}
