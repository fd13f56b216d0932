"""The callable executor: a Python function run on ``wp.array``s wrapping XLA's buffers, one at a time, its
adjoint through a ``wp.Tape``; and `current_call`, the call site a function runs in."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import warp as wp

from .._plan import _dtypes
from .._plan._values import Binding, Param, Plan
from .._upstream import _warp_kernels, _warp_launches, _xla_ffi
from . import _buffer_sizes, _errors, _locks, _native, _struct_bytes
from ._executor_base import Executor, check_load_during_capture, memmove, memset
from ._structure_launches import NativeLaunch, structure_descriptor


class CallableExecutor(Executor):
    """Call a Python function that launches Warp kernels on arrays wrapping XLA's buffers.

    For adjoint plans the function runs under a ``wp.Tape`` with each
    array's ``.grad`` wrapping its adjoint buffer, and the tape is then played back,
    so the launches it recorded accumulate the input cotangents.
    """

    def __init__(self, plan: Plan, device: wp.Device) -> None:
        super().__init__(plan, device)
        # each wp.array `_array` makes must cover its buffer exactly: checked once, before the function ever runs
        _buffer_sizes.check_callable(plan)
        self.warm = False
        # The last capture XLA made of this call (as Warp's bridge keeps it), and every module a capture of it
        # launched: a module rebuilt later is not unloaded while a command buffer XLA still replays calls it.
        self.capture: Any = None
        self.captured_modules: dict[int, Any] = {}
        # What a function keeps between calls of this plan on this device (`CallSite.store`): jarp's geometry keeps
        # the Warp structures it built there, so they live exactly as long as a program may call the plan.
        self.store: dict[Any, Any] = {}

    def native_descriptor(self) -> _native.LaunchDescriptor | None:
        """The CPU forward call of a function that builds Warp structures and launches one kernel (a
        `_structure_launches.NativeLaunch`, which the function gives as ``jarp_native_launch()``) as a descriptor
        for the native handler; None, the Python path, for any other function, device or pass."""
        native_launch = getattr(self.plan.target, "jarp_native_launch", None)
        if native_launch is None or not self.device.is_cpu or self.adjoint:
            return None
        launch = native_launch()
        if not isinstance(launch, NativeLaunch):
            return None
        return structure_descriptor(self.plan, launch, self.device, self.offsets[0])

    def _array(
        self, spec: Any, binding: Binding, ops: Sequence[int], res: Sequence[int], s: int, grad: Any = None
    ) -> Any:
        plan = self.plan
        if binding.source == "operand":
            buf, base = plan.operands[binding.index], ops[binding.index] + self.offsets[0][binding.index][s]
        else:
            buf, base = plan.results[binding.index], res[binding.index] + self.offsets[1][binding.index][s]
        shape = buf.shape[: spec.warp_ndim]
        if grad is None:
            return wp.array(ptr=base, dtype=spec.dtype, shape=shape, device=self.device)
        return wp.array(ptr=base, dtype=spec.dtype, shape=shape, device=self.device, grad=grad, requires_grad=True)

    def _struct(self, param: Param, ops: Sequence[int], res: Sequence[int], s: int) -> Any:
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
        # current stream switched to the call's (see `_locks.callables`), as Warp's bridge serialises its callables.
        with _locks.callables:
            if self.warm:
                self._run(frame)
                return
            # The function's first run builds and loads the Warp modules of the kernels it launches
            # (through wp.launch); Warp's building is not thread-safe, so it runs under Warp's lock. The executors'
            # lock comes first (the lock order: `_upstream._locks.ORDER`): a jarp module the function calls prepares its executor
            # under `_locks.executors`, which must not be taken while Warp's lock is held without it (`get_executor`, on another
            # thread, holds `_locks.executors` and waits for Warp's lock).
            with _locks.executors, _warp_kernels.warp_lock():
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
                    memmove(res[j], ops[i], nbytes)
            for j, nbytes in self.zero:
                memset(res[j], 0, nbytes)
        else:
            cuda_stream = _xla_ffi.get_stream(frame)
            capturing = _warp_launches.stream_is_capturing(cuda_stream)
            if capturing and not self.warm:
                check_load_during_capture(plan, self.device, cuda_stream, first_run=True)
            # ScopedStream makes the stream the device's current one and the device Warp's current device.
            scope = wp.ScopedStream(wp.Stream(self.device, cuda_stream=cuda_stream), sync_enter=False)
            for i, j, nbytes in self.copies:
                if ops[i] != res[j]:
                    _warp_launches.cuda_copy(self.device, res[j], ops[i], nbytes, cuda_stream)
            for j, nbytes in self.zero:
                _warp_launches.cuda_memset(self.device, res[j], nbytes, cuda_stream)
        stream = None if self.device.is_cpu else cuda_stream  # pyright: ignore[reportPossiblyUnboundVariable]  # set off the CPU above
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
            for module in _warp_launches.capture_modules(capture):
                self.captured_modules.setdefault(id(module), module)

    def _slices(self, ops: Sequence[int], res: Sequence[int], stream: int | None) -> None:
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
                    # a composite value (normalised to nested tuples) reaches the function as its Warp type
                    composite = _dtypes.is_composite(param.spec.dtype)
                    args.append(_dtypes.composite_ctype_value(param.spec.dtype, b.value) if composite else b.value)
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
        run: TapedRun = getattr(func, "jarp_taped_run", None) or _taped_run
        kept = run(func, args, tape, self.plan.name)
        for a, value in zip(in_out, before, strict=True):
            wp.copy(a, value)
        tape.backward()
        del kept  # held until the tape has been played back (see `TapedRun`)


class TapedRun(Protocol):
    """How a callable's function runs under the tape of its reverse pass (`set_taped_run`).

    Runs ``func(*args)`` with ``tape`` recording (``name`` names the call in messages) and returns what must stay
    alive until the tape has been played back (the executor holds it until then).
    """

    def __call__(self, func: Callable[..., Any], args: list[Any], tape: wp.Tape, name: str) -> object: ...


def plain_taped_run(func: Callable[..., Any], args: list[Any], tape: wp.Tape, name: str) -> object:
    """Run ``func(*args)`` under ``tape``: what a taped run is when no feature asks for more."""
    with tape:
        func(*args)
    return None


_taped_run: TapedRun = plain_taped_run


def set_taped_run(run: TapedRun) -> None:
    """Install how a callable's function runs under the tape of its reverse pass.

    The hook of the features above the stages that must see what a function does while it is taped (the geometry
    package keeps the Warp structures the function builds alive until the tape is played back, and refuses their
    dropped gradients), so that this stage imports none of them. A launcher that knows better (a call given jarp's
    structures) brings its own as its ``jarp_taped_run`` attribute.
    """
    global _taped_run
    _taped_run = run


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


_errors.own_frames(__file__)
