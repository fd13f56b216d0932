"""Executors: one per (plan, device), prepared once, run by the FFI target on every call.

An executor writes a call's buffer pointers into a copy of a pre-filled argument block and calls the
kernel's compiled entry point directly (`_CpuKernelExecutor`, `_CudaKernelExecutor`), or calls a
Python function on ``wp.array``s wrapping XLA's buffers (`_CallableExecutor`). There is no lock around a
kernel launch: each call fills its own argument block, so threads (pmap, several Python threads driving one
executable) run concurrently; callables run one at a time (`_CALLABLE_LOCK`). Where the native handler is in use, a kernel executor also publishes its
launch as a descriptor, and the handler runs later calls with no Python.

The cache is keyed by ``(plan handle, device ordinal)`` (``-1`` for the CPU) and drops the executors
of released plans (the registry's release hook).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import math
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import warp as wp

from .._plan import _geometry_adjoints, _launch_checks, _races
from .._plan._values import Binding, Plan, Runs
from .._upstream import _jax_internals, _warp_internals, _xla_ffi
from . import _arg_blocks, _errors, _guard, _native, _ranged, _struct_bytes, _threads
from ._fp_env import default_fp_env
from ._frame import CallError, FrameBuffers
from ._registry import ReleasedPlanError, registry

executors: dict[tuple[int, int], _Executor | _PartitionedExecutor] = {}
cpu_executors: dict[int, _Executor | _PartitionedExecutor] = {}  # the CPU hot path: keyed by handle alone
# The executors' lock: guards `executors`, `cpu_executors` and the building of an executor. Re-entrant: releasing
# plans drops executors, and a callable's function may call another jarp module (which prepares its executor).
#
# Lock order. A thread that takes several of jarp's locks takes them in this order, and never waits for one of them
# while it holds one that comes later (re-acquiring one it already holds is fine: all of them are re-entrant):
#
#   `_CALLABLE_LOCK`  ->  `_lock` (here)  ->  Warp's lock (`_warp_internals.warp_lock`)  ->  Warp's `_codegen_lock`
#
# `get_executor` and `_PartitionedExecutor._part` take `_lock`, then Warp's lock (an executor loads its module); a
# callable's first run takes both in the same order before its function runs (`_CallableExecutor.run`: the function
# may launch another jarp module, whose executor takes `_lock`), and so does `build_lock` for the user code jarp runs
# under Warp's lock (a generic callable's factory); `_warp_internals` takes Warp's `_codegen_lock` only under Warp's
# lock. The registry's lock and the native handler's lock come after all of these and are held for a moment.
_lock = threading.RLock()
# Held while a callable's function runs. Warp's current device (``wp.ScopedDevice``) is one for the whole process and
# a device's current stream (``wp.ScopedStream``) one per device, not per thread: two threads running callables at
# once (pmap, or Python threads) would launch on each other's device or stream, and restore each other's on exit.
# Warp's bridge serialises its callables with one lock too. Kernel executors switch nothing and take no lock.
# First in the lock order (see `_lock`): the function it runs may call any jarp module.
_CALLABLE_LOCK = threading.RLock()

_ENTRY_FORWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_ENTRY_BACKWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_memset = ctypes.memset
_memmove = ctypes.memmove


# The entry points (and so the loaded Warp code) of dropped kernel executors, kept while their kernel lives: a
# launch already queued on a CUDA stream or captured in a command buffer may still run that code after the plan
# was released. Keyed weakly by kernel, then by loaded module, so a kernel keeps one entry per build.
_retained: weakref.WeakKeyDictionary[Any, dict[int, _warp_internals.EntryPoints]] = weakref.WeakKeyDictionary()


def drop_executors(handles: list[int]) -> None:
    """Drop the executors of released plan handles (the registry's release hook).

    This is the one place the FFI stage learns of releases. A dropped kernel executor's loaded code is
    kept in `_retained` until its kernel is collected, so a release never unloads code that
    something still able to call the kernel might run. Code that jarp lets go of is unloaded under
    Warp's lock (`_warp_internals.release_unloads`), here or at the next executor build.
    """
    _drop(handles)
    # The code of the entries dropped (and of kernels collected since the last safe point) is unloaded under
    # Warp's lock, never concurrently with a build; if another thread holds it, at the next safe point.
    _warp_internals.release_unloads()


def _drop(handles: list[int]) -> None:
    released = set(handles)
    with _lock:
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


class _Unloads:
    """``jax.clear_caches()`` is a safe point for unloading the code jarp let go of, too."""

    @staticmethod
    def cache_clear() -> None:
        _warp_internals.release_unloads()


_jax_internals.clear_with_jax(_Unloads, "jarp.warp unloads of dropped Warp code")


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the executors' lock, then Warp's lock: the lock order (see `_lock`) for user code run under Warp's lock.

    Code jarp runs under Warp's lock that may call a jarp module (a generic callable's factory) takes this instead
    of Warp's lock alone: the module's executor is prepared under the executors' lock, which comes first.

    Returns:
        A context manager holding both locks (re-entrant) while its block runs.
    """
    with _lock, _warp_internals.warp_lock():
        yield


def get_executor(key: tuple[int, int], platform: str, frame: int = 0) -> _Executor | _PartitionedExecutor:
    """The executor of ``key`` (plan handle, device ordinal), prepared on first use.

    ``frame`` is the call frame that asked (0: none); preparing a CUDA kernel executor loads the kernel's
    module, which `_check_load_during_capture` refuses while XLA captures that frame's stream on a driver
    that cannot load modules during a capture.
    """
    with _lock, _warp_internals.warp_lock():  # an executor loads the kernel's module
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
            if native is not None and isinstance(executor, _KernelExecutor):
                descriptor = executor.native_descriptor()
                if descriptor is not None:
                    slot = 0 if key[1] == -1 else 1 + key[1]
                    native.publish(key[0], slot, descriptor)
    return executor


def _build(plan: Plan, device: Any, frame: int) -> _Executor:
    """A new executor of ``plan`` on ``device`` (under `_lock` and Warp's lock: a kernel executor loads its module)."""
    # Not XLA's flush-to-zero mode: static subnormals are packed as they are, not as 0.
    with default_fp_env():
        if plan.runs is Runs.CALLABLE:
            return _CallableExecutor(plan, device)
        if device.is_cpu:
            return _CpuKernelExecutor(plan, device)
        if frame:
            _check_load_during_capture(plan, device, _xla_ffi.get_stream(frame), first_run=False)
        return _CudaKernelExecutor(plan, device)


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
        self.by_batch: dict[tuple[int, ...], _Executor] = {}
        self.published = False

    def run(self, frame: int) -> None:
        local = self.buffers.local_batch(frame)
        part = self.by_batch.get(local) if local is not None else None
        if part is None:
            part = self._part(self.plan.batch_shape if local is None else local, frame)
        part.run(frame)

    def _part(self, local: tuple[int, ...], frame: int) -> _Executor:
        with _lock, _warp_internals.warp_lock():
            part = self.by_batch.get(local)
            if part is not None:
                return part
            part = _build(dataclasses.replace(self.plan, batch_shape=local), self.device, frame)
            if len(self.by_batch) < self.MAX_PARTS:
                self.by_batch[local] = part
            native = _native.active()
            if native is not None and not self.published and isinstance(part, _KernelExecutor):
                descriptor = part.native_descriptor()
                if descriptor is not None:
                    self.published = True
                    native.publish(self.handle, self.slot, descriptor)
            return part


def _check_load_during_capture(plan: Plan, device: Any, stream: int, first_run: bool) -> None:
    """Refuse to load Warp modules while XLA captures ``stream`` into a CUDA graph, where the driver cannot.

    CUDA drivers older than 12.3 cannot load a module during a stream capture (``wp.capture_begin`` loads
    every module before a capture of its own for them). XLA's command buffers capture a custom call's launches,
    the first one included, so a module that is not loaded yet would load inside XLA's capture: refuse with
    `CallError` instead. ``first_run``: a callable's first run, which may load any module its function launches.
    """
    if _warp_internals.loads_during_capture() or not _warp_internals.stream_is_capturing(stream):
        return
    if not first_run and _warp_internals.module_loaded(plan.target, device, plan.block_dim):
        return  # preloaded at trace time
    if first_run:
        what = "the Warp modules of the kernels the function launches are not loaded yet (they load on its first run)"
        fix = (
            "give the callable graph_mode=wp.JaxCallableGraphMode.NONE (XLA then runs it outside its command "
            "buffers), or update the CUDA driver"
        )
    else:
        what = f"the Warp module of kernel {plan.target.key!r} is not loaded on {device} yet"
        fix = (
            "load it at trace time with module_preload_mode=wp.JaxModulePreloadMode.CURRENT_DEVICE (the default; it "
            "loads on JAX's default device) or ALL_DEVICES (every local device), or update the CUDA driver"
        )
    raise CallError(
        _xla_ffi.ErrorCode.FAILED_PRECONDITION,
        f"{plan.name}: XLA is capturing this call on {device} into a CUDA graph (a command buffer) and {what}; "
        f"the CUDA driver cannot load modules during a capture before version 12.3. To run it, {fix}.",
    )


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


def _batch_offsets(plan: Plan, nbytes: tuple[int, ...], batch: tuple[tuple[bool, ...], ...]) -> list[list[int]]:
    """For each buffer, the byte offset of each batch slice (row-major over ``plan.batch_shape``)."""
    shape = plan.batch_shape
    nslices = math.prod(shape)
    idx = np.indices(shape).reshape(len(shape), nslices) if shape else np.zeros((0, 1), dtype=np.int64)
    out = []
    for size, has in zip(nbytes, batch, strict=True):
        strides, stride = [], size
        for n, h in reversed(list(zip(shape, has, strict=True))):
            strides.append(stride if h else 0)
            stride *= n if h else 1
        strides.reverse()
        offs = (np.asarray(strides, dtype=np.int64)[:, None] * idx).sum(axis=0) if shape else np.zeros(1, np.int64)
        out.append([int(o) for o in offs])
    return out


class _Executor:
    """What every executor prepares from its plan: the frame check, the batch slices, the results to zero-fill.

    Attributes:
        pointers: checks a frame against the plan and returns its (operand, result) data pointers.
        nslices: the number of batch slices one call runs (1 without a batch).
        zero: ``(result index, bytes)`` of each result to zero-fill before the launches.
        copies: ``(operand index, result index, bytes)`` of each in-out pair a partitioned call passes as two
            buffers (XLA's partitioned call keeps no aliases): the operand is copied to the result first.
        offsets: for operands and for results, each buffer's byte offset of each batch slice.
    """

    def __init__(self, plan: Plan, device: Any) -> None:
        self.plan = plan
        self.device = device
        self.buffers = FrameBuffers(plan)
        self.pointers = self.buffers.pointers
        self.adjoint = plan.adjoint
        self.nslices = math.prod(plan.batch_shape)
        res_nbytes = tuple(b.nbytes for b in plan.results)
        self.zero = [(j, res_nbytes[j] * self.nslices) for j in plan.zero_results if res_nbytes[j]]
        self.copies = [
            (i, j, res_nbytes[j] * self.nslices) for i, j in plan.aliases if plan.partitioned and res_nbytes[j]
        ]
        self.offsets = (
            _batch_offsets(plan, tuple(b.nbytes for b in plan.operands), plan.operand_batch),
            _batch_offsets(plan, res_nbytes, tuple((True,) * len(plan.batch_shape) for _ in plan.results)),
        )

    def run(self, frame: int) -> None:
        raise NotImplementedError


class _KernelExecutor(_Executor):
    """Shared preparation of a kernel launch: argument blocks and pointer slots."""

    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        kernel = plan.target
        self.entry = _warp_internals.load_entry_points(kernel, device, plan.block_dim)
        if self.adjoint and not self.entry.backward:
            raise RuntimeError(
                f"kernel {kernel.key!r} has no backward entry point; its module was built with "
                "enable_backward=False (set wp.config.enable_backward or the module option to True)."
            )
        self.bounds = _warp_internals.launch_bounds(kernel, plan.launch_dims, self.entry.block_dim)
        self.empty = math.prod(plan.launch_dims) == 0
        # (block, slot, source, index, per-slice offsets) for every pointer to patch per call
        self.slots: list[tuple[int, int, int, int, list[int]]] = []
        self.blocks = []
        for b in range(2 if self.adjoint else 1):
            block = _arg_blocks.argument_block(plan, b)
            self.blocks.append((block.words, block.raw, block.template))
            self.slots.extend((b, word, src, index, self.offsets[src][index]) for word, src, index in block.slots)
        # The CUDA parameters (the launch bounds, then every field of the block(s)), as both launch paths pass them.
        self.cuda_params = _arg_blocks.cuda_params([t for _, _, t in self.blocks], self.bounds)

    def native_descriptor(self) -> _native.LaunchDescriptor | None:
        """This launch as a descriptor for the native handler; None if it stays on the Python path."""
        templates = [raw for _, raw, _ in self.blocks]
        if not _native.LaunchDescriptor.fits(templates):
            return None
        args, rets = (
            [(_xla_ffi.dtype_code(np.dtype(dtype)), tuple(int(n) for n in shape)) for dtype, shape in side]
            for side in self.buffers.shapes
        )
        entry = self.entry.backward if self.adjoint else self.entry.forward
        return _native.LaunchDescriptor(
            args=args,
            rets=rets,
            zero=self.zero,
            launch=not self.empty,
            nslices=self.nslices,
            templates=templates,
            slots=[(block, word, src, index, offs) for block, word, src, index, offs in self.slots],
            bounds=ctypes.addressof(self.bounds),
            entry=entry,
            cuda=self._cuda_launch(),
            failure=_warp_internals.cuda_launch_failure(self.plan.target, self.entry, self.adjoint),
            keep=self.bounds,  # the memory the addresses point into (not the plan)
            code=self.entry,  # the code ``entry`` points into, while published (then `_retained` keeps it)
            tasks=math.prod(self.plan.launch_dims),
            copies=self.copies,
            **self._threading(),
        )

    def _threading(self) -> dict[str, Any]:
        """How the native handler may spread this launch over CPU threads (nothing, unless a CPU executor says)."""
        return {}

    def _cuda_launch(self) -> tuple[int, int, int, int, int, int, list[tuple[int, int]]] | None:
        return None


class _CpuKernelExecutor(_KernelExecutor):
    """Call a CPU entry point directly; with cooperative CPU blocks, report the errors they record as Warp does."""

    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        # With wp.config.enable_cpu_blocks, a block dim above 1 builds a variant whose entry point runs each
        # block's threads as fibers; it records errors (e.g. a fiber stack overflow) instead of aborting.
        self.cooperative = self.entry.block_dim > 1
        if self.adjoint:
            self.fn = _ENTRY_BACKWARD(self.entry.backward)
        else:
            self.fn = _ENTRY_FORWARD(self.entry.forward)
        if plan.bounds_checked:
            # Warp's debug build aborts the process on a failed index check: launch under jarp's guard instead.
            if not _guard.available():
                raise RuntimeError(
                    f"{plan.name}: bounds-checked CPU launches (bounds_check=True, or Warp's debug mode) need "
                    "Linux's signals to turn a failed check into an error; run without them here."
                )
            self.fn = self._guarded
        self.bounds_addr = ctypes.addressof(self.bounds)
        # (word in the argument block, 0/1 for the frame's argument/result array, byte offset of the buffer in it)
        self.fast = None
        if self.nslices == 1 and len(self.blocks) == 1:
            self.fast = [(slot, src, index) for _, slot, src, index, _ in self.slots]
            self.words0, self.raw0 = self.blocks[0][0], self.blocks[0][1]

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
        for i, j, nbytes in self.copies:
            if ptrs[0][i] != ptrs[1][j]:
                _memmove(ptrs[1][j], ptrs[0][i], nbytes)
        for j, nbytes in self.zero:
            _memset(ptrs[1][j], 0, nbytes)
        if self.empty:
            return
        if self.cooperative:
            _warp_internals.cpu_block_error()  # clear a stale record
        if self.fast is not None:  # one slice, forward: the common case, kept lean
            block = self.words0.from_buffer_copy(self.raw0)
            for slot, src, index in self.fast:
                block[slot] = ptrs[src][index]
            self.fn(self.bounds_addr, block)
            if self.cooperative:
                self._raise_block_error()
            return
        blocks = [words.from_buffer_copy(raw) for words, raw, _ in self.blocks]
        fn, bounds = self.fn, self.bounds_addr
        for s in range(self.nslices):
            for block, slot, src, index, offs in self.slots:
                blocks[block][slot] = ptrs[src][index] + offs[s]
            fn(bounds, *blocks)
            if self.cooperative:
                self._raise_block_error()

    def native_descriptor(self) -> _native.LaunchDescriptor | None:
        # Cooperative blocks record errors the Python path reports after each launch; bounds-checked launches run
        # under the guard, which the Python path calls.
        return None if self.cooperative or self.plan.bounds_checked else super().native_descriptor()

    def _threading(self) -> dict[str, Any]:
        # Batch slices write disjoint memory (every result carries every batch dim); they may run at once unless
        # the kernel keeps state in its module (tiles) or prints. Index ranges need the race proof too (or private
        # copies of the arrays it accumulates into), and jarp's ranged entry point, a second build of the module
        # (cached on disk like Warp's): made only for a launch large enough to be split, by its tasks or by its
        # estimated work (the handler then times it), whatever the thread cap now (it may change while the plan lives).
        plan = self.plan
        concurrent = not plan.shares_cpu_state
        tasks = math.prod(plan.launch_dims)
        splittable = plan.race_free or bool(plan.private)
        # a backward thread runs the forward code again, then its adjoint: about three times the forward's work
        work = tasks * _races.work_estimate(plan.target) * (3 if self.adjoint else 1) if splittable else 0
        # the handler splits a launch of at least two ranges (`run_on_pool`), ranges of MIN_RANGE tasks or fewer
        # where its cost (measured, or estimated for a privatised launch) says so
        large = tasks >= 2 * _threads.MIN_RANGE or work >= _threads.MIN_WORK
        private = self._private() if plan.private else []
        if not (concurrent and splittable and large) or (plan.private and not private):
            return {"concurrent": concurrent}
        try:
            range_entry = _ranged.ranged_cpu_entry(plan.target, self.entry, self.adjoint)
        except RuntimeError as e:  # an optimisation only: the launch stays whole, the call still runs
            warnings.warn(
                f"{plan.name}: jarp could not build its ranged entry point for kernel {plan.target.key!r} ({e}); its "
                "CPU launches run on one thread. Please report this with `python -m jarp`'s output.",
                RuntimeWarning,
                stacklevel=2,
            )
            return {"concurrent": concurrent}
        if not range_entry:
            return {"concurrent": concurrent}
        return {
            "concurrent": concurrent,
            "range_entry": range_entry,
            "private": private,
            "measured": True,
            "work": work,
        }

    def _private(self) -> list[tuple[int, int, int, int]]:
        """The handler's private specs of `Plan.private`: the result's pointer slot, combination, scalar, bytes.

        The slot is the result's pointer in its argument block (an adjoint plan's in the adjoint block; the handler
        also points the primal array's gradient pointer, which holds the same result, at the copy).
        """
        specs = []
        block_of = 1 if self.adjoint else 0
        for index, how in self.plan.private:
            slots = [
                k for k, (block, _, src, i, _) in enumerate(self.slots) if block == block_of and src == 1 and i == index
            ]
            scalar = np.dtype(self.plan.results[index].dtype).name
            if len(slots) != 1 or scalar not in _races.PRIVATE_SCALARS:
                return []
            op = ("add", "min", "max").index(how)
            specs.append((slots[0], op, _races.PRIVATE_SCALARS.index(scalar), self.plan.results[index].nbytes))
        return specs

    def _guarded(self, bounds: int, *blocks: Any) -> None:
        entry = self.entry.backward if self.adjoint else self.entry.forward
        signal = _guard.call(entry, bounds, *(ctypes.addressof(b) for b in blocks))
        if signal:
            raise RuntimeError(
                f"{self.plan.name}: kernel {self.plan.target.key!r} indexed an array out of bounds on the CPU: Warp's "
                f"bounds check failed (signal {signal}; Warp printed the check and its line to stderr) and jarp "
                "stopped the launch, so this call's outputs are incomplete. Fix the index, or the length of the "
                "array it reads."
            )

    def _raise_block_error(self) -> None:
        message = _warp_internals.cpu_block_error()
        if message:
            raise RuntimeError(f"Error launching kernel '{self.plan.target.key}' on device 'cpu': {message}")


class _CudaKernelExecutor(_KernelExecutor):
    def __init__(self, plan: Plan, device: Any) -> None:
        # Also checked at lowering for CUDA (`_jax._lowering`); here too, before any CUDA launch is prepared.
        _launch_checks.check_cuda_signature(plan.target, plan.block_dim, plan.name)
        super().__init__(plan, device)
        if not self.empty:  # as wp.launch checks the grid before it launches (once here: the dims are the plan's)
            _warp_internals.check_cuda_grid(plan.target, self.entry, int(self.bounds.size))

    def _cuda_launch(self) -> tuple[int, int, int, int, int, int, list[tuple[int, int]]] | None:
        # The same parameters, in the same order, as `run` passes through `_warp_internals.cuda_launch`.
        params = [(p.block, p.offset) for p in self.cuda_params]
        smem = self.entry.backward_smem if self.adjoint else self.entry.forward_smem
        grid_stride = int(self.plan.target.grid_stride)
        return (
            self.device.context or 0,
            int(self.bounds.size),
            self.entry.block_dim,
            grid_stride,
            self.entry.cluster_dim,
            smem,
            params,
        )

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
        stream = _xla_ffi.get_stream(frame)
        for i, j, nbytes in self.copies:
            if ptrs[0][i] != ptrs[1][j]:
                _warp_internals.cuda_copy(self.device, ptrs[1][j], ptrs[0][i], nbytes, stream)
        for j, nbytes in self.zero:
            _warp_internals.cuda_memset(self.device, ptrs[1][j], nbytes, stream)
        if self.empty:
            return
        structs = [type(t).from_buffer_copy(raw[: ctypes.sizeof(t)]) for _, raw, t in self.blocks]
        # cuLaunchKernel takes one pointer per parameter (launch bounds, then every field of the
        # argument block(s)); it copies the values at launch, so the blocks can be patched per slice.
        bases = {b: ctypes.addressof(st) for b, st in enumerate(structs)} | {2: ctypes.addressof(self.bounds)}
        addresses = [bases[p.block] + p.offset for p in self.cuda_params]
        addrs = (ctypes.c_void_p * len(addresses))(*addresses)
        for s in range(self.nslices):
            for block, slot, src, index, offs in self.slots:
                ctypes.c_uint64.from_buffer(structs[block], slot * 8).value = ptrs[src][index] + offs[s]
            _warp_internals.cuda_launch(self.plan.target, self.entry, self.bounds, addrs, stream, self.adjoint)


class _CallableExecutor(_Executor):
    """Call a Python function that launches Warp kernels on arrays wrapping XLA's buffers.

    For adjoint plans the function runs under a ``wp.Tape`` with each
    array's ``.grad`` wrapping its adjoint buffer, and the tape is then played back,
    so the launches it recorded accumulate the input cotangents.
    """

    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        self.warm = False
        # The last capture XLA made of this call (as Warp's bridge keeps it), and every module a capture of it
        # launched: a module rebuilt later is not unloaded while a command buffer XLA still replays calls it.
        self.capture: Any = None
        self.captured_modules: dict[int, Any] = {}
        # What a function keeps between calls of this plan on this device (`CallSite.store`): jarp's geometry keeps
        # the Warp structures it built there, so they live exactly as long as a program may call the plan.
        self.store: dict[Any, Any] = {}

    def _array(self, spec: Any, binding: Binding, ops: list[int], res: list[int], s: int, grad: Any = None) -> Any:
        plan = self.plan
        if binding.source == "operand":
            buf, base = plan.operands[binding.index], ops[binding.index] + self.offsets[0][binding.index][s]
        else:
            buf, base = plan.results[binding.index], res[binding.index] + self.offsets[1][binding.index][s]
        shape = buf.shape[: spec.warp_ndim]
        if grad is None:
            return wp.array(ptr=base, dtype=spec.dtype, shape=shape, device=self.device)
        return wp.array(ptr=base, dtype=spec.dtype, shape=shape, device=self.device, grad=grad, requires_grad=True)

    def _struct(self, param: Any, ops: list[int], res: list[int], s: int) -> Any:
        """A Warp struct instance whose array fields wrap the call's buffers (and adjoint buffers)."""
        layout = param.spec.struct
        arrays = []
        for k, (leaf, index) in enumerate(zip(layout.array_specs, param.primal.fields, strict=True)):
            grad = None
            if self.adjoint and param.adjoint.source == "struct":  # none: a struct JAX does not differentiate
                grad = self._array(leaf, Binding("result", param.adjoint.fields[k]), ops, res, s)
            arrays.append(self._array(leaf, Binding("operand", index), ops, res, s, grad))
        return _struct_bytes.make_struct_instance(layout.struct_type, layout, arrays, param.primal.value)

    def run(self, frame: int) -> None:
        # One callable at a time in the process: the function runs with Warp's current device and the device's
        # current stream switched to the call's (see `_CALLABLE_LOCK`), as Warp's bridge serialises its callables.
        with _CALLABLE_LOCK:
            if self.warm:
                self._run(frame)
                return
            # The function's first run builds and loads the Warp modules of the kernels it launches
            # (through wp.launch); Warp's building is not thread-safe, so it runs under Warp's lock. The executors'
            # lock comes first (the lock order at `_lock`): a jarp module the function calls prepares its executor
            # under `_lock`, which must not be taken while Warp's lock is held without it (`get_executor`, on another
            # thread, holds `_lock` and waits for Warp's lock).
            with _lock, _warp_internals.warp_lock():
                self._run(frame)
            self.warm = True

    def _run(self, frame: int) -> None:
        plan = self.plan
        ops, res = self.pointers(frame)
        capturing = False
        if self.device.is_cpu:
            # The function's launches without a device= go to Warp's current device: make it the CPU, as Warp's bridge does.
            scope: Any = wp.ScopedDevice(self.device)
            for i, j, nbytes in self.copies:
                if ops[i] != res[j]:
                    _memmove(res[j], ops[i], nbytes)
            for j, nbytes in self.zero:
                _memset(res[j], 0, nbytes)
        else:
            cuda_stream = _xla_ffi.get_stream(frame)
            capturing = _warp_internals.stream_is_capturing(cuda_stream)
            if capturing and not self.warm:
                _check_load_during_capture(plan, self.device, cuda_stream, first_run=True)
            # ScopedStream makes the stream the device's current one and the device Warp's current device.
            scope = wp.ScopedStream(wp.Stream(self.device, cuda_stream=cuda_stream), sync_enter=False)
            for i, j, nbytes in self.copies:
                if ops[i] != res[j]:
                    _warp_internals.cuda_copy(self.device, res[j], ops[i], nbytes, cuda_stream)
            for j, nbytes in self.zero:
                _warp_internals.cuda_memset(self.device, res[j], nbytes, cuda_stream)
        stream = None if self.device.is_cpu else cuda_stream
        with scope:
            if not capturing:
                self._slices(ops, res, stream)
                return
            # XLA is recording this call into a command buffer (a CUDA graph): tell Warp, as its bridge does, so
            # that Warp retains the modules launched during the capture, makes allocations in it graph-safe and
            # refuses what cannot run in a capture (wp.config.verify_cuda's synchronisations).
            with wp.ScopedCapture(external=True) as capture:
                self._slices(ops, res, stream)
            self.capture = capture
            for module in _warp_internals.capture_modules(capture):
                self.captured_modules.setdefault(id(module), module)

    def _slices(self, ops: list[int], res: list[int], stream: int | None) -> None:
        """Call the function once per batch slice on arrays wrapping the slice's buffers."""
        plan = self.plan
        func: Callable[..., Any] = plan.target
        outer = current_call()  # a function may call another jarp callable (run eagerly, on this thread)
        for s in range(self.nslices):
            _current.site = CallSite(self.store, s, stream, self.adjoint)
            args, in_out = [], []
            for param in plan.params:
                b = param.primal
                if b.source == "static":
                    args.append(b.value)
                    continue
                if b.source == "struct":
                    args.append(self._struct(param, ops, res, s))
                    continue
                grad = None
                if self.adjoint and param.adjoint.source != "none":  # none: an operand JAX does not differentiate
                    grad = self._array(param.spec, param.adjoint, ops, res, s)
                args.append(self._array(param.spec, b, ops, res, s, grad))
                if param.spec.in_out:
                    in_out.append(args[-1])
            try:
                self._call(func, args, in_out)
            finally:
                _current.site = outer

    def _call(self, func: Callable[..., Any], args: list[Any], in_out: list[Any]) -> None:
        if not self.adjoint:
            func(*args)
            return
        # The taped forward run writes the in-out arrays (a copy of the caller's values: see `adjoint_plan`), and
        # Warp's backward kernels read their arrays as they are when the tape plays back; put back the values from
        # before the launch first, as a kernel's backward entry point sees them.
        before = [wp.clone(a, requires_grad=False) for a in in_out]
        tape = wp.Tape()
        # The tape keeps the arrays its launches name, but a structure a kernel takes by id (a wp.Mesh the function
        # builds from its input) is a local of the function, freed when it returns: playing the tape back would
        # then read a freed id. Keep every structure the function's frames held until the tape has been played back.
        kept = _StructuresKept()
        previous = sys.getprofile()
        sys.setprofile(kept)
        try:
            with tape:
                func(*args)
        finally:
            sys.setprofile(previous)
        if not getattr(func, "gradients_checked", False):  # a kernel given structures: refused while tracing
            _refuse_dropped_gradients(tape, kept.objects, self.plan.name)
        for a, value in zip(in_out, before, strict=True):
            wp.copy(a, value)
        tape.backward()
        kept.objects.clear()


def _refuse_dropped_gradients(tape: wp.Tape, structures: list[Any], plan_name: str) -> None:
    """Raise where the function built a mesh from a differentiated input and a taped kernel drops a mesh's gradient.

    A mesh built from an array with a gradient buffer (an input JAX differentiates) would get a silent zero from
    Warp's adjoint of such a builtin (`_geometry_adjoints`). Which mesh a kernel queries is not always visible (an
    id in a struct or an array), so any such kernel counts.
    """
    differentiated = {
        f
        for s in structures
        for f in ("points", "velocities")
        if getattr(getattr(s, f, None), "grad", None) is not None
    }
    if not differentiated:
        return
    for kernel, _ in _warp_internals.tape_launches(tape):
        drops = [d for d in _geometry_adjoints.dropped(kernel) if d.field in differentiated]
        if drops:
            field = drops[0].field
            builtins = ", ".join(dict.fromkeys(d.builtin for d in drops if d.field == field))
            raise ValueError(
                f"{plan_name}: the function built a wp.Mesh from a differentiated input, and kernel {kernel.key!r} "
                f"reads a mesh's {field} through {builtins}, whose adjoint in Warp drops the gradient with respect "
                "to them (it would be a silent zero); read the vertices as arrays instead (m = wp.mesh_get(id); "
                "m.points[m.indices[3 * face + k]]), or stop the input's gradient (jax.lax.stop_gradient) if the "
                "dependence is to be ignored."
            )


@dataclasses.dataclass(frozen=True)
class CallSite:
    """Where the function of a callable plan runs now (`current_call`).

    Attributes:
        store: a dict the function may keep state in between calls; it belongs to this (plan, device) and goes
            with it (jarp's geometry keeps the Warp structures it built here).
        slice: the batch slice being run (0 without a batch): under ``vmap`` each slice is its own call.
        stream: the CUDA stream the call runs on (None on the CPU).
        adjoint: whether this is the taped replay of a reverse-mode call.
    """

    store: dict[Any, Any]
    slice: int
    stream: int | None
    adjoint: bool


_current = threading.local()


def current_call() -> CallSite | None:
    """The `CallSite` of the callable plan running on this thread; None outside one."""
    return getattr(_current, "site", None)


class _StructuresKept:
    """A profile function (``sys.setprofile``, this thread only) keeping the Warp structures of returning frames."""

    def __init__(self) -> None:
        self.objects: list[Any] = []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "return":
            return
        for value in (*frame.f_locals.values(), arg):
            if _warp_internals.is_structure(value):
                self.objects.append(value)


def executor_count() -> int:
    """Number of prepared (plan, device) executors, for inspection and tests."""
    return len(executors)


def executor_keys() -> list[tuple[int, int]]:
    """The ``(plan handle, device ordinal)`` of each prepared executor, sorted (``-1``: the CPU)."""
    with _lock:
        return sorted(executors)


_errors.own_frames(__file__)
