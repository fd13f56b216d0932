"""Every use of Warp's private internals (``warp._src`` and private attributes) in jarp.

Warp's public API launches kernels through ``wp.launch``, which costs tens of
microseconds of Python per call. jarp's FFI callback instead calls a module's
compiled entry points directly, which needs a handful of private pieces: the
ctypes layout of an array argument, the launch-bounds builder, the loaded
module's kernel hooks and the CUDA launch function. They all live here, so a Warp
upgrade is a one-file change, and `tests/warp/test_internals.py` checks that
each one still has the shape jarp relies on.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

import warp as wp
from warp._src.codegen import Struct as _Struct
from warp._src.context import _build_kernel_launch_bounds, _raise_cuda_launch_error
from warp._src.types import array_t as ArrayStruct

__all__ = [
    "ArrayStruct",
    "EntryPoints",
    "cuda_launch",
    "cuda_memset",
    "default_cuda_arch",
    "is_struct_type",
    "kernel_params",
    "kernel_source",
    "launch_bounds",
    "load_entry_points",
    "make_kernel",
    "module_codegen",
    "runtime_core",
    "struct_ctype",
    "struct_fields",
    "struct_instance_ctype",
    "struct_instance_type",
    "struct_name",
]

_LOAD_LOCK = threading.Lock()
# Warp's CPU kernels run one thread per block unless cooperative CPU blocks are
# enabled; jarp never enables them, and CUDA keeps Warp's default of 256.
_CPU_BLOCK_DIM = 1
_CUDA_BLOCK_DIM = 256


def kernel_params(kernel: wp.Kernel) -> tuple[tuple[str, Any], ...]:
    """Return ``(name, warp_type)`` for each parameter of ``kernel``, in order."""
    return tuple((arg.label, arg.type) for arg in kernel.adj.args)


def kernel_source(kernel: wp.Kernel) -> str:
    """The Python source Warp generated ``kernel`` from (also for kernels built from explicit source)."""
    return kernel.adj.source


def make_kernel(func: Callable[..., Any], source: str, key: str, module_name: str) -> wp.Kernel:
    """Build a kernel from explicit source in its own module (so the original module is not rebuilt).

    ``func`` supplies the parameter annotations (``__signature__``/``__annotations__``),
    globals and closure that the source's names resolve against.
    """
    return wp.Kernel(func, key=key, module=wp.get_module(module_name), source=source)


def launch_bounds(kernel: wp.Kernel, dims: Sequence[int], block_dim: int) -> ctypes.Structure:
    """Build (and validate) the launch-bounds struct a kernel entry point takes."""
    return _build_kernel_launch_bounds(tuple(dims), kernel, block_dim)


class EntryPoints:
    """A kernel's compiled entry points on one device, as raw addresses."""

    __slots__ = (
        "backward",
        "backward_smem",
        "block_dim",
        "cluster_dim",
        "device",
        "forward",
        "forward_smem",
        "hooks",
        "module_exec",
    )

    def __init__(self, device: wp.context.Device, module_exec: Any, hooks: Any, block_dim: int) -> None:
        # Holding the ModuleExec keeps its binary loaded: Warp unloads a module's code when
        # that object is collected, e.g. after a new overload makes Warp rebuild the module,
        # and the raw entry-point addresses below would then dangle.
        self.module_exec = module_exec
        self.device = device
        self.hooks = hooks
        self.block_dim = block_dim
        self.forward = _address(hooks.forward)
        self.backward = _address(hooks.backward)
        self.forward_smem = int(getattr(hooks, "forward_smem_bytes", 0))
        self.backward_smem = int(getattr(hooks, "backward_smem_bytes", 0))
        self.cluster_dim = int(getattr(hooks, "cluster_dim", 1))


def _address(fn: Any) -> int:
    if fn is None:
        return 0
    if isinstance(fn, int):
        return fn
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def load_entry_points(kernel: wp.Kernel, device: wp.context.Device) -> EntryPoints:
    """Compile (if needed) and load ``kernel``'s module on ``device``; return its entry points."""
    block_dim = _CPU_BLOCK_DIM if device.is_cpu else _CUDA_BLOCK_DIM
    with _LOAD_LOCK:
        module_exec = kernel.module.load(device, block_dim)
        if module_exec is None:
            raise RuntimeError(
                f"Failed to load Warp module {kernel.module.name!r} (kernel {kernel.key!r}) on {device} after a "
                "previous build failure; see Warp's compiler output above."
            )
        hooks = module_exec.get_kernel_hooks(kernel)
    return EntryPoints(device, module_exec, hooks, module_exec.block_dim)


def runtime_core() -> Any:
    """Warp's native library handle (``wp_*`` functions)."""
    if wp._src.context.runtime is None:
        wp.init()
    return wp._src.context.runtime.core


def cuda_memset(device: wp.context.Device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at ``ptr`` on ``device``, ordered on ``stream``."""
    if not runtime_core().wp_memset_device(device.context, ptr, 0, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(f"Warp failed to zero {nbytes} bytes on {device}")


def cuda_launch(
    kernel: wp.Kernel,
    entry: EntryPoints,
    bounds: ctypes.Structure,
    params: ctypes.Array,
    stream: int,
    adjoint: bool,
) -> None:
    """Launch a loaded kernel's forward or backward entry point on a CUDA stream."""
    hooks = entry.hooks
    fn = hooks.backward if adjoint else hooks.forward
    smem = entry.backward_smem if adjoint else entry.forward_smem
    if runtime_core().wp_cuda_launch_kernel(
        entry.device.context,
        fn,
        bounds.size,
        0,
        entry.block_dim,
        int(kernel.grid_stride),
        entry.cluster_dim,
        smem,
        params,
        ctypes.c_void_p(stream),
        None,
    ):
        _raise_cuda_launch_error(kernel, entry.device, hooks, adjoint)


# -- structs --


def is_struct_type(warp_type: Any) -> bool:
    """Whether ``warp_type`` is a Warp struct type (what ``@wp.struct`` returns)."""
    return isinstance(warp_type, _Struct)


def struct_fields(struct_type: Any) -> tuple[tuple[str, Any], ...]:
    """Return ``(name, warp_type)`` for each field of a Warp struct type, in declaration (memory) order."""
    return tuple((name, var.type) for name, var in struct_type.vars.items())


def struct_name(struct_type: Any) -> str:
    """A Warp struct type's short name: its class's qualified name (``Mesh``, ``Material[float64]``)."""
    return struct_type.cls.__qualname__


def struct_ctype(struct_type: Any) -> type[ctypes.Structure]:
    """The ctypes layout Warp passes a struct type by value in (nested structs are inlined)."""
    return struct_type.ctype


def struct_instance_type(value: Any) -> Any:
    """The Warp struct type of a struct instance, or None if ``value`` is not one."""
    if not wp.types.is_struct(value):
        return None
    return value._cls


def struct_instance_ctype(value: Any) -> ctypes.Structure:
    """The ctypes struct a Warp struct instance passes to a kernel (shared with the instance, not a copy)."""
    return value.__ctype__()


def check_internals() -> None:
    """Raise `AssertionError` if a Warp internal jarp relies on has changed shape."""
    names = [f[0] for f in ArrayStruct._fields_]
    assert names[:2] == ["data", "grad"], f"warp array_t fields changed: {names}"
    assert ArrayStruct.data.offset == 0, "warp array_t.data is no longer the first field"
    assert hasattr(wp.Kernel, "__init__")
    probe = wp.struct(
        type("_JarpProbe", (), {"__annotations__": {"a": wp.array(dtype=float), "k": float}}), module="unique"
    )
    assert is_struct_type(probe), "wp.struct no longer returns a warp._src.codegen.Struct"
    assert [n for n, _ in struct_fields(probe)] == ["a", "k"], "Struct.vars changed"
    assert [f[0] for f in struct_ctype(probe)._fields_] == ["a", "k"], "Struct.ctype changed"
    assert struct_ctype(probe)._fields_[0][1] is ArrayStruct, "struct array fields are no longer array_t"
    assert struct_instance_type(probe()) is probe, "StructInstance._cls changed"
    assert struct_name(probe) == "_JarpProbe", "Struct.cls changed"
    for attr in ("wp_cuda_launch_kernel", "wp_memset_device"):
        assert hasattr(runtime_core(), attr), f"warp native library lost {attr}"


# -- inspection --


def module_codegen(module: wp.Module, target: str, arch: int | None = None) -> str:
    """Warp's generated C++ (``target="cpu"``) or CUDA (``target="cuda"``) source of a Warp module.

    The source is the one a build of ``module`` compiles: it covers every kernel of
    the module (each registered overload of a generic kernel) with the block dim
    jarp loads it with (1 on the CPU, 256 on CUDA). ``arch`` is the CUDA output
    architecture (e.g. 90); it only changes the code of tile kernels that link
    NVIDIA's math libraries, and is ignored for the CPU.
    """
    runtime_core()  # Warp must be initialised before code generation
    is_cpu = target == "cpu"
    block_dim = _CPU_BLOCK_DIM if is_cpu else _CUDA_BLOCK_DIM
    module.get_module_hash(block_dim)  # resolve wp.static() expressions and cache the variant's hasher
    options = module.resolve_options(wp.config, block_dim=block_dim) | {"output_arch": None if is_cpu else arch}
    source, _ext, _meta, _ltoirs, _fatbins = module._run_codegen(options, is_cpu)
    return source


def default_cuda_arch() -> int:
    """The CUDA arch Warp compiles for on the first CUDA device, or Warp's default PTX arch without a GPU."""
    runtime_core()
    if wp.is_cuda_available():
        return int(wp.get_cuda_device().get_cuda_compile_arch())
    return int(wp._src.context.runtime.default_ptx_arch)
