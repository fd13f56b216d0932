"""The XLA FFI bridge: one target per platform and the lean callback behind it.

XLA calls `_callback` with a raw call frame. The callback checks the frame
before it touches any buffer: exactly the attributes ``plan`` and ``session``
(int64 scalars), this process's session token, a handle the registry holds, and
buffers whose number, dtypes and shapes are the plan's; anything else (a
serialised executable from another process, a hand-written
``jax.ffi.ffi_call("jarp_warp_call", ...)``) gets an XLA FFI error naming what
was wrong instead of a crash. It then looks up a per-(plan, device) executor
that was prepared once, writes the buffer pointers into a copy of a pre-filled
argument block and calls the kernel's compiled entry point directly. There is no lock around
execution: each call fills its own argument block, so threads (pmap, several
Python threads driving one executable) run concurrently. Errors become XLA FFI
errors, which JAX raises as Python exceptions at the call site.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import os
import struct
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import warp as wp

from .._plan import _dtypes, _struct_layout
from .._plan._values import Binding, Plan, Runs
from .._upstream import _warp_internals, _xla_ffi
from . import _errors, _native
from ._fp_env import default_fp_env
from ._registry import ReleasedPlanError, registry

TARGET = "jarp_warp_call"
# A per-process token lowered next to each plan handle (see _primitive._lowering). XLA passes attributes
# sorted by name (``XLA_FFI_Attrs`` in xla/ffi/api/c_api.h), so a call jarp lowered has exactly ``plan``
# then ``session``; the callback refuses any other frame, and a token from another process.
SESSION = np.int64(int.from_bytes(os.urandom(8), "little") >> 1)
TARGET_NO_GRAPH = "jarp_warp_call_no_graph"
_PLATFORMS = ("cpu", "CUDA")

_register_lock = threading.Lock()
_registered = False
_keepalive: list[Any] = []
_native_handler: _native.NativeHandler | None = None  # set at registration when the native path is used

_executors: dict[tuple[int, int], _Executor] = {}
_cpu_executors: dict[int, _Executor] = {}  # the CPU hot path: keyed by handle alone
_executors_lock = threading.RLock()  # re-entrant: releasing plans drops executors

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
_GRAD_OFFSET = _warp_internals.ArrayStruct.grad.offset

# The frame checks, as a few ``struct`` reads (each ~0.15 us) on the hot path; the slow readers of
# `_xla_ffi` only explain a mismatch. Every read follows a pointer XLA handed over, and a value is
# only dereferenced as what the frame declares it to be (a scalar's value only after its type says so).
_FRAME_ATTRS_SIZE = _xla_ffi.FRAME_ATTRS_SIZE
_FRAME_ARGS_SIZE = _xla_ffi.FRAME_ARGS_SIZE
_ATTRS = struct.Struct("<qQQQ").unpack_from  # at FRAME_ATTRS_SIZE: size, types, names, values
_COUNTS = struct.Struct("<q8xQ16xq8xQ").unpack_from  # at FRAME_ARGS_SIZE: #args, args, #rets, rets
_BUFFER = struct.Struct("<i4xQqQ").unpack_from  # at BUFFER_DTYPE: dtype, data, rank, dims
_PAIR = struct.Struct("<QQ").unpack_from
_SCALAR = struct.Struct("<i4xQ").unpack_from  # XLA_FFI_Scalar: dtype, value pointer
_BUFFER_DTYPE = _xla_ffi.BUFFER_DTYPE
_TWO_SCALARS = int(_xla_ffi.AttrType.SCALAR) | int(_xla_ffi.AttrType.SCALAR) << 32  # types == [SCALAR, SCALAR]
_S64 = int(_xla_ffi.DataType.S64)
_SESSION_INT = int(SESSION)
_ATTR_NAMES = ("plan", "session")
_checked_names: set[int] = set()  # addresses of attribute name tables `_check_attrs` found to be jarp's
_MAX_CHECKED_NAMES = 4096


class _CallError(Exception):
    """A frame jarp did not make (or that does not match its plan), answered with an XLA FFI error ``code``."""

    def __init__(self, code: _xla_ffi.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# The entry points (and so the loaded Warp code) of dropped kernel executors, kept while their kernel lives:
# an executable JAX still holds without its lease (its C++ dispatch cache, or a launch queued on a CUDA
# stream or captured in a command buffer) may still reach that code, and a released plan is recovered
# while its kernel lives. Keyed weakly by kernel, then by loaded module, so a kernel keeps one entry per build.
_retained: weakref.WeakKeyDictionary[Any, dict[int, _warp_internals.EntryPoints]] = weakref.WeakKeyDictionary()


def _drop_executors(handles: list[int]) -> None:
    """Drop the executors of released plan handles (the registry's release hook).

    This is the one place `_ffi` learns of releases. A dropped kernel executor's loaded code is
    kept in `_retained` until its kernel is collected, so a release never unloads code that
    something still able to call the kernel might run.
    """
    released = set(handles)
    with _executors_lock:
        for key in [k for k in _executors if k[0] in released]:
            executor = _executors.pop(key)
            entry = getattr(executor, "entry", None)
            if entry is not None:
                _retained.setdefault(executor.plan.target, {})[id(entry.module_exec)] = entry
        for handle in released:
            _cpu_executors.pop(handle, None)
        if _native_handler is not None:
            # A later frame naming a released handle finds no descriptor and goes to the Python callback.
            _native_handler.withdraw(handles)


registry.on_release(_drop_executors)


def _drain_at_exit() -> None:
    """At interpreter exit, keep XLA's worker threads out of the Python callback (see `NativeHandler.drain_at_exit`).

    Registered when jarp is imported, so that it runs after the exit hooks of the code that imports jarp (which
    may still call kernels) and before JAX's own (atexit runs the last registered first), all before CPython
    starts finalizing. On the Python path there is nothing to guard with: see docs/multi-device.md.
    """
    if _native_handler is not None:
        _native_handler.drain_at_exit()


atexit.register(_drain_at_exit)


def ensure_registered() -> None:
    """Register jarp's FFI targets with XLA for CPU and CUDA (once per process)."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        _xla_ffi.check_layout()
        global _native_handler
        native = _native.handler()
        callbacks: dict[tuple[str, bool], int] = {}
        for graph in (True, False):
            for platform in _PLATFORMS:
                cb = _CALLBACK_TYPE(lambda frame, p=platform, g=graph: _callback(frame, p, g))
                _keepalive.append(cb)
                callbacks[(platform, graph)] = ctypes.cast(cb, ctypes.c_void_p).value
        if native is not None:
            # The native handler serves prepared kernel plans and passes every other frame to these callbacks.
            native.configure(int(SESSION), callbacks)
            _native_handler = native
        for name, graph in ((TARGET, True), (TARGET_NO_GRAPH, False)):
            for platform in _PLATFORMS:
                address = callbacks[(platform, graph)] if native is None else native.address(platform, graph)
                jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(address), platform=platform)
        _registered = True


def launch_path() -> str:
    """How this process launches kernel plans: ``"native"`` or ``"python (<why>)"`` (after registration)."""
    return _native.status()


def is_registered() -> bool:
    """Whether jarp's FFI targets are registered in this process."""
    return _registered


def _callback(frame: int, platform: str, graph: bool) -> int | None:
    try:
        if _U64(_MEM, frame + _FRAME_EXTENSION)[0] and _xla_ffi.answer_metadata_query(frame, graph):
            return None
        handle = _read_handle(frame)
        if platform == "cpu":
            executor = _cpu_executors.get(handle)  # a hit means a handle the registry holds
            if executor is None:
                executor = _get_executor((handle, -1), platform)
        else:
            key = (handle, _xla_ffi.get_device_ordinal(frame))
            executor = _executors.get(key)
            if executor is None:
                executor = _get_executor(key, platform)
        executor.run(frame)
        return None
    except _CallError as e:
        return _xla_ffi.create_error(frame, e.code, f"{TARGET if graph else TARGET_NO_GRAPH}: {e}")
    except BaseException as e:
        try:
            return _errors.ffi_error(frame, e, _name(frame))
        except BaseException:  # never let an exception escape to ctypes: XLA would read garbage as success
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {TARGET} failed")


def _name(frame: int) -> str:
    """How a message names the module behind a call frame: its plan's name, else the target's."""
    try:
        for name, kind, value in _xla_ffi.read_attrs(frame + _xla_ffi.FRAME_ATTRS_STRUCT):
            if name == "plan" and kind == _xla_ffi.AttrType.SCALAR:
                code, ptr = _xla_ffi.read_scalar(value)
                handle = ctypes.c_int64.from_address(ptr).value
                if code == _xla_ffi.DataType.S64:
                    return registry.plan(handle).name or f"{TARGET} (plan {handle})"  # ReleasedPlanError: below
    except Exception:
        pass
    return TARGET


def _read_handle(frame: int) -> int:
    """The plan handle of a frame whose attributes are exactly jarp's; raise `_CallError` otherwise.

    Per call it reads the attribute count and types, both scalars' dtypes and values and compares the token:
    six reads, each dereferencing only what the frame declares. The names are compared by `_check_attrs`
    the first time a name table is seen; XLA keeps a call site's attributes (names included) for the life
    of its executable, and a later table at a reused address still has to carry two int64 scalars with
    this process's token to pass.
    """
    mem = _MEM
    n, types, names, values = _ATTRS(mem, frame + _FRAME_ATTRS_SIZE)
    if n == 2 and _U64(mem, types)[0] == _TWO_SCALARS and names in _checked_names:
        plan_attr, session_attr = _PAIR(mem, values)
        plan_type, plan_value = _SCALAR(mem, plan_attr)
        session_type, session_value = _SCALAR(mem, session_attr)
        if plan_type == _S64 and session_type == _S64 and _I64(mem, session_value)[0] == _SESSION_INT:
            return _I64(mem, plan_value)[0]
    return _check_attrs(frame, names)


def _check_attrs(frame: int, names: int) -> int:
    """Check a frame's attributes in full (read as the types they declare); return the handle or raise `_CallError`."""
    attrs = _xla_ffi.describe_attrs(frame)
    invalid = _xla_ffi.ErrorCode.INVALID_ARGUMENT
    got = ", ".join(f"{name}: {kind}" + ("" if value is None else f" {value!r}") for name, kind, value in attrs)
    found = tuple(name for name, _, _ in attrs)
    if found != _ATTR_NAMES:
        wrong = [f"attribute {n!r} is missing" for n in _ATTR_NAMES if n not in found]
        wrong += [f"attribute {n!r} is not one of them" for n in found if n not in _ATTR_NAMES]
        raise _CallError(
            invalid,
            f"expects exactly the attributes plan and session (int64 scalars, as jarp lowers its calls); "
            f"{'; '.join(wrong) or 'an attribute is repeated'} (got {got or 'no attributes'}). The target is "
            "jarp's own: call kernels through jarp.warp.jax_kernel or jax_callable, not jax.ffi.ffi_call.",
        )
    for name, kind, value in attrs:
        if kind != "int64":
            raise _CallError(
                invalid,
                f"attribute {name!r} must be an int64 scalar, got {kind}" + ("" if value is None else f" {value!r}"),
            )
    (_, _, handle), (_, _, session) = attrs
    if session != _SESSION_INT:
        raise _CallError(
            _xla_ffi.ErrorCode.FAILED_PRECONDITION,
            "this executable was compiled in another process (session token mismatch); recompile it in this "
            "process (or, for a hand-written call, do not call jarp's target directly). Plan handles index a "
            "per-process registry, so a compiled jarp call cannot be serialised and loaded elsewhere.",
        )
    with _executors_lock:
        if len(_checked_names) >= _MAX_CHECKED_NAMES:
            _checked_names.clear()
        _checked_names.add(names)
    return handle


def _get_executor(key: tuple[int, int], platform: str) -> _Executor:
    with _executors_lock, _warp_internals.warp_lock():  # an executor loads the kernel's module
        executor = _executors.get(key)
        if executor is None:
            plan = _plan(key[0])
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
            if _native_handler is not None and isinstance(executor, _KernelExecutor):
                descriptor = executor.describe()
                if descriptor is not None:
                    slot = 0 if key[1] == -1 else 1 + key[1]
                    _native_handler.publish(key[0], slot, descriptor)
    return executor


def _plan(handle: int) -> Plan:
    """The plan behind ``handle``; `_CallError` if this process never made it or released it.

    A handle never made is ``INVALID_ARGUMENT``; one released (no executable lowered with it alive,
    and its kernel or function collected) is ``FAILED_PRECONDITION``.
    """
    try:
        return registry.plan(handle)
    except ReleasedPlanError as e:
        code = _xla_ffi.ErrorCode.FAILED_PRECONDITION if e.released else _xla_ffi.ErrorCode.INVALID_ARGUMENT
        raise _CallError(code, str(e)) from None


class _FrameBuffers:
    """What a plan expects of a call's buffers: `pointers` checks a frame against it and returns the data pointers.

    The number of argument and result buffers, each one's dtype, rank and dims (batch dims included) must
    be the plan's exactly, so a kernel never reads or writes past a buffer XLA allocated.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        ops = [(b.dtype, plan.operand_shape(i)) for i, b in enumerate(plan.operands)]
        res = [(b.dtype, plan.result_shape(j)) for j, b in enumerate(plan.results)]
        self.shapes = (ops, res)
        self.nops, self.nres = len(ops), len(res)
        self.pointers = self._compile()

    def _compile(self) -> Callable[[int], tuple[tuple[int, ...], tuple[int, ...]]]:
        """Generate `pointers` for this plan's buffers, unrolled.

        A Python loop over the buffers costs more than the reads themselves (~0.7 us against ~0.15 us a
        read), so each buffer gets straight-line code: one read of its dtype, data, rank and dims pointer,
        one of its dims (none for a scalar), compared with constants. Only integers from the plan enter the
        generated source.
        """
        # `fail` reaches this object weakly: a bound method in the generated function's globals would make
        # a reference cycle, and a dropped executor would keep its plan (and kernel) until the next gc.
        this = weakref.ref(self)

        def fail(frame: int, side: int, index: int) -> None:
            buffers = this()
            assert buffers is not None, "the executor calling `pointers` holds its _FrameBuffers"
            buffers._fail(frame, side, index)

        env: dict[str, Any] = {"_COUNTS": _COUNTS, "_BUFFER": _BUFFER, "_MEM": _MEM, "fail": fail}
        lines = [
            "def pointers(frame):",
            f"    nargs, args, nrets, rets = _COUNTS(_MEM, frame + {_FRAME_ARGS_SIZE})",
            f"    if nargs != {self.nops} or nrets != {self.nres}:",
            "        fail(frame, -1, -1)",
        ]
        returns = []
        for side, (table, buffers) in enumerate((("args", self.shapes[0]), ("rets", self.shapes[1]))):
            if not buffers:
                returns.append("()")
                continue
            env[f"table{side}"] = struct.Struct(f"<{len(buffers)}Q").unpack_from
            lines.append(f"    {''.join(f'b{side}_{i}, ' for i in range(len(buffers)))}= table{side}(_MEM, {table})")
            for i, (dtype, shape) in enumerate(buffers):
                lines.append(f"    dtype, p{side}_{i}, rank, dims = _BUFFER(_MEM, b{side}_{i} + {_BUFFER_DTYPE})")
                check = f"dtype != {_xla_ffi.dtype_code(dtype)} or rank != {len(shape)}"
                if shape:
                    env[f"dims{side}_{i}"] = struct.Struct(f"<{len(shape)}q").unpack_from
                    check += f" or dims{side}_{i}(_MEM, dims) != {tuple(int(n) for n in shape)!r}"
                lines += [f"    if {check}:", f"        fail(frame, {side}, {i})"]
            returns.append(f"({''.join(f'p{side}_{i}, ' for i in range(len(buffers)))})")
        lines.append(f"    return {returns[0]}, {returns[1]}")
        exec("\n".join(lines), env)  # the source is built above from integers only
        return env["pointers"]

    def _fail(self, frame: int, side: int, index: int) -> None:
        """Raise the `_CallError` for a frame whose buffer counts (``side == -1``) or buffer ``index`` mismatch."""
        if side < 0:
            nargs = _I64(_MEM, frame + _FRAME_ARGS_SIZE)[0]
            nrets = _I64(_MEM, frame + _xla_ffi.FRAME_RETS_SIZE)[0]
            raise self._count_error(nargs, nrets)
        raise self._buffer_error(frame, side, index)

    def _count_error(self, nargs: int, nrets: int) -> _CallError:
        def count(n: int, what: str) -> str:
            return f"{n} {what}" + ("" if n == 1 else "s")

        return _CallError(
            _xla_ffi.ErrorCode.INVALID_ARGUMENT,
            f"{self._name()} expects {count(self.nops, 'operand')} and {count(self.nres, 'result')}, the call "
            f"passes {count(nargs, 'operand')} and {count(nrets, 'result')}.",
        )

    def _buffer_error(self, frame: int, side: int, i: int) -> _CallError:
        code, _, dims = _xla_ffi.read_buffers(frame, results=bool(side))[i]
        dtype, shape = self.shapes[side][i]
        what = ("operand", "result")[side]
        return _CallError(
            _xla_ffi.ErrorCode.INVALID_ARGUMENT,
            f"{what} {i} of {self._name()} is {_xla_ffi.dtype_name(code)}{list(dims)}, the plan expects "
            f"{np.dtype(dtype).name}{list(shape)}.",
        )

    def _name(self) -> str:
        return f"{self.plan.label} {self.plan.name!r}" if self.plan.name else self.plan.label


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
        self.buffers = _FrameBuffers(plan)
        self.pointers = self.buffers.pointers
        kernel = plan.target
        self.adjoint = plan.adjoint
        self.entry = _warp_internals.load_entry_points(kernel, device, plan.block_dim)
        if self.adjoint and not self.entry.backward:
            raise RuntimeError(
                f"kernel {kernel.key!r} has no backward entry point; its module was built with "
                "enable_backward=False (set wp.config.enable_backward or the module option to True)."
            )
        self.bounds = _warp_internals.launch_bounds(kernel, plan.launch_dims, self.entry.block_dim)
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
                arr = _warp_internals.contiguous_array(spec.warp_ndim, buf.shape[: spec.warp_ndim], element_bytes)
                fields.append((spec.name, _warp_internals.ArrayStruct))
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

    def describe(self) -> _native.LaunchDescriptor | None:
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
            failure=f"jarp: Warp failed to launch kernel {self.plan.target.key!r} on {self.device} (native launch)",
            keep=(self.entry, self.bounds),  # the code and the launch bounds the addresses point into (not the plan)
        )

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
        self.bounds_addr = ctypes.addressof(self.bounds)
        # (word in the argument block, 0/1 for the frame's argument/result array, byte offset of the buffer in it)
        self.fast = None
        if self.nslices == 1 and len(self.blocks) == 1:
            self.fast = [(slot, src, index) for _, slot, src, index, _ in self.slots]
            self.words0, self.raw0 = self.blocks[0][0], self.blocks[0][1]

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
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

    def describe(self) -> _native.LaunchDescriptor | None:
        # Cooperative blocks record errors the Python path reports after each launch.
        return None if self.cooperative else super().describe()

    def _raise_block_error(self) -> None:
        message = _warp_internals.cpu_block_error()
        if message:
            raise RuntimeError(f"Error launching kernel '{self.plan.target.key}' on device 'cpu': {message}")


class _CudaKernelExecutor(_KernelExecutor):
    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        if not self.empty:  # as wp.launch checks the grid before it launches (once here: the dims are the plan's)
            _warp_internals.check_cuda_grid(plan.target, self.entry, int(self.bounds.size))

    def _cuda_launch(self) -> tuple[int, int, int, int, int, int, list[tuple[int, int]]] | None:
        # The same parameters, in the same order, as `run` passes through `_warp_internals.cuda_launch`.
        params = [(2, 0)]  # the launch bounds
        for block, (_, _, template) in enumerate(self.blocks):
            params.extend((block, getattr(type(template), name).offset) for name, _ in template._fields_)
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
        for j, nbytes in self.zero:
            _warp_internals.cuda_memset(self.device, ptrs[1][j], nbytes, stream)
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
            _warp_internals.cuda_launch(self.plan.target, self.entry, self.bounds, addrs, stream, self.adjoint)


class _CallableExecutor(_Executor):
    """Call a Python function that launches Warp kernels on arrays wrapping XLA's buffers.

    For adjoint plans the function runs under a ``wp.Tape`` with each
    array's ``.grad`` wrapping its adjoint buffer, and the tape is then played back,
    so the launches it recorded accumulate the input cotangents.
    """

    def __init__(self, plan: Plan, device: Any) -> None:
        self.plan = plan
        self.device = device
        self.buffers = _FrameBuffers(plan)
        self.pointers = self.buffers.pointers
        self.adjoint = plan.adjoint
        self.nslices = math.prod(plan.batch_shape)
        res_nbytes = tuple(b.nbytes for b in plan.results)
        self.zero = [(j, res_nbytes[j] * self.nslices) for j in plan.zero_results if res_nbytes[j]]
        self.op_offsets = _batch_offsets(plan, tuple(b.nbytes for b in plan.operands), plan.operand_batch)
        self.res_offsets = _batch_offsets(
            plan, res_nbytes, tuple((True,) * len(plan.batch_shape) for _ in plan.results)
        )
        self.warm = False

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
        if self.warm:
            self._run(frame)
            return
        # The function's first run builds and loads the Warp modules of the kernels it launches
        # (through wp.launch); Warp's building is not thread-safe, so it runs under Warp's lock.
        with _warp_internals.warp_lock():
            self._run(frame)
        self.warm = True

    def _run(self, frame: int) -> None:
        plan = self.plan
        ops, res = self.pointers(frame)
        if self.device.is_cpu:
            stream = None
            for j, nbytes in self.zero:
                _memset(res[j], 0, nbytes)
        else:
            stream = wp.Stream(self.device, cuda_stream=_xla_ffi.get_stream(frame))
            for j, nbytes in self.zero:
                _warp_internals.cuda_memset(self.device, res[j], nbytes, stream.cuda_stream)
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
