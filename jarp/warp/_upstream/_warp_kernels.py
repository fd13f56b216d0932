"""Warp's kernels and their modules, as jarp reads and makes them: parameters and source, overloads, kernels made
from source, the registry of Warp's modules, the code hashes, the lock around everything that asks Warp to build,
and Warp's start-up.

Part of the upstream stage (its ``__init__`` lists the modules): `check_internals`, run by
`tests/warp/compat/test_upstream_internals.py`, fails loudly when an internal this module reads changes shape.
"""

# pyright: reportAttributeAccessIssue=false
# (a module where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which Warp's type
# stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

import warp as wp
from warp._src.codegen import _TID_MAX_EXTENT, _codegen_lock
from warp._src.context import (
    _resolve_launch_block_dim,
)

from . import _locks

# Warp builds modules without locking: two threads loading, overloading or defining kernels at
# once corrupt its module state (half-written cache directories, a module hash changing mid-build).
# jarp takes this one re-entrant lock around every call that asks Warp to create, overload,
# generate code for, build or load anything.
# Its place in the lock order: `_locks.ORDER` (after the executors' lock; Warp's own `_codegen_lock` only under it).
_WARP_LOCK = _locks.make("warp")


# Warp's default block dim on CUDA: 256 threads per block (the CPU runs one thread per block unless
# ``wp.config.enable_cpu_blocks`` makes a requested block dim cooperative).
CUDA_BLOCK_DIM = 256


# The most threads a launch may have along one dim (Warp refuses more).
TID_MAX_EXTENT = _TID_MAX_EXTENT


def warp_lock() -> Any:
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


def codegen_lock() -> Any:
    """Warp's own code-generation lock, which jarp takes only while it holds `warp_lock`."""
    return _codegen_lock


def warp_lock_held() -> bool:
    """Whether this thread holds `warp_lock` (for assertions and tests)."""
    return _locks.is_owned(_WARP_LOCK)


def resolve_block_dim(device: wp.Device, block_dim: int | None) -> int:
    """The block dim Warp builds and launches ``device``'s module variant with for a requested ``block_dim``.

    ``None`` is Warp's default (256 on CUDA, 1 on the CPU). On the CPU a request above 1
    takes effect only with ``wp.config.enable_cpu_blocks`` (cooperative CPU blocks);
    otherwise it resolves to 1, as in ``wp.launch``.

    Raises:
        ValueError: for a CPU request above 1024.
    """
    return int(_resolve_launch_block_dim(device, block_dim))


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


# What one planning step (`one_code_version`) has computed from the code of its kernels, by key; None outside one.
_version_memo: contextvars.ContextVar[dict[Hashable, Any] | None] = contextvars.ContextVar(
    "jarp_version_memo", default=None
)

_T = TypeVar("_T")


@contextlib.contextmanager
def one_code_version() -> Iterator[None]:
    """Within the block, a kernel's code is hashed once (`current_code_hash`) and what `per_code_version` computes
    from it is computed once: everything a plan is drawn from sees one version of the code.

    Building one plan asks for the hash of its kernel about six times (each analysis checks that its verdict is of
    the code as it stands), and hashing is a fraction of a millisecond to a few: a tenth of a first call's own
    cost. A name rebound by another thread meanwhile is seen by the next planning step, as it would be if the
    rebinding had come a moment later. Re-entrant: an inner block shares the outer one's results. Per thread
    (a context variable).

    Example:
        ```python
        with one_code_version():
            assert current_code_hash(kernel) == current_code_hash(kernel)  # hashed once
        ```
    """
    if _version_memo.get() is not None:
        yield
        return
    token = _version_memo.set({})
    try:
        yield
    finally:
        _version_memo.reset(token)


def per_code_version(key: Hashable, compute: Callable[[], _T]) -> _T:
    """``compute()``, once per ``key`` within a `one_code_version` block (every time outside one).

    For what is drawn from a kernel's code as it stands and would otherwise be drawn again by each analysis of one
    plan; ``key`` names the computation and its inputs (``("compiled_source", kernel)``).
    """
    memo = _version_memo.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


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
            compare with Warp's as above, once per `one_code_version` block; without it, the hash as of the last
            look with it (a lookup).

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
    return per_code_version(("code_hash", kernel, block_dim), lambda: _hash_and_compare(kernel, block_dim)).hex()


def _hash_and_compare(kernel: wp.Kernel, block_dim: int) -> bytes:
    """The hash of ``kernel`` alone, kept for lookups; its module marked modified where Warp keeps another."""
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
    return alone


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


def loaded_code_hash(kernel: wp.Kernel, module_exec: object, block_dim: int) -> str | None:
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


def tape_launches(tape: wp.Tape) -> list[tuple[wp.Kernel, list[Any]]]:
    """The kernels a ``wp.Tape`` recorded, each with its arguments (inputs then outputs) as given to ``wp.launch``."""
    return [(entry[0], [*entry[3], *entry[4]]) for entry in tape.launches if isinstance(entry, list)]


def is_builtin_name(name: str) -> bool:
    """Whether Warp has a builtin function of this key (what it calls for a name Python does not resolve)."""
    return name in wp._src.context.builtin_functions


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


def check_internals() -> None:
    """Raise `AssertionError` if a Warp internal this module relies on has changed shape."""
    assert hasattr(wp.Kernel, "__init__")
    assert isinstance(wp.config.log_level, int), "wp.config.log_level changed (init_quietly)"
    assert wp.LOG_INFO < wp.LOG_WARNING, "Warp's log levels changed (init_quietly)"
    assert callable(getattr(wp.Module, "get_module_hash", None)), "wp.Module lost get_module_hash"
    assert callable(getattr(_WARP_LOCK, "_is_owned", None)), "threading.RLock lost _is_owned (warp_lock_held)"
    runtime_core()
    # registered_kernel / kernel_code_hash (the content description of a plan's kernel, `_plan._content`)
    assert isinstance(wp._src.context.user_modules, dict), "warp's module registry (user_modules) changed"

    def probe(a: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
        a[0] = 1.0

    with _WARP_LOCK:
        probe_kernel = wp.Kernel(probe, key="_jarp_probe_kernel", module=wp.get_module("jarp._probe"))
    assert registered_kernel("jarp._probe", "_jarp_probe_kernel") is probe_kernel, "Module.kernels changed"
    digest = kernel_code_hash(probe_kernel, 1)
    assert isinstance(digest, str), "ModuleHasher.kernel_hashes changed"
    assert len(digest) == 64, "Warp's kernel hash is no longer a sha256 digest"
    assert kernel_code_hash(probe_kernel, 1) == digest, "Warp's kernel hash is not stable"
    # current_code_hash: a kernel hashed alone hashes as in its module, whose kept hash Warp drops when marked modified
    assert current_code_hash(probe_kernel, 1) == digest, "a kernel hashed alone no longer hashes as in its module"
    assert callable(getattr(wp.Module, "mark_modified", None)), "wp.Module lost mark_modified (current_code_hash)"
