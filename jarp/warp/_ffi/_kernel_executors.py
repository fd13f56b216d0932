"""Kernel executors: a launch of Warp's compiled entry point from a pre-filled argument block, on the CPU (its
batch slices and index ranges on XLA's pool where the race proofs allow) or on CUDA."""

from __future__ import annotations

import ctypes
import math
import warnings
from typing import Any

import numpy as np
import warp as wp

from .._plan import _launch_checks
from .._plan._analysis import _races
from .._plan._values import Plan
from .._upstream import _warp_launches, _xla_ffi
from . import _arg_blocks, _buffer_sizes, _errors, _native, _threads
from ._executor_base import ENTRY_BACKWARD, ENTRY_FORWARD, Executor, memmove, memset
from ._native import _guard, _ranged


class KernelExecutor(Executor):
    """Shared preparation of a kernel launch: argument blocks and pointer slots."""

    def __init__(self, plan: Plan, device: wp.Device) -> None:
        super().__init__(plan, device)
        kernel = plan.target
        self.entry = _warp_launches.load_entry_points(kernel, device, plan.block_dim)
        if self.adjoint and not self.entry.backward:
            raise RuntimeError(
                f"kernel {kernel.key!r} has no backward entry point; its module was built with "
                "enable_backward=False (set wp.config.enable_backward or the module option to True)."
            )
        self.bounds = _warp_launches.launch_bounds(kernel, plan.launch_dims, self.entry.block_dim)
        self.empty = math.prod(plan.launch_dims) == 0
        # (block, slot, source, index, per-slice offsets) for every pointer to patch per call
        self.slots: list[tuple[int, int, int, int, list[int]]] = []
        self.blocks = []
        views = []
        for b in range(2 if self.adjoint else 1):
            # checked: each array covers its buffer (a batch slice of it) exactly, with Warp's element size
            block = _arg_blocks.argument_block(plan, b)
            self.blocks.append((block.words, block.raw, block.template))
            self.slots.extend((b, word, src, index, self.offsets[src][index]) for word, src, index in block.slots)
            views.extend(block.arrays)
        # Both launch paths patch these slots into call buffers whose dtype and dims every call is checked against
        # (`self.buffers`, and the native descriptor made from it): prove each slice's array lies inside them, once,
        # so no launch can reach past a buffer and no call pays for it.
        _buffer_sizes.check_slices(plan, views, [offs for *_, offs in self.slots], self.buffers.shapes)
        # The CUDA parameters (the launch bounds, then every field of the block(s)), as both launch paths pass them.
        self.cuda_params = _arg_blocks.cuda_params([t for _, _, t in self.blocks], self.bounds)
        if plan.code_hash is not None and self.entry.code_hash != plan.code_hash:
            # the build loaded is not the code the plan's verdicts (writes, races, fills) were drawn from
            raise RuntimeError(
                f"{plan.name}: the code of kernel {kernel.key!r} changed after this call was traced (a @wp.func, "
                "constant or struct its code names was rebound or redefined since; Warp's hash of the kernel is "
                f"{str(self.entry.code_hash)[:12]} now, {plan.code_hash[:12]} when it was traced), and jarp launches a "
                "kernel only under the judgements of what it writes, whether its CPU launch may be split and which "
                "outputs it fills that were made for its code. Trace the call again (jax.clear_caches(), or jit a "
                "new function) to judge the new code, or restore what the old code named."
            )

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
            failure=_warp_launches.cuda_launch_failure(self.plan.target, self.entry, self.adjoint),
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


class CpuKernelExecutor(KernelExecutor):
    """Call a CPU entry point directly; with cooperative CPU blocks, report the errors they record as Warp does."""

    def __init__(self, plan: Plan, device: wp.Device) -> None:
        super().__init__(plan, device)
        # With wp.config.enable_cpu_blocks, a block dim above 1 builds a variant whose entry point runs each
        # block's threads as fibers; it records errors (e.g. a fiber stack overflow) instead of aborting.
        self.cooperative = self.entry.block_dim > 1
        if self.adjoint:
            self.fn = ENTRY_BACKWARD(self.entry.backward)
        else:
            self.fn = ENTRY_FORWARD(self.entry.forward)
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

    def prepare_results(self, ptrs: tuple[Any, Any]) -> None:
        """Give the results the state the launch starts from: in-out operands copied in, the fills made."""
        for i, j, nbytes in self.copies:
            if ptrs[0][i] != ptrs[1][j]:
                memmove(ptrs[1][j], ptrs[0][i], nbytes)
        for j, nbytes in self.zero:
            memset(ptrs[1][j], 0, nbytes)

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
        self.prepare_results(ptrs)
        if self.empty:
            return
        if self.cooperative:
            _warp_launches.cpu_block_error()  # clear a stale record
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

    def _guarded(self, bounds: int, *blocks: ctypes.Structure) -> None:
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
        message = _warp_launches.cpu_block_error()
        if message:
            raise RuntimeError(f"Error launching kernel '{self.plan.target.key}' on device 'cpu': {message}")


class CudaKernelExecutor(KernelExecutor):
    def __init__(self, plan: Plan, device: wp.Device) -> None:
        # Also checked at lowering for CUDA (`_jax._lowering`); here too, before any CUDA launch is prepared.
        _launch_checks.check_cuda_signature(plan.target, plan.block_dim, plan.name)
        super().__init__(plan, device)
        if not self.empty:  # as wp.launch checks the grid before it launches (once here: the dims are the plan's)
            _warp_launches.check_cuda_grid(plan.target, self.entry, int(self.bounds.size))

    def _cuda_launch(self) -> tuple[int, int, int, int, int, int, list[tuple[int, int]]] | None:
        # The same parameters, in the same order, as `run` passes through `_warp_launches.cuda_launch`.
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
                _warp_launches.cuda_copy(self.device, ptrs[1][j], ptrs[0][i], nbytes, stream)
        for j, nbytes in self.zero:
            _warp_launches.cuda_memset(self.device, ptrs[1][j], nbytes, stream)
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
            _warp_launches.cuda_launch(self.plan.target, self.entry, self.bounds, addrs, stream, self.adjoint)


_errors.own_frames(__file__)
