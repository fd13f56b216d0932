"""Every use of Warp's private internals (``warp._src`` and private attributes) in jarp.

Warp's public API launches kernels through ``wp.launch``, which costs tens of
microseconds of Python per call. jarp's FFI callback instead calls a module's
compiled entry points directly, which needs a handful of private pieces: the
ctypes layout of an array argument, the launch-bounds builder, the loaded
module's kernel hooks and the CUDA launch function, the family of an array
annotation and the deterministic-mode metadata that adds hidden CUDA parameters.
They all live here, so a Warp
upgrade is a one-file change, and `tests/warp/compat/test_upstream_internals.py` checks that
each one still has the shape jarp relies on.
"""

# pyright: reportAttributeAccessIssue=false
# (this module is where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which
# Warp's type stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import ast
import collections
import ctypes
import inspect
import os
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import warp as wp
from warp._src import build as _build
from warp._src.codegen import _TID_MAX_EXTENT, _codegen_lock
from warp._src.codegen import Struct as _Struct
from warp._src.context import (
    _build_kernel_launch_bounds,
    _cuda_grid_blocks,
    _get_cpu_target_hash,
    _lean_grid_max_blocks,
    _raise_cuda_launch_error,
    _resolve_launch_block_dim,
    _validate_cluster_launch,
    _validate_cuda_arch_suffix,
)
from warp._src.deterministic import DeterministicMeta as _DeterministicMeta
from warp._src.deterministic import launch_deterministic as _launch_deterministic
from warp._src.types import array_t as ArrayStruct
from warp._src.types import array_types as _ARRAY_CLASSES
from warp._src.types import concrete_array_type as _concrete_array_type

# Warp builds modules without locking: two threads loading, overloading or defining kernels at
# once corrupt its module state (half-written cache directories, a module hash changing mid-build).
# jarp takes this one re-entrant lock around every call that asks Warp to create, overload,
# generate code for, build or load anything.
# Lock order (see the FFI executors' `_lock`): the executors' lock, then this one, then Warp's own
# `_codegen_lock`, which jarp takes only while it holds this one. A thread that holds this lock and
# not the executors' lock must not wait for the executors' lock: code that may reach the FFI stage
# while holding this lock (a callable's first run, a factory that calls a jarp module) takes the
# executors' lock first.
_WARP_LOCK = threading.RLock()
# Modules whose build raised since `take_build_failures` was last called.
_build_failures: list[str] = []
# Warp's default block dim on CUDA: 256 threads per block (the CPU runs one thread per block unless
# ``wp.config.enable_cpu_blocks`` makes a requested block dim cooperative).
CUDA_BLOCK_DIM = 256
# The most threads a launch may have along one dim (Warp refuses more).
TID_MAX_EXTENT = _TID_MAX_EXTENT


def warp_lock() -> threading.RLock:
    """The re-entrant lock jarp holds while Warp creates, overloads, generates code for, builds or loads anything.

    Warp's module building is not thread-safe (two first launches of one module from
    two threads can fail with a missing cache file); taking this lock serialises jarp's
    own calls into it. Launches of loaded code do not take it.

    Example:
        ```python
        with warp_lock():
            overload = wp.overload(kernel, arg_types)
        ```
    """
    return _WARP_LOCK


def warp_lock_held() -> bool:
    """Whether this thread holds `warp_lock` (for assertions and tests)."""
    return _WARP_LOCK._is_owned()  # type: ignore[attr-defined]  # RLock's own check, in C and in Python


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
    if not _unloads or not _WARP_LOCK.acquire(blocking=blocking):
        return
    try:
        while _unloads:
            _unloads.popleft()  # unloaded here if no one else (Warp's module, a graph) still holds it
    finally:
        _WARP_LOCK.release()


def take_build_failures() -> list[str]:
    """The names of the Warp modules whose build raised since the last call (and forget them)."""
    if not _build_failures:
        return []
    with _WARP_LOCK:
        failed = list(_build_failures)
        _build_failures.clear()
    return failed


def resolve_block_dim(device: wp.Device, block_dim: int | None) -> int:
    """The block dim Warp builds and launches ``device``'s module variant with for a requested ``block_dim``.

    ``None`` is Warp's default (256 on CUDA, 1 on the CPU). On the CPU a request above 1
    takes effect only with ``wp.config.enable_cpu_blocks`` (cooperative CPU blocks);
    otherwise it resolves to 1, as in ``wp.launch``.

    Raises:
        ValueError: for a CPU request above 1024.
    """
    return int(_resolve_launch_block_dim(device, block_dim))


# Warp's array classes (``warp._src.types.array_types``), by name: only ``"array"`` is an ``array_t`` argument.
ARRAY_KINDS = ("array", "indexedarray", "fabricarray", "indexedfabricarray", "fixedarray")


def array_kind(warp_type: Any) -> str | None:
    """The name of the Warp array class an array annotation (or array) belongs to; None if it is no array.

    ``wp.types.is_array`` is true for every one of Warp's array classes, whose kernel arguments have
    different layouts: ``"array"`` (``array_t``), ``"indexedarray"`` (``indexedarray_t``: an ``array_t``
    and one index array per dim), ``"fabricarray"`` / ``"indexedfabricarray"`` (Omniverse Fabric
    buckets), ``"fixedarray"`` (a stack array local to Warp code, never a parameter). Annotations
    (``wp.indexedarray[float]``), annotation instances (``wp.indexedarray(dtype=float)``) and
    subclasses all resolve to their family.

    Example:
        >>> import warp as wp
        >>> array_kind(wp.indexedarray(dtype=float)), array_kind(wp.array2d[float]), array_kind(wp.float32)
        ('indexedarray', 'array', None)
    """
    if not wp.types.is_array(warp_type):
        return None
    return _concrete_array_type(warp_type).__name__


def vector_shape(dtype: Any) -> tuple[int, ...]:
    """The shape of a Warp vector or matrix type: ``(3,)`` for ``wp.vec3``, ``(3, 3)`` for ``wp.mat33``."""
    return tuple(int(d) for d in dtype._shape_)


def scalar_type(dtype: Any) -> Any:
    """The scalar type of a Warp vector or matrix type: ``wp.float64`` for ``wp.vec3d``."""
    return dtype._wp_scalar_type_


def kernel_params(kernel: wp.Kernel | wp.Function) -> tuple[tuple[str, Any], ...]:
    """Return ``(name, warp_type)`` for each parameter of ``kernel`` (or of a ``@wp.func``), in order."""
    return tuple((arg.label, arg.type) for arg in kernel.adj.args)


def kernel_source(kernel: wp.Kernel | wp.Function) -> str:
    """The Python source Warp generated ``kernel`` (or a ``@wp.func``) from (also for kernels built from explicit source)."""
    return kernel.adj.source


def function_arg_types(function: wp.Function) -> dict[str, Any]:
    """The annotations Warp resolved for each parameter of one overload of a ``@wp.func``."""
    return dict(function.adj.arg_types)


def copyable_overloads(function: wp.Function) -> list[wp.Function] | None:
    """The overloads of ``function`` the user defined (not the instances Warp makes of a generic one), or None
    where one cannot be copied from its Python source: a custom adjoint or replay, native code, a transformed
    syntax tree."""
    found: dict[int, wp.Function] = {}
    for f in (*function.user_templates.values(), *function.user_overloads.values(), function):
        if f.generic_parent is None:
            found.setdefault(id(f), f)
    for f in found.values():
        adj = getattr(f, "adj", None)
        if (
            adj is None
            or f.custom_grad_func is not None
            or f.custom_replay_func is not None
            or f.native_snippet is not None
            or getattr(adj, "custom_reverse_mode", False)
            or getattr(adj, "transformers", None)
        ):
            return None
    return list(found.values())


def make_kernel(
    func: Callable[..., Any],
    source: str,
    key: str,
    module_name: str,
    options: dict[str, Any] | None = None,
    like: wp.Kernel | None = None,
) -> wp.Kernel:
    """Build a kernel from explicit source in its own module (so the original module is not rebuilt).

    ``func`` supplies the parameter annotations (``__signature__``/``__annotations__``),
    globals and closure that the source's names resolve against. The new module takes the module options of
    ``like``'s module (``fast_math``, ``enable_backward``, ``max_unroll``, ``mode``...) and the kernel takes
    ``like``'s kernel options, so a variant builds as the kernel it derives from; ``options`` are module options
    applied over them (``{"mode": "debug"}``).
    """
    with _WARP_LOCK:
        module = wp.get_module(module_name)
        if like is not None:
            module.options.update(like.module.options)
        if options:
            module.options.update(options)
        kernel_options = dict(like.options) if like is not None else None
        return wp.Kernel(func, key=key, module=module, options=kernel_options, source=source)


def registered_kernel(module_name: str, key: str) -> wp.Kernel | None:
    """The kernel Warp's module registry holds under ``key`` in the Warp module ``module_name``, or None.

    Warp registers every module a ``@wp.kernel`` (or ``wp.Kernel(..., module=wp.get_module(name))``) is
    defined in (``user_modules``, by name), and each module keeps its latest kernel per key
    (``Module.kernels``). Nothing is imported or created: a module this process never defined is not found.

    Example:
        ```python
        assert registered_kernel(k.module.name, k.key) is k
        ```
    """
    module = wp._src.context.user_modules.get(module_name)
    if module is None:
        return None
    kernel = module.kernels.get(key)
    return kernel if isinstance(kernel, wp.Kernel) else None


def kernel_code_hash(kernel: wp.Kernel, block_dim: int) -> str | None:
    """Warp's content hash of ``kernel`` (a concrete kernel or overload) in its module's build for ``block_dim``, as hex.

    It is the hash Warp names the kernel's compiled symbols with: it covers the kernel's key, options, source,
    argument types, the constants and ``wp.static`` values it reads and every ``wp.func`` it calls, and not the
    other kernels of its module, so it is the same in every process that defines the same code. None if the
    kernel is not among its module's live kernels (a module reloaded since, or a kernel outside any module).
    """
    with _WARP_LOCK:
        kernel.module.get_module_hash(block_dim)
        digest = kernel.module.hashers[block_dim].kernel_hashes.get(kernel)
    return None if digest is None else digest.hex()


# The hash of each kernel alone at jarp's last look, by block dim (`current_code_hash`).
_hashes_alone: weakref.WeakKeyDictionary[wp.Kernel, dict[int, bytes]] = weakref.WeakKeyDictionary()
# Pairs (the module's hash of a kernel, the hash of the kernel alone) found to differ with no name rebound: Warp's
# module hasher reuses the hash it computed for a function while hashing another kernel, which within a cycle of
# functions calling each other is not the hash of that function reached from this kernel.
_hash_orderings: weakref.WeakKeyDictionary[wp.Kernel, set[tuple[bytes, bytes]]] = weakref.WeakKeyDictionary()


def current_code_hash(kernel: wp.Kernel, block_dim: int | None = None, *, check: bool = True) -> str | None:
    """Warp's content hash of ``kernel``'s code as it stands: what the next build of its module compiles for it.

    The hash of the kernel alone, by a hasher of its own (a kernel's hash depends on no other kernel of its module:
    it covers its key, options, source, argument types, the constants and ``wp.static`` values it reads and every
    ``@wp.func`` it calls), from the names its code resolves now. Warp hashes a module once and keeps the hash until
    something is defined in the module (``mark_modified``): a name the kernel's code resolves (a global, a closure
    cell, a module attribute naming a ``@wp.func`` or a constant) rebound since goes unseen by the kept hash, yet
    the module's next build compiles the new binding, under the old hash. Where the hash Warp keeps for the kernel
    differs, the module is marked modified: Warp hashes it again at its next load, and the build it loads is then of
    the code this hash describes. No module hash is left behind (it would hold every live kernel of the module).

    Args:
        kernel: a concrete kernel (an overload of a generic kernel, or a kernel jarp derived).
        block_dim: the block dim of the module build whose hash it is, as resolved for its device
            (`resolve_block_dim`); None: the CPU's default.
        check: hash afresh (a fraction of a millisecond to a few: for planning and loading, never per call) and
            compare with Warp's as above; without it, the hash as of the last look with it (a lookup).

    Returns:
        The hash (hex); None for a generic kernel.
    """
    if kernel.is_generic:
        return None
    if block_dim is None:
        runtime_core()
        block_dim = resolve_block_dim(wp.get_device("cpu"), None)
    if not check:
        known = _hashes_alone.get(kernel, {}).get(block_dim)
        if known is not None:
            return known.hex()
    module = kernel.module
    with _WARP_LOCK, _codegen_lock:
        hasher = module.hashers.get(block_dim)
        kept = None if hasher is None else hasher.kernel_hashes.get(kernel)
        alone = _hash_alone(kernel, block_dim)
        _hashes_alone.setdefault(kernel, {})[block_dim] = alone
        if kept is not None and kept != alone and (kept, alone) not in _hash_orderings.get(kernel, ()):
            module.mark_modified()
            again = _module_hash(kernel, block_dim)
            if again is not None and again != alone:
                # hashed again from the names as they are now and still different: the module hasher's order
                _hash_orderings.setdefault(kernel, set()).add((again, alone))
    return alone.hex()


def _hash_alone(kernel: wp.Kernel, block_dim: int) -> bytes:
    """Warp's content hash of ``kernel`` by a hasher of its own, from the names as they are (under Warp's locks)."""
    module = kernel.module
    if module.has_unresolved_static_expressions:
        _module_hash(kernel, block_dim)  # Warp resolves the module's wp.static() expressions first
    options = module.resolve_options(wp.config, block_dim=block_dim)
    saved = kernel.hash, getattr(kernel, "grid_stride", None)  # the hasher sets both: they belong to the module's
    try:
        return wp._src.context.ModuleHasher([kernel], options).kernel_hashes[kernel]
    finally:
        kernel.hash, kernel.grid_stride = saved


def _module_hash(kernel: wp.Kernel, block_dim: int) -> bytes | None:
    """The module's hash of ``kernel`` (under Warp's locks); a module hash computed for it is not kept."""
    module = kernel.module
    had = block_dim in module.hashers
    module.get_module_hash(block_dim)
    digest = module.hashers[block_dim].kernel_hashes.get(kernel)
    if not had:
        module.hashers.pop(block_dim, None)
    return digest


def loaded_code_hash(kernel: wp.Kernel, module_exec: Any, block_dim: int) -> str | None:
    """`current_code_hash` of ``kernel`` where ``module_exec``, a build of its module just loaded right after that
    look, is current (built under the module's hash, which describes the names as they are); else None (unknown: a
    build the ``strip_hash`` module option has Warp load whatever the hash). Under Warp's lock."""
    module = kernel.module
    with _WARP_LOCK:
        if module_exec.module_hash != module.get_module_hash(block_dim):
            return None
        known = _hashes_alone.get(kernel, {}).get(block_dim)
    return None if known is None else known.hex()


def entry_point_abi(kernel: wp.Kernel) -> str:
    """The ABI of ``kernel``'s entry points: ``"warp"`` (what ``wp.launch`` and jarp pass), or another of Warp's.

    Warp 1.19's experimental ``entry_point_abi="external_constant_params"`` makes a CUDA-only entry point that reads
    its parameters from constant memory; ``wp.launch`` refuses such kernels.
    """
    return str((kernel.module.options | kernel.options).get("entry_point_abi", "warp"))


def kernel_mode(kernel: wp.Kernel) -> str:
    """The build mode of ``kernel``'s module: its own ``"mode"`` option, else ``wp.config.mode``."""
    return kernel.module.options.get("mode") or wp.config.mode


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
    with _WARP_LOCK:  # an oversized extent makes Warp generate the module's code to find its exact limit
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
    resolved = resolve_block_dim(device, block_dim)
    with _WARP_LOCK:
        release_unloads(blocking=True)  # a safe point: unload the code dropped since
        # a build loaded now compiles the names as they are now: the hash it is loaded under must say so
        current_code_hash(kernel, resolved)
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
        code_hash = loaded_code_hash(kernel, module_exec, resolved)
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
    resolved = resolve_block_dim(device, block_dim)
    module = kernel.module
    with _WARP_LOCK:
        loaded = module.execs.get((device.context, resolved))
        if loaded is None:
            return False
        return bool(module.options["strip_hash"]) or loaded.module_hash == module.get_module_hash(resolved)


def stream_is_capturing(stream: int) -> bool:
    """Whether the CUDA stream ``stream`` (a raw ``CUstream``) is capturing a graph (as ``wp.Stream.is_capturing``)."""
    return bool(runtime_core().wp_cuda_stream_is_capturing(ctypes.c_void_p(stream)))


def capture_modules(capture: Any) -> list[Any]:
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
    runtime_core()
    version = wp._src.context.runtime.driver_version
    return version is not None and tuple(version) >= (12, 3)


def cpu_block_error() -> str:
    """Take (and clear) the error a cooperative CPU block launch recorded, or ``""``."""
    err = runtime_core().wp_take_cpu_block_error()
    return err.decode("utf-8", errors="replace") if err else ""


def runtime_core() -> Any:
    """Warp's native library handle (``wp_*`` functions), Warp initialised first if it is not yet (`init_quietly`)."""
    init_quietly()
    return wp._src.context.runtime.core


def init_quietly() -> None:
    """Initialise Warp (if it is not yet) without its banner: jarp does so on import, where a print would surprise.

    Warp prints the banner (its version, devices and kernel cache) at initialisation when ``wp.config.log_level``
    is ``wp.LOG_INFO`` or lower; the same information is in ``python -m jarp``. Warnings still print.
    """
    if wp._src.context.runtime is not None:
        return
    with _WARP_LOCK:
        level = wp.config.log_level
        wp.config.log_level = max(level, wp.LOG_WARNING)
        try:
            wp.init()
        finally:
            wp.config.log_level = level


def cuda_memset(device: wp.Device, ptr: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at ``ptr`` on ``device``, ordered on ``stream``.

    Raises:
        RuntimeError: if the memset failed, with Warp's diagnosis of the CUDA error.
    """
    if not runtime_core().wp_memset_device(device.context, ptr, 0, nbytes, ctypes.c_void_p(stream)):
        raise RuntimeError(
            f"Warp failed to zero {nbytes} bytes on {device}: {wp._src.context.runtime.get_error_string()}"
        )


def cuda_copy(device: wp.Device, dst: int, src: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from ``src`` to ``dst`` on ``device``, ordered on ``stream``.

    Raises:
        RuntimeError: if the copy failed, with Warp's diagnosis of the CUDA error.
    """
    if not runtime_core().wp_memcpy_d2d(device.context, dst, src, nbytes, ctypes.c_void_p(stream)):
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
    if runtime_core().wp_cuda_launch_kernel(
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
    block_dim = CUDA_BLOCK_DIM if block_dim is None else block_dim
    module = kernel.module
    with _WARP_LOCK:
        options = module.resolve_options(wp.config, block_dim=block_dim)
        mode = options.get("deterministic", wp.config.DeterministicMode.NOT_GUARANTEED)
        if mode == wp.config.DeterministicMode.NOT_GUARANTEED:
            return None
        runtime_core()  # Warp must be initialised before code generation
        module.get_module_hash(block_dim)  # resolve wp.static() expressions, as a build does first
        with _codegen_lock:
            kernel.adj.build(None, options | {"output_arch": None})
            meta = kernel.adj.det_meta
    if meta is None or not meta.needs_deterministic:
        return None
    return f"deterministic mode ({mode.name})"


def cuda_launch_address() -> int:
    """The address of Warp's native ``wp_cuda_launch_kernel`` (the call `cuda_launch` makes), for native callers."""
    return _address(runtime_core().wp_cuda_launch_kernel)


def error_string_address() -> int:
    """The address of Warp's native ``wp_get_error_string`` (its last CUDA error, as text), for native callers."""
    return _address(runtime_core().wp_get_error_string)


def cuda_memcpy_address() -> int:
    """The address of Warp's native ``wp_memcpy_d2d`` (the call `cuda_copy` makes), for native callers."""
    return _address(runtime_core().wp_memcpy_d2d)


def cuda_memset_address() -> int:
    """The address of Warp's native ``wp_memset_device`` (the call `cuda_memset` makes), for native callers."""
    return _address(runtime_core().wp_memset_device)


# -- native code built with Warp's bundled Clang --


def compile_cpu_object(source: str, source_path: str, object_path: str, include_dirs: Sequence[str]) -> None:
    """Compile C++ ``source`` to an object file with the Clang/LLVM in the warp-lang wheel (as Warp builds CPU kernels).

    Raises:
        RuntimeError: if this Warp build has no CPU compiler, or the compilation failed (Clang's
            diagnostics are printed to stderr by Warp's compiler library).
    """
    check_cpu_support("jarp's native launch handler")
    runtime_core()
    runtime = wp._src.context.runtime
    flags = [f"-I{d}" for d in include_dirs]
    flags_array = (ctypes.c_char_p * (len(flags) + 1))(*[f.encode() for f in flags], None)
    with _WARP_LOCK:
        err = runtime.llvm.wp_compile_cpp(
            source.encode("utf-8"),
            source_path.encode("utf-8"),
            os.path.join(_build.warp_home, "native").encode("utf-8"),
            object_path.encode("utf-8"),
            False,  # debug
            False,  # verify_fp
            True,  # fuse_fp
            True,  # enable_tiles_in_stack_memory (irrelevant here)
            flags_array,
            2,  # optimization level
            False,  # verbose
            False,  # use_precompiled_headers
            None,  # pch_dir
            1,  # block_dim (irrelevant here)
        )
    if err != 0:
        raise RuntimeError(f"Warp's bundled Clang failed to compile {source_path} (error code {err})")


def load_cpu_object(object_path: str, name: str) -> Callable[[str], int]:
    """Load an object file into Warp's LLVM JIT as module ``name``; return a symbol lookup (address, 0 if missing).

    The code stays loaded for the life of the process (nothing unloads ``name``).
    """
    runtime_core()
    llvm = wp._src.context.runtime.llvm
    with _WARP_LOCK:
        if llvm.wp_load_obj(object_path.encode("utf-8"), name.encode("utf-8"), wp.config.legacy_cpu_linker) != 0:
            raise RuntimeError(f"Warp's LLVM JIT failed to load {object_path}")

    def lookup(symbol: str) -> int:
        with _WARP_LOCK:
            return int(llvm.wp_lookup(name.encode("utf-8"), symbol.encode("utf-8")) or 0)

    return lookup


# -- a loaded CPU build's source and options, and CPU objects built as Warp builds them --
#
# jarp's ranged entry points (`jarp.warp._ffi._native._ranged`) are compiled from the exact source of a loaded module build,
# with the build's own options; these are the pieces of Warp that takes.

# The kwargs (besides the two paths) Warp's ``Module._compile`` passes ``build_cpu``; jarp passes the same.
_BUILD_CPU_KWARGS = frozenset(
    {
        "mode",
        "fast_math",
        "verify_fp",
        "fuse_fp",
        "extra_flags",
        "optimization_level",
        "verbose",
        "use_precompiled_headers",
        "pch_dir",
        "block_dim",
        "enable_tiles_in_stack_memory",
        "extra_include_dirs",
    }
)


def mangled_name(kernel: wp.Kernel, entry: EntryPoints) -> str:
    """``kernel``'s mangled name in the module build ``entry`` came from (the stem of its C++ names)."""
    with _WARP_LOCK:
        return entry.module_exec.get_kernel_mangled_name(kernel)


def loaded_build(kernel: wp.Kernel, entry: EntryPoints) -> tuple[str, dict[str, Any]]:
    """The C++ source Warp compiled the module build ``entry`` came from, and the ``build_cpu`` options it used.

    Raises:
        RuntimeError: if the source or the options cannot be recovered (the module changed since an entry made
            outside `load_entry_points` was loaded).
    """
    module = kernel.module
    with _WARP_LOCK:
        module_exec = entry.module_exec
        current = module_exec.module_hash == module.get_module_hash(entry.block_dim)
        options = entry.build_options
        if options is None:
            if not current:
                raise RuntimeError(
                    f"Warp module '{module.name}' changed since kernel {kernel.key!r} was loaded, and the options of "
                    "the loaded build are unknown: load the kernel with load_entry_points to get its ranged entry point."
                )
            options = dict(module.resolved_options[entry.block_dim])
        return _build_source(module, module_exec, options, current), _cpu_build_options(options)


def _build_source(module: wp.Module, module_exec: Any, options: dict[str, Any], current: bool) -> str:
    """The C++ source Warp compiled ``module_exec`` from.

    Warp writes it next to the binary in its kernel cache (``wp_<module>_<hash7>.cpp`` beside
    ``wp_<module>_<hash7>[.cpu<target>].o``), in a directory named by the module hash, so it is that build's source
    whichever process compiled it. Under the ``strip_hash`` module option the names carry no hash and a later build
    overwrites them; there (or if the file is gone) the source is generated again, as ``Module._compile`` does, which
    needs the module to be unchanged since the build.
    """
    binary = getattr(module_exec, "binary_path", None)
    if binary and not module.options["strip_hash"]:
        stem = re.sub(r"(\.cpu[0-9a-f]+)?\.o$", "", os.path.basename(binary))
        try:
            with open(os.path.join(os.path.dirname(binary), stem + ".cpp"), encoding="utf-8") as f:
                return f.read()
        except OSError:
            pass
    if not current:
        raise RuntimeError(
            f"The C++ source of a loaded build of Warp module '{module.name}' is not in Warp's kernel cache, and the "
            "module changed since, so jarp cannot build its ranged CPU entry points."
        )
    runtime_core()
    source, _ext, _meta, _ltoirs, _fatbins = module._run_codegen(options | {"output_arch": None}, True)
    return source


def _cpu_build_options(options: dict[str, Any]) -> dict[str, Any]:
    """The ``build_cpu`` options ``Module._compile`` compiles a CPU build with, from its resolved module options."""
    opt = options["optimization_level"]
    return {
        "mode": options["mode"],
        "fast_math": options["fast_math"],
        "verify_fp": options["verify_fp"],
        "fuse_fp": options["fuse_fp"],
        "extra_flags": options["cpu_compiler_flags"],
        "optimization_level": 2 if opt is None else opt,  # Warp's CPU default
        "use_precompiled_headers": options["use_precompiled_headers"],
        "block_dim": options["block_dim"],
        "enable_tiles_in_stack_memory": options["enable_tiles_in_stack_memory"],
        "extra_include_dirs": tuple(options["extra_cpu_include_dirs"] or ()),
    }


def cpu_target_hash(extra_flags: Any) -> str:
    """The hash of the CPU target Warp compiles for with these extra compiler flags (part of a build's identity)."""
    return _get_cpu_target_hash(extra_flags)


def kernel_cache_dir() -> Path:
    """Warp's kernel cache directory (``wp.config.kernel_cache_dir``)."""
    return Path(wp.config.kernel_cache_dir)  # pyright: ignore[reportArgumentType]  # set once Warp is initialised


def build_cpu_object(object_path: str, source_path: str, build: dict[str, Any]) -> None:
    """Compile the C++ file ``source_path`` to ``object_path`` as Warp compiles a module (``build_cpu``, ``build``
    from `loaded_build`), with the bundled Clang."""
    runtime = wp._src.context.runtime
    _build.build_cpu(
        object_path,
        source_path,
        verbose=False,
        pch_dir=runtime.get_clang_pch_dir() if build["use_precompiled_headers"] else None,
        **build,
    )


def cpu_codegen_templates() -> dict[str, str]:
    """Warp's CPU code templates a ranged entry point copies the shape of: per-task functions and task loops."""
    codegen = wp._src.codegen
    return {
        "kernel_forward": codegen.cpu_kernel_template_forward,
        "kernel_backward": codegen.cpu_kernel_template_backward,
        "module_forward": codegen.cpu_module_template_forward,
        "module_backward": codegen.cpu_module_template_backward,
    }


def check_cpu_builds() -> None:
    """Raise `AssertionError` if Warp's CPU build changed where `loaded_build` and `build_cpu_object` depend on it."""
    parameters = set(inspect.signature(_build.build_cpu).parameters) - {"obj_path", "cpp_path"}
    assert parameters == _BUILD_CPU_KWARGS, f"build_cpu's parameters changed: {sorted(parameters)}"
    call = re.search(r"\bbuild_cpu\((.*?)\n\s*\)\n", inspect.getsource(wp.Module._compile), re.DOTALL)
    assert call is not None, "Module._compile no longer calls build_cpu"
    passed = set(re.findall(r"^\s+(\w+)=", call[1], re.MULTILINE))
    assert passed == _BUILD_CPU_KWARGS, f"Module._compile calls build_cpu with other options: {sorted(passed)}"
    assert "binary_path" in inspect.signature(wp._src.context.ModuleExec.__init__).parameters, (
        "ModuleExec lost binary_path"
    )
    templates = cpu_codegen_templates()
    assert all(isinstance(t, str) for t in templates.values()), "Warp's CPU code templates changed"
    assert callable(getattr(wp.Module, "_run_codegen", None)), "wp.Module lost _run_codegen (loaded_build)"
    with _WARP_LOCK:
        resolved = wp.get_module("jarp._probe_builds").resolve_options(wp.config, block_dim=1)
    _cpu_build_options(resolved)  # raises KeyError if a module option it reads is gone
    assert "strip_hash" in resolved, "the module option 'strip_hash' is gone"


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
    assert isinstance(wp.config.log_level, int), "wp.config.log_level changed (init_quietly)"
    assert wp.LOG_INFO < wp.LOG_WARNING, "Warp's log levels changed (init_quietly)"
    for fn in ("cuda_kernel_forward_name", "cuda_kernel_backward_name"):  # cuda_entry_names
        assert callable(getattr(wp._src.codegen, fn, None)), f"warp codegen lost {fn}"
    assert callable(getattr(wp.Module, "get_module_hash", None)), "wp.Module lost get_module_hash"
    assert callable(getattr(_WARP_LOCK, "_is_owned", None)), "threading.RLock lost _is_owned (warp_lock_held)"
    probe = wp.struct(
        type("_JarpProbe", (), {"__annotations__": {"a": wp.array(dtype=float), "k": float}}), module="unique"
    )
    assert is_struct_type(probe), "wp.struct no longer returns a warp._src.codegen.Struct"
    assert [n for n, _ in struct_fields(probe)] == ["a", "k"], "Struct.vars changed"
    assert [f[0] for f in struct_ctype(probe)._fields_] == ["a", "k"], "Struct.ctype changed"
    assert struct_ctype(probe)._fields_[0][1] is ArrayStruct, "struct array fields are no longer array_t"
    assert struct_instance_type(probe()) is probe, "StructInstance._cls changed"
    assert struct_name(probe) == "_JarpProbe", "Struct.cls changed"
    # jarp passes the "array" kind only and refuses the others by name: a new array class must be looked at
    assert tuple(cls.__name__ for cls in _ARRAY_CLASSES) == ARRAY_KINDS, (
        f"Warp's array classes changed: {_ARRAY_CLASSES}"
    )
    for annotation, kind in (
        (wp.array(dtype=float), "array"),
        (wp.array2d[float], "array"),
        (wp.indexedarray(dtype=float), "indexedarray"),
        (wp.indexedarray[float], "indexedarray"),
        (wp.fabricarray(dtype=float), "fabricarray"),  # pyright: ignore[reportArgumentType]  # Warp's stub: dtype as a value
        (wp.indexedfabricarray[float], "indexedfabricarray"),
        (wp.fixedarray(dtype=float, shape=3), "fixedarray"),
    ):
        assert array_kind(annotation) == kind, f"array_kind({annotation!r}) is no longer {kind!r}"
    # cuda_hidden_params: the module option, its enum, the adjoint's deterministic metadata and Warp's launch path
    modes = {m.name for m in wp.config.DeterministicMode}
    assert {"NOT_GUARANTEED", "RUN_TO_RUN", "GPU_TO_GPU"} <= modes, f"DeterministicMode changed: {modes}"
    assert "deterministic" in probe.module.options, "the 'deterministic' module option is gone"
    assert hasattr(wp.Module, "_snapshot_deterministic_metadata"), "Warp's deterministic metadata snapshot moved"
    assert callable(_launch_deterministic), "warp._src.deterministic.launch_deterministic is gone"
    assert isinstance(getattr(_DeterministicMeta, "needs_deterministic", None), property), (
        "DeterministicMeta.needs_deterministic is no longer a property"
    )
    kernel_module = wp.get_module(check_internals.__module__)
    assert isinstance(kernel_module.execs, dict), "Module.execs changed (module_loaded)"
    assert "strip_hash" in kernel_module.options, "Module.options lost strip_hash (module_loaded)"
    runtime_core()
    assert hasattr(wp._src.context.runtime, "driver_version"), "runtime.driver_version moved (loads_during_capture)"
    assert isinstance(wp.Graph(wp.get_device("cpu")).module_execs, set), "Graph.module_execs changed (capture_modules)"
    for attr in ("wp_cuda_launch_kernel", "wp_memset_device", "wp_take_cpu_block_error", "wp_cuda_stream_is_capturing"):
        assert hasattr(runtime_core(), attr), f"warp native library lost {attr}"
    # jarp's native handler calls these two with exactly these parameters (see _ffi/_native/_handler.cpp)
    assert len(runtime_core().wp_cuda_launch_kernel.argtypes) == 11, "wp_cuda_launch_kernel's parameters changed"
    assert len(runtime_core().wp_memset_device.argtypes) == 5, "wp_memset_device's parameters changed"
    error_string = runtime_core().wp_get_error_string
    assert (error_string.argtypes or []) == [], "wp_get_error_string's parameters changed"
    assert error_string.restype is ctypes.c_char_p, "wp_get_error_string no longer returns a C string"
    hook_params = inspect.signature(wp._src.context.KernelHooks).parameters
    assert {"forward_smem_shortfall", "backward_smem_shortfall"} <= set(hook_params), (
        "KernelHooks lost its shared-memory shortfalls (cuda_launch_failure)"
    )
    llvm = wp._src.context.runtime.llvm
    for attr in ("wp_compile_cpp", "wp_load_obj", "wp_lookup"):
        assert llvm is None or hasattr(llvm, attr), f"warp-clang library lost {attr}"
    assert llvm is None or len(llvm.wp_compile_cpp.argtypes) == 14, "wp_compile_cpp's parameters changed"
    assert llvm is None or len(llvm.wp_load_obj.argtypes) == 3, "wp_load_obj's parameters changed"
    assert os.path.isdir(os.path.join(_build.warp_home, "native")), "warp's native include directory moved"
    # registered_kernel / kernel_code_hash (the content description of a plan's kernel, `_plan._content`)
    assert isinstance(wp._src.context.user_modules, dict), "warp's module registry (user_modules) changed"
    with _WARP_LOCK:
        probe_kernel = wp.Kernel(_probe_kernel, key="_jarp_probe_kernel", module=wp.get_module("jarp._probe"))
    assert registered_kernel("jarp._probe", "_jarp_probe_kernel") is probe_kernel, "Module.kernels changed"
    digest = kernel_code_hash(probe_kernel, 1)
    assert isinstance(digest, str), "ModuleHasher.kernel_hashes changed"
    assert len(digest) == 64, "Warp's kernel hash is no longer a sha256 digest"
    assert kernel_code_hash(probe_kernel, 1) == digest, "Warp's kernel hash is not stable"
    # current_code_hash: a kernel hashed alone hashes as in its module, whose kept hash Warp drops when marked modified
    assert current_code_hash(probe_kernel, 1) == digest, "a kernel hashed alone no longer hashes as in its module"
    assert callable(getattr(wp.Module, "mark_modified", None)), "wp.Module lost mark_modified (current_code_hash)"
    check_cpu_builds()
    check_array_access()


def _probe_kernel(a: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    a[0] = 1.0


# -- what a kernel reads and writes, as Warp compiles it --


class ArrayAccess(NamedTuple):
    """Whether a kernel's generated code reads and writes one array parameter (Warp's own record)."""

    read: bool
    written: bool


def array_access(kernel: wp.Kernel, block_dim: int | None = None) -> dict[str, ArrayAccess] | None:
    """Which array parameters ``kernel``'s code reads and writes, as Warp's code generator records them.

    Warp marks an array parameter written when the code it generates stores into it: a subscript store or
    augmented assignment (``a[i] = x``, ``a[i] += x``, a component ``a[i].x = v``, through a view ``r = a[i]``),
    an atomic builtin (under any name it is reached by), or a call of a ``@wp.func`` that writes the parameter
    it was given (positional or keyword, reached through a closure, a global or a module attribute). The record
    is made after Warp has resolved every name and folded the branches on Python constants (closure values,
    globals, ``wp.static``): a store Warp never emits is no write. This is the record behind Warp's
    ``verify_autograd_array_access``; jarp builds the kernel's code once with it switched on (no compilation).

    It does not see stores through a struct's array field (``s.arr[i] = x``), tile stores (``wp.tile_store``)
    or volumes: the caller completes it (`jarp.warp._plan._analysis._writes`).

    Args:
        kernel: a concrete kernel (a generic kernel's overload, not the generic kernel itself).
        block_dim: the block dim Warp generates the code for (tile shapes depend on it); None: the CPU's.

    Returns:
        ``{parameter: ArrayAccess}`` for the array parameters, or None when Warp cannot generate the kernel's
        code (the launch then reports Warp's own error) or the kernel is generic.
    """
    return _generate(kernel, block_dim)[0]


# Warp structures that kernels query by id (a ``wp.uint64``): their native object lives as long as the Python one.
STRUCTURE_TYPES = ("Mesh", "Bvh", "HashGrid", "Volume", "MarchingCubes")


def is_structure(value: Any) -> bool:
    """Whether ``value`` is a Warp structure a kernel takes by id (``wp.Mesh``, ``wp.Bvh``, ``wp.HashGrid``...)."""
    cls = type(value)
    return cls.__name__ in STRUCTURE_TYPES and (cls.__module__ or "").startswith("warp") and hasattr(value, "id")


def tape_launches(tape: wp.Tape) -> list[tuple[wp.Kernel, list[Any]]]:
    """The kernels a ``wp.Tape`` recorded, each with its arguments (inputs then outputs) as given to ``wp.launch``."""
    return [(entry[0], [*entry[3], *entry[4]]) for entry in tape.launches if isinstance(entry, list)]


def is_structure_type(warp_type: Any) -> bool:
    """Whether an annotation is the class of a Warp structure jarp builds (``wp.Mesh``, ``wp.Bvh``...)."""
    return isinstance(warp_type, type) and any(warp_type is getattr(wp, n, None) for n in STRUCTURE_TYPES[:4])


def is_builtin_name(name: str) -> bool:
    """Whether Warp has a builtin function of this key (what it calls for a name Python does not resolve)."""
    return name in wp._src.context.builtin_functions


def codegen_error(kernel: wp.Kernel) -> str | None:
    """Warp's error when it cannot generate ``kernel``'s code (a generic overload whose types do not fit), or None."""
    return None if kernel.is_generic else _generate(kernel, None).error


def overloads(kernel: wp.Kernel) -> tuple[wp.Kernel, ...]:
    """The overloads a generic kernel has now (declared with ``wp.overload`` or created by launches)."""
    return tuple(kernel.overloads.values())


def drop_overload(kernel: wp.Kernel, overload: wp.Kernel) -> None:
    """Remove a generic kernel's overload from Warp's registry, so that its module builds without it.

    Warp builds every overload of every kernel of a module together: one overload that does not compile fails
    the module for all its kernels, in this call and every later one.
    """
    with _WARP_LOCK:
        for sig, registered in list(kernel.overloads.items()):
            if registered is overload:
                del kernel.overloads[sig]
                kernel.module.mark_modified()


class GeneratedFunction(NamedTuple):
    """One function of a kernel's generated C++ forward code: the kernel itself, or a ``@wp.func`` overload it calls.

    Attributes:
        key: the Warp key (``"put"``).
        name: its C++ name, as call sites spell it (``"put_0"``; the kernel's key for the kernel).
        params: each parameter's C++ name (``"var_a"``) and whether it is an array.
        lines: the forward code, one statement (or ``//`` comment) a line.
        types: each variable's Warp type name (``("var_3", "Reference")``).
        opaque: its body is not Warp-generated code (a ``@wp.func_native`` snippet): nothing is known of it.
    """

    key: str
    name: str
    params: tuple[tuple[str, bool], ...]
    lines: tuple[str, ...]
    types: tuple[tuple[str, str], ...]
    opaque: bool


class CodegenRecord(NamedTuple):
    """What Warp's code generator recorded of one kernel (`codegen_record`)."""

    access: dict[str, ArrayAccess] | None  # `array_access`; None where Warp could not generate the code
    error: str | None  # Warp's error where it could not
    value_locals: frozenset[str]  # the kernel's locals whose Warp type is a value (scalar, vector, matrix...)
    # The C++ forward code Warp generated, one (function key, lines, variable types) per adjoint: the kernel's, then
    # each @wp.func it calls (each overload), for what no Python-level record says (which builtins run, on what);
    # the types name each variable's Warp type (``("var_3", "MeshQueryPoint")``)
    forward_code: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...] = ()
    # The @wp.func overloads the kernel calls whose adjoint is the user's (``@wp.func_grad``, ``@wp.func_replay``)
    # or native code (``@wp.func_native``): what they write in a backward pass no record says
    custom_adjoints: tuple[str, ...] = ()
    # The same functions with their C++ names and parameters, for the analysis of the generated code itself (a
    # custom gradient, which shares its function's C++ name, is in ``backward`` only)
    functions: tuple[GeneratedFunction, ...] = ()
    # What the kernel's backward entry point runs besides those forward functions: its own backward code first (the
    # replay of its forward code, then its reverse code; parameters: the primal ones, as in ``functions[0]``), then
    # the reverse function (``adj_<name>``) of each function of ``functions`` (Warp's adjoint: the function's replay
    # and reverse code; or the user's ``@wp.func_grad`` body; a native adjoint snippet opaque) and its replay
    # function (``replay_<name>``) where the user gave one (``@wp.func_replay``; a native replay snippet opaque).
    # Each lists its primal parameters only (the adjoint ones, ``adj_x``, follow them in C++); the key of the user's
    # code names it for messages (``"scaled_grad, the @wp.func_grad of scaled"``)
    backward: tuple[GeneratedFunction, ...] = ()


def codegen_record(kernel: wp.Kernel, block_dim: int | None = None) -> CodegenRecord:
    """Generate ``kernel``'s code (no compilation) with Warp's read/write record on, and read what Warp recorded.

    Returns:
        The array parameters' read/write marks (`array_access`), Warp's error if it could not generate the code,
        and the names of the kernel's locals that Warp typed as values (a copy, never a reference to an array).
    """
    return _generate(kernel, block_dim)


def _is_value_type(warp_type: Any) -> bool:
    if warp_type in (int, float, bool):
        return True
    return isinstance(warp_type, type) and (wp.types.type_is_scalar(warp_type) or wp.types.type_is_composite(warp_type))


def _generate(kernel: wp.Kernel, block_dim: int | None) -> CodegenRecord:
    """Generate ``kernel``'s code with Warp's read/write record on (see `codegen_record`)."""
    if kernel.is_generic:
        return CodegenRecord(None, None, frozenset())
    runtime_core()
    block_dim = resolve_block_dim(wp.get_device("cpu"), block_dim)
    module = kernel.module
    with _WARP_LOCK, _codegen_lock:
        level = wp.config.log_level
        # Warp warns about writes after reads (a gradient hazard for its tape, not a jarp concern)
        wp.config.log_level = max(level, wp.LOG_ERROR)
        try:
            had_hasher = block_dim in module.hashers
            module.get_module_hash(block_dim)  # resolves the module's wp.static() expressions
            if not had_hasher:
                # the hasher holds every live kernel of the module: one left behind would keep a kernel the user
                # dropped (and its plans) alive until the module changes
                module.hashers.pop(block_dim, None)
            options = module.resolve_options(wp.config, block_dim=block_dim)
            options = options | {"output_arch": None, "verify_autograd_array_access": True}
            # A builder of this one kernel: Warp's ModuleBuilder builds the kernels its hasher lists
            only = _OneKernel(kernel)
            builder = wp._src.context.ModuleBuilder(module, options, hasher=only, target="cpu")
            code = [(kernel.key, *_forward_lines(kernel.adj))]
            functions = [_generated_function(kernel.key, kernel.key, kernel.adj, False)]
            backward = [_backward_function(kernel.key, kernel.key, kernel.adj, False)]
            seen = {id(kernel.adj)}
            custom: list[str] = []
            # The user's gradient and replay functions: built by the builder as functions of their own, the
            # gradient under its function's C++ name; their code runs in the backward pass only
            extras = {
                id(e)
                for fn in builder.functions
                for f in (fn, *getattr(fn, "user_overloads", {}).values())
                for e in (getattr(f, "custom_grad_func", None), getattr(f, "custom_replay_func", None))
                if e is not None
            }
            for fn in builder.functions:
                for f in (fn, *getattr(fn, "user_overloads", {}).values()):
                    adj = getattr(f, "adj", None)
                    if adj is not None and id(adj) not in seen:
                        seen.add(id(adj))
                        code.append((fn.key, *_forward_lines(adj)))
                        if id(f) not in extras and not getattr(adj, "custom_reverse_mode", False):
                            opaque = bool(getattr(f, "native_snippet", None))
                            name = getattr(f, "native_func", None) or fn.key
                            functions.append(_generated_function(fn.key, name, adj, opaque))
                            backward.extend(_backward_functions(fn.key, name, f, opaque))
                    if any(
                        getattr(f, a, None)
                        for a in ("custom_grad_func", "custom_replay_func", "native_snippet", "adj_native_snippet")
                    ):
                        custom.append(fn.key)
            # Warp leaves each built adjoint pointing at its builder, which lists the kernel: a long-lived
            # @wp.func would keep this kernel (and its plans) alive
            for fn in (kernel, *builder.functions):
                if getattr(fn, "adj", None) is not None and fn.adj.builder is builder:
                    fn.adj.builder = None
            builder.kernels = []
            only.forget()
            access = {
                arg.label: ArrayAccess(bool(arg.is_read), bool(arg.is_write))
                for arg in kernel.adj.args
                if wp.types.is_array(arg.type)
            }
            values = frozenset(
                name
                for name, var in kernel.adj.symbols.items()
                if isinstance(var, wp._src.codegen.Var) and _is_value_type(var.type)
            )
            return CodegenRecord(
                access,
                None,
                values,
                tuple(code),
                tuple(dict.fromkeys(custom)),
                tuple(functions),
                tuple(backward),
            )
        except Exception as e:
            return CodegenRecord(None, f"{type(e).__name__}: {e}", frozenset())
        finally:
            wp.config.log_level = level


def _generated_function(key: str, name: str, adj: Any, opaque: bool) -> GeneratedFunction:
    return GeneratedFunction(key, name, _params(adj), *_forward_lines(adj), opaque)


def _params(adj: Any, count: int | None = None) -> tuple[tuple[str, bool], ...]:
    """The C++ parameters of a function's code: each argument but a function-valued one (a ``wp.Function``
    annotation, which Warp resolves when it generates the code and passes no value for); the first ``count``."""
    args = [a for a in getattr(adj, "args", ())[:count] if not wp._src.types.is_warp_function_annotation(a.type)]
    return tuple((f"var_{a.label}", bool(wp.types.is_array(a.type))) for a in args)


def _backward_function(key: str, name: str, adj: Any, opaque: bool) -> GeneratedFunction:
    """A function's reverse code as Warp generates it (`codegen_func_reverse`): the replay of its forward code, then
    its reverse statements, last first; its primal parameters (the adjoint ones follow them in C++)."""
    blocks = getattr(adj, "blocks", ())
    replay = [line for block in blocks for line in block.body_replay]
    reverse = [line for block in blocks for line in reversed(block.body_reverse)]
    _, types = _forward_lines(adj)
    return GeneratedFunction(key, name, _params(adj), (*replay, *reverse), types, opaque or not blocks)


def _backward_functions(key: str, name: str, f: Any, opaque: bool) -> list[GeneratedFunction]:
    """The functions a backward pass may call for the ``@wp.func`` overload ``f`` (Warp key ``key``, C++ name
    ``name``) besides its forward code: its reverse function and its replay function (`CodegenRecord.backward`)."""
    grad = getattr(f, "custom_grad_func", None)
    replay = getattr(f, "custom_replay_func", None)
    if opaque:
        # a native snippet: its adjoint and replay are the user's native code (or nothing), opaque either way
        found = [GeneratedFunction(f"the native adjoint of {key}", f"adj_{name}", _params(f.adj), (), (), True)]
        if getattr(f, "replay_snippet", None):
            label = f"the native replay of {key}"
            found.append(GeneratedFunction(label, f"replay_{name}", _params(f.adj), (), (), True))
        return found
    if grad is not None:
        # the user's gradient: its body, generated as forward code, is the reverse function; its first arguments
        # are the function's (the adjoints of the return values follow)
        label = f"{_user_name(grad, key)}, the @wp.func_grad of {key}"
        count = grad.adj.custom_reverse_num_input_args
        lines, types = _forward_lines(grad.adj)
        built = bool(getattr(grad.adj, "blocks", ()))
        found = [GeneratedFunction(label, f"adj_{name}", _params(grad.adj, count), lines, types, not built)]
    else:
        found = [_backward_function(key, f"adj_{name}", f.adj, False)]
    if replay is not None:
        label = f"{_user_name(replay, key)}, the @wp.func_replay of {key}"
        lines, types = _forward_lines(replay.adj)
        built = bool(getattr(replay.adj, "blocks", ()))
        found.append(GeneratedFunction(label, f"replay_{name}", _params(replay.adj), lines, types, not built))
    return found


def _user_name(fn: Any, key: str) -> str:
    """The Python name of the user's function behind a Warp function (``scaled_grad``), else ``key``."""
    return getattr(getattr(fn, "func", None), "__qualname__", None) or key


def _forward_lines(adj: Any) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    lines = tuple(line for block in getattr(adj, "blocks", ()) for line in block.body_forward)
    types = tuple(
        (f"var_{v.label}", getattr(v.type, "__name__", type(v.type).__name__)) for v in getattr(adj, "variables", ())
    )
    return lines, types


def function_tree(fn: Any) -> ast.FunctionDef | None:
    """The syntax tree Warp compiles for a kernel or ``@wp.func``: ``adj.tree``, with Warp's substitutions.

    Once Warp has hashed the kernel's module (`array_access` does), each evaluated ``wp.static(...)`` in it is
    replaced by its value (an ``ast.Constant``, or a name carrying the function in ``warp_func``). None for a
    function without Python source (a builtin, a native snippet).
    """
    adj = getattr(fn, "adj", None)
    tree = getattr(adj, "tree", None)
    body = getattr(tree, "body", None)
    if not body or not isinstance(body[0], ast.FunctionDef):
        return None
    return body[0]


class _OneKernel:
    """The part of Warp's ``ModuleHasher`` a ``ModuleBuilder`` reads, listing one kernel (its hash untouched)."""

    def __init__(self, kernel: wp.Kernel):
        self.unique_kernels: dict[str, wp.Kernel] = {}
        self._kernel: wp.Kernel | None = kernel

    def get_unique_kernels(self) -> list[wp.Kernel]:
        return [] if self._kernel is None else [self._kernel]

    def forget(self) -> None:
        self._kernel = None


def check_array_access() -> None:
    """Raise `AssertionError` if Warp's read/write record (`array_access`) no longer says what jarp relies on."""
    sig = inspect.signature(wp._src.context.ModuleBuilder)
    assert {"module", "options", "hasher", "target"} <= set(sig.parameters), "ModuleBuilder's parameters changed"
    with _WARP_LOCK:
        module = wp.get_module("jarp._probe_access")
        probes = {
            name: wp.Kernel(fn, key=f"_jarp_access_{name}", module=module)
            for name, fn in (
                ("store", _access_store),
                ("atomic", _access_atomic),
                ("func", _access_func),
                ("folded", _access_folded),
                ("custom", _access_custom),
            )
        }
    expected = {
        "store": {"a": (True, False), "b": (False, True)},
        "atomic": {"a": (False, True), "b": (True, False)},
        "func": {"a": (False, True), "b": (False, False)},
        "folded": {"a": (True, False), "b": (False, True)},
        "custom": {"a": (True, False), "b": (False, True)},
    }
    assert is_builtin_name("atomic_add"), "Warp's builtin registry moved (is_builtin_name)"
    for name in STRUCTURE_TYPES:
        assert isinstance(getattr(wp, name, None), type), f"wp.{name} is gone (is_structure)"
    assert not is_builtin_name("_jarp_no_such_builtin"), "Warp's builtin registry changed (is_builtin_name)"
    assert codegen_record(probes["store"]).value_locals == frozenset({"i"}), "Warp's adj.symbols changed"
    code = codegen_record(probes["func"]).forward_code
    assert any("wp::array_store(" in line for line in code[-1][1]), "Warp's adj.blocks changed (forward_code)"
    assert ("var_0", "int32") in code[0][2], "Warp's adj.variables changed (forward_code)"
    assert len(code) == 2, "Warp's ModuleBuilder.functions changed (codegen_record.forward_code)"
    kernel_fn, callee = codegen_record(probes["func"]).functions
    assert ("var_a", True) in kernel_fn.params, "Warp's adj.args changed (GeneratedFunction.params)"
    assert any(callee.name + "(" in line for line in kernel_fn.lines), "Warp's Function.native_func changed"
    assert codegen_record(probes["func"]).custom_adjoints == (), "codegen_record.custom_adjoints sees a plain func"
    custom = codegen_record(probes["custom"]).custom_adjoints
    assert custom == (_access_scaled.key,), f"Warp's Function.custom_grad_func changed (custom_adjoints): {custom}"  # pyright: ignore[reportFunctionMemberAccess]  # a wp.Function
    # the backward code (`CodegenRecord.backward`): the kernel's replay calls the function, its reverse code the
    # function's adjoint; a custom gradient's body is that adjoint, under its function's C++ name
    kernel_bw, callee_bw = codegen_record(probes["func"]).backward
    assert any(line.startswith(callee.name + "(") for line in kernel_bw.lines), "Warp's Block.body_replay changed"
    assert any(callee_bw.name + "(" in line for line in kernel_bw.lines), "Warp's Block.body_reverse changed"
    assert callee_bw.name == "adj_" + callee.name, "Warp's reverse function names changed (CodegenRecord.backward)"
    assert any("wp::adj_array_store(var_x" in line for line in callee_bw.lines), "Warp's reverse code changed"
    record = codegen_record(probes["custom"])
    assert getattr(_access_scaled.custom_grad_func.adj, "custom_reverse_mode", False), (  # pyright: ignore[reportFunctionMemberAccess]  # a wp.Function
        "Warp's custom gradient is no longer a function in custom reverse mode (CodegenRecord.backward)"
    )
    assert [f.key for f in record.functions] == [probes["custom"].key, _access_scaled.key], (  # pyright: ignore[reportFunctionMemberAccess]  # a wp.Function
        "CodegenRecord.functions lists a custom gradient as forward code (Warp's ModuleBuilder.functions changed)"
    )
    grad = record.backward[-1]
    assert grad.name == "adj_" + record.functions[-1].name, "Warp's Function.custom_grad_func changed (backward)"
    assert grad.params == (("var_x", False),), "Warp's custom_reverse_num_input_args changed (backward)"
    assert any(line.startswith("adj_x = ") for line in grad.lines), "Warp's custom gradient code changed (backward)"
    a = wp.zeros(1, dtype=float, device="cpu", requires_grad=True)
    tape = wp.Tape()
    tape.record_launch(probes["store"], 1, 0, [a], [a], "cpu")
    assert tape_launches(tape) == [(probes["store"], [a, a])], "Warp's Tape.launches changed (tape_launches)"
    for name, kernel in probes.items():
        got = array_access(kernel)
        assert got is not None, f"Warp could not generate the probe kernel {name!r} (array_access)"
        got = {label: tuple(access) for label, access in got.items()}
        assert got == expected[name], f"Warp's read/write record changed for the {name!r} probe: {got}"


_ACCESS_FOLDED = False


@wp.func
def _access_bump(x: wp.array(dtype=float), i: int):  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    x[i] = 1.0


def _access_store(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    b[i] = a[i]


def _access_atomic(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    wp.atomic_add(a, 0, b[i])


def _access_func(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    _access_bump(x=a, i=i)  # pyright: ignore[reportArgumentType]  # wp.tid() of a 1-D launch: an int


@wp.func
def _access_scaled(x: float):
    return 2.0 * x


@wp.func_grad(_access_scaled)
def _access_scaled_grad(x: float, adj_ret: float):
    wp.adjoint[x] += 2.0 * adj_ret


def _access_custom(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    b[i] = _access_scaled(a[i])


def _access_folded(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    if _ACCESS_FOLDED:
        a[i] = 2.0
    b[i] = a[i]


# -- inspection --


def module_codegen(module: wp.Module, target: str, arch: int | None = None, block_dim: int | None = None) -> str:
    """Warp's generated C++ (``target="cpu"``) or CUDA (``target="cuda"``) source of a Warp module.

    The source is the one a build of ``module`` compiles: it covers every kernel of
    the module (each registered overload of a generic kernel) with the block dim
    jarp loads it with for a requested ``block_dim`` (see `resolve_block_dim`: by
    default 1 on the CPU, 256 on CUDA). ``arch`` is the CUDA output architecture
    (e.g. 90); it only changes the code of tile kernels that link NVIDIA's math
    libraries, and is ignored for the CPU.
    """
    runtime_core()  # Warp must be initialised before code generation
    is_cpu = target == "cpu"
    if is_cpu:
        block_dim = resolve_block_dim(wp.get_device("cpu"), block_dim)
    elif block_dim is None:
        block_dim = CUDA_BLOCK_DIM
    with _WARP_LOCK:
        module.get_module_hash(block_dim)  # resolve wp.static() expressions and cache the variant's hasher
        options = module.resolve_options(wp.config, block_dim=block_dim) | {"output_arch": None if is_cpu else arch}
        source, _ext, _meta, _ltoirs, _fatbins = module._run_codegen(options, is_cpu)
    return source


def default_cuda_arch() -> int:
    """The CUDA arch Warp compiles for on the first CUDA device, or Warp's default PTX arch without a GPU."""
    runtime_core()
    if wp.is_cuda_available():
        return int(wp.get_cuda_device().get_cuda_compile_arch())  # pyright: ignore[reportArgumentType]  # a CUDA device's: set
    return int(wp._src.context.runtime.default_ptx_arch)


def compile_aot_variant(
    module: wp.Module,
    archs: Sequence[int],
    module_dir: str | os.PathLike[str] | None,
    use_ptx: bool,
    block_dim: int,
) -> list[Path]:
    """Compile ``module``'s CUDA build for ``block_dim`` ahead of time, once per arch; return the binaries' paths.

    ``wp.compile_aot_module`` always builds the module's default block dim; this builds
    the variant a launch with ``block_dim`` loads, with the same file layout
    (``<dir>/wp_<module>_<hash>.sm<arch>.cubin``, the hash covering the block dim).
    """
    runtime_core()
    with _WARP_LOCK:
        module.get_module_hash(block_dim)  # resolve wp.static() expressions and cache the variant's hasher
        options = module.resolve_options(wp.config, block_dim=block_dim)
        runtime = wp._src.context.runtime
        if module_dir is None:
            out_dir = Path(wp.config.kernel_cache_dir) / module.get_module_identifier(block_dim=block_dim)  # pyright: ignore[reportArgumentType]  # set by then
        else:
            out_dir = Path(module_dir)
        paths = []
        for arch in archs:
            module._compile(
                None,
                None if module_dir is None else os.fspath(module_dir),
                output_arch=arch,
                use_ptx=use_ptx,
                options=options,
            )
            suffix = _validate_cuda_arch_suffix(
                arch, device_arch=arch, toolkit_version=runtime.toolkit_version, device_name=None
            )
            name = module._get_compile_output_name(None, arch, arch_suffix=suffix, use_ptx=use_ptx, block_dim=block_dim)
            paths.append(out_dir / name)
    return paths


def cuda_entry_names(kernel: wp.Kernel, block_dim: int | None) -> tuple[str, str | None]:
    """The symbols of ``kernel``'s CUDA forward and backward entry points in its module's build for ``block_dim``.

    A kernel's symbol carries its hash in that build (``<key>_<hash8>_cuda_kernel_forward``), which differs
    between the builds of different block dims, as ``ModuleExec.get_kernel_mangled_name`` resolves it
    when Warp loads the module. The backward name is None when the module is built without backward code.
    """
    block_dim = CUDA_BLOCK_DIM if block_dim is None else block_dim
    with _WARP_LOCK:
        kernel.module.get_module_hash(block_dim)
        kernel_hash = kernel.module.hashers[block_dim].kernel_hashes[kernel]
    name = kernel.get_mangled_name(kernel_hash=kernel_hash)
    forward = wp._src.codegen.cuda_kernel_forward_name(kernel, name=name)
    options = kernel.module.options | kernel.options
    backward = wp._src.codegen.cuda_kernel_backward_name(kernel, name=name) if options["enable_backward"] else None
    return forward, backward
