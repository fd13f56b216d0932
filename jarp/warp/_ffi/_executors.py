"""Executors: one per (plan, device), prepared once, run by the FFI target on every call.

An executor writes a call's buffer pointers into a copy of a pre-filled argument block and calls the
kernel's compiled entry point directly (`CpuKernelExecutor`, `CudaKernelExecutor`), or calls a
Python function on ``wp.array``s wrapping XLA's buffers (`CallableExecutor`). There is no lock around a
kernel launch: each call fills its own argument block, so threads (pmap, several Python threads driving one
executable) run concurrently; callables run one at a time (`_locks.callables`). Where the native handler is in use, a kernel executor also publishes its
launch as a descriptor, and the handler runs later calls with no Python.

The executors themselves: `_executor_base` (what they share), `_kernel_executors`, `_callable_executor`; the lock
order in `_upstream._locks`. The cache is keyed by ``(plan handle, device ordinal)`` (``-1`` for the CPU) and drops the executors
of released plans (the registry's release hook).
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Iterator
from typing import Any

import warp as wp

from .._plan import _cache_table
from .._plan._values import Plan, Runs
from .._upstream import _warp_kernels, _warp_launches, _xla_ffi
from . import _checking, _errors, _locks, _native
from ._callable_executor import CallableExecutor
from ._callable_executor import CallSite as CallSite
from ._callable_executor import current_call as current_call
from ._executor_base import Executor, check_load_during_capture
from ._frame import CallError, FrameBuffers
from ._kernel_executors import CpuKernelExecutor, CudaKernelExecutor, KernelExecutor
from ._native._fp_env import default_fp_env
from ._registry import ReleasedPlanError, registry

executors: dict[tuple[int, int], Executor | _PartitionedExecutor] = {}


cpu_executors: dict[int, Executor | _PartitionedExecutor] = {}  # the CPU hot path: keyed by handle alone


# The entry points (and so the loaded Warp code) of dropped kernel executors, kept while their kernel lives: a
# launch already queued on a CUDA stream or captured in a command buffer may still run that code after the plan
# was released. Keyed weakly by kernel, then by loaded module, so a kernel keeps one entry per build.
_retained: weakref.WeakKeyDictionary[Any, dict[int, _warp_launches.EntryPoints]] = weakref.WeakKeyDictionary()


def drop_executors(handles: list[int]) -> None:
    """Drop the executors of released plan handles (the registry's release hook).

    This is the one place the FFI stage learns of releases. A dropped kernel executor's loaded code is
    kept in `_retained` until its kernel is collected, so a release never unloads code that
    something still able to call the kernel might run. Code that jarp lets go of is unloaded under
    Warp's lock (`_warp_launches.release_unloads`), here or at the next executor build.
    """
    _drop(handles)
    # The code of the entries dropped (and of kernels collected since the last safe point) is unloaded under
    # Warp's lock, never concurrently with a build; if another thread holds it, at the next safe point.
    _warp_launches.release_unloads()


def _drop(handles: list[int]) -> None:
    released = set(handles)
    with _locks.executors:
        for key in [k for k in executors if k[0] in released]:
            executor = executors.pop(key)
            for part in executor.by_batch.values() if isinstance(executor, _PartitionedExecutor) else (executor,):
                entry = getattr(part, "entry", None)
                if entry is not None:
                    _retained.setdefault(part.plan.target, {})[id(entry.module_exec)] = entry
        for handle in released:
            cpu_executors.pop(handle, None)
        native = _native.active()
        if native is not None:
            # A later frame naming a released handle finds no descriptor and goes to the Python callback.
            native.withdraw(handles)


registry.on_release(drop_executors)


def _rebuild_all() -> None:
    """Drop every executor (and its native descriptors): the next call of each plan builds one for the launch mode
    now in force (checking mode on or off)."""
    with _locks.executors:
        handles = sorted({key[0] for key in executors})
    _drop(handles)


_checking.on_change(_rebuild_all)


class _Unloads:
    """``jax.clear_caches()`` is a safe point for unloading the code jarp let go of, too."""

    @staticmethod
    def cache_clear() -> None:
        _warp_launches.release_unloads()


_cache_table.register(_Unloads, "jarp.warp unloads of dropped Warp code")


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the executors' lock, then Warp's lock: the lock order (`_upstream._locks.ORDER`) for user code run under Warp's lock.

    Code jarp runs under Warp's lock that may call a jarp module (a generic callable's factory) takes this instead
    of Warp's lock alone: the module's executor is prepared under the executors' lock, which comes first.

    Returns:
        A context manager holding both locks (re-entrant) while its block runs.
    """
    with _locks.executors, _warp_kernels.warp_lock():
        yield


def get_executor(key: tuple[int, int], platform: str, frame: int = 0) -> Executor | _PartitionedExecutor:
    """The executor of ``key`` (plan handle, device ordinal), prepared on first use.

    ``frame`` is the call frame that asked (0: none); preparing a CUDA kernel executor loads the kernel's
    module, which `check_load_during_capture` refuses while XLA captures that frame's stream on a driver
    that cannot load modules during a capture.
    """
    with _locks.executors, _warp_kernels.warp_lock():  # an executor loads the kernel's module
        executor = executors.get(key)
        if executor is None:
            plan = _plan(key[0])
            device = wp.get_device("cpu") if platform == "cpu" else wp.get_cuda_device(key[1])
            if plan.partitioned:
                executor = _PartitionedExecutor(plan, device, 0 if key[1] == -1 else 1 + key[1], key[0])
            else:
                executor = _build(plan, device, frame)
            executors[key] = executor
            if key[1] == -1:
                cpu_executors[key[0]] = executor
            native = _native.active()
            if native is not None and isinstance(executor, (KernelExecutor, CallableExecutor)):
                descriptor = executor.native_descriptor()
                if descriptor is not None:
                    slot = 0 if key[1] == -1 else 1 + key[1]
                    native.publish(key[0], slot, descriptor)
    return executor


def _build(plan: Plan, device: Any, frame: int) -> Executor:
    """A new executor of ``plan`` on ``device`` (under `_locks.executors` and Warp's lock: a kernel executor loads its module)."""
    # Not XLA's flush-to-zero mode: static subnormals are packed as they are, not as 0.
    with default_fp_env():
        checked = device.is_cpu and _checking.checking_mode()
        if plan.runs is Runs.CALLABLE:
            return _checking.CheckedCpuCallableExecutor(plan, device) if checked else CallableExecutor(plan, device)
        if device.is_cpu:
            return _checking.CheckedCpuKernelExecutor(plan, device) if checked else CpuKernelExecutor(plan, device)
        if frame:
            check_load_during_capture(plan, device, _xla_ffi.get_stream(frame), first_run=False)
        return CudaKernelExecutor(plan, device)


class _PartitionedExecutor:
    """The calls of a partitioned plan (`Plan.partitioned`): each device's call runs its part of the batch.

    XLA's batch partitioner gives each device's call the leading batch dims of its own part of the batch.
    The plan describes the whole batch; for each local batch a call passes, this executor keeps an executor of
    the plan with that batch shape (the same launch over fewer slices), which checks every buffer of the frame
    exactly as for any plan: the number of buffers, each one's dtype and dims, the local batch dims of the
    batched ones (the same in every batched buffer) and the whole of each operand broadcast across the batch.
    The local batch is read from the frame's first batched buffer and must lie within the plan's batch, dim by
    dim; a frame whose dims are out of those bounds is checked against the whole batch, which explains it.
    The native handler serves the first local batch it is given (the descriptor of its executor, with the copies
    of its in-out pairs) and passes any other to this one.
    """

    MAX_PARTS = 16  # local batches kept; beyond, each call of another one builds its executor anew

    def __init__(self, plan: Plan, device: Any, slot: int, handle: int) -> None:
        self.plan = plan
        self.device = device
        self.slot = slot
        self.handle = handle
        self.buffers = FrameBuffers(plan)
        self.by_batch: dict[tuple[int, ...], Executor] = {}
        self.published = False

    def run(self, frame: int) -> None:
        local = self.buffers.local_batch(frame)
        part = self.by_batch.get(local) if local is not None else None
        if part is None:
            part = self._part(self.plan.batch_shape if local is None else local, frame)
        part.run(frame)

    def _part(self, local: tuple[int, ...], frame: int) -> Executor:
        with _locks.executors, _warp_kernels.warp_lock():
            part = self.by_batch.get(local)
            if part is not None:
                return part
            part = _build(dataclasses.replace(self.plan, batch_shape=local), self.device, frame)
            if len(self.by_batch) < self.MAX_PARTS:
                self.by_batch[local] = part
            native = _native.active()
            if native is not None and not self.published and isinstance(part, KernelExecutor):
                descriptor = part.native_descriptor()
                if descriptor is not None:
                    self.published = True
                    native.publish(self.handle, self.slot, descriptor)
            return part


def _plan(handle: int) -> Plan:
    """The plan behind ``handle``; `CallError` if this process never made it or released it.

    A handle never made is ``INVALID_ARGUMENT``; one released (no executable lowered with it alive,
    and its kernel or function collected) is ``FAILED_PRECONDITION``.
    """
    try:
        return registry.plan(handle)
    except ReleasedPlanError as e:
        code = _xla_ffi.ErrorCode.FAILED_PRECONDITION if e.released else _xla_ffi.ErrorCode.INVALID_ARGUMENT
        raise CallError(code, str(e)) from None


def executor_count() -> int:
    """Number of prepared (plan, device) executors, for inspection and tests."""
    return len(executors)


def executor_keys() -> list[tuple[int, int]]:
    """The ``(plan handle, device ordinal)`` of each prepared executor, sorted (``-1``: the CPU)."""
    with _locks.executors:
        return sorted(executors)


_errors.own_frames(__file__)
