"""Generated kernel source and ahead-of-time builds: `kernel_source` and `compile_aot`.

Both work on the Warp module behind a kernel, which is Warp's compilation unit: one module holds every
kernel of a Python module (and every registered overload of a generic kernel).
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import warp as wp

from ._callable import JaxCallable
from ._ffi import _arg_blocks
from ._ffi._registry import registry
from ._kernel import JaxKernel
from ._plan import _launch_checks
from ._plan._values import Runs
from ._upstream import _warp_builds, _warp_kernels


def _warp_module(obj: object, what: str) -> wp.Module:
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


def _block_dim_of(obj: object, block_dim: int | None, what: str) -> int | None:
    """The requested block dim: ``block_dim`` if given, else a `JaxKernel`'s own, else Warp's default (None)."""
    if block_dim is not None:
        return _launch_checks.check_block_dim(block_dim, what)
    return obj.block_dim if isinstance(obj, JaxKernel) else None


def kernel_source(
    kernel_or_module: object,
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
        arch = _warp_builds.default_cuda_arch()
    return _warp_builds.module_codegen(module, device, arch, block_dim)


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
    kernel_or_module: object,
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
    _warp_kernels.runtime_core()  # Warp must be initialised to know its CUDA toolkit
    archs = _archs(arch, what)
    out_dir = None if module_dir is None else os.fspath(module_dir)
    block_dim = _block_dim_of(kernel_or_module, block_dim, what)
    if block_dim is None or block_dim == module.options["block_dim"]:
        paths = wp.compile_aot_module(module, arch=list(archs), module_dir=out_dir, use_ptx=use_ptx)
    else:
        paths = _warp_builds.compile_aot_variant(module, archs, out_dir, use_ptx, block_dim)
    return {a: Path(p) for a, p in zip(archs, paths, strict=True)}


# ======================================================================================================================
# A GPU-free check of the CUDA launches jarp prepares
# ======================================================================================================================

_PTX_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)")
_PTX_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8}


def ptx_entry_params(ptx: str) -> dict[str, list[int]]:
    """The byte size of each ``.param`` of each ``.entry`` in PTX text, by entry name.

    A parameter is ``.param [.align N] .<type>[ .ptr...] name[[count]]``; its size is the type's
    (``.b8``/``.u8``: 1 ... ``.f64``: 8) times the count.
    """
    entries = {}
    for match in _PTX_ENTRY.finditer(ptx):
        sizes = []
        for decl in match.group(2).split(","):
            tokens = decl.split()
            if not tokens:
                continue
            if tokens[0] != ".param":
                raise ValueError(f"unexpected PTX parameter declaration {decl.strip()!r} in entry {match.group(1)}")
            kind = next(t for t in tokens[1:] if re.fullmatch(r"\.[bsuf]\d+", t))
            count = re.search(r"\[(\d+)\]$", tokens[-1])
            sizes.append(_PTX_SIZES[kind[2:]] * (int(count.group(1)) if count else 1))
        entries[match.group(1)] = sizes
    return entries


@dataclasses.dataclass(frozen=True)
class CudaLaunchCheck:
    """One CUDA launch jarp prepares, against the entry point Warp compiled for it (see `check_cuda_launches`).

    Attributes:
        handle: the plan's handle (as `list_plans` shows it).
        name: the plan's name, as error messages show it.
        entry: the symbol of the compiled entry point the launch calls.
        arch: the CUDA architecture it was compiled for.
        passed: ``(parameter name, bytes)`` of each parameter jarp's launch passes, in order (the launch
            bounds first; in a backward launch, the adjoint parameters follow the primal ones).
        compiled: the bytes of each parameter the compiled entry point declares, in order.
    """

    handle: int
    name: str
    entry: str
    arch: int
    passed: tuple[tuple[str, int], ...]
    compiled: tuple[int, ...]

    @property
    def ok(self) -> bool:
        """Whether the launch passes exactly the parameters the compiled kernel takes."""
        return tuple(size for _, size in self.passed) == self.compiled

    def __str__(self) -> str:
        if self.ok:
            return f"{self.name}: {self.entry} (sm_{self.arch}) takes {len(self.compiled)} parameters, as jarp passes"
        passed = ", ".join(f"{n}: {s}" for n, s in self.passed)
        return (
            f"{self.name}: {self.entry} (sm_{self.arch}) declares {len(self.compiled)} parameters of "
            f"{list(self.compiled)} bytes, but jarp's launch passes {len(self.passed)}: [{passed}]"
        )


class CudaLaunchMismatchError(RuntimeError):
    """A CUDA launch jarp prepares disagrees with the compiled kernel (see `check_cuda_launches`)."""


def check_cuda_launches(handles: Iterable[int] | None = None, *, arch: int | None = None) -> list[CudaLaunchCheck]:
    """Check, without a GPU, that jarp's CUDA launches pass exactly the parameters of the compiled kernels.

    For each kernel plan (every plan this process has lowered, by default), Warp compiles the kernel's
    module for CUDA to PTX with NVRTC (no driver needed; builds are cached in Warp's kernel cache), and
    the ``.param`` list of the plan's forward or backward entry point is compared, in number and in bytes,
    with the parameter block jarp's launch would pass (the same list both launch paths use). A
    disagreement would be a silent crash or wrong values on a GPU; here it is an error. Plans of
    `jax_callable` functions are skipped: their kernels launch through ``wp.launch``.

    Args:
        handles: the plan handles to check (``PlanInfo.handle`` from `list_plans`); by default every live plan.
        arch: the CUDA architecture to compile for; by default the one Warp would use (Warp's default PTX
            arch without a GPU).

    Returns:
        One `CudaLaunchCheck` per kernel plan checked, all passing.

    Raises:
        CudaLaunchMismatchError: listing every launch whose parameters disagree with its compiled entry point.
        RuntimeError: if Warp has no CUDA compiler here.

    Example:
        ```python
        f = jax.jit(lambda x: jarp.warp.jax_kernel(triple_kernel)(x)[0])
        f.trace(jnp.ones(8)).lower(lowering_platforms=("cuda",))  # prepares the plan; no GPU needed
        for check in jarp.warp.check_cuda_launches():
            print(check)  # triple_kernel: triple_kernel_0a1b2c3d_cuda_kernel_forward (sm_75) takes 3 parameters, ...
        ```
    """
    what = "check_cuda_launches()"
    _warp_kernels.runtime_core()
    if arch is None:
        arch = _warp_builds.default_cuda_arch()
    (arch,) = _archs(arch, what)
    items = registry.items() if handles is None else tuple((h, registry.plan(h)) for h in handles)
    ptx_of: dict[tuple[int, int], dict[str, list[int]]] = {}
    checks = []
    for handle, plan in items:
        if plan.runs is not Runs.KERNEL:
            continue
        kernel = plan.target
        block_dim = plan.block_dim if plan.block_dim is not None else _warp_kernels.CUDA_BLOCK_DIM
        key = (id(kernel.module), block_dim)
        if key not in ptx_of:
            (path,) = _warp_builds.compile_aot_variant(kernel.module, (arch,), None, True, block_dim)
            ptx_of[key] = ptx_entry_params(path.read_text())
        forward, backward = _warp_builds.cuda_entry_names(kernel, block_dim)
        entry = backward if plan.adjoint else forward
        if entry is None or entry not in ptx_of[key]:
            raise RuntimeError(f"{what}: the CUDA build of {plan.name} has no entry point {entry!r}.")
        passed = _arg_blocks.plan_cuda_params(plan, block_dim)
        checks.append(
            CudaLaunchCheck(
                handle=handle,
                name=plan.name,
                entry=entry,
                arch=arch,
                passed=tuple((p.name, p.size) for p in passed),
                compiled=tuple(ptx_of[key][entry]),
            )
        )
    bad = [c for c in checks if not c.ok]
    if bad:
        raise CudaLaunchMismatchError(
            f"{what}: {len(bad)} of {len(checks)} CUDA launches disagree with their compiled kernels (on a GPU "
            "they would read parameters that were never passed); please report this to jarp:\n"
            + "\n".join(f"  {c}" for c in bad)
        )
    return checks
