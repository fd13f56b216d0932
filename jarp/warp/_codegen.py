"""Generated kernel source and ahead-of-time builds: `kernel_source` and `compile_aot`.

Both work on the Warp module behind a kernel, which is Warp's compilation unit: one module holds every
kernel of a Python module (and every registered overload of a generic kernel).
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import warp as wp

from ._callable import JaxCallable
from ._kernel import JaxKernel
from ._plan import _launch_checks
from ._upstream import _warp_internals

__all__ = ["compile_aot", "kernel_source"]


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
