"""The XLA FFI bridge: one target per platform and the lean callback behind it.

XLA calls `_callback` with a raw call frame. The callback reads the plan handle
(the only attribute), looks up a per-(plan, device) executor that was prepared
once, writes the buffer pointers into a copy of a pre-filled argument block and
calls the kernel's compiled entry point directly. There is no lock around
execution: each call fills its own argument block, so threads (pmap, several
Python threads driving one executable) run concurrently. Errors become XLA FFI
errors, which JAX raises as Python exceptions at the call site.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
import sys
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import warp as wp

from . import _dtypes, _internals, _struct_layout, _xla_ffi
from ._fp_env import default_fp_env
from ._plans import Binding, Plan, Runs, registry

TARGET = "jarp_warp_call"
# A per-process token lowered next to each plan handle (see _primitive._lowering). XLA passes attributes
# sorted by name, so "plan" stays the first one, which is all the callback reads.
SESSION = np.int64(int.from_bytes(os.urandom(8), "little") >> 1)
TARGET_NO_GRAPH = "jarp_warp_call_no_graph"
_PLATFORMS = ("cpu", "CUDA")

_register_lock = threading.Lock()
_registered = False
_keepalive: list[Any] = []

_executors: dict[tuple[int, int], _Executor] = {}
_cpu_executors: dict[int, _Executor] = {}  # the CPU hot path: keyed by handle alone
_executors_lock = threading.Lock()

_CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_ENTRY_FORWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_ENTRY_BACKWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_memset = ctypes.memset
# Reading raw memory through ctypes objects costs ~0.4 us a value, and iterating a ctypes
# pointer array ~1.7 us; unpacking with ``struct`` from a view of the whole address space
# costs ~0.2 us. The view is never indexed outside addresses XLA hands to the callback.
_MEM = memoryview((ctypes.c_char * sys.maxsize).from_address(0)).cast("B")
_U64 = struct.Struct("<Q").unpack_from
_I64 = struct.Struct("<q").unpack_from
_FRAME_EXTENSION = _xla_ffi.FRAME_EXTENSION
_FRAME_ATTRS = _xla_ffi.FRAME_ATTRS
_FRAME_ARGS = _xla_ffi.FRAME_ARGS
_FRAME_RETS = _xla_ffi.FRAME_RETS
_SCALAR_VALUE = _xla_ffi.SCALAR_VALUE
_BUFFER_DATA = _xla_ffi.BUFFER_DATA
_GRAD_OFFSET = _internals.ArrayStruct.grad.offset


def ensure_registered() -> None:
    """Register jarp's FFI targets with XLA for CPU and CUDA (once per process)."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        _xla_ffi.check_layout()
        for name, graph in ((TARGET, True), (TARGET_NO_GRAPH, False)):
            for platform in _PLATFORMS:
                cb = _CALLBACK_TYPE(lambda frame, p=platform, g=graph: _callback(frame, p, g))
                _keepalive.append(cb)
                capsule = jax.ffi.pycapsule(ctypes.cast(cb, ctypes.c_void_p).value)
                jax.ffi.register_ffi_target(name, capsule, platform=platform)
        _registered = True


def is_registered() -> bool:
    """Whether jarp's FFI targets are registered in this process."""
    return _registered


def _callback(frame: int, platform: str, graph: bool) -> int | None:
    try:
        if _U64(_MEM, frame + _FRAME_EXTENSION)[0] and _xla_ffi.answer_metadata_query(frame, graph):
            return None
        attr = _U64(_MEM, _U64(_MEM, frame + _FRAME_ATTRS)[0])[0]  # the only attribute: the plan handle
        handle = _I64(_MEM, _U64(_MEM, attr + _SCALAR_VALUE)[0])[0]
        if platform == "cpu":
            executor = _cpu_executors.get(handle)
            if executor is None:
                executor = _get_executor((handle, -1), platform)
        else:
            key = (handle, _xla_ffi.get_device_ordinal(frame))
            executor = _executors.get(key)
            if executor is None:
                executor = _get_executor(key, platform)
        executor.run(frame)
        return None
    except BaseException as e:
        return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {type(e).__name__}: {e}")


def _get_executor(key: tuple[int, int], platform: str) -> _Executor:
    with _executors_lock:
        executor = _executors.get(key)
        if executor is None:
            plan = registry.plan(key[0])
            device = wp.get_device("cpu") if platform == "cpu" else wp.get_cuda_device(key[1])
            # Not XLA's flush-to-zero mode: static subnormals are packed as they are, not as 0.
            with default_fp_env():
                if plan.runs is Runs.CALLABLE:
                    executor = _CallableExecutor(plan, device)
                elif device.is_cpu:
                    executor = _CpuKernelExecutor(plan, device)
                else:
                    executor = _CudaKernelExecutor(plan, device)
            _executors[key] = executor
            if key[1] == -1:
                _cpu_executors[key[0]] = executor
    return executor


def _read_ptrs(frame: int, size_offset: int, array_offset: int) -> list[int]:
    """The data pointers of a call frame's argument (or result) buffers."""
    n = _I64(_MEM, frame + size_offset)[0]
    if n == 0:
        return []
    bufs = struct.unpack_from(f"<{n}Q", _MEM, _U64(_MEM, frame + array_offset)[0])
    return [_U64(_MEM, b + _BUFFER_DATA)[0] for b in bufs]


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
    plan: Plan

    def run(self, frame: int) -> None:
        raise NotImplementedError


class _KernelExecutor(_Executor):
    """Shared preparation of a kernel launch: argument blocks and pointer slots."""

    def __init__(self, plan: Plan, device: Any) -> None:
        self.plan = plan
        self.device = device
        kernel = plan.target
        self.adjoint = plan.adjoint
        self.entry = _internals.load_entry_points(kernel, device, plan.block_dim)
        if self.adjoint and not self.entry.backward:
            raise RuntimeError(
                f"kernel {kernel.key!r} has no backward entry point; its module was built with "
                "enable_backward=False (set wp.config.enable_backward or the module option to True)."
            )
        self.bounds = _internals.launch_bounds(kernel, plan.launch_dims, self.entry.block_dim)
        self.empty = math.prod(plan.launch_dims) == 0
        nslices = math.prod(plan.batch_shape)
        self.nslices = nslices
        op_nbytes = tuple(b.nbytes for b in plan.operands)
        res_nbytes = tuple(b.nbytes for b in plan.results)
        op_offsets = _batch_offsets(plan, op_nbytes, plan.operand_batch)
        res_offsets = _batch_offsets(plan, res_nbytes, tuple((True,) * len(plan.batch_shape) for _ in plan.results))
        self.zero = [(j, res_nbytes[j] * nslices) for j in plan.zero_results if res_nbytes[j]]
        # (block, slot, source, index, per-slice offsets) for every pointer to patch per call
        self.slots: list[tuple[int, int, int, int, list[int]]] = []
        offsets = (op_offsets, res_offsets)
        blocks = [self._block(0, offsets)]
        if self.adjoint:
            blocks.append(self._block(1, offsets))
        self.blocks = blocks

    def _block(self, block: int, offsets: tuple[list[list[int]], list[list[int]]]) -> Any:
        """The ctypes argument block ``block`` (0: primal values, 1: adjoints) and its pointer slots."""
        plan = self.plan
        buffers = (plan.operands, plan.results)
        fields, values = [], []
        # (parameter name, byte offset in the parameter, source, buffer index) of each pointer
        pointers: list[tuple[str, int, int, int]] = []
        for param in plan.params:
            spec = param.spec
            binding = param.primal if block == 0 else param.adjoint
            if spec.is_struct:
                layout = spec.struct
                src = 0 if block == 0 else 1
                shapes = [buffers[src][i].shape for i in binding.fields]
                if block == 0:
                    raw = _struct_layout.struct_bytes(layout, shapes, binding.value)
                else:
                    raw = _struct_layout.adjoint_struct_bytes(layout, shapes)
                fields.append((spec.name, layout.ctype))
                values.append(layout.ctype.from_buffer_copy(raw))
                slots = _struct_layout.pointer_slots(layout)
                pointers.extend((spec.name, off, src, i) for off, i in zip(slots, binding.fields, strict=True))
                if block == 0 and self.adjoint:
                    # Warp's backward code accumulates a struct field's gradient through the grad
                    # pointer of the primal struct (as wp.Tape sets it), not through the adjoint struct.
                    grads = _struct_layout.grad_pointer_slots(layout)
                    pointers.extend((spec.name, off, 1, i) for off, i in zip(grads, param.adjoint.fields, strict=True))
            elif spec.is_array:
                src = 0 if binding.source == "operand" else 1
                buf = buffers[src][binding.index]
                element_bytes = buf.dtype.itemsize * math.prod(spec.inner_shape)
                arr = _internals.contiguous_array(spec.warp_ndim, buf.shape[: spec.warp_ndim], element_bytes)
                fields.append((spec.name, _internals.ArrayStruct))
                values.append(arr)
                pointers.append((spec.name, 0, src, binding.index))  # array_t.data is its first field
                grad = param.adjoint
                if block == 0 and self.adjoint and grad.source in ("operand", "result"):
                    # As under wp.Tape, the primal array carries its adjoint buffer as its gradient: Warp's
                    # adjoints of array views (``a[i]``, ``wp.view``) and of tile loads accumulate through it.
                    pointers.append((spec.name, _GRAD_OFFSET, 0 if grad.source == "operand" else 1, grad.index))
            else:
                fields.append((spec.name, wp.types.type_ctype(spec.dtype)))
                values.append(_dtypes.ctype_value(spec.dtype, binding.value if binding.source == "static" else 0))
        struct_type = type("ArgBlock", (ctypes.Structure,), {"_fields_": fields})
        template = struct_type(*values)
        for name, offset, src, index in pointers:
            address = getattr(struct_type, name).offset + offset
            assert address % 8 == 0, "pointer slots are 8-byte aligned"
            self.slots.append((block, address // 8, src, index, offsets[src][index]))
        nwords = (ctypes.sizeof(struct_type) + 7) // 8
        words = ctypes.c_uint64 * nwords
        raw = bytes(template) + b"\0" * (nwords * 8 - ctypes.sizeof(struct_type))
        return words, raw, template


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
        self.bounds_addr = ctypes.addressof(self.bounds)
        # (word in the argument block, 0/1 for the frame's argument/result array, byte offset of the buffer in it)
        self.fast = None
        if self.nslices == 1 and len(self.blocks) == 1:
            self.fast = [(slot, src, 8 * index) for _, slot, src, index, _ in self.slots]
            self.words0, self.raw0 = self.blocks[0][0], self.blocks[0][1]
        self.zero_at = [(8 * j, nbytes) for j, nbytes in self.zero]

    def run(self, frame: int) -> None:
        mem = _MEM
        bases = (_U64(mem, frame + _FRAME_ARGS)[0], _U64(mem, frame + _FRAME_RETS)[0])
        for off, nbytes in self.zero_at:
            _memset(_U64(mem, _U64(mem, bases[1] + off)[0] + _BUFFER_DATA)[0], 0, nbytes)
        if self.empty:
            return
        if self.cooperative:
            _internals.cpu_block_error()  # clear a stale record
        if self.fast is not None:  # one slice, forward: the common case, kept lean
            block = self.words0.from_buffer_copy(self.raw0)
            for slot, src, off in self.fast:
                block[slot] = _U64(mem, _U64(mem, bases[src] + off)[0] + _BUFFER_DATA)[0]
            self.fn(self.bounds_addr, block)
            if self.cooperative:
                self._raise_block_error()
            return
        ptrs = (
            _read_ptrs(frame, _xla_ffi.FRAME_ARGS_SIZE, _FRAME_ARGS),
            _read_ptrs(frame, _xla_ffi.FRAME_RETS_SIZE, _FRAME_RETS),
        )
        blocks = [words.from_buffer_copy(raw) for words, raw, _ in self.blocks]
        fn, bounds = self.fn, self.bounds_addr
        for s in range(self.nslices):
            for block, slot, src, index, offs in self.slots:
                blocks[block][slot] = ptrs[src][index] + offs[s]
            fn(bounds, *blocks)
            if self.cooperative:
                self._raise_block_error()

    def _raise_block_error(self) -> None:
        message = _internals.cpu_block_error()
        if message:
            raise RuntimeError(f"Error launching kernel '{self.plan.target.key}' on device 'cpu': {message}")


class _CudaKernelExecutor(_KernelExecutor):
    def run(self, frame: int) -> None:
        stream = _xla_ffi.get_stream(frame)
        ptrs = (
            _read_ptrs(frame, _xla_ffi.FRAME_ARGS_SIZE, _xla_ffi.FRAME_ARGS),
            _read_ptrs(frame, _xla_ffi.FRAME_RETS_SIZE, _xla_ffi.FRAME_RETS),
        )
        for j, nbytes in self.zero:
            _internals.cuda_memset(self.device, ptrs[1][j], nbytes, stream)
        if self.empty:
            return
        structs = [type(t).from_buffer_copy(raw[: ctypes.sizeof(t)]) for _, raw, t in self.blocks]
        # cuLaunchKernel takes one pointer per parameter (launch bounds, then every field of the
        # argument block(s)); it copies the values at launch, so the blocks can be patched per slice.
        addresses = [ctypes.addressof(self.bounds)]
        for st in structs:
            base = ctypes.addressof(st)
            addresses.extend(base + getattr(type(st), name).offset for name, _ in st._fields_)
        addrs = (ctypes.c_void_p * len(addresses))(*addresses)
        for s in range(self.nslices):
            for block, slot, src, index, offs in self.slots:
                ctypes.c_uint64.from_buffer(structs[block], slot * 8).value = ptrs[src][index] + offs[s]
            _internals.cuda_launch(self.plan.target, self.entry, self.bounds, addrs, stream, self.adjoint)


class _CallableExecutor(_Executor):
    """Call a Python function that launches Warp kernels on arrays wrapping XLA's buffers.

    For adjoint plans the function runs under a ``wp.Tape`` with each
    array's ``.grad`` wrapping its adjoint buffer, and the tape is then played back,
    so the launches it recorded accumulate the input cotangents.
    """

    def __init__(self, plan: Plan, device: Any) -> None:
        self.plan = plan
        self.device = device
        self.adjoint = plan.adjoint
        self.nslices = math.prod(plan.batch_shape)
        res_nbytes = tuple(b.nbytes for b in plan.results)
        self.zero = [(j, res_nbytes[j] * self.nslices) for j in plan.zero_results if res_nbytes[j]]
        self.op_offsets = _batch_offsets(plan, tuple(b.nbytes for b in plan.operands), plan.operand_batch)
        self.res_offsets = _batch_offsets(
            plan, res_nbytes, tuple((True,) * len(plan.batch_shape) for _ in plan.results)
        )

    def _array(self, spec: Any, binding: Binding, ops: list[int], res: list[int], s: int, grad: Any = None) -> Any:
        plan = self.plan
        if binding.source == "operand":
            buf, base = plan.operands[binding.index], ops[binding.index] + self.op_offsets[binding.index][s]
        else:
            buf, base = plan.results[binding.index], res[binding.index] + self.res_offsets[binding.index][s]
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
            if self.adjoint:
                grad = self._array(leaf, Binding("result", param.adjoint.fields[k]), ops, res, s)
            arrays.append(self._array(leaf, Binding("operand", index), ops, res, s, grad))
        return _struct_layout.make_struct_instance(layout.struct_type, layout, arrays, param.primal.value)

    def run(self, frame: int) -> None:
        plan = self.plan
        ops = _read_ptrs(frame, _xla_ffi.FRAME_ARGS_SIZE, _xla_ffi.FRAME_ARGS)
        res = _read_ptrs(frame, _xla_ffi.FRAME_RETS_SIZE, _xla_ffi.FRAME_RETS)
        if self.device.is_cpu:
            stream = None
            for j, nbytes in self.zero:
                _memset(res[j], 0, nbytes)
        else:
            stream = wp.Stream(self.device, cuda_stream=_xla_ffi.get_stream(frame))
            for j, nbytes in self.zero:
                _internals.cuda_memset(self.device, res[j], nbytes, stream.cuda_stream)
        func: Callable[..., Any] = plan.target
        for s in range(self.nslices):
            args = []
            for param in plan.params:
                b = param.primal
                if b.source == "static":
                    args.append(b.value)
                    continue
                if b.source == "struct":
                    args.append(self._struct(param, ops, res, s))
                    continue
                grad = None
                if self.adjoint:
                    grad = self._array(param.spec, param.adjoint, ops, res, s)
                args.append(self._array(param.spec, b, ops, res, s, grad))
            if stream is None:
                self._call(func, args)
            else:
                with wp.ScopedStream(stream, sync_enter=False):
                    self._call(func, args)

    def _call(self, func: Callable[..., Any], args: list[Any]) -> None:
        if not self.adjoint:
            func(*args)
            return
        tape = wp.Tape()
        with tape:
            func(*args)
        tape.backward()


def executor_count() -> int:
    """Number of prepared (plan, device) executors, for inspection and tests."""
    return len(_executors)
