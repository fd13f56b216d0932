"""Loaded entry points and launches: a module's compiled forward and backward entry points, the launch bounds and
array layout they take, CUDA launches, copies and captures, and the loaded code jarp lets go of.

Part of the upstream stage (its ``__init__`` lists the modules): `check_internals`, run by
`tests/warp/compat/test_upstream_internals.py`, fails loudly when an internal this module reads changes shape.
"""

# pyright: reportAttributeAccessIssue=false
# (a module where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which Warp's type
# stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import collections
import ctypes
import inspect
from collections.abc import Sequence
from typing import Any

import warp as wp
from warp._src.context import (
    _build_kernel_launch_bounds,
    _cuda_grid_blocks,
    _lean_grid_max_blocks,
    _raise_cuda_launch_error,
    _validate_cluster_launch,
)
from warp._src.deterministic import DeterministicMeta as _DeterministicMeta
from warp._src.deterministic import launch_deterministic as _launch_deterministic
from warp._src.types import array_t as ArrayStruct

from . import _warp_kernels

# Modules whose build raised since `take_build_failures` was last called.
_build_failures: list[str] = []


# Loaded Warp code whose last jarp reference went (a collected `EntryPoints`), waiting to be let go under
# `_WARP_LOCK` (`release_unloads`). Appending needs no lock, so a finaliser may do it on any thread at any point.
_unloads: collections.deque[Any] = collections.deque()


def release_unloads(blocking: bool = False) -> None:
    """Let go of the loaded Warp modules (``ModuleExec``) that collected `EntryPoints` held, under `warp_lock`.

    Warp unloads a module's code when its ``ModuleExec`` is collected (``wp_unload_obj`` or
    ``cuModuleUnload``), which must not overlap a Warp build on another thread. jarp's last reference
    to one is therefore dropped here, at a safe point, instead of wherever an `EntryPoints` happened to
    be collected. Without ``blocking``, a lock held elsewhere leaves the queue for the next safe point.
    """
    if not _unloads or not _warp_kernels.warp_lock().acquire(blocking=blocking):
        return
    try:
        while _unloads:
            _unloads.popleft()  # unloaded here if no one else (Warp's module, a graph) still holds it
    finally:
        _warp_kernels.warp_lock().release()


def take_build_failures() -> list[str]:
    """The names of the Warp modules whose build raised since the last call (and forget them)."""
    if not _build_failures:
        return []
    with _warp_kernels.warp_lock():
        failed = list(_build_failures)
        _build_failures.clear()
    return failed


def contiguous_array(warp_ndim: int, shape: Sequence[int], element_bytes: int) -> ArrayStruct:
    """A Warp ``array_t`` (data and grad pointers 0) for a contiguous, row-major array.

    Args:
        warp_ndim: the number of Warp array dims.
        shape: the Warp shape (without vector/matrix element dims).
        element_bytes: the size of one element (a vector or matrix element counts whole).
    """
    strides = []
    stride = element_bytes
    for n in reversed(shape):
        strides.append(stride)
        stride *= n
    return ArrayStruct(0, 0, warp_ndim, tuple(shape), tuple(reversed(strides)))


def launch_bounds(kernel: wp.Kernel, dims: Sequence[int], block_dim: int) -> ctypes.Structure:
    """Build (and validate) the launch-bounds struct a kernel entry point takes.

    Raises:
        ValueError: if an extent that the kernel reads through ``wp.tid()`` exceeds
            ``TID_MAX_EXTENT`` in the module variant built with ``block_dim`` (Warp's message).
    """
    with _warp_kernels.warp_lock():  # an oversized extent makes Warp generate the module's code to find its exact limit
        return _build_kernel_launch_bounds(tuple(dims), kernel, block_dim)


class EntryPoints:
    """A kernel's compiled entry points on one device, as raw addresses."""

    __slots__ = (
        "backward",
        "backward_smem",
        "block_dim",
        "build_options",
        "cluster_dim",
        "code_hash",
        "device",
        "forward",
        "forward_smem",
        "hooks",
        "module_exec",
    )

    def __init__(
        self,
        device: wp.Device,
        module_exec: Any,
        hooks: Any,
        block_dim: int,
        build_options: dict[str, Any] | None = None,
        code_hash: str | None = None,
    ) -> None:
        # Holding the ModuleExec keeps its binary loaded: Warp unloads a module's code when
        # that object is collected, e.g. after a new overload makes Warp rebuild the module,
        # and the raw entry-point addresses below would then dangle.
        self.module_exec = module_exec
        self.device = device
        self.hooks = hooks
        self.block_dim = block_dim
        # The resolved module options this build was compiled with (`_ffi._native._ranged.ranged_cpu_entry` compiles its companion
        # with them); None where unknown.
        self.build_options = build_options
        # The kernel's hash in this build (`loaded_code_hash`): the code it runs; None where unknown.
        self.code_hash = code_hash
        self.forward = _address(hooks.forward)
        self.backward = _address(hooks.backward)
        self.forward_smem = int(getattr(hooks, "forward_smem_bytes", 0))
        self.backward_smem = int(getattr(hooks, "backward_smem_bytes", 0))
        self.cluster_dim = int(getattr(hooks, "cluster_dim", 1))

    def __del__(self) -> None:
        # Collected on any thread, at any point (a kernel collected during another thread's Warp build): the
        # ModuleExec, which unloads its code when collected, waits for `release_unloads` under Warp's lock.
        # No module globals beyond `_unloads`: at interpreter shutdown they may already be None.
        try:  # noqa: SIM105 (not contextlib.suppress: it may already be None)
            _unloads.append(self.module_exec)
        except Exception:
            pass


def _address(fn: Any) -> int:
    if fn is None:
        return 0
    if isinstance(fn, int):
        return fn
    return ctypes.cast(fn, ctypes.c_void_p).value or 0


def check_cpu_support(what: str) -> None:
    """Raise `RuntimeError` if this Warp build cannot run kernels on the CPU."""
    if not wp.is_cpu_available():
        raise RuntimeError(
            f"{what}: This Warp build does not include CPU support (its LLVM/Clang CPU backend is missing), "
            "so it cannot run on a JAX CPU device. Run on a CUDA device (put the arrays on a GPU, or use "
            "jax.default_device), or install a Warp build with CPU support (the PyPI wheels include it)."
        )


def load_entry_points(kernel: wp.Kernel, device: wp.Device, block_dim: int | None = None) -> EntryPoints:
    """Compile (if needed) and load ``kernel``'s module on ``device``; return its entry points.

    Args:
        kernel: the kernel (a concrete overload).
        device: the Warp device.
        block_dim: the requested block dim (None: Warp's default), resolved for ``device``
            by `resolve_block_dim`; each block dim is its own build of the module.

    Raises:
        RuntimeError: if Warp has no CPU support and ``device`` is the CPU, or Warp returned
            no loaded module (its build failed earlier in this process).
        ValueError: for a CPU block dim above 1024.
    """
    if device.is_cpu:
        check_cpu_support(f"kernel {kernel.key!r}")
    resolved = _warp_kernels.resolve_block_dim(device, block_dim)
    with _warp_kernels.warp_lock():
        release_unloads(blocking=True)  # a safe point: unload the code dropped since
        # a build loaded now compiles the names as they are now: the hash it is loaded under must say so
        _warp_kernels.current_code_hash(kernel, resolved)
        try:
            module_exec = kernel.module.load(device, resolved)
        except BaseException:
            _build_failures.append(kernel.module.name)
            raise
        if module_exec is None:
            raise RuntimeError(
                f"Failed to load Warp module '{kernel.module.name}' on device '{device}' after a previous build "
                f"failure (kernel {kernel.key!r}, block_dim={resolved}). Warp keeps a failed build until the module "
                "changes: see the compiler error printed when it first failed, fix the kernel, and redefine it "
                "(or restart Python)."
            )
        hooks = module_exec.get_kernel_hooks(kernel)
        # The options `Module.load` built (or found cached) this variant with: the ones it resolved for the module's
        # current hash, since it returns a loaded variant only while its hash is current and rebuilds it otherwise.
        # (Under the strip_hash module option Warp returns a loaded variant whatever the hash; then these may be newer.)
        options = kernel.module.resolved_options.get(resolved)
        build_options = None if options is None else dict(options)
        code_hash = _warp_kernels.loaded_code_hash(kernel, module_exec, resolved)
    entry = EntryPoints(device, module_exec, hooks, module_exec.block_dim, build_options, code_hash)
    if not entry.forward:
        raise RuntimeError(
            f"Failed to find the forward entry point of kernel {kernel.key!r} in Warp module "
            f"'{kernel.module.name}' on device '{device}'; the loaded module does not contain this kernel."
        )
    return entry


def module_loaded(kernel: wp.Kernel, device: wp.Device, block_dim: int | None = None) -> bool:
    """Whether ``kernel``'s module is loaded, and current, on ``device`` (so `load_entry_points` would not load it).

    The same test ``Module.load`` makes before it builds or loads: a loaded variant for the resolved block dim whose
    hash is the module's current one. It loads nothing (hashing a module generates no code and touches no device).
    """
    resolved = _warp_kernels.resolve_block_dim(device, block_dim)
    module = kernel.module
    with _warp_kernels.warp_lock():
        loaded = module.execs.get((device.context, resolved))
        if loaded is None:
            return False
        return bool(module.options["strip_hash"]) or loaded.module_hash == module.get_module_hash(resolved)


def stream_is_capturing(stream: int) -> bool:
    """Whether the CUDA stream ``stream`` (a raw ``CUstream``) is capturing a graph (as ``wp.Stream.is_capturing``)."""
    return bool(_warp_kernels.runtime_core().wp_cuda_stream_is_capturing(ctypes.c_void_p(stream)))


def capture_modules(capture: object) -> list[Any]:
    """The loaded modules (``ModuleExec``) Warp retained for the graph a ``wp.ScopedCapture`` captured.

    Warp adds a module to its capture's graph when a launch during the capture uses it; holding them keeps
    their code loaded (a rebuild of a module would otherwise unload code a live graph still calls).
    """
    graph = getattr(capture, "graph", None)
    return list(getattr(graph, "module_execs", ()) or ())


def loads_during_capture() -> bool:
    """Whether the CUDA driver can load a module while a stream captures a graph (driver 12.3 or newer).

    ``wp.capture_begin`` makes the same test to decide whether to load every module before a capture starts.
    """
    _warp_kernels.runtime_core()
    version = wp._src.context.runtime.driver_version
    return version is not None and tuple(version) >= (12, 3)


def cpu_block_error() -> str:
    """Take (and clear) the error a cooperative CPU block launch recorded, or ``""``."""
    err = _warp_kernels.runtime_core().wp_take_cpu_block_error()
    return err.decode("utf-8", errors="replace") if err else ""


def cuda_memset(device: wp.Device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at ``ptr`` on ``device``, ordered on ``stream``.

    Raises:
        RuntimeError: if the memset failed, with Warp's diagnosis of the CUDA error.
    """
    if not _warp_kernels.runtime_core().wp_memset_device(device.context, ptr, 0, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(
            f"Warp failed to zero {nbytes} bytes on {device}: {wp._src.context.runtime.get_error_string()}"
        )


def cuda_copy(device: wp.Device, dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from ``src`` to ``dst`` on ``device``, ordered on ``stream``.

    Raises:
        RuntimeError: if the copy failed, with Warp's diagnosis of the CUDA error.
    """
    if not _warp_kernels.runtime_core().wp_memcpy_d2d(device.context, dst, src, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(
            f"Warp failed to copy {nbytes} bytes on {device}: {wp._src.context.runtime.get_error_string()}"
        )


def cuda_launch_failure(kernel: wp.Kernel, entry: EntryPoints, adjoint: bool) -> str:
    """How ``wp.launch``'s message for a failed launch of ``entry`` begins, for a caller that adds the CUDA error.

    A kernel whose dynamic shared memory could not be configured fails every launch: then this is Warp's whole
    diagnosis of that shortfall (it is known when the module loads). Otherwise Warp's message follows with
    the error of the failed call (``wp_get_error_string``), which only the failure itself can supply.
    """
    hooks = entry.hooks
    if getattr(hooks, "backward_smem_shortfall" if adjoint else "forward_smem_shortfall", None) is not None:
        try:
            _raise_cuda_launch_error(kernel, entry.device, hooks, adjoint)  # the shortfall branch reads no error
        except RuntimeError as e:
            return str(e)
    return f"Error launching kernel: {kernel.key} on device {entry.device}"


def check_cuda_grid(kernel: wp.Kernel, entry: EntryPoints, size: int) -> None:
    """Make the checks of a CUDA launch grid that ``wp.launch`` makes before it calls ``wp_cuda_launch_kernel``.

    jarp's launch dims are fixed per plan, so these run once, when a (plan, device) is prepared; ``size``
    is the launch's thread count (not zero: an empty grid launches nothing).

    Raises:
        ValueError: if the kernel is clustered and the block count ``ceil(size / block_dim)`` is not a
            multiple of its ``cluster_dim`` (Warp's message): the padding blocks would skip the kernel body
            and leave cluster barriers waiting for them.
        RuntimeError: if a kernel without a grid-stride loop needs more blocks than the lean 3D grid holds.
    """
    _validate_cluster_launch(entry.cluster_dim, size, entry.block_dim, 0)
    if not kernel.grid_stride and _cuda_grid_blocks(size, entry.block_dim) > _lean_grid_max_blocks(entry.block_dim):
        raise RuntimeError(
            f"Kernel '{kernel.key}' was launched with dim.size={size} (block_dim={entry.block_dim}), exceeding the "
            f"lean 3D grid capacity of {_lean_grid_max_blocks(entry.block_dim) * entry.block_dim} work items. Use "
            "@wp.kernel(grid_stride=True) to launch dimensions this large."
        )


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
    if _warp_kernels.runtime_core().wp_cuda_launch_kernel(
        entry.device.context,
        fn,
        bounds.size,
        0,
        entry.block_dim,
        int(kernel.grid_stride),  # pyright: ignore[reportArgumentType]  # set for a loaded kernel
        entry.cluster_dim,
        smem,
        params,
        ctypes.c_void_p(stream),
        None,
    ):
        _raise_cuda_launch_error(kernel, entry.device, hooks, adjoint)


def cuda_hidden_params(kernel: wp.Kernel, block_dim: int | None = None) -> str | None:
    """The Warp feature that adds hidden parameters to ``kernel``'s CUDA entry points, or None if none does.

    In deterministic mode (``wp.config.deterministic`` when the module was created, or the module
    option ``"deterministic"``, other than ``NOT_GUARANTEED``) Warp's code generator appends buffers
    (``_wp_det_phase``, ``_wp_det_debug``, ``_wp_det_overflow``, one scatter/counter buffer per
    atomic target) to the CUDA forward and backward signatures of every kernel whose adjoint records
    atomics (``adj.det_meta.needs_deterministic``), and ``wp.launch`` supplies them through its own
    launcher (``warp._src.deterministic.launch_deterministic``). The CPU signatures are unchanged.
    Whether a kernel gets them is decided, without a GPU, as Warp's
    ``Module._snapshot_deterministic_metadata`` does: build the kernel's adjoint with the module's
    resolved options for ``block_dim`` (None: Warp's CUDA default, 256) and read its ``det_meta``.

    Returns:
        ``"deterministic mode (RUN_TO_RUN)"`` (or ``GPU_TO_GPU``), or None.
    """
    block_dim = _warp_kernels.CUDA_BLOCK_DIM if block_dim is None else block_dim
    module = kernel.module
    with _warp_kernels.warp_lock():
        options = module.resolve_options(wp.config, block_dim=block_dim)
        mode = options.get("deterministic", wp.config.DeterministicMode.NOT_GUARANTEED)
        if mode == wp.config.DeterministicMode.NOT_GUARANTEED:
            return None
        _warp_kernels.runtime_core()  # Warp must be initialised before code generation
        module.get_module_hash(block_dim)  # resolve wp.static() expressions, as a build does first
        with _warp_kernels.codegen_lock():
            kernel.adj.build(None, options | {"output_arch": None})
            meta = kernel.adj.det_meta
    if meta is None or not meta.needs_deterministic:
        return None
    return f"deterministic mode ({mode.name})"


def cuda_launch_address() -> int:
    """The address of Warp's native ``wp_cuda_launch_kernel`` (the call `cuda_launch` makes), for native callers."""
    return _address(_warp_kernels.runtime_core().wp_cuda_launch_kernel)


def error_string_address() -> int:
    """The address of Warp's native ``wp_get_error_string`` (its last CUDA error, as text), for native callers."""
    return _address(_warp_kernels.runtime_core().wp_get_error_string)


def cuda_memcpy_address() -> int:
    """The address of Warp's native ``wp_memcpy_d2d`` (the call `cuda_copy` makes), for native callers."""
    return _address(_warp_kernels.runtime_core().wp_memcpy_d2d)


def cuda_memset_address() -> int:
    """The address of Warp's native ``wp_memset_device`` (the call `cuda_memset` makes), for native callers."""
    return _address(_warp_kernels.runtime_core().wp_memset_device)


def check_internals() -> None:
    """Raise `AssertionError` if a Warp internal this module relies on has changed shape."""
    # cuda_hidden_params: the module option, its enum, the adjoint's deterministic metadata and Warp's launch path
    modes = {m.name for m in wp.config.DeterministicMode}
    assert {"NOT_GUARANTEED", "RUN_TO_RUN", "GPU_TO_GPU"} <= modes, f"DeterministicMode changed: {modes}"
    kernel_module = wp.get_module(check_internals.__module__)
    assert "deterministic" in kernel_module.options, "the 'deterministic' module option is gone"
    assert hasattr(wp.Module, "_snapshot_deterministic_metadata"), "Warp's deterministic metadata snapshot moved"
    assert callable(_launch_deterministic), "warp._src.deterministic.launch_deterministic is gone"
    assert isinstance(getattr(_DeterministicMeta, "needs_deterministic", None), property), (
        "DeterministicMeta.needs_deterministic is no longer a property"
    )
    assert isinstance(kernel_module.execs, dict), "Module.execs changed (module_loaded)"
    assert "strip_hash" in kernel_module.options, "Module.options lost strip_hash (module_loaded)"
    core = _warp_kernels.runtime_core()
    assert hasattr(wp._src.context.runtime, "driver_version"), "runtime.driver_version moved (loads_during_capture)"
    assert isinstance(wp.Graph(wp.get_device("cpu")).module_execs, set), "Graph.module_execs changed (capture_modules)"
    for attr in ("wp_cuda_launch_kernel", "wp_memset_device", "wp_take_cpu_block_error", "wp_cuda_stream_is_capturing"):
        assert hasattr(core, attr), f"warp native library lost {attr}"
    # jarp's native handler calls these two with exactly these parameters (see _ffi/_native/_handler.cpp)
    assert len(core.wp_cuda_launch_kernel.argtypes) == 11, "wp_cuda_launch_kernel's parameters changed"
    assert len(core.wp_memset_device.argtypes) == 5, "wp_memset_device's parameters changed"
    error_string = core.wp_get_error_string
    assert (error_string.argtypes or []) == [], "wp_get_error_string's parameters changed"
    assert error_string.restype is ctypes.c_char_p, "wp_get_error_string no longer returns a C string"
    hook_params = inspect.signature(wp._src.context.KernelHooks).parameters
    assert {"forward_smem_shortfall", "backward_smem_shortfall"} <= set(hook_params), (
        "KernelHooks lost its shared-memory shortfalls (cuda_launch_failure)"
    )
